//! `tessera report` through the binary: the README's "Try it" command on the shipped demo history,
//! insta snapshots of the table, Markdown and JSON for fixed ranges (fixed clock: absolute
//! `--since`/`--until`), week-over-week on two simulated weeks, colour rules, data-quality notes
//! for planted faults (a deleted hour, a GPU that stops reporting, a source without rows) and the
//! error paths (bad config, bad price, bad time zone, empty range) with exit code 2.

use crate::support::cli;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tessera(args: &[&str]) -> Output {
    cli::tessera_with(args, |c| {
        c.current_dir(root()).env_remove("NO_COLOR");
    })
}

fn ok(args: &[&str]) -> String {
    let out = tessera(args);
    assert!(
        out.status.success(),
        "tessera {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// [`ok`] with a PATH that has no `sacct`: the snapshots do not depend on whether this machine
/// has Slurm's client (the demo's Slurm job then has the one note that `sacct` is absent).
fn ok_without_sacct(args: &[&str]) -> String {
    let empty = tempfile::tempdir().unwrap();
    let out = cli::tessera_with(args, |c| {
        c.current_dir(root())
            .env_remove("NO_COLOR")
            .env("PATH", empty.path());
    });
    assert!(
        out.status.success(),
        "tessera {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn fails(args: &[&str]) -> String {
    let out = tessera(args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "tessera {args:?}: expected exit 2, stdout {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(out.stdout.is_empty(), "no data on stdout on error");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const DEMO: &str = "history:fixtures/demo-history";
/// The whole demo history, as a fixed range.
const RANGE: [&str; 4] = [
    "--since",
    "2026-11-02T00:00:00Z",
    "--until",
    "2026-11-06T00:00:00Z",
];

#[test]
fn readme_try_it_command_reports_every_section() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("cargo run -p tessera -- report"))
        .expect("README has the report command");
    let args: Vec<&str> = line
        .split_once(" -- ")
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    assert_eq!(args, ["report", "--source", DEMO]);
    let out = ok(&args);
    for needle in [
        "== Actions — one per workload",
        "scale lab-a/GPU2 pid 4034 (python3, research/embed-test-5c8d7-qq9zl) to zero",
        "== Fleet summary",
        "GPU-hours available │ 768",
        "== By node",
        "lab-a",
        "lab-b",
        "== By GPU model",
        "NVIDIA H100 80GB HBM3",
        "== By team (namespace, else slurm_job)",
        "serving",
        "slurm job 81234",
        "== Top idle-loaded models",
        "research/embed-test-5c8d7-qq9zl",
        "== Consolidation plan",
        "the actions free 1 GPU(s) and save",
        "Actions: the detector's plan frees 2 GPU(s); the MIG layouts free at least as many",
        "→ lab-a/GPU0",
        "== MIG recommendation",
        "MIG layouts would run 7 workload(s) on 6 GPU(s)",
        "- lab-a/GPU0 (H100-80GB): 3g.40gb@0 [serving/chat-api-7d9f8c-x2k4p]",
        "- lab-a/GPU3 (H100-80GB): kept whole, MIG off [slurm-81234]",
        "8 → 7 GPU(s), 1 freed",
        "MIG frees at least as many GPUs as the consolidation plan (1): follow the MIG plan.",
        "== Off-peak windows (UTC)",
        "17:00",
        "== Next steps",
        "`tessera mig plan --source history:fixtures/demo-history -o plan.yaml`",
        "== Data quality",
        "lab-b/GPU3 (NVIDIA A100-SXM4-80GB) was lost or in error for 2.0 h",
        "the previous period is not in the data",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    assert!(
        !out.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
}

#[test]
fn snapshot_table() {
    let mut a = vec!["report", "--source", DEMO, "--tz", "Europe/Berlin"];
    a.extend(RANGE);
    insta::assert_snapshot!("demo_table", ok_without_sacct(&a));
}

#[test]
fn snapshot_markdown() {
    let mut a = vec!["report", "--source", DEMO, "--format", "markdown"];
    a.extend(RANGE);
    a.extend(["--price.gpu-hour", "3.1", "--price.kwh", "0.25"]);
    insta::assert_snapshot!("demo_markdown", ok_without_sacct(&a));
}

#[test]
fn snapshot_json_and_schema() {
    let mut a = vec!["report", "--source", DEMO, "--format", "json"];
    a.extend(RANGE);
    let text = ok_without_sacct(&a);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["version"], 2);
    assert_eq!(v["from"], "2026-11-02T00:00:00.000Z");
    assert_eq!(v["hours"], 96.0);
    // The MIG planner's recommendation over the same range: never below its own lower bound,
    // and every planned GPU listed.
    let mig = &v["mig"];
    assert!(mig["gpus_after"].as_u64().unwrap() >= mig["lower_bound"].as_u64().unwrap());
    assert!(mig["gpus_before"].as_u64().unwrap() >= mig["gpus_after"].as_u64().unwrap());
    assert_eq!(
        mig["lines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l.as_str().unwrap().contains("/GPU"))
            .count() as u64,
        mig["gpus_after"].as_u64().unwrap()
    );
    assert!(v["previous_period"].is_null());
    assert_eq!(v["fleet"]["gpus"], 8);
    // Cost = GPU-hours × price + kWh × price.
    let f = &v["fleet"];
    let cost =
        f["gpu_hours_available"].as_f64().unwrap() * 2.0 + f["energy_kwh"].as_f64().unwrap() * 0.15;
    assert!((f["cost_total"].as_f64().unwrap() - cost).abs() < 0.02);
    // By-node and by-model hours add up to the fleet's.
    for key in ["by_node", "by_model"] {
        let sum: f64 = v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["gpu_hours_observed"].as_f64().unwrap())
            .sum();
        assert!((sum - f["gpu_hours_observed"].as_f64().unwrap()).abs() < 0.01);
    }
    assert_eq!(v["charts"]["hour_of_week"].as_array().unwrap().len(), 7);
    assert_eq!(v["charts"]["gpu_activity"].as_array().unwrap().len(), 8);
    insta::assert_snapshot!("demo_json", text);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// Rewrites a day file of history without the rows of the given hours of its day (by `ts`).
fn drop_hours(path: &Path, hours: std::ops::Range<i64>) {
    use polars::prelude::*;
    let df = ParquetReader::new(std::fs::File::open(path).unwrap())
        .finish()
        .unwrap();
    let hour = (col("ts") / lit(3_600_000i64)) % lit(24i64);
    let mut df = df
        .lazy()
        .filter(
            hour.clone()
                .lt(lit(hours.start))
                .or(hour.gt_eq(lit(hours.end))),
        )
        .collect()
        .unwrap();
    let before = ParquetReader::new(std::fs::File::open(path).unwrap())
        .finish()
        .unwrap()
        .height();
    assert!(
        df.height() < before,
        "{}: no rows in those hours",
        path.display()
    );
    ParquetWriter::new(std::fs::File::create(path).unwrap())
        .with_compression(ParquetCompression::Zstd(None))
        .finish(&mut df)
        .unwrap();
}

#[test]
fn data_quality_names_gaps_silent_gpus_and_missing_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let hist = tmp.path().join("h");
    copy_dir(&root().join("fixtures/demo-history"), &hist);
    // A deleted hour on lab-a and lab-b's last 6 hours gone: a gap and GPUs that stop reporting.
    // Finished days are day files (compacted), so the hours are cut out of them.
    drop_hours(&hist.join("lab-a/gpu/2026-11-03.parquet"), 12..13);
    drop_hours(&hist.join("lab-b/gpu/2026-11-05.parquet"), 18..24);
    std::fs::remove_file(hist.join("lab-b/gpu/2026-11-06T00.parquet")).unwrap();
    // A CSV source whose only row lies outside the range.
    let csv = tmp.path().join("old.csv");
    std::fs::write(
        &csv,
        "timestamp,entity,metric,value,node\n2026-10-01T00:00:00Z,GPU-x,gpu_busy_ratio,0.5,old-node\n",
    )
    .unwrap();
    let src = format!("history:{}", hist.display());
    let csv_src = format!("csv:{}", csv.display());
    let mut a = vec![
        "report", "--source", &src, "--source", &csv_src, "--format", "json",
    ];
    a.extend(RANGE);
    let v: Value = serde_json::from_str(&ok(&a)).unwrap();
    let notes: Vec<(String, String)> = v["data_quality"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["kind"].as_str().unwrap().to_string(),
                n["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let has = |kind: &str, text: &str| {
        assert!(
            notes.iter().any(|(k, m)| k == kind && m.contains(text)),
            "no {kind} note with {text:?} in {notes:#?}"
        )
    };
    for g in 0..4 {
        has(
            "gap",
            &format!("lab-a/GPU{g}: 1 gap(s) in its rows, 1.0 h missing"),
        );
        assert!(
            !notes
                .iter()
                .any(|(k, m)| k == "gap" && m.contains(&format!("lab-b/GPU{g}")))
        );
        has(
            "stopped",
            &format!(
                "lab-b/GPU{g} (NVIDIA A100-SXM4-80GB) stopped reporting at 2026-11-05T17:55:00.000Z (6.1 h before the end)"
            ),
        );
    }
    has(
        "source_missing",
        &format!("source {csv_src} has no GPU rows"),
    );
    assert!(
        !notes
            .iter()
            .any(|(k, m)| k == "stopped" && m.contains("lab-a"))
    );
}

/// Where the data has GPM's tensor and DRAM activity (history version 2, H100s), the fleet
/// summary's activity line adds them with the GPUs they cover and the JSON carries them; GPUs
/// and data without them (the A100 node, the version-1 demo history) show nothing of them.
#[test]
fn gpm_tensor_and_dram_activity_where_the_data_has_them() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("busy");
    let scenario = root().join("fixtures/scenarios/busy-pipes.toml");
    ok(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--days",
        "1",
        "--sample-interval",
        "60s",
        "--history.interval",
        "5m",
        "--out",
        out.to_str().unwrap(),
    ]);
    let src = format!("history:{}", out.display());
    let v: Value =
        serde_json::from_str(&ok(&["report", "--source", &src, "--format", "json"])).unwrap();
    let f = &v["fleet"];
    assert_eq!(f["gpm_gpus"], 4, "{f}");
    let (tensor, dram) = (
        f["tensor_active_mean"].as_f64().unwrap(),
        f["dram_active_mean"].as_f64().unwrap(),
    );
    assert!(
        tensor > 0.0 && tensor < 1.0 && dram > 0.0 && dram < 1.0,
        "{f}"
    );
    let a100 = v["by_node"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["key"] == "a100-node")
        .expect("a100-node");
    for k in ["tensor_active_mean", "dram_active_mean", "gpm_gpus"] {
        assert!(a100.get(k).is_none(), "{k} on the A100 node: {a100}");
    }
    let table = ok(&["report", "--source", &src]);
    let line = table
        .lines()
        .find(|l| l.contains("Activity"))
        .expect("activity line");
    assert!(
        line.contains(&format!(
            "(SM activity, else busy ratio); tensor {:.0}%, DRAM {:.0}% on 4 of 5 GPU(s) (GPM)",
            tensor * 100.0,
            dram * 100.0
        )),
        "{line}"
    );

    let mut a = vec!["report", "--source", DEMO, "--format", "json"];
    a.extend(RANGE);
    let demo: Value = serde_json::from_str(&ok(&a)).unwrap();
    assert!(demo["fleet"].get("tensor_active_mean").is_none());
}

#[test]
fn week_over_week_on_two_simulated_weeks() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("offpeak");
    let scenario = root().join("fixtures/scenarios/offpeak.toml");
    ok(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--days",
        "14",
        "--sample-interval",
        "60s",
        "--history.interval",
        "5m",
        "--out",
        out.to_str().unwrap(),
    ]);
    let src = format!("history:{}", out.display());
    let text = ok(&[
        "report",
        "--source",
        &src,
        "--format",
        "json",
        "--tz",
        "Europe/Berlin",
    ]);
    let v: Value = serde_json::from_str(&text).unwrap();
    // Default range: the last 7 days of the data; the week before is the previous period.
    assert_eq!(v["from"], "2026-11-09T00:00:00.000Z");
    assert_eq!(v["until"], "2026-11-16T00:00:00.000Z");
    let prev = &v["previous_period"];
    assert_eq!(prev["gpus"], 8);
    assert!((prev["gpu_hours_observed"].as_f64().unwrap() - 8.0 * 168.0).abs() < 0.5);
    // Same workloads every week: the change is small but the numbers are the week before's.
    let (a, b) = (
        v["fleet"]["gpu_hours_busy"].as_f64().unwrap(),
        prev["gpu_hours_busy"].as_f64().unwrap(),
    );
    assert!(b > 0.0 && ((a - b) / b).abs() < 0.2, "{a} vs {b}");
    // The off-peak windows of the reported week (one week: a daily profile) in local time,
    // marked on the timeline.
    let w = v["offpeak_windows"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        (
            &w[0]["period"],
            &w[0]["start"],
            &w[0]["end"],
            &w[0]["expected_free_gpus"]
        ),
        (&"day".into(), &"18:00".into(), &"09:00".into(), &6.into())
    );
    // The two inference GPUs are never free: no baseline, so the window is all above it.
    assert!(v["offpeak_baseline"].is_null(), "{}", v["offpeak_baseline"]);
    assert_eq!(w[0]["above_baseline"], 6);
    assert_eq!(
        w[0]["systemd_start"],
        "OnCalendar=*-*-* 18:00:00 Europe/Berlin"
    );
    assert_eq!(w[0]["cron_end"], "CRON_TZ=Europe/Berlin 0 9 * * *");
    let tl = v["charts"]["free_timeline"].as_array().unwrap();
    assert_eq!(tl.len(), 168);
    assert!(tl.iter().any(|h| h["offpeak"] == true));
    assert!(tl.iter().any(|h| h["offpeak"] == false));
    assert!(
        tl.iter()
            .filter(|h| h["offpeak"] == true)
            .all(|h| h["offpeak_free_gpus"] == 6)
    );
    // The same week named with --since/--until (the ingest reaches back a week by itself).
    let explicit = ok(&[
        "report",
        "--source",
        &src,
        "--format",
        "json",
        "--tz",
        "Europe/Berlin",
        "--since",
        "2026-11-09T00:00:00Z",
        "--until",
        "2026-11-16T00:00:00Z",
    ]);
    // The same report, but for the range the printed plan and replay commands name as given.
    let explicit = explicit.replace(
        " --since 2026-11-09T00:00:00Z --until 2026-11-16T00:00:00Z",
        "",
    );
    assert_eq!(explicit, text);
    // The table says it.
    let table = ok(&["report", "--source", &src]);
    assert!(
        table.contains("Week over week      │ GPU-h available 0%"),
        "{table}"
    );
}

#[test]
fn prices_from_config_then_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("report.toml");
    std::fs::write(
        &cfg,
        "[price]\ngpu_hour = 4.0\nkwh = 0.5\ncurrency = \"EUR\"\n",
    )
    .unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let mut a = vec![
        "report", "--source", DEMO, "--format", "json", "--config", cfg_s,
    ];
    a.extend(RANGE);
    let v: Value = serde_json::from_str(&ok(&a)).unwrap();
    assert_eq!(v["prices"]["gpu_hour"], 4.0);
    assert_eq!(v["prices"]["currency"], "EUR");
    let f = &v["fleet"];
    assert_eq!(
        f["cost_gpu_hours"].as_f64().unwrap(),
        (f["gpu_hours_available"].as_f64().unwrap() * 4.0 * 100.0).round() / 100.0
    );
    a.extend(["--price.gpu-hour", "1.5"]);
    let v: Value = serde_json::from_str(&ok(&a)).unwrap();
    assert_eq!(v["prices"]["gpu_hour"], 1.5);
    assert_eq!(v["prices"]["kwh"], 0.5);
    assert_eq!(v["prices"]["source"], format!("config:{cfg_s},flags"));
    // Idle waste is priced at the GPU-hour price.
    for m in v["idle_models"].as_array().unwrap() {
        let want = (m["reclaimable_gpu_hours"].as_f64().unwrap() * 1.5 * 100.0).round() / 100.0;
        assert_eq!(m["wasted_cost"].as_f64().unwrap(), want);
    }
}

