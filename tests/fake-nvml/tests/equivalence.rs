//! Value-for-value equivalence of the two backends: for every node of the demo scenario, at
//! several virtual times (day and night, MIG, the XID at 2026-11-02T03:00Z, the lost GPU on
//! gpu-node-3 10:00–12:00 on 11-03, the power `nvml_error` on gpu-node-2 06:00–06:10), the NVML
//! backend reading the fake library equals the simulated backend, field for field.
//!
//! Legitimate differences, applied by `common::normalise_gpu`: timestamps (wall clock vs virtual),
//! whole-percent utilisation, whole-millijoule energy, GPM only from the second sample (and not
//! in the first sample after a GPU was lost), and XID timestamps (NVML events carry none).
//!
//! Row remapping faults come from the monitoring scenario (`alerting.toml`).

use crate::common;

use common::{FULL, Fake, assert_equivalent, demo, demo_path, ms};
use tessera_core::device::GpuBackend;
use tessera_core::model::{GpuStatus, NodeSample};
use tessera_core::sim::{SimBackend, SimClock};

/// Sample `steps` seconds from `start` through both backends and compare each sample.
fn compare(node: &str, start: &str, steps: usize) -> Vec<(NodeSample, NodeSample)> {
    compare_in(&demo_path(), node, start, steps)
}

/// [`compare`] on another scenario file.
fn compare_in(
    path: &std::path::Path,
    node: &str,
    start: &str,
    steps: usize,
) -> Vec<(NodeSample, NodeSample)> {
    let fake = Fake::open(FULL);
    fake.load(path, node);
    fake.set_time(start);
    let mut nv = fake.backend(node);
    let scenario = if path == demo_path() {
        demo()
    } else {
        tessera_core::sim::Scenario::from_file(path).expect("scenario")
    };
    let mut sim = SimBackend::new(
        &scenario,
        Some(node),
        SimClock::Stepped {
            next_ms: ms(start),
            step_ms: 1000,
        },
    )
    .expect("sim backend");
    let mut nv_inventory = nv.inventory().expect("NVML inventory");
    let sim_inventory = sim.inventory().expect("sim inventory");
    let mut out: Vec<(NodeSample, NodeSample)> = Vec::new();
    for step in 0..steps {
        if step > 0 {
            fake.advance_ms(1000);
        }
        let a = nv.sample().expect("NVML sample");
        let b = sim.sample().expect("sim sample");
        if step == 0 {
            // A GPU lost when the inventory is read has no handle on the NVML path: only its
            // index (and UUID, if seen before) are known. The simulator knows its identity.
            for (i, g) in b.gpus.iter().enumerate() {
                if g.status == GpuStatus::Lost {
                    assert!(nv_inventory.gpus[i].name.is_empty());
                    nv_inventory.gpus[i] = sim_inventory.gpus[i].clone();
                }
            }
            assert_eq!(nv_inventory, sim_inventory, "{node} inventory at {start}");
        }
        let context = format!("{node} at {start} + {step} s");
        assert_equivalent(&a, &b, out.last().map(|(p, _)| p), &context);
        out.push((a, b));
    }
    assert!(
        nv.missing_functions().is_empty(),
        "{:?}",
        nv.missing_functions()
    );
    out
}

#[test]
fn every_node_matches_the_simulator_day_and_night() {
    let _guard = Fake::lock();
    for node in ["gpu-node-1", "gpu-node-2", "gpu-node-3"] {
        for start in [
            "2026-11-02T14:00:00Z", // Monday afternoon: inference peak, notebooks
            "2026-11-03T23:30:00Z", // Tuesday night: training running
            "2026-11-02T02:30:00Z", // nightly batch
            "2026-11-07T10:00:00Z", // Saturday: weekend fine-tune
        ] {
            let samples = compare(node, start, 4);
            // GPM really arrived on the NVML path from the second sample on (Hopper GPUs).
            let (nv, _) = &samples[1];
            if node == "gpu-node-1" {
                assert!(nv.gpus[0].sm_active_ratio.is_some(), "{node} {start}");
                assert!(nv.gpus[3].mig.iter().all(|m| m.sm_active_ratio.is_some()));
            }
        }
    }
}

#[test]
fn mig_instances_and_processes_match() {
    let _guard = Fake::lock();
    let samples = compare("gpu-node-1", "2026-11-02T14:00:00Z", 3);
    let (nv, _) = &samples[2];
    let mig_gpu = &nv.gpus[3];
    assert_eq!(mig_gpu.mig.len(), 3);
    assert_eq!(
        mig_gpu.busy_ratio, None,
        "no device utilisation in MIG mode"
    );
    assert!(
        mig_gpu
            .processes
            .iter()
            .all(|p| p.gpu_instance_id.is_some() && p.sm_ratio.is_none())
    );
    let chat = &nv.gpus[0].processes[0];
    assert_eq!(chat.name.as_deref(), Some("python3"));
    assert!(chat.sm_ratio.is_some() && chat.gpu_instance_id.is_none());

    let samples = compare("gpu-node-2", "2026-11-02T14:00:00Z", 3);
    let (nv, _) = &samples[2];
    assert_eq!(nv.gpus[1].mig.len(), 5, "A100 with 4 × 1g + 3g");
    assert_eq!(nv.gpus[0].sm_active_ratio, None, "A100: no GPM");
    assert_eq!(
        nv.gpus[2].pcie_rx_bytes_per_second, None,
        "scenario NotSupported"
    );
    assert!(nv.gpus[2].errors.is_empty());
}

