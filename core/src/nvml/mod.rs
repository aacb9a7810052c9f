//! The NVML backend: [`NvmlBackend`], a [`GpuBackend`] over nvml-wrapper 0.13, with raw calls
//! (see [`raw`]) where the crate has gaps.
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
//! - Per-process utilisation is what NVML reports since the previous sample; a process with no
//!   sample in that window has `sm_ratio: None`.
//! - Device handles are not kept across calls (they borrow the `Nvml`); they are looked up by
//!   index at every sample, which NVML makes cheap.

mod control;
mod raw;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    NVML_DEVICE_MIG_ENABLE, nvmlDevice_t, nvmlEventTypeXidCriticalError,
};

pub use raw::GpuInstanceProfile;

use crate::device::{DeviceError, GpuBackend};
use crate::mig;
use crate::model::Field;
use crate::model::{
    FieldError, GpuInfo, GpuSample, GpuStatus, Inventory, MigInstanceInfo, MigMode, MigSample,
    NodeSample, Placement, ProcessSample, XidEvent,
};

/// Default library name (what nvml-wrapper loads without a path).
const DEFAULT_LIB: &str = "libnvidia-ml.so.1";
/// Length passed to `nvmlSystemGetProcessName`.
const PROCESS_NAME_LEN: usize = 64;
/// Most events drained from the event set in one sample.
const MAX_EVENTS_PER_SAMPLE: usize = 1024;

/// The short, stable token of an NVML error, as used in [`FieldError::kind`].
pub fn error_kind(e: &NvmlError) -> &'static str {
    match e {
        NvmlError::Unknown => "unknown",
        NvmlError::Timeout => "timeout",
        NvmlError::NoPermission => "no_permission",
        NvmlError::GpuLost => "gpu_lost",
        NvmlError::InsufficientSize(_) => "insufficient_size",
        NvmlError::Uninitialized => "uninitialized",
        NvmlError::InvalidArg => "invalid_argument",
        NvmlError::NotSupported => "not_supported",
        NvmlError::NotFound => "not_found",
        NvmlError::InsufficientPower => "insufficient_power",
        NvmlError::DriverNotLoaded => "driver_not_loaded",
        NvmlError::IrqIssue => "irq_issue",
        NvmlError::LibraryNotFound => "library_not_found",
        NvmlError::FunctionNotFound => "function_not_found",
        NvmlError::CorruptedInfoROM => "corrupted_inforom",
        NvmlError::ResetRequired => "reset_required",
        NvmlError::OperatingSystem => "operating_system",
        NvmlError::LibRmVersionMismatch => "lib_rm_version_mismatch",
        NvmlError::InUse => "in_use",
        NvmlError::InsufficientMemory => "insufficient_memory",
        NvmlError::NoData => "no_data",
        NvmlError::FailedToLoadSymbol(_) => "missing_symbol",
        NvmlError::LibloadingError(_) => "library_not_found",
        NvmlError::Utf8Error(_) | NvmlError::NulError(_) => "bad_string",
        _ => "unexpected",
    }
}

/// The symbol named in a `FailedToLoadSymbol` message (libloading says `...: undefined symbol: X`).
fn missing_symbol_name(detail: &str) -> String {
    detail
        .rsplit("undefined symbol: ")
        .next()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| detail.to_string())
}

/// Map a failed call that has no GPU to blame to a [`DeviceError`].
fn call_error(call: &str, e: NvmlError) -> DeviceError {
    match e {
        NvmlError::FailedToLoadSymbol(detail) => DeviceError::MissingSymbol {
            symbol: missing_symbol_name(&detail),
        },
        NvmlError::DriverNotLoaded => DeviceError::DriverNotLoaded {
            detail: format!("{call} returned NVML_ERROR_DRIVER_NOT_LOADED"),
        },
        e => DeviceError::Nvml {
            call: call.to_string(),
            kind: error_kind(&e).to_string(),
        },
    }
}