#[test]
fn bad_input_exits_2_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("bad.toml");
    std::fs::write(&cfg, "[price]\ngpu_hours = 4.0\n").unwrap();
    let e = fails(&[
        "report",
        "--source",
        DEMO,
        "--config",
        cfg.to_str().unwrap(),
    ]);
    assert!(e.contains("bad.toml") && e.contains("gpu_hours"), "{e}");
    let e = fails(&[
        "report",
        "--source",
        DEMO,
        "--config",
        "/nonexistent/r.toml",
    ]);
    assert!(e.contains("/nonexistent/r.toml"), "{e}");
    let e = fails(&["report", "--source", DEMO, "--price.kwh=-1"]);
    assert!(e.contains("bad price kwh -1"), "{e}");
    let e = fails(&["report", "--source", DEMO, "--tz", "Mars/Olympus"]);
    assert!(e.contains("Mars/Olympus"), "{e}");
    let e = fails(&[
        "report",
        "--source",
        DEMO,
        "--since",
        "2020-01-01",
        "--until",
        "2020-01-02",
    ]);
    assert!(e.contains("no rows"), "{e}");
    let e = fails(&["report", "--source", "history:/nonexistent/history"]);
    assert!(e.contains("/nonexistent/history"), "{e}");
    let e = fails(&["report", "--source", DEMO, "--format", "pdf"]);
    assert!(e.contains("pdf"), "{e}");
}

