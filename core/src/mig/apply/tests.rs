//! Tests of the apply engine on the simulated MIG backend.

use std::path::Path;

use super::*;
use crate::mig::control::MigControl;
use crate::mig::parted::PartedFile;
use crate::sim::control::SimMigControl;
use crate::sim::{Scenario, SimNode};

const SCENARIO: &str = r#"
name = "t"
seed = 1
start = "2026-11-02T00:00:00Z"
[[nodes]]
name = "n"
gpus = [{ model = "A100-80GB", count = 1 }, { model = "H100-80GB", count = 2 }]
mig = [
  { gpu = 1, instances = [{ profile = "3g.40gb", start = 0 }, { profile = "1g.10gb", start = 4 }] },
  { gpu = 2, instances = [{ profile = "7g.80gb", start = 0 }] },
]
[[workloads]]
name = "chat"
kind = "inference"
node = "n"
gpu = 1
mig_start = 0
memory_gib = 10.0
process = "vllm"
namespace = "serving"
pod = "chat-0"
"#;

fn node() -> SimNode {
    let s = Scenario::from_toml(SCENARIO, "t.toml").unwrap();
    SimNode::new(&s, "n").unwrap()
}

fn control() -> SimMigControl {
    SimMigControl::open(&node(), None).unwrap()
}

fn p(start: u32, size: u32) -> Placement {
    Placement { start, size }
}

fn t(profile_id: u32, placement: Placement) -> TargetInstance {
    TargetInstance {
        profile_id,
        placement,
        compute: true,
    }
}

/// GPU 1 keeps its busy 3g and changes the idle 1g into a 2g + 1g; GPU 2 goes from 7g to 4g + 3g.
fn wanted() -> Vec<GpuTarget> {
    vec![
        GpuTarget {
            gpu: 1,
            mig_enabled: true,
            instances: vec![t(9, p(0, 4)), t(14, p(4, 2)), t(19, p(6, 1))],
        },
        GpuTarget {
            gpu: 2,
            mig_enabled: true,
            instances: vec![t(5, p(0, 4)), t(9, p(4, 4))],
        },
    ]
}

fn applier(dir: &Path) -> Applier {
    Applier::open(&dir.join("apply.lock"), &dir.join("apply.journal")).unwrap()
}

#[test]
fn diff_touches_only_differing_instances() {
    let mut c = control();
    let state = c.read_state().unwrap();
    let d = diff(&state, &wanted()).unwrap();
    assert!(!d.matches());
    let steps = d.steps();
    // Nothing touches the 3g at 0 on GPU 1 (it has a process and stays).
    assert!(
        steps.iter().all(|s| !matches!(s,
            Step::DestroyGpuInstance { gpu: 1, placement, .. } | Step::DestroyComputeInstance { gpu: 1, placement, .. }
            if placement.start == 0)),
        "{steps:?}"
    );
    assert!(d.busy().is_empty());
    let text = d.render_steps();
    assert!(text.contains("GPU 1"), "{text}");
    assert_eq!(steps.len(), 2 + 4 + 2 + 4, "{text}");
    // Largest first: on GPU 1 the 2g is created before the 1g.
    let creates: Vec<u32> = steps
        .iter()
        .filter_map(|s| match s {
            Step::CreateGpuInstance {
                gpu: 1, profile_id, ..
            } => Some(*profile_id),
            _ => None,
        })
        .collect();
    assert_eq!(creates, vec![14, 19]);
    let r = d.render();
    assert!(
        r.contains("extra: 1g.10gb (profile id 19) at {start: 4, size: 1}"),
        "{r}"
    );
    assert!(
        r.contains("missing: 2g.20gb (profile id 14) at {start: 4, size: 2}"),
        "{r}"
    );
    // GPU 0 (no target) is not in the diff.
    assert!(d.gpus.iter().all(|g| g.gpu != 0));
}

#[test]
fn apply_then_assert_matches_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = control();
    let a = applier(dir.path());
    let before = c.read_state().unwrap();
    let d = diff(&before, &wanted()).unwrap();
    let done = a.execute(&mut c, &before, &wanted(), &d, "test").unwrap();
    assert_eq!(done.steps.len(), 12);
    assert!(done.steps.iter().all(|s| s.result == "ok"));
    let after = c.read_state().unwrap();
    assert!(diff(&after, &wanted()).unwrap().matches());
    // The busy 3g kept its id and process.
    assert_eq!(after.gpus[1].instances[0], before.gpus[1].instances[0]);
    // Second time: nothing to do, nothing journaled.
    let lines = a.journal().records().unwrap().len();
    let d = diff(&after, &wanted()).unwrap();
    assert!(d.steps().is_empty());
    a.execute(&mut c, &after, &wanted(), &d, "test").unwrap();
    assert_eq!(a.journal().records().unwrap().len(), lines);
    let recs = a.journal().records().unwrap();
    assert_eq!(recs.first().unwrap().event, "begin");
    assert_eq!(recs.last().unwrap().result.as_deref(), Some("applied"));
    assert_eq!(recs.iter().filter(|r| r.event == "step").count(), 12);
}

