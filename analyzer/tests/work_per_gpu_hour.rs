//! Work per GPU-hour in the report (issue 60; docs/work.md) through a real Prometheus (Debian's;
//! fails, never skips, without it): one simulated day of `fixtures/scenarios/allocated.toml`
//! written as tessera-exporter's series with `tessera_gpu_pod_info` from the rows' pod holders
//! (as `prometheus_holders.rs`), beside planted serving-framework counters with the `namespace`
//! and `pod` labels kube-prometheus adds: vLLM's generated tokens for serving/api-0 (a whole
//! H100 all day) at 50 a second with a counter reset at noon, and Triton's inferences for
//! research/embed-0 (a MIG 3g.40gb instance all day) at 8 a second until noon and 4 after. The
//! planted truth, computed here from the planted rates: 50 × 3600 = 180,000 tokens per GPU-hour
//! for serving and 6 × 3600 ÷ 3/7 = 50,400 inferences per GPU-hour for research (an instance-hour
//! of a 3g.40gb is 3/7 of a GPU-hour)
//! over the day; the pods that hold GPUs and count nothing (notebooks/nb-alice,
//! research/nb-carol) are "no work metric", never 0. Around a change given at noon
//! (`--change-at`): serving's tokens per GPU-hour held (not flagged), research's halved on the
//! same instance (flagged: not a plain saving), in JSON, text and HTML.

use std::fmt::Write as _;

use serde_json::Value;

use crate::support::openmetrics::{self as om, DAY_MS, openmetrics_with_holders, rfc3339};
use crate::support::prometheus as prom;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/scenarios/allocated.toml"
);

/// A counter sampled every minute of the day at `rates.0` a second until noon and `rates.1`
/// after, reset to 0 at `reset` (ms after `since`) when given. `name` is the series name as the server exposes it: an
/// OpenMetrics counter family for a `_total` name (vLLM's), else an untyped family (Triton's
/// `nv_inference_count`, a counter without the suffix in its text exposition).
fn counter(
    s: &mut String,
    name: &str,
    labels: &str,
    since: i64,
    rates: (f64, f64),
    reset: Option<i64>,
) {
    match name.strip_suffix("_total") {
        Some(family) => writeln!(s, "# TYPE {family} counter"),
        None => writeln!(s, "# TYPE {name} unknown"),
    }
    .unwrap();
    let (mut v, mut last) = (0.0, 0);
    for m in 0..=(DAY_MS / 60_000) {
        let t = m * 60_000;
        // The first rate until noon, the second after.
        let rate = if t <= DAY_MS / 2 { rates.0 } else { rates.1 };
        v += rate * (t - last) as f64 / 1000.0;
        last = t;
        if reset == Some(t) {
            v = 0.0;
        }
        let _ = writeln!(
            s,
            "{name}{{{labels}}} {v} {:.3}",
            (since + t) as f64 / 1000.0
        );
    }
}

/// tessera-exporter's energy counter of one GPU, from the history rows' energy (cumulative).
fn energy_counter(s: &mut String, gpu: &polars::prelude::DataFrame, node: &str, index: &str) {
    let (n, g, u) = (
        om::strs(gpu, "node"),
        om::strs(gpu, "gpu"),
        om::strs(gpu, "uuid"),
    );
    let (j, ts) = (om::f64s(gpu, "energy_delta_joules"), om::f64s(gpu, "ts"));
    let mut rows: Vec<(f64, f64, String)> = (0..gpu.height())
        .filter(|&i| n[i].as_deref() == Some(node) && g[i].as_deref() == Some(index))
        .filter_map(|i| Some((ts[i]?, j[i]?, u[i].clone()?)))
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let _ = writeln!(s, "# TYPE tessera_gpu_energy_joules counter");
    let mut total = 0.0;
    for (t, joules, uuid) in rows {
        total += joules;
        let _ = writeln!(
            s,
            "tessera_gpu_energy_joules_total{{instance=\"{node}:19435\",gpu=\"{index}\",uuid=\"{uuid}\"}} {total} {:.3}",
            t / 1000.0
        );
    }
}

