//! `tessera mig` on its real NVML code path: the binary with `--backend nvml --nvml.lib-path`
//! loading the fake `libnvidia-ml.so` (backed by `fixtures/scenarios/mig-node.toml`), against the
//! same binary on `--backend sim`. The fake keeps its MIG state in memory, so every command here is
//! one process: export, a dry run, and an apply --yes (which asserts the node itself afterwards).

use tessera_e2e::{fake_nvml, run, tessera};

const SCENARIO: &str = "fixtures/scenarios/mig-node.toml";
const NODE: &str = "mig-node-1";

fn nvml(args: &[&str]) -> std::process::Command {
    let mut cmd = tessera!["mig"];
    cmd.args(args)
        .arg("--backend")
        .arg("nvml")
        .arg("--nvml.lib-path")
        .arg(fake_nvml())
        .args(["--node", NODE])
        .env("TESSERA_FAKE_NVML_SCENARIO", SCENARIO)
        .env("TESSERA_FAKE_NVML_NODE", NODE)
        .env("TESSERA_FAKE_NVML_TIME", "2026-11-02T14:00:00Z");
    cmd
}

fn without_comment(s: &str) -> String {
    s.lines()
        .filter(|l| !l.starts_with("comment:"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn export_through_nvml_equals_the_simulator() {
    let (out, nvml_plan, err) = run(nvml(&["export"]));
    assert!(out.status.success(), "{err}");
    let (out, sim_plan, err) = run(tessera![
        "mig",
        "export",
        "--backend",
        "sim",
        "--sim.scenario",
        SCENARIO
    ]);
    assert!(out.status.success(), "{err}");
    assert_eq!(without_comment(&nvml_plan), without_comment(&sim_plan));
    assert!(nvml_plan.contains("profile-id: 14"), "{nvml_plan}");
}

#[test]
fn apply_through_nvml() {
    let dir = tempfile::tempdir().unwrap();
    let (out, plan, err) = run(nvml(&["export"]));
    assert!(out.status.success(), "{err}");
    // GPU 2: the 2g.20gb at 4 becomes two 1g.10gb at 4 and 5.
    let edited = plan.replace(
        "    - profile: 2g.20gb\n      profile-id: 14\n      placement:\n        start: 4\n        size: 2\n",
        "    - profile: 1g.10gb\n      profile-id: 19\n      placement:\n        start: 4\n        size: 1\n    - profile: 1g.10gb\n      profile-id: 19\n      placement:\n        start: 5\n        size: 1\n",
    );
    assert_ne!(edited, plan);
    let path = dir.path().join("plan.yaml");
    std::fs::write(&path, &edited).unwrap();
    let path = path.to_str().unwrap();
    let (out, stdout, err) = run(nvml(&["assert", path]));
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(stdout.contains("extra: 2g.20gb"), "{stdout}");
    let (out, stdout, err) = run(nvml(&["apply", path]));
    assert!(out.status.success(), "{err}");
    assert!(stdout.contains("6 steps"), "{stdout}");
    let lock = dir.path().join("l");
    let journal = dir.path().join("j");
    let (out, stdout, err) = run(nvml(&[
        "apply",
        path,
        "--yes",
        "--lock",
        lock.to_str().unwrap(),
        "--journal",
        journal.to_str().unwrap(),
    ]));
    assert!(out.status.success(), "{err}");
    assert!(stdout.contains("applied 6 steps"), "{stdout}");
    let journal = std::fs::read_to_string(&journal).unwrap();
    assert!(journal.contains("\"applied\""), "{journal}");
    // Replacing the busy 3g.40gb is refused through NVML too (pid and name; no pod on this path).
    let busy = plan.replace(
        "    - profile: 3g.40gb\n      profile-id: 9\n      placement:\n        start: 0\n        size: 4\n",
        "    - profile: 2g.20gb\n      profile-id: 14\n      placement:\n        start: 0\n        size: 2\n",
    );
    assert_ne!(busy, plan);
    let path = dir.path().join("busy.yaml");
    std::fs::write(&path, &busy).unwrap();
    let (out, _, err) = run(nvml(&[
        "apply",
        path.to_str().unwrap(),
        "--yes",
        "--lock",
        lock.to_str().unwrap(),
        "--journal",
        dir.path().join("j2").to_str().unwrap(),
    ]));
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("pid 4017 (vllm)"), "{err}");
}
