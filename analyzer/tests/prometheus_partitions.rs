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

use crate::support::openmetrics as om;
use crate::support::prometheus as prom;

use om::{DAY_MS, openmetrics, rfc3339};

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

/// `tessera <cmd> --format json` over the day: (stdout JSON, stderr).
fn tessera(cmd: &str, url: &str, since: i64, extra: &[&str]) -> (serde_json::Value, String) {
    let src = format!("prometheus:{url}");
    let (from, to) = (rfc3339(since), rfc3339(since + DAY_MS));
    let mut args = vec![
        cmd, "--source", &src, "--since", &from, "--until", &to, "--format", "json",
    ];
    args.extend_from_slice(extra);
    let out = crate::support::cli::tessera(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tessera {cmd} failed:\n{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    (doc, stderr)
}

#[test]
fn findings_and_report_are_the_same_by_node_partition() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let (gpu, mig, process, since) = om::simulate(tmp.path(), SCENARIO, "partitions");
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
