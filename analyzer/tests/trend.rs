//! The report's trend (issue 55 item 3; docs/report.md "Trend") on
//! `fixtures/scenarios/trend.toml`: five weeks that start and end mid-hour (10:30 UTC), an idle
//! model loaded in weeks 1-2 only, a GPU held and unused in weeks 1-3, training from week 4. The
//! planted truth is the independent answer for the waste per week; each week's row must also be
//! what a report over that week alone says (`--since/--until` the week, no trend), figure by
//! figure.

use std::path::Path;

use serde_json::Value;

use crate::support::cli::run;

/// The scenario's start, unix ms (2026-10-05T10:30:00Z), and one week.
const START_MS: i64 = 1_791_196_200_000;
const WEEK_MS: i64 = 7 * 24 * 3_600_000;

fn simulate(dir: &Path, days: u32) -> String {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/trend.toml");
    let out = dir.join("history");
    let (code, _, err) = run(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--days",
        &days.to_string(),
        "--sample-interval",
        "60s",
        "--history.interval",
        "5m",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    format!("history:{}", out.display())
}

fn report(src: &str, extra: &[&str]) -> Value {
    let mut args = vec!["report", "--source", src, "--format", "json"];
    args.extend(extra);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).expect("report JSON")
}

fn ms(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("a number: {v}"))
}