#[test]
fn out_file_gets_the_report_and_stdout_stays_empty() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("r.md");
    let mut a = vec![
        "report",
        "--source",
        DEMO,
        "--format",
        "markdown",
        "--out",
        path.to_str().unwrap(),
    ];
    a.extend(RANGE);
    assert_eq!(ok(&a), "");
    let md = std::fs::read_to_string(&path).unwrap();
    assert!(md.starts_with("# tessera report"));
    assert!(md.contains("## Consolidation plan"));
}

/// Colour needs a terminal: `script` (util-linux) gives the command one.
fn on_terminal(no_color: Option<&str>) -> String {
    let cmd = format!("{} report --source {DEMO}", env!("CARGO_BIN_EXE_tessera"));
    let mut c = Command::new("script");
    c.args(["-qec", &cmd, "/dev/null"]).current_dir(root());
    match no_color {
        Some(v) => c.env("NO_COLOR", v),
        None => c.env_remove("NO_COLOR"),
    };
    let out = c.output().expect("script(1) from util-linux runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    assert!(on_terminal(None).contains("\x1b[1m== Fleet summary"));
    assert!(!on_terminal(Some("1")).contains("\x1b[1m"));
    // NO_COLOR set but empty does not count (no-color.org).
    assert!(on_terminal(Some("")).contains("\x1b[1m"));
}

#[test]
fn week_over_week_says_when_the_previous_period_is_partly_covered() {
    // Two days against the two before: fully covered.
    let full = ok(&[
        "report",
        "--source",
        DEMO,
        "--since",
        "2026-11-04T00:00:00Z",
        "--until",
        "2026-11-06T00:00:00Z",
    ]);
    assert!(
        full.contains("Week over week      │ GPU-h available 0%"),
        "{full}"
    );
    assert!(!full.contains("covered by data"), "{full}");
    // Three days against the three before, of which the data has one.
    let part = ok(&[
        "report",
        "--source",
        DEMO,
        "--since",
        "2026-11-03T00:00:00Z",
        "--until",
        "2026-11-06T00:00:00Z",
    ]);
    assert!(
        part.contains("(the previous period is only 33% covered by data)"),
        "{part}"
    );
}

#[test]
fn a_range_after_the_data_is_refused_as_analyze_refuses_it() {
    // The demo's data ends 2026-11-06: a report from 2026-11-10 has no row of its own, though
    // the period before it (read for week over week) has some.
    for since in [
        vec!["--since", "2026-11-10"],
        vec!["--since", "2026-11-06T00:00:00Z"],
        vec!["--since", "2026-11-10", "--until", "2026-11-20"],
    ] {
        for cmd in ["report", "analyze", "mig plan"] {
            let mut a: Vec<&str> = cmd.split(' ').collect();
            a.extend(["--source", DEMO]);
            if cmd == "mig plan" {
                a.extend(["-o", "/dev/null"]);
            }
            a.extend(since.iter().copied());
            let err = fails(&a);
            assert!(
                err.contains("no rows in the sources for the chosen range"),
                "{a:?}: {err}"
            );
        }
    }
    // A range that ends after the data but starts inside it is narrowed, as before.
    let v: Value = serde_json::from_str(&ok(&[
        "report",
        "--source",
        DEMO,
        "--since",
        "2026-11-05",
        "--until",
        "2026-11-10",
        "--format",
        "json",
    ]))
    .unwrap();
    assert_eq!(v["hours"], 24.0);
}

#[test]
fn html_on_a_terminal_is_refused_naming_out() {
    for cmd in ["report", "replay --plan ../fixtures/none.yaml"] {
        let line = format!(
            "{} {cmd} --source {DEMO} --format html",
            env!("CARGO_BIN_EXE_tessera")
        );
        let out = Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .current_dir(root())
            .output()
            .expect("script(1) from util-linux runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {text}");
        assert!(
            text.contains("--format html writes a page, not terminal text: give --out"),
            "{text}"
        );
        assert!(!text.contains("<html"), "{text}");
    }
    // Redirected, the page is written as before.
    let page = ok(&["report", "--source", DEMO, "--format", "html"]);
    assert!(page.starts_with("<!DOCTYPE html>"));
}

/// Issue 52 item 4: the weekly report kept on a schedule: `--archive DIR --keep N` writes the
/// HTML page and the JSON of one run, named by the data's end, and keeps the newest N; the JSON
/// is the report `--format json` prints; nothing goes to stdout.
#[test]
fn archive_keeps_the_newest_reports_as_html_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("reports");
    let a = archive.to_str().unwrap();
    for until in [
        "2026-11-04T00:00:00Z",
        "2026-11-05T00:00:00Z",
        "2026-11-06T00:00:00Z",
    ] {
        let out = ok(&[
            "report",
            "--source",
            DEMO,
            "--since",
            "2026-11-02T00:00:00Z",
            "--until",
            until,
            "--archive",
            a,
            "--keep",
            "2",
        ]);
        assert!(out.is_empty(), "nothing on stdout: {out}");
    }
    let mut names: Vec<String> = std::fs::read_dir(&archive)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "tessera-report-2026-11-05T0000Z.html",
            "tessera-report-2026-11-05T0000Z.json",
            "tessera-report-2026-11-06T0000Z.html",
            "tessera-report-2026-11-06T0000Z.json",
        ]
    );
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(archive.join("tessera-report-2026-11-06T0000Z.json")).unwrap(),
    )
    .unwrap();
    let printed: Value = serde_json::from_str(&ok(&[
        "report",
        "--source",
        DEMO,
        "--since",
        "2026-11-02T00:00:00Z",
        "--until",
        "2026-11-06T00:00:00Z",
        "--format",
        "json",
    ]))
    .unwrap();
    assert_eq!(json, printed);
    let html =
        std::fs::read_to_string(archive.join("tessera-report-2026-11-06T0000Z.html")).unwrap();
    assert!(
        html.starts_with("<!DOCTYPE html>") || html.starts_with("<!doctype html>"),
        "{}",
        &html[..60.min(html.len())]
    );
    let e = fails(&[
        "report",
        "--source",
        DEMO,
        "--archive",
        a,
        "--out",
        "x.html",
    ]);
    assert!(e.contains("--out") && e.contains("--archive"), "{e}");
    let e = fails(&["report", "--source", DEMO, "--archive", a, "--keep", "0"]);
    assert!(e.contains("--keep 0"), "{e}");
}

