//! kube-state-metrics' GPU counts through the `prometheus:` source (issue 32), against a real
//! Prometheus (Debian's; the test fails, never skips, without it or without `python3` with
//! pandas).
//!
//! The fleet and truth are `occupancy.rs`'s (`scripts/gen-node-occupancy.py`: 3 nodes × 8 GPUs,
//! 15-minute counts for three weeks). The per-node counts are written as kube-state-metrics
//! would expose them: one pod per run of a GPU slot being held (requests of 1 `nvidia_com_gpu`
//! and a CPU request, on its node), `Running` while held, then `Succeeded` with its requests
//! lingering for an hour (they must not count); a `Pending` pod that requests a GPU and never
//! runs (must not count); each node's allocatable GPUs and CPUs; and a second kube-state-metrics
//! replica duplicating node1's pods and every node's allocatable (must count once). No GPU
//! exporter: the server is occupancy-only. `tessera analyze --source prometheus:URL` must give
//! the same off-peak profile, baseline and windows as the CSV `kind=node` path and as the pandas
//! reference.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::occupancy::trace;
use super::offpeak_trace::{analyze, assert_same_profile, detector, reference};
use crate::support::cli::run;
use crate::support::prometheus as prom;

/// The trace's range: both ends in the middle of an hour.
const SINCE: &str = "2026-10-05T10:30:00Z";
const UNTIL: &str = "2026-10-26T10:30:00Z";

/// Per node (in order): its (time s, GPUs held) counts, and its GPU total.
type Counts = BTreeMap<String, (Vec<(i64, u32)>, u32)>;

fn counts(csv: &std::path::Path) -> Counts {
    let mut out = Counts::new();
    for line in std::fs::read_to_string(csv).unwrap().lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let e = out.entry(f[1].to_string()).or_default();
        match f[2] {
            "gpus_allocated" => e.0.push((f[0].parse().unwrap(), f[3].parse().unwrap())),
            "gpus_total" => e.1 = f[3].parse().unwrap(),
            m => panic!("metric {m}"),
        }
    }
    out
}

/// One series' samples (time s, value), each a line.
fn series(out: &mut String, name: &str, labels: &str, points: impl Iterator<Item = (i64, f64)>) {
    for (t, v) in points {
        let _ = writeln!(out, "{name}{{{labels}}} {v} {t}");
    }
}

