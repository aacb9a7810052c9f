//! The fake configured from the environment, as the exporter binary uses it out of process
//! (`TESSERA_FAKE_NVML_*`), and unconfigured. One test in this binary: the fake's state is
//! per process and environment variables are process-global.

mod common;

use common::*;
use tessera_core::device::{DeviceError, GpuBackend};
use tessera_core::model::GpuStatus;
use tessera_core::nvml::NvmlBackend;

#[test]
fn unconfigured_then_configured_from_the_environment() {
    let fake = Fake::open(FULL);
    // No scenario loaded and none in the environment: init fails with a clear message on stderr.
    match NvmlBackend::new(Some(&fake.path)) {
        Err(DeviceError::Nvml { call, kind }) => {
            assert_eq!(call, "nvmlInit_v2");
            assert_eq!(kind, "unknown");
        }
        other => panic!("expected an init error, got {other:?}"),
    }
    // SAFETY: the only test of this binary; no other thread reads the environment.
    unsafe {
        std::env::set_var("TESSERA_FAKE_NVML_SCENARIO", demo_path());
        std::env::set_var("TESSERA_FAKE_NVML_NODE", "gpu-node-2");
        std::env::set_var("TESSERA_FAKE_NVML_TIME", "2026-11-02T06:04:58Z");
        std::env::set_var("TESSERA_FAKE_NVML_STEP_MS", "1000");
    }
    let mut b = NvmlBackend::new(Some(&fake.path)).expect("configured from the environment");
    let inv = b.inventory().expect("inventory");
    assert_eq!(inv.gpus.len(), 4);
    assert_eq!(inv.gpus[1].mig_instances.len(), 5);
    let t0 = fake.time_ms();
    let s = b.sample().expect("sample");
    assert_eq!(
        s.gpus[0].status,
        GpuStatus::Degraded,
        "the power error window of gpu-node-2"
    );
    b.sample().expect("sample");
    assert_eq!(fake.time_ms() - t0, 2000, "each sample moves time one step");
    assert!(t0 >= ms("2026-11-02T06:04:58Z"));
}
