//! `tessera analyze --plan-out FILE` on the demo history (`fixtures/demo-history`): the plan
//! file's consolidation moves are the findings' groups as the JSON shows them (host = the group's
//! host, guests = its other workloads) without the workloads an action answers first (scaled to
//! zero, released: docs/findings.md "Actions"), the window is the analysed range, the file parses
//! as a `tessera-plan`; and a run without a consolidation finding writes nothing and says why.

use std::path::Path;

use serde_json::Value;
use tessera_core::mig::plan::TesseraPlan;

use crate::support::cli::run as tessera;

fn demo() -> String {
    format!(
        "history:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/demo-history")
            .display()
    )
}

#[test]
fn the_moves_are_the_consolidation_findings_groups() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan.yaml");
    let (code, stdout, stderr) = tessera(&[
        "analyze",
        "--source",
        &demo(),
        "--format",
        "json",
        "--plan-out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let analysis: Value = serde_json::from_str(&stdout).unwrap();
    let plan = TesseraPlan::from_file(&out).expect("the plan parses");
    assert_eq!(plan.kind, "tessera-plan");
    assert!(plan.configs.is_empty());
    let window = plan.window.as_ref().unwrap();
    assert_eq!(window.from, analysis["from"].as_str().unwrap());
    assert_eq!(window.until, analysis["until"].as_str().unwrap());

    // The groups as the findings' JSON shows them, in order.
    let mut groups = Vec::new();
    for f in analysis["findings"].as_array().unwrap() {
        if f["detector"] != "consolidation" {
            continue;
        }
        for g in f["evidence"]["plan"].as_array().unwrap() {
            groups.push((f["evidence"]["model"].clone(), g.clone()));
        }
    }
    assert!(!groups.is_empty(), "the demo has a consolidation finding");
    // The devices scaled to zero or released first: not moved.
    let first: Vec<&str> = analysis["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "scale_to_zero" || a["kind"] == "release")
        .flat_map(|a| a["workloads"].as_array().unwrap().iter())
        .map(|w| w["key"].as_str().unwrap())
        .collect();
    assert!(!first.is_empty(), "the demo scales embed-test to zero");
    let left = |w: &Value| !first.contains(&w["uuid"].as_str().unwrap());
    assert_eq!(plan.consolidation.len(), groups.len());
    for (m, (model, g)) in plan.consolidation.iter().zip(&groups) {
        assert_eq!(m.model, model.as_str().unwrap());
        assert_eq!(m.host.node, g["host"]["node"].as_str().unwrap());
        assert_eq!(u64::from(m.host.gpu), g["host"]["gpu"].as_u64().unwrap());
        assert_eq!(m.host.uuid.as_deref(), g["host"]["uuid"].as_str());
        let guests: Vec<(&str, u64)> = g["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["uuid"] != g["host"]["uuid"] && left(w))
            .map(|w| (w["node"].as_str().unwrap(), w["gpu"].as_u64().unwrap()))
            .collect();
        let ours: Vec<(&str, u64)> = m
            .guests
            .iter()
            .map(|w| (w.node.as_str(), u64::from(w.gpu)))
            .collect();
        assert_eq!(ours, guests);
    }
    let freed: u64 = groups
        .iter()
        .map(|(_, g)| {
            g["workloads"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|w| w["uuid"] != g["host"]["uuid"] && left(w))
                .count() as u64
        })
        .sum();
    assert_eq!(
        freed, 1,
        "lab-a/GPU1 moves; GPU2 (embed-test) is scaled to zero instead"
    );
    assert!(stderr.contains(&format!(
        "({} consolidation move(s))",
        plan.consolidation.len()
    )));
    assert_eq!(
        plan.consolidation
            .iter()
            .map(|m| m.guests.len() as u64)
            .sum::<u64>(),
        freed
    );
}

#[test]
fn without_a_consolidation_finding_no_plan_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan.yaml");
    let (code, _, stderr) = tessera(&[
        "analyze",
        "--source",
        &demo(),
        "--detector",
        "idle_loaded",
        "--plan-out",
        out.to_str().unwrap(),
    ]);
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("no consolidation finding"), "{stderr}");
    assert!(!out.exists());
}