#[test]
fn refuses_to_destroy_a_busy_instance_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = control();
    let a = applier(dir.path());
    let before = c.read_state().unwrap();
    let mut tg = wanted();
    tg[0].instances = vec![t(0, p(0, 8))];
    let d = diff(&before, &tg).unwrap();
    let e = a.execute(&mut c, &before, &tg, &d, "test").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ApplyError::Busy(_)), "{msg}");
    assert!(msg.contains(&format!("pid {}", SimNode::pid(0))), "{msg}");
    assert!(
        msg.contains("vllm") && msg.contains("pod serving/chat-0"),
        "{msg}"
    );
    assert_eq!(c.read_state().unwrap(), before);
    assert_eq!(c.write_calls(), 0);
    assert!(a.journal().records().unwrap().is_empty());
}

#[test]
fn a_failure_at_every_step_rolls_back_to_the_checkpoint() {
    let before = control().read_state().unwrap();
    let n_steps = diff(&before, &wanted()).unwrap().steps().len() as u64;
    assert!(n_steps >= 10);
    for n in 1..=n_steps {
        let dir = tempfile::tempdir().unwrap();
        let mut c = control();
        c.fail_write_call(Some(n));
        let a = applier(dir.path());
        let d = diff(&before, &wanted()).unwrap();
        let e = a
            .execute(&mut c, &before, &wanted(), &d, "test")
            .unwrap_err();
        assert!(matches!(e, ApplyError::RolledBack { .. }), "step {n}: {e}");
        assert!(e.to_string().contains(&format!("step {n} ")), "{e}");
        assert_eq!(
            c.read_state().unwrap(),
            before,
            "after a failure at step {n}"
        );
        let recs = a.journal().records().unwrap();
        assert!(recs.iter().any(|r| r.event == "rollback"));
        assert_eq!(recs.last().unwrap().result.as_deref(), Some("rolled-back"));
        assert_eq!(a.journal().interrupted().unwrap(), None);
    }
}

#[test]
fn an_interrupted_apply_is_recovered_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = control();
    let before = c.read_state().unwrap();
    {
        // A run that journals its checkpoint and some steps, then dies (no end record).
        let a = applier(dir.path());
        let mut b = Journal::record("dead-run", "begin");
        b.checkpoint = Some(before.clone());
        a.journal().append(&b).unwrap();
        c.destroy_compute_instance(2, 0, 0).unwrap();
        c.destroy_gpu_instance(2, 0).unwrap();
        c.create_gpu_instance(2, 5, p(0, 4)).unwrap();
    }
    assert_ne!(c.read_state().unwrap(), before);
    let a = applier(dir.path());
    // Nothing new runs on top of an interrupted apply.
    let now = c.read_state().unwrap();
    let d = diff(&now, &wanted()).unwrap();
    let e = a.execute(&mut c, &now, &wanted(), &d, "t").unwrap_err();
    assert!(e.to_string().contains("recover it first"), "{e}");
    let r = a.recover(&mut c).unwrap().unwrap();
    assert_eq!(r.run, "dead-run");
    assert_eq!(r.steps, 3);
    assert_eq!(c.read_state().unwrap(), before);
    assert_eq!(a.journal().interrupted().unwrap(), None);
    assert!(a.recover(&mut c).unwrap().is_none());
}

#[test]
fn ampere_mode_change_is_pending_and_never_reset() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = control();
    let a = applier(dir.path());
    let before = c.read_state().unwrap();
    let tg = vec![GpuTarget {
        gpu: 0,
        mig_enabled: true,
        instances: vec![t(0, p(0, 8))],
    }];
    let d = diff(&before, &tg).unwrap();
    let done = a.execute(&mut c, &before, &tg, &d, "test").unwrap();
    assert_eq!(done.steps[0].result, "pending-reset");
    assert!(done.steps[1].result.starts_with("skipped"));
    assert!(
        done.pending[0].contains("nvidia-smi -r -i 0"),
        "{:?}",
        done.pending
    );
    let now = c.read_state().unwrap();
    // Still pending next time: no steps, reported as a difference with the hint.
    let d = diff(&now, &tg).unwrap();
    assert!(d.steps().is_empty() && !d.matches());
    assert!(d.pending()[0].contains("never resets"));
}

