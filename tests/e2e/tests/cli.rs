//! End-to-end: the binaries as a user runs them.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::Value;
use tessera_e2e::{exporter, run, tessera};

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn once_json_prints_one_versioned_snapshot_of_the_demo_node() {
    let (out, stdout, stderr) = run(exporter!["--backend", "sim", "--once", "--format", "json"]);
    assert!(out.status.success(), "{stderr}");
    let doc = json(&stdout);
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["backend"], "sim");
    assert_eq!(doc["inventory"]["node"], "gpu-node-1");
    let gpus = doc["inventory"]["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 4);
    assert_eq!(gpus[0]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(gpus[3]["mig_instances"].as_array().unwrap().len(), 3);
    // The demo scenario starts 2026-11-02T00:00:00Z; --once reports exactly that instant.
    assert_eq!(doc["sample"]["timestamp_ms"], 1_793_577_600_000i64);
    // The forgotten embeddings model holds memory with no activity.
    let g1 = &doc["sample"]["gpus"][1];
    assert_eq!(g1["processes"][0]["name"], "python3");
    assert!(g1["processes"][0]["used_memory_bytes"].as_u64().unwrap() > 14 << 30);
    assert_eq!(g1["sm_active_ratio"], 0.0);
    // MIG GPU: no device utilisation, like real hardware (absent, not 0).
    assert!(doc["sample"]["gpus"][3]["busy_ratio"].is_null());
}

#[test]
fn once_is_deterministic_through_the_binary() {
    let args = [
        "--backend",
        "sim",
        "--once",
        "--format",
        "json",
        "--sim.node",
        "gpu-node-2",
        "--sim.time",
        "2026-11-04T14:30:00Z",
    ];
    let (_, a, _) = run(exporter![
        args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8]
    ]);
    let (_, b, _) = run(exporter![
        args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8]
    ]);
    assert!(!a.is_empty());
    assert_eq!(a, b);
}

#[test]
fn once_table_shows_gpus_mig_instances_processes_and_problems() {
    let (out, stdout, stderr) = run(exporter![
        "--backend",
        "sim",
        "--once",
        "--sim.node",
        "gpu-node-3",
        "--sim.time",
        "2026-11-03T11:00:00Z"
    ]);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("node gpu-node-3  backend sim"), "{stdout}");
    assert!(stdout.contains("NVIDIA A100-SXM4-40GB"));
    assert!(
        stdout.contains("LOST"),
        "GPU 1 is lost in this window:\n{stdout}"
    );
    assert!(stdout.contains("GPU 1: lost"));
    let (_, stdout, _) = run(exporter!["--backend", "sim", "--once"]);
    assert!(
        stdout.contains("MIG instances") && stdout.contains("3g.40gb (id 9)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Processes") && !stdout.contains("torchrun"),
        "training is not running at midnight"
    );
    assert!(!stdout.contains('\u{1b}'), "no colour codes");
}

#[test]
fn without_a_driver_the_exporter_says_so_in_one_line_and_exits_2() {
    for once in [true, false] {
        let mut cmd = exporter![
            "--backend",
            "nvml",
            "--nvml.lib-path",
            "/nonexistent/libnvidia-ml.so.1"
        ];
        if once {
            cmd.arg("--once");
        }
        let (out, stdout, stderr) = run(cmd);
        assert_eq!(
            out.status.code(),
            Some(2),
            "stdout: {stdout} stderr: {stderr}"
        );
        assert!(stdout.is_empty());
        let lines: Vec<_> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].contains("NVML not available"), "{stderr}");
        assert!(lines[0].contains("--backend sim"), "{stderr}");
    }
}

