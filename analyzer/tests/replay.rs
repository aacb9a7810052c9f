//! `tessera replay` end to end on simulated history with planted truth
//! (`fixtures/scenarios/replay.toml`, whose header lists it): a MIG plan made on days 1–4 that
//! fails from day 5 when a workload's memory grows past its instance (`unsafe`, the exact
//! intervals), a consolidation of two batch jobs whose runs overlap (`tight`, the exact
//! contention intervals and slowdown), one of two light services (`safe`, the GPU-hours and cost
//! freed), the same through the generic CSV source at 15 s and 60 s, the prediction written into
//! the plan, and bad input (exit 2, naming what is wrong). Expected figures come from the
//! scenario's planted values (the batch schedule, the memory sizes), not from tessera.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::cli::run;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// Monday 2026-11-02 00:00 UTC, the scenario's start (unix s).
const START: i64 = 1_793_577_600;
/// Friday 2026-11-06 00:00 UTC: team/grow's extra 12 GiB appear.
const DAY5: i64 = START + 4 * 86_400;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/replay.toml")
}

/// `days` of the fixture at 30-second samples into 5-minute rows.
fn history(dir: &Path, days: u32) -> PathBuf {
    let h = dir.join("h");
    let (code, _, err) = run(&[
        "simulate",
        "--scenario",
        fixture().to_str().unwrap(),
        "--days",
        &days.to_string(),
        "--sample-interval",
        "30s",
        "--history.interval",
        "5m",
        "--out",
        h.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "simulate: {err}");
    h
}

fn json(args: &[&str]) -> Value {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn plan(dir: &Path, name: &str, host: u32, guest: u32) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!(
            "version: v1\nkind: tessera-plan\nconsolidation:\n  - model: H100-80GB\n    host: {{ node: share-a, gpu: {host} }}\n    guests:\n      - {{ node: share-a, gpu: {guest} }}\n"
        ),
    )
    .unwrap();
    p
}

fn placement<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["placements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {r:#}"))
}

/// The planted batch schedule: batch-a runs in [0, 60) min of every 6 h, batch-b in [30, 90).
fn batch_active(start_min: i64, t_s: i64) -> bool {
    (t_s - start_min * 60).rem_euclid(6 * 3600) < 3600
}

/// The rows ending in `(since, until]` (seconds) every `row` seconds whose mean combined
/// activity of the two batch jobs, each at 0.7 while running and sampled every `sample`
/// seconds (a sample at `T` shows second `T − 1`, as the simulator takes it), is above one GPU.
fn planted_contention(since: i64, until: i64, row: i64, sample: i64, lag: i64) -> (u64, f64) {
    let (mut n, mut worst) = (0, 0.0f64);
    let mut end = since + row;
    while end <= until {
        let mut t = end - row + sample;
        let (mut sum, mut k) = (0.0, 0.0);
        while t <= end {
            let s = t - lag;
            sum += 0.7
                * (f64::from(u8::from(batch_active(0, s)))
                    + f64::from(u8::from(batch_active(30, s))));
            k += 1.0;
            t += sample;
        }
        let mean = sum / k;
        if mean > 1.0 + 1e-9 {
            n += 1;
            worst = worst.max(mean);
        }
        end += row;
    }
    (n, worst)
}

