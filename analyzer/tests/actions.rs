//! One recommendation per workload (issue 54): on the demo history and on a simulated 64-GPU
//! fleet (`fixtures/scenarios/fleet-64.toml`), the actions of `analyze`, `report` and the alerts
//! of `notify --dry-run` — every workload (device) in at most one action of an output, the same
//! actions in `analyze` and `report`, each alert carrying its finding's action, every action with
//! a command or the owner's advice, Kubernetes-only commands never for a Slurm or unattributed
//! workload, and the report and analyze opening with the Actions block.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::cli::run;

fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo-history")
}

fn out(args: &[&str]) -> String {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

fn json(args: &[&str]) -> Value {
    let o = out(args);
    serde_json::from_str(&o).unwrap_or_else(|e| panic!("{e}: {o}"))
}

/// (kind, the workloads' keys) of each action.
fn actions(v: &Value) -> Vec<(String, Vec<String>)> {
    v["actions"]
        .as_array()
        .expect("actions[]")
        .iter()
        .map(|a| {
            (
                a["kind"].as_str().unwrap().to_string(),
                a["workloads"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|w| w["key"].as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

fn check(source: &str, expect_kinds: &[&str]) {
    let analysis = json(&["analyze", "--source", source, "--format", "json"]);
    let report = json(&["report", "--source", source, "--format", "json"]);
    for (what, v) in [("analyze", &analysis), ("report", &report)] {
        // Every workload in at most one action.
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for (kind, keys) in actions(v) {
            for k in keys.iter().collect::<BTreeSet<_>>() {
                if let Some(other) = seen.insert(k.clone(), kind.clone()) {
                    panic!("{what} on {source}: {k} in a {other} and a {kind} action");
                }
            }
        }
        for a in v["actions"].as_array().unwrap() {
            let steps = a["steps"].as_array().unwrap();
            assert!(
                !steps.is_empty() || a["advice"].is_string(),
                "{what}: an action with neither a command nor advice: {a:#}"
            );
            for s in steps {
                let c = s["command"].as_str().unwrap();
                assert!(c.starts_with("tessera "), "{c}");
                // Kubernetes-only commands: only for Kubernetes workloads.
                if c.starts_with("tessera scale-down") || c.starts_with("tessera share apply") {
                    for w in a["workloads"].as_array().unwrap() {
                        assert_eq!(w["scheduler"], "kubernetes", "{what}: {c} for {w}");
                    }
                }
            }
            let rank = a["rank"].as_u64().unwrap();
            assert!(rank >= 1);
            assert!(a["gpu_hours_per_month"].as_f64().unwrap() >= 0.0);
        }
        let ranks: Vec<u64> = v["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["rank"].as_u64().unwrap())
            .collect();
        assert_eq!(ranks, (1..=ranks.len() as u64).collect::<Vec<_>>());
    }
    // analyze and report give the same actions (the report prices them).
    assert_eq!(actions(&analysis), actions(&report), "{source}");
    for a in report["actions"].as_array().unwrap() {
        let (h, s) = (
            a["gpu_hours_per_month"].as_f64().unwrap(),
            a["saving_per_month"]
                .as_f64()
                .expect("priced in the report"),
        );
        let price = report["prices"]["gpu_hour"].as_f64().unwrap();
        assert!((s - h * price).abs() < 1e-6, "{a:#}");
    }
    let kinds: BTreeSet<String> = actions(&report).into_iter().map(|(k, _)| k).collect();
    for k in expect_kinds {
        assert!(kinds.contains(*k), "{source}: no {k} action in {kinds:?}");
    }
    // notify: each alert carries the action of its finding's workload.
    let alerts = json(&["notify", "--source", source, "--dry-run"]);
    let by_finding: BTreeMap<String, u64> = analysis["actions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| {
            a["findings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| (f.as_str().unwrap().to_string(), a["rank"].as_u64().unwrap()))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut carried = 0;
    for al in alerts.as_array().unwrap() {
        let id = al["labels"]["finding_id"].as_str().unwrap();
        let action = al["annotations"]["action"].as_str().unwrap();
        if let Some(rank) = by_finding.get(id) {
            assert!(
                action.starts_with(&format!("action {rank}. ")),
                "{id}: {action}"
            );
            carried += 1;
        }
    }
    assert!(carried > 0, "{source}: no alert carries an action");
    // Actions first, in the text outputs.
    let table = out(&["report", "--source", source]);
    let first = table.find("== ").expect("a section");
    assert!(table[first..].starts_with("== Actions"), "{table}");
    let text = out(&["analyze", "--source", source]);
    let first = text.find("== ").expect("a section");
    assert!(text[first..].starts_with("== Actions"), "{text}");
}

#[test]
fn the_demo_gets_one_action_per_workload_in_every_output() {
    let demo = format!("history:{}", demo().display());
    check(&demo, &["scale_to_zero", "mig_layout"]);
    // The workload the three detectors answered before: scaled to zero, and nothing else.
    let report = json(&["report", "--source", &demo, "--format", "json"]);
    let embed: Vec<&Value> = report["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| {
            a["workloads"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w["label"].as_str().unwrap().contains("embed-test"))
        })
        .collect();
    assert_eq!(embed.len(), 1, "{embed:#?}");
    assert_eq!(embed[0]["kind"], "scale_to_zero");
}

#[test]
fn a_simulated_fleet_gets_one_action_per_workload_in_every_output() {
    let dir = tempfile::tempdir().unwrap();
    check(
        &crate::support::cli::fleet_64(dir.path()),
        &["scale_to_zero"],
    );
}

#[test]
fn the_reports_plan_actions_carry_the_replay_verdict_of_their_plan_on_the_period() {
    let demo = format!("history:{}", demo().display());
    // A range of the user's own: the plan actions' commands read it too.
    let (from, until) = ("2026-11-03T00:00:00Z", "2026-11-05T00:00:00Z");
    let range = ["--since", from, "--until", until];
    let mut args = vec!["report", "--source", &demo, "--format", "json"];
    args.extend(range);
    let report = json(&args);
    let mig: Vec<&Value> = report["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "mig_layout")
        .collect();
    assert_eq!(mig.len(), 1, "{:#}", report["actions"]);
    let verdict = mig[0]["verdict"].as_str().unwrap();
    // The action's own commands, run as printed in a folder of their own: the plan (with the
    // report's range), then its replay; the replay's verdict of the day layout is the action's.
    let dir = tempfile::tempdir().unwrap();
    let steps: Vec<String> = mig[0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["command"].as_str().unwrap().to_string())
        .collect();
    let plan_cmd = steps
        .iter()
        .find(|c| c.starts_with("tessera mig plan"))
        .unwrap();
    let replay_cmd = steps
        .iter()
        .find(|c| c.starts_with("tessera replay"))
        .unwrap();
    for c in [plan_cmd, replay_cmd] {
        assert!(
            c.contains(&format!("--since {from} --until {until}")),
            "{c}"
        );
    }
    let run_in = |cmd: &str, extra: &[&str]| -> String {
        let mut words: Vec<&str> = cmd.split(' ').skip(1).collect();
        words.extend(extra);
        let out = crate::support::cli::tessera_with(&words, |c| {
            c.current_dir(dir.path());
        });
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run_in(plan_cmd, &[]);
    let replay: Value = serde_json::from_str(&run_in(
        replay_cmd,
        &["--config", "day", "--format", "json"],
    ))
    .unwrap();
    let want = format!(
        "{} on the period ({} .. {}), it was planned from: {} failed interval(s)",
        replay["verdict"].as_str().unwrap(),
        report["from"].as_str().unwrap(),
        report["until"].as_str().unwrap(),
        replay["failed_intervals"]
    );
    assert!(verdict.starts_with(&want), "{verdict}\nvs {want}");
    // analyze over the same range replays the same plan: the same verdict.
    let mut a = vec!["analyze", "--source", &demo, "--format", "json"];
    a.extend(range);
    let analysis = json(&a);
    let av = analysis["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "mig_layout")
        .unwrap()["verdict"]
        .clone();
    assert_eq!(av, mig[0]["verdict"]);
    // Commands that act read fresh data: no range of the past in them.
    for a in report["actions"].as_array().unwrap() {
        for s in a["steps"].as_array().unwrap() {
            let c = s["command"].as_str().unwrap();
            if c.starts_with("tessera scale-down") || c.starts_with("tessera share apply") {
                assert!(!c.contains("--until"), "{c}");
            }
        }
    }
    // --no-replay leaves it to the printed replay step.
    let quick = json(&[
        "report",
        "--source",
        &demo,
        "--format",
        "json",
        "--no-replay",
    ]);
    let v = quick["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "mig_layout")
        .unwrap()["verdict"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(v.starts_with("not replayed in this output"), "{v}");
}
