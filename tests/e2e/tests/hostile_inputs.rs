//! End-to-end: hostile scenario and MIG files (issue 17, items 3, 7 and 8) fail both binaries
//! with exit status 2, a clear message and no time or memory to speak of.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tessera_e2e::{exporter, tessera};

/// Run `cmd`, killing it after `limit`; its exit code and stderr.
fn run_within(mut cmd: Command, limit: Duration) -> (Option<i32>, String) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning binary");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting") {
            let out = child.wait_with_output().expect("stderr");
            return (
                status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {limit:?}: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_billion_gpus_exits_2_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("billion.toml");
    std::fs::write(
        &file,
        "name = \"x\"\nstart = \"2026-11-02T00:00:00Z\"\n[[nodes]]\nname = \"n\"\ngpus = [{ model = \"H100-80GB\", count = 1000000000 }]\n",
    )
    .unwrap();
    let want = "nodes[0] (n).gpus: 1000000000 GPUs; expected at most 64 per node";
    for cmd in [
        tessera!["scenario", "check", &file],
        exporter!["--backend", "sim", "--sim.scenario", &file, "--once"],
    ] {
        let (code, stderr) = run_within(cmd, Duration::from_secs(10));
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains("billion.toml") && stderr.contains(want),
            "{stderr}"
        );
    }
}

#[test]
fn nonsense_scenario_values_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nonsense.toml");
    std::fs::write(
        &file,
        "name = \"x\"\nstart = \"2026-11-02T00:00:00Z\"\n[[nodes]]\nname = \"n\"\ngpus = [{ model = \"H100-80GB\" }]\n[[faults]]\nkind = \"gpu_lost\"\nnode = \"n\"\ngpu = 0\nat = \"2026-11-02T10:00:00Z\"\nuntil = \"2026-11-02T09:00:00Z\"\n",
    )
    .unwrap();
    let (code, stderr) = run_within(
        tessera!["scenario", "check", &file],
        Duration::from_secs(10),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("faults[0] (GpuLost)") && stderr.contains("must be after at"),
        "{stderr}"
    );
}

#[test]
fn deeply_nested_mig_files_exit_2_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // 200 KB, 100,000 levels: over a minute in serde_yaml_ng.
    let nest = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let parted = dir.path().join("parted.yaml");
    std::fs::write(&parted, format!("version: v1\nmig-configs: {nest}\n")).unwrap();
    let schedule = dir.path().join("schedule.yaml");
    std::fs::write(&schedule, format!("version: v1\nswitches: {nest}\n")).unwrap();
    let state = dir.path().join("state.json");
    for (cmd, file) in [
        (
            exporter![
                "--backend",
                "sim",
                "--once",
                "--mig.config",
                &parted,
                "--mig.config-label",
                "a"
            ],
            "parted.yaml",
        ),
        (
            tessera![
                "mig",
                "apply",
                "--backend",
                "sim",
                "--sim.state",
                &state,
                "--schedule",
                &schedule
            ],
            "schedule.yaml",
        ),
        (
            // A plan given directly: its format is sniffed by parsing it, after the check.
            tessera![
                "mig",
                "assert",
                "--backend",
                "sim",
                "--sim.state",
                &state,
                &parted
            ],
            "parted.yaml",
        ),
    ] {
        let (code, stderr) = run_within(cmd, Duration::from_secs(10));
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains(file)
                && stderr.contains("line 2 column")
                && stderr.contains("nested deeper than 32 levels"),
            "{stderr}"
        );
    }
}