#[test]
fn a_mig_plan_made_on_days_1_to_4_fails_from_day_5_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path(), 7);
    let src = format!("history:{}/mig-a", h.display());
    let out = dir.path().join("trained.yaml");
    let r = json(&[
        "replay",
        "--source",
        &src,
        "--train",
        "2026-11-02..2026-11-05T23:00:00Z",
        "--test",
        "2026-11-02..2026-11-09",
        "--kind",
        "mig",
        "--plan-out",
        out.to_str().unwrap(),
        "--write-prediction",
        "--format",
        "json",
    ]);
    assert_eq!(r["version"], 1);
    assert_eq!(r["kind"], "tessera-replay");
    assert_eq!(r["verdict"], "unsafe", "{r:#}");
    assert_eq!(r["trained_on"]["planner"], "mig");
    // team/grow held 8 GiB on days 1–4: the plan gives it an instance under 20 GiB.
    let grow = r["placements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["workloads"][0] == "team/grow")
        .unwrap();
    let cap = grow["capacity_memory_bytes"].as_f64().unwrap();
    assert!((8.0 * GIB..20.0 * GIB).contains(&cap), "{grow:#}");
    assert_eq!(grow["verdict"], "unsafe");
    // Exceeded in every 5-minute row from day 5 on: rows ending in (DAY5, end], 3 days.
    let rows = (START + 7 * 86_400 - DAY5) / 300;
    assert_eq!(grow["exceeded_intervals"], rows);
    assert_eq!(grow["exceeded_hours"].as_f64().unwrap(), 72.0);
    let spans = grow["exceeded"].as_array().unwrap();
    assert_eq!(spans.len(), 1, "{spans:?}");
    assert_eq!(spans[0]["from"], "2026-11-06T00:00:00.000Z");
    assert_eq!(spans[0]["until"], "2026-11-09T00:00:00.000Z");
    assert_eq!(spans[0]["intervals"], rows);
    assert_eq!(grow["peak_memory_bytes"].as_f64().unwrap(), 20.0 * GIB);
    assert_eq!(r["failed_intervals"], rows);
    // team/steady (6 GiB throughout) fits wherever it went.
    let steady = r["placements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["workloads"][0] == "team/steady")
        .unwrap();
    assert_eq!(steady["exceeded_intervals"], 0);
    assert_eq!(steady["peak_memory_bytes"].as_f64().unwrap(), 6.0 * GIB);
    // The prediction is in the plan written, and the plan reads back.
    let text = std::fs::read_to_string(&out).unwrap();
    let p = tessera_core::mig::plan::TesseraPlan::parse(&text, "trained.yaml").unwrap();
    let pred = p.prediction.expect("prediction written");
    assert_eq!(pred.verdict, "unsafe");
    assert_eq!(pred.failed_intervals, rows as u64);
    // Replayed on days 1–4 only, the same plan is not unsafe.
    let r = json(&[
        "replay",
        "--source",
        &src,
        "--plan",
        out.to_str().unwrap(),
        "--until",
        "2026-11-05T23:00:00Z",
        "--format",
        "json",
    ]);
    assert_ne!(r["verdict"], "unsafe", "{r:#}");
    assert_eq!(r["failed_intervals"], 0);
}

#[test]
fn overlapping_batch_runs_are_tight_and_light_services_safe() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path(), 2);
    let src = format!("history:{}/share-a", h.display());
    let tight = plan(dir.path(), "tight.yaml", 0, 1);
    let r = json(&[
        "replay",
        "--source",
        &src,
        "--plan",
        tight.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(r["verdict"], "tight", "{r:#}");
    let p = placement(&r, "consolidation share-a/GPU0");
    assert_eq!(p["kind"], "shared");
    let (n, worst) = planted_contention(START, START + 2 * 86_400, 300, 30, 1);
    assert!(n > 0);
    assert_eq!(p["contention_intervals"], n, "{p:#}");
    assert!(
        (p["slowdown_max"].as_f64().unwrap() - worst).abs() < 1e-6,
        "{p:#}"
    );
    assert_eq!(p["exceeded_intervals"], 0);
    // Both jobs' 10 GiB plus each GPU's 512 MiB driver reserve.
    assert_eq!(p["peak_memory_bytes"].as_f64().unwrap(), 21.0 * GIB);
    let f = &r["fleet"];
    assert_eq!(
        (f["gpus_before"].as_u64(), f["gpus_after"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(f["gpu_hours_freed"].as_f64().unwrap(), 48.0);
    assert_eq!(f["cost_freed"].as_f64().unwrap(), 96.0);
    // The freed GPU idles at the H100's 70 W most of the time: 70 W × 48 h saved.
    let (eb, ea) = (
        f["energy_kwh_before"].as_f64().unwrap(),
        f["energy_kwh_after"].as_f64().unwrap(),
    );
    assert!((eb - ea - 70.0 * 48.0 / 1000.0).abs() < 1e-6, "{f:#}");
    assert!(r["deciding"][0].as_str().unwrap().contains("contention"));

    let safe = plan(dir.path(), "safe.yaml", 2, 3);
    let r = json(&[
        "replay",
        "--source",
        &src,
        "--plan",
        safe.to_str().unwrap(),
        "--format",
        "json",
        "--price.gpu-hour",
        "3",
    ]);
    assert_eq!(r["verdict"], "safe", "{r:#}");
    let p = placement(&r, "consolidation share-a/GPU2");
    assert_eq!(p["contention_intervals"], 0);
    assert_eq!(p["peak_memory_bytes"].as_f64().unwrap(), 13.0 * GIB);
    assert!(p["slowdown_max"].is_null());
    assert_eq!(r["fleet"]["cost_freed"].as_f64().unwrap(), 144.0);
    // Out of sample through the advisor: planned on day 1, replayed on day 2. The light
    // services' pair is the move it makes (the batch jobs' overlap is above its target).
    let r = json(&[
        "replay",
        "--source",
        &src,
        "--train",
        "2026-11-02..2026-11-03",
        "--test",
        "2026-11-03..2026-11-04",
        "--kind",
        "consolidation",
        "--format",
        "json",
    ]);
    assert_eq!(r["trained_on"]["planner"], "consolidation");
    assert_eq!(r["verdict"], "safe", "{r:#}");
    assert_eq!(r["fleet"]["gpu_hours_freed"].as_f64().unwrap(), 24.0);
    assert_eq!(r["failed_intervals"], 0);
    // Every output format renders it.
    for (format, want) in [
        ("table", "Verdict: SAFE"),
        ("markdown", "# tessera replay"),
        ("html", "<svg id=\"chart-before-after\""),
    ] {
        let (code, out, err) = run(&[
            "replay",
            "--source",
            &src,
            "--plan",
            safe.to_str().unwrap(),
            "--format",
            format,
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(want), "{format}: {out}");
        assert!(!out.contains("NaN") && !out.contains("inf"), "{out}");
    }
}

/// The share-a node's planted GPUs as generic CSV, one sample every `every` seconds over
/// `hours`: each GPU's memory (its workload's while running, plus 512 MiB) and SM activity.
fn planted_csv(every: i64, hours: i64) -> String {
    let mut s = String::from("timestamp,entity,metric,value,node,gpu,model\n");
    let mut t = START + every;
    while t <= START + hours * 3600 {
        for (gpu, start_min) in [(0, 0), (1, 30)] {
            let on = batch_active(start_min, t);
            let mem = if on { 10.5 * GIB } else { 0.5 * GIB };
            let act = if on { 0.7 } else { 0.0 };
            for (metric, v) in [
                ("memory_used_bytes", mem),
                ("memory_total_bytes", 80.0 * GIB),
                ("sm_active_ratio", act),
                ("power_watts", 70.0 + 630.0 * act),
            ] {
                s.push_str(&format!(
                    "{t},GPU-{gpu},{metric},{v},share-a,{gpu},NVIDIA H100 80GB HBM3\n"
                ));
            }
        }
        t += every;
    }
    s
}

#[test]
fn the_csv_source_at_15_and_60_seconds_gives_the_planted_contention() {
    let dir = tempfile::tempdir().unwrap();
    let tight = plan(dir.path(), "tight.yaml", 0, 1);
    for every in [15, 60] {
        let csv = dir.path().join(format!("s{every}.csv"));
        std::fs::write(&csv, planted_csv(every, 24)).unwrap();
        let r = json(&[
            "replay",
            "--source",
            &format!("csv:{}", csv.display()),
            "--plan",
            tight.to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert_eq!(r["verdict"], "tight", "{every}: {r:#}");
        let p = placement(&r, "consolidation share-a/GPU0");
        assert_eq!(p["interval_seconds"].as_f64().unwrap(), every as f64);
        let (n, worst) = planted_contention(START, START + 24 * 3600, every, every, 0);
        // 30 minutes of overlap in every 6 hours.
        assert_eq!(n as i64, 4 * 1800 / every);
        assert_eq!(p["contention_intervals"], n, "{every}: {p:#}");
        assert_eq!(p["contention_hours"].as_f64().unwrap(), 2.0);
        assert!((p["slowdown_max"].as_f64().unwrap() - worst).abs() < 1e-9);
        assert_eq!(p["peak_memory_bytes"].as_f64().unwrap(), 21.0 * GIB);
    }
}

#[test]
fn bad_input_is_refused_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path(), 1);
    let src = format!("history:{}/share-a", h.display());
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "a node not in the data",
            write(
                "node.yaml",
                "version: v1\nkind: tessera-plan\nconsolidation:\n  - model: H100-80GB\n    host: { node: nowhere, gpu: 0 }\n    guests: [{ node: share-a, gpu: 1 }]\n",
            ),
            vec![
                "consolidation[0].host",
                "node \"nowhere\"",
                "not in the data",
            ],
        ),
        (
            "a GPU not in the data",
            write(
                "gpu.yaml",
                "version: v1\nkind: tessera-plan\nconsolidation:\n  - model: H100-80GB\n    host: { node: share-a, gpu: 0 }\n    guests: [{ node: share-a, gpu: 9 }]\n",
            ),
            vec![
                "consolidation[0].guests[0]",
                "GPU 9 on share-a",
                "GPUs there: 0, 1, 2, 3",
            ],
        ),
        (
            "a GPU renumbered since the plan (another UUID at its index)",
            write(
                "uuid.yaml",
                "version: v1\nkind: tessera-plan\nconsolidation:\n  - model: H100-80GB\n    host: { node: share-a, gpu: 0 }\n    guests: [{ node: share-a, gpu: 1, uuid: GPU-00000000-0000-0000-0000-000000000000 }]\n",
            ),
            vec![
                "consolidation[0].guests[0]",
                "UUID GPU-00000000-0000-0000-0000-000000000000",
                "but the data has GPU-",
                "re-plan",
            ],
        ),
        (
            "a mig-parted config",
            write(
                "parted.yaml",
                "version: v1\nmig-configs:\n  all-1g:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        1g.10gb: 7\n",
            ),
            vec![
                "nvidia-mig-parted config",
                "names no workloads",
                "tessera mig plan",
            ],
        ),
        (
            "an old MIG plan without workloads",
            write(
                "old.yaml",
                "version: v1\nkind: tessera-mig-plan\nconfigs:\n  day:\n    - node: share-a\n      gpu: 0\n      model: H100-80GB\n      mig-enabled: false\n",
            ),
            vec!["no workloads section", "re-plan with `tessera mig plan"],
        ),
        (
            "a file of another kind",
            write(
                "schedule.yaml",
                "version: v1\nkind: tessera-mig-schedule\ntimezone: UTC\nplan: p.yaml\nswitches: [{ at: \"07:00\", config: day }]\n",
            ),
            vec!["not a tessera plan", "tessera-mig-schedule"],
        ),
    ];
    for (what, path, wants) in &cases {
        let (code, out, err) = run(&["replay", "--source", &src, "--plan", path]);
        assert_eq!(code, 2, "{what}: {out}{err}");
        for w in wants {
            assert!(err.contains(w), "{what}: {w:?} not in {err}");
        }
    }
    // An empty range.
    let ok = plan(dir.path(), "ok.yaml", 0, 1);
    let (code, _, err) = run(&[
        "replay",
        "--source",
        &src,
        "--plan",
        ok.to_str().unwrap(),
        "--since",
        "2030-01-01",
        "--until",
        "2030-01-02",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no rows"), "{err}");
    // A workload the plan names but the range does not hold: unknown, never 0.
    let unseen = write(
        "unseen.yaml",
        "version: v1\nkind: tessera-plan\nconfigs:\n  day:\n    - node: share-a\n      gpu: 0\n      model: H100-80GB\n      mig-enabled: false\n      workloads: [ghost]\nworkloads:\n  ghost:\n    kind: process\n    node: share-a\n    gpu: 0\n    label: nobody/ghost\n",
    );
    let r = json(&[
        "replay", "--source", &src, "--plan", &unseen, "--format", "json",
    ]);
    let w = &r["workloads"][0];
    assert_eq!(
        (w["seen"].as_bool(), w["rows"].as_u64()),
        (Some(false), Some(0))
    );
    assert!(w["peak_memory_bytes"].is_null(), "{w}");
    assert!(r["placements"][0]["verdict"].is_null());
    assert!(r["placements"][0]["peak_memory_bytes"].is_null());
    assert!(
        r["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("ghost: not seen in the replayed range")),
        "{r:#}"
    );
}

/// The same consolidation replayed through a real Prometheus (Debian's; `scripts/test.sh`
/// installs it): one day of the fixture at 5-second samples into 10-second rows, written as the
/// exporter's OpenMetrics, backfilled with promtool and read back with `prometheus:URL` — the
/// verdict, the contended intervals (equal to the planted schedule's at 10-second rows), the
/// peak memory and the GPUs freed are those of the history the data came from.
#[test]
fn a_real_prometheus_backfilled_with_the_day_gives_the_same_replay() {
    use crate::support::openmetrics as om;
    use crate::support::prometheus as prom;
    prom::require_tools();
    let dir = tempfile::tempdir().unwrap();
    let toml = std::fs::read_to_string(fixture()).unwrap();
    let (gpu, mig, process, since) = om::simulate(dir.path(), &toml, "replay");
    assert_eq!(since, START * 1000);
    let server = prom::serve(dir.path(), &om::openmetrics(&gpu, &mig, &process));
    let tight = plan(dir.path(), "tight.yaml", 0, 1);
    let (from, to) = (om::rfc3339(since), om::rfc3339(since + om::DAY_MS));
    let replay = |src: &str| {
        json(&[
            "replay",
            "--source",
            src,
            "--plan",
            tight.to_str().unwrap(),
            "--since",
            &from,
            "--until",
            &to,
            "--interval",
            "10s",
            "--format",
            "json",
        ])
    };
    let hist = replay(&format!(
        "history:{}",
        dir.path().join("history").join("share-a").display()
    ));
    let prom_r = replay(&format!("prometheus:{}", server.url));
    let (n, worst) = planted_contention(START, START + 86_400, 10, 5, 1);
    assert!(n > 0);
    for (what, r) in [("history", &hist), ("prometheus", &prom_r)] {
        assert_eq!(r["verdict"], "tight", "{what}: {r:#}");
        let p = placement(r, "consolidation share-a/GPU0");
        assert_eq!(p["contention_intervals"], n, "{what}: {p:#}");
        assert!(
            (p["slowdown_max"].as_f64().unwrap() - worst).abs() < 1e-6,
            "{what}: {p:#}"
        );
        assert_eq!(p["exceeded_intervals"], 0, "{what}");
        assert_eq!(
            p["peak_memory_bytes"].as_f64().unwrap(),
            21.0 * GIB,
            "{what}"
        );
        let f = &r["fleet"];
        assert_eq!(
            (f["gpus_before"].as_u64(), f["gpus_after"].as_u64()),
            (Some(2), Some(1)),
            "{what}"
        );
        assert_eq!(f["gpu_hours_freed"].as_f64().unwrap(), 24.0, "{what}");
    }
}

/// `tessera report --out-of-sample`: the report's own plans made from the previous period and
/// replayed on the reported one. Reported 2026-11-05 12:00 .. 11-09 (3.5 days), so the previous
/// period is 11-02 .. 11-05 12:00, when team/grow held 8 GiB: the MIG plan made from it fails in
/// every 5-minute row from 11-06 00:00 (planted), exactly as `tessera replay --train --test`
/// finds; the default report has no such section.
#[test]
fn the_report_replays_its_own_plans_out_of_sample_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path(), 7);
    let src = format!("history:{}", h.display());
    let (since, until) = ("2026-11-05T12:00:00Z", "2026-11-09T00:00:00Z");
    let report = |extra: &[&str]| {
        let mut args = vec![
            "report", "--source", &src, "--since", since, "--until", until,
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let (code, out, err) = report(&["--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let mut plain: Value = serde_json::from_str(&out).unwrap();
    assert!(plain.get("out_of_sample").is_none(), "not asked for");

    let (code, out, err) = report(&["--format", "json", "--out-of-sample"]);
    assert_eq!(code, 0, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    let checks = r["out_of_sample"].as_array().expect("out_of_sample");
    let kinds: Vec<&str> = checks.iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["consolidation", "mig"]);
    for c in checks {
        assert_eq!(c["trained_from"], "2026-11-02T00:00:00.000Z", "{c:#}");
        assert_eq!(c["trained_until"], "2026-11-05T12:00:00.000Z");
        assert_eq!(c["replayed_from"], r["from"]);
        assert_eq!(c["replayed_until"], r["until"]);
    }
    let mig = &checks[1];
    assert_eq!(mig["verdict"], "unsafe", "{mig:#}");
    let rows = (START + 7 * 86_400 - DAY5) / 300;
    assert_eq!(mig["failed_intervals"], rows, "{mig:#}");
    assert!(
        mig["deciding"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d.as_str().unwrap().contains(&format!(
                "memory exceeded in {rows} interval(s) (72.00 h): 2026-11-06T00:00:00.000Z"
            ))),
        "{mig:#}"
    );
    // The same as the replay command asked for the same ranges.
    let direct = json(&[
        "replay",
        "--source",
        &src,
        "--train",
        "2026-11-02..2026-11-05T12:00:00Z",
        "--test",
        &format!("{since}..{until}"),
        "--kind",
        "mig",
        "--format",
        "json",
    ]);
    assert_eq!(direct["verdict"], mig["verdict"]);
    assert_eq!(direct["failed_intervals"], mig["failed_intervals"]);
    assert_eq!(direct["fleet"]["gpus_after"], mig["gpus_after"]);
    // A plan's action carries its kind's replay verdict (docs/findings.md "Actions").
    let kind_of = |k: &str| match k {
        "mig_layout" => Some("mig"),
        "consolidate" => Some("consolidation"),
        _ => None,
    };
    let mut carried = 0;
    for a in r["actions"].as_array().unwrap() {
        if let Some(kind) = kind_of(a["kind"].as_str().unwrap()) {
            let c = checks.iter().find(|c| c["kind"] == kind).unwrap();
            if let Some(v) = c["verdict"].as_str() {
                assert!(
                    a["verdict"]
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("{v} on the reported period")),
                    "{a:#}"
                );
                carried += 1;
            }
        }
    }
    assert!(carried > 0, "a plan action: {:#}", r["actions"]);
    // Every other section is the default report's (the actions but for their verdicts).
    let mut without = r.clone();
    without.as_object_mut().unwrap().remove("out_of_sample");
    for v in [&mut without, &mut plain] {
        for a in v["actions"].as_array_mut().unwrap() {
            a["verdict"] = Value::Null;
        }
    }
    assert_eq!(without, plain);

    let (code, out, err) = report(&["--out-of-sample"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Out-of-sample check"), "{out}");
    assert!(out.contains("unsafe"), "{out}");
}

/// One GPU lost for two hours (the demo's lab-b/GPU3) no longer blanks the replay's energy: it
/// is summed over the rows that have power, and the share of them is said (issue 55).
#[test]
fn a_lost_gpu_leaves_the_energy_known_with_its_coverage() {
    let dir = tempfile::tempdir().unwrap();
    let src = format!(
        "history:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/demo-history")
            .display()
    );
    let plan = dir.path().join("plan.yaml");
    json(&[
        "mig",
        "plan",
        "--source",
        &src,
        "-o",
        plan.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let r = json(&[
        "replay",
        "--plan",
        plan.to_str().unwrap(),
        "--source",
        &src,
        "--format",
        "json",
    ]);
    let f = &r["fleet"];
    let coverage = f["energy_coverage"].as_f64().expect("a coverage");
    assert!(coverage > 0.99 && coverage < 1.0, "{f:#}");
    let (before, after) = (
        f["energy_kwh_before"].as_f64().expect("energy known"),
        f["energy_kwh_after"].as_f64().expect("energy known"),
    );
    assert!(before > 100.0 && after <= before, "{f:#}");
}
