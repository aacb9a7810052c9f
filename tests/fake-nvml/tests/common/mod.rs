//! Shared helpers of the fake-NVML integration tests: find and `dlopen` the fake libraries built
//! beside the test binary, drive them through their `tesseraFake*` control symbols, and compare
//! NVML-backend samples with simulated-backend samples.
//!
//! The fake's state is global per loaded library and tests run on parallel threads, so every test
//! holds [`Fake::lock`] while it uses a library.

#![allow(dead_code)]

use std::ffi::{CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use tessera_core::model::{GpuSample, GpuStatus, NodeSample, Profiling};
use tessera_core::nvml::NvmlBackend;
use tessera_core::sim::Scenario;

/// `libnvidia_ml.so`: the full fake.
pub const FULL: &str = "libnvidia_ml.so";
/// `libnvidia_ml_old.so`: the old-driver fake (a dev-dependency, so cargo builds it too).
pub const OLD: &str = "libnvidia_ml_old.so";

pub const NVML_SUCCESS: c_int = 0;
pub const NVML_ERROR_UNINITIALIZED: c_int = 1;
pub const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
pub const NVML_ERROR_NO_PERMISSION: c_int = 4;
pub const NVML_ERROR_NOT_FOUND: c_int = 6;
pub const NVML_ERROR_DRIVER_NOT_LOADED: c_int = 9;
pub const NVML_ERROR_TIMEOUT: c_int = 10;
pub const NVML_ERROR_GPU_IS_LOST: c_int = 15;
pub const NVML_ERROR_UNKNOWN: c_int = 999;

/// The demo scenario.
pub fn demo_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/scenarios/demo.toml")
}

pub fn demo() -> Scenario {
    Scenario::from_file(&demo_path()).expect("demo scenario")
}

/// Unix ms of an RFC 3339 time.
pub fn ms(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .expect("RFC 3339")
        .timestamp_millis()
}

/// Path of a fake library built beside this test binary (`target/<profile>/deps`).
pub fn lib_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("deps dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not built (expected beside the test binary)",
        path.display()
    );
    path
}

/// One loaded fake library (kept loaded for the life of the process, so its state survives every
/// `Nvml` that loads and unloads the same path).
pub struct Fake {
    pub path: PathBuf,
    lib: &'static libloading::Library,
}

static LOCK: Mutex<()> = Mutex::new(());
static FULL_LIB: OnceLock<libloading::Library> = OnceLock::new();
static OLD_LIB: OnceLock<libloading::Library> = OnceLock::new();

impl Fake {
    /// Serialise tests that use the fake libraries.
    pub fn lock() -> MutexGuard<'static, ()> {
        LOCK.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The library `name` ([`FULL`] or [`OLD`]).
    pub fn open(name: &str) -> Fake {
        let path = lib_path(name);
        let cell = if name == OLD { &OLD_LIB } else { &FULL_LIB };
        // SAFETY: the fake library has no initialisers with preconditions; it stays loaded.
        let lib = cell
            .get_or_init(|| unsafe { libloading::Library::new(&path) }.expect("dlopen fake NVML"));
        Fake { path, lib }
    }

