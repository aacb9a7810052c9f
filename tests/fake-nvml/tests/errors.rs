//! Error paths of the NVML backend, forced through `tesseraFakeInjectError`: every NVML function
//! the backend calls returns NotSupported, Unknown (and other errors) and GpuIsLost at least once.
//!
//! - NotSupported → the value is absent, no error, status Ok.
//! - Unknown (or timeout, no_permission, insufficient_size) → absent, a `FieldError` named after
//!   the simulator's field, status Degraded.
//! - GpuIsLost from any call → status Lost, every value absent; other GPUs still sampled.
//! - A failed handle → status Error; node-level failures → `Err`.

use crate::common;

use std::io::Write;

use common::*;
use tessera_core::device::{DeviceError, GpuBackend};
use tessera_core::model::{FieldError, GpuSample, GpuStatus};
use tessera_core::nvml::NvmlBackend;
use tessera_core::sim::{Scenario, SimBackend, SimClock};

const NODE: &str = "gpu-node-1";
const DAY: &str = "2026-11-02T14:00:00Z";
/// A GPU without MIG (processes, GPM) and a GPU with MIG (3 instances) on gpu-node-1.
const PLAIN: usize = 0;
const MIG: usize = 3;

/// The full fake at `DAY` on gpu-node-1, with a backend that has sampled once (so GPM and
/// per-process utilisation have a previous sample), and time moved on by 1 s.
fn warmed_up(fake: &Fake) -> NvmlBackend {
    fake.load(&demo_path(), NODE);
    fake.set_time(DAY);
    let mut b = fake.backend(NODE);
    let first = b.sample().expect("first sample");
    assert!(first.gpus.iter().all(|g| g.status == GpuStatus::Ok));
    fake.advance_ms(1000);
    b
}

struct Case {
    function: &'static str,
    /// GPU to inject into (-1: calls without a device, which affect every GPU).
    device: i32,
    /// GPU to check.
    gpu: usize,
    /// The field error an Unknown produces.
    field: &'static str,
    /// Whether the values the function provides are absent.
    absent: fn(&GpuSample) -> bool,
}

fn mig_empty(g: &GpuSample) -> bool {
    g.mig.is_empty()
}

