//! The fake driver's state: one simulated node ([`SimNode`]) on a virtual clock, the handles
//! handed out to callers, event sets, GPM samples and injected errors, behind one global mutex.
//!
//! This module holds no exported symbol, so that both libraries built from this source (the full
//! fake and the "old driver" one) share it without re-exporting each other's functions. It maps the
//! simulator's readings to NVML return codes:
//! - a `None` value → `NVML_ERROR_NOT_SUPPORTED`;
//! - a field in `reading.errors` → the matching error (`unknown`, `timeout`, `no_permission`,
//!   `gpu_lost`, `insufficient_size`);
//! - a lost GPU → `NVML_ERROR_GPU_IS_LOST` from every call on it (its handle included);
//! - a driver-level fault → `NVML_ERROR_UNKNOWN` from every call (`DRIVER_NOT_LOADED` from init).
//!
//! The reading at a virtual instant is computed once and cached, so every call of one sample sees
//! the same values; energy integrates as virtual time moves forward.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use nvml_wrapper_sys::bindings::*;
use tessera_core::mig::control::{ControlError, MigControl, MigNodeState};
use tessera_core::mig::{GpuModel, LayoutInstance};
use tessera_core::model::Field;
use tessera_core::model::MigMode;
use tessera_core::sim::control::SimMigControl;
use tessera_core::sim::node::SimGpu;
use tessera_core::sim::{GpuReading, NodeReading, Scenario, SimNode};

pub type Ret = nvmlReturn_t;

pub const SUCCESS: Ret = nvmlReturn_enum_NVML_SUCCESS;
pub const UNINITIALIZED: Ret = nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
pub const INVALID_ARGUMENT: Ret = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
pub const NOT_SUPPORTED: Ret = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
pub const NO_PERMISSION: Ret = nvmlReturn_enum_NVML_ERROR_NO_PERMISSION;
pub const NOT_FOUND: Ret = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
pub const INSUFFICIENT_SIZE: Ret = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
pub const DRIVER_NOT_LOADED: Ret = nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
pub const TIMEOUT: Ret = nvmlReturn_enum_NVML_ERROR_TIMEOUT;
pub const GPU_IS_LOST: Ret = nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST;
pub const VERSION_MISMATCH: Ret = nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
pub const UNKNOWN: Ret = nvmlReturn_enum_NVML_ERROR_UNKNOWN;
pub const IN_USE: Ret = nvmlReturn_enum_NVML_ERROR_IN_USE;
pub const INSUFFICIENT_RESOURCES: Ret = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;

/// NVML's "no id" value (`gpuInstanceId` of a process or event outside MIG).
pub const NO_ID: u32 = u32::MAX;
/// XID event type bit.
pub const XID_EVENT: u64 = nvmlEventTypeXidCriticalError as u64;

/// The NVML return code of a simulator error kind.
pub fn kind_to_ret(kind: &str) -> Ret {
    match kind {
        "timeout" => TIMEOUT,
        "no_permission" => NO_PERMISSION,
        "gpu_lost" => GPU_IS_LOST,
        "insufficient_size" => INSUFFICIENT_SIZE,
        _ => UNKNOWN,
    }
}

/// How virtual time moves.
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    /// Set by the caller (`tesseraFakeSetTimeMs` / `tesseraFakeAdvanceMs`, or the env step).
    Manual(i64),
    /// `start_ms + elapsed × speed`, in whole virtual seconds (`TESSERA_FAKE_NVML_SPEED`).
    Speed {
        start_ms: i64,
        origin: Instant,
        speed: f64,
    },
}

/// A device handle, decoded: the GPU index and, for a MIG device handle, its MIG device index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dev {
    pub gpu: u32,
    pub mig: Option<u32>,
}

/// A queued XID event.
#[derive(Debug, Clone, Copy)]
pub struct QueuedEvent {
    pub gpu: u32,
    pub xid: u64,
    pub gpu_instance_id: u32,
}

/// One event set: the event mask registered per GPU and the queued events.
#[derive(Debug, Default)]
pub struct EventSetState {
    pub registered: BTreeMap<u32, u64>,
    pub queue: VecDeque<QueuedEvent>,
}

