//! Off-peak windows and time ranges on data tessera did not write: a three-week occupancy trace
//! of 192 GPUs at 15-minute rows (weekday nights, weekday mornings, a weekend, irregular jobs;
//! no memory column) from `scripts/gen-occupancy.py`, checked against an independent pandas
//! computation of the profile, baseline and windows (`scripts/offpeak_reference.py`), at both
//! range edges, mid-hour, across a fleet-wide gap, with and without `--tz`; and the range rule
//! shared by `analyze` and `report` (docs/frames.md, "Time ranges").
//!
//! Needs `python3` with pandas (installed by `scripts/test.sh`); fails, never skips, without.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use super::support::cli::run;

const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts");
/// The trace's last row ends here (3 weeks from Monday 2026-10-05 00:00 UTC).
const DATA_END: &str = "2026-10-26T00:00:00.000Z";
/// GPUs the generator never loads (of 192).
const NEVER_HELD: u64 = 16;

/// A folder for this test binary's traces, kept until it exits.
fn dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"))
        .path()
}

/// The trace made with `args` (cached by name).
fn trace(name: &str, args: &[&str]) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = dir().join(format!("{name}.csv"));
    if !path.exists() {
        let out = Command::new("python3")
            .arg(format!("{SCRIPTS}/gen-occupancy.py"))
            .args(args)
            .arg("--out")
            .arg(&path)
            .output()
            .expect("python3 runs (scripts/test.sh installs it)");
        assert!(
            out.status.success(),
            "gen-occupancy.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    path
}

/// The independent answer: pandas over the raw CSV.
pub(super) fn reference(csv: &Path, since: &str, until: &str, tz: &str) -> Value {
    let out = Command::new("python3")
        .arg(format!("{SCRIPTS}/offpeak_reference.py"))
        .arg(csv)
        .args(["--since", since, "--until", until, "--tz", tz])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "offpeak_reference.py (needs pandas: scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("reference JSON")
}

/// `tessera analyze --format json` over `csv` with `extra` flags: the document and stderr.
pub(super) fn analyze(csv: &Path, extra: &[&str]) -> (Value, String) {
    let src = format!("csv:{}", csv.display());
    let mut args = vec!["analyze", "--source", &src, "--format", "json"];
    args.extend_from_slice(extra);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    (serde_json::from_str(&out).expect("analyze JSON"), err)
}

pub(super) fn detector<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["detectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id)
        .unwrap_or_else(|| panic!("detector {id} in {doc}"))
}

/// The profile, baseline, K and windows agree with the reference, slot for slot.
pub(super) fn assert_same_profile(doc: &Value, want: &Value, what: &str) {
    let d = &detector(doc, "offpeak_window")["data"];
    assert_eq!(d["period"], want["period"], "{what}: period");
    assert_eq!(d["gpus_observed"], want["gpus_observed"], "{what}");
    assert_eq!(d["min_gpus"], want["k"], "{what}: K");
    assert_eq!(d["baseline"]["gpus"], want["baseline"], "{what}: baseline");
    let got: Vec<(String, u64, u64)> = d["profile"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["slot"].as_str().unwrap().to_string(),
                s["observations"].as_u64().unwrap(),
                s["free_at_p"].as_u64().unwrap(),
            )
        })
        .collect();
    let exp: Vec<(String, u64, u64)> = want["profile"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["label"].as_str().unwrap().to_string(),
                s["observations"].as_u64().unwrap(),
                s["free_at_p"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, exp, "{what}: profile (slot, observations, f)");
    let windows = |v: &Value| -> Vec<(u64, u64, u64)> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["start_slot"].as_u64().unwrap(),
                    w["hours"].as_u64().unwrap(),
                    w["expected_free_gpus"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        windows(&d["windows"]),
        windows(&want["windows"]),
        "{what}: windows"
    );
}