const CASES: &[Case] = &[
    Case {
        function: "nvmlDeviceGetUtilizationRates",
        device: 0,
        gpu: PLAIN,
        field: "utilization",
        absent: |g| g.busy_ratio.is_none() && g.memory_controller_ratio.is_none(),
    },
    Case {
        function: "nvmlDeviceGetMemoryInfo_v2",
        device: 0,
        gpu: PLAIN,
        field: "memory",
        absent: |g| g.memory_used_bytes.is_none() && g.memory_total_bytes.is_none(),
    },
    Case {
        function: "nvmlDeviceGetMemoryInfo_v2",
        device: 3,
        gpu: MIG,
        field: "mig_memory",
        absent: |g| {
            g.mig
                .iter()
                .all(|m| m.memory_used_bytes.is_none() && m.memory_total_bytes.is_none())
        },
    },
    Case {
        function: "nvmlDeviceGetPowerUsage",
        device: 0,
        gpu: PLAIN,
        field: "power",
        absent: |g| g.power_watts.is_none(),
    },
    Case {
        function: "nvmlDeviceGetTotalEnergyConsumption",
        device: 0,
        gpu: PLAIN,
        field: "energy",
        absent: |g| g.energy_joules.is_none(),
    },
    Case {
        function: "nvmlDeviceGetTemperature",
        device: 0,
        gpu: PLAIN,
        field: "temperature",
        absent: |g| g.temperature_celsius.is_none(),
    },
    Case {
        function: "nvmlDeviceGetClockInfo",
        device: 0,
        gpu: PLAIN,
        field: "clocks",
        absent: |g| g.sm_clock_hertz.is_none() && g.memory_clock_hertz.is_none(),
    },
    Case {
        function: "nvmlDeviceGetCurrentClocksEventReasons",
        device: 0,
        gpu: PLAIN,
        field: "throttle",
        absent: |g| g.throttle_reasons.is_none(),
    },
    Case {
        function: "nvmlDeviceGetTotalEccErrors",
        device: 0,
        gpu: PLAIN,
        field: "ecc",
        absent: |g| g.ecc_corrected_total.is_none() && g.ecc_uncorrected_total.is_none(),
    },
    Case {
        function: "nvmlDeviceGetRemappedRows",
        device: 0,
        gpu: PLAIN,
        field: "row_remap",
        absent: |g| g.remapped_rows.is_none(),
    },
    Case {
        function: "nvmlDeviceGetComputeRunningProcesses_v3",
        device: 0,
        gpu: PLAIN,
        field: "processes",
        absent: |g| g.processes.is_empty(),
    },
    Case {
        function: "nvmlDeviceGetProcessUtilization",
        device: 0,
        gpu: PLAIN,
        field: "process_utilization",
        absent: |g| !g.processes.is_empty() && g.processes.iter().all(|p| p.sm_ratio.is_none()),
    },
    Case {
        function: "nvmlGpmQueryDeviceSupport",
        device: 0,
        gpu: PLAIN,
        field: "gpm",
        absent: |g| g.sm_active_ratio.is_none() && g.sm_occupancy_ratio.is_none(),
    },
    Case {
        function: "nvmlGpmSampleAlloc",
        device: -1,
        gpu: PLAIN,
        field: "gpm",
        absent: |g| g.sm_active_ratio.is_none() && g.sm_occupancy_ratio.is_none(),
    },
    Case {
        function: "nvmlGpmSampleGet",
        device: 0,
        gpu: PLAIN,
        field: "gpm",
        absent: |g| g.sm_active_ratio.is_none() && g.sm_occupancy_ratio.is_none(),
    },
    Case {
        function: "nvmlGpmMetricsGet",
        device: 0,
        gpu: PLAIN,
        field: "gpm",
        absent: |g| g.sm_active_ratio.is_none() && g.sm_occupancy_ratio.is_none(),
    },
    Case {
        function: "nvmlGpmMigSampleGet",
        device: 3,
        gpu: MIG,
        field: "gpm",
        absent: |g| {
            g.sm_active_ratio.is_some()
                && g.mig.len() == 3
                && g.mig.iter().all(|m| m.sm_active_ratio.is_none())
        },
    },
    Case {
        function: "nvmlDeviceGetUUID",
        device: 0,
        gpu: PLAIN,
        field: "uuid",
        // The UUID last read is reported instead.
        absent: |g| !g.uuid.is_empty(),
    },
    Case {
        function: "nvmlDeviceGetMigMode",
        device: 3,
        gpu: MIG,
        field: "mig_memory",
        absent: mig_empty,
    },
    Case {
        function: "nvmlDeviceGetMaxMigDeviceCount",
        device: 3,
        gpu: MIG,
        field: "mig_memory",
        absent: mig_empty,
    },
    Case {
        function: "nvmlDeviceGetMigDeviceHandleByIndex",
        device: 3,
        gpu: MIG,
        field: "mig_memory",
        absent: mig_empty,
    },
    Case {
        function: "nvmlDeviceGetGpuInstanceId",
        device: 3,
        gpu: MIG,
        field: "mig_memory",
        absent: mig_empty,
    },
    Case {
        function: "nvmlDeviceGetComputeInstanceId",
        device: 3,
        gpu: MIG,
        field: "mig_memory",
        absent: mig_empty,
    },
];

/// Inject `ret` into a case's function and sample once.
fn sample_with(
    fake: &Fake,
    case: &Case,
    ret: i32,
) -> (tessera_core::model::NodeSample, NvmlBackend) {
    let mut b = warmed_up(fake);
    fake.inject(case.function, case.device, ret);
    let s = b
        .sample()
        .expect("a field error is never a node-level error");
    fake.clear();
    (s, b)
}

#[test]
fn not_supported_is_absent_without_error() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    for case in CASES {
        let (s, _) = sample_with(&fake, case, NVML_ERROR_NOT_SUPPORTED);
        let g = &s.gpus[case.gpu];
        assert!((case.absent)(g), "{}: values absent: {g:?}", case.function);
        assert!(g.errors.is_empty(), "{}: {:?}", case.function, g.errors);
        assert_eq!(g.status, GpuStatus::Ok, "{}", case.function);
    }
}

