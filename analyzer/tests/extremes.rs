//! No output of `analyze` or `report` prints an impossible number (issue 27): a property test
//! drives the whole path — ingest of a generic CSV, the advisor, the report and every renderer
//! (table, Markdown, HTML, JSON, the findings table) — with extreme values: values at the edges
//! of the accepted ranges (100 kW, 8.64 GJ a row, 2^60 bytes, a memory total of 1 byte),
//! out-of-range ones (refused at ingest and counted), signals missing, one row or many. None of
//! `inf`, `NaN`, a negative duration or "N% of memory used, peak 0.0 GiB" with N > 0 may appear.

use std::fmt::Write as _;

use proptest::prelude::*;
use tessera::advisor::{self, Params};
use tessera::ingest::{self, IngestOptions, Source};
use tessera::report::{self, Prices, ReportInput, html, render};

const T0: i64 = 1_793_577_600; // 2026-11-02T00:00:00Z, s

fn value() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        Just(None),
        Just(Some(0.0)),
        Just(Some(1e-300)),
        Just(Some(1.0)),
        Just(Some(99_999.9)),
        Just(Some(1e5)),
        Just(Some(8.64e9)),
        Just(Some(1e10)),
        Just(Some(1e308)),
        Just(Some((1u64 << 60) as f64)),
        (0.0f64..1.0).prop_map(Some),
    ]
}

const METRICS: [&str; 7] = [
    "gpu_busy_ratio",
    "sm_active_ratio",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_watts",
    "energy_delta_joules",
    "temperature_celsius",
];

/// Per GPU (1–3), per row (1–30, 60 s apart), a value (or none) per metric.
fn table() -> impl Strategy<Value = Vec<Vec<Vec<Option<f64>>>>> {
    prop::collection::vec(
        prop::collection::vec(prop::collection::vec(value(), METRICS.len()), 1..30),
        1..4,
    )
}

fn csv(t: &[Vec<Vec<Option<f64>>>]) -> String {
    let mut s = String::from("timestamp,entity,metric,value,node,model,gpu\n");
    for (g, rows) in t.iter().enumerate() {
        for (i, row) in rows.iter().enumerate() {
            for (m, v) in METRICS.iter().zip(row) {
                if let Some(v) = v {
                    let _ = writeln!(
                        s,
                        "{},GPU-{g},{m},{v:e},n{g},M,{g}",
                        T0 + 60 * (i as i64 + 1)
                    );
                }
            }
        }
    }
    s
}

/// The words of `text` that are impossible numbers: `inf`, `NaN`, negative durations.
fn impossible(text: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || "(),;|│:[]{}\"<>=".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    for (i, w) in words.iter().enumerate() {
        let bare = w.trim_matches(|c: char| c == '%' || c == '+' || c == '-' || c == '.');
        if bare.eq_ignore_ascii_case("inf")
            || bare.eq_ignore_ascii_case("nan")
            || bare.eq_ignore_ascii_case("infinity")
        {
            bad.push(w.to_string());
        }
        let unit = words.get(i + 1).copied().unwrap_or("");
        if w.starts_with('-')
            && w[1..].starts_with(|c: char| c.is_ascii_digit())
            && matches!(
                unit,
                "h" | "min" | "s" | "hours" | "minutes" | "GPU-h" | "GPU-hours" | "kWh"
            )
        {
            bad.push(format!("{w} {unit}"));
        }
    }
    // "N% of memory used on average, peak 0.0 GiB" with N > 0 is a contradiction.
    for line in text.lines() {
        if line.contains("peak 0.0 GiB")
            && let Some(p) = line.split("% of memory used").next()
            && let Some(n) = p.rsplit(|c: char| !c.is_ascii_digit()).next()
            && n.parse::<u32>().is_ok_and(|n| n > 0)
        {
            bad.push(line.to_string());
        }
    }
    bad
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_output_prints_an_impossible_number(t in table(), price in prop_oneof![Just(0.0), Just(2.0), Just(1e9)]) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.csv");
        std::fs::write(&path, csv(&t)).unwrap();
        let opts = IngestOptions { skip_bad_rows: true, ..IngestOptions::default() };
        let Ok((frames, ing)) = ingest::ingest(&[Source::csv(path)], &opts) else {
            // Nothing accepted at all is an error, not an output.
            return Ok(());
        };
        let Some((first, last)) = ing.time_range() else { return Ok(()) };
        let range = (first - 60_000, last);
        let analysis = advisor::analyze(&frames, &Params::default(), Some(range), vec![], &[]).unwrap();
        let r = report::build(
            &frames,
            &ReportInput {
                analysis: &analysis,
                range,
                ingest: &ing,
                sources: vec![],
                prices: Prices { gpu_hour: price, kwh: price, currency: "EUR".into(), source: "test".into() },
                tz: chrono_tz::UTC,
                top: 10,
            },
        )
        .unwrap();
        for (what, text) in [
            ("table", render::render_table(&r, false)),
            ("markdown", render::render_markdown(&r)),
            ("html", html::render_html(&r)),
            ("json", serde_json::to_string_pretty(&r).unwrap()),
            ("analyze", advisor::render_table(&analysis)),
            ("analyze json", serde_json::to_string_pretty(&analysis).unwrap()),
        ] {
            let bad = impossible(&text);
            prop_assert!(bad.is_empty(), "{what}: {bad:?}\n{}", csv(&t));
        }
    }
}

