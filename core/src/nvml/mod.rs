//! The NVML backend: [`NvmlBackend`], a [`GpuBackend`] over nvml-wrapper 0.13, with raw calls
//! (see `raw`) where the crate has gaps.
//!
//! What it does:
//! - Loads NVML at run time (`libnvidia-ml.so.1`, or any path, e.g. the fake library in
//!   `tests/fake-nvml`). No driver → [`DeviceError::LibraryNotFound`] with a hint to use
//!   `--backend sim`; never a panic.
//! - [`GpuBackend::inventory`]: identity, power limit, MIG mode and MIG instances (GPU/compute
//!   instance id, profile id and name, placement) of every GPU.
//! - [`GpuBackend::sample`]: one snapshot of every GPU: utilisation, memory, power, energy,
//!   temperature, clocks, clock-event (throttle) reason bits, volatile ECC totals, row remapping,
//!   PCIe throughput, processes (with per-process SM utilisation), MIG instance memory, GPM SM
//!   activity/occupancy (Hopper+, per GPU and per GPU instance) and XID events.
//! - Values come in base units (W, J, Hz, bytes, ratios 0–1).
//!
//! Rules (the architecture invariants of [`crate::model`]):
//! - NotSupported → the value is `None`, never 0, and no error.
//! - A function missing from the loaded library (old driver) → `None`, one warning in the log,
//!   and the name in [`NvmlBackend::missing_functions`]; never a panic, never an error status.
//! - Any other error on a field → `None`, a [`FieldError`] named after the simulator's
//!   [`Field`] (`power`, `gpm`, ...; MIG enumeration failures count as `mig_memory`, and a failed
//!   UUID read, reported with the last UUID seen, as `uuid`) and status `Degraded`.
//! - `GpuIsLost` from any call of a GPU → status `Lost`, values absent. A failed handle → status
//!   `Error`. One GPU's failure never drops the others.
//! - Node-level failures (`nvmlDeviceGetCount_v2` fails, or every GPU is `Uninitialized` /
//!   `DriverNotLoaded`) → `Err(DeviceError::Nvml)`, so the sampler re-initialises.
//!
//! What it does not do:
//! - No clock or power-limit writes. The MIG write side (MIG mode, GPU/compute instance
//!   create/destroy) is [`crate::mig::control::MigControl`], implemented in `control.rs`; it is
//!   used only by the one-shot `tessera mig apply`, never by the sampler.
//! - GPM needs two samples: the first sample of a GPU (and the first after it was lost) has no
//!   SM activity/occupancy. Samples are kept across calls, so there is no sleep inside `sample`.
//! - NVML events carry no time: an XID is stamped with the time of the sample that drained it.
//! - Per-process utilisation is what NVML reports since the previous read; a process with no
//!   reading in that window has `sm_ratio: None`. The energy counter and per-process utilisation
//!   (the two slow calls) are read when asked ([`GpuBackend::sample_with`] with
//!   [`SlowReads::Read`]); other samples carry their last reading. A process that exits between
//!   two reads loses its readings since the last read (they can no longer be given to a listed
//!   process), so its last interval's SM figures are unknown.
//! - Device handles are not kept across calls (they borrow the `Nvml`); they are looked up by
//!   index at every sample, which NVML makes cheap.
//!
//! [`FieldError`]: crate::model::FieldError
//! [`Field`]: crate::model::Field

mod control;
mod errors;
mod inventory;
mod profiles;
mod raw;
mod sample;
mod trace;
mod xid;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::nvmlDevice_t;

pub use errors::error_kind;
pub use raw::GpuInstanceProfile;
pub use trace::ENV as TRACE_ENV;

use crate::device::{DeviceError, GpuBackend, SlowReads};
use crate::mig;
use crate::model::{GpuInfo, GpuSample, GpuStatus, Inventory, NodeSample, Placement};
use errors::{Lost, call_error, init_error, note_missing};
use inventory::{gpu_info, inv};
use sample::read_gpu;
use xid::{XidRegistration, drain_xids, register_xid};

/// Default library name (what nvml-wrapper loads without a path).
const DEFAULT_LIB: &str = "libnvidia-ml.so.1";
/// Length passed to `nvmlSystemGetProcessName`.
const PROCESS_NAME_LEN: usize = 64;

