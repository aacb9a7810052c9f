//! Energy per workload (docs/report.md, "Energy per workload") through the binary: the report's
//! team kWh and idle kWh on hand-made CSV rows checked against an independent pandas computation
//! (`scripts/energy_reference.py`), and on simulated history (MIG on an H100 with GPM, MIG on an
//! A100 without any activity, whole GPUs, a Slurm job) the invariant — the teams' kWh plus idle
//! equal the GPUs' energy — with `tessera job` giving the job the report's share; and through a
//! real Prometheus backfilled with a simulated day, each team's kWh against the rule computed
//! from the rows in the test.
//!
//! Needs `python3` with pandas (installed by `scripts/test.sh`); fails, never skips, without.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::cli::tessera;

const SCRIPTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts");
const SINCE: &str = "2026-11-02T00:00:00Z";
const UNTIL: &str = "2026-11-02T01:00:00Z";
/// Unix seconds of `SINCE`.
const T0: u64 = 1_793_577_600;

/// A small deterministic generator (the values are data, not expectations).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One CSV line: timestamp, entity, metric, value, then the labels.
fn line(out: &mut String, t: u64, entity: &str, metric: &str, value: f64, labels: [&str; 10]) {
    let _ = writeln!(out, "{t},{entity},{metric},{value},{}", labels.join(","));
}

const HEADER: &str = "timestamp,entity,metric,value,kind,node,gpu,uuid,model,gpu_instance,profile,pid,namespace,slurm_job_id";
const H100: &str = "NVIDIA H100 80GB HBM3";

/// An hour of one node at 1-minute rows: every case of the rule (see the comments).
fn fleet_csv() -> String {
    let mut r = Lcg(20_261_102);
    let mut o = format!("{HEADER}\n");
    for k in 1..=60u64 {
        let t = T0 + k * 60;
        fn gpu<'a>(g: &'a str, uuid: &'a str) -> [&'a str; 10] {
            ["gpu", "n1", g, uuid, H100, "", "", "", "", ""]
        }
        // GPU 0, whole: SM activity and an energy counter; three processes with per-process
        // SM use (a Slurm job's missing every third row).
        line(
            &mut o,
            t,
            "GPU-a",
            "sm_active_ratio",
            r.next(),
            gpu("0", "GPU-a"),
        );
        line(
            &mut o,
            t,
            "GPU-a",
            "energy_delta_joules",
            4000.0 + 30_000.0 * r.next(),
            gpu("0", "GPU-a"),
        );
        for (pid, ns, job) in [("100", "alpha", ""), ("101", "beta", ""), ("102", "", "77")] {
            let l = ["process", "n1", "0", "GPU-a", "", "", "", pid, ns, job];
            line(
                &mut o,
                t,
                pid,
                "memory_used_bytes",
                1e9 + 1e10 * r.next(),
                l,
            );
            if job.is_empty() || k % 3 != 0 {
                line(&mut o, t, pid, "sm_ratio", 0.5 * r.next(), l);
            }
        }
        // GPU 1, whole: busy ratio and power only; processes without SM use, one holding no
        // memory (the other takes the whole workload part).
        line(
            &mut o,
            t,
            "GPU-b",
            "gpu_busy_ratio",
            r.next(),
            gpu("1", "GPU-b"),
        );
        line(
            &mut o,
            t,
            "GPU-b",
            "power_watts",
            80.0 + 600.0 * r.next(),
            gpu("1", "GPU-b"),
        );
        for (pid, ns, mem) in [("200", "alpha", 2e9), ("201", "", 0.0)] {
            let l = ["process", "n1", "1", "GPU-b", "", "", "", pid, ns, ""];
            line(&mut o, t, pid, "memory_used_bytes", mem, l);
        }
        // GPU 2 in MIG mode: 3g with two processes, 1g with one (its activity missing every
        // fourth row: then the GPU's activity by slices), 2g empty.
        line(
            &mut o,
            t,
            "GPU-c",
            "sm_active_ratio",
            r.next(),
            gpu("2", "GPU-c"),
        );
        line(
            &mut o,
            t,
            "GPU-c",
            "energy_delta_joules",
            5000.0 + 20_000.0 * r.next(),
            gpu("2", "GPU-c"),
        );
        for (gi, profile) in [("1", "3g.40gb"), ("2", "1g.10gb"), ("3", "2g.20gb")] {
            let e = format!("GPU-c-{gi}");
            let l = ["mig", "n1", "2", "GPU-c", H100, gi, profile, "", "", ""];
            // Memory every row keeps the instance's rows at one minute.
            line(&mut o, t, &e, "memory_used_bytes", 2e9, l);
            if gi != "2" || k % 4 != 0 {
                line(&mut o, t, &e, "sm_active_ratio", r.next(), l);
            }
        }
        for (pid, ns, gi) in [
            ("300", "gamma", "1"),
            ("301", "beta", "2"),
            ("302", "gamma", "1"),
        ] {
            let l = ["process", "n1", "2", "GPU-c", "", gi, "", pid, ns, ""];
            line(&mut o, t, pid, "memory_used_bytes", 1e9 + 5e9 * r.next(), l);
        }
        // GPU 3: energy but no activity at all: its process's share is unknown (idle, said so).
        line(
            &mut o,
            t,
            "GPU-d",
            "energy_delta_joules",
            3000.0 + 3000.0 * r.next(),
            gpu("3", "GPU-d"),
        );
        let l = [
            "process", "n1", "3", "GPU-d", "", "", "", "400", "delta", "",
        ];
        line(&mut o, t, "400", "memory_used_bytes", 3e9, l);
        // GPU 4: no energy: its process gets nothing (unknown).
        line(
            &mut o,
            t,
            "GPU-e",
            "sm_active_ratio",
            r.next(),
            gpu("4", "GPU-e"),
        );
        let l = [
            "process", "n1", "4", "GPU-e", "", "", "", "500", "epsilon", "",
        ];
        line(&mut o, t, "500", "sm_ratio", r.next(), l);
    }
    o
}

