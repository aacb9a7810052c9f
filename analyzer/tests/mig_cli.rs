//! `tessera mig export|assert|apply` through the built binary on the simulated backend
//! (`fixtures/scenarios/mig-node.toml`: GPU 0 an H100 running a training job, GPU 1 an idle H100,
//! GPU 2 an H100 with a busy 3g.40gb at 0, an idle 2g.20gb at 4 and an idle 1g.10gb at 6, GPU 3 an
//! idle A100 without MIG). No real GPU is ever changed.
//!
//! Covered: the walkthrough round trip (export → edit → dry run → apply --yes → assert), a
//! mig-parted v1 file as PLAN, fault injection (`TESSERA_SIM_FAIL_WRITE`) → rollback with the
//! export unchanged, a crash between steps (`TESSERA_MIG_APPLY_ABORT_AFTER`) recovered by the next
//! run through the journal, the lock refusing a second apply, the busy-instance refusal, a
//! schedule applied idempotently, and bad input (exit 2).

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Output};

use tessera_core::mig::plan::{PlannedInstance, TesseraPlan};
use tessera_core::model::Placement;

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/scenarios/mig-node.toml"
);

struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        Node {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tessera"));
        c.current_dir(self.dir.path()).arg("mig").args(args).args([
            "--backend",
            "sim",
            "--sim.scenario",
            SCENARIO,
            "--sim.state",
            "state.json",
        ]);
        c
    }

    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.cmd(args).output().unwrap();
        result(out)
    }

    /// The exported plan without its time-stamped comment.
    fn export(&self) -> String {
        let (code, out, err) = self.run(&["export"]);
        assert_eq!(code, 0, "{err}");
        out.lines()
            .filter(|l| !l.starts_with("comment:"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

fn result(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn inst(profile: &str, id: u32, start: u32, size: u32) -> PlannedInstance {
    PlannedInstance {
        profile: profile.into(),
        profile_id: id,
        placement: Placement { start, size },
        workloads: vec![],
    }
}

/// The exported plan with GPU 2's 2g.20gb at 4 replaced by two 1g.10gb (4 and 5), and GPU 1
/// switched to MIG with one 7g.80gb.
fn edited(node: &Node) -> PathBuf {
    let (code, _, err) = node.run(&["export", "-o", "plan.yaml"]);
    assert_eq!(code, 0, "{err}");
    let mut plan = TesseraPlan::from_file(&node.path("plan.yaml")).unwrap();
    let gpus = plan.configs.get_mut("current").unwrap();
    gpus[2].instances = vec![
        inst("3g.40gb", 9, 0, 4),
        inst("1g.10gb", 19, 4, 1),
        inst("1g.10gb", 19, 5, 1),
        inst("1g.10gb", 19, 6, 1),
    ];
    gpus[1].mig_enabled = true;
    gpus[1].instances = vec![inst("7g.80gb", 0, 0, 8)];
    plan.validate("edited").unwrap();
    node.write("edited.yaml", &plan.to_yaml())
}

#[test]
fn export_edit_dry_run_apply_assert_round_trip() {
    let node = Node::new();
    let before = node.export();
    let edited = edited(&node);
    let edited = edited.to_str().unwrap();
    // The exported plan matches; the edited one does not.
    assert_eq!(node.run(&["assert", "plan.yaml"]).0, 0);
    let (code, out, _) = node.run(&["assert", edited]);
    assert_eq!(code, 1);
    assert!(
        out.contains("missing: 1g.10gb (profile id 19) at {start: 4, size: 1}"),
        "{out}"
    );
    assert!(out.contains("MIG mode: disabled, plan: enabled"), "{out}");
    // Dry run: the exact steps, nothing changed.
    let (code, out, err) = node.run(&["apply", edited]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("GPU 1 (GPU-"), "{out}");
    assert!(out.contains("enable MIG mode"), "{out}");
    assert!(
        out.contains("destroy GPU instance 5 (2g.20gb at {start: 4, size: 2})"),
        "{out}"
    );
    assert!(
        !out.contains("3g.40gb at {start: 0"),
        "the busy 3g is untouched: {out}"
    );
    assert!(err.contains("add --yes"), "{err}");
    assert!(!node.path("state.json").exists());
    assert_eq!(node.export(), before);
    // Apply, then assert.
    let (code, out, err) = node.run(&["apply", edited, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("now matches"), "{out}");
    assert_eq!(node.run(&["assert", edited]).0, 0);
    let (code, out, _) = node.run(&["assert", "plan.yaml"]);
    assert_eq!(code, 1, "{out}");
    // Idempotent: a second apply has nothing to do.
    let (code, out, _) = node.run(&["apply", edited, "--yes"]);
    assert_eq!(code, 0);
    assert!(out.contains("nothing to do"), "{out}");
    // And back.
    let (code, _, err) = node.run(&["apply", "plan.yaml", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(node.export(), before);
}

#[test]
fn mig_parted_config_as_plan() {
    let node = Node::new();
    let parted = node.write(
        "parted.yaml",
        r#"
version: v1
mig-configs:
  all-1g:
    - devices: [1]
      mig-enabled: true
      mig-devices: { "1g.10gb": 7 }
  whole:
    - devices: [1]
      mig-enabled: false
      mig-devices: {}
"#,
    );
    let parted = parted.to_str().unwrap();
    let (code, _, err) = node.run(&["apply", parted, "--yes"]);
    assert_eq!(code, 2);
    assert!(err.contains("choose one with --config"), "{err}");
    let (code, out, err) = node.run(&["apply", parted, "--config", "all-1g", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("applied 15 steps"), "{out}");
    assert_eq!(node.run(&["assert", parted, "--config", "all-1g"]).0, 0);
    assert_eq!(node.run(&["assert", parted, "--config", "whole"]).0, 1);
    // The export in mig-parted format asserts too.
    let (code, _, err) = node.run(&["export", "--mig-parted-config", "out.yaml"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(node.run(&["assert", "out.yaml"]).0, 0);
}

#[test]
fn a_failed_step_rolls_back_and_the_export_is_unchanged() {
    let node = Node::new();
    let before = node.export();
    let edited = edited(&node);
    for n in ["1", "4", "9"] {
        let out = node
            .cmd(&["apply", edited.to_str().unwrap(), "--yes"])
            .env("TESSERA_SIM_FAIL_WRITE", n)
            .output()
            .unwrap();
        let (code, _, err) = result(out);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("rolled back"), "{err}");
        assert!(err.contains(&format!("write call #{n}")), "{err}");
        assert_eq!(node.export(), before, "after a failure at write {n}");
    }
    let journal = std::fs::read_to_string(node.path("state.json.journal")).unwrap();
    assert_eq!(journal.matches("\"rolled-back\"").count(), 3, "{journal}");
}

#[test]
fn a_crash_between_steps_is_recovered_by_the_next_run() {
    let node = Node::new();
    let before = node.export();
    let edited = edited(&node);
    let edited = edited.to_str().unwrap();
    let out = node
        .cmd(&["apply", edited, "--yes"])
        .env("TESSERA_MIG_APPLY_ABORT_AFTER", "3")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(out.status.code(), None, "killed by SIGABRT");
    assert_ne!(
        node.export(),
        before,
        "the crash left a half-applied layout"
    );
    // A dry run warns about it.
    let (_, _, err) = node.run(&["apply", edited]);
    assert!(err.contains("interrupted apply"), "{err}");
    // The next apply restores the checkpoint, then applies.
    let (code, _, err) = node.run(&["apply", "plan.yaml", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("recovered the interrupted apply"), "{err}");
    assert_eq!(node.export(), before);
    let journal = std::fs::read_to_string(node.path("state.json.journal")).unwrap();
    assert!(journal.contains("\"recovered\""), "{journal}");
    // Crash again, then recover into the edited layout.
    let out = node
        .cmd(&["apply", edited, "--yes"])
        .env("TESSERA_MIG_APPLY_ABORT_AFTER", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), None);
    let (code, _, err) = node.run(&["apply", edited, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("recovered"), "{err}");
    assert_eq!(node.run(&["assert", edited]).0, 0);
}

#[test]
fn a_second_apply_is_refused_while_the_lock_is_held() {
    let node = Node::new();
    let edited = edited(&node);
    let lock = File::create(node.path("state.json.lock")).unwrap();
    lock.lock().unwrap();
    let (code, _, err) = node.run(&["apply", edited.to_str().unwrap(), "--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("holds the lock"), "{err}");
    // The holder (this test) took the flock without writing its pid, like a holder caught
    // between its flock and its write: the pid comes from the kernel, never empty.
    assert!(
        err.contains(&format!("(pid {})", std::process::id())),
        "{err}"
    );
    assert!(!node.path("state.json").exists(), "nothing changed");
    lock.unlock().unwrap();
    let (code, _, err) = node.run(&["apply", edited.to_str().unwrap(), "--yes"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn refuses_to_destroy_an_instance_with_processes() {
    let node = Node::new();
    let before = node.export();
    edited(&node);
    let mut plan = TesseraPlan::from_file(&node.path("plan.yaml")).unwrap();
    plan.configs.get_mut("current").unwrap()[2].instances = vec![inst("7g.80gb", 0, 0, 8)];
    let p = node.write("whole.yaml", &plan.to_yaml());
    let (code, _, err) = node.run(&["apply", p.to_str().unwrap(), "--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("refusing to apply"), "{err}");
    assert!(err.contains("3g.40gb at {start: 0, size: 4}"), "{err}");
    assert!(err.contains("pod serving/rerank-6b5f4-8xw2d"), "{err}");
    assert!(err.contains("pid 4017 (vllm)"), "{err}");
    // Nor is a MIG mode change made under a running job.
    let mut plan = TesseraPlan::from_file(&node.path("plan.yaml")).unwrap();
    plan.configs.get_mut("current").unwrap()[0].mig_enabled = true;
    let p = node.write("gpu0.yaml", &plan.to_yaml());
    let (code, _, err) = node.run(&["apply", p.to_str().unwrap(), "--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("GPU 0 (MIG mode change): pid 4000 (torchrun) of slurm job 81234"),
        "{err}"
    );
    assert_eq!(node.export(), before);
    // The dry run says it would refuse.
    let (code, _, err) = node.run(&["apply", p.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(err.contains("would refuse"), "{err}");
}

#[test]
fn schedule_applies_the_active_config_idempotently() {
    let node = Node::new();
    let before = node.export();
    edited(&node);
    let mut plan = TesseraPlan::from_file(&node.path("plan.yaml")).unwrap();
    let day = TesseraPlan::from_file(&node.path("edited.yaml"))
        .unwrap()
        .configs["current"]
        .clone();
    let night = plan.configs.remove("current").unwrap();
    plan.configs.insert("day".into(), day);
    plan.configs.insert("night".into(), night);
    node.write("both.yaml", &plan.to_yaml());
    node.write(
        "schedule.yaml",
        "version: v1\nkind: tessera-mig-schedule\ntimezone: Europe/Berlin\nplan: both.yaml\nswitches:\n  - at: \"07:00\"\n    days: [mon, tue, wed, thu, fri]\n    config: day\n  - at: \"22:00\"\n    config: night\n",
    );
    let at = |now: &str| {
        let (code, out, err) = node.run(&[
            "apply",
            "--schedule",
            "schedule.yaml",
            "--now",
            now,
            "--yes",
        ]);
        assert_eq!(code, 0, "{err}");
        (out, err)
    };
    // Monday 10:00 Berlin: day.
    let (out, err) = at("2026-11-23T09:00:00Z");
    assert!(err.contains("config day is active"), "{err}");
    assert!(out.contains("applied"), "{out}");
    let journal = std::fs::read_to_string(node.path("state.json.journal")).unwrap();
    let (out, _) = at("2026-11-23T12:00:00Z");
    assert!(out.contains("nothing to do"), "{out}");
    assert_eq!(
        std::fs::read_to_string(node.path("state.json.journal")).unwrap(),
        journal,
        "an idempotent run journals nothing"
    );
    // Monday 23:00: night = the original layout.
    let (out, err) = at("2026-11-23T22:00:00Z");
    assert!(err.contains("config night"), "{err}");
    assert!(out.contains("applied"), "{out}");
    assert_eq!(node.export(), before);
}

#[test]
fn bad_input_exits_2_with_a_clear_message() {
    let node = Node::new();
    let (code, _, err) = node.run(&["assert", "missing.yaml"]);
    assert_eq!(code, 2);
    assert!(err.contains("missing.yaml"), "{err}");
    edited(&node);
    let (code, _, err) = node.run(&["assert", "plan.yaml", "--config", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("no config labelled \"nope\""), "{err}");
    let bad = node.write(
        "bad.yaml",
        &std::fs::read_to_string(node.path("plan.yaml"))
            .unwrap()
            .replace("profile-id: 9", "profile-id: 14"),
    );
    let (code, _, err) = node.run(&["assert", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("bad.yaml") && err.contains("profile"), "{err}");
    // --yes on the simulator needs a state file.
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "mig",
            "apply",
            "--backend",
            "sim",
            "--sim.scenario",
            SCENARIO,
            "--yes",
        ])
        .arg(node.path("plan.yaml"))
        .output()
        .unwrap();
    let (code, _, err) = result(out);
    assert_eq!(code, 2);
    assert!(err.contains("--sim.state"), "{err}");
    // A plan whose GPU is another model, or another GPU.
    let text = std::fs::read_to_string(node.path("plan.yaml")).unwrap();
    let other = node.write(
        "other.yaml",
        &text.replacen("model: H100-80GB", "model: A100-80GB", 1),
    );
    let (code, _, err) = node.run(&["assert", other.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("the plan is for model A100-80GB, but this GPU is H100-80GB"),
        "{err}"
    );
    let other = node.write("other.yaml", &text.replacen("uuid: GPU-", "uuid: GPU-0", 1));
    let (code, _, err) = node.run(&["assert", other.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("GPUs renumbered"), "{err}");
}

#[test]
fn enabling_mig_on_ampere_is_reported_pending_never_reset() {
    let node = Node::new();
    edited(&node);
    let mut plan = TesseraPlan::from_file(&node.path("plan.yaml")).unwrap();
    plan.configs.get_mut("current").unwrap()[3].mig_enabled = true;
    plan.configs.get_mut("current").unwrap()[3].instances = vec![inst("7g.80gb", 0, 0, 8)];
    let p = node.write("a100.yaml", &plan.to_yaml());
    let p = p.to_str().unwrap();
    let (code, out, err) = node.run(&["apply", p, "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("enable MIG mode: pending-reset"), "{out}");
    assert!(out.contains("skipped"), "{out}");
    assert!(err.contains("nvidia-smi -r -i 3"), "{err}");
    let (code, out, _) = node.run(&["assert", p]);
    assert_eq!(code, 1);
    assert!(out.contains("enable pending a GPU reset"), "{out}");
    // Nothing more to do until the reset: a second apply changes nothing.
    let (code, out, _) = node.run(&["apply", p, "--yes"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("nothing can be done before a GPU reset"),
        "{out}"
    );
}

/// Issue 17 item 1: a crash in the middle of an apply, then a torn last journal line (a crash
/// while writing a record). The next run must restore the checkpoint AND apply the plan; before,
/// it appended to the torn line and every later run failed with "not a journal record".
#[test]
fn a_torn_journal_line_after_a_crash_does_not_brick_apply() {
    let node = Node::new();
    let before = node.export();
    let edited = edited(&node);
    let edited = edited.to_str().unwrap();
    let out = node
        .cmd(&["apply", edited, "--yes"])
        .env("TESSERA_MIG_APPLY_ABORT_AFTER", "3")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), None, "killed by SIGABRT");
    assert_ne!(node.export(), before);
    // The crash tore the record being written.
    let journal = node.path("state.json.journal");
    let torn = "{\"time\":\"2026-11-23T09:00:01.5";
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    std::io::Write::write_all(&mut f, torn.as_bytes()).unwrap();
    drop(f);
    // The rerun restores the checkpoint, then applies the plan.
    let (code, out, err) = node.run(&["apply", edited, "--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("recovered the interrupted apply"), "{err}");
    assert!(err.contains("torn"), "the torn line is reported: {err}");
    assert!(out.contains("now matches"), "{out}");
    assert_eq!(node.run(&["assert", edited]).0, 0);
    // Every line of the journal is a whole record now; the torn bytes were kept aside.
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(text.ends_with('\n'));
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: {e}: {line}", i + 1));
        assert!(v["run"].is_string(), "line {}: {line}", i + 1);
    }
    let aside = std::fs::read_to_string(node.path("state.json.journal.torn")).unwrap();
    assert!(aside.contains(torn), "{aside}");
    // And a further run still works.
    let (code, _, err) = node.run(&["apply", "plan.yaml", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(node.export(), before);
}

/// Issue 17 item 13: a plan that names no GPU of this node must not pass as "0 GPUs checked".
#[test]
fn a_plan_naming_no_gpu_of_this_node_is_an_error() {
    let node = Node::new();
    let (code, _, err) = node.run(&["export", "-o", "plan.yaml"]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(node.path("plan.yaml")).unwrap();
    assert!(text.contains("node: mig-node-1"), "{text}");
    let other = node.write(
        "other-node.yaml",
        &text.replace("node: mig-node-1", "node: gpu-node-7"),
    );
    let other = other.to_str().unwrap();
    let (code, out, err) = node.run(&["assert", other]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(!out.contains("matches"), "{out}");
    assert!(
        err.contains("names no GPU of node mig-node-1") && err.contains("gpu-node-7"),
        "{err}"
    );
    // apply (dry run or --yes) says the same instead of "nothing to do".
    for args in [&["apply", other][..], &["apply", other, "--yes"][..]] {
        let (code, out, err) = node.run(args);
        assert_eq!(code, 2, "{args:?}: {out}\n{err}");
        assert!(err.contains("names no GPU of node mig-node-1"), "{err}");
    }
    // A mig-parted config whose entries select no GPU of this node.
    let parted = node.write(
        "parted.yaml",
        "version: v1\nmig-configs:\n  none:\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: { \"1g.10gb\": 7 }\n      device-filter: \"0x20B510DE\"\n",
    );
    let (code, out, err) = node.run(&["assert", parted.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("names no GPU of node mig-node-1"), "{err}");
}

#[test]
fn a_schedules_plan_stays_beside_it_and_its_errors_never_quote_the_file() {
    let node = Node::new();
    let (code, _, err) = node.run(&["export", "-o", "plan.yaml"]);
    assert_eq!(code, 0, "{err}");
    // A file the schedule should not be able to print (a service-account token, say).
    let secret = tempfile::tempdir().unwrap();
    let token = secret.path().join("token");
    std::fs::write(&token, "eyJhbGciOi-SECRET-TOKEN-0123456789\n").unwrap();
    let schedule = |plan: &str| {
        format!(
            "version: v1\nkind: tessera-mig-schedule\ntimezone: UTC\nplan: {plan}\nswitches:\n  - at: \"00:00\"\n    config: current\n"
        )
    };
    let apply = |extra: &[&str]| {
        let mut args = vec!["apply", "--schedule", "schedule.yaml"];
        args.extend_from_slice(extra);
        node.run(&args)
    };
    for outside in [token.display().to_string(), "../token".to_string()] {
        node.write("schedule.yaml", &schedule(&outside));
        let (code, out, err) = apply(&[]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains("is not in the schedule's folder"), "{err}");
        assert!(err.contains("--allow-plan-outside"), "{err}");
        assert!(!err.contains("SECRET"), "{err}");
    }
    // Allowed outside: the file is read, and its error names it without quoting it.
    node.write("schedule.yaml", &schedule(&token.display().to_string()));
    let (code, out, err) = apply(&["--allow-plan-outside"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(&format!(
            "plan {} (named by schedule.yaml)",
            token.display()
        )) && err.contains(
            "not a tessera plan (kind: tessera-plan or tessera-mig-plan) or an nvidia-mig-parted v1 file"
        ),
        "{err}"
    );
    assert!(!err.contains("SECRET") && !err.contains("eyJ"), "{err}");
    // A file named directly keeps its short excerpt.
    let (code, _, err) = node.run(&["apply", token.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains(&token.display().to_string()), "{err}");

    // A ConfigMap volume: files are symlinks into ..data/; the plan beside the schedule works.
    let cm = node.path("cm");
    std::fs::create_dir_all(cm.join("..2026_11_26").join("x")).unwrap();
    std::fs::copy(node.path("plan.yaml"), cm.join("..2026_11_26/plan.yaml")).unwrap();
    std::fs::write(cm.join("..2026_11_26/schedule.yaml"), schedule("plan.yaml")).unwrap();
    std::os::unix::fs::symlink("..2026_11_26", cm.join("..data")).unwrap();
    for f in ["plan.yaml", "schedule.yaml"] {
        std::os::unix::fs::symlink(format!("..data/{f}"), cm.join(f)).unwrap();
    }
    let (code, out, err) = node.run(&["apply", "--schedule", "cm/schedule.yaml"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("config current is active"), "{err}");
}

#[test]
fn a_bad_tessera_plan_gets_the_errors_of_a_tessera_plan() {
    let node = Node::new();
    let (code, _, err) = node.run(&["export", "-o", "plan.yaml"]);
    assert_eq!(code, 0, "{err}");
    let plan = std::fs::read_to_string(node.path("plan.yaml")).unwrap();
    assert!(plan.contains("kind: tessera-plan"), "{plan}");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "a GPU index of 2^64",
            plan.replacen("gpu: 0", "gpu: 18446744073709551616", 1),
            "gpu",
        ),
        (
            "a duplicate key",
            plan.replacen(
                "kind: tessera-plan",
                "kind: tessera-plan\nkind: tessera-plan",
                1,
            ),
            "duplicate",
        ),
        (
            "two documents",
            format!("{plan}\n---\n{plan}"),
            "more than one document",
        ),
        (
            "an alias bomb",
            format!(
                "{plan}\nbomb: &a [x, x, x, x, x, x, x, x, x]\nb1: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nb2: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nb3: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\nb4: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nb5: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\nb6: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
            ),
            "",
        ),
    ];
    for (what, text, names) in cases {
        node.write("bad.yaml", &text);
        let (code, out, err) = node.run(&["apply", "bad.yaml"]);
        assert_eq!(code, 2, "{what}: {out}{err}");
        assert!(
            err.contains("not a valid tessera plan (it declares kind:)")
                || err.contains("tessera-plan"),
            "{what}: {err}"
        );
        assert!(
            !err.contains("expected `version` or `mig-configs`"),
            "{what}: {err}"
        );
        assert!(err.contains(names), "{what}: {err}");
    }
}