#[test]
fn mig_parted_plans_get_placements() {
    let mut c = control();
    let state = c.read_state().unwrap();
    let text = r#"
version: v1
mig-configs:
  two:
    - devices: [2]
      mig-enabled: true
      mig-devices: { "3g.40gb": 2 }
    - devices: [1]
      mig-enabled: true
      mig-devices: { "1g.10gb": 1, "3g.40gb": 1 }
"#;
    let f = PartedFile::parse(text, "parted.yaml").unwrap();
    let (label, tg) =
        super::targets(&LayoutFile::MigParted(f), None, "parted.yaml", &state).unwrap();
    assert_eq!(label, "two");
    let g2 = tg.iter().find(|t| t.gpu == 2).unwrap();
    let mut starts: Vec<u32> = g2.instances.iter().map(|i| i.placement.start).collect();
    starts.sort();
    assert_eq!(starts, vec![0, 4]);
    // GPU 1 already has that mix: its placements are kept, so nothing changes there.
    let d = diff(&state, &tg).unwrap();
    assert!(d.gpus.iter().find(|g| g.gpu == 1).unwrap().steps.is_empty());
}

#[test]
fn plan_targets_check_gpu_identity() {
    let mut c = control();
    let state = c.read_state().unwrap();
    let (plan, warnings) = export_plan(&state, "now");
    assert!(warnings.is_empty(), "{warnings:?}");
    plan.validate("export").unwrap();
    let (_, tg) = super::targets(
        &LayoutFile::Tessera(Box::new(plan.clone())),
        None,
        "p",
        &state,
    )
    .unwrap();
    assert!(diff(&state, &tg).unwrap().matches());
    let mut bad = plan.clone();
    bad.configs.get_mut("now").unwrap()[1].uuid = Some("GPU-other".into());
    let e = super::targets(&LayoutFile::Tessera(Box::new(bad)), None, "p", &state).unwrap_err();
    assert!(e.to_string().contains("renumbered"), "{e}");
    let mut bad = plan.clone();
    bad.configs.get_mut("now").unwrap()[1].model = "A100-80GB".into();
    bad.configs.get_mut("now").unwrap()[1].instances.clear();
    let e = super::targets(&LayoutFile::Tessera(Box::new(bad)), None, "p", &state).unwrap_err();
    assert!(e.to_string().contains("this GPU is H100-80GB"), "{e}");
    // A config for another node names no GPU of this one: an error, not "0 GPUs checked".
    let mut other = plan.clone();
    for l in other.configs.get_mut("now").unwrap() {
        l.node = Some("elsewhere".into());
    }
    let e = super::targets(&LayoutFile::Tessera(Box::new(other)), None, "p", &state).unwrap_err();
    assert!(matches!(e, ApplyError::NoGpuOfNode { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("names no GPU of node n: its GPU entries are for node elsewhere"),
        "{e}"
    );
    // The mig-parted export parses back and asks for the same profile mix.
    let text = export_mig_parted(&state, "now");
    let f = PartedFile::parse(&text, "x").unwrap();
    let (_, tg) = super::targets(&LayoutFile::MigParted(f), None, "x", &state).unwrap();
    assert!(diff(&state, &tg).unwrap().matches(), "{text}");
}

/// Issue 17 item 1: an interrupted run (checkpoint + steps) whose last record was torn. The next
/// session restores the checkpoint AND applies the plan, and a further one still works; before,
/// the recovery's records were glued to the torn line and execute failed on the journal.
#[test]
fn a_torn_last_journal_line_after_an_interrupted_run_does_not_stop_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = control();
    let before = c.read_state().unwrap();
    {
        let a = applier(dir.path());
        let mut b = Journal::record("dead-run", "begin");
        b.checkpoint = Some(before.clone());
        a.journal().append(&b).unwrap();
        c.destroy_compute_instance(2, 0, 0).unwrap();
        let mut s = Journal::record("dead-run", "step");
        s.step = Some(1);
        a.journal().append(&s).unwrap();
        c.destroy_gpu_instance(2, 0).unwrap();
        // Killed while writing step 2's record.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(a.journal().path())
            .unwrap();
        std::io::Write::write_all(&mut f, b"{\"time\":\"2026-11-23T09:00:01.5").unwrap();
    }
    let a = applier(dir.path());
    let t = a.torn_tail.clone().expect("the torn line is reported");
    assert!(t.moved_to.is_some(), "{t}");
    let r = a.recover(&mut c).unwrap().unwrap();
    assert_eq!(r.run, "dead-run");
    assert_eq!(c.read_state().unwrap(), before);
    let now = c.read_state().unwrap();
    let d = diff(&now, &wanted()).unwrap();
    a.execute(&mut c, &now, &wanted(), &d, "t").unwrap();
    assert!(diff(&c.read_state().unwrap(), &wanted()).unwrap().matches());
    drop(a);
    // A further session: no torn line, and it can apply again.
    let a = applier(dir.path());
    assert_eq!(a.torn_tail, None);
    let now = c.read_state().unwrap();
    let back = checkpoint_targets(&before);
    let d = diff(&now, &back).unwrap();
    a.execute(&mut c, &now, &back, &d, "back").unwrap();
    assert_eq!(c.read_state().unwrap(), before);
    let events: Vec<String> = a
        .journal()
        .records()
        .unwrap()
        .into_iter()
        .map(|r| r.event)
        .collect();
    assert_eq!(
        events.iter().filter(|e| *e == "end").count(),
        3,
        "{events:?}"
    );
}