/// One GPM sample: what the device reported when it was taken.
#[derive(Debug, Clone, Default)]
pub struct GpmSnap {
    /// `None` until filled by `nvmlGpmSampleGet` / `nvmlGpmMigSampleGet`.
    pub gpu: Option<u32>,
    pub gpu_instance: Option<u32>,
    pub time_ms: i64,
    pub sm: Option<f64>,
    pub occupancy: Option<f64>,
    /// The profiling pipes (and NVLink) at the sample.
    pub profiling: tessera_core::model::Profiling,
    /// PCIe bytes per second at the sample (GPU only).
    pub pcie_tx: Option<f64>,
    pub pcie_rx: Option<f64>,
    /// The error `nvmlGpmMetricsGet` returns for this sample (injected `gpm` fault).
    pub error: Option<Ret>,
}

/// An error forced by `tesseraFakeInjectError`.
#[derive(Debug, Clone)]
pub struct Injection {
    pub function: String,
    /// GPU index, or -1 for every device (and for calls without a device).
    pub device: i32,
    pub ret: Ret,
}

/// Everything the fake driver knows.
#[derive(Debug)]
pub struct Fake {
    pub node: Option<SimNode>,
    pub clock: Clock,
    /// Env `TESSERA_FAKE_NVML_STEP_MS`: each `nvmlDeviceGetCount_v2` call after the first moves
    /// a manual clock forward by this much.
    pub step_ms: Option<i64>,
    pub count_calls: u64,
    pub cache: Option<NodeReading>,
    pub init_count: u32,
    pub injections: Vec<Injection>,
    pub event_sets: BTreeMap<usize, EventSetState>,
    pub gpm: BTreeMap<usize, GpmSnap>,
    pub next_id: usize,
    /// The MIG write side (created on the first MIG write or list call): the simulated backend's
    /// rules, whose state is pushed into `node` after every change.
    pub mig: Option<SimMigControl>,
    /// Per GPU: the driver's per-process utilisation readings (`process_buffer`).
    pub process_readings: BTreeMap<u32, VecDeque<(u64, u32, u32)>>,
}

static FAKE: Mutex<Fake> = Mutex::new(Fake {
    node: None,
    clock: Clock::Manual(0),
    step_ms: None,
    count_calls: 0,
    cache: None,
    init_count: 0,
    injections: Vec::new(),
    event_sets: BTreeMap::new(),
    gpm: BTreeMap::new(),
    next_id: 1,
    mig: None,
    process_readings: BTreeMap::new(),
});

fn lock() -> MutexGuard<'static, Fake> {
    FAKE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Run `f` on the state; a panic inside becomes `NVML_ERROR_UNKNOWN` (never unwinds into C).
pub fn with(f: impl FnOnce(&mut Fake) -> Result<(), Ret>) -> Ret {
    match catch_unwind(AssertUnwindSafe(|| f(&mut lock()))) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(ret)) => ret,
        Err(_) => {
            eprintln!("tessera fake NVML: internal panic; returning NVML_ERROR_UNKNOWN");
            UNKNOWN
        }
    }
}

/// Run `f` on the state for a control symbol (no NVML semantics); panics become `default`.
pub fn control<R>(default: R, f: impl FnOnce(&mut Fake) -> R) -> R {
    catch_unwind(AssertUnwindSafe(|| f(&mut lock()))).unwrap_or(default)
}

/// A C string argument, if non-null and UTF-8.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
pub unsafe fn c_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// Write `v` to an out pointer (null → `INVALID_ARGUMENT`).
///
/// # Safety
/// `p` is null or valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, v: T) -> Result<(), Ret> {
    if p.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-null and writable per the caller's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Copy `s` and a NUL into a C buffer of `len` bytes (too small → `INSUFFICIENT_SIZE`).
