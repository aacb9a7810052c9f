//! An old driver: `libnvidia_ml_old.so` lacks GPM, total energy, per-process utilisation, GPU
//! instance placements and the `ClocksEventReasons` name. The backend still samples; what the
//! missing functions give is absent, each missing function is logged once and listed by
//! `missing_functions()`, nothing is an error status and nothing panics.
//!
//! Both fake libraries are loaded in this one process, each with its own state.

use crate::common;

use common::*;
use tessera_core::device::{DeviceError, GpuBackend};
use tessera_core::model::{FieldError, GpuStatus};
use tessera_core::sim::{SimBackend, SimClock};

const NODE: &str = "gpu-node-1";
const DAY: &str = "2026-11-02T14:00:00Z";

#[test]
fn an_old_driver_samples_without_the_missing_functions() {
    let _guard = Fake::lock();
    let old = Fake::open(OLD);
    old.load(&demo_path(), NODE);
    old.set_time(DAY);
    let mut b = old.backend(NODE);
    let scenario = demo();
    let mut sim = SimBackend::new(
        &scenario,
        Some(NODE),
        SimClock::Stepped {
            next_ms: ms(DAY),
            step_ms: 1000,
        },
    )
    .expect("sim");
    assert_eq!(
        b.inventory().expect("inventory"),
        sim.inventory().expect("inventory")
    );
    for step in 0..3 {
        if step > 0 {
            old.advance_ms(1000);
        }
        let s = b.sample().expect("an old driver still samples");
        let mut expected = sim.sample().expect("sim");
        for g in &s.gpus {
            assert_eq!(
                g.status,
                GpuStatus::Ok,
                "missing functions are no error: {:?}",
                g.errors
            );
            assert_eq!(g.energy_joules, None);
            assert_eq!(g.sm_active_ratio, None);
            assert!(g.processes.iter().all(|p| p.sm_ratio.is_none()));
            assert!(
                g.throttle_reasons.is_some(),
                "the old name of clock event reasons is used"
            );
        }
        // Everything else equals the simulator.
        for g in &mut expected.gpus {
            g.energy_joules = None;
            g.sm_active_ratio = None;
            g.sm_occupancy_ratio = None;
            g.profiling = Default::default();
            g.mig.iter_mut().for_each(|m| {
                m.sm_active_ratio = None;
                m.profiling = Default::default();
            });
            g.processes.iter_mut().for_each(|p| {
                p.sm_ratio = None;
                p.sm_readings.clear();
            });
        }
        let mut s = s.clone();
        s.timestamp_ms = expected.timestamp_ms;
        for (a, e) in s.gpus.iter_mut().zip(&expected.gpus) {
            normalise_gpu(a, e, false);
        }
        assert_eq!(s, expected);
    }
    let missing = b.missing_functions();
    for f in [
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlGpmQueryDeviceSupport",
        "nvmlDeviceGetProcessUtilization",
    ] {
        assert!(missing.iter().any(|m| m == f), "{f} not in {missing:?}");
    }
    assert!(
        !missing.iter().any(|m| m.contains("ClocksEventReasons")),
        "a fallback exists: {missing:?}"
    );
    match b.possible_placements(0, 9) {
        Err(DeviceError::MissingSymbol { symbol }) => {
            assert_eq!(symbol, "nvmlDeviceGetGpuInstancePossiblePlacements_v2");
            let text = DeviceError::MissingSymbol { symbol }.to_string();
            assert!(text.contains("missing from the loaded library"), "{text}");
        }
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
    assert_eq!(
        b.profile_table(0)
            .expect("profile info exists in old drivers")
            .len(),
        7
    );
}

#[test]
fn the_fallback_name_carries_errors_too() {
    let _guard = Fake::lock();
    let old = Fake::open(OLD);
    old.load(&demo_path(), NODE);
    old.set_time(DAY);
    let mut b = old.backend(NODE);
    old.inject(
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        0,
        NVML_ERROR_UNKNOWN,
    );
    let s = b.sample().expect("sample");
    old.clear();
    assert_eq!(s.gpus[0].throttle_reasons, None);
    assert_eq!(
        s.gpus[0].errors,
        vec![FieldError {
            field: "throttle".into(),
            kind: "unknown".into()
        }]
    );
}

#[test]
fn two_libraries_in_one_process_keep_their_own_state() {
    let _guard = Fake::lock();
    let old = Fake::open(OLD);
    let full = Fake::open(FULL);
    old.load(&demo_path(), "gpu-node-3");
    full.load(&demo_path(), "gpu-node-1");
    old.set_time("2026-11-03T11:00:00Z");
    full.set_time(DAY);
    let mut a = old.backend("gpu-node-3");
    let mut b = full.backend("gpu-node-1");
    full.inject("nvmlDeviceGetPowerUsage", 0, NVML_ERROR_UNKNOWN);
    let sa = a.sample().expect("old");
    let sb = b.sample().expect("full");
    full.clear();
    assert_eq!(sa.gpus.len(), 2);
    assert_eq!(sb.gpus.len(), 4);
    assert_eq!(
        sa.gpus[1].status,
        GpuStatus::Lost,
        "gpu-node-3 GPU 1 is lost at 11:00"
    );
    assert_eq!(
        sa.gpus[0].status,
        GpuStatus::Ok,
        "the injection into the other library does not apply"
    );
    assert_eq!(sb.gpus[0].status, GpuStatus::Degraded);
    assert_ne!(old.time_ms(), full.time_ms());
    // What the old library lacks and this sample called (per-process utilisation is not called
    // on a GPU that runs no compute process).
    let missing = a.missing_functions();
    assert!(
        missing.len() >= 2
            && missing
                .iter()
                .any(|f| f == "nvmlDeviceGetTotalEnergyConsumption"),
        "{missing:?}"
    );
    assert!(b.missing_functions().is_empty());
}