fn report_json(source: &str, extra: &[&str]) -> Value {
    let mut args = vec!["report", "--source", source, "--format", "json"];
    args.extend_from_slice(extra);
    let out = tessera(&args);
    assert!(
        out.status.success(),
        "report: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// The teams' kWh (null ones as `None`).
fn team_kwh(doc: &Value) -> BTreeMap<String, Option<f64>> {
    doc["teams"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["team"].as_str().unwrap().to_string(),
                t["energy_kwh"].as_f64(),
            )
        })
        .collect()
}

/// Σ teams + idle = the GPUs' energy = the fleet's, up to each value's rounding to 3 decimals.
fn assert_adds_up(doc: &Value) {
    let e = &doc["teams"]["energy"];
    let teams = team_kwh(doc);
    let sum: f64 = teams.values().flatten().sum();
    let (gpu, idle) = (
        e["gpu_kwh"].as_f64().unwrap(),
        e["idle_kwh"].as_f64().unwrap(),
    );
    let tol = 0.0005 * (teams.len() as f64 + 2.0) + 1e-9;
    assert!(
        (sum + idle - gpu).abs() <= tol,
        "{sum} + {idle} != {gpu}: {e:#}"
    );
    assert!(
        (e["workloads_kwh"].as_f64().unwrap() - sum).abs() <= tol,
        "{e:#}"
    );
    let fleet = doc["fleet"]["energy_kwh"].as_f64().unwrap();
    assert!((gpu - fleet).abs() <= 0.001, "{gpu} != fleet {fleet}");
    assert!(idle >= 0.0 && e["no_activity_kwh"].as_f64().unwrap() <= idle + 0.0005);
}