#[test]
fn each_week_is_its_own_report_and_follows_the_planted_waste() {
    let tmp = tempfile::tempdir().unwrap();
    let src = simulate(tmp.path(), 35);
    let doc = report(&src, &[]);
    let t = &doc["trend"];
    assert_eq!(t["weeks_asked"], 4, "{t:#}");
    let weeks = t["weeks"].as_array().unwrap();
    assert_eq!(weeks.len(), 4, "{t:#}");
    // Weeks 2-5 of the scenario, oldest first, each 168 h, ending at the report's end.
    for (i, w) in weeks.iter().enumerate() {
        let k = i as i64 + 2;
        assert_eq!(ms(&w["from"]), START_MS + (k - 1) * WEEK_MS, "{w}");
        assert_eq!(ms(&w["until"]), START_MS + k * WEEK_MS, "{w}");
        assert_eq!(f(&w["hours"]), 168.0, "{w}");
        assert_eq!(w["gpus"], 4, "{w}");
    }
    assert_eq!(weeks[3]["until"], doc["until"]);

    // The planted waste: the idle model in week 2 only (of these), the held GPU in weeks 2-3.
    let idle: Vec<f64> = weeks
        .iter()
        .map(|w| f(&w["idle_loaded_gpu_hours"]))
        .collect();
    let unused: Vec<f64> = weeks
        .iter()
        .map(|w| f(&w["allocated_unused_gpu_hours"]))
        .collect();
    assert!((idle[0] - 168.0).abs() <= 168.0 * 0.05, "{idle:?}");
    assert_eq!(&idle[1..], &[0.0, 0.0, 0.0], "{idle:?}");
    for u in &unused[..2] {
        assert!((u - 168.0).abs() <= 168.0 * 0.05, "{unused:?}");
    }
    assert_eq!(&unused[2..], &[0.0, 0.0], "{unused:?}");
    // Training from week 4: more work than in weeks 2-3.
    let work: Vec<f64> = weeks.iter().map(|w| f(&w["work_utilization"])).collect();
    assert!(
        work[2] > work[1] + 0.15 && work[3] > work[0] + 0.15,
        "{work:?}"
    );
    // Costs priced: idle-loaded GPU-hours × 2.00.
    assert!((f(&weeks[0]["idle_loaded_cost"]) - idle[0] * 2.0).abs() <= 0.01);

    // Each week's row is the week's own report.
    for w in weeks {
        let own = report(
            &src,
            &[
                "--since",
                w["from"].as_str().unwrap(),
                "--until",
                w["until"].as_str().unwrap(),
                "--trend.weeks",
                "0",
            ],
        );
        assert_eq!(own["trend"], Value::Null);
        let fl = &own["fleet"];
        assert_eq!(w["gpu_hours_available"], fl["gpu_hours_available"], "{w}");
        assert_eq!(w["cost"], fl["cost_total"], "{w}");
        assert_eq!(w["energy_kwh"], fl["energy_kwh"], "{w}");
        let util = f(&fl["gpu_hours_busy"]) / f(&fl["gpu_hours_available"]);
        assert!((f(&w["work_utilization"]) - util).abs() <= 0.0005, "{w}");
        let own_idle: f64 = own["idle_models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| f(&m["reclaimable_gpu_hours"]))
            .sum();
        assert!(
            (f(&w["idle_loaded_gpu_hours"]) - own_idle).abs() <= 0.0005,
            "{w}"
        );
        // The cost is the week's own models' costs added, as its summary adds them: equal to
        // the cent, not a product of the rounded hours.
        let own_cost: f64 = own["idle_models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| f(&m["wasted_cost"]))
            .sum();
        assert_eq!(
            format!("{:.2}", f(&w["idle_loaded_cost"])),
            format!("{own_cost:.2}"),
            "{w}"
        );
        assert_eq!(
            w["allocated_unused_gpu_hours"], own["allocation"]["unused_gpu_hours"],
            "{w}"
        );
    }

    // All five weeks when asked for six: the sixth has no data and is left out.
    let six = report(&src, &["--trend.weeks", "6"]);
    assert_eq!(six["trend"]["weeks"].as_array().unwrap().len(), 5);
    assert_eq!(six["trend"]["weeks_asked"], 6);

    // The text and HTML formats show it.
    let (code, table, err) = run(&["report", "--source", &src]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains("Trend — the last 4 weeks"), "{table}");
    assert!(
        table.contains("Mon 12 Oct 10:30 – Mon 19 Oct 10:30 2026"),
        "{table}"
    );
    let html = tmp.path().join("r.html");
    let (code, _, err) = run(&[
        "report",
        "--source",
        &src,
        "--format",
        "html",
        "--out",
        html.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    let start = page.find("<svg id=\"chart-trend\"").expect("trend chart");
    let svg = &page[start..start + page[start..].find("</svg>").unwrap()];
    // One bar per known figure: 4 weeks × 2 figures.
    assert_eq!(svg.matches("class=\"bar ").count(), 8, "{svg}");
    assert!(svg.contains("idle-loaded GPU-hours") && svg.contains("allocated, unused GPU-hours"));
    assert!(page[..start].ends_with("<h2>Waste per week</h2><div class=\"chart\">"));
    let titled = &page[start..start + page[start..].find("</div>").unwrap()];
    assert!(titled.contains("class=\"axis-title\""), "{titled}");
}

#[test]
fn one_week_of_data_is_no_trend_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let src = simulate(tmp.path(), 6);
    let doc = report(&src, &[]);
    assert_eq!(doc["trend"]["weeks"].as_array().unwrap().len(), 1);
    // The one week is the report's own: its figures are the report's, and the data is not read
    // and judged a second time for it (no `timings: trend:` line).
    let timed = |extra: &[&str]| {
        let mut args = vec!["report", "--source", &src, "--format", "json"];
        args.extend(extra);
        let out = crate::support::cli::tessera_with(&args, |c| {
            c.env("TESSERA_TIMINGS", "1");
        });
        assert!(out.status.success());
        let doc: Value = serde_json::from_slice(&out.stdout).expect("report JSON");
        let read = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.starts_with("timings: trend: "))
            .map(str::to_string)
            .collect::<Vec<_>>();
        (doc, read)
    };
    let (own, read) = timed(&[]);
    assert_eq!(own, doc, "timings change nothing");
    assert!(
        read.is_empty(),
        "the report's own week read again: {read:?}"
    );
    let week = &doc["trend"]["weeks"][0];
    assert_eq!(week["from"], doc["from"]);
    assert_eq!(week["hours"], doc["hours"]);
    assert_eq!(
        week["gpu_hours_available"],
        doc["fleet"]["gpu_hours_available"]
    );
    assert_eq!(week["cost"], doc["fleet"]["cost_total"]);
    // A report that starts a day into the data: its week holds rows the report does not, so
    // it is read (and covers more hours than the report).
    let since = "2026-10-06T12:00:00Z";
    let (later, read) = timed(&["--since", since]);
    assert_eq!(read.len(), 1, "{read:?}");
    assert!(read[0].contains("1 earlier week(s) read"), "{read:?}");
    let week = &later["trend"]["weeks"][0];
    assert_eq!(ms(&week["from"]), START_MS, "{week}");
    assert!(f(&week["hours"]) > f(&later["hours"]) + 24.0, "{week}");
    let (code, table, err) = run(&["report", "--source", &src]);
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains("Not enough data for a trend: 1 of the last 4 weeks has data"),
        "{table}"
    );
    // --trend.weeks 0 leaves it out; more than a year is refused.
    assert_eq!(report(&src, &["--trend.weeks", "0"])["trend"], Value::Null);
    let (code, _, err) = run(&["report", "--source", &src, "--trend.weeks", "53"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad --trend.weeks 53: expected 0 to 52"),
        "{err}"
    );
}

/// One week holding a compared layout change (`fixtures/scenarios/consolidation.toml`, four
/// days): no trend, but what the change realized is said in the text as in the JSON.
#[test]
fn one_week_with_a_change_still_says_what_it_realized() {
    let tmp = tempfile::tempdir().unwrap();
    let src = crate::changes::simulate(tmp.path());
    let doc = crate::changes::report(&src, &[]);
    let t = &doc["trend"];
    assert_eq!(t["weeks"].as_array().unwrap().len(), 1, "{t:#}");
    let realized = t["realized"].as_array().unwrap();
    assert_eq!(realized.len(), 1, "{t:#}");
    let (code, table, err) = run(&["report", "--source", &src]);
    assert_eq!(code, 0, "{err}");
    assert!(table.contains("Not enough data for a trend"), "{table}");
    let at = realized[0]["at"].as_str().unwrap();
    assert!(
        table.contains(&format!("Layout change at {at}:")),
        "{at} in\n{table}"
    );
    assert!(
        table.contains("Realized by the layout changes of these weeks"),
        "{table}"
    );
}
