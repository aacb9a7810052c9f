//! The advisor's recording rules (`rules/tessera-advisor.rules.yml`) end to end, against a real
//! Prometheus (Debian's 2.42; `/usr/bin/prometheus` and `/usr/bin/promtool` are required — the
//! test fails, not skips, without them; `scripts/test.sh` installs them).
//!
//! A day of a small scenario (H100 GPUs, MIG instances, processes with pods; an idle-loaded model,
//! a diurnal inference service, a training run) is simulated into history and written as
//! tessera-exporter series, two samples per 10-s row (their mean and max are the row's).
//! `promtool tsdb create-blocks-from openmetrics` makes the raw blocks; a Prometheus serves them
//! and `tessera analyze` reads them (raw series, 1-minute rows). Then `promtool tsdb
//! create-blocks-from rules` has that Prometheus evaluate the advisor rules over the day (at the
//! rule group's own evaluation times), the recorded blocks are added, and `tessera analyze`
//! reads the same range again: it must say that it read the recorded series, and give the same
//! findings.

use std::path::Path;
use std::process::Command;

use tessera::ingest::{self, IngestOptions, Source};

use crate::support::openmetrics as om;
use crate::support::prometheus as prom;

use om::{DAY_MS, openmetrics, rfc3339};

const SCENARIO: &str = r#"
name = "rules"
seed = 11
start = "2026-11-02T00:00:00Z"
utc_offset_hours = 0
driver_version = "550.54.15"
cuda_version = "12.4"

[[nodes]]
name = "gpu-node-1"
gpus = [{ model = "H100-80GB", count = 4 }]
mig = [{ gpu = 3, instances = [{ profile = "3g.40gb", start = 0 }, { profile = "3g.40gb", start = 4 }] }]

[[workloads]]
name = "chat-api"
kind = "inference"
node = "gpu-node-1"
gpu = 0
memory_gib = 30.0
peak = 0.7
base = 0.05
namespace = "serving"
pod = "chat-api-7d9f8c-x2k4p"

[[workloads]]
name = "embeddings-forgotten"
kind = "idle"
node = "gpu-node-1"
gpu = 1
memory_gib = 14.5
namespace = "research"
pod = "embed-test-5c8d7-qq9zl"

[[workloads]]
name = "train"
kind = "training"
node = "gpu-node-1"
gpu = 2
memory_gib = 70.0
namespace = "research"
pod = "train-0"

[[workloads]]
name = "rerank-mig"
kind = "inference"
node = "gpu-node-1"
gpu = 3
mig_start = 0
memory_gib = 22.0
peak = 0.5
namespace = "serving"
pod = "rerank-6b5f4-8xw2d"

[[workloads]]
name = "ocr-forgotten"
kind = "idle"
node = "gpu-node-1"
gpu = 3
mig_start = 4
memory_gib = 9.0
namespace = "docs"
pod = "ocr-75d9b-m4k1s"
"#;

/// The history frames of the simulated day, collected and sorted.
/// `tessera analyze --format json` over the day: (findings, stderr).
fn analyze(url: &str, since: i64, extra: &[&str]) -> (Vec<serde_json::Value>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["analyze", "--source", &format!("prometheus:{url}")])
        .args([
            "--since",
            &rfc3339(since),
            "--until",
            &rfc3339(since + DAY_MS),
        ])
        .args(["--format", "json"])
        .args(extra)
        .output()
        .expect("run tessera");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tessera analyze failed:\n{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("findings JSON");
    let mut findings = doc["findings"].as_array().expect("findings").clone();
    findings.sort_by_key(|f| f["id"].as_str().unwrap_or_default().to_string());
    (findings, stderr)
}