#[test]
fn report_team_energy_matches_pandas_on_hand_made_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("energy.csv");
    std::fs::write(&csv, fleet_csv()).unwrap();
    let out = Command::new("python3")
        .arg(format!("{SCRIPTS}/energy_reference.py"))
        .arg(&csv)
        .args(["--since", SINCE, "--until", UNTIL])
        .output()
        .expect("python3 runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "energy_reference.py (needs pandas: scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Value = serde_json::from_slice(&out.stdout).expect("reference JSON");
    let src = format!("csv:{}", csv.display());
    let doc = report_json(&src, &["--since", SINCE, "--until", UNTIL]);
    assert_adds_up(&doc);
    let e = &doc["teams"]["energy"];
    for k in ["gpu_kwh", "idle_kwh", "no_activity_kwh"] {
        let (got, exp) = (e[k].as_f64().unwrap(), want[k].as_f64().unwrap());
        assert!(
            (got - exp).abs() <= 0.0005 + 1e-9,
            "{k}: {got} vs pandas {exp}"
        );
    }
    let teams = team_kwh(&doc);
    let expected = want["teams"].as_object().unwrap();
    for (team, got) in &teams {
        match (got, expected.get(team).and_then(Value::as_f64)) {
            (Some(g), Some(x)) => assert!((g - x).abs() <= 0.0005 + 1e-9, "{team}: {g} vs {x}"),
            (None, None) => {}
            (g, x) => panic!("{team}: report {g:?}, pandas {x:?}"),
        }
    }
    for team in expected.keys() {
        assert!(teams.contains_key(team), "{team} missing from {teams:?}");
    }
    // Every case is there: each team given energy has some, the activity-less GPU's and the
    // energy-less GPU's teams are unknown (null, not 0), and the report says why.
    for team in ["alpha", "beta", "gamma", "slurm job 77"] {
        assert!(teams[team].unwrap() > 0.0, "{team}: {teams:?}");
    }
    assert_eq!(teams["delta"], None, "no activity: unknown, not 0");
    assert_eq!(teams["epsilon"], None, "no energy: unknown, not 0");
    assert!(e["no_activity_kwh"].as_f64().unwrap() > 0.0);
    let notes = doc["data_quality"].to_string();
    assert!(notes.contains("not split between teams"), "{notes}");
    assert!(notes.contains("no GPU row with energy"), "{notes}");
    // The text formats show the split.
    let out = tessera(&[
        "report", "--source", &src, "--since", SINCE, "--until", UNTIL,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("energy cost") && text.contains("charged to no team"),
        "{text}"
    );
}

const SCENARIO: &str = r#"
name = "energy"
seed = 11
start = "2026-11-02T00:00:00Z"

[[nodes]]
name = "e-1"
gpus = [{ model = "H100-80GB", count = 3 }, { model = "A100-80GB", count = 1 }]
mig = [
  { gpu = 0, instances = [{ profile = "3g.40gb", start = 0 }, { profile = "2g.20gb", start = 4 }, { profile = "1g.10gb", start = 6 }] },
  { gpu = 3, instances = [{ profile = "3g.40gb", start = 0 }] },
]

[[workloads]]
name = "api"
kind = "inference"
node = "e-1"
gpu = 0
mig_start = 0
memory_gib = 20.0
peak = 0.7
namespace = "serving"
pod = "api-1"

[[workloads]]
name = "nb"
kind = "notebook"
node = "e-1"
gpu = 0
mig_start = 4
memory_gib = 8.0
namespace = "nlp"
pod = "nb-1"

[[workloads]]
name = "embed"
kind = "inference"
node = "e-1"
gpu = 1
memory_gib = 10.0
peak = 0.4
namespace = "research"
pod = "embed-1"

[[workloads]]
name = "train"
kind = "training"
node = "e-1"
gpu = 1
memory_gib = 40.0
peak = 0.9
start_hour = 2.0
duration_hours = 6.0
slurm_job = "900"

[[workloads]]
name = "ocr"
kind = "inference"
node = "e-1"
gpu = 3
mig_start = 0
memory_gib = 12.0
namespace = "vision"
pod = "ocr-1"
"#;

fn simulate(dir: &Path) -> String {
    let scenario = dir.join("energy.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let h = dir.join("h");
    let out = tessera(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--days",
        "1",
        "--sample-interval",
        "10s",
        "--history.interval",
        "1m",
        "--out",
        h.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!("history:{}", h.display())
}

#[test]
fn simulated_mig_and_whole_gpus_add_up_and_the_job_gets_its_share() {
    let tmp = tempfile::tempdir().unwrap();
    let src = simulate(tmp.path());
    let doc = report_json(&src, &[]);
    assert_adds_up(&doc);
    let teams = team_kwh(&doc);
    // The H100's MIG instances (GPM per instance) and the whole GPU's processes draw energy;
    // the A100 in MIG mode has no activity at all: its team's share is unknown.
    for team in ["serving", "nlp", "research", "slurm job 900"] {
        assert!(teams[team].unwrap() > 0.0, "{team}: {teams:?}");
    }
    assert_eq!(teams["vision"], None, "{teams:?}");
    let e = &doc["teams"]["energy"];
    assert!(e["no_activity_kwh"].as_f64().unwrap() > 0.0, "{e:#}");
    // GPU 2 ran nothing: its energy is idle.
    assert!(e["idle_kwh"].as_f64().unwrap() > 0.0, "{e:#}");
    // `tessera job` gives the job the report's share, device by device.
    let out = tessera(&["job", "900", "--source", &src, "--format", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kwh = job["energy_kwh"].as_f64().unwrap();
    assert!(
        (kwh - teams["slurm job 900"].unwrap()).abs() <= 0.0011,
        "{job:#}"
    );
    let devices: f64 = job["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["energy_kwh"].as_f64().unwrap())
        .sum();
    assert!((devices - kwh).abs() <= 0.0011, "{job:#}");
    // Findings carry the energy of their wasted GPU-hours: the notebook's MIG instance on the
    // H100 that is never idle as a whole, at the idle power of the H100s that are.
    let idle = doc["idle_models"].as_array().unwrap();
    assert!(!idle.is_empty(), "{doc:#}");
    for m in idle {
        let (kwh, h) = (
            m["wasted_energy_kwh"].as_f64(),
            m["reclaimable_gpu_hours"].as_f64(),
        );
        let w = kwh.unwrap() * 1000.0 / h.unwrap();
        // An H100's idle draw: more than nothing, less than its 700 W limit.
        assert!(w > 10.0 && w < 700.0, "{w} W: {m:#}");
        let cost = m["wasted_energy_cost"].as_f64().unwrap();
        assert!((cost - kwh.unwrap() * doc["prices"]["kwh"].as_f64().unwrap()).abs() <= 0.006);
    }
}

/// Whole GPUs only: two services share GPU 0, one holds GPU 1, GPU 2 is empty.
const PROM_SCENARIO: &str = r#"
name = "energy-prom"
seed = 11
start = "2026-11-02T00:00:00Z"
utc_offset_hours = 0

[[nodes]]
name = "n1"
gpus = [{ model = "H100-80GB", count = 3 }]

[[workloads]]
name = "a"
kind = "inference"
node = "n1"
gpu = 0
memory_gib = 10.0
peak = 0.5
base = 0.1
namespace = "alpha"
pod = "a-0"

[[workloads]]
name = "b"
kind = "training"
node = "n1"
gpu = 0
memory_gib = 20.0
peak = 0.3
namespace = "beta"
pod = "b-0"

[[workloads]]
name = "c"
kind = "inference"
node = "n1"
gpu = 1
memory_gib = 8.0
peak = 0.4
base = 0.05
namespace = "gamma"
pod = "c-0"
"#;

/// The split through a real Prometheus (backfilled with one simulated day as the exporter's
/// OpenMetrics: power but no energy counter, so a row's energy is its mean power × 10 s): each
/// team's kWh equals the rule computed here from the rows themselves — a GPU row's energy ×
/// its activity shared by its processes' SM utilisation, the rest idle — and the parts add up.
#[test]
fn a_backfilled_prometheus_gives_each_team_its_share_of_the_rows() {
    use crate::support::openmetrics as om;
    use crate::support::prometheus as prom;
    prom::require_tools();
    let tmp = tempfile::tempdir().unwrap();
    let (gpu, mig, process, since) = om::simulate(tmp.path(), PROM_SCENARIO, "energy-prom");
    assert_eq!(mig.height(), 0);
    let server = prom::serve(tmp.path(), &om::openmetrics(&gpu, &mig, &process));

    // The rule, from the frames: per (gpu, ts), energy = power × 10 s, workload part = energy ×
    // activity, split by each process's sm_mean share (equally when none has one).
    let (g_gpu, g_ts, g_power, g_sm) = (
        om::strs(&gpu, "gpu"),
        om::f64s(&gpu, "ts"),
        om::f64s(&gpu, "power_mean_watts"),
        om::f64s(&gpu, "sm_active_mean"),
    );
    let mut rows: BTreeMap<(String, i64), (f64, f64)> = BTreeMap::new();
    for i in 0..gpu.height() {
        let (Some(g), Some(t), Some(w)) = (&g_gpu[i], g_ts[i], g_power[i]) else {
            continue;
        };
        rows.insert((g.clone(), t as i64), (w * 10.0, g_sm[i].unwrap_or(0.0)));
    }
    let (p_gpu, p_ts, p_sm, p_ns) = (
        om::strs(&process, "gpu"),
        om::f64s(&process, "ts"),
        om::f64s(&process, "sm_mean"),
        om::strs(&process, "namespace"),
    );
    let mut procs: BTreeMap<(String, i64), Vec<(String, f64)>> = BTreeMap::new();
    for i in 0..process.height() {
        let (Some(g), Some(t), Some(ns)) = (&p_gpu[i], p_ts[i], &p_ns[i]) else {
            continue;
        };
        procs
            .entry((g.clone(), t as i64))
            .or_default()
            .push((ns.clone(), p_sm[i].unwrap_or(0.0)));
    }
    let mut want: BTreeMap<String, f64> = BTreeMap::new();
    let mut total = 0.0;
    for (k, (e, a)) in &rows {
        total += e;
        let Some(ps) = procs.get(k) else { continue };
        let sum: f64 = ps.iter().map(|(_, s)| s).sum();
        for (ns, s) in ps {
            let share = if sum > 0.0 {
                s / sum
            } else {
                1.0 / ps.len() as f64
            };
            *want.entry(ns.clone()).or_default() += e * a.clamp(0.0, 1.0) * share;
        }
    }
    let (from, to) = (om::rfc3339(since), om::rfc3339(since + om::DAY_MS));
    let doc = report_json(
        &format!("prometheus:{}", server.url),
        &["--since", &from, "--until", &to],
    );
    assert_adds_up(&doc);
    let got = team_kwh(&doc);
    assert_eq!(
        got.keys().cloned().collect::<Vec<_>>(),
        ["alpha", "beta", "gamma"],
        "{got:?}"
    );
    for (team, j) in &want {
        let kwh = got[team].expect("known");
        assert!(
            (kwh - j / 3.6e6).abs() <= 0.0005 + 1e-3 * j / 3.6e6,
            "{team}: {kwh} vs {}",
            j / 3.6e6
        );
    }
    let gpu_kwh = doc["teams"]["energy"]["gpu_kwh"].as_f64().unwrap();
    assert!(
        (gpu_kwh - total / 3.6e6).abs() <= 0.001,
        "{gpu_kwh} vs {}",
        total / 3.6e6
    );
}