#[test]
fn other_errors_are_absent_with_a_field_error_and_degraded() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    for case in CASES {
        let (s, _) = sample_with(&fake, case, NVML_ERROR_UNKNOWN);
        let g = &s.gpus[case.gpu];
        assert!((case.absent)(g), "{}: values absent: {g:?}", case.function);
        let expected = FieldError {
            field: case.field.into(),
            kind: "unknown".into(),
        };
        assert!(
            g.errors.contains(&expected),
            "{}: {:?}",
            case.function,
            g.errors
        );
        assert_eq!(g.status, GpuStatus::Degraded, "{}", case.function);
        if case.device >= 0 {
            for (i, other) in s.gpus.iter().enumerate() {
                if i != case.gpu {
                    assert_eq!(
                        other.status,
                        GpuStatus::Ok,
                        "{}: GPU {i} unaffected",
                        case.function
                    );
                }
            }
        }
    }
}

#[test]
fn gpu_lost_from_any_call_marks_the_gpu_lost() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    for case in CASES {
        let (s, mut b) = sample_with(&fake, case, NVML_ERROR_GPU_IS_LOST);
        let g = &s.gpus[case.gpu];
        assert_eq!(g.status, GpuStatus::Lost, "{}", case.function);
        assert_eq!(
            g,
            &GpuSample::empty(case.gpu as u32, g.uuid.clone(), GpuStatus::Lost),
            "{}: every value absent",
            case.function
        );
        assert!(
            !g.uuid.is_empty(),
            "{}: the UUID seen before is kept",
            case.function
        );
        if case.device >= 0 {
            assert!(
                s.gpus
                    .iter()
                    .enumerate()
                    .all(|(i, o)| i == case.gpu || o.status == GpuStatus::Ok),
                "{}: other GPUs are still sampled",
                case.function
            );
        }
        // Back: values again; GPM starts over (first sample after the loss has none).
        fake.advance_ms(1000);
        let back = b.sample().expect("sample");
        assert_eq!(
            back.gpus[case.gpu].status,
            GpuStatus::Ok,
            "{}",
            case.function
        );
        assert!(back.gpus[case.gpu].power_watts.is_some());
        assert_eq!(
            back.gpus[case.gpu].sm_active_ratio, None,
            "{}",
            case.function
        );
        fake.advance_ms(1000);
        let later = b.sample().expect("sample");
        assert!(
            later.gpus[case.gpu].sm_active_ratio.is_some(),
            "{}",
            case.function
        );
    }
}

#[test]
fn error_kinds_are_the_simulator_tokens() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    let case = &CASES[3];
    assert_eq!(case.function, "nvmlDeviceGetPowerUsage");
    for (ret, kind) in [
        (NVML_ERROR_TIMEOUT, "timeout"),
        (NVML_ERROR_NO_PERMISSION, "no_permission"),
        (7, "insufficient_size"),
        (NVML_ERROR_NOT_FOUND, "not_found"),
    ] {
        let (s, _) = sample_with(&fake, case, ret);
        assert_eq!(
            s.gpus[0].errors,
            vec![FieldError {
                field: "power".into(),
                kind: kind.into()
            }]
        );
    }
}

#[test]
fn process_names_fail_soft() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    for ret in [
        NVML_ERROR_NOT_FOUND,
        NVML_ERROR_UNKNOWN,
        NVML_ERROR_NO_PERMISSION,
    ] {
        let mut b = warmed_up(&fake);
        fake.inject("nvmlSystemGetProcessName", -1, ret);
        let s = b.sample().expect("sample");
        fake.clear();
        let g = &s.gpus[PLAIN];
        assert_eq!(g.status, GpuStatus::Ok);
        assert!(!g.processes.is_empty() && g.processes.iter().all(|p| p.name.is_none()));
    }
}

#[test]
fn a_failed_handle_is_an_error_status_and_the_others_are_sampled() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    let mut b = warmed_up(&fake);
    fake.inject("nvmlDeviceGetHandleByIndex_v2", 1, NVML_ERROR_UNKNOWN);
    let s = b.sample().expect("sample");
    match &s.gpus[1].status {
        GpuStatus::Error { message } => assert!(
            message.contains("nvmlDeviceGetHandleByIndex_v2"),
            "{message}"
        ),
        other => panic!("expected Error, got {other:?}"),
    }
    assert!(!s.gpus[1].uuid.is_empty(), "the UUID seen before is kept");
    assert_eq!(s.gpus[1].power_watts, None);
    for i in [0, 2, 3] {
        assert_eq!(s.gpus[i].status, GpuStatus::Ok);
        assert!(s.gpus[i].memory_used_bytes.is_some());
    }
    fake.inject("nvmlDeviceGetHandleByIndex_v2", 1, NVML_ERROR_GPU_IS_LOST);
    fake.advance_ms(1000);
    let s = b.sample().expect("sample");
    assert_eq!(s.gpus[1].status, GpuStatus::Lost);
    assert_eq!(s.gpus[0].status, GpuStatus::Ok);
    fake.clear();
}