#[test]
fn bad_input_gets_a_clear_error_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"x\"\nstart = \"2026-11-02T00:00:00Z\"\n[[nodes]]\nname = \"n\"\ngpus = [{ model = \"Z80\" }]\n").unwrap();
    let (out, _, stderr) = run(exporter![
        "--backend",
        "sim",
        "--sim.scenario",
        &bad,
        "--once"
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("bad.toml") && stderr.contains("unknown GPU model \"Z80\""),
        "{stderr}"
    );

    let (out, _, stderr) = run(exporter![
        "--backend",
        "sim",
        "--sim.node",
        "nope",
        "--once"
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("no node \"nope\"") && stderr.contains("gpu-node-1"),
        "{stderr}"
    );

    let (out, _, stderr) = run(exporter!["--backend", "sim", "--sample.interval", "fast"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("invalid duration"), "{stderr}");

    let (out, _, stderr) = run(tessera!["scenario", "check", &bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("bad.toml"), "{stderr}");

    let web = dir.path().join("web.yml");
    std::fs::write(&web, "basic_auth_users:\n  alice: notahash\n").unwrap();
    // History off: a failing start must not leave a node folder in /var/lib/tessera/history.
    let (out, _, stderr) = run(exporter![
        "--backend",
        "sim",
        "--history.dir",
        "",
        "--web.listen-address",
        "127.0.0.1:0",
        "--web.config.file",
        &web
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("web.yml") && stderr.contains("basic_auth_users.alice"),
        "{stderr}"
    );
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: nope.pem\n  key_file: nope.key\n",
    )
    .unwrap();
    // History off: a failing start must not leave a node folder in /var/lib/tessera/history.
    let (out, _, stderr) = run(exporter![
        "--backend",
        "sim",
        "--history.dir",
        "",
        "--web.listen-address",
        "127.0.0.1:0",
        "--web.config.file",
        &web
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("tls_server_config.cert_file") && stderr.contains("nope.pem"),
        "{stderr}"
    );
    let (out, _, stderr) = run(exporter![
        "--backend",
        "sim",
        "--history.dir",
        "",
        "--web.listen-address",
        "nonsense"
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("--web.listen-address \"nonsense\""),
        "{stderr}"
    );

    let missing = dir.path().join("missing.toml");
    let (out, _, stderr) = run(exporter![
        "--backend",
        "sim",
        "--sim.scenario",
        &missing,
        "--once"
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("cannot read scenario") && stderr.contains("missing.toml"),
        "{stderr}"
    );
}

#[test]
fn continuous_mode_keeps_sampling() {
    let mut child = exporter![
        "--backend",
        "sim",
        "--watch",
        "--history.dir",
        "",
        "--format",
        "json",
        "--sample.interval",
        "50ms",
        "--sim.speed",
        "60",
        "--web.listen-address",
        "127.0.0.1:0"
    ]
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut last = 0;
    for _ in 0..4 {
        let sample = json(&lines.next().unwrap().unwrap());
        let t = sample["timestamp_ms"].as_i64().unwrap();
        assert!(t > last, "virtual time moves forward");
        last = t;
        assert_eq!(sample["gpus"].as_array().unwrap().len(), 4);
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn scenario_truth_lists_the_planted_conditions() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("truth.json");
    let (out, _, stderr) = run(tessera![
        "scenario",
        "truth",
        "fixtures/scenarios/demo.toml",
        "--days",
        "2",
        "-o",
        &out_path
    ]);
    assert!(out.status.success(), "{stderr}");
    let truth = json(&std::fs::read_to_string(&out_path).unwrap());
    assert_eq!(truth["version"], 1);
    assert_eq!(truth["end"], "2026-11-04T00:00:00Z");
    let idle: Vec<_> = truth["idle_loaded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["workload"].as_str().unwrap())
        .collect();
    assert!(
        idle.contains(&"embeddings-forgotten") && idle.contains(&"ocr-mig-idle"),
        "{idle:?}"
    );
    let (out, stdout, _) = run(tessera!["scenario", "check"]);
    assert!(out.status.success());
    assert!(stdout.contains("scenario demo"));
}

#[test]
fn a_bad_mig_plan_gets_a_clear_error_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let plan = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let check = |file: &std::path::Path, label: &str, expect: &[&str]| {
        let (out, _, stderr) = run(exporter![
            "--backend",
            "sim",
            "--once",
            "--mig.config",
            file,
            "--mig.config-label",
            label
        ]);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        for e in expect {
            assert!(stderr.contains(e), "expected {e:?} in: {stderr}");
        }
    };
    // A typo'd key: file, YAML path, line and column.
    let typo = plan(
        "typo.yaml",
        "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enable: true\n",
    );
    check(
        &typo,
        "a",
        &[
            "typo.yaml",
            "mig-configs.a[0]",
            "unknown field `mig-enable`",
            "line 5",
        ],
    );
    // A profile of another GPU model (the demo node has H100s).
    let a100 = plan(
        "a100.yaml",
        "version: v1\nmig-configs:\n  a:\n    - devices: [3]\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 7}\n",
    );
    check(
        &a100,
        "a",
        &[
            "a100.yaml",
            "GPU 3",
            "\"1g.5gb\" does not exist on H100-80GB",
        ],
    );
    check(&a100, "b", &["no config labelled \"b\"", "the file has: a"]);
    // Both flags or neither.
    let (out, _, stderr) = run(exporter![
        "--backend",
        "sim",
        "--once",
        "--mig.config",
        &a100
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("--mig.config-label"), "{stderr}");
    // The matching plan is accepted.
    let good = plan(
        "good.yaml",
        "version: v1\nmig-configs:\n  a:\n    - devices: [0, 1, 2]\n      mig-enabled: false\n    - devices: [3]\n      mig-enabled: true\n      mig-devices: {\"3g.40gb\": 1, \"2g.20gb\": 1, \"1g.10gb\": 1}\n",
    );
    let (out, _, stderr) = run(exporter![
        "--backend",
        "sim",
        "--once",
        "--mig.config",
        &good,
        "--mig.config-label",
        "a"
    ]);
    assert!(out.status.success(), "{stderr}");
}

/// Output piped into a reader that goes away (`tessera … | head -1`) ends quietly: no panic
/// ("failed printing to stdout: Broken pipe"), no exit status 101.
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    let mut child = tessera![
        "scenario",
        "truth",
        tessera_e2e::repo_root().join("fixtures/scenarios/demo.toml"),
        "--days",
        "7"
    ]
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("first line");
    // The reader goes away after one line, as `head -1` does.
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
    assert_eq!(first.trim(), "{");
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        if e.file_type().expect("type").is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
}

/// History given twice (a copy of the nodes' folders next to the original: the same rows twice,
/// issue 17 item 11) analyses and reports exactly as once: each duplicate row is counted once,
/// and both commands say how many were dropped.
#[test]
fn analyze_and_report_count_duplicate_history_rows_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    let demo = tessera_e2e::repo_root().join("fixtures/demo-history");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    copy_tree(&demo, &a);
    copy_tree(&demo, &b);
    let src = |p: &std::path::Path| format!("history:{}", p.display());
    for cmd in ["analyze", "report"] {
        let (out, once, _) = run(tessera![cmd, "--source", src(&a), "--format", "json"]);
        assert!(out.status.success());
        let (out, twice, stderr) = run(tessera![
            cmd,
            "--source",
            src(&a),
            "--source",
            src(&b),
            "--format",
            "json"
        ]);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("duplicate gpu rows") && stderr.contains("counted once"),
            "{cmd}: {stderr}"
        );
        // The commands the report prints name the sources it was given: the second one goes.
        let twice = twice.replace(&format!(" --source {}", src(&b)), "");
        let (mut once, mut twice) = (json(&once), json(&twice));
        for doc in [&mut once, &mut twice] {
            let o = doc.as_object_mut().expect("object");
            o.remove("sources");
            o.remove("data_quality");
        }
        assert_eq!(once, twice, "{cmd}: the second copy changed the result");
    }
}

/// A long report on a terminal shows per-partition progress (phase, node partitions done of
/// total, rows, elapsed time) on stderr; on a pipe it shows none (issue 15 item 5). The terminal
/// is a pseudo-terminal from util-linux `script`.
#[test]
fn report_progress_shows_on_a_terminal_only() {
    // Build the binary (the macro builds it when missing).
    let _ = tessera!["--version"].output();
    let bin = tessera_e2e::target_profile_dir().join("tessera");
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("r.json");
    let cmd = format!(
        "{} report --source history:fixtures/demo-history --format json --out {}",
        bin.display(),
        out.display()
    );
    let tty = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .current_dir(tessera_e2e::repo_root())
        .env_remove("NO_COLOR")
        .output()
        .expect("script (util-linux) runs the command on a pseudo-terminal");
    let shown = String::from_utf8_lossy(&tty.stdout).replace('\r', "\n");
    assert!(tty.status.success(), "{shown}");
    assert!(
        shown.contains("node partition(s)") && shown.contains("GPU rows"),
        "no progress on a terminal: {shown}"
    );
    assert!(out.exists());
    let (piped, _, stderr) = run(tessera![
        "report",
        "--source",
        "history:fixtures/demo-history",
        "--format",
        "json"
    ]);
    assert!(piped.status.success(), "{stderr}");
    assert!(
        !stderr.contains("partition"),
        "progress on a pipe: {stderr}"
    );
}