/// Map an `Nvml::init` failure to a [`DeviceError`].
fn init_error(lib: &str, e: NvmlError) -> DeviceError {
    match e {
        NvmlError::LibloadingError(err) => {
            let text = err.to_string();
            let detail = if text.contains("No such file") || text.contains("cannot open") {
                format!("{lib} not found")
            } else {
                format!("{lib} could not be loaded ({text})")
            };
            DeviceError::LibraryNotFound { detail }
        }
        NvmlError::DriverNotLoaded => DeviceError::DriverNotLoaded {
            detail: "nvmlInit_v2 returned NVML_ERROR_DRIVER_NOT_LOADED".into(),
        },
        e => call_error("nvmlInit_v2", e),
    }
}

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

/// XID registration state of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum XidRegistration {
    /// Not registered yet (or the last attempt failed transiently): try again next sample.
    #[default]
    Pending,
    Registered,
    /// The GPU (or the library) cannot deliver XID events.
    Unavailable,
}

/// What the backend remembers about one GPU between samples.
#[derive(Debug, Default)]
struct GpuState {
    /// Last UUID read (reported for a GPU whose handle fails or is lost).
    uuid: Option<String>,
    xid: XidRegistration,
    /// Timestamp (µs) of the newest per-process utilisation sample seen.
    process_last_seen_us: u64,
    /// Previous GPM sample of the whole GPU.
    gpm: Option<raw::Gpm>,
    /// Previous GPM sample of each GPU instance, by GPU instance id.
    mig_gpm: BTreeMap<u32, raw::Gpm>,
}

impl GpuState {
    /// Forget what depends on the GPU staying up (after it was lost).
    fn reset(&mut self, nvml: &Nvml) {
        self.process_last_seen_us = 0;
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

/// The GPU was lost (`NVML_ERROR_GPU_IS_LOST`) during a read.
struct Lost;

/// Collects the outcome of one GPU's reads.
struct Reads<'a> {
    errors: Vec<(String, String)>,
    missing: &'a mut BTreeSet<String>,
    driver_down: bool,
}

impl Reads<'_> {
    /// Apply the rules to one call's result: NotSupported → `None`; missing symbol → `None` and a
    /// warning; GpuIsLost → `Err(Lost)`; anything else → `None` and a field error.
    fn take<T>(&mut self, field: &str, r: Result<T, NvmlError>) -> Result<Option<T>, Lost> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(NvmlError::NotSupported) => Ok(None),
            Err(NvmlError::GpuLost) => Err(Lost),
            Err(NvmlError::FailedToLoadSymbol(detail)) => {
                note_missing(self.missing, &detail);
                Ok(None)
            }
            Err(e) => {
                if matches!(e, NvmlError::Uninitialized | NvmlError::DriverNotLoaded) {
                    self.driver_down = true;
                }
                self.errors
                    .push((field.to_string(), error_kind(&e).to_string()));
                Ok(None)
            }
        }
    }

    /// The field errors, one per field, in the simulator's field order.
    fn into_errors(self) -> Vec<FieldError> {
        let mut seen = BTreeSet::new();
        let mut errors: Vec<FieldError> = self
            .errors
            .into_iter()
            .filter(|(f, _)| seen.insert(f.clone()))
            .map(|(field, kind)| FieldError { field, kind })
            .collect();
        errors.sort_by_key(|e| Field::parse(&e.field));
        // `None` (a name that is no simulator field, e.g. `uuid`) sorts first; put it last.
        errors.sort_by_key(|e| Field::parse(&e.field).is_none());
        errors
    }
}