#[test]
fn node_level_failures_are_errors() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    let mut b = warmed_up(&fake);
    fake.inject("nvmlDeviceGetCount_v2", -1, NVML_ERROR_UNKNOWN);
    match b.sample() {
        Err(DeviceError::Nvml { call, kind }) => {
            assert_eq!(call, "nvmlDeviceGetCount_v2");
            assert_eq!(kind, "unknown");
        }
        other => panic!("expected a node-level error, got {other:?}"),
    }
    assert!(b.inventory().is_err());
    fake.clear();
    fake.inject(
        "nvmlDeviceGetHandleByIndex_v2",
        -1,
        NVML_ERROR_UNINITIALIZED,
    );
    let err = b.sample().expect_err("every GPU uninitialised");
    assert!(err.is_driver_level(), "{err:?}");
    let err = b.inventory().expect_err("every GPU uninitialised");
    assert!(err.is_driver_level(), "{err:?}");
    fake.clear();
    fake.advance_ms(1000);
    assert!(b.sample().is_ok(), "recovers once the driver answers again");
}

#[test]
fn init_failures_map_to_device_errors() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    fake.load(&demo_path(), NODE);
    fake.inject("nvmlInit_v2", -1, NVML_ERROR_DRIVER_NOT_LOADED);
    let err = NvmlBackend::new(Some(&fake.path)).expect_err("driver not loaded");
    assert!(
        matches!(err, DeviceError::DriverNotLoaded { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("--backend sim"), "{err}");
    fake.inject("nvmlInit_v2", -1, NVML_ERROR_NO_PERMISSION);
    match NvmlBackend::new(Some(&fake.path)) {
        Err(DeviceError::Nvml { call, kind }) => {
            assert_eq!(call, "nvmlInit_v2");
            assert_eq!(kind, "no_permission");
        }
        other => panic!("expected an NVML error, got {other:?}"),
    }
    fake.clear();
    assert!(NvmlBackend::new(Some(&fake.path)).is_ok());
}

#[test]
fn a_driver_fault_is_node_level_like_in_the_simulator() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    let text = std::fs::read_to_string(demo_path()).expect("demo")
        + "\n[[faults]]\nkind = \"driver_error\"\nnode = \"gpu-node-3\"\nat = \"2026-11-02T01:00:00Z\"\nuntil = \"2026-11-02T01:05:00Z\"\n";
    let mut file = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    file.write_all(text.as_bytes()).expect("write");
    let scenario = Scenario::from_file(file.path()).expect("valid scenario");
    fake.load(file.path(), "gpu-node-3");
    // A reading describes the second before it: 01:00:00 is the last one before the fault.
    fake.set_time("2026-11-02T01:00:00Z");
    let mut b = fake.backend("gpu-node-3");
    let mut sim = SimBackend::new(
        &scenario,
        Some("gpu-node-3"),
        SimClock::Stepped {
            next_ms: ms("2026-11-02T01:00:00Z"),
            step_ms: 1000,
        },
    )
    .expect("sim");
    assert!(b.sample().is_ok() && sim.sample().is_ok());
    fake.advance_ms(1000);
    let nv_err = b.sample().expect_err("driver fault");
    let sim_err = sim.sample().expect_err("driver fault");
    assert!(
        nv_err.is_driver_level() && sim_err.is_driver_level(),
        "{nv_err:?} / {sim_err:?}"
    );
    assert!(matches!(nv_err, DeviceError::Nvml { .. }));
    // Re-initialising during the fault fails the way a missing kernel driver does.
    let err = NvmlBackend::new(Some(&fake.path)).expect_err("init during the fault");
    assert!(
        matches!(err, DeviceError::DriverNotLoaded { .. }),
        "{err:?}"
    );
    fake.set_time("2026-11-02T01:05:01Z");
    assert!(
        b.sample().is_ok(),
        "the same backend works again after the fault"
    );
}