    /// Load `node` of the scenario at `scenario`; clears injected errors; time = scenario start.
    pub fn load(&self, scenario: &Path, node: &str) {
        let p = CString::new(scenario.to_str().expect("utf-8 path")).expect("no NUL");
        let n = CString::new(node).expect("no NUL");
        // SAFETY: the symbol has this signature (tests/fake-nvml/src/core_exports/control.rs).
        let rc = unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*const c_char, *const c_char) -> c_int>(
                    b"tesseraFakeLoadScenario\0",
                )
                .expect("tesseraFakeLoadScenario");
            f(p.as_ptr(), n.as_ptr())
        };
        assert_eq!(rc, 0, "loading {} node {node}", scenario.display());
    }

    pub fn set_time_ms(&self, t: i64) {
        // SAFETY: the symbol has this signature.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(i64)>(b"tesseraFakeSetTimeMs\0")
                .expect("tesseraFakeSetTimeMs");
            f(t)
        }
    }

    pub fn set_time(&self, rfc3339: &str) {
        self.set_time_ms(ms(rfc3339));
    }

    pub fn advance_ms(&self, d: i64) {
        // SAFETY: the symbol has this signature.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(i64)>(b"tesseraFakeAdvanceMs\0")
                .expect("tesseraFakeAdvanceMs");
            f(d)
        }
    }

    pub fn time_ms(&self) -> i64 {
        // SAFETY: the symbol has this signature.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn() -> i64>(b"tesseraFakeTimeMs\0")
                .expect("tesseraFakeTimeMs");
            f()
        }
    }

    /// Force `function` to return `ret` on GPU `device` (-1: all); `ret` 0 clears.
    pub fn inject(&self, function: &str, device: c_int, ret: c_int) {
        let name = CString::new(function).expect("no NUL");
        // SAFETY: the symbol has this signature.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*const c_char, c_int, c_int)>(
                    b"tesseraFakeInjectError\0",
                )
                .expect("tesseraFakeInjectError");
            f(name.as_ptr(), device, ret)
        }
    }

    /// Clear every injected error.
    pub fn clear(&self) {
        // SAFETY: the symbol has this signature; null clears all.
        unsafe {
            let f = self
                .lib
                .get::<unsafe extern "C" fn(*const c_char, c_int, c_int)>(
                    b"tesseraFakeInjectError\0",
                )
                .expect("tesseraFakeInjectError");
            f(std::ptr::null(), -1, 0)
        }
    }

    /// An NVML backend over this library, reporting `node` as its node name.
    pub fn backend(&self, node: &str) -> NvmlBackend {
        let mut b = NvmlBackend::new(Some(&self.path)).expect("NvmlBackend over the fake");
        b.set_node_name(node);
        b
    }
}

fn close(a: &mut Option<f64>, b: Option<f64>, tol: f64) {
    if let (Some(x), Some(y)) = (*a, b)
        && (x - y).abs() <= tol
    {
        *a = Some(y);
    }
}

/// The profiling pipes of the NVML path brought to the simulator's where they agree (ratios
/// are GPM percentages divided by 100, ±1e-9; NVLink whole MiB/s, ±1 byte/s).
fn close_profiling(a: &mut Profiling, b: &Profiling) {
    close(&mut a.tensor_active_ratio, b.tensor_active_ratio, 1e-9);
    close(&mut a.tensor_dfma_ratio, b.tensor_dfma_ratio, 1e-9);
    close(&mut a.tensor_hmma_ratio, b.tensor_hmma_ratio, 1e-9);
    close(&mut a.tensor_imma_ratio, b.tensor_imma_ratio, 1e-9);
    close(&mut a.dram_active_ratio, b.dram_active_ratio, 1e-9);
    close(&mut a.fp64_ratio, b.fp64_ratio, 1e-9);
    close(&mut a.fp32_ratio, b.fp32_ratio, 1e-9);
    close(&mut a.fp16_ratio, b.fp16_ratio, 1e-9);
    close(&mut a.integer_ratio, b.integer_ratio, 1e-9);
    close(
        &mut a.nvlink_tx_bytes_per_second,
        b.nvlink_tx_bytes_per_second,
        1.0,
    );
    close(
        &mut a.nvlink_rx_bytes_per_second,
        b.nvlink_rx_bytes_per_second,
        1.0,
    );
}