fn note_missing(missing: &mut BTreeSet<String>, detail: &str) {
    let name = missing_symbol_name(detail);
    if missing.insert(name.clone()) {
        log::warn!(
            "NVML function {name} is missing from the loaded library (driver too old?); its values are absent"
        );
    }
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
        let nvml = match lib_path {
            Some(p) => Nvml::builder().lib_path(p.as_os_str()).init(),
            None => Nvml::init(),
        }
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
        let events = match raw::event_set_create(&nvml) {
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
        };
        // Remember UUIDs and register for XIDs now, so a GPU lost later still has its UUID.
        if let Ok(count) = backend.nvml.device_count() {
            backend.grow(count);
            for i in 0..count {
                if let Ok(dev) = backend.nvml.device_by_index(i) {
                    if let Ok(uuid) = dev.uuid() {
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
        raw::possible_placements(&dev, profile_id)
            .map_err(|e| call_error("nvmlDeviceGetGpuInstancePossiblePlacements_v2", e))
    }

    /// The name NVML gives profile index `index` on GPU `gpu` (`MIG 1g.10gb`), via
    /// `nvmlDeviceGetGpuInstanceProfileInfoV`; `None` when the driver lacks that call or does not
    /// support it for this GPU.
    pub fn profile_name(&self, gpu: u32, index: u32) -> Result<Option<String>, DeviceError> {
        let dev = self.device(gpu)?;
        match raw::profile_name(&dev, index) {
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
            match raw::profile_info(&dev, index) {
                Ok(p) => table.push(p),
                Err(NvmlError::NotSupported | NvmlError::InvalidArg | NvmlError::NotFound) => {}
                Err(e) => return Err(call_error("nvmlDeviceGetGpuInstanceProfileInfo", e)),
            }
        }
        Ok(table)
    }
}

/// Register a GPU for XID events if it is not yet.
fn register_xid(
    events: Option<&raw::EventSet>,
    dev: &Device<'_>,
    state: &mut GpuState,
    missing: &mut BTreeSet<String>,
) {
    let Some(set) = events else {
        state.xid = XidRegistration::Unavailable;
        return;
    };
    if state.xid != XidRegistration::Pending {
        return;
    }
    state.xid = match raw::register_events(dev, nvmlEventTypeXidCriticalError as u64, set) {
        Ok(()) => XidRegistration::Registered,
        Err(NvmlError::NotSupported) => XidRegistration::Unavailable,
        Err(NvmlError::FailedToLoadSymbol(detail)) => {
            note_missing(missing, &detail);
            XidRegistration::Unavailable
        }
        Err(e) => {
            log::debug!("nvmlDeviceRegisterEvents failed ({e}); retrying next sample");
            XidRegistration::Pending
        }
    };
}

/// Drain every queued event (wait 0 ms until Timeout) and attribute XIDs to GPU indices.
fn drain_xids(
    nvml: &Nvml,
    events: Option<&raw::EventSet>,
    handles: &[Option<nvmlDevice_t>],
    timestamp_ms: i64,
    missing: &mut BTreeSet<String>,
) -> BTreeMap<usize, Vec<XidEvent>> {
    let mut out: BTreeMap<usize, Vec<XidEvent>> = BTreeMap::new();
    let Some(set) = events else {
        return out;
    };
    for _ in 0..MAX_EVENTS_PER_SAMPLE {
        match raw::event_wait(nvml, set, 0) {
            Ok(ev) => {
                if ev.event_type & nvmlEventTypeXidCriticalError as u64 == 0 {
                    continue;
                }
                match handles.iter().position(|h| *h == Some(ev.device)) {
                    Some(i) => out.entry(i).or_default().push(XidEvent {
                        xid: ev.data,
                        timestamp_ms,
                        gpu_instance_id: (ev.gpu_instance_id != raw::NO_ID)
                            .then_some(ev.gpu_instance_id),
                    }),
                    None => log::warn!(
                        "XID {} from a device handle of no known GPU; dropped",
                        ev.data
                    ),
                }
            }
            Err(NvmlError::Timeout) => break,
            Err(NvmlError::FailedToLoadSymbol(detail)) => {
                note_missing(missing, &detail);
                break;
            }
            Err(e) => {
                log::debug!("nvmlEventSetWait_v2 failed ({e}); events left for the next sample");
                break;
            }
        }
    }
    out
}

/// One GPM step: take a new sample, compute `ids` against the previous one (if any), keep the
/// new one. Values are percentages turned into ratios.
fn gpm_step(
    nvml: &Nvml,
    reads: &mut Reads<'_>,
    dev: &Device<'_>,
    gpu_instance: Option<u32>,
    prev: &mut Option<raw::Gpm>,
    ids: &[GpmMetricId],
) -> Result<Vec<Option<f64>>, Lost> {
    let none = vec![None; ids.len()];
    let Some(new) = reads.take(Field::Gpm.as_str(), raw::gpm_sample(dev, gpu_instance))? else {
        return Ok(none);
    };
    let Some(old) = prev.replace(new) else {
        return Ok(none);
    };
    let result = match prev.as_ref() {
        Some(new) => raw::gpm_metrics(nvml, &old, new, ids),
        None => Err(NvmlError::Unknown),
    };
    raw::gpm_free(nvml, old);
    let Some(values) = reads.take(Field::Gpm.as_str(), result)? else {
        return Ok(none);
    };
    let mut out = Vec::with_capacity(values.len());
    for v in values {
        out.push(reads.take(Field::Gpm.as_str(), v)?.map(|pct| pct / 100.0));
    }
    Ok(out)
}

/// Everything read about one MIG device in a sample.
struct MigRead {
    gpu_instance_id: u32,
    compute_instance_id: u32,
    uuid: String,
    memory_used_bytes: Option<u64>,
    memory_total_bytes: Option<u64>,
}

/// Enumerate the MIG devices of a GPU with MIG enabled: every index below the *maximum* count,
/// skipping empty slots (NotFound).
fn read_mig_devices(reads: &mut Reads<'_>, dev: &Device<'_>) -> Result<Vec<MigRead>, Lost> {
    let field = Field::MigMemory.as_str();
    let mut out = Vec::new();
    let Some(max) = reads.take(field, dev.mig_device_count())? else {
        return Ok(out);
    };
    for idx in 0..max {
        let mig_dev = match dev.mig_device_by_index(idx) {
            Err(NvmlError::NotFound) => continue,
            r => match reads.take(field, r)? {
                Some(d) => d,
                None => continue,
            },
        };
        let Some(gi) = reads.take(field, raw::gpu_instance_id(&mig_dev))? else {
            continue;
        };
        let Some(ci) = reads.take(field, raw::compute_instance_id(&mig_dev))? else {
            continue;
        };
        let uuid = reads.take(field, mig_dev.uuid())?.unwrap_or_default();
        let mem = reads.take(field, mig_dev.memory_info())?;
        out.push(MigRead {
            gpu_instance_id: gi,
            compute_instance_id: ci,
            uuid,
            memory_used_bytes: mem.as_ref().map(|m| m.used),
            memory_total_bytes: mem.as_ref().map(|m| m.total),
        });
    }
    out.sort_by_key(|m| (m.gpu_instance_id, m.compute_instance_id));
    Ok(out)
}

/// Whether MIG is currently enabled (`None` if the GPU has no MIG or the read failed).
fn mig_mode(reads: &mut Reads<'_>, dev: &Device<'_>) -> Result<Option<MigMode>, Lost> {
    Ok(reads
        .take(Field::MigMemory.as_str(), dev.mig_mode())?
        .map(|m| MigMode {
            current: m.current == NVML_DEVICE_MIG_ENABLE,
            pending: m.pending == NVML_DEVICE_MIG_ENABLE,
        }))
}

/// Read every value of one GPU.
fn read_gpu(
    nvml: &Nvml,
    index: u32,
    dev: &Device<'_>,
    state: &mut GpuState,
    xids: Vec<XidEvent>,
    missing: &mut BTreeSet<String>,
) -> (Result<GpuSample, Lost>, bool) {
    let mut reads = Reads {
        errors: Vec::new(),
        missing,
        driver_down: false,
    };
    let sample = read_gpu_values(nvml, index, dev, state, xids, &mut reads);
    let driver_down = reads.driver_down;
    let sample = sample.map(|mut s| {
        s.errors = reads.into_errors();
        if !s.errors.is_empty() {
            s.status = GpuStatus::Degraded;
        }
        s
    });
    (sample, driver_down)
}

fn read_gpu_values(
    nvml: &Nvml,
    index: u32,
    dev: &Device<'_>,
    state: &mut GpuState,
    xids: Vec<XidEvent>,
    r: &mut Reads<'_>,
) -> Result<GpuSample, Lost> {
    let uuid = match r.take("uuid", dev.uuid())? {
        Some(u) => {
            state.uuid = Some(u.clone());
            u
        }
        None => state.uuid.clone().unwrap_or_default(),
    };
    let mut s = GpuSample::empty(index, uuid, GpuStatus::Ok);

    if let Some(u) = r.take(Field::Utilization.as_str(), dev.utilization_rates())? {
        s.busy_ratio = Some(u.gpu as f64 / 100.0);
        s.memory_controller_ratio = Some(u.memory as f64 / 100.0);
    }
    if let Some(m) = r.take(Field::Memory.as_str(), dev.memory_info())? {
        s.memory_used_bytes = Some(m.used);
        s.memory_total_bytes = Some(m.total);
    }
    s.power_watts = r
        .take(Field::Power.as_str(), dev.power_usage())?
        .map(|mw| mw as f64 / 1000.0);
    s.energy_joules = r
        .take(Field::Energy.as_str(), dev.total_energy_consumption())?
        .map(|mj| mj as f64 / 1000.0);
    s.temperature_celsius = r
        .take(
            Field::Temperature.as_str(),
            dev.temperature(TemperatureSensor::Gpu),
        )?
        .map(f64::from);
    let clocks = Field::Clocks.as_str();
    s.sm_clock_hertz = r
        .take(clocks, dev.clock_info(Clock::SM))?
        .map(|mhz| mhz as f64 * 1e6);
    s.memory_clock_hertz = r
        .take(clocks, dev.clock_info(Clock::Memory))?
        .map(|mhz| mhz as f64 * 1e6);
    s.throttle_reasons = r.take(Field::Throttle.as_str(), raw::clocks_event_reasons(dev))?;
    let ecc = Field::Ecc.as_str();
    s.ecc_corrected_total = r.take(
        ecc,
        dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
    )?;
    s.ecc_uncorrected_total = r.take(
        ecc,
        dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
    )?;
    s.remapped_rows = r.take(Field::RowRemap.as_str(), raw::remapped_rows(dev))?;
    let pcie = Field::Pcie.as_str();
    s.pcie_tx_bytes_per_second = r
        .take(pcie, dev.pcie_throughput(PcieUtilCounter::Send))?
        .map(|kb| kb as f64 * 1024.0);
    s.pcie_rx_bytes_per_second = r
        .take(pcie, dev.pcie_throughput(PcieUtilCounter::Receive))?
        .map(|kb| kb as f64 * 1024.0);

    // Processes and their SM utilisation since the previous sample.
    let processes = r.take(Field::Processes.as_str(), dev.running_compute_processes())?;
    let utilisation = match dev.process_utilization_stats(state.process_last_seen_us) {
        // No sample newer than the last one seen.
        Err(NvmlError::NotFound) => Some(Vec::new()),
        other => r.take(Field::ProcessUtilization.as_str(), other)?,
    };
    let mut sm_by_pid: BTreeMap<u32, (u64, u32)> = BTreeMap::new();
    for u in utilisation.iter().flatten() {
        state.process_last_seen_us = state.process_last_seen_us.max(u.timestamp);
        let entry = sm_by_pid.entry(u.pid).or_insert((u.timestamp, u.sm_util));
        if u.timestamp >= entry.0 {
            *entry = (u.timestamp, u.sm_util);
        }
    }
    for p in processes.into_iter().flatten() {
        let name = match nvml.sys_process_name(p.pid, PROCESS_NAME_LEN) {
            Ok(n) => Some(n),
            Err(NvmlError::FailedToLoadSymbol(detail)) => {
                note_missing(r.missing, &detail);
                None
            }
            Err(_) => None,
        };
        s.processes.push(ProcessSample {
            pid: p.pid,
            name,
            used_memory_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            },
            sm_ratio: sm_by_pid.get(&p.pid).map(|(_, sm)| *sm as f64 / 100.0),
            gpu_instance_id: p.gpu_instance_id,
            compute_instance_id: p.compute_instance_id,
        });
    }

    // MIG instances.
    let mig_on = mig_mode(r, dev)?.is_some_and(|m| m.current);
    let migs = if mig_on {
        read_mig_devices(r, dev)?
    } else {
        Vec::new()
    };

    // GPM: SM activity and occupancy of the GPU and SM activity of each GPU instance.
    let gpm_supported = r
        .take(Field::Gpm.as_str(), dev.gpm_support())?
        .unwrap_or(false);
    let mut mig_sm: BTreeMap<u32, Option<f64>> = BTreeMap::new();
    if gpm_supported {
        let v = gpm_step(
            nvml,
            r,
            dev,
            None,
            &mut state.gpm,
            &[GpmMetricId::SmUtil, GpmMetricId::SmOccupancy],
        )?;
        s.sm_active_ratio = v.first().copied().flatten();
        s.sm_occupancy_ratio = v.get(1).copied().flatten();
        let mut kept = BTreeMap::new();
        let mut lost = false;
        for m in &migs {
            let mut prev = state.mig_gpm.remove(&m.gpu_instance_id);
            let v = gpm_step(
                nvml,
                r,
                dev,
                Some(m.gpu_instance_id),
                &mut prev,
                &[GpmMetricId::SmUtil],
            );
            if let Some(p) = prev {
                kept.insert(m.gpu_instance_id, p);
            }
            match v {
                Ok(v) => {
                    mig_sm.insert(m.gpu_instance_id, v.first().copied().flatten());
                }
                Err(Lost) => {
                    lost = true;
                    break;
                }
            }
        }
        // Free samples of GPU instances that no longer exist (the caller frees the rest if lost).
        for (_, old) in std::mem::replace(&mut state.mig_gpm, kept) {
            raw::gpm_free(nvml, old);
        }
        if lost {
            return Err(Lost);
        }
    } else {
        if let Some(old) = state.gpm.take() {
            raw::gpm_free(nvml, old);
        }
        for (_, old) in std::mem::take(&mut state.mig_gpm) {
            raw::gpm_free(nvml, old);
        }
    }

    s.mig = migs
        .into_iter()
        .map(|m| MigSample {
            gpu_instance_id: m.gpu_instance_id,
            compute_instance_id: m.compute_instance_id,
            uuid: m.uuid,
            memory_used_bytes: m.memory_used_bytes,
            memory_total_bytes: m.memory_total_bytes,
            sm_active_ratio: mig_sm.get(&m.gpu_instance_id).copied().flatten(),
        })
        .collect();
    s.xid_events = xids;
    Ok(s)
}

/// Profile id, name and placement of a GPU instance.
fn mig_profile(
    parent: &Device<'_>,
    parent_name: &str,
    gi: u32,
) -> Result<(u32, String, Placement), NvmlError> {
    let (profile_id, placement) = raw::gpu_instance_info(parent, gi)?;
    let name = mig::model_by_nvml_name(parent_name)
        .and_then(|m| m.profile(profile_id))
        .map(|p| p.name.clone())
        .unwrap_or_else(|| format!("profile-{profile_id}"));
    Ok((profile_id, name, placement))
}

/// Log a failed inventory read and turn it into `None` (NotSupported and missing symbols are
/// expected and not logged as failures).
fn inv<T>(
    what: &str,
    index: u32,
    r: Result<T, NvmlError>,
    missing: &mut BTreeSet<String>,
) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(NvmlError::NotSupported) => None,
        Err(NvmlError::FailedToLoadSymbol(detail)) => {
            note_missing(missing, &detail);
            None
        }
        Err(e) => {
            log::warn!("GPU {index}: reading {what} failed: {e}");
            None
        }
    }
}