#[test]
fn xid_event_failures_lose_no_gpu_values() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    let before = "2026-11-02T02:59:59Z";
    // No event set: samples work, XIDs are not reported.
    fake.load(&demo_path(), NODE);
    fake.set_time(before);
    fake.inject("nvmlEventSetCreate", -1, NVML_ERROR_UNKNOWN);
    let mut b = fake.backend(NODE);
    fake.clear();
    b.sample().expect("sample");
    fake.advance_ms(1000);
    let s = b.sample().expect("sample");
    assert!(s.gpus[2].xid_events.is_empty());
    assert_eq!(s.gpus[2].status, GpuStatus::Ok);
    assert_eq!(s.gpus[2].ecc_corrected_total, Some(3));

    // Registration NotSupported: no XIDs from that GPU, and no retry.
    fake.load(&demo_path(), NODE);
    fake.set_time(before);
    fake.inject("nvmlDeviceRegisterEvents", 2, NVML_ERROR_NOT_SUPPORTED);
    let mut b = fake.backend(NODE);
    fake.clear();
    b.sample().expect("sample");
    fake.advance_ms(1000);
    assert!(b.sample().expect("sample").gpus[2].xid_events.is_empty());

    // Registration failing transiently is retried at the next sample.
    fake.load(&demo_path(), NODE);
    fake.set_time(before);
    fake.inject("nvmlDeviceRegisterEvents", 2, NVML_ERROR_UNKNOWN);
    let mut b = fake.backend(NODE);
    fake.clear();
    b.sample().expect("sample");
    fake.advance_ms(1000);
    assert_eq!(b.sample().expect("sample").gpus[2].xid_events.len(), 1);

    // A failed wait leaves the event queued for the next sample.
    fake.load(&demo_path(), NODE);
    fake.set_time(before);
    let mut b = fake.backend(NODE);
    b.sample().expect("sample");
    fake.advance_ms(1000);
    fake.inject("nvmlEventSetWait_v2", -1, NVML_ERROR_UNKNOWN);
    let s = b.sample().expect("sample");
    assert!(s.gpus[2].xid_events.is_empty());
    assert_eq!(s.gpus[2].status, GpuStatus::Ok);
    fake.clear();
    fake.advance_ms(1000);
    let s = b.sample().expect("sample");
    assert_eq!(s.gpus[2].xid_events.len(), 1);
    assert_eq!(s.gpus[2].xid_events[0].xid, 79);
}

#[test]
fn inventory_errors_leave_values_absent() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    fake.load(&demo_path(), NODE);
    fake.set_time(DAY);
    let mut b = fake.backend(NODE);
    let full = b.inventory().expect("inventory");
    assert_eq!(full.gpus[MIG].mig_instances.len(), 3);

    let check =
        |function: &str, device: i32, ok: &dyn Fn(&tessera_core::model::Inventory) -> bool| {
            for ret in [NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_UNKNOWN] {
                let mut fresh = fake.backend(NODE);
                fake.inject(function, device, ret);
                let inv = fresh
                    .inventory()
                    .expect("inventory never fails for a field");
                fake.clear();
                assert!(ok(&inv), "{function} → {ret}: {inv:?}");
            }
        };
    check("nvmlSystemGetDriverVersion", -1, &|i| {
        i.driver_version.is_none()
    });
    check("nvmlSystemGetCudaDriverVersion_v2", -1, &|i| {
        i.cuda_version.is_none()
    });
    check("nvmlDeviceGetName", 3, &|i| {
        i.gpus[3].name.is_empty()
            && i.gpus[3]
                .mig_instances
                .iter()
                .all(|m| m.profile_name.starts_with("profile-"))
    });
    check("nvmlDeviceGetPciInfo_v3", 0, &|i| {
        i.gpus[0].pci_bus_id.is_empty()
    });
    check("nvmlDeviceGetMemoryInfo_v2", 0, &|i| {
        i.gpus[0].memory_total_bytes.is_none()
    });
    check("nvmlDeviceGetEnforcedPowerLimit", 0, &|i| {
        i.gpus[0].power_limit_watts.is_none()
    });
    check("nvmlDeviceGetMigMode", 3, &|i| {
        i.gpus[3].mig_mode.is_none() && i.gpus[3].mig_instances.is_empty()
    });
    check("nvmlDeviceGetUUID", 0, &|i| {
        i.gpus[0].uuid == full.gpus[0].uuid
    });
    for function in [
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetGpuInstanceById",
        "nvmlGpuInstanceGetInfo",
    ] {
        check(function, 3, &|i| {
            i.gpus[3].mig_instances.is_empty() && i.gpus[0] == full.gpus[0]
        });
    }
    // A lost GPU in the inventory: identity from before, nothing else.
    fake.inject("nvmlDeviceGetHandleByIndex_v2", 1, NVML_ERROR_GPU_IS_LOST);
    let inv = b.inventory().expect("inventory");
    fake.clear();
    assert_eq!(inv.gpus[1].uuid, full.gpus[1].uuid);
    assert!(inv.gpus[1].name.is_empty());
}