fn figure<'a>(w: &'a Value, key: &str, pod: Option<&str>, unit: &str) -> &'a Value {
    let list = if pod.is_some() {
        &w["pods"]
    } else {
        &w["teams"]
    };
    list.as_array()
        .unwrap()
        .iter()
        .find(|f| f["namespace"] == key && f["unit"] == unit && f["pod"].as_str() == pod)
        .unwrap_or_else(|| panic!("no {key} {pod:?} {unit}: {w:#}"))
}

#[test]
fn the_report_gives_the_planted_work_per_gpu_hour_and_unknown_stays_unknown() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let toml = std::fs::read_to_string(FIXTURE).unwrap();
    let (gpu, mig, process, since) = om::simulate(tmp.path(), &toml, "allocated");
    let mut text = openmetrics_with_holders(&gpu, &mig, &process, &["k8s-1", "mig-1"]);
    text.truncate(text.len() - "# EOF\n".len());
    counter(
        &mut text,
        "vllm:generation_tokens_total",
        "namespace=\"serving\",pod=\"api-0\",model_name=\"chat\"",
        since,
        (50.0, 50.0),
        Some(DAY_MS / 2),
    );
    counter(
        &mut text,
        "nv_inference_count",
        "namespace=\"research\",pod=\"embed-0\",model=\"embed\",version=\"1\"",
        since,
        (8.0, 4.0),
        None,
    );
    // nb-alice, whose held GPU the report says to release, serves a trickle: 0.01 tokens a
    // second, 36 per GPU-hour, beside the action.
    counter(
        &mut text,
        "vllm:generation_tokens_total",
        "namespace=\"notebooks\",pod=\"nb-alice\",model_name=\"tiny\"",
        since,
        (0.01, 0.01),
        None,
    );
    energy_counter(&mut text, &gpu, "k8s-1", "0");
    text.push_str("# EOF\n");
    let server = prom::serve(tmp.path(), &text);
    let src = format!("prometheus:{}", server.url);
    let (from, to) = (rfc3339(since), rfc3339(since + DAY_MS));
    let run = |format: &str| crate::support::cli::report(&src, (&from, &to), "10s", format, &[]);
    let r: Value = serde_json::from_str(&run("json")).unwrap();
    let w = &r["work"];
    let close = |f: &Value, want: f64| {
        let got = f["per_gpu_hour"]
            .as_f64()
            .unwrap_or_else(|| panic!("{f:#}"));
        assert!(
            (got - want).abs() <= want * 0.005,
            "{got} vs the planted {want}: {f:#}"
        );
    };
    let serving = figure(w, "serving", None, "tokens");
    close(serving, 50.0 * 3600.0);
    // The day's whole hours (the first hour's increase needs a sample before it: 23 or 24).
    assert!(serving["hours"].as_u64().unwrap() >= 23, "{serving:#}");
    assert!(
        (serving["gpu_hours"].as_f64().unwrap() - serving["hours"].as_f64().unwrap()).abs() < 0.05,
        "one GPU: {serving:#}"
    );
    close(figure(w, "serving", Some("api-0"), "tokens"), 50.0 * 3600.0);
    let api = w["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["workload"] == "api" && f["unit"] == "tokens")
        .unwrap_or_else(|| panic!("the workload of api-0: {w:#}"));
    close(api, 50.0 * 3600.0);
    // Energy: the history's own energy of serving's GPU (k8s-1 GPU 0) over the day, against
    // the kWh the join counted (the counted hours' share of the day).
    let day_kwh: f64 = {
        let (node, g) = (om::strs(&gpu, "node"), om::strs(&gpu, "gpu"));
        let j = om::f64s(&gpu, "energy_delta_joules");
        (0..gpu.height())
            .filter(|&i| node[i].as_deref() == Some("k8s-1") && g[i].as_deref() == Some("0"))
            .filter_map(|i| j[i])
            .sum::<f64>()
            / 3.6e6
    };
    let kwh = serving["kwh"]
        .as_f64()
        .unwrap_or_else(|| panic!("{serving:#}"));
    let share = serving["hours"].as_f64().unwrap() / 24.0;
    assert!(
        (kwh - day_kwh * share).abs() <= day_kwh * 0.05,
        "{kwh} kWh vs {day_kwh} × {share}"
    );
    let work = serving["work"].as_f64().unwrap();
    let per_kwh = serving["per_kwh"].as_f64().unwrap();
    assert!(
        (per_kwh - work / kwh).abs() <= per_kwh * 0.001,
        "{serving:#}"
    );
    let prices = &r["prices"];
    let cost = serving["gpu_hours"].as_f64().unwrap() * prices["gpu_hour"].as_f64().unwrap()
        + kwh * prices["kwh"].as_f64().unwrap();
    let per_cost = serving["per_cost"].as_f64().unwrap();
    assert!(
        (per_cost - work / cost).abs() <= per_cost * 0.001,
        "{serving:#}"
    );
    // Per hour of week: one day's slots, each the planted rate.
    let week = serving["hour_of_week"].as_array().unwrap();
    assert_eq!(week.len(), 168);
    let known: Vec<f64> = week.iter().filter_map(Value::as_f64).collect();
    assert!(known.len() >= 23, "{known:?}");
    for v in &known {
        assert!((v - 180_000.0).abs() <= 180_000.0 * 0.03, "{known:?}");
    }
    let research = figure(w, "research", None, "inferences");
    // A 3g.40gb instance-hour is 3/7 of a GPU-hour.
    close(research, 6.0 * 3600.0 * 7.0 / 3.0);
    // A MIG instance's energy is its GPU's: unknown per instance, never 0.
    assert!(
        research["kwh"].is_null() && research["per_kwh"].is_null(),
        "{research:#}"
    );
    assert!(
        (research["gpu_hours"].as_f64().unwrap() - research["hours"].as_f64().unwrap() * 3.0 / 7.0)
            .abs()
            < 0.05,
        "one instance: {research:#}"
    );
    // Units apart: no team figure adds tokens to inferences.
    assert_eq!(w["teams"].as_array().unwrap().len(), 3, "{w:#}");
    let none: Vec<&str> = w["no_work_metric"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(none, ["research/nb-carol"], "{w:#}");
    // The release action of nb-alice's GPU carries its work per GPU-hour.
    let release = r["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "release" && a["what"].as_str().unwrap().contains("nb-alice"))
        .unwrap_or_else(|| panic!("{:#}", r["actions"]));
    close(&release["work"][0], 36.0);
    assert!(
        release["evidence"]
            .as_str()
            .unwrap()
            .contains("Work: notebooks/nb-alice did 36 tokens per GPU-hour"),
        "{release:#}"
    );

    // Around a change at noon: serving held, research halved.
    let noon = rfc3339(since + DAY_MS / 2);
    let at = ["--change-at", noon.as_str()];
    let json = crate::support::cli::report(&src, (&from, &to), "10s", "json", &at);
    let r: Value = serde_json::from_str(&json).unwrap();
    let cmp = &r["changes"]["changes"][0]["comparison"]["work_per_gpu_hour"];
    let of = |team: &str| {
        cmp.as_array()
            .unwrap()
            .iter()
            .find(|c| c["team"] == team)
            .unwrap_or_else(|| panic!("{team}: {cmp:#}"))
            .clone()
    };
    let (s, re) = (of("serving"), of("research"));
    assert!(s["change"].as_f64().unwrap().abs() < 0.01, "{s:#}");
    assert_eq!(s["flagged"], false, "{s:#}");
    assert!(
        (re["before"].as_f64().unwrap() - 67_200.0).abs() < 350.0,
        "{re:#}"
    );
    assert!(
        (re["after"].as_f64().unwrap() - 33_600.0).abs() < 175.0,
        "{re:#}"
    );
    assert_eq!(re["flagged"], true, "{re:#}");
    for format in ["table", "html"] {
        let text = crate::support::cli::report(&src, (&from, &to), "10s", format, &at);
        assert!(
            text.contains("Work per GPU-hour, research (inferences)")
                && text.contains("flagged: it fell by more than 30%"),
            "{format}: {text}"
        );
        assert!(
            !text.contains("research (inferences): 67,200 before, 67,"),
            "{format}"
        );
    }

    let text = run("table");
    assert!(text.contains("Work per GPU-hour"), "{text}");
    assert!(
        text.contains("No work metric (GPUs held, work unknown): research/nb-carol"),
        "{text}"
    );
    let html = run("html");
    assert!(
        html.contains("Work per GPU-hour"),
        "the HTML report has the section"
    );
}

/// `tessera report ARGS` through the built binary: its stdout, asserting success.
fn report(args: &[&str]) -> String {
    let out = crate::support::cli::tessera(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The user's own counters (`--work-metrics FILE`, docs/work.md "Other work"): a trainer's
/// `trainer_steps_total` planted for research/nb-carol (a MIG 3g.40gb instance all day) at 2.5
/// steps a second with a counter reset at 08:00, declared with a selector that leaves out the
/// same family's `job="eval"` series (100 a second); beside it the built-in Triton inferences of
/// research/embed-0 and an undeclared `undeclared_steps_total` of notebooks/nb-alice, which must
/// not count. The planted truth: 2.5 × 3600 = 9,000 steps per GPU-hour (per instance-hour) for
/// the pod and the team, units apart from research's inferences; nb-alice (and serving/api-0,
/// whose counter is not planted here) stay "no work metric".
#[test]
fn declared_work_counters_are_read_as_the_built_in_ones() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let toml = std::fs::read_to_string(FIXTURE).unwrap();
    let (gpu, mig, process, since) = om::simulate(tmp.path(), &toml, "allocated");
    let mut text = openmetrics_with_holders(&gpu, &mig, &process, &["k8s-1", "mig-1"]);
    text.truncate(text.len() - "# EOF\n".len());
    let steps_rate = 2.5;
    counter(
        &mut text,
        "trainer_steps_total",
        "namespace=\"research\",pod=\"nb-carol\",job=\"trainer\"",
        since,
        (steps_rate, steps_rate),
        Some(DAY_MS / 3),
    );
    counter(
        &mut text,
        "trainer_steps_total",
        "namespace=\"research\",pod=\"nb-carol\",job=\"eval\"",
        since,
        (100.0, 100.0),
        None,
    );
    counter(
        &mut text,
        "nv_inference_count",
        "namespace=\"research\",pod=\"embed-0\",model=\"embed\",version=\"1\"",
        since,
        (8.0, 8.0),
        None,
    );
    counter(
        &mut text,
        "undeclared_steps_total",
        "namespace=\"notebooks\",pod=\"nb-alice\"",
        since,
        (1.0, 1.0),
        None,
    );
    text.push_str("# EOF\n");
    let server = prom::serve(tmp.path(), &text);
    let file = tmp.path().join("work.toml");
    std::fs::write(
        &file,
        "# A trainer's steps, and samples nobody counts yet.\n\
         [[work]]\nunit = \"steps\"\ncounter = 'trainer_steps_total{job=\"trainer\"}'\n\n\
         [[work]]\nunit = \"samples\"\ncounter = \"trainer_samples_total\"\n",
    )
    .unwrap();
    let src = format!("prometheus:{}", server.url);
    let (from, to) = (rfc3339(since), rfc3339(since + DAY_MS));
    let args = |format: &'static str| -> Vec<String> {
        [
            "report",
            "--source",
            &src,
            "--since",
            &from,
            "--until",
            &to,
            "--interval",
            "10s",
            "--format",
            format,
            "--no-replay",
            "--trend.weeks",
            "0",
            "--work-metrics",
            file.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec()
    };
    let json = args("json");
    let r: Value = serde_json::from_str(&report(
        &json.iter().map(String::as_str).collect::<Vec<_>>(),
    ))
    .unwrap();
    let w = &r["work"];
    // The planted truth, from the planted rate: one 3g.40gb instance, 3/7 of a GPU-hour an hour.
    let per_hour = steps_rate * 3600.0;
    let truth = per_hour * 7.0 / 3.0;
    for f in [
        figure(w, "research", None, "steps"),
        figure(w, "research", Some("nb-carol"), "steps"),
    ] {
        let got = f["per_gpu_hour"]
            .as_f64()
            .unwrap_or_else(|| panic!("{f:#}"));
        assert!(
            (got - truth).abs() <= truth * 0.005,
            "{got} vs the planted {truth}: {f:#}"
        );
        let hours = f["hours"].as_f64().unwrap();
        assert!(hours >= 23.0, "the day's whole hours: {f:#}");
        assert!(
            (f["work"].as_f64().unwrap() - per_hour * hours).abs() <= per_hour * hours * 0.005,
            "{f:#}"
        );
        assert!(
            (f["gpu_hours"].as_f64().unwrap() - hours * 3.0 / 7.0).abs() < 0.05,
            "{f:#}"
        );
    }
    let inferences = figure(w, "research", None, "inferences");
    let got = inferences["per_gpu_hour"].as_f64().unwrap();
    let want = 8.0 * 3600.0 * 7.0 / 3.0;
    assert!((got - want).abs() <= want * 0.005, "{inferences:#}");
    // Units apart; the undeclared counter and the unplanted `samples` count nothing.
    let units: Vec<(&str, &str)> = w["teams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["namespace"].as_str().unwrap(),
                t["unit"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        units,
        [("research", "inferences"), ("research", "steps")],
        "{w:#}"
    );
    assert_eq!(
        w["no_work_metric"],
        serde_json::json!(["notebooks/nb-alice", "serving/api-0"]),
        "{w:#}"
    );
    assert_eq!(
        w["declared"],
        serde_json::json!([
            {"unit": "steps", "counter": "trainer_steps_total{job=\"trainer\"}"},
            {"unit": "samples", "counter": "trainer_samples_total"}
        ]),
        "{w:#}"
    );
    let table = args("table");
    let text = report(&table.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        text.contains("research/nb-carol") && text.contains("steps: trainer_steps_total"),
        "{text}"
    );
}

/// A bad `--work-metrics` file fails before any data is read, with exit status 2 and a message
/// naming the file, the entry and what was expected; a missing file names the file.
#[test]
fn a_bad_work_metrics_file_is_refused_naming_the_entry() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("work.toml");
    // Nothing listens on port 1: the file must fail first.
    let run = |path: &std::path::Path| {
        crate::support::cli::run(&[
            "report",
            "--source",
            "prometheus:http://127.0.0.1:1",
            "--work-metrics",
            path.to_str().unwrap(),
        ])
    };
    for (body, want) in [
        (
            "[[work]]\nunit = \"steps\"\ncounter = \"trainer_steps_total\"\n\n[[work]]\nunit = \"samples\"\ncounter = \"rate(trainer_samples_total[5m])\"\n",
            "entry 2 (line 5): counter \"rate(trainer_samples_total[5m])\"",
        ),
        (
            "[[work]]\nunit = \"Steps per second\"\ncounter = \"trainer_steps_total\"\n",
            "entry 1 (line 1): unit \"Steps per second\": expected a name of 1 to 32 lower-case letters",
        ),
        ("[[work]]\nunit = \"steps\"\n", "missing field `counter`"),
        ("[work]\nunit = 3\n", "expected [[work]] entries"),
    ] {
        std::fs::write(&file, body).unwrap();
        let (code, _, err) = run(&file);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("bad work metrics file {}", file.display()))
                && err.contains(want),
            "{want}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    let (code, _, err) = run(&tmp.path().join("absent.toml"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("reading work metrics file") && err.contains("absent.toml"),
        "{err}"
    );
}