/// Host name of this machine (the inventory's node name unless overridden).
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is a writable buffer of the length passed; gethostname NUL-terminates on
    // success when the name fits, and the last byte stays 0 because we pass len - 1.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
        if !name.is_empty() {
            return name;
        }
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// What the backend remembers about one GPU between samples.
#[derive(Debug, Default)]
struct GpuState {
    /// Last UUID read (reported for a GPU whose handle fails or is lost).
    uuid: Option<String>,
    xid: XidRegistration,
    /// Timestamp (µs) of the newest per-process utilisation sample seen.
    process_last_seen_us: u64,
    /// The energy counter (J) and the newest SM utilisation per pid at the last read of the slow
    /// counters, reported by samples that carry them ([`crate::device::SlowReads`]); `None`
    /// before the first read and after the GPU was lost.
    carried: Option<(Option<f64>, BTreeMap<u32, f64>)>,
    /// Previous GPM sample of the whole GPU.
    gpm: Option<raw::Gpm>,
    /// Previous GPM sample of each GPU instance, by GPU instance id.
    mig_gpm: BTreeMap<u32, raw::Gpm>,
}

impl GpuState {
    /// Forget what depends on the GPU staying up (after it was lost).
    fn reset(&mut self, nvml: &Nvml) {
        self.process_last_seen_us = 0;
        self.carried = None;
        if let Some(s) = self.gpm.take() {
            raw::gpm_free(nvml, s);
        }
        for (_, s) in std::mem::take(&mut self.mig_gpm) {
            raw::gpm_free(nvml, s);
        }
        if self.xid == XidRegistration::Registered {
            // A GPU that fell off the bus must be registered again once it is back.
            self.xid = XidRegistration::Pending;
        }
    }
}

/// The read side through NVML (`lib_path`: a libnvidia-ml.so instead of the system's): the
/// opener [`crate::backend::BackendSpec`] calls, so no other module names [`NvmlBackend`].
pub fn open_reader(lib_path: Option<&Path>) -> Result<Box<dyn GpuBackend>, DeviceError> {
    Ok(Box::new(NvmlBackend::new(lib_path)?))
}

/// The MIG write side through NVML, reporting `node_name` (default: the host name) as the node.
pub fn open_control(
    lib_path: Option<&Path>,
    node_name: Option<&str>,
) -> Result<Box<dyn crate::mig::control::MigControl>, DeviceError> {
    let mut nvml = NvmlBackend::new(lib_path)?;
    if let Some(n) = node_name {
        nvml.set_node_name(n);
    }
    Ok(Box::new(nvml))
}

/// The GPUs' MIG profile tables through NVML.
pub fn open_profile_reader(
    lib_path: Option<&Path>,
) -> Result<Box<dyn crate::mig::profile_reader::ProfileReader>, DeviceError> {
    Ok(Box::new(NvmlBackend::new(lib_path)?))
}

/// The NVML backend. See the module docs for what it reads and how failures are reported.
pub struct NvmlBackend {
    nvml: Nvml,
    node: String,
    /// The event set for XID events (`None` when the library cannot create one).
    events: Option<raw::EventSet>,
    gpus: Vec<GpuState>,
    /// Functions found missing from the loaded library.
    missing: BTreeSet<String>,
    /// The next sample's time, fixed by [`GpuBackend::stamp`].
    stamped: Option<i64>,
}

impl std::fmt::Debug for NvmlBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlBackend")
            .field("node", &self.node)
            .field("gpus", &self.gpus.len())
            .field("missing", &self.missing)
            .finish()
    }
}

