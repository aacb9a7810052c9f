//! Layout changes found in the data and equal periods compared (`tessera report`, issue 34
//! items 1, 4 and 5), end to end on `fixtures/scenarios/consolidation.toml`: ten light services
//! on ten whole GPUs, then the same services in MIG instances on two GPUs.
//!
//! The expected figures are computed here from the scenario's planted truth (its workloads,
//! moves and MIG windows, and the simulator's documented power model), never from tessera's
//! output: the change's time within one history interval, the GPUs in use (10 → 2), GPU-hours
//! in use, of work, idle and free, energy, per node and per team. Through the history source,
//! the generic CSV written from the same rows, a real Prometheus backfilled with them (Debian's,
//! through `promtool tsdb create-blocks-from openmetrics`), and `--change-at`; a range without
//! the change says none; a bad `--change-at` fails with exit 2.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde_json::Value;
use tessera::ingest::{self, IngestOptions, Source};
use tessera_core::sim::Scenario;

use crate::support::cli;
use crate::support::openmetrics::{f64s, strs};
use crate::support::prometheus as prom;

pub(crate) const INTERVAL_MS: i64 = 300_000;
pub(crate) const DAYS: i64 = 4;
const HOUR_MS: f64 = 3_600_000.0;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn fixture() -> PathBuf {
    root().join("fixtures/scenarios/consolidation.toml")
}