/// Make an NVML-path GPU sample comparable with the simulator's, applying the documented
/// differences; what is left must be equal.
///
/// - `busy_ratio`, `memory_controller_ratio`: NVML reports whole percent (±0.005).
/// - `energy_joules`: NVML reports whole millijoules (±0.0005 J).
/// - GPM ratios: percent doubles divided by 100 (±1e-9); absent on the NVML path when
///   `gpm_expected` is false (first sample, or first after the GPU was lost), and so are the
///   profiling pipes and, on GPUs with GPM (whose PCIe comes from GPM), PCIe.
/// - XID timestamps: NVML events carry none; the backend stamps the sample time.
/// - The UUID of a GPU lost since before the backend started: NVML gives no handle to read it.
pub fn normalise_gpu(nv: &mut GpuSample, sim: &GpuSample, gpm_expected: bool) {
    if nv.status == GpuStatus::Lost && nv.uuid.is_empty() {
        nv.uuid = sim.uuid.clone();
    }
    close(&mut nv.busy_ratio, sim.busy_ratio, 0.005 + 1e-9);
    close(
        &mut nv.memory_controller_ratio,
        sim.memory_controller_ratio,
        0.005 + 1e-9,
    );
    close(&mut nv.energy_joules, sim.energy_joules, 0.0005 + 1e-9);
    if gpm_expected {
        close(&mut nv.sm_active_ratio, sim.sm_active_ratio, 1e-9);
        close(&mut nv.sm_occupancy_ratio, sim.sm_occupancy_ratio, 1e-9);
        close_profiling(&mut nv.profiling, &sim.profiling);
        if !sim.profiling.is_empty() {
            close(
                &mut nv.pcie_tx_bytes_per_second,
                sim.pcie_tx_bytes_per_second,
                1.0,
            );
            close(
                &mut nv.pcie_rx_bytes_per_second,
                sim.pcie_rx_bytes_per_second,
                1.0,
            );
        }
        for (a, b) in nv.mig.iter_mut().zip(&sim.mig) {
            close(&mut a.sm_active_ratio, b.sm_active_ratio, 1e-9);
            close_profiling(&mut a.profiling, &b.profiling);
        }
    } else {
        assert_eq!(
            nv.sm_active_ratio, None,
            "GPU {}: GPM needs two samples",
            nv.index
        );
        assert_eq!(nv.sm_occupancy_ratio, None);
        assert!(nv.mig.iter().all(|m| m.sm_active_ratio.is_none()));
        nv.sm_active_ratio = sim.sm_active_ratio;
        nv.sm_occupancy_ratio = sim.sm_occupancy_ratio;
        assert!(
            nv.profiling.is_empty(),
            "GPU {}: GPM needs two samples",
            nv.index
        );
        assert!(nv.mig.iter().all(|m| m.profiling.is_empty()));
        if !sim.profiling.is_empty() && nv.pcie_tx_bytes_per_second.is_none() {
            // PCIe comes from GPM on GPUs that have it.
            nv.pcie_tx_bytes_per_second = sim.pcie_tx_bytes_per_second;
            nv.pcie_rx_bytes_per_second = sim.pcie_rx_bytes_per_second;
        }
        nv.profiling = sim.profiling;
        for (a, b) in nv.mig.iter_mut().zip(&sim.mig) {
            a.sm_active_ratio = b.sm_active_ratio;
            a.profiling = b.profiling;
        }
    }
    if nv.xid_events.len() == sim.xid_events.len() {
        for (a, b) in nv.xid_events.iter_mut().zip(&sim.xid_events) {
            a.timestamp_ms = b.timestamp_ms;
        }
    }
}

/// Whether the NVML path should have GPM values for GPU `i` in a sample that follows `prev`.
pub fn gpm_expected(prev: Option<&NodeSample>, i: usize) -> bool {
    prev.and_then(|p| p.gpus.get(i))
        .is_some_and(|g| matches!(g.status, GpuStatus::Ok | GpuStatus::Degraded))
}

/// Assert that an NVML-path node sample equals the simulator's, up to the documented differences.
pub fn assert_equivalent(
    nv: &NodeSample,
    sim: &NodeSample,
    prev_nv: Option<&NodeSample>,
    context: &str,
) {
    let mut nv = nv.clone();
    nv.timestamp_ms = sim.timestamp_ms;
    assert_eq!(nv.gpus.len(), sim.gpus.len(), "{context}: GPU count");
    for (i, (a, b)) in nv.gpus.iter_mut().zip(&sim.gpus).enumerate() {
        normalise_gpu(a, b, gpm_expected(prev_nv, i));
    }
    assert_eq!(&nv, sim, "{context}");
}
