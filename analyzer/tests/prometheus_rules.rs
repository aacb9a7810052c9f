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

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use polars::prelude::*;
use tessera::ingest::{self, IngestOptions, Source};

#[path = "support/prometheus.rs"]
mod prom;

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

const DAY_MS: i64 = 86_400_000;

/// The history frames of the simulated day, collected and sorted.
fn simulate(dir: &Path) -> (DataFrame, DataFrame, DataFrame, i64) {
    let scenario = tessera_exporter::sim::Scenario::from_toml(SCENARIO, "rules").expect("scenario");
    let hist = dir.join("history");
    tessera_exporter::history::simulate::simulate(&scenario, 1, &hist, 5_000, 10_000)
        .expect("simulate");
    let since = scenario.start.timestamp_millis();
    let (frames, _) = ingest::ingest(
        &[Source::History(hist.to_string_lossy().into_owned())],
        &IngestOptions {
            since: Some(since),
            until: Some(since + DAY_MS + 1),
            ..IngestOptions::default()
        },
    )
    .expect("ingest history");
    let collect = |lf: LazyFrame| lf.collect().expect("collect");
    (
        collect(frames.gpu),
        collect(frames.mig),
        collect(frames.process),
        since,
    )
}

fn f64s(df: &DataFrame, c: &str) -> Vec<Option<f64>> {
    df.column(c)
        .expect("column")
        .cast(&DataType::Float64)
        .expect("cast")
        .f64()
        .expect("f64")
        .iter()
        .collect()
}

fn strs(df: &DataFrame, c: &str) -> Vec<Option<String>> {
    df.column(c)
        .expect("column")
        .cast(&DataType::String)
        .expect("cast")
        .str()
        .expect("str")
        .iter()
        .map(|s| s.map(str::to_string))
        .collect()
}

/// Appends the gauge `name` of one table: per row two samples, at `ts − 5 s` and `ts`, whose
/// mean and max are the row's (`mean` = `max` for a column with only a max).
fn gauge(out: &mut String, name: &str, df: &DataFrame, label_cols: &[&str], mean: &str, max: &str) {
    let _ = writeln!(out, "# TYPE {name} gauge");
    let labels: Vec<(&str, Vec<Option<String>>)> =
        label_cols.iter().map(|c| (*c, strs(df, c))).collect();
    let (mean, max, ts) = (f64s(df, mean), f64s(df, max), f64s(df, "ts"));
    for i in 0..df.height() {
        let (Some(a), Some(b), Some(t)) = (mean[i], max[i], ts[i]) else {
            continue;
        };
        let mut l = String::from("instance=\"gpu-node-1:19435\"");
        for (c, v) in &labels {
            if let Some(v) = &v[i] {
                let _ = write!(l, ",{c}=\"{v}\"");
            }
        }
        let low = (2.0 * a - b).clamp(0.0, b);
        let _ = writeln!(out, "{name}{{{l}}} {low} {:.3}", (t - 5_000.0) / 1000.0);
        let _ = writeln!(out, "{name}{{{l}}} {b} {:.3}", t / 1000.0);
    }
}

fn openmetrics(gpu: &DataFrame, mig: &DataFrame, process: &DataFrame) -> String {
    let mut s = String::new();
    let g = &["gpu", "uuid"];
    gauge(
        &mut s,
        "tessera_gpu_busy_ratio",
        gpu,
        g,
        "busy_mean",
        "busy_max",
    );
    gauge(
        &mut s,
        "tessera_gpu_sm_active_ratio",
        gpu,
        g,
        "sm_active_mean",
        "sm_active_max",
    );
    for (name, col) in [
        ("tessera_gpu_memory_used_bytes", "memory_used_max_bytes"),
        ("tessera_gpu_memory_total_bytes", "memory_total_bytes"),
        ("tessera_gpu_power_watts", "power_mean_watts"),
    ] {
        gauge(&mut s, name, gpu, g, col, col);
    }
    let m = &["gpu", "uuid", "gpu_instance", "compute_instance", "profile"];
    gauge(
        &mut s,
        "tessera_mig_sm_active_ratio",
        mig,
        m,
        "sm_active_mean",
        "sm_active_max",
    );
    for (name, col) in [
        ("tessera_mig_memory_used_bytes", "memory_used_max_bytes"),
        ("tessera_mig_memory_total_bytes", "memory_total_bytes"),
    ] {
        gauge(&mut s, name, mig, m, col, col);
    }
    let p = &[
        "gpu",
        "uuid",
        "gpu_instance",
        "compute_instance",
        "pid",
        "process",
        "namespace",
        "pod",
    ];
    gauge(
        &mut s,
        "tessera_process_sm_utilization_ratio",
        process,
        p,
        "sm_mean",
        "sm_max",
    );
    gauge(
        &mut s,
        "tessera_process_memory_used_bytes",
        process,
        p,
        "memory_used_max_bytes",
        "memory_used_max_bytes",
    );
    s.push_str("# EOF\n");
    s
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

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
    let (gpu, mig, process, since) = simulate(tmp.path());
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
        &[Source::Prometheus(server.url.clone())],
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