impl NvmlBackend {
    /// Load NVML (`libnvidia-ml.so.1`, or `lib_path`) and initialise it.
    pub fn new(lib_path: Option<&Path>) -> Result<NvmlBackend, DeviceError> {
        let lib = lib_path.map_or_else(|| DEFAULT_LIB.to_string(), |p| p.display().to_string());
        trace::start_from_env();
        let nvml = trace::call_opaque("nvmlInit_v2", Some(&lib), || match lib_path {
            Some(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
            None => Nvml::init(),
        })
        .map_err(|e| init_error(&lib, e))?;
        if nvml.lib().nvmlShutdown.is_err() {
            // nvml-wrapper's `Drop for Nvml` calls nvmlShutdown through a method that panics when
            // the symbol is missing: never drop such an instance (this leaks one library handle).
            std::mem::forget(nvml);
            return Err(DeviceError::MissingSymbol {
                symbol: "nvmlShutdown".into(),
            });
        }
        let mut missing = BTreeSet::new();
        let events =
            match trace::call_opaque("nvmlEventSetCreate", None, || raw::event_set_create(&nvml)) {
                Ok(set) => Some(set),
                Err(NvmlError::NotSupported) => None,
                Err(NvmlError::FailedToLoadSymbol(detail)) => {
                    note_missing(&mut missing, &detail);
                    None
                }
                Err(e) => {
                    log::warn!("nvmlEventSetCreate failed ({e}); XID events will not be reported");
                    None
                }
            };
        let mut backend = NvmlBackend {
            nvml,
            node: hostname(),
            events,
            gpus: Vec::new(),
            missing,
            stamped: None,
        };
        // Remember UUIDs and register for XIDs now, so a GPU lost later still has its UUID.
        let nvml = &backend.nvml;
        if let Ok(count) = trace::call("nvmlDeviceGetCount_v2", None, || nvml.device_count()) {
            backend.grow(count);
            for i in 0..count {
                trace::set_gpu(Some(i), None);
                let nvml = &backend.nvml;
                if let Ok(dev) = trace::call_opaque("nvmlDeviceGetHandleByIndex_v2", None, || {
                    nvml.device_by_index(i)
                }) {
                    if let Ok(uuid) = trace::call("nvmlDeviceGetUUID", None, || dev.uuid()) {
                        backend.gpus[i as usize].uuid = Some(uuid);
                    }
                    register_xid(
                        backend.events.as_ref(),
                        &dev,
                        &mut backend.gpus[i as usize],
                        &mut backend.missing,
                    );
                }
            }
        }
        Ok(backend)
    }

    /// Report `name` as the inventory's node instead of the host name (tests, containers).
    pub fn set_node_name(&mut self, name: impl Into<String>) {
        self.node = name.into();
    }

    /// NVML functions found missing from the loaded library so far (values they give are absent).
    pub fn missing_functions(&self) -> Vec<String> {
        self.missing.iter().cloned().collect()
    }

    /// The underlying nvml-wrapper instance.
    pub fn nvml(&self) -> &Nvml {
        &self.nvml
    }

    fn grow(&mut self, count: u32) {
        while self.gpus.len() < count as usize {
            self.gpus.push(GpuState::default());
        }
    }

    fn device(&self, gpu: u32) -> Result<Device<'_>, DeviceError> {
        self.nvml
            .device_by_index(gpu)
            .map_err(|e| call_error("nvmlDeviceGetHandleByIndex_v2", e))
    }

    /// Legal placements of GPU instance profile `profile_id` (the id `nvidia-smi` shows, e.g. 9 =
    /// 3g, as NVML's `profileId` argument expects) on GPU `gpu`, via the raw
    /// `nvmlDeviceGetGpuInstancePossiblePlacements_v2` (the wrapper's version is broken in 0.13).
    /// For checking [`crate::mig`]'s tables against a real GPU.
    pub fn possible_placements(
        &self,
        gpu: u32,
        profile_id: u32,
    ) -> Result<Vec<Placement>, DeviceError> {
        let dev = self.device(gpu)?;
        trace::call(
            "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
            Some(&profile_id.to_string()),
            || raw::possible_placements(&dev, profile_id),
        )
        .map_err(|e| call_error("nvmlDeviceGetGpuInstancePossiblePlacements_v2", e))
    }

    /// The name NVML gives profile index `index` on GPU `gpu` (`MIG 1g.10gb`), via
    /// `nvmlDeviceGetGpuInstanceProfileInfoV`; `None` when the driver lacks that call or does not
    /// support it for this GPU.
    pub fn profile_name(&self, gpu: u32, index: u32) -> Result<Option<String>, DeviceError> {
        let dev = self.device(gpu)?;
        match trace::call(
            "nvmlDeviceGetGpuInstanceProfileInfoV",
            Some(&index.to_string()),
            || raw::profile_name(&dev, index),
        ) {
            Ok(name) => Ok(Some(name)),
            Err(NvmlError::FailedToLoadSymbol(_) | NvmlError::NotSupported) => Ok(None),
            Err(e) => Err(call_error("nvmlDeviceGetGpuInstanceProfileInfoV", e)),
        }
    }