#[test]
fn mig_table_reads_report_errors() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    fake.load(&demo_path(), NODE);
    fake.set_time(DAY);
    let b = fake.backend(NODE);
    assert_eq!(b.profile_table(0).expect("table").len(), 7);
    fake.inject(
        "nvmlDeviceGetGpuInstanceProfileInfo",
        0,
        NVML_ERROR_NOT_SUPPORTED,
    );
    assert!(
        b.profile_table(0)
            .expect("NotSupported rows are skipped")
            .is_empty()
    );
    fake.inject("nvmlDeviceGetGpuInstanceProfileInfo", 0, NVML_ERROR_UNKNOWN);
    assert!(matches!(b.profile_table(0), Err(DeviceError::Nvml { .. })));
    fake.inject(
        "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
        0,
        NVML_ERROR_UNKNOWN,
    );
    match b.possible_placements(0, 9) {
        Err(DeviceError::Nvml { call, kind }) => {
            assert_eq!(call, "nvmlDeviceGetGpuInstancePossiblePlacements_v2");
            assert_eq!(kind, "unknown");
        }
        other => panic!("expected an NVML error, got {other:?}"),
    }
    fake.clear();
    assert_eq!(b.possible_placements(0, 9).expect("placements").len(), 2);
    fake.inject("nvmlDeviceGetHandleByIndex_v2", 0, NVML_ERROR_UNKNOWN);
    assert!(b.possible_placements(0, 9).is_err());
    fake.clear();
}

#[test]
fn cleanup_failures_never_panic() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    let mut b = warmed_up(&fake);
    b.sample().expect("sample");
    for function in ["nvmlEventSetFree", "nvmlGpmSampleFree", "nvmlShutdown"] {
        fake.inject(function, -1, NVML_ERROR_UNKNOWN);
    }
    drop(b);
    fake.clear();
}

/// PCIe throughput comes from `nvmlDeviceGetPcieThroughput` only on GPUs without GPM (an A100
/// here), where the rules hold as for every read; on a GPU with GPM it comes from GPM and that
/// call is never made (a fault injected there changes nothing).
#[test]
fn pcie_reads_follow_the_rules_without_gpm_and_are_not_made_with_it() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    let pcie_absent = |g: &GpuSample| {
        g.pcie_tx_bytes_per_second.is_none() && g.pcie_rx_bytes_per_second.is_none()
    };
    let a100 = |fake: &Fake, ret: i32| {
        fake.load(&demo_path(), "gpu-node-2");
        fake.set_time(DAY);
        let mut b = fake.backend("gpu-node-2");
        b.sample().expect("first sample");
        fake.advance_ms(1000);
        fake.inject("nvmlDeviceGetPcieThroughput", 0, ret);
        let s = b
            .sample()
            .expect("a field error is never a node-level error");
        fake.clear();
        s.gpus[0].clone()
    };
    let g = a100(&fake, NVML_ERROR_NOT_SUPPORTED);
    assert!(
        pcie_absent(&g) && g.errors.is_empty() && g.status == GpuStatus::Ok,
        "{g:?}"
    );
    let g = a100(&fake, NVML_ERROR_UNKNOWN);
    assert!(pcie_absent(&g) && g.status == GpuStatus::Degraded, "{g:?}");
    assert!(g.errors.contains(&FieldError {
        field: "pcie".into(),
        kind: "unknown".into()
    }));
    assert_eq!(a100(&fake, NVML_ERROR_GPU_IS_LOST).status, GpuStatus::Lost);
    // An H100 (GPM): the call is not made, PCIe is there.
    let (s, _) = sample_with(
        &fake,
        &Case {
            function: "nvmlDeviceGetPcieThroughput",
            device: 0,
            gpu: PLAIN,
            field: "pcie",
            absent: |_| true,
        },
        NVML_ERROR_GPU_IS_LOST,
    );
    let g = &s.gpus[PLAIN];
    assert_eq!(g.status, GpuStatus::Ok);
    assert!(g.pcie_tx_bytes_per_second.is_some() && g.pcie_rx_bytes_per_second.is_some());
}
