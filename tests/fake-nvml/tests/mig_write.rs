//! The NVML backend's MIG write side (`MigControl for NvmlBackend`, raw function-table calls)
//! against the fake library's MIG writes, on `fixtures/scenarios/mig-node.toml`: the state read
//! through NVML equals the simulated backend's, the apply engine works through NVML, the driver's
//! rules come back as the right errors (overlap, IN_USE, pending mode on Ampere, no permission),
//! a failed step rolls back through NVML, and the old-driver library's missing MIG functions are
//! `MissingSymbol` errors, never a panic.

use crate::common;

use std::path::PathBuf;

use common::*;
use tessera_core::device::{DeviceError, GpuBackend};
use tessera_core::mig::apply::{self, Applier, GpuTarget, TargetInstance};
use tessera_core::mig::control::{Activation, ControlError, MigControl, MigNodeState};
use tessera_core::model::Placement;
use tessera_core::sim::control::SimMigControl;
use tessera_core::sim::{Scenario, SimNode};

const NODE: &str = "mig-node-1";
const DAY: &str = "2026-11-02T14:00:00Z";
const NVML_ERROR_INSUFFICIENT_RESOURCES: i32 = 23;

fn scenario_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/scenarios/mig-node.toml")
}

fn sim_state() -> MigNodeState {
    let s = Scenario::from_file(&scenario_path()).unwrap();
    let node = SimNode::new(&s, NODE).unwrap();
    SimMigControl::open(&node, None)
        .unwrap()
        .read_state()
        .unwrap()
}

/// The state without process owners (NVML does not know pods or jobs).
fn without_owners(mut s: MigNodeState) -> MigNodeState {
    for g in &mut s.gpus {
        g.processes.iter_mut().for_each(|p| p.owner = None);
        for i in &mut g.instances {
            i.processes.iter_mut().for_each(|p| p.owner = None);
        }
    }
    s
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

fn targets() -> Vec<GpuTarget> {
    vec![
        GpuTarget {
            gpu: 1,
            mig_enabled: true,
            instances: vec![t(5, p(0, 4)), t(14, p(4, 2)), t(19, p(6, 1))],
        },
        GpuTarget {
            gpu: 2,
            mig_enabled: true,
            instances: vec![
                t(9, p(0, 4)),
                t(19, p(4, 1)),
                t(19, p(5, 1)),
                t(19, p(6, 1)),
            ],
        },
    ]
}

#[test]
fn nvml_reads_the_same_mig_state_as_the_simulator() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    fake.load(&scenario_path(), NODE);
    fake.set_time(DAY);
    let mut b = fake.backend(NODE);
    let state = b.read_state().expect("read through NVML");
    assert_eq!(state, without_owners(sim_state()));
    assert_eq!(state.gpus[2].instances.len(), 3);
    assert_eq!(
        state.gpus[2].instances[0].processes[0].name.as_deref(),
        Some("vllm")
    );
    assert_eq!(state.gpus[0].processes[0].name.as_deref(), Some("torchrun"));
}

#[test]
fn apply_through_nvml_changes_what_nvml_reads() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    fake.load(&scenario_path(), NODE);
    fake.set_time(DAY);
    let mut b = fake.backend(NODE);
    let before = b.read_state().unwrap();
    let d = apply::diff(&before, &targets()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let a = Applier::open(&dir.path().join("l"), &dir.path().join("j")).unwrap();
    let done = a.execute(&mut b, &before, &targets(), &d, "test").unwrap();
    assert!(done.steps.iter().all(|s| s.result == "ok"), "{done:?}");
    let after = b.read_state().unwrap();
    assert!(apply::diff(&after, &targets()).unwrap().matches());
    // The busy 3g was never touched: same id, same process.
    assert_eq!(after.gpus[2].instances[0], before.gpus[2].instances[0]);
    // The read side (inventory through MIG device handles) sees the new layout too.
    let inv = b.inventory().unwrap();
    let starts: Vec<u32> = inv.gpus[1]
        .mig_instances
        .iter()
        .map(|m| m.placement.start)
        .collect();
    assert_eq!(starts.len(), 3, "{starts:?}");
    assert_eq!(inv.gpus[2].mig_instances.len(), 4);
    // And back to the checkpoint.
    let back = apply::checkpoint_targets(&before);
    let d = apply::diff(&after, &back).unwrap();
    a.execute(&mut b, &after, &back, &d, "back").unwrap();
    assert_eq!(b.read_state().unwrap(), before);
}

