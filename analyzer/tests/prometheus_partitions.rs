//! The `prometheus:` source by node partition, against a real Prometheus (Debian's 2.42;
//! `/usr/bin/prometheus` and `/usr/bin/promtool` are required — the test fails, not skips,
//! without them; `scripts/test.sh` installs them).
//!
//! A day of a three-node scenario (one node's name has a dot, which a regex matcher must
//! escape) is simulated into history and written as tessera-exporter series, two samples per
//! 10-s row, each node behind its own scrape target (`instance`). `tessera analyze` and
//! `tessera report --format json` read it with the whole fleet in one query
//! (`--prometheus.nodes-per-query 0`), one node per query (the default) and two nodes per
//! query: findings and report must be the same.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use polars::prelude::*;
use tessera::ingest::{self, IngestOptions, Source};

#[path = "support/prometheus.rs"]
mod prom;

const SCENARIO: &str = r#"
name = "partitions"
seed = 5
start = "2026-11-02T00:00:00Z"
utc_offset_hours = 0
driver_version = "550.54.15"
cuda_version = "12.4"

[[nodes]]
name = "gpu-node-1"
gpus = [{ model = "H100-80GB", count = 2 }]

[[nodes]]
name = "gpu-node-2"
gpus = [{ model = "A100-80GB", count = 2 }]
mig = [{ gpu = 1, instances = [{ profile = "3g.40gb", start = 0 }, { profile = "3g.40gb", start = 4 }] }]

[[nodes]]
name = "gpu.node-3"
gpus = [{ model = "H100-80GB", count = 2 }]

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
node = "gpu-node-2"
gpu = 0
memory_gib = 70.0
namespace = "research"
pod = "train-0"

[[workloads]]
name = "rerank-mig"
kind = "inference"
node = "gpu-node-2"
gpu = 1
mig_start = 0
memory_gib = 22.0
peak = 0.5
namespace = "serving"
pod = "rerank-6b5f4-8xw2d"

[[workloads]]
name = "ocr-forgotten"
kind = "idle"
node = "gpu.node-3"
gpu = 0
memory_gib = 9.0
namespace = "docs"
pod = "ocr-75d9b-m4k1s"
"#;

const DAY_MS: i64 = 86_400_000;

fn simulate(dir: &Path) -> (DataFrame, DataFrame, DataFrame, i64) {
    let scenario =
        tessera_exporter::sim::Scenario::from_toml(SCENARIO, "partitions").expect("scenario");
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
/// mean and max are the row's, labelled with the row's node as the scrape target.
fn gauge(out: &mut String, name: &str, df: &DataFrame, label_cols: &[&str], mean: &str, max: &str) {
    let _ = writeln!(out, "# TYPE {name} gauge");
    let labels: Vec<(&str, Vec<Option<String>>)> =
        label_cols.iter().map(|c| (*c, strs(df, c))).collect();
    let nodes = strs(df, "node");
    let (mean, max, ts) = (f64s(df, mean), f64s(df, max), f64s(df, "ts"));
    for i in 0..df.height() {
        let (Some(a), Some(b), Some(t), Some(node)) = (mean[i], max[i], ts[i], &nodes[i]) else {
            continue;
        };
        let mut l = format!("instance=\"{node}:19435\"");
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

/// `tessera <cmd> --format json` over the day: (stdout JSON, stderr).
fn tessera(cmd: &str, url: &str, since: i64, extra: &[&str]) -> (serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([cmd, "--source", &format!("prometheus:{url}")])
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
    assert!(out.status.success(), "tessera {cmd} failed:\n{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    (doc, stderr)
}

#[test]
fn findings_and_report_are_the_same_by_node_partition() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let (gpu, mig, process, since) = simulate(tmp.path());
    assert!(mig.height() > 0 && process.height() > 0);
    let server = prom::serve(tmp.path(), &openmetrics(&gpu, &mig, &process));

    let (one, one_err) = tessera(
        "analyze",
        &server.url,
        since,
        &["--prometheus.nodes-per-query", "0"],
    );
    assert!(
        one_err.contains("queried as one partition (--prometheus.nodes-per-query 0)"),
        "{one_err}"
    );
    let findings = one["findings"].as_array().expect("findings");
    let detectors: std::collections::BTreeSet<&str> = findings
        .iter()
        .filter_map(|f| f["detector"].as_str())
        .collect();
    assert!(detectors.contains("idle_loaded"), "{detectors:?}");
    let nodes: std::collections::BTreeSet<String> = findings
        .iter()
        .filter_map(|f| f["entity"]["node"].as_str().map(str::to_string))
        .collect();
    assert!(nodes.len() >= 2, "findings on several nodes: {nodes:?}");

    for (per, parts) in [("1", 3), ("2", 2)] {
        let (by_node, err) = tessera(
            "analyze",
            &server.url,
            since,
            &[
                "--prometheus.nodes-per-query",
                per,
                "--prometheus.concurrency",
                "2",
            ],
        );
        assert!(
            err.contains(&format!(
                "queried by node: {parts} partition(s) of at most {per} node(s), 2 at once, \
                 each partition's rows spilled to Parquet in the temp folder"
            )),
            "{err}"
        );
        assert_eq!(
            one["findings"], by_node["findings"],
            "findings differ with {per} node(s) per query:\n{err}"
        );
    }

    let (one, _) = tessera(
        "report",
        &server.url,
        since,
        &["--prometheus.nodes-per-query", "0"],
    );
    let (by_node, err) = tessera("report", &server.url, since, &[]);
    assert!(err.contains("queried by node: 3 partition(s)"), "{err}");
    let strip = |mut v: serde_json::Value| {
        // The request counts and the partitioning are said in the data-quality notes.
        if let Some(dq) = v["data_quality"].as_array_mut() {
            dq.retain(|n| {
                let m = n["message"].as_str().unwrap_or_default();
                !m.contains("request(s) for") && !m.contains("queried ")
            });
        }
        v
    };
    assert_eq!(
        strip(one),
        strip(by_node),
        "report differs by node partition"
    );
}
