//! Allocation as a signal (issue 32), end to end on simulated history with planted truth
//! (`fixtures/scenarios/allocated.toml`, whose header lists it): pods and a Slurm job that hold
//! GPUs with nothing running, found by `tessera analyze` and priced per team by `tessera
//! report`, a held GPU never counted free by the off-peak profile, and a range that starts and
//! ends mid-hour.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::cli::tessera;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/allocated.toml")
}

/// Three days of the fixture at 30-second samples into 5-minute rows.
fn history(dir: &Path) -> PathBuf {
    let h = dir.join("h");
    let out = tessera(&[
        "simulate",
        "--scenario",
        fixture().to_str().unwrap(),
        "--days",
        "3",
        "--sample-interval",
        "30s",
        "--history.interval",
        "5m",
        "--out",
        h.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "simulate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    h
}

fn json(args: &[&str]) -> Value {
    let out = tessera(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The allocated_unused findings: "node/GPUn[/GIk] holder" → (kind, unused hours, wasted
/// GPU-hours).
fn allocated(analysis: &Value) -> BTreeMap<String, (String, f64, f64)> {
    analysis["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["detector"] == "allocated_unused")
        .map(|f| {
            let e = &f["entity"];
            let mut key = format!("{}/GPU{}", e["node"].as_str().unwrap(), e["gpu"]);
            if let Some(gi) = e["gpu_instance"].as_u64() {
                key.push_str(&format!("/GI{gi}"));
            }
            let holder = e["pod"]
                .as_str()
                .map(str::to_string)
                .or_else(|| e["slurm_job"].as_str().map(|j| format!("job {j}")))
                .unwrap();
            let ev = &f["evidence"];
            (
                format!("{key} {holder}"),
                (
                    ev["kind"].as_str().unwrap().to_string(),
                    ev["unused_hours"].as_f64().unwrap(),
                    ev["wasted_gpu_hours"].as_f64().unwrap(),
                ),
            )
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-3
}

#[test]
fn held_gpus_with_nothing_running_are_found_priced_per_team_and_never_free() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path());
    let src = format!("history:{}", h.display());
    let a = json(&["analyze", "--source", &src, "--format", "json"]);
    let found = allocated(&a);
    let mig = 72.0 * 3.0 / 7.0;
    let expected: BTreeMap<String, (String, f64, f64)> = [
        ("k8s-1/GPU1 nb-alice", "unused", 72.0, 72.0),
        ("k8s-1/GPU3 nb-bob", "unused", 24.0, 24.0),
        ("slurm-1/GPU1 job 4242", "unused", 72.0, 72.0),
        ("slurm-1/GPU2 job 4242", "unused", 72.0, 72.0),
        ("slurm-1/GPU3 job 4242", "unused", 72.0, 72.0),
        ("mig-1/GPU0/GI2 nb-carol", "unused", 72.0, mig),
    ]
    .into_iter()
    .map(|(k, kind, u, w)| (k.to_string(), (kind.to_string(), u, w)))
    .chain(std::iter::once(("slurm-1/GPU4 job 5151".to_string(), {
        let (kind, u, w) = &found["slurm-1/GPU4 job 5151"];
        // Low use: 72 h held at ~4% activity wastes ~96% of them.
        assert!(*w > 0.93 * 72.0 && *w < 0.98 * 72.0, "{w}");
        (kind.clone(), *u, *w)
    })))
    .collect();
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    for (k, (kind, u, w)) in &expected {
        let (fk, fu, fw) = &found[k];
        assert_eq!(fk, kind, "{k}");
        assert!(
            close(*fu, *u) && close(*fw, (*w * 1000.0).round() / 1000.0),
            "{k}: {:?}",
            found[k]
        );
    }
    assert_eq!(found["slurm-1/GPU4 job 5151"].0, "low_use");
    // The used devices (the job's GPU 0, the API, the embedding instance) are no finding.
    assert!(
        !found
            .keys()
            .any(|k| k.starts_with("slurm-1/GPU0") || k.starts_with("k8s-1/GPU0"))
    );
    // The GPU the notebook holds is idle but not free: the only GPU free around the clock is
    // k8s-1/GPU2.
    let offpeak = a["detectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "offpeak_window")
        .unwrap();
    assert_eq!(offpeak["data"]["baseline"]["gpus"], 1, "{offpeak:#}");
    let alloc = a["detectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == "allocated_unused")
        .unwrap();
    let unused = 72.0 * 4.0 + 24.0 + mig;
    assert!(
        close(alloc["data"]["unused_gpu_hours"].as_f64().unwrap(), unused),
        "{alloc:#}"
    );

    // The report: the fleet's figure, each team's share and price (default price per GPU-hour).
    let r = json(&["report", "--source", &src, "--format", "json"]);
    let price = r["prices"]["gpu_hour"].as_f64().unwrap();
    let s = &r["allocation"];
    assert!(
        close(s["unused_gpu_hours"].as_f64().unwrap(), unused),
        "{s:#}"
    );
    assert_eq!(
        (s["devices_unused"].as_u64(), s["devices_low_use"].as_u64()),
        (Some(6), Some(1))
    );
    let teams: BTreeMap<&str, &Value> = r["teams"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["team"].as_str().unwrap(), t))
        .collect();
    for (team, hours) in [
        ("notebooks", 96.0),
        ("research", mig),
        ("slurm job 4242", 216.0),
        ("serving", 0.0),
        ("slurm job 5151", 0.0),
    ] {
        let t = teams
            .get(team)
            .unwrap_or_else(|| panic!("no team {team}: {teams:#?}"));
        assert!(
            close(t["allocated_unused_gpu_hours"].as_f64().unwrap(), hours),
            "{team}: {t:#}"
        );
        assert!(
            (t["allocated_unused_cost"].as_f64().unwrap() - hours * price).abs() < 0.01,
            "{team}: {t:#}"
        );
    }
    // The free timeline counts the same: k8s-1/GPU2 always, GPU3 outside nb-bob's day; the
    // held GPUs never, idle as they are.
    for h in r["charts"]["free_timeline"].as_array().unwrap() {
        let hour = h["hour"].as_str().unwrap();
        let expected = if hour.starts_with("2026-11-03") { 1 } else { 2 };
        assert_eq!(h["free_gpus"], expected, "{h}");
    }
    // The notebooks team ran no process: its row exists for what it held.
    assert_eq!(teams["notebooks"]["processes"], 0);
    let table = tessera(&["report", "--source", &src]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("Allocated but unused"), "{text}");
    assert!(text.contains("k8s-1/GPU1 (notebooks/nb-alice)"), "{text}");

    // `tessera job`: the job held four GPUs and ran on one.
    let j = json(&["job", "4242", "--source", &src, "--format", "json"]);
    let devices = j["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 4, "{j:#}");
    let held: Vec<u64> = devices
        .iter()
        .filter(|d| d["held_only"] == true)
        .map(|d| d["gpu"].as_u64().unwrap())
        .collect();
    assert_eq!(held, [1, 2, 3], "{j:#}");
    assert!(close(j["gpu_hours"].as_f64().unwrap(), 4.0 * 72.0), "{j:#}");
    let verdict = j["verdict"].to_string();
    assert!(
        verdict.contains(
            "It held 3 of its 4 GPU(s) without ever running anything on them (216.0 GPU-hours)"
        ),
        "{verdict}"
    );
    // Its mean activity counts the idle GPUs it held: about a quarter of the one it trained on.
    let mean = j["activity_mean"].as_f64().unwrap();
    assert!(mean > 0.15 && mean < 0.3, "{mean}");
    let light = json(&["job", "5151", "--source", &src, "--format", "json"]);
    assert!(
        !light["devices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["held_only"] == true)
    );

    // A range that starts and ends mid-hour: nb-alice's GPU is unused for exactly the range
    // (rows of 5 minutes ending in (since, until]); nb-bob's day lies inside it.
    let a = json(&[
        "analyze",
        "--source",
        &src,
        "--since",
        "2026-11-02T05:30:00Z",
        "--until",
        "2026-11-04T17:45:00Z",
        "--format",
        "json",
    ]);
    let found = allocated(&a);
    assert!(close(found["k8s-1/GPU1 nb-alice"].1, 60.25), "{found:#?}");
    assert!(close(found["k8s-1/GPU3 nb-bob"].1, 24.0), "{found:#?}");
}

#[test]
fn without_holders_nothing_is_claimed() {
    // The demo history (format version 1) knows no holders: no finding, "unknown" in the
    // report, never 0.
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo-history");
    let src = format!("history:{}", demo.display());
    let a = json(&["analyze", "--source", &src, "--format", "json"]);
    assert!(
        !a["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["detector"] == "allocated_unused")
    );
    let r = json(&["report", "--source", &src, "--format", "json"]);
    assert!(r["allocation"].is_null(), "{:#}", r["allocation"]);
    let table = tessera(&["report", "--source", &src]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("Unknown: which pod or job holds each GPU is not in the data"),
        "{text}"
    );
}