#[test]
fn driver_rules_come_back_as_errors() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    fake.load(&scenario_path(), NODE);
    fake.set_time(DAY);
    let mut b = fake.backend(NODE);
    // An illegal placement, then an overlap with the 3g at 0..4.
    let e = b.create_gpu_instance(2, 9, p(2, 4)).unwrap_err();
    assert!(matches!(e, ControlError::Invalid { .. }), "{e}");
    let e = b.create_gpu_instance(2, 14, p(2, 2)).unwrap_err();
    assert!(
        matches!(e, ControlError::InsufficientResources { .. }),
        "{e}"
    );
    // A process on the 3g: its compute instance is in use.
    let e = b.destroy_compute_instance(2, 1, 0).unwrap_err();
    assert!(matches!(e, ControlError::InUse { .. }), "{e}");
    // A training job on GPU 0: MIG mode change in use (via the activation status).
    let e = b.set_mig_mode(0, true).unwrap_err();
    assert!(matches!(e, ControlError::InUse { .. }), "{e}");
    // Ampere: pending until a reset.
    assert_eq!(b.set_mig_mode(3, true).unwrap(), Activation::PendingReset);
    let g3 = b.read_state().unwrap().gpus[3].clone();
    assert_eq!(
        g3.mig_mode.map(|m| (m.current, m.pending)),
        Some((false, true))
    );
    // Hopper: immediate.
    assert_eq!(b.set_mig_mode(1, true).unwrap(), Activation::Done);
    assert_eq!(b.create_gpu_instance(1, 0, p(0, 8)).unwrap(), 0);
    assert_eq!(b.create_compute_instance(1, 0).unwrap(), 0);
    let e = b.create_compute_instance(1, 0).unwrap_err();
    assert!(
        matches!(e, ControlError::InsufficientResources { .. }),
        "{e}"
    );
    // Not root.
    fake.inject("nvmlDeviceCreateGpuInstanceWithPlacement", -1, 4);
    let e = b.create_gpu_instance(2, 19, p(4, 1)).unwrap_err();
    assert!(matches!(e, ControlError::NoPermission { .. }), "{e}");
    fake.clear();
    // An unknown GPU instance.
    let e = b.destroy_gpu_instance(2, 42).unwrap_err();
    assert!(matches!(e, ControlError::NotFound { .. }), "{e}");
}

#[test]
fn a_failed_nvml_step_rolls_back() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    fake.load(&scenario_path(), NODE);
    fake.set_time(DAY);
    let mut b = fake.backend(NODE);
    let before = b.read_state().unwrap();
    // GPU 2 is changed first, then creating GPU 1's first GPU instance fails: the rollback
    // restores GPU 2's 2g.20gb and disables MIG on GPU 1 again.
    let mut tg = targets();
    tg.reverse();
    fake.inject(
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        1,
        NVML_ERROR_INSUFFICIENT_RESOURCES,
    );
    let d = apply::diff(&before, &tg).unwrap();
    assert_eq!(d.gpus[0].gpu, 2);
    let dir = tempfile::tempdir().unwrap();
    let a = Applier::open(&dir.path().join("l"), &dir.path().join("j")).unwrap();
    let e = a.execute(&mut b, &before, &tg, &d, "test").unwrap_err();
    assert!(e.to_string().contains("step 8 "), "{e}");
    assert!(e.to_string().contains("rolled back"), "{e}");
    assert!(e.to_string().contains("insufficient resources"), "{e}");
    fake.clear();
    assert_eq!(b.read_state().unwrap(), before);
}

#[test]
fn an_old_driver_without_mig_writes_is_a_missing_symbol() {
    let _guard = Fake::lock();
    let old = Fake::open(OLD);
    old.load(&scenario_path(), NODE);
    old.set_time(DAY);
    let mut b = old.backend(NODE);
    let missing = |e: ControlError, want: &str| match e {
        ControlError::Device(DeviceError::MissingSymbol { symbol }) => {
            assert!(symbol.contains(want), "{symbol}")
        }
        e => panic!("expected a missing {want}, got {e}"),
    };
    missing(
        b.create_gpu_instance(1, 0, p(0, 8)).unwrap_err(),
        "nvmlDeviceCreateGpuInstanceWithPlacement",
    );
    missing(b.set_mig_mode(1, true).unwrap_err(), "nvmlDeviceSetMigMode");
    missing(b.read_state().unwrap_err(), "nvmlDeviceGetGpuInstances");
    missing(
        b.destroy_gpu_instance(2, 1).unwrap_err(),
        "nvmlGpuInstanceDestroy",
    );
    missing(
        b.create_compute_instance(2, 1).unwrap_err(),
        "nvmlGpuInstanceCreateComputeInstance",
    );
}
