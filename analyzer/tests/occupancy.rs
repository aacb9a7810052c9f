//! Occupancy-only data (issue 32): a scheduler's counts and nothing else — GPUs held per node
//! (`kind=node`: `gpus_allocated`, `gpus_total`) or holders per GPU (`kind=gpu`, `holders`) —
//! from `scripts/gen-node-occupancy.py` (3 nodes × 8 GPUs, 15-minute counts for three weeks from
//! and to the middle of an hour, day/night and weekday/weekend pattern with noise), checked
//! against an independent pandas computation of the off-peak profile
//! (`scripts/offpeak_reference.py`, which expands node counts itself); both forms must give the
//! same profile. Bad counts are errors naming the file and line (docs/frames.md, `csv:FILE`).
//!
//! Needs `python3` with pandas (installed by `scripts/test.sh`); fails, never skips, without.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::offpeak_trace::{analyze, assert_same_profile, detector, reference};
use super::support::cli::run;

const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts");

fn dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"))
        .path()
}

/// The trace in `form` (`node` or `gpu`), in a file of its own: tests running at the same time
/// (this file's and `prometheus_occupancy.rs`) never read a file another one is writing.
pub(super) fn trace(form: &str) -> PathBuf {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir().join(format!("occupancy-{form}-{n}.csv"));
    let out = Command::new("python3")
        .arg(format!("{SCRIPTS}/gen-node-occupancy.py"))
        .args(["--form", form, "--out"])
        .arg(&path)
        .output()
        .expect("python3 runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "gen-node-occupancy.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

fn offpeak(doc: &Value) -> &Value {
    &detector(doc, "offpeak_window")["data"]
}

#[test]
fn node_counts_and_per_gpu_holders_give_the_pandas_profile() {
    let mut docs = Vec::new();
    for form in ["node", "gpu"] {
        let csv = trace(form);
        let (doc, err) = analyze(&csv, &["--since", "2026-10-01"]);
        assert!(err.contains("reaches past the data"), "{form}: {err}");
        let want = reference(&csv, "none", "none", "UTC");
        assert_same_profile(&doc, &want, &format!("{form} form"));
        // The answer is not trivial: three weeks (a weekly profile), both edge hours half
        // covered and observed, nights and the weekend off-peak.
        assert_eq!(want["period"], "week");
        assert_eq!(want["observed_hours"], 505);
        assert_eq!(want["gpus_observed"], 24);
        let windows = want["windows"].as_array().unwrap();
        assert!(windows.len() >= 4, "{form}: {windows:?}");
        assert!(
            windows
                .iter()
                .all(|w| w["expected_free_gpus"].as_u64().unwrap() >= 10),
            "{form}: {windows:?}"
        );
        let d = offpeak(&doc);
        assert_eq!(d["gpus_by_allocation_only"], 24, "{form}");
        assert_eq!(d["gpus_without_signal"], 0, "{form}");
        docs.push(doc);
    }
    for key in [
        "profile",
        "baseline",
        "windows",
        "min_gpus",
        "hours_unobserved",
    ] {
        assert_eq!(
            offpeak(&docs[0])[key],
            offpeak(&docs[1])[key],
            "{key}: node counts and per-GPU holders differ"
        );
    }
}

#[test]
fn node_counts_become_one_row_per_gpu() {
    let csv = trace("node");
    let src = format!("csv:{}", csv.display());
    let (code, out, err) = run(&["ingest", "--source", &src, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let gpu = doc["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "gpu")
        .unwrap();
    // 3 nodes × 8 GPUs × 2,016 quarter hours; node0's total, given only at its third count,
    // applies from its first.
    assert_eq!(gpu["entities"], 24);
    assert_eq!(gpu["rows"], 3 * 8 * 2016);
    assert_eq!(gpu["first"], "2026-10-05T10:45:00.000Z");
    assert_eq!(gpu["last"], "2026-10-26T10:30:00.000Z");
    assert_eq!(gpu["null_share"]["memory_used_max_bytes"], 1.0);
    assert_eq!(doc["sampling"][&src]["rows"]["900000"], 3, "{doc}");
}

/// `tessera ingest` over a file of `lines` (after the header): exit code and stderr.
fn ingest(name: &str, lines: &[&str], extra: &[&str]) -> (i32, String, PathBuf) {
    let path = dir().join(name);
    let mut text = String::from("timestamp,entity,metric,value,kind,node,gpu\n");
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    let src = format!("csv:{}", path.display());
    let mut args = vec!["ingest", "--source", &src];
    args.extend_from_slice(extra);
    let (code, _, err) = run(&args);
    (code, err, path)
}

#[test]
fn bad_counts_are_errors_naming_file_and_line() {
    let good = [
        "1793628000,n1,gpus_total,8,node,,",
        "1793628900,n1,gpus_allocated,3,node,,",
        "1793628900,GPU-a,holders,1,gpu,n2,0",
    ];
    let (code, err, _) = ingest("good.csv", &good, &[]);
    assert_eq!(code, 0, "{err}");
    for (name, bad, line, says) in [
        (
            "negative.csv",
            "1793629800,GPU-a,holders,-1,gpu,n2,0",
            5,
            "holders -1: a count of GPUs or holders is a whole number within 0–1024",
        ),
        (
            "fraction.csv",
            "1793629800,GPU-a,holders,0.5,gpu,n2,0",
            5,
            "holders 0.5: a count",
        ),
        (
            "fraction-node.csv",
            "1793629800,n1,gpus_allocated,2.5,node,,",
            5,
            "gpus_allocated 2.5: a count",
        ),
        (
            "mig-over.csv",
            "1793629800,MIG-a,holders,2000,mig,n2,0",
            5,
            "holders 2000: a count",
        ),
        (
            "exceeds.csv",
            "1793629800,n1,gpus_allocated,9,node,,",
            5,
            "node \"n1\": gpus_allocated 9 exceeds gpus_total 8",
        ),
        (
            "no-total.csv",
            "1793629800,n3,gpus_allocated,1,node,,",
            5,
            "node \"n3\" has gpus_allocated but no gpus_total",
        ),
    ] {
        let mut lines = good.to_vec();
        lines.push(bad);
        let (code, err, path) = ingest(name, &lines, &[]);
        assert_eq!(code, 2, "{name}: {err}");
        let want = format!("{}:{line}: ", path.display());
        assert!(err.contains(&want), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
    // A bad count is a bad row: --skip-bad-rows counts it and reads the rest.
    let mut lines = good.to_vec();
    lines.push("1793629800,GPU-a,holders,-1,gpu,n2,0");
    let (code, err, _) = ingest("skipped.csv", &lines, &["--skip-bad-rows"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("skipped 1 bad line(s)"), "{err}");
    // A node given both ways keeps its GPUs' own rows; its counts are ignored, said.
    let mut lines = good.to_vec();
    lines.extend([
        "1793628000,n2,gpus_total,4,node,,",
        "1793628900,n2,gpus_allocated,2,node,,",
    ]);
    let (code, err, path) = ingest("both.csv", &lines, &["--format", "json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("kind=node counts of 1 node(s) ignored (n2)"),
        "{err}"
    );
    let src = format!("csv:{}", path.display());
    let (_, out, _) = run(&["ingest", "--source", &src, "--format", "json"]);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["tables"][0]["table"], "gpu");
    assert_eq!(doc["tables"][0]["entities"], 8 + 1, "n1's 8 and GPU-a");
    // Node metrics elsewhere are named, not taken.
    let (code, err, _) = ingest(
        "other-kind.csv",
        &["1793628900,GPU-a,gpus_allocated,1,gpu,n2,0"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("gpus_allocated is a metric of kind node"),
        "{err}"
    );
}