    /// The GPU-instance profile table of GPU `gpu`: `nvmlDeviceGetGpuInstanceProfileInfo` for
    /// every profile index below [`mig::profile_index::COUNT`]; indices the GPU does not have
    /// (NotSupported / InvalidArgument) are skipped. Empty on GPUs without MIG.
    pub fn profile_table(&self, gpu: u32) -> Result<Vec<GpuInstanceProfile>, DeviceError> {
        let dev = self.device(gpu)?;
        let mut table = Vec::new();
        for index in 0..mig::profile_index::COUNT {
            match trace::call(
                "nvmlDeviceGetGpuInstanceProfileInfo",
                Some(&index.to_string()),
                || raw::profile_info(&dev, index),
            ) {
                Ok(p) => table.push(p),
                Err(NvmlError::NotSupported | NvmlError::InvalidArg | NvmlError::NotFound) => {}
                Err(e) => return Err(call_error("nvmlDeviceGetGpuInstanceProfileInfo", e)),
            }
        }
        Ok(table)
    }
}

impl GpuBackend for NvmlBackend {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn inventory(&mut self) -> Result<Inventory, DeviceError> {
        trace::set_gpu(None, None);
        let nvml = &self.nvml;
        let count = trace::call("nvmlDeviceGetCount_v2", None, || nvml.device_count())
            .map_err(|e| call_error("nvmlDeviceGetCount_v2", e))?;
        self.grow(count);
        let nvml = &self.nvml;
        let driver_version = inv(
            "driver version",
            0,
            trace::call("nvmlSystemGetDriverVersion", None, || {
                nvml.sys_driver_version()
            }),
            &mut self.missing,
        );
        let cuda_version = inv(
            "CUDA version",
            0,
            trace::call("nvmlSystemGetCudaDriverVersion_v2", None, || {
                nvml.sys_cuda_driver_version()
            }),
            &mut self.missing,
        )
        .map(|v| {
            format!(
                "{}.{}",
                nvml_wrapper::cuda_driver_version_major(v),
                nvml_wrapper::cuda_driver_version_minor(v)
            )
        });
        let mut gpus = Vec::with_capacity(count as usize);
        let mut driver_down = 0u32;
        for i in 0..count {
            let state = &mut self.gpus[i as usize];
            trace::set_gpu(Some(i), None);
            match trace::call_opaque("nvmlDeviceGetHandleByIndex_v2", None, || {
                nvml.device_by_index(i)
            }) {
                Ok(dev) => gpus.push(gpu_info(i, &dev, state, &mut self.missing)),
                Err(e) => {
                    if matches!(e, NvmlError::Uninitialized | NvmlError::DriverNotLoaded) {
                        driver_down += 1;
                        if driver_down == count {
                            return Err(call_error("nvmlDeviceGetHandleByIndex_v2", e));
                        }
                    }
                    log::warn!("GPU {i}: no handle ({e}); reported with its last known UUID only");
                    gpus.push(GpuInfo {
                        index: i,
                        minor_number: None,
                        uuid: state.uuid.clone().unwrap_or_default(),
                        name: String::new(),
                        pci_bus_id: String::new(),
                        memory_total_bytes: None,
                        power_limit_watts: None,
                        mig_mode: None,
                        mig_instances: Vec::new(),
                    });
                }
            }
        }
        Ok(Inventory {
            node: self.node.clone(),
            driver_version,
            cuda_version,
            gpus,
        })
    }

    fn stamp(&mut self) -> i64 {
        let t = self.stamped.unwrap_or_else(now_ms);
        self.stamped = Some(t);
        t
    }