#[test]
fn the_checker_finds_what_it_looks_for() {
    assert_eq!(impossible("Energy inf kWh, cost NaN%"), ["inf", "NaN%"]);
    assert_eq!(impossible("idle for -3.5 h"), ["-3.5 h"]);
    assert_eq!(
        impossible("Memory │ 100% of memory used on average, peak 0.0 GiB on one GPU").len(),
        1
    );
    assert!(
        impossible("information inferred; 0% of memory used on average, peak 0.0 GiB").is_empty()
    );
}

/// Names from data with terminal escapes (any GPU user can rename a process with
/// `PR_SET_NAME`): every human output shows them escaped, never raw.
#[test]
fn control_characters_in_names_are_escaped_in_every_human_output() {
    use super::support::cli::run;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evil.csv");
    let evil = "py\u{1b}[2J\u{1b}]0;owned\u{7}";
    let mut s = String::from(
        "timestamp,entity,metric,value,kind,node,model,gpu,uuid,process,namespace,pod,slurm_job_id\n",
    );
    for i in 1..=180i64 {
        let t = T0 + 60 * i;
        for (m, v) in [
            ("gpu_busy_ratio", 0.0),
            ("memory_used_bytes", 8e9),
            ("memory_total_bytes", 80e9),
        ] {
            let _ = writeln!(s, "{t},GPU-0,{m},{v},gpu,n1,H100,0,GPU-0,,,,");
        }
        let _ = writeln!(
            s,
            "{t},4242,memory_used_bytes,8e9,process,n1,,0,GPU-0,{evil},ns\u{1b}[31m,pod\u{9b}1,77"
        );
    }
    std::fs::write(&path, s).unwrap();
    let src = format!("csv:{}", path.display());
    let outputs = [
        run(&["report", "--source", &src]),
        run(&["report", "--source", &src, "--format", "markdown"]),
        run(&["report", "--source", &src, "--format", "html"]),
        run(&["report", "--source", &src, "--by", "job"]),
        run(&["analyze", "--source", &src]),
        run(&["job", "77", "--source", &src]),
    ];
    for (i, (code, out, err)) in outputs.iter().enumerate() {
        assert_eq!(*code, 0, "output {i}: {err}");
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{7}') && !out.contains('\u{9b}'),
            "output {i} holds a raw control character:\n{out}"
        );
        // `report --by job` (3) and `job` (5) show no names; the others do, escaped.
        if i != 3 && i != 5 {
            assert!(
                out.contains("\\u{1b}"),
                "output {i} shows the name escaped:\n{out}"
            );
        }
    }
}

/// Issue 53: `tessera mig plan` and the `share` dry run printed workload ids built from pod and
/// process names raw. Two light workloads on two H100s (one named with terminal escapes): the MIG
/// plan's table and the sharing plan of the consolidation move show it escaped.
#[test]
fn control_characters_in_workload_names_are_escaped_by_mig_plan_and_share_plan() {
    use super::support::cli::run;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evil.csv");
    let evil = "py\u{1b}[2J\u{1b}]0;owned\u{7}";
    let mut s = String::from(
        "timestamp,entity,metric,value,kind,node,model,gpu,uuid,process,namespace,pod,slurm_job_id\n",
    );
    for i in 1..=180i64 {
        let t = T0 + 60 * i;
        for g in 0..2 {
            for (m, v) in [
                ("gpu_busy_ratio", 0.05),
                ("memory_used_bytes", 4e9),
                ("memory_total_bytes", 80e9),
            ] {
                let _ = writeln!(
                    s,
                    "{t},GPU-{g},{m},{v},gpu,n1,NVIDIA H100 80GB HBM3,{g},GPU-{g},,,,"
                );
            }
            let (ns, pod) = if g == 0 {
                ("ns\u{1b}[31m", "pod\u{9b}1")
            } else {
                ("ns", "plain")
            };
            let _ = writeln!(
                s,
                "{t},{},memory_used_bytes,4e9,process,n1,,{g},GPU-{g},{evil},{ns},{pod},",
                4242 + g
            );
        }
    }
    std::fs::write(&path, s).unwrap();
    let src = format!("csv:{}", path.display());
    let plan = dir.path().join("mig.yaml");
    let moves = dir.path().join("moves.yaml");
    let (code, out, err) = run(&[
        "mig",
        "plan",
        "--source",
        &src,
        "-o",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(&[
        "analyze",
        "--source",
        &src,
        "--plan-out",
        moves.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, share, err) = run(&[
        "share",
        "plan",
        "--plan",
        moves.to_str().unwrap(),
        "--source",
        &src,
        "--scheduler",
        "kubernetes",
    ]);
    assert_eq!(code, 0, "{err}");
    for (what, text) in [("mig plan", &out), ("share plan", &share)] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\u{9b}'),
            "{what} holds a raw control character:\n{text}"
        );
        assert!(
            text.contains("\\u{1b}"),
            "{what} shows the name escaped:\n{text}"
        );
    }
}