pub(crate) fn ok(args: &[&str]) -> String {
    let out = cli::tessera(args);
    assert!(
        out.status.success(),
        "tessera {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The fixture simulated into `dir` (4 days, 60 s samples, 5-minute rows).
pub(crate) fn simulate(dir: &Path) -> String {
    let out = dir.join("history");
    ok(&[
        "simulate",
        "--scenario",
        fixture().to_str().unwrap(),
        "--days",
        &DAYS.to_string(),
        "--sample-interval",
        "60s",
        "--history.interval",
        "5m",
        "--out",
        out.to_str().unwrap(),
    ]);
    format!("history:{}", out.display())
}

pub(crate) fn report(src: &str, extra: &[&str]) -> Value {
    let mut a = vec!["report", "--source", src, "--format", "json"];
    a.extend(extra);
    serde_json::from_str(&ok(&a)).expect("json")
}

/// What the planted truth says one period holds.
#[derive(Debug, Default)]
pub(crate) struct Expected {
    pub(crate) gpus_in_use: usize,
    gpu_hours_in_use: f64,
    gpu_hours_busy: f64,
    gpu_hours_free: f64,
    energy_kwh: f64,
    /// Per node: GPUs in use.
    nodes: BTreeMap<String, usize>,
    /// Per team: GPU-hours (each GPU split evenly between its processes).
    teams: BTreeMap<String, f64>,
}

/// The planted change and both periods' expected figures, from the scenario alone.
pub(crate) struct Truth {
    pub(crate) change_ms: i64,
    hours: f64,
    gpus_changed: usize,
    moved: usize,
    pub(crate) before: Expected,
    pub(crate) after: Expected,
}

pub(crate) fn truth() -> Truth {
    let s = Scenario::from_file(&fixture()).expect("scenario");
    let start = s.start.timestamp_millis();
    let end = start + DAYS * 86_400_000;
    // The change: every move and every MIG window starts at the same instant.
    let ats: BTreeSet<i64> = s
        .workloads
        .iter()
        .flat_map(|w| w.moves.iter().map(|m| m.at.timestamp_millis()))
        .chain(
            s.nodes
                .iter()
                .flat_map(|n| n.mig.iter().filter_map(|m| m.from))
                .map(|f| f.timestamp_millis()),
        )
        .collect();
    assert_eq!(ats.len(), 1, "one planted change: {ats:?}");
    let change = *ats.iter().next().unwrap();
    // Equal periods: the shorter side, outside the documented settling margin, on whole hours.
    let settle = tessera::changes::SETTLE_MS;
    let h = HOUR_MS as i64;
    let (floor, ceil) = (
        |t: i64| t.div_euclid(h) * h,
        |t: i64| -(-t).div_euclid(h) * h,
    );
    let len = (floor(change - settle) - ceil(start)).min(floor(end) - ceil(change + settle));
    assert!(len > 0 && len % INTERVAL_MS == 0);
    let hours = len as f64 / HOUR_MS;
    let gpus_changed: BTreeSet<(&str, u32)> = s
        .nodes
        .iter()
        .flat_map(|n| n.mig.iter().map(move |m| (n.name.as_str(), m.gpu)))
        .collect();
    let t0 = change / 1000 - 3600 * 10;
    let t1 = change / 1000 + 3600 * 10;
    let moved = s
        .workloads
        .iter()
        .filter(|w| {
            let (a, b) = (w.place_at(t0), w.place_at(t1));
            (a.node, a.gpu) != (b.node, b.gpu)
        })
        .count();
    Truth {
        change_ms: change,
        hours,
        gpus_changed: gpus_changed.len(),
        moved,
        before: expected(&s, t0, hours),
        after: expected(&s, t1, hours),
    }
}

/// The fleet at unix second `t` (its state is constant over each period), over `hours`.
fn expected(s: &Scenario, t: i64, hours: f64) -> Expected {
    let mut e = Expected::default();
    for node in &s.nodes {
        let models = s.node_models(node);
        let mut in_use_here = 0;
        for (gi, model) in models.iter().enumerate() {
            let gi = gi as u32;
            let layout = node.mig.iter().find(|m| m.gpu == gi && m.in_force(t));
            let here: Vec<_> = s
                .workloads
                .iter()
                .filter(|w| {
                    let p = w.place_at(t);
                    p.node == node.name && p.gpu == gi
                })
                .collect();
            let (mut sm, mut busy, mut mem) = (0.0, 0.0, 0.0);
            for w in &here {
                // Inference with base = peak and no noise: activity is exactly `peak`.
                assert!(
                    w.base == w.peak && w.noise == 0.0,
                    "{}: constant activity",
                    w.name
                );
                let share = match layout {
                    Some(l) => {
                        let start = w.place_at(t).mig_start.expect("mig_start on a MIG GPU");
                        let inst = l
                            .instances
                            .iter()
                            .find(|i| i.start == start)
                            .expect("instance");
                        let p = model.profile_by_name(&inst.profile).expect("profile");
                        p.compute_slices as f64 / model.compute_slices as f64
                    }
                    None => 1.0,
                };
                sm += w.peak * share;
                busy += (w.peak / w.efficiency).min(1.0) * share;
                mem += w.memory_gib;
            }
            // The driver's 512 MiB outside MIG mode.
            if layout.is_none() {
                mem += 0.5;
            }
            let in_use = mem >= 1.0 || sm > 0.05;
            // docs/scenarios.md: power from idle to the limit with load = 0.25 busy + 0.75 SM.
            let power = model.idle_power_watts
                + (model.power_limit_watts - model.idle_power_watts) * (0.25 * busy + 0.75 * sm);
            e.energy_kwh += power * hours / 1000.0;
            e.gpu_hours_busy += sm * hours;
            if in_use {
                e.gpus_in_use += 1;
                in_use_here += 1;
                e.gpu_hours_in_use += hours;
            } else {
                e.gpu_hours_free += hours;
            }
            for w in &here {
                let team = w.namespace.clone().expect("namespace");
                *e.teams.entry(team).or_default() += hours / here.len() as f64;
            }
        }
        e.nodes.insert(node.name.clone(), in_use_here);
    }
    e
}

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"))
}

#[track_caller]
fn close(got: f64, want: f64, rel: f64, what: &str) {
    assert!(
        (got - want).abs() <= rel * want.abs() + 0.001,
        "{what}: got {got}, expected {want} (±{:.1}%)",
        rel * 100.0
    );
}

/// The comparison of `c` against the planted truth's periods.
fn check_comparison(c: &Value, t: &Truth) {
    let cmp = &c["comparison"];
    assert!(cmp.is_object(), "compared: {c}");
    assert_eq!(num(cmp, "hours"), t.hours);
    assert!(cmp["predicted"].is_null());
    for (side, e) in [("before", &t.before), ("after", &t.after)] {
        let u = &cmp["fleet"][side];
        assert_eq!(num(u, "gpus_in_use"), e.gpus_in_use as f64, "{side}: {u}");
        close(num(u, "gpu_hours_in_use"), e.gpu_hours_in_use, 0.0, side);
        close(num(u, "gpu_hours_free"), e.gpu_hours_free, 0.0, side);
        // SM activity is kept to 3 decimals per sample: within 1%.
        close(num(u, "gpu_hours_busy"), e.gpu_hours_busy, 0.01, side);
        close(
            num(u, "gpu_hours_idle"),
            e.gpu_hours_in_use - e.gpu_hours_busy,
            0.01,
            side,
        );
        close(num(u, "energy_kwh"), e.energy_kwh, 0.01, side);
        for n in cmp["by_node"].as_array().unwrap() {
            let key = n["key"].as_str().unwrap();
            assert_eq!(
                num(&n[side], "gpus_in_use"),
                e.nodes[key] as f64,
                "{side} {key}"
            );
        }
        let teams = cmp["by_team"].as_array().unwrap();
        assert_eq!(teams.len(), e.teams.len(), "{teams:?}");
        for tm in teams {
            let key = tm["team"].as_str().unwrap();
            close(num(&tm[side], "gpu_hours"), e.teams[key], 0.0005, key);
        }
    }
    // The saving: 8 GPUs' worth of GPU-hours given back, less idle time, less energy.
    let d = &cmp["fleet"]["delta"];
    assert_eq!(
        num(d, "gpus_in_use"),
        t.after.gpus_in_use as f64 - t.before.gpus_in_use as f64
    );
    assert!(
        num(d, "energy_kwh") < 0.0 && num(d, "cost_total") < 0.0,
        "{d}"
    );
}

pub(crate) fn change_ms(c: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(c["at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

#[test]
fn a_planted_consolidation_is_found_and_its_saving_measured() {
    let t = truth();
    assert_eq!((t.before.gpus_in_use, t.after.gpus_in_use), (10, 2));
    let tmp = tempfile::tempdir().unwrap();
    let src = simulate(tmp.path());
    let v = report(&src, &[]);
    let sec = &v["changes"];
    assert_eq!(sec["version"], 1);
    assert_eq!(sec["source"], "data");
    let changes = sec["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{sec}");
    let c = &changes[0];
    assert!(
        (change_ms(c) - t.change_ms).abs() <= INTERVAL_MS,
        "found at {}, planted {}",
        c["at"],
        t.change_ms
    );
    assert_eq!(c["gpus_changed"], t.gpus_changed);
    assert_eq!(c["workloads_moved"], t.moved);
    check_comparison(c, &t);
    // The work fell (whole GPUs' activity: a 1g instance counts a seventh of the SMs), but every
    // service runs after the change: moved, not lost (issue 55).
    let work = &c["comparison"]["work"];
    assert_eq!(work["verdict"], "moved", "{work}");
    assert_eq!(work["workloads_before"], 10, "{work}");
    assert_eq!(work["gone"], serde_json::json!([]), "{work}");

    // --change-at the planted time: the same comparison.
    let at = chrono::DateTime::from_timestamp_millis(t.change_ms)
        .unwrap()
        .to_rfc3339();
    let given = report(&src, &["--change-at", &at]);
    assert_eq!(given["changes"]["source"], "given");
    let g = &given["changes"]["changes"][0];
    assert_eq!(g["comparison"], c["comparison"]);
    assert_eq!(g["workloads_moved"], t.moved);

    // A range that ends before the change: none found, said so, nothing compared.
    let until = chrono::DateTime::from_timestamp_millis(t.change_ms - 3 * 3_600_000)
        .unwrap()
        .to_rfc3339();
    let none = report(&src, &["--until", &until]);
    assert_eq!(none["changes"]["changes"], serde_json::json!([]));
    assert!(
        none["changes"]["summary"]
            .as_str()
            .unwrap()
            .starts_with("No layout change found"),
        "{}",
        none["changes"]
    );
    let table = ok(&["report", "--source", &src, "--until", &until]);
    assert!(table.contains("No layout change found"), "{table}");

    // The text formats and the HTML chart.
    let table = ok(&["report", "--source", &src]);
    assert!(table.contains("== Change at"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.contains("GPUs in use (mean)") && l.contains("10.00") && l.contains("2.00")),
        "{table}"
    );
    let md = ok(&["report", "--source", &src, "--format", "markdown"]);
    assert!(
        md.contains("## Change at") && md.contains("| GPUs in use (mean)"),
        "{md}"
    );
    let html = ok(&["report", "--source", &src, "--format", "html"]);
    let chart = html
        .split("<svg id=\"chart-change\"")
        .nth(1)
        .and_then(|s| s.split("</svg>").next())
        .expect("chart-change in the HTML");
    assert_eq!(chart.matches("class=\"bar before\"").count(), 5);
    assert_eq!(chart.matches("class=\"bar after\"").count(), 5);

    // Bad --change-at: outside the range, or not a time: exit 2, nothing on stdout.
    for (value, want) in [
        ("2026-12-01T00:00:00Z", "outside the reported range"),
        ("2026-11-02T00:00:00Z", "outside the reported range"),
        ("next tuesday", "bad --change-at"),
    ] {
        let (code, out, err) = cli::run(&["report", "--source", &src, "--change-at", value]);
        assert_eq!(code, 2, "{value}: {err}");
        assert!(out.is_empty());
        assert!(err.contains(want), "{value}: {err}");
    }

    // The apply journal beside the history (docs/mig-apply.md, "Journal"): the applied run is
    // listed as evidence of the change, which stays at the rows' time with the same comparison;
    // a rolled-back run adds nothing; a journal that does not parse is a warning.
    let dir = src.strip_prefix("history:").unwrap();
    let rfc = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    let line = |ms: i64, run: &str, event: &str, extra: &str| {
        format!(
            "{{\"time\":\"{}\",\"run\":\"{run}\",\"event\":\"{event}\"{extra}}}\n",
            rfc(ms)
        )
    };
    let t0 = t.change_ms - 30_000;
    let journal = [
        line(t0, "r1", "begin", ",\"plan\":\"plan.yaml (consolidate)\""),
        line(t0 + 10_000, "r1", "step", ",\"step\":1,\"result\":\"ok\""),
        line(t0 + 20_000, "r1", "step", ",\"step\":2,\"result\":\"ok\""),
        line(t0 + 50_000, "r1", "end", ",\"result\":\"applied\""),
        line(t0 + 86_400_000, "r2", "begin", ""),
        line(t0 + 86_410_000, "r2", "end", ",\"result\":\"rolled-back\""),
    ]
    .concat();
    std::fs::write(Path::new(dir).join("gpu-a/mig-apply.journal"), journal).unwrap();
    std::fs::write(
        Path::new(dir).join("gpu-b/mig-apply.journal"),
        "not json\n{}\n",
    )
    .unwrap();
    let out = cli::tessera(&["report", "--source", &src, "--format", "json"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gpu-b/mig-apply.journal") && err.contains("not used as evidence"),
        "{err}"
    );
    let with: Value = serde_json::from_slice(&out.stdout).unwrap();
    let wc = with["changes"]["changes"].as_array().unwrap();
    assert_eq!(wc.len(), 1, "{}", with["changes"]);
    assert_eq!(wc[0]["at"], c["at"]);
    assert_eq!(wc[0]["comparison"], c["comparison"]);
    let j: Vec<&Value> = wc[0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "journal")
        .collect();
    assert_eq!(j.len(), 1, "{j:?}");
    assert_eq!(j[0]["subject"], "gpu-a");
    assert_eq!(j[0]["at"], rfc(t0).as_str());
    assert!(
        j[0]["detail"]
            .as_str()
            .unwrap()
            .contains("plan.yaml (consolidate)")
    );
    assert!(
        j[0]["detail"]
            .as_str()
            .unwrap()
            .contains("2 device call(s)")
    );

    // The same rows as a generic CSV: MIG mode unknown there, the instances appearing and the
    // moves find the same change and the same figures.
    let csv = tmp.path().join("rows.csv");
    std::fs::write(&csv, long_csv(&src)).unwrap();
    let from_csv = report(&format!("csv:{}", csv.display()), &[]);
    let cc = from_csv["changes"]["changes"].as_array().unwrap();
    assert_eq!(cc.len(), 1, "{}", from_csv["changes"]);
    assert!(
        (change_ms(&cc[0]) - t.change_ms).abs() <= INTERVAL_MS,
        "{}",
        cc[0]["at"]
    );
    assert_eq!(cc[0]["gpus_changed"], t.gpus_changed);
    assert_eq!(cc[0]["workloads_moved"], t.moved);
    assert!(
        cc[0]["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "mig_layout")
    );
    check_comparison(&cc[0], &t);

    // Without activity and energy in the data, what needs them is unknown (null), never 0; what
    // memory alone tells (GPUs in use) is still measured.
    let text = std::fs::read_to_string(&csv).unwrap();
    let bare: String = text
        .lines()
        .filter(|l| !l.contains(",sm_active_ratio,") && !l.contains(",energy_delta_joules,"))
        .map(|l| format!("{l}\n"))
        .collect();
    let csv2 = tmp.path().join("memory-only.csv");
    std::fs::write(&csv2, bare).unwrap();
    let v2 = report(&format!("csv:{}", csv2.display()), &[]);
    let f = &v2["changes"]["changes"][0]["comparison"]["fleet"];
    for side in ["before", "after"] {
        for k in [
            "gpu_hours_busy",
            "gpu_hours_idle",
            "work_utilization",
            "energy_kwh",
            "cost_energy",
        ] {
            assert!(f[side][k].is_null(), "{side}.{k} unknown: {}", f[side]);
        }
    }
    assert_eq!(
        num(&f["before"], "gpus_in_use"),
        t.before.gpus_in_use as f64
    );
    assert_eq!(num(&f["after"], "gpus_in_use"), t.after.gpus_in_use as f64);
    assert!(f["delta"]["energy_kwh"].is_null() && f["delta"]["gpu_hours_busy"].is_null());
    // The report's own usage says the same: GPU-hours of work unknown, not 0.
    for u in std::iter::once(&v2["fleet"]).chain(v2["by_node"].as_array().unwrap()) {
        assert!(u["gpu_hours_busy"].is_null(), "{u}");
        assert!(u["activity_mean"].is_null(), "{u}");
    }
    let table = ok(&["report", "--source", &format!("csv:{}", csv2.display())]);
    let summary = &table[..table.find("== Change at").expect("a change section")];
    let work = summary
        .lines()
        .find(|l| l.contains("GPU-hours of work"))
        .expect("the summary's row");
    assert!(work.contains("unknown") && !work.contains(" 0 "), "{work}");
    let change = &table[table.find("== Change at").expect("a change section")..];
    let line = change
        .lines()
        .find(|l| l.contains("GPU-hours of work"))
        .expect("row");
    assert!(line.contains("unknown"), "{line}");
}

/// The history's frames (gpu rows sorted by node, GPU and `ts`).
pub(crate) fn frames(src: &str) -> (DataFrame, DataFrame, DataFrame) {
    let dir = src.strip_prefix("history:").unwrap();
    let (frames, _) = ingest::ingest(
        &[Source::history(dir.to_string())],
        &IngestOptions::default(),
    )
    .expect("ingest");
    let c = |lf: LazyFrame| lf.collect().expect("collect");
    let gpu = c(frames
        .gpu
        .sort(["node", "gpu", "ts"], SortMultipleOptions::default()));
    (gpu, c(frames.mig), c(frames.process))
}

/// One OpenMetrics sample per row, at the row's end, labelled with its node as the scrape
/// target and `labels`; `value` of each row (rows without one are left out).
fn series(out: &mut String, name: &str, df: &DataFrame, labels: &[&str], value: &[Option<f64>]) {
    let cols: Vec<(&str, Vec<Option<String>>)> = labels.iter().map(|c| (*c, strs(df, c))).collect();
    let (node, ts) = (strs(df, "node"), f64s(df, "ts"));
    for i in 0..df.height() {
        let (Some(v), Some(t), Some(n)) = (value[i], ts[i], &node[i]) else {
            continue;
        };
        let mut l = format!("instance=\"{n}:19435\"");
        for (c, vals) in &cols {
            if let Some(v) = &vals[i] {
                let _ = write!(l, ",{c}=\"{v}\"");
            }
        }
        let _ = writeln!(out, "{name}{{{l}}} {v} {:.3}", t / 1000.0);
    }
}

/// The history's rows as tessera-exporter's OpenMetrics, one sample per row at its end: SM
/// activity, memory, MIG mode and the energy counter per GPU; MIG instances with their identity;
/// processes with their pod.
pub(crate) fn openmetrics(src: &str) -> String {
    let (gpu, mig, process) = frames(src);
    let mut s = String::new();
    let g = &["gpu", "uuid"];
    for (name, col) in [
        ("tessera_gpu_sm_active_ratio", "sm_active_mean"),
        ("tessera_gpu_memory_used_bytes", "memory_used_max_bytes"),
        ("tessera_gpu_memory_total_bytes", "memory_total_bytes"),
        ("tessera_gpu_power_watts", "power_mean_watts"),
    ] {
        let _ = writeln!(s, "# TYPE {name} gauge");
        series(&mut s, name, &gpu, g, &f64s(&gpu, col));
    }
    let _ = writeln!(s, "# TYPE tessera_gpu_mig_enabled gauge");
    series(
        &mut s,
        "tessera_gpu_mig_enabled",
        &gpu,
        g,
        &f64s(&gpu, "mig_enabled"),
    );
    // The energy counter: each GPU's deltas summed in time order (rows sorted by GPU and ts).
    let (keys, delta) = (strs(&gpu, "uuid"), f64s(&gpu, "energy_delta_joules"));
    let mut total = BTreeMap::<String, f64>::new();
    let counter: Vec<Option<f64>> = (0..gpu.height())
        .map(|i| {
            let t = total
                .entry(keys[i].clone().unwrap_or_default())
                .or_insert(1.0e6);
            *t += delta[i]?;
            Some(*t)
        })
        .collect();
    let _ = writeln!(s, "# TYPE tessera_gpu_energy_joules counter");
    series(&mut s, "tessera_gpu_energy_joules_total", &gpu, g, &counter);
    let m = &[
        "gpu",
        "uuid",
        "gpu_instance",
        "compute_instance",
        "profile",
        "profile_id",
        "placement_start",
        "placement_size",
        "mig_uuid",
    ];
    let _ = writeln!(s, "# TYPE tessera_mig_memory_used_bytes gauge");
    series(
        &mut s,
        "tessera_mig_memory_used_bytes",
        &mig,
        m,
        &f64s(&mig, "memory_used_max_bytes"),
    );
    let _ = writeln!(s, "# TYPE tessera_mig_info gauge");
    series(
        &mut s,
        "tessera_mig_info",
        &mig,
        m,
        &vec![Some(1.0); mig.height()],
    );
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
    let _ = writeln!(s, "# TYPE tessera_process_memory_used_bytes gauge");
    series(
        &mut s,
        "tessera_process_memory_used_bytes",
        &process,
        p,
        &f64s(&process, "memory_used_max_bytes"),
    );
    s.push_str("# EOF\n");
    s
}

/// The same history backfilled into a real Prometheus and read through `prometheus:`: the same
/// change, at the same time, with the same figures.
#[test]
fn a_planted_consolidation_is_found_through_a_backfilled_prometheus() {
    prom::require_tools();
    let t = truth();
    let tmp = tempfile::tempdir().unwrap();
    let src = simulate(tmp.path());
    let server = prom::serve(tmp.path(), &openmetrics(&src));
    let s = Scenario::from_file(&fixture()).unwrap();
    let start = s.start.timestamp_millis();
    let rfc = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339()
    };
    let (since, until) = (rfc(start), rfc(start + DAYS * 86_400_000));
    let v = report(
        &format!("prometheus:{}", server.url),
        &["--since", &since, "--until", &until],
    );
    let cc = v["changes"]["changes"].as_array().unwrap();
    assert_eq!(cc.len(), 1, "{}", v["changes"]);
    assert!(
        (change_ms(&cc[0]) - t.change_ms).abs() <= INTERVAL_MS,
        "{}",
        cc[0]["at"]
    );
    assert_eq!(cc[0]["gpus_changed"], t.gpus_changed);
    assert_eq!(cc[0]["workloads_moved"], t.moved);
    check_comparison(&cc[0], &t);
}

/// The history's rows as the generic long CSV (docs/frames.md): GPU rows with SM activity,
/// memory and energy; MIG instances with their profile and placement; processes with their pod,
/// one entity per process and GPU (a process that moves is a new one, as on a real node).
fn long_csv(src: &str) -> String {
    let (gpu, mig, process) = frames(src);
    let mut out = String::from(
        "timestamp,entity,metric,value,kind,node,gpu,uuid,model,profile,placement_start,pid,process,namespace,pod\n",
    );
    let secs = |ts: Option<f64>| ts.unwrap() / 1000.0;
    let (ts, node, idx, uuid, model) = (
        f64s(&gpu, "ts"),
        strs(&gpu, "node"),
        strs(&gpu, "gpu"),
        strs(&gpu, "uuid"),
        strs(&gpu, "model"),
    );
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    for (metric, column) in [
        ("sm_active_ratio", "sm_active_mean"),
        ("memory_used_bytes", "memory_used_max_bytes"),
        ("memory_total_bytes", "memory_total_bytes"),
        ("energy_delta_joules", "energy_delta_joules"),
    ] {
        let v = f64s(&gpu, column);
        for i in 0..gpu.height() {
            let Some(v) = v[i] else { continue };
            let _ = writeln!(
                out,
                "{},{},{metric},{v},gpu,{},{},{},{},,,,,,",
                secs(ts[i]),
                s(&uuid[i]),
                s(&node[i]),
                s(&idx[i]),
                s(&uuid[i]),
                s(&model[i])
            );
        }
    }
    let (ts, node, idx, uuid, mig_uuid, profile, start, mem) = (
        f64s(&mig, "ts"),
        strs(&mig, "node"),
        strs(&mig, "gpu"),
        strs(&mig, "uuid"),
        strs(&mig, "mig_uuid"),
        strs(&mig, "profile"),
        strs(&mig, "placement_start"),
        f64s(&mig, "memory_used_max_bytes"),
    );
    for i in 0..mig.height() {
        let _ = writeln!(
            out,
            "{},{},memory_used_bytes,{},mig,{},{},{},,{},{},,,,",
            secs(ts[i]),
            s(&mig_uuid[i]),
            mem[i].unwrap_or(0.0),
            s(&node[i]),
            s(&idx[i]),
            s(&uuid[i]),
            s(&profile[i]),
            s(&start[i])
        );
    }
    let (ts, node, idx, uuid, pid, name, ns, pod, mem) = (
        f64s(&process, "ts"),
        strs(&process, "node"),
        strs(&process, "gpu"),
        strs(&process, "uuid"),
        strs(&process, "pid"),
        strs(&process, "process"),
        strs(&process, "namespace"),
        strs(&process, "pod"),
        f64s(&process, "memory_used_max_bytes"),
    );
    for i in 0..process.height() {
        let _ = writeln!(
            out,
            "{},{}@{}/{},memory_used_bytes,{},process,{},{},{},,,,{},{},{},{}",
            secs(ts[i]),
            s(&pid[i]),
            s(&node[i]),
            s(&idx[i]),
            mem[i].unwrap_or(0.0),
            s(&node[i]),
            s(&idx[i]),
            s(&uuid[i]),
            s(&pid[i]),
            s(&name[i]),
            s(&ns[i]),
            s(&pod[i])
        );
    }
    out
}

/// Predicted beside realized: a MIG plan made (and replayed, `--write-prediction`) on the
/// period before the planted change predicts the ten services on two GPUs — what the planted
/// change did — so the report with `--plan` finds the realized saving as predicted; the same
/// plan claiming a better outcome is a large difference the data does not explain; a plan
/// without a prediction is refused with what to run.
#[test]
fn the_plans_prediction_is_set_beside_the_realized_saving() {
    let dir = tempfile::tempdir().unwrap();
    let src = simulate(dir.path());
    let t = truth();
    let plan = dir.path().join("plan.yaml");
    let before = "2026-11-02..2026-11-04T12:00:00Z";
    let replay: Value = serde_json::from_str(&ok(&[
        "replay",
        "--source",
        &src,
        "--train",
        before,
        "--test",
        before,
        "--kind",
        "mig",
        "--plan-out",
        plan.to_str().unwrap(),
        "--write-prediction",
        "--format",
        "json",
    ]))
    .unwrap();
    // Ten services of 6 GiB at 0.1: one 1g.10gb each, seven to a GPU: two GPUs.
    assert_eq!(replay["fleet"]["gpus_before"], t.before.gpus_in_use);
    assert_eq!(
        replay["fleet"]["gpus_after"], t.after.gpus_in_use,
        "{replay:#}"
    );
    let r = report(&src, &["--plan", plan.to_str().unwrap()]);
    let c = &r["changes"]["changes"][0];
    let p = &c["comparison"]["predicted"];
    assert_eq!(p["plan"], plan.to_str().unwrap());
    let freed = (t.before.gpus_in_use - t.after.gpus_in_use) as f64;
    assert_eq!(num(p, "gpus_freed_predicted"), freed, "{p:#}");
    close(
        num(p, "gpus_freed_realized"),
        freed,
        0.02,
        "realized GPUs freed",
    );
    assert_eq!(p["large_difference"], false, "{p:#}");
    assert!(
        p["explanation"][0]
            .as_str()
            .unwrap()
            .starts_with("as predicted"),
        "{p:#}"
    );
    let text = ok(&["report", "--source", &src, "--plan", plan.to_str().unwrap()]);
    assert!(text.contains("Predicted by"), "{text}");

    // The same plan claiming 20 GPUs before (18 freed predicted, 8 realized): a large
    // difference, and none of the causes the report looks for is in the data.
    let text = std::fs::read_to_string(&plan).unwrap();
    let claimed = text.replacen(
        &format!("gpus-before: {}", t.before.gpus_in_use),
        "gpus-before: 20",
        1,
    );
    assert_ne!(claimed, text);
    let bold = dir.path().join("bold.yaml");
    std::fs::write(&bold, claimed).unwrap();
    let r = report(&src, &["--plan", bold.to_str().unwrap()]);
    let p = &r["changes"]["changes"][0]["comparison"]["predicted"];
    assert_eq!(p["large_difference"], true, "{p:#}");
    // The planted change put search/* on gpu-a/GPU0 and chat/* on gpu-a/GPU1; every service
    // that moved to a GPU the plan does not place work on is named, else no cause is found.
    let parsed = tessera_core::mig::plan::TesseraPlan::from_file(&plan).unwrap();
    let used: std::collections::BTreeSet<String> = parsed.configs["day"]
        .iter()
        .filter(|g| !g.instances.is_empty() || !g.workloads.is_empty())
        .map(|g| format!("{}/GPU{}", g.node.as_deref().unwrap(), g.gpu))
        .collect();
    let mut expect: Vec<String> = Vec::new();
    for (team, c, gpu, first) in [
        ("chat", 'b', "gpu-a/GPU1", 0),
        ("search", 'a', "gpu-a/GPU0", 1),
    ] {
        if !used.contains(gpu) {
            for i in first..5 {
                expect.push(format!(
                    "{team}/svc-{c}{i} moved to {gpu}, which the plan does not use"
                ));
            }
        }
    }
    if expect.is_empty() {
        expect.push(
            "no cause found in the data (the plan's nodes reported, demand did not grow, no workload went elsewhere): the prediction itself was off".into(),
        );
    }
    let why: Vec<&str> = p["explanation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(why, expect, "plan GPUs {used:?}: {p:#}");

    // No prediction: refused, saying what to run.
    let plain = dir.path().join("plain.yaml");
    let no_pred: String = text.split("prediction:").next().unwrap().to_string();
    std::fs::write(&plain, no_pred).unwrap();
    let out = cli::tessera(&[
        "report",
        "--source",
        &src,
        "--plan",
        plain.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no prediction block"), "{err}");
    assert!(err.contains("--write-prediction"), "{err}");
}