fn gpu_info(
    index: u32,
    dev: &Device<'_>,
    state: &mut GpuState,
    missing: &mut BTreeSet<String>,
) -> GpuInfo {
    if let Some(u) = inv("uuid", index, dev.uuid(), missing) {
        state.uuid = Some(u);
    }
    let name = inv("name", index, dev.name(), missing).unwrap_or_default();
    let pci_bus_id = inv("PCI info", index, dev.pci_info(), missing)
        .map(|p| p.bus_id)
        .unwrap_or_default();
    let memory_total_bytes = inv("memory", index, dev.memory_info(), missing).map(|m| m.total);
    let power_limit_watts =
        inv("power limit", index, dev.enforced_power_limit(), missing).map(|mw| mw as f64 / 1000.0);
    let mig_mode = inv("MIG mode", index, dev.mig_mode(), missing).map(|m| MigMode {
        current: m.current == NVML_DEVICE_MIG_ENABLE,
        pending: m.pending == NVML_DEVICE_MIG_ENABLE,
    });
    let mut mig_instances = Vec::new();
    if mig_mode.is_some_and(|m| m.current) {
        let max = inv("MIG device count", index, dev.mig_device_count(), missing).unwrap_or(0);
        for idx in 0..max {
            let mig_dev = match dev.mig_device_by_index(idx) {
                Err(NvmlError::NotFound) => continue,
                r => match inv("MIG device handle", index, r, missing) {
                    Some(d) => d,
                    None => continue,
                },
            };
            let Some(gi) = inv(
                "GPU instance id",
                index,
                raw::gpu_instance_id(&mig_dev),
                missing,
            ) else {
                continue;
            };
            let Some(ci) = inv(
                "compute instance id",
                index,
                raw::compute_instance_id(&mig_dev),
                missing,
            ) else {
                continue;
            };
            let Some((profile_id, profile_name, placement)) = inv(
                "GPU instance info",
                index,
                mig_profile(dev, &name, gi),
                missing,
            ) else {
                log::warn!(
                    "GPU {index}: MIG GPU instance {gi} left out of the inventory (no profile/placement)"
                );
                continue;
            };
            mig_instances.push(MigInstanceInfo {
                gpu_instance_id: gi,
                compute_instance_id: ci,
                profile_id,
                profile_name,
                placement,
                uuid: inv("MIG uuid", index, mig_dev.uuid(), missing).unwrap_or_default(),
                memory_total_bytes: inv("MIG memory", index, mig_dev.memory_info(), missing)
                    .map(|m| m.total),
            });
        }
        mig_instances.sort_by_key(|m| (m.gpu_instance_id, m.compute_instance_id));
    }
    GpuInfo {
        index,
        uuid: state.uuid.clone().unwrap_or_default(),
        name,
        pci_bus_id,
        memory_total_bytes,
        power_limit_watts,
        mig_mode,
        mig_instances,
    }
}

