//! The parts agree (issue 48): on the demo history and on a simulated 64-GPU fleet
//! (`fixtures/scenarios/fleet-64.toml`), `tessera mig plan`, `tessera report` and `tessera replay`
//! give the same GPUs before, after and freed for the same MIG plan, with `before − after =
//! freed`; `tessera analyze` and the report give the same consolidation figures; work that no MIG
//! instance holds keeps its GPU instead of being stranded; a replay of a plan that strands loaded
//! work is `unsafe`, never `safe` beside "not replayed"; and an out-of-sample replay whose planned
//! workloads and GPUs left the test period reports them as not seen instead of refusing.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::cli::run;

fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo-history")
}

fn json(args: &[&str]) -> Value {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// (before, after, freed) of a JSON object, checking `before − after = freed`.
fn count(v: &Value, what: &str) -> (i64, i64, i64) {
    let n = |k: &str| {
        v[k].as_i64()
            .unwrap_or_else(|| panic!("{what}: no integer {k} in {v:#}"))
    };
    let c = (n("gpus_before"), n("gpus_after"), n("gpus_freed"));
    assert_eq!(c.0 - c.1, c.2, "{what}: before − after ≠ freed");
    c
}

/// Plans, reports and replays `source`; asserts they agree and returns the plan's JSON, the
/// replay's JSON and the plan file.
fn plan_report_replay(dir: &Path, source: &str) -> (Value, Value, PathBuf) {
    let plan_file = dir.join("plan.yaml");
    let plan = json(&[
        "mig",
        "plan",
        "--source",
        source,
        "-o",
        plan_file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(plan["version"], 2);
    let report = json(&["report", "--source", source, "--format", "json"]);
    let replay = json(&[
        "replay",
        "--source",
        source,
        "--plan",
        plan_file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let p = count(&plan, "mig plan");
    let r = count(&report["mig"], "report");
    let x = count(&replay["fleet"], "replay");
    assert_eq!(p, r, "mig plan and report disagree");
    assert_eq!(p, x, "mig plan and replay disagree");
    assert_eq!(plan["helps"], report["mig"]["helps"]);
    assert_eq!(plan["helps"].as_bool().unwrap(), p.2 > 0);
    // A plan that does not free GPUs says so, in both, and points to the consolidation plan.
    let summary = report["mig"]["summary"].as_str().unwrap();
    if p.2 <= 0 {
        assert!(summary.contains("MIG does not help here"), "{summary}");
        assert!(summary.contains("consolidation plan"), "{summary}");
    } else {
        assert!(!summary.contains("does not help"), "{summary}");
    }
    // Nothing the plan names is left without a place: no "not replayed", and safe only when no
    // interval failed.
    let notes: Vec<&str> = replay["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        !notes
            .iter()
            .any(|n| n.contains("no replayed config places it")),
        "{notes:?}"
    );
    assert!(
        plan["unplaceable"].as_array().unwrap().is_empty(),
        "{plan:#}"
    );
    if replay["verdict"] == "safe" {
        assert_eq!(replay["failed_intervals"], 0);
    }
    // analyze and the report: the same consolidation, model by model.
    let analysis = json(&["analyze", "--source", source, "--format", "json"]);
    let mut from_analyze: Vec<(String, i64, i64, i64)> = analysis["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["detector"] == "consolidation")
        .map(|f| {
            let e = &f["evidence"];
            (
                e["model"].as_str().unwrap().to_string(),
                e["gpus_loaded"].as_i64().unwrap(),
                e["gpus_needed"].as_i64().unwrap(),
                e["gpus_freed"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut from_report: Vec<(String, i64, i64, i64)> = report["consolidation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["model"].as_str().unwrap().to_string(),
                c["gpus_loaded"].as_i64().unwrap(),
                c["gpus_needed"].as_i64().unwrap(),
                c["gpus_freed"].as_i64().unwrap(),
            )
        })
        .collect();
    from_analyze.sort();
    from_report.sort();
    assert_eq!(from_analyze, from_report);
    for (m, loaded, needed, freed) in &from_report {
        assert_eq!(loaded - needed, *freed, "{m}");
    }
    (plan, replay, plan_file)
}

#[test]
fn on_the_demo_every_part_counts_the_same_gpus_and_no_work_is_stranded() {
    let dir = tempfile::tempdir().unwrap();
    let source = format!("history:{}", demo().display());
    let (plan, replay, plan_file) = plan_report_replay(dir.path(), &source);
    // slurm-81234 runs at 71 GiB on an 80 GB GPU; with the 20% headroom no MIG instance holds it:
    // it keeps its GPU, which stays in use after the plan.
    let kept = plan["kept"].as_array().unwrap();
    assert!(kept.iter().any(|k| k["id"] == "slurm-81234"), "{kept:?}");
    let slurm = replay["placements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["workloads"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w == "slurm-81234")
        })
        .expect("slurm-81234 has a place in the replay");
    assert_eq!(slurm["kind"], "gpu");
    assert_eq!(slurm["exceeded_intervals"], 0);

    // Plant the strand: the day config no longer names slurm-81234 on its GPU.
    let text = std::fs::read_to_string(&plan_file).unwrap();
    let mut p = tessera_core::mig::plan::TesseraPlan::parse(&text, "plan.yaml").unwrap();
    let day = p.configs.get_mut("day").unwrap();
    let g = day
        .iter_mut()
        .find(|g| g.workloads.iter().any(|w| w == "slurm-81234"))
        .unwrap();
    g.workloads.clear();
    let stranded = dir.path().join("stranded.yaml");
    std::fs::write(&stranded, p.to_yaml()).unwrap();
    let r = json(&[
        "replay",
        "--source",
        &source,
        "--plan",
        stranded.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(r["verdict"], "unsafe", "{r:#}");
    assert!(r["failed_intervals"].as_u64().unwrap() > 0);
    let deciding: Vec<&str> = r["deciding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert!(
        deciding
            .iter()
            .any(|d| d.starts_with("slurm-81234:") && d.contains("no place")),
        "{deciding:?}"
    );
    let w = r["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == "slurm-81234")
        .unwrap();
    // Loaded in every interval of the range: every one of them failed.
    assert_eq!(w["unplaced_intervals"], w["rows"], "{w:#}");
    // And the GPU it left counts as freed only because the plan (wrongly) empties it.
    assert_eq!(
        r["fleet"]["gpus_after"].as_i64().unwrap(),
        replay["fleet"]["gpus_after"].as_i64().unwrap() - 1
    );
}

#[test]
fn an_out_of_sample_replay_reports_work_that_left_instead_of_refusing() {
    let dir = tempfile::tempdir().unwrap();
    // The demo with node lab-b gone from 2026-11-04 on.
    let h = dir.path().join("h");
    for node in ["lab-a", "lab-b"] {
        for table in ["gpu", "process"] {
            let from = demo().join(node).join(table);
            let to = h.join(node).join(table);
            std::fs::create_dir_all(&to).unwrap();
            for e in std::fs::read_dir(&from).unwrap() {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                if node == "lab-b" && name.as_str() >= "2026-11-04" {
                    continue;
                }
                std::fs::copy(e.path(), to.join(&name)).unwrap();
            }
        }
        std::fs::copy(
            demo().join(node).join("tessera-history.json"),
            h.join(node).join("tessera-history.json"),
        )
        .unwrap();
    }
    let source = format!("history:{}", h.display());
    let r = json(&[
        "replay",
        "--source",
        &source,
        "--train",
        "2026-11-02..2026-11-04",
        "--test",
        "2026-11-04..2026-11-06",
        "--kind",
        "mig",
        "--format",
        "json",
    ]);
    let notes: Vec<&str> = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n.starts_with("out of sample:")
            && n.contains("\"lab-b\"")
            && n.contains("not seen")),
        "{notes:?}"
    );
    // The workloads of lab-b are not seen (unknown), not failed and not zero.
    let gone: Vec<&Value> = r["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["node"] == "lab-b")
        .collect();
    assert!(!gone.is_empty());
    for w in &gone {
        assert_eq!(w["seen"], false, "{w:#}");
        assert!(w["peak_memory_bytes"].is_null());
    }
    count(&r["fleet"], "out-of-sample replay");
    // Replaying the same plan as a file on that range is still refused: it names a node the data
    // does not have.
    let plan_file = dir.path().join("trained.yaml");
    json(&[
        "replay",
        "--source",
        &source,
        "--train",
        "2026-11-02..2026-11-04",
        "--test",
        "2026-11-02..2026-11-04",
        "--kind",
        "mig",
        "--plan-out",
        plan_file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let (code, _, err) = run(&[
        "replay",
        "--source",
        &source,
        "--plan",
        plan_file.to_str().unwrap(),
        "--since",
        "2026-11-04",
        "--until",
        "2026-11-06",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not in the data"), "{err}");
}

#[test]
fn on_a_simulated_64_gpu_fleet_every_part_counts_the_same_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h");
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/fleet-64.toml");
    let (code, _, err) = run(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--days",
        "7",
        "--sample-interval",
        "5m",
        "--history.interval",
        "5m",
        "--out",
        h.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "simulate: {err}");
    let source = format!("history:{}", h.display());
    let (plan, _, _) = plan_report_replay(dir.path(), &source);
    // 64 GPUs in the fleet: neither side of the count can exceed it.
    let (before, after, _) = count(&plan, "mig plan");
    assert!(before <= 64 && after <= 64, "{before} → {after}");
}