    fn sample_with(&mut self, slow: SlowReads) -> Result<NodeSample, DeviceError> {
        let started = std::time::Instant::now();
        trace::set_gpu(None, None);
        let nvml = &self.nvml;
        let count = trace::call("nvmlDeviceGetCount_v2", None, || nvml.device_count())
            .map_err(|e| call_error("nvmlDeviceGetCount_v2", e))?;
        self.grow(count);
        let timestamp_ms = self.stamped.take().unwrap_or_else(now_ms);
        let nvml = &self.nvml;
        let devices: Vec<Result<Device<'_>, NvmlError>> = (0..count)
            .map(|i| {
                trace::set_gpu(Some(i), None);
                trace::call_opaque("nvmlDeviceGetHandleByIndex_v2", None, || {
                    nvml.device_by_index(i)
                })
            })
            .collect();
        for (i, (dev, state)) in devices.iter().zip(self.gpus.iter_mut()).enumerate() {
            if let Ok(dev) = dev {
                trace::set_gpu(Some(i as u32), None);
                register_xid(self.events.as_ref(), dev, state, &mut self.missing);
            }
        }
        let handles: Vec<Option<nvmlDevice_t>> = devices
            .iter()
            // SAFETY: the handles are compared only, while `devices` is alive.
            .map(|d| d.as_ref().ok().map(|d| unsafe { d.handle() }))
            .collect();
        trace::set_gpu(None, None);
        let mut xids = drain_xids(
            nvml,
            self.events.as_ref(),
            &handles,
            timestamp_ms,
            &mut self.missing,
        );

        let mut gpus = Vec::with_capacity(count as usize);
        let mut driver_down = 0usize;
        let mut last_driver_error = "uninitialized";
        for (i, dev) in devices.into_iter().enumerate() {
            let index = i as u32;
            let state = &mut self.gpus[i];
            let sample = match dev {
                Ok(dev) => {
                    let (sample, down) = read_gpu(
                        nvml,
                        index,
                        &dev,
                        state,
                        xids.remove(&i).unwrap_or_default(),
                        &mut self.missing,
                        slow,
                    );
                    if down {
                        driver_down += 1;
                    }
                    match sample {
                        Ok(s) => s,
                        Err(Lost) => {
                            state.reset(nvml);
                            GpuSample::empty(
                                index,
                                state.uuid.clone().unwrap_or_default(),
                                GpuStatus::Lost,
                            )
                        }
                    }
                }
                Err(NvmlError::GpuLost) => {
                    state.reset(nvml);
                    GpuSample::empty(
                        index,
                        state.uuid.clone().unwrap_or_default(),
                        GpuStatus::Lost,
                    )
                }
                Err(e) => {
                    if matches!(e, NvmlError::Uninitialized | NvmlError::DriverNotLoaded) {
                        driver_down += 1;
                        last_driver_error = error_kind(&e);
                    }
                    GpuSample::empty(
                        index,
                        state.uuid.clone().unwrap_or_default(),
                        GpuStatus::Error {
                            message: format!("nvmlDeviceGetHandleByIndex_v2 failed: {e}"),
                        },
                    )
                }
            };
            gpus.push(sample);
        }
        every_handle_failed(count, driver_down, last_driver_error)?;
        trace::sample_done(started, gpus.len(), timestamp_ms);
        Ok(NodeSample { timestamp_ms, gpus })
    }
}

/// A node-level error when every one of `count` GPUs' handles failed because the driver is not
/// there (`driver_down` of them; `last` the error's kind).
fn every_handle_failed(count: u32, driver_down: usize, last: &str) -> Result<(), DeviceError> {
    if count > 0 && driver_down == count as usize {
        return Err(DeviceError::Nvml {
            call: "nvmlDeviceGetHandleByIndex_v2".into(),
            kind: last.into(),
        });
    }
    Ok(())
}

impl Drop for NvmlBackend {
    fn drop(&mut self) {
        for state in &mut self.gpus {
            if let Some(s) = state.gpm.take() {
                raw::gpm_free(&self.nvml, s);
            }
            for (_, s) in std::mem::take(&mut state.mig_gpm) {
                raw::gpm_free(&self.nvml, s);
            }
        }
        if let Some(set) = self.events.take() {
            let _ = raw::event_set_free(&self.nvml, set);
        }
        // `self.nvml` drops after this, calling nvmlShutdown.
    }
}

#[cfg(test)]
mod tests {
    use super::errors::missing_symbol_name;
    use super::*;

    #[test]
    fn missing_symbol_names_are_extracted() {
        assert_eq!(
            missing_symbol_name("/x/libnvidia_ml_old.so: undefined symbol: nvmlGpmSampleGet"),
            "nvmlGpmSampleGet"
        );
        assert_eq!(missing_symbol_name("something else"), "something else");
    }

    #[test]
    fn error_kinds_match_the_simulator_tokens() {
        for (e, k) in [
            (NvmlError::Unknown, "unknown"),
            (NvmlError::Timeout, "timeout"),
            (NvmlError::NoPermission, "no_permission"),
            (NvmlError::GpuLost, "gpu_lost"),
            (NvmlError::InsufficientSize(None), "insufficient_size"),
        ] {
            assert_eq!(error_kind(&e), k);
            assert!(crate::model::ERROR_KINDS.contains(&k));
        }
    }

    #[test]
    fn no_library_is_a_clear_error() {
        let err = NvmlBackend::new(Some(Path::new("/nonexistent/libnvidia-ml.so.1"))).unwrap_err();
        assert!(
            matches!(err, DeviceError::LibraryNotFound { .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("NVML not available") && text.contains("--backend sim"),
            "{text}"
        );
        assert!(
            text.contains("/nonexistent/libnvidia-ml.so.1 not found"),
            "{text}"
        );
    }
}