impl GpuBackend for NvmlBackend {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn inventory(&mut self) -> Result<Inventory, DeviceError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| call_error("nvmlDeviceGetCount_v2", e))?;
        self.grow(count);
        let nvml = &self.nvml;
        let driver_version = inv(
            "driver version",
            0,
            nvml.sys_driver_version(),
            &mut self.missing,
        );
        let cuda_version = inv(
            "CUDA version",
            0,
            nvml.sys_cuda_driver_version(),
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
            match nvml.device_by_index(i) {
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

    fn sample(&mut self) -> Result<NodeSample, DeviceError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| call_error("nvmlDeviceGetCount_v2", e))?;
        self.grow(count);
        let timestamp_ms = now_ms();
        let nvml = &self.nvml;
        let devices: Vec<Result<Device<'_>, NvmlError>> =
            (0..count).map(|i| nvml.device_by_index(i)).collect();
        for (dev, state) in devices.iter().zip(self.gpus.iter_mut()) {
            if let Ok(dev) = dev {
                register_xid(self.events.as_ref(), dev, state, &mut self.missing);
            }
        }
        let handles: Vec<Option<nvmlDevice_t>> = devices
            .iter()
            // SAFETY: the handles are compared only, while `devices` is alive.
            .map(|d| d.as_ref().ok().map(|d| unsafe { d.handle() }))
            .collect();
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
        if count > 0 && driver_down == count as usize {
            return Err(DeviceError::Nvml {
                call: "nvmlDeviceGetHandleByIndex_v2".into(),
                kind: last_driver_error.into(),
            });
        }
        Ok(NodeSample { timestamp_ms, gpus })
    }
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