/// The team rows and `(no team)` add up to the fleet's GPU-hours available, their cost, and the
/// GPUs' kWh and energy cost (issue 55: the team table reconciles).
fn check_teams_add_up(src: &str) {
    let v: Value = serde_json::from_str(&ok(&["report", "--source", src, "--format", "json"]))
        .expect("report JSON");
    let teams = &v["teams"];
    let rows: Vec<&Value> = teams["rows"]
        .as_array()
        .unwrap()
        .iter()
        .chain(std::iter::once(&teams["nobody"]))
        .collect();
    assert_eq!(teams["nobody"]["team"], "(no team)", "{teams:#}");
    let sum = |k: &str| {
        rows.iter()
            .map(|r| r[k].as_f64().unwrap_or(0.0))
            .sum::<f64>()
    };
    let fleet = &v["fleet"];
    let near = |a: f64, b: f64, what: &str| {
        assert!(
            (a - b).abs() <= 0.01 * rows.len() as f64,
            "{src} {what}: {a} vs {b}"
        )
    };
    near(
        sum("gpu_hours"),
        fleet["gpu_hours_available"].as_f64().unwrap(),
        "GPU-hours",
    );
    near(
        sum("cost"),
        fleet["cost_gpu_hours"].as_f64().unwrap(),
        "cost",
    );
    near(
        sum("energy_kwh"),
        fleet["energy_kwh"].as_f64().unwrap(),
        "kWh",
    );
    near(
        sum("cost_energy"),
        fleet["cost_energy"].as_f64().unwrap(),
        "energy cost",
    );
    assert!(teams["nobody"]["gpu_hours"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_team_rows_add_up_to_the_fleet() {
    check_teams_add_up(DEMO);
    let dir = tempfile::tempdir().unwrap();
    check_teams_add_up(&cli::fleet_64(dir.path()));
}

/// Progress on a pipe (issue 55): with `TESSERA_PROGRESS_EVERY=0` every update is a plain line
/// on stderr — `simulate` by share of node-time up to 100%, `report` by node partitions — and
/// with the default (10 s) a short run prints none.
#[test]
fn long_runs_say_where_they_are_on_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let scenario = root.join("fixtures/scenarios/fleet-64.toml");
    let sim = |out: &std::path::Path, every: Option<&str>| {
        let o = crate::support::cli::tessera_with(
            &[
                "simulate",
                "--scenario",
                scenario.to_str().unwrap(),
                "--days",
                "1",
                "--sample-interval",
                "60s",
                "--history.interval",
                "10m",
                "--out",
                out.to_str().unwrap(),
            ],
            |c| {
                c.env_remove("TESSERA_PROGRESS_EVERY");
                if let Some(e) = every {
                    c.env("TESSERA_PROGRESS_EVERY", e);
                }
            },
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let err = sim(&dir.path().join("a"), Some("0"));
    let shares: Vec<f64> = err
        .lines()
        .filter_map(|l| l.strip_prefix("tessera: simulating: "))
        .map(|l| l.split('%').next().unwrap().parse().unwrap())
        .collect();
    assert!(shares.len() >= 8 * 24 / 2, "{err}");
    assert_eq!(shares.iter().copied().fold(0.0, f64::max), 100.0, "{err}");
    // An interval the run does not reach: no line (the default, 10 s, is the same rule; not
    // tested here, as how long a run takes depends on the machine's load).
    assert!(!sim(&dir.path().join("b"), Some("24h")).contains("tessera: simulating"));
    let src = format!("history:{}", dir.path().join("a").display());
    let o = crate::support::cli::tessera_with(&["report", "--source", &src], |c| {
        c.env("TESSERA_PROGRESS_EVERY", "0");
    });
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("node partition(s)"), "{err}");
}

/// `TESSERA_TIMINGS` (issue 61 item 1): the report names every section's time on a line of its
/// own — the pass's steps summed over the workers (the energy split apart from the tallies), the
/// MIG plan, the actions, the changes, work per GPU-hour, the trend and the plans' replays — and
/// changes nothing on stdout.
#[test]
fn timings_name_every_section_and_change_no_output() {
    let args = [
        "report",
        "--source",
        "history:fixtures/demo-history",
        "--format",
        "json",
    ];
    let plain = tessera(&args);
    let timed = cli::tessera_with(&args, |c| {
        c.current_dir(root()).env("TESSERA_TIMINGS", "1");
    });
    assert!(timed.status.success() && plain.status.success());
    assert_eq!(timed.stdout, plain.stdout, "timings change no output");
    let err = String::from_utf8_lossy(&timed.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("timings: ")).collect();
    for (what, step) in [
        ("report pass (summed)", "read"),
        ("report pass (summed)", "tallies"),
        ("report pass (summed)", "energy split"),
        ("report pass (summed)", "MIG demand"),
        ("report pass (summed)", "change scan"),
        ("report", "work counters read"),
        ("report", "pass"),
        ("report", "finish"),
        ("report", "MIG plan"),
        ("report", "actions"),
        ("report", "changes"),
        ("report", "work"),
        ("report", "trend"),
        ("report", "replays"),
    ] {
        let prefix = format!("timings: {what}: {step} ");
        let line = lines
            .iter()
            .find(|l| l.strip_prefix(&prefix).is_some_and(|d| !d.contains(' ')))
            .unwrap_or_else(|| panic!("no `{prefix}` line in {lines:#?}"));
        let took = &line[prefix.len()..];
        assert!(
            ["ns", "µs", "ms", "s"].iter().any(|u| took.ends_with(u))
                && took.starts_with(|c: char| c.is_ascii_digit()),
            "a duration: {line}"
        );
    }
    assert!(
        String::from_utf8_lossy(&plain.stderr)
            .lines()
            .all(|l| !l.starts_with("timings: ")),
        "no timings without the variable"
    );
}