#[test]
fn the_advisor_reads_recorded_maxima_and_finds_the_same() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let (gpu, mig, process, since) = om::simulate(tmp.path(), SCENARIO, "rules");
    assert!(mig.height() > 0 && process.height() > 0);
    let server = prom::serve(tmp.path(), &openmetrics(&gpu, &mig, &process));

    // Raw series only: the source says so; 1-minute rows, as the recorded series give.
    let (raw, raw_err) = analyze(&server.url, since, &["--interval", "1m"]);
    assert!(
        raw_err.contains("maxima from the raw series (no recorded series"),
        "{raw_err}"
    );
    let detectors: std::collections::BTreeSet<&str> =
        raw.iter().filter_map(|f| f["detector"].as_str()).collect();
    assert!(detectors.contains("idle_loaded"), "{detectors:?}");
    assert!(raw.len() >= 2, "{raw:#?}");
    // The same through the remote-read API: raw samples reduced here with the same windows.
    let (raw_rr, raw_rr_err) = analyze(
        &server.url,
        since,
        &["--interval", "1m", "--prometheus.api", "remote-read"],
    );
    assert!(
        raw_rr_err.contains("read raw samples through the remote-read API"),
        "{raw_rr_err}"
    );
    assert_eq!(raw, raw_rr, "remote read found otherwise:\n{raw_rr_err}");

    // The rules, evaluated by this Prometheus over the day at their group's own times. The file
    // is named relative to its folder, as a ruler loads it, so the groups' evaluation offsets
    // (a hash of group and file name) are the same on every run.
    let rules_dir = tmp.path().join("rules");
    std::fs::create_dir_all(&rules_dir).expect("rules dir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::copy(
        root.join("rules/tessera-advisor.rules.yml"),
        rules_dir.join("tessera-advisor.rules.yml"),
    )
    .expect("copy rules");
    let recorded = tmp.path().join("recorded");
    let out = Command::new(prom::PROMTOOL)
        .current_dir(&rules_dir)
        .args(["tsdb", "create-blocks-from", "rules"])
        .arg(format!("--url={}", server.url))
        .arg(format!("--start={}", rfc3339(since)))
        .arg(format!("--end={}", rfc3339(since + DAY_MS)))
        .arg(format!("--output-dir={}", recorded.display()))
        .arg("tessera-advisor.rules.yml")
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool tsdb create-blocks-from rules failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    drop(server);
    let tsdb = tmp.path().join("tsdb");
    let mut blocks = 0;
    for e in std::fs::read_dir(&recorded).expect("recorded blocks") {
        let e = e.expect("entry");
        if e.path().join("meta.json").exists() {
            std::fs::rename(e.path(), tsdb.join(e.file_name())).expect("move block");
            blocks += 1;
        }
    }
    assert!(blocks > 0, "promtool wrote no blocks");
    let server = prom::start(tmp.path(), &tsdb);

    // The library's report says which series the maxima came from.
    let (_, report) = ingest::ingest(
        &[Source::prometheus(server.url.clone())],
        &IngestOptions {
            since: Some(since),
            until: Some(since + DAY_MS),
            ..IngestOptions::default()
        },
    )
    .expect("ingest recorded");
    let sampling = report.sampling.values().next().expect("sampling");
    assert!(
        sampling
            .maxima
            .as_deref()
            .is_some_and(|m| m.starts_with("recorded 1-minute series")),
        "{sampling:?}"
    );
    assert_eq!(sampling.rows.keys().copied().collect::<Vec<_>>(), [60_000]);

    let (rec, rec_err) = analyze(&server.url, since, &[]);
    assert!(
        rec_err.contains("maxima from the advisor's recorded series"),
        "{rec_err}"
    );
    for name in [
        "gpu:tessera_gpu_busy_ratio:max1m",
        "gpu:tessera_gpu_sm_active_ratio:max1m",
        "gpu:tessera_gpu_memory_used_bytes:max1m",
        "mig:tessera_mig_sm_active_ratio:max1m",
        "mig:tessera_mig_memory_used_bytes:max1m",
        "process:tessera_process_sm_utilization_ratio:max1m",
        "process:tessera_process_memory_used_bytes:max1m",
    ] {
        assert!(rec_err.contains(name), "{name} not read:\n{rec_err}");
    }
    let key = |f: &serde_json::Value| {
        (
            f["id"].as_str().unwrap_or_default().to_string(),
            f["severity"].as_str().unwrap_or_default().to_string(),
            f["entity"].to_string(),
        )
    };
    assert_eq!(
        raw.iter().map(key).collect::<Vec<_>>(),
        rec.iter().map(key).collect::<Vec<_>>(),
        "findings differ:\nraw: {raw:#?}\nrecorded: {rec:#?}\n{rec_err}"
    );
    // The same evidence, to within the recorded minute's offset: a span's ends may move by one
    // 1-minute row (the recorded minutes end 0–30 s after the rows'), its length by a row.
    for (a, b) in raw.iter().zip(&rec) {
        assert_eq!(a["summary"], b["summary"], "raw {a:#}\nrecorded {b:#}");
        close(&a["evidence"], &b["evidence"], &format!("{}", a["id"]));
    }
    // The recorded maxima through the remote-read API, which `auto` picks on Prometheus: the
    // same findings as through query_range.
    let (rec_rr, rec_rr_err) = analyze(&server.url, since, &["--prometheus.api", "auto"]);
    assert!(
        rec_rr_err.contains("read raw samples through the remote-read API")
            && rec_rr_err.contains("maxima from the advisor's recorded series"),
        "{rec_rr_err}"
    );
    assert_eq!(rec, rec_rr, "remote read found otherwise:\n{rec_rr_err}");
}

/// `a` and `b` agree: numbers within 1% (or 0.02), times within a minute, the rest equal.
fn close(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= (0.01 * x.abs()).max(0.02),
                "{at}: raw {x}, recorded {y}"
            );
        }
        (Value::String(x), Value::String(y)) => {
            match (
                chrono::DateTime::parse_from_rfc3339(x),
                chrono::DateTime::parse_from_rfc3339(y),
            ) {
                (Ok(tx), Ok(ty)) => assert!(
                    (tx - ty).num_milliseconds().abs() <= 60_000,
                    "{at}: raw {x}, recorded {y}"
                ),
                _ => assert_eq!(x, y, "{at}"),
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: raw {a}, recorded {b}");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                close(x, y, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>(),
                "{at}"
            );
            for (k, v) in x {
                close(v, &y[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}