/// kube-state-metrics' exposition of the counts (see the module doc).
fn kube_state_metrics(counts: &Counts) -> String {
    const LINGER: usize = 4;
    let (mut req, mut phase, mut alloc) = (String::new(), String::new(), String::new());
    let replicas = |node: &str| {
        if node == "node1" {
            &["ksm-a:8080", "ksm-b:8080"][..]
        } else {
            &["ksm-a:8080"][..]
        }
    };
    for (node, (points, total)) in counts {
        let times: Vec<i64> = points.iter().map(|p| p.0).collect();
        for inst in ["ksm-a:8080", "ksm-b:8080"] {
            for (res, unit, v) in [
                ("nvidia_com_gpu", "integer", *total as f64),
                ("cpu", "core", 64.0),
            ] {
                let l = format!(
                    "instance=\"{inst}\",node=\"{node}\",resource=\"{res}\",unit=\"{unit}\""
                );
                series(
                    &mut alloc,
                    "kube_node_status_allocatable",
                    &l,
                    times.iter().map(|&t| (t, v)),
                );
            }
        }
        for g in 0..*total {
            let mut k = 0;
            let mut i = 0;
            while i < points.len() {
                if points[i].1 <= g {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < points.len() && points[i].1 > g {
                    i += 1;
                }
                let (run, linger) = (start..i, i..(i + LINGER).min(points.len()));
                let pod = format!("{node}-g{g}-{k}");
                let ns = if g % 2 == 0 { "team-a" } else { "team-b" };
                k += 1;
                for inst in replicas(node) {
                    let base = format!(
                        "instance=\"{inst}\",namespace=\"{ns}\",pod=\"{pod}\",uid=\"uid-{pod}\""
                    );
                    let life = || (run.start..linger.end).map(|j| times[j]);
                    for (res, unit, v) in [("nvidia_com_gpu", "integer", 1.0), ("cpu", "core", 4.0)]
                    {
                        let l = format!(
                            "{base},container=\"main\",node=\"{node}\",resource=\"{res}\",unit=\"{unit}\""
                        );
                        series(
                            &mut req,
                            "kube_pod_container_resource_requests",
                            &l,
                            life().map(|t| (t, v)),
                        );
                    }
                    for (p, during, after) in [
                        ("Running", 1.0, 0.0),
                        ("Succeeded", 0.0, 1.0),
                        ("Pending", 0.0, 0.0),
                    ] {
                        let l = format!("{base},phase=\"{p}\"");
                        let v = |j: usize| if run.contains(&j) { during } else { after };
                        series(
                            &mut phase,
                            "kube_pod_status_phase",
                            &l,
                            (run.start..linger.end).map(|j| (times[j], v(j))),
                        );
                    }
                }
            }
        }
        // A pod that requests a GPU on the node's first day and never runs.
        let day: Vec<i64> = times.iter().copied().take(96).collect();
        let base = format!(
            "instance=\"ksm-a:8080\",namespace=\"team-c\",pod=\"{node}-pending\",uid=\"uid-{node}-pending\""
        );
        let l = format!(
            "{base},container=\"main\",node=\"{node}\",resource=\"nvidia_com_gpu\",unit=\"integer\""
        );
        series(
            &mut req,
            "kube_pod_container_resource_requests",
            &l,
            day.iter().map(|&t| (t, 2.0)),
        );
        for (p, v) in [("Pending", 1.0), ("Running", 0.0)] {
            let l = format!("{base},phase=\"{p}\"");
            series(
                &mut phase,
                "kube_pod_status_phase",
                &l,
                day.iter().map(|&t| (t, v)),
            );
        }
    }
    format!(
        "# TYPE kube_pod_container_resource_requests gauge\n{req}\
         # TYPE kube_pod_status_phase gauge\n{phase}\
         # TYPE kube_node_status_allocatable gauge\n{alloc}# EOF\n"
    )
}

fn offpeak(doc: &Value) -> &Value {
    &detector(doc, "offpeak_window")["data"]
}

#[test]
fn kube_state_metrics_counts_give_the_csv_and_pandas_profile() {
    let csv = trace("node");
    let counts = counts(&csv);
    assert_eq!(counts.len(), 3);
    assert!(counts.values().all(|(p, t)| p.len() == 2016 && *t == 8));
    let dir = tempfile::tempdir().unwrap();
    let om = dir.path().join("ksm.om");
    std::fs::write(&om, kube_state_metrics(&counts)).unwrap();
    let server = prom::serve_file(dir.path(), &om, "24h");

    let range = ["--since", SINCE, "--until", UNTIL];
    let (want_doc, _) = analyze(&csv, &range);
    let src = format!("prometheus:{}", server.url);
    let mut args = vec!["analyze", "--source", &src, "--format", "json"];
    args.extend_from_slice(&range);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).expect("analyze JSON");
    assert!(
        err.contains("no GPU exporter's metrics: read only kube-state-metrics' GPUs held"),
        "{err}"
    );
    assert!(err.contains("query step 15 min"), "{err}");

    let want = reference(&csv, "none", "none", "UTC");
    assert_same_profile(&doc, &want, "kube-state-metrics");
    let d = offpeak(&doc);
    assert_eq!(d["gpus_observed"], 24);
    assert_eq!(d["gpus_by_allocation_only"], 24);
    assert_eq!(d["gpus_without_signal"], 0);
    for key in [
        "profile",
        "baseline",
        "windows",
        "min_gpus",
        "hours_unobserved",
    ] {
        assert_eq!(
            d[key],
            offpeak(&want_doc)[key],
            "{key}: kube-state-metrics and CSV node counts differ"
        );
    }

    // The rows themselves: one per GPU and 15 minutes, as the CSV's.
    let (code, out, err) = run(&[
        "ingest", "--source", &src, "--since", SINCE, "--until", UNTIL, "--format", "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let gpu = doc["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "gpu")
        .unwrap();
    assert_eq!(gpu["entities"], 24);
    assert_eq!(gpu["rows"], 3 * 8 * 2016);
    assert_eq!(gpu["null_share"]["memory_used_max_bytes"], 1.0);
}