/// The slots of the profile's cycle each window finding covers.
fn finding_slots(doc: &Value, weekly: bool) -> Vec<BTreeSet<usize>> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let n = if weekly { 168 } else { 24 };
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["evidence"]["type"] == "window")
        .map(|f| {
            let e = &f["evidence"];
            let h0: usize = e["start"].as_str().unwrap()[..2].parse().unwrap();
            let hours = e["hours"].as_u64().unwrap() as usize;
            let starts: Vec<usize> = if weekly {
                e["days"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| DAYS.iter().position(|x| d == x).unwrap() * 24 + h0)
                    .collect()
            } else {
                vec![h0]
            };
            starts
                .iter()
                .flat_map(|&s| (s..s + hours).map(move |i| i % n))
                .collect()
        })
        .collect()
}

#[test]
fn weekly_profile_and_windows_match_pandas_and_the_findings_cover_the_off_peak_time() {
    for (name, gen_args) in [
        ("plain", &[][..]),
        ("memory", &["--with-memory"][..]),
        (
            "gap",
            &["--drop-fleet", "2026-10-13T02:00:00Z,45", "--seed", "11"][..],
        ),
    ] {
        let csv = trace(name, gen_args);
        for tz in ["UTC", "Europe/Berlin"] {
            let what = format!("{name} trace, {tz}");
            // The whole trace: from before its start (the range is narrowed to the data).
            let (doc, err) = analyze(&csv, &["--since", "2026-10-01", "--tz", tz]);
            assert!(err.contains("reaches past the data"), "{what}: {err}");
            let want = reference(&csv, "none", "none", tz);
            assert_same_profile(&doc, &want, &what);
            assert_eq!(want["period"], "week");
            assert_eq!(want["baseline"], NEVER_HELD, "{what}");
            let d = &detector(&doc, "offpeak_window")["data"];
            if name == "gap" {
                // The hour with 15 minutes of rows is no observation.
                assert_eq!(d["hours_unobserved"], 1, "{what}");
            }

            // The findings: within the cap, ≥ 90% of the slots with ≥ B + K free, and no two
            // share more than half of the shorter one's hours.
            let (b, k) = (
                want["baseline"].as_u64().unwrap(),
                want["k"].as_u64().unwrap(),
            );
            let hot: BTreeSet<usize> = want["profile"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| {
                    s["observations"].as_u64().unwrap() > 0
                        && s["free_at_p"].as_u64().unwrap() >= b + k
                })
                .map(|s| s["slot"].as_u64().unwrap() as usize)
                .collect();
            assert!(hot.len() > 60, "{what}: {} hot slots", hot.len());
            let found = finding_slots(&doc, true);
            assert!(
                (2..=7).contains(&found.len()),
                "{what}: {} window findings",
                found.len()
            );
            let covered: BTreeSet<usize> = found.iter().flatten().copied().collect();
            let share = hot.intersection(&covered).count() as f64 / hot.len() as f64;
            assert!(
                share >= 0.9,
                "{what}: findings cover {share:.2} of the hot slots"
            );
            for (i, a) in found.iter().enumerate() {
                for c in &found[i + 1..] {
                    let shared = a.intersection(c).count();
                    assert!(
                        2 * shared <= a.len().min(c.len()),
                        "{what}: two findings share {shared} hours"
                    );
                }
            }
            // Counts match: the summary's windows are the findings; every window of the data
            // is a finding or named in a note.
            let summary = detector(&doc, "offpeak_window")["summary"]
                .as_str()
                .unwrap();
            assert!(
                summary.contains(&format!("; {} window(s) of", found.len())),
                "{what}: {summary}"
            );
            for w in d["windows"].as_array().unwrap() {
                let named = w["finding"].is_string()
                    || detector(&doc, "offpeak_window")["notes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|n| n.as_str().unwrap().contains(w["label"].as_str().unwrap()));
                assert!(named, "{what}: window {w} neither a finding nor named");
            }
        }
    }
}

#[test]
fn baselines_are_exact_at_both_edges_of_the_range() {
    let csv = trace("plain", &[]);
    for tz in ["UTC", "Europe/Berlin"] {
        // Default flags: the last 7 days, whose first row's end is exactly the range's start
        // (that row is the range before's).
        let (doc, err) = analyze(&csv, &["--tz", tz]);
        assert!(err.contains("the last 7 days of the data"), "{err}");
        assert!(err.contains("use --since and --until"), "{err}");
        assert_eq!(doc["from"], "2026-10-19T00:00:00.000Z");
        assert_eq!(doc["until"], DATA_END);
        let want = reference(&csv, "2026-10-19T00:00:00Z", "none", tz);
        assert_same_profile(&doc, &want, &format!("last 7 days, {tz}"));
        assert_eq!(want["baseline"], NEVER_HELD);
        // A second later: the same.
        let (later, _) = analyze(&csv, &["--tz", tz, "--since", "2026-10-19T00:00:01Z"]);
        assert_eq!(
            detector(&later, "offpeak_window")["data"]["baseline"]["gpus"],
            NEVER_HELD
        );
        // Starting and ending mid-hour, over two weeks (a weekly profile).
        for (since, until) in [
            ("2026-10-08T10:20:00Z", "2026-10-25T18:15:00Z"),
            ("2026-10-08T10:50:00Z", "2026-10-25T18:45:00Z"),
        ] {
            let (doc, _) = analyze(&csv, &["--tz", tz, "--since", since, "--until", until]);
            let want = reference(&csv, since, until, tz);
            let what = format!("{since} .. {until}, {tz}");
            assert_same_profile(&doc, &want, &what);
            assert_eq!(want["baseline"], NEVER_HELD, "{what}");
            assert_eq!(want["period"], "week", "{what}");
        }
    }
}

#[test]
fn report_and_analyze_share_one_range_that_ends_with_the_data() {
    let csv = trace("plain", &[]);
    let src = format!("csv:{}", csv.display());
    let report = |extra: &[&str]| -> (Value, String) {
        let mut args = vec!["report", "--source", &src, "--format", "json"];
        args.extend_from_slice(extra);
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{err}");
        (serde_json::from_str(&out).unwrap(), err)
    };
    // --since without --until runs to the end of the data, not to now.
    let (r, err) = report(&["--since", "2026-10-05"]);
    assert!(!err.contains("reaches past"), "{err}");
    assert_eq!(r["from"], "2026-10-05T00:00:00.000Z");
    assert_eq!(r["until"], DATA_END);
    assert_eq!(r["hours"], 504.0);
    assert_eq!(r["fleet"]["gpu_hours_available"], 192.0 * 504.0);
    assert_eq!(r["fleet"]["gpu_hours_observed"], 192.0 * 504.0);
    assert_eq!(r["fleet"]["cost_gpu_hours"], 192.0 * 504.0 * 2.0);
    assert!(
        r["data_quality"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| !n["message"].as_str().unwrap().contains("stopped reporting")),
        "{}",
        r["data_quality"]
    );
    // The same range in analyze: the same baseline and windows.
    let (a, _) = analyze(&csv, &["--since", "2026-10-05"]);
    assert_eq!((&a["from"], &a["until"]), (&r["from"], &r["until"]));
    assert_eq!(r["offpeak_baseline"]["gpus"], NEVER_HELD);
    let windows = |v: Vec<&Value>| -> Vec<(String, String, u64)> {
        v.iter()
            .map(|w| {
                (
                    w["start"].as_str().unwrap().to_string(),
                    w["end"].as_str().unwrap().to_string(),
                    w["expected_free_gpus"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        windows(r["offpeak_windows"].as_array().unwrap().iter().collect()),
        windows(
            a["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["evidence"]["type"] == "window")
                .map(|f| &f["evidence"])
                .collect()
        )
    );
    // Default flags: the last 7 days in both.
    let (r, err) = report(&[]);
    assert!(
        err.contains("reporting the last 7 days of the data"),
        "{err}"
    );
    assert_eq!(
        (r["from"].as_str(), r["until"].as_str()),
        (Some("2026-10-19T00:00:00.000Z"), Some(DATA_END))
    );
    assert_eq!(r["offpeak_baseline"]["gpus"], NEVER_HELD);
    // A range reaching past the data on both sides: said once, only what was observed counts.
    let (r, err) = report(&["--since", "2026-09-01", "--until", "2026-11-30"]);
    assert_eq!(err.matches("reaches past the data").count(), 1, "{err}");
    assert_eq!(r["hours"], 504.0);
    assert_eq!(r["fleet"]["gpu_hours_available"], 192.0 * 504.0);
    assert_eq!(r["fleet"]["cost_total"], 192.0 * 504.0 * 2.0);
}

#[test]
fn signals_the_data_lacks_are_unknown_and_each_detector_says_so() {
    let csv = trace("plain", &[]);
    let src = format!("csv:{}", csv.display());
    let (code, out, err) = run(&["report", "--source", &src, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    for key in [
        "memory_peak_gib",
        "memory_used_share",
        "energy_kwh",
        "cost_energy",
    ] {
        assert!(r["fleet"][key].is_null(), "{key}: {}", r["fleet"][key]);
    }
    let (code, table, err) = run(&["report", "--source", &src]);
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains("unknown: memory used is not in the data"),
        "{table}"
    );
    assert!(!table.contains("peak 0.0 GiB"), "{table}");
    assert!(
        table.contains(
            "Not judged (unknown: memory used is not in the data): whether workloads fit"
        ),
        "{table}"
    );
    assert!(table.contains("energy unknown: not in the data"), "{table}");

    let (doc, _) = analyze(&csv, &[]);
    let notes = |id: &str| -> String {
        detector(&doc, id)["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        notes("consolidation")
            .contains("memory used is missing for 192 of 192 GPU(s) outside MIG: not judged"),
        "{}",
        notes("consolidation")
    );
    assert!(
        notes("idle_loaded").contains("memory used is missing for 192 of 192 GPU(s)"),
        "{}",
        notes("idle_loaded")
    );
    // Every GPU has a busy ratio; what they lack is SM activity.
    let busy = notes("busy_not_working");
    assert!(
        busy.contains("SM activity is missing for 192 of 192 GPU(s)"),
        "{busy}"
    );
    assert!(!busy.contains("busy ratio is missing"), "{busy}");
    // Off-peak says how the GPUs were judged free.
    assert!(
        notes("offpeak_window").contains(
            "memory used is missing for 192 of 192 GPU(s): they are judged free on activity alone"
        ),
        "{}",
        notes("offpeak_window")
    );
}

#[test]
fn ingest_reads_the_same_range_rule() {
    // `tessera ingest --since S --until U`: rows ending in (S, U], the row ending at S left to
    // the day before, the one ending at U kept.
    let csv = trace("plain", &[]);
    let src = format!("csv:{}", csv.display());
    let (code, out, err) = run(&[
        "ingest",
        "--source",
        &src,
        "--since",
        "2026-10-12T00:00:00Z",
        "--until",
        "2026-10-13T00:00:00Z",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let gpu = v["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "gpu")
        .unwrap();
    assert_eq!(gpu["first"], "2026-10-12T00:15:00.000Z");
    assert_eq!(gpu["last"], "2026-10-13T00:00:00.000Z");
    assert_eq!(gpu["rows"], 96 * 192);
    // An empty range is an error.
    let (code, _, err) = run(&[
        "ingest",
        "--source",
        &src,
        "--since",
        "2026-10-13",
        "--until",
        "2026-10-12",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("is not before --until"), "{err}");
}