#[test]
fn the_xid_and_ecc_fault_match() {
    let _guard = Fake::lock();
    let samples = compare("gpu-node-1", "2026-11-02T02:59:58Z", 5);
    let xids: Vec<usize> = samples
        .iter()
        .map(|(nv, _)| nv.gpus[2].xid_events.len())
        .collect();
    assert_eq!(
        xids,
        vec![0, 0, 1, 0, 0],
        "one XID, reported once, at 03:00:00"
    );
    let (nv, _) = &samples[2];
    assert_eq!(nv.gpus[2].xid_events[0].xid, 79);
    assert_eq!(nv.gpus[2].xid_events[0].gpu_instance_id, None);
    assert_eq!(nv.gpus[2].ecc_corrected_total, Some(3));
}

#[test]
fn the_row_remap_faults_match() {
    let _guard = Fake::lock();
    // The monitoring scenario: a remap pending on GPU 0 since 11-02 06:00, a failed one on GPU 1
    // at 11-03 09:00.
    let path = demo_path().with_file_name("alerting.toml");
    let samples = compare_in(&path, "gpu-node-1", "2026-11-03T08:59:59Z", 3);
    let rows = |i: usize, gpu: usize| samples[i].0.gpus[gpu].remapped_rows.expect("row remap");
    assert!(rows(0, 0).pending && !rows(0, 0).failure && rows(0, 0).correctable == 1);
    assert!(!rows(0, 1).failure, "before 09:00");
    assert!(rows(1, 1).failure && rows(2, 1).failure, "from 09:00 on");
    assert_eq!(rows(2, 2), rows(0, 2), "GPU 2 untouched");
}

#[test]
fn the_lost_gpu_window_matches() {
    let _guard = Fake::lock();
    let samples = compare("gpu-node-3", "2026-11-03T09:59:58Z", 5);
    let status: Vec<GpuStatus> = samples
        .iter()
        .map(|(nv, _)| nv.gpus[1].status.clone())
        .collect();
    // A reading describes the second before it: the one at 10:00:00 still reads, 10:00:01 is
    // the first in the outage.
    assert_eq!(
        status,
        vec![
            GpuStatus::Ok,
            GpuStatus::Ok,
            GpuStatus::Ok,
            GpuStatus::Lost,
            GpuStatus::Lost
        ]
    );
    let (nv, _) = &samples[3];
    assert!(!nv.gpus[1].uuid.is_empty(), "a lost GPU keeps its UUID");
    assert_eq!(
        nv.gpus[0].status,
        GpuStatus::Ok,
        "the other GPU is still sampled"
    );
    // And back at 12:00.
    let samples = compare("gpu-node-3", "2026-11-03T11:59:58Z", 4);
    let status: Vec<GpuStatus> = samples
        .iter()
        .map(|(nv, _)| nv.gpus[1].status.clone())
        .collect();
    assert_eq!(
        status,
        vec![
            GpuStatus::Lost,
            GpuStatus::Lost,
            GpuStatus::Lost,
            GpuStatus::Ok
        ]
    );
    assert!(
        !samples[3].0.gpus[1].uuid.is_empty(),
        "the UUID is read again once the GPU is back"
    );
}

#[test]
fn the_power_error_window_matches() {
    let _guard = Fake::lock();
    let samples = compare("gpu-node-2", "2026-11-02T06:00:00Z", 3);
    let (before, _) = &samples[0];
    assert_eq!(before.gpus[0].status, GpuStatus::Ok);
    let (during, _) = &samples[1];
    assert_eq!(during.gpus[0].status, GpuStatus::Degraded);
    assert_eq!(during.gpus[0].power_watts, None);
    assert_eq!(during.gpus[0].errors.len(), 1);
    assert_eq!(during.gpus[0].errors[0].field, "power");
    assert_eq!(during.gpus[0].errors[0].kind, "unknown");
    let samples = compare("gpu-node-2", "2026-11-02T06:10:00Z", 2);
    assert_eq!(
        samples[0].0.gpus[0].status,
        GpuStatus::Degraded,
        "the reading at 06:10:00 describes the last second of the window"
    );
    assert_eq!(
        samples[1].0.gpus[0].status,
        GpuStatus::Ok,
        "the window ends at 06:10"
    );
}

#[test]
fn energy_counts_up_identically() {
    let _guard = Fake::lock();
    let samples = compare("gpu-node-1", "2026-11-02T14:00:00Z", 6);
    let first = samples[0].0.gpus[0].energy_joules.expect("energy");
    let last = samples[5].0.gpus[0].energy_joules.expect("energy");
    assert!(last > first);
}