///
/// # Safety
/// `buf` is null or valid for `len` bytes of writes.
pub unsafe fn put_str(buf: *mut c_char, len: u32, s: &str) -> Result<(), Ret> {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    if s.len() + 1 > len as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` holds at least `s.len() + 1` bytes per the check and the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, s.len());
        buf.add(s.len()).write(0);
    }
    Ok(())
}

/// Copy `s` (truncated, NUL-terminated) into a fixed C array.
pub fn fill_array(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

const DEV_TAG: usize = 0x7E57_0000;
const GI_TAG: usize = 0x6150_0000;
const TAG_MASK: usize = !0xFFFF;

/// The handle of GPU `gpu` (or of its MIG device `mig`).
pub fn device_handle(gpu: u32, mig: Option<u32>) -> nvmlDevice_t {
    let slot = mig.map_or(0, |m| m as usize + 1);
    std::ptr::without_provenance_mut(DEV_TAG | ((gpu as usize & 0xFF) << 8) | (slot & 0xFF))
}

/// The handle of GPU instance `gi` of GPU `gpu`.
pub fn gpu_instance_handle(gpu: u32, gi: u32) -> nvmlGpuInstance_t {
    std::ptr::without_provenance_mut(GI_TAG | ((gpu as usize & 0xFF) << 8) | (gi as usize & 0xFF))
}

/// Decode a GPU instance handle into (GPU index, GPU instance id).
pub fn decode_gpu_instance(h: nvmlGpuInstance_t) -> Option<(u32, u32)> {
    let a = h.addr();
    (a & TAG_MASK == GI_TAG).then_some((((a >> 8) & 0xFF) as u32, (a & 0xFF) as u32))
}

/// The handle of an event set or GPM sample with this id.
pub fn id_handle<T>(id: usize) -> *mut T {
    std::ptr::without_provenance_mut(id)
}

/// Parse "12.4" into NVML's CUDA version number (12040).
pub fn cuda_version_number(s: &str) -> i32 {
    let mut parts = s.split('.');
    let major: i32 = parts
        .next()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(0);
    let minor: i32 = parts
        .next()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or(0);
    major * 1000 + minor * 10
}

impl Fake {
    /// Load node `node` (default: the first) of the scenario at `path`; virtual time restarts at
    /// the scenario start and injected errors and queued events are cleared.
    pub fn load(&mut self, path: &Path, node: Option<&str>) -> Result<(), String> {
        let scenario = Scenario::from_file(path).map_err(|e| e.to_string())?;
        let name = node
            .map(str::to_string)
            .unwrap_or_else(|| scenario.nodes[0].name.clone());
        let sim = SimNode::new(&scenario, &name).ok_or_else(|| {
            let names: Vec<_> = scenario.nodes.iter().map(|n| n.name.as_str()).collect();
            format!(
                "scenario {} has no node {name:?}; it has {}",
                path.display(),
                names.join(", ")
            )
        })?;
        self.clock = Clock::Manual(scenario.start.timestamp_millis());
        self.node = Some(sim);
        self.mig = None;
        self.cache = None;
        self.process_readings.clear();
        self.count_calls = 0;
        self.injections.clear();
        for set in self.event_sets.values_mut() {
            set.queue.clear();
        }
        Ok(())
    }

    /// Load the scenario named by the environment (for the exporter binary, out of process).
    pub fn load_from_env(&mut self) -> Result<(), String> {
        let path = std::env::var("TESSERA_FAKE_NVML_SCENARIO").map_err(|_| {
            "TESSERA_FAKE_NVML_SCENARIO is not set; set it to a scenario file (e.g. fixtures/scenarios/demo.toml)"
                .to_string()
        })?;
        let node = std::env::var("TESSERA_FAKE_NVML_NODE").ok();
        self.load(Path::new(&path), node.as_deref())?;
        let mut start = self.now_ms();
        if let Ok(t) = std::env::var("TESSERA_FAKE_NVML_TIME") {
            start = chrono::DateTime::parse_from_rfc3339(&t)
                .map_err(|e| format!("TESSERA_FAKE_NVML_TIME={t:?} is not an RFC 3339 time: {e}"))?
                .timestamp_millis();
        }
        self.clock = Clock::Manual(start);
        if let Ok(s) = std::env::var("TESSERA_FAKE_NVML_SPEED") {
            let speed: f64 = s
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0)
                .ok_or_else(|| format!("TESSERA_FAKE_NVML_SPEED={s:?} is not a positive number"))?;
            self.clock = Clock::Speed {
                start_ms: start,
                origin: Instant::now(),
                speed,
            };
        }
        if let Ok(s) = std::env::var("TESSERA_FAKE_NVML_STEP_MS") {
            let step: i64 = s.parse().ok().filter(|v| *v > 0).ok_or_else(|| {
                format!("TESSERA_FAKE_NVML_STEP_MS={s:?} is not a positive integer")
            })?;
            self.step_ms = Some(step);
        }
        Ok(())
    }

    /// Current virtual time, unix ms.
    pub fn now_ms(&self) -> i64 {
        match self.clock {
            Clock::Manual(t) => t,
            Clock::Speed {
                start_ms,
                origin,
                speed,
            } => {
                let virtual_ms = (origin.elapsed().as_secs_f64() * speed * 1000.0) as i64;
                start_ms + virtual_ms.div_euclid(1000) * 1000
            }
        }
    }

    /// Set a manual clock.
    pub fn set_time(&mut self, t_ms: i64) {
        self.clock = Clock::Manual(t_ms);
    }

    /// The forced return of `function` for GPU `gpu` (`None`: a call without a device).
    pub fn injected(&self, function: &str, gpu: Option<u32>) -> Option<Ret> {
        self.injections
            .iter()
            .rev()
            .find(|i| {
                i.function == function
                    && (i.device < 0 || gpu.is_some_and(|g| g as i64 == i.device as i64))
            })
            .map(|i| i.ret)
    }

    /// Force (or with `ret == 0` clear) the return of `function` for `device` (-1: all).
    pub fn inject(&mut self, function: &str, device: i32, ret: Ret) {
        self.injections
            .retain(|i| !(i.function == function && i.device == device));
        if ret != SUCCESS {
            self.injections.push(Injection {
                function: function.to_string(),
                device,
                ret,
            });
        }
    }

    fn node(&self) -> Result<&SimNode, Ret> {
        self.node.as_ref().ok_or(UNINITIALIZED)
    }

    /// Make sure the reading at the current virtual time is cached (queuing its XID events);
    /// a driver-level fault → `UNKNOWN`.
    pub fn refresh(&mut self) -> Result<(), Ret> {
        let now = self.now_ms();
        let node = self.node.as_mut().ok_or(UNINITIALIZED)?;
        if self.cache.as_ref().map(|c| c.timestamp_ms) != Some(now) {
            let reading = node.read(now);
            for g in &reading.gpus {
                for x in &g.sample.xid_events {
                    for set in self.event_sets.values_mut() {
                        if set
                            .registered
                            .get(&g.sample.index)
                            .is_some_and(|m| m & XID_EVENT != 0)
                        {
                            set.queue.push_back(QueuedEvent {
                                gpu: g.sample.index,
                                xid: x.xid,
                                gpu_instance_id: x.gpu_instance_id.unwrap_or(NO_ID),
                            });
                        }
                    }
                }
            }
            crate::process_buffer::buffer(&mut self.process_readings, &reading, now);
            self.cache = Some(reading);
        }
        match &self.cache {
            Some(r) if r.driver_error => Err(UNKNOWN),
            Some(_) => Ok(()),
            None => Err(UNKNOWN),
        }
    }

    /// The cached reading (call [`Fake::refresh`] first).
    pub fn reading(&self) -> Result<&NodeReading, Ret> {
        self.cache.as_ref().ok_or(UNKNOWN)
    }

    /// Number of GPUs of the node.
    pub fn gpu_count(&self) -> Result<u32, Ret> {
        Ok(self.node()?.gpus().len() as u32)
    }

    /// The simulated GPU `gpu`.
    pub fn sim_gpu(&self, gpu: u32) -> Result<&SimGpu, Ret> {
        self.node()?
            .gpus()
            .get(gpu as usize)
            .ok_or(INVALID_ARGUMENT)
    }

    /// The GPU model of GPU `gpu`.
    pub fn model(&self, gpu: u32) -> Result<&'static GpuModel, Ret> {
        Ok(self.sim_gpu(gpu)?.model)
    }

    /// The reading of GPU `gpu`.
    pub fn gpu(&self, gpu: u32) -> Result<&GpuReading, Ret> {
        self.reading()?
            .gpus
            .get(gpu as usize)
            .ok_or(INVALID_ARGUMENT)
    }

    /// The reading of GPU `gpu` for a read of `field`: the field's injected fault, if any, as the
    /// NVML error.
    pub fn field(&self, gpu: u32, field: Field) -> Result<&GpuReading, Ret> {
        let g = self.gpu(gpu)?;
        match g.errors.get(&field) {
            Some(kind) => Err(kind_to_ret(kind)),
            None => Ok(g),
        }
    }

    /// Whether a scenario `not_supported` fault covers `field` on GPU `gpu` now.
    pub fn unsupported(&self, gpu: u32, field: Field) -> bool {
        let now = self.now_ms();
        self.sim_gpu(gpu).is_ok_and(|g| {
            g.unsupported
                .iter()
                .any(|(f, from)| *f == field && now >= *from)
        })
    }

    /// Whether GPU `gpu` is lost now.
    pub fn lost(&self, gpu: u32) -> bool {
        self.gpu(gpu)
            .is_ok_and(|g| g.sample.status == tessera_core::model::GpuStatus::Lost)
    }

    /// Decode a device handle of this node (a MIG handle must name an existing MIG device).
    pub fn decode(&self, h: nvmlDevice_t) -> Option<Dev> {
        let a = h.addr();
        if a & TAG_MASK != DEV_TAG {
            return None;
        }
        let gpu = ((a >> 8) & 0xFF) as u32;
        let slot = (a & 0xFF) as u32;
        let g = self.sim_gpu(gpu).ok()?;
        if slot == 0 {
            return Some(Dev { gpu, mig: None });
        }
        let index = slot - 1;
        self.mig_position(g, index)?;
        Some(Dev {
            gpu,
            mig: Some(index),
        })
    }

    /// Position in the GPU's MIG list of MIG device index `index`. MIG device indices are the
    /// placement start slots, so the index space has holes (NotFound), as on real GPUs.
    pub fn mig_position(&self, g: &SimGpu, index: u32) -> Option<usize> {
        g.mig
            .as_ref()?
            .iter()
            .position(|m| m.layout.placement.start == index)
    }

    /// Common checks of a call on a device handle: initialised, valid handle, injected error,
    /// driver fault, lost GPU.
    pub fn device_checks(&mut self, function: &str, h: nvmlDevice_t) -> Result<Dev, Ret> {
        if self.init_count == 0 {
            return Err(UNINITIALIZED);
        }
        let dev = self.decode(h).ok_or(INVALID_ARGUMENT)?;
        if let Some(ret) = self.injected(function, Some(dev.gpu)) {
            return Err(ret);
        }
        self.refresh()?;
        if self.lost(dev.gpu) {
            return Err(GPU_IS_LOST);
        }
        Ok(dev)
    }

    /// Common checks of a call without a device: initialised, injected error, driver fault.
    pub fn system_checks(&mut self, function: &str) -> Result<(), Ret> {
        if self.init_count == 0 {
            return Err(UNINITIALIZED);
        }
        if let Some(ret) = self.injected(function, None) {
            return Err(ret);
        }
        self.refresh()
    }

    /// The MIG write side of the loaded node (created on first use).
    pub fn mig_ctl(&mut self) -> Result<&mut SimMigControl, Ret> {
        if self.mig.is_none() {
            let ctl = SimMigControl::open(self.node()?, None).map_err(|_| UNKNOWN)?;
            self.mig = Some(ctl);
        }
        self.mig.as_mut().ok_or(UNKNOWN)
    }

    /// The MIG state as the write side sees it.
    pub fn mig_state(&mut self) -> Result<MigNodeState, Ret> {
        self.mig_ctl()?.read_state().map_err(|e| control_ret(&e))
    }

    /// Run a MIG write on the write side; on success push its state into the simulated node (so
    /// every read call sees the new layout) and drop the cached reading.
    pub fn mig_write<T>(
        &mut self,
        f: impl FnOnce(&mut SimMigControl) -> Result<T, ControlError>,
    ) -> Result<T, Ret> {
        let out = f(self.mig_ctl()?).map_err(|e| control_ret(&e))?;
        let state = self.mig_state()?;
        let node = self.node.as_mut().ok_or(UNINITIALIZED)?;
        for g in &state.gpus {
            let layout = g.mig_current().then(|| {
                g.instances
                    .iter()
                    .map(|i| {
                        (
                            LayoutInstance {
                                profile_id: i.profile_id,
                                placement: i.placement,
                            },
                            i.gpu_instance_id,
                            i.compute_instances.first().copied().unwrap_or(0),
                        )
                    })
                    .collect()
            });
            node.set_mig_instances(g.index, layout);
        }
        self.cache = None;
        Ok(out)
    }

    /// MIG mode of GPU `gpu`: the write side's when it exists (it knows pending changes), else
    /// the scenario's.
    pub fn mig_mode(&self, gpu: u32) -> Result<MigMode, Ret> {
        if let Some(m) = self
            .mig
            .as_ref()
            .and_then(|c| c.state().gpu(gpu))
            .and_then(|g| g.mig_mode)
        {
            return Ok(m);
        }
        let on = self.sim_gpu(gpu)?.mig.is_some();
        Ok(MigMode {
            current: on,
            pending: on,
        })
    }

    /// A new id for an event set or GPM sample.
    pub fn new_id(&mut self) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
}

/// Run a call on a device handle: the common checks, then `f`.
pub fn device_call(
    function: &str,
    h: nvmlDevice_t,
    f: impl FnOnce(&mut Fake, Dev) -> Result<(), Ret>,
) -> Ret {
    with(|fake| {
        let dev = fake.device_checks(function, h)?;
        f(fake, dev)
    })
}

/// Run a call without a device: the common checks, then `f`.
pub fn system_call(function: &str, f: impl FnOnce(&mut Fake) -> Result<(), Ret>) -> Ret {
    with(|fake| {
        fake.system_checks(function)?;
        f(fake)
    })
}

/// The NVML return code of a MIG write error.
pub fn control_ret(e: &ControlError) -> Ret {
    match e {
        ControlError::InUse { .. } => IN_USE,
        ControlError::InsufficientResources { .. } => INSUFFICIENT_RESOURCES,
        ControlError::Invalid { .. } => INVALID_ARGUMENT,
        ControlError::NotFound { .. } => NOT_FOUND,
        ControlError::NoPermission { .. } => NO_PERMISSION,
        _ => UNKNOWN,
    }
}

/// Env `TESSERA_FAKE_NVML_PROFILE_PATCH=ID:KEY=VALUE[;KEY=VALUE...]`: what the profile-table
/// reads (`nvmlDeviceGetGpuInstanceProfileInfo`, `..PossiblePlacements_v2`) report for profile id
/// `ID` on every GPU, instead of the built-in table — a driver whose table differs from
/// tessera's. Keys: `starts` (placement starts, `/`-separated), `size` (placement size),
/// `count` (max instances), `slices` (compute slices), `memory_mb`, `name` (without `MIG `). MIG
/// writes keep the built-in rules. A malformed value makes the call fail with
/// `NVML_ERROR_UNKNOWN`, reason on stderr.
pub fn patched_profile(
    p: &tessera_core::mig::MigProfile,
) -> Result<tessera_core::mig::MigProfile, Ret> {
    const VAR: &str = "TESSERA_FAKE_NVML_PROFILE_PATCH";
    let mut p = p.clone();
    let Ok(spec) = std::env::var(VAR) else {
        return Ok(p);
    };
    let bad = |why: &str| {
        eprintln!("fake NVML: {VAR}={spec:?}: {why}");
        UNKNOWN
    };
    let (id, fields) = spec
        .split_once(':')
        .ok_or_else(|| bad("expected ID:KEY=VALUE[;KEY=VALUE...]"))?;
    let id: u32 = id
        .trim()
        .parse()
        .map_err(|_| bad("the profile id is not a number"))?;
    if id != p.id {
        return Ok(p);
    }
    for field in fields.split(';').filter(|f| !f.trim().is_empty()) {
        let (key, value) = field
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=VALUE"))?;
        let num = |v: &str| v.trim().parse::<u32>().map_err(|_| bad("not a number"));
        match key.trim() {
            "starts" => {
                p.placement_starts = value.split('/').map(num).collect::<Result<_, _>>()?;
            }
            "size" => p.memory_slices = num(value)?,
            "count" => p.max_count = num(value)?,
            "slices" => p.compute_slices = num(value)?,
            "memory_mb" => p.memory_bytes = u64::from(num(value)?) << 20,
            "name" => p.name = value.trim().to_string(),
            _ => {
                return Err(bad(
                    "unknown key; expected starts, size, count, slices, memory_mb or name",
                ));
            }
        }
    }
    Ok(p)
}
