//! NVML functions every driver tessera supports has (both fake libraries export these), plus the
//! `tesseraFake*` control symbols tests call through `dlopen`.
//!
//! Safety contract of every function here: NVML's C API. Pointer arguments are null (rejected
//! with `NVML_ERROR_INVALID_ARGUMENT`) or valid for the documented reads/writes; string buffers
//! hold the given length. No function unwinds into the caller.

#![allow(clippy::missing_safety_doc)]
// bindgen names the NVML constants matched on here.
#![allow(non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong};
use std::path::Path;

use nvml_wrapper_sys::bindings::*;
use tessera_core::model::Field;

use crate::state::{
    self, Dev, EventSetState, Fake, INSUFFICIENT_SIZE, INVALID_ARGUMENT, NO_ID, NOT_FOUND,
    NOT_SUPPORTED, Ret, SUCCESS, TIMEOUT, UNINITIALIZED, VERSION_MISMATCH, XID_EVENT, c_str,
    device_call, device_handle, gpu_instance_handle, put, put_str, system_call,
};

// ---- control symbols (not NVML) -------------------------------------------------------------

/// Load `node` (null: the first node) of the scenario file at `path`. Returns 0, or -1 with the
/// reason on stderr. Virtual time restarts at the scenario start; injected errors are cleared.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tesseraFakeLoadScenario(
    path: *const c_char,
    node: *const c_char,
) -> c_int {
    // SAFETY: per the contract, both are null or NUL-terminated strings.
    let (path, node) = unsafe { (c_str(path), c_str(node)) };
    let Some(path) = path else {
        eprintln!("tessera fake NVML: tesseraFakeLoadScenario needs a path");
        return -1;
    };
    state::control(-1, |f| match f.load(Path::new(path), node) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tessera fake NVML: {e}");
            -1
        }
    })
}

/// Set virtual time (unix ms).
#[unsafe(no_mangle)]
pub extern "C" fn tesseraFakeSetTimeMs(t_ms: i64) {
    state::control((), |f| f.set_time(t_ms));
}

/// Move virtual time forward by `delta_ms`.
#[unsafe(no_mangle)]
pub extern "C" fn tesseraFakeAdvanceMs(delta_ms: i64) {
    state::control((), |f| {
        let now = f.now_ms();
        f.set_time(now + delta_ms);
    });
}

/// Current virtual time (unix ms).
#[unsafe(no_mangle)]
pub extern "C" fn tesseraFakeTimeMs() -> i64 {
    state::control(0, |f| f.now_ms())
}

/// Force `function` to return `nvml_return` for GPU `device_index` (-1: every device and calls
/// without a device). `nvml_return == 0` clears; a null `function` clears every injection.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tesseraFakeInjectError(
    function: *const c_char,
    device_index: c_int,
    nvml_return: c_int,
) {
    // SAFETY: null or a NUL-terminated string per the contract.
    let name = unsafe { c_str(function) };
    state::control((), |f| match name {
        Some(name) => f.inject(name, device_index, nvml_return as Ret),
        None => f.injections.clear(),
    });
}

// ---- init ----------------------------------------------------------------------------------

fn init(function: &str) -> Ret {
    state::with(|f| {
        if let Some(ret) = f.injected(function, None) {
            return Err(ret);
        }
        if f.node.is_none()
            && let Err(e) = f.load_from_env()
        {
            eprintln!("tessera fake NVML: {e}");
            return Err(state::UNKNOWN);
        }
        let now = f.now_ms();
        if f.node.as_ref().is_some_and(|n| n.driver_error_at(now)) {
            return Err(state::DRIVER_NOT_LOADED);
        }
        f.init_count += 1;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    init("nvmlInit_v2")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    init("nvmlInitWithFlags")
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    state::with(|f| {
        if f.init_count == 0 {
            return Err(UNINITIALIZED);
        }
        if let Some(ret) = f.injected("nvmlShutdown", None) {
            return Err(ret);
        }
        f.init_count -= 1;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let s: &'static std::ffi::CStr = match result {
        SUCCESS => c"Success",
        UNINITIALIZED => c"Uninitialized",
        INVALID_ARGUMENT => c"Invalid Argument",
        NOT_SUPPORTED => c"Not Supported",
        NOT_FOUND => c"Not Found",
        INSUFFICIENT_SIZE => c"Insufficient Size",
        TIMEOUT => c"Timeout",
        state::GPU_IS_LOST => c"GPU is lost",
        state::NO_PERMISSION => c"Insufficient Permissions",
        state::DRIVER_NOT_LOADED => c"Driver Not Loaded",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

// ---- system --------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    system_call("nvmlSystemGetDriverVersion", |f| {
        let v = f
            .node
            .as_ref()
            .map(|n| n.scenario().driver_version.clone())
            .unwrap_or_default();
        // SAFETY: `version` holds `length` bytes per the contract.
        unsafe { put_str(version, length, &v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    system_call("nvmlSystemGetNVMLVersion", |f| {
        let v = f
            .node
            .as_ref()
            .map(|n| n.scenario().driver_version.clone())
            .unwrap_or_default();
        // SAFETY: `version` holds `length` bytes per the contract.
        unsafe { put_str(version, length, &format!("12.{v}")) }
    })
}

fn cuda_version(function: &str, version: *mut c_int) -> Ret {
    system_call(function, |f| {
        let v = f
            .node
            .as_ref()
            .map(|n| state::cuda_version_number(&n.scenario().cuda_version))
            .unwrap_or(0);
        // SAFETY: `version` is null or a valid out pointer per the contract.
        unsafe { put(version, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> nvmlReturn_t {
    cuda_version("nvmlSystemGetCudaDriverVersion", version)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> nvmlReturn_t {
    cuda_version("nvmlSystemGetCudaDriverVersion_v2", version)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    system_call("nvmlSystemGetProcessName", |f| {
        let found = f
            .reading()?
            .gpus
            .iter()
            .flat_map(|g| g.sample.processes.iter())
            .find(|p| p.pid == pid)
            .and_then(|p| p.name.clone());
        let name_str = found.ok_or(NOT_FOUND)?;
        // NVML crops the name to the buffer.
        let cropped: String = name_str
            .chars()
            .take((length as usize).saturating_sub(1))
            .collect();
        // SAFETY: `name` holds `length` bytes per the contract.
        unsafe { put_str(name, length, &cropped) }
    })
}

// ---- devices -------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    state::with(|f| {
        if f.init_count > 0 && f.count_calls > 0 {
            // The "tick" of an out-of-process run with TESSERA_FAKE_NVML_STEP_MS.
            if let (Some(step), state::Clock::Manual(t)) = (f.step_ms, f.clock) {
                f.set_time(t + step);
            }
        }
        f.count_calls += 1;
        f.system_checks("nvmlDeviceGetCount_v2")?;
        let n = f.gpu_count()?;
        // SAFETY: `count` is null or a valid out pointer.
        unsafe { put(count, n) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    state::with(|f| {
        if f.init_count == 0 {
            return Err(UNINITIALIZED);
        }
        if let Some(ret) = f.injected("nvmlDeviceGetHandleByIndex_v2", Some(index)) {
            return Err(ret);
        }
        f.refresh()?;
        if index >= f.gpu_count()? {
            return Err(INVALID_ARGUMENT);
        }
        if f.lost(index) {
            return Err(state::GPU_IS_LOST);
        }
        // SAFETY: `device` is null or a valid out pointer.
        unsafe { put(device, device_handle(index, None)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    index: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetIndex", device, |_, d| {
        // SAFETY: `index` is null or a valid out pointer.
        unsafe { put(index, d.gpu) }
    })
}

/// The MIG instance behind a MIG device handle.
fn mig_instance(f: &Fake, d: Dev) -> Result<&tessera_core::sim::fleet::SimMigInstance, Ret> {
    let g = f.sim_gpu(d.gpu)?;
    let index = d.mig.ok_or(NOT_SUPPORTED)?;
    let pos = f.mig_position(g, index).ok_or(INVALID_ARGUMENT)?;
    g.mig
        .as_ref()
        .and_then(|m| m.get(pos))
        .ok_or(INVALID_ARGUMENT)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetUUID", device, |f, d| {
        let u = match d.mig {
            None => f.sim_gpu(d.gpu)?.uuid.clone(),
            Some(_) => mig_instance(f, d)?.uuid.clone(),
        };
        // SAFETY: `uuid` holds `length` bytes per the contract.
        unsafe { put_str(uuid, length, &u) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetName", device, |f, d| {
        let model = f.model(d.gpu)?;
        let n = match d.mig {
            None => model.nvml_name.to_string(),
            Some(_) => {
                let inst = mig_instance(f, d)?;
                let profile = model
                    .profile(inst.layout.profile_id)
                    .map(|p| p.name.as_str())
                    .unwrap_or("");
                format!("{} MIG {profile}", model.nvml_name)
            }
        };
        // SAFETY: `name` holds `length` bytes per the contract.
        unsafe { put_str(name, length, &n) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPciInfo_v3", device, |f, d| {
        if d.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        let bus_id = f.sim_gpu(d.gpu)?.pci_bus_id.clone();
        // SAFETY: plain integers and char arrays; all-zero is valid.
        let mut info: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
        state::fill_array(&mut info.busId, &bus_id);
        state::fill_array(&mut info.busIdLegacy, bus_id.get(4..).unwrap_or(&bus_id));
        let field = |i: usize| {
            bus_id
                .split([':', '.'])
                .nth(i)
                .and_then(|s| u32::from_str_radix(s, 16).ok())
        };
        info.domain = field(0).unwrap_or(0);
        info.bus = field(1).unwrap_or(0);
        info.device = field(2).unwrap_or(0);
        info.pciDeviceId = 0x2330_10DE;
        info.pciSubSystemId = 0x16C1_10DE;
        // SAFETY: `pci` is null or a valid out pointer.
        unsafe { put(pci, info) }
    })
}

/// (used, total) bytes of a device or MIG device.
fn memory(f: &Fake, d: Dev) -> Result<(u64, u64), Ret> {
    match d.mig {
        None => {
            let g = f.field(d.gpu, Field::Memory)?;
            let used = g.sample.memory_used_bytes.ok_or(NOT_SUPPORTED)?;
            let total = g.sample.memory_total_bytes.ok_or(NOT_SUPPORTED)?;
            Ok((used, total))
        }
        Some(index) => {
            let g = f.field(d.gpu, Field::MigMemory)?;
            let pos = f
                .mig_position(f.sim_gpu(d.gpu)?, index)
                .ok_or(INVALID_ARGUMENT)?;
            let m = g.sample.mig.get(pos).ok_or(INVALID_ARGUMENT)?;
            Ok((
                m.memory_used_bytes.ok_or(NOT_SUPPORTED)?,
                m.memory_total_bytes.ok_or(NOT_SUPPORTED)?,
            ))
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: nvmlDevice_t,
    mem: *mut nvmlMemory_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMemoryInfo", device, |f, d| {
        let (used, total) = memory(f, d)?;
        let info = nvmlMemory_t {
            total,
            free: total.saturating_sub(used),
            used,
        };
        // SAFETY: `mem` is null or a valid out pointer.
        unsafe { put(mem, info) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    mem: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMemoryInfo_v2", device, |f, d| {
        if mem.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let expected = (std::mem::size_of::<nvmlMemory_v2_t>() | (2 << 24)) as u32;
        // SAFETY: non-null and valid for reads per the contract (the caller sets `version`).
        if unsafe { (*mem).version } != expected {
            return Err(VERSION_MISMATCH);
        }
        let (used, total) = memory(f, d)?;
        let info = nvmlMemory_v2_t {
            version: expected,
            total,
            reserved: 0,
            free: total.saturating_sub(used),
            used,
        };
        // SAFETY: non-null and writable per the contract.
        unsafe { put(mem, info) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetEnforcedPowerLimit", device, |f, d| {
        if d.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        let mw = (f.model(d.gpu)?.power_limit_watts * 1000.0).round() as c_uint;
        // SAFETY: `limit` is null or a valid out pointer.
        unsafe { put(limit, mw) }
    })
}

/// The reading of a physical GPU for a read of `field` (MIG handles: NotSupported).
fn physical(f: &Fake, d: Dev, field: Field) -> Result<&tessera_core::sim::GpuReading, Ret> {
    if d.mig.is_some() {
        return Err(NOT_SUPPORTED);
    }
    f.field(d.gpu, field)
}

fn percent(ratio: f64) -> c_uint {
    (ratio * 100.0).round() as c_uint
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetUtilizationRates", device, |f, d| {
        let s = &physical(f, d, Field::Utilization)?.sample;
        let u = nvmlUtilization_t {
            gpu: percent(s.busy_ratio.ok_or(NOT_SUPPORTED)?),
            memory: percent(s.memory_controller_ratio.ok_or(NOT_SUPPORTED)?),
        };
        // SAFETY: `utilization` is null or a valid out pointer.
        unsafe { put(utilization, u) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    power: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPowerUsage", device, |f, d| {
        let w = physical(f, d, Field::Power)?
            .sample
            .power_watts
            .ok_or(NOT_SUPPORTED)?;
        // SAFETY: `power` is null or a valid out pointer.
        unsafe { put(power, (w * 1000.0).round() as c_uint) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor: nvmlTemperatureSensors_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTemperature", device, |f, d| {
        if sensor != nvmlTemperatureSensors_enum_NVML_TEMPERATURE_GPU {
            return Err(INVALID_ARGUMENT);
        }
        let c = physical(f, d, Field::Temperature)?
            .sample
            .temperature_celsius
            .ok_or(NOT_SUPPORTED)?;
        // SAFETY: `temp` is null or a valid out pointer.
        unsafe { put(temp, c.round() as c_uint) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    clock_type: nvmlClockType_t,
    clock: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetClockInfo", device, |f, d| {
        let s = &physical(f, d, Field::Clocks)?.sample;
        let hz = match clock_type {
            nvmlClockType_enum_NVML_CLOCK_GRAPHICS | nvmlClockType_enum_NVML_CLOCK_SM => {
                s.sm_clock_hertz
            }
            nvmlClockType_enum_NVML_CLOCK_MEM => s.memory_clock_hertz,
            nvmlClockType_enum_NVML_CLOCK_VIDEO => None,
            _ => return Err(INVALID_ARGUMENT),
        }
        .ok_or(NOT_SUPPORTED)?;
        // SAFETY: `clock` is null or a valid out pointer.
        unsafe { put(clock, (hz / 1e6).round() as c_uint) }
    })
}

/// Clock event (throttle) reasons; shared by the old and new names.
pub fn clocks_event_reasons(
    function: &str,
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> Ret {
    device_call(function, device, |f, d| {
        let bits = physical(f, d, Field::Throttle)?
            .sample
            .throttle_reasons
            .ok_or(NOT_SUPPORTED)?;
        // SAFETY: `reasons` is null or a valid out pointer.
        unsafe { put(reasons, bits) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    clocks_event_reasons("nvmlDeviceGetCurrentClocksThrottleReasons", device, reasons)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    counter_type: nvmlEccCounterType_t,
    count: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTotalEccErrors", device, |f, d| {
        if counter_type > nvmlEccCounterType_enum_NVML_AGGREGATE_ECC {
            return Err(INVALID_ARGUMENT);
        }
        let s = &physical(f, d, Field::Ecc)?.sample;
        let n = match error_type {
            nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED => s.ecc_corrected_total,
            nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED => s.ecc_uncorrected_total,
            _ => return Err(INVALID_ARGUMENT),
        }
        .ok_or(NOT_SUPPORTED)?;
        // SAFETY: `count` is null or a valid out pointer.
        unsafe { put(count, n) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: nvmlDevice_t,
    corr_rows: *mut c_uint,
    unc_rows: *mut c_uint,
    is_pending: *mut c_uint,
    failure_occurred: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetRemappedRows", device, |f, d| {
        let r = physical(f, d, Field::RowRemap)?
            .sample
            .remapped_rows
            .ok_or(NOT_SUPPORTED)?;
        // SAFETY: each pointer is null or a valid out pointer.
        unsafe {
            put(corr_rows, r.correctable)?;
            put(unc_rows, r.uncorrectable)?;
            put(is_pending, c_uint::from(r.pending))?;
            put(failure_occurred, c_uint::from(r.failure))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: nvmlPcieUtilCounter_t,
    value: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetPcieThroughput", device, |f, d| {
        let s = &physical(f, d, Field::Pcie)?.sample;
        let bytes = match counter {
            nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_TX_BYTES => s.pcie_tx_bytes_per_second,
            nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_RX_BYTES => s.pcie_rx_bytes_per_second,
            _ => return Err(INVALID_ARGUMENT),
        }
        .ok_or(NOT_SUPPORTED)?;
        // SAFETY: `value` is null or a valid out pointer.
        unsafe { put(value, (bytes / 1024.0).round() as c_uint) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetComputeRunningProcesses_v3", device, |f, d| {
        if info_count.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let procs: Vec<nvmlProcessInfo_t> = physical(f, d, Field::Processes)?
            .sample
            .processes
            .iter()
            .map(|p| nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: p.used_memory_bytes.unwrap_or(u64::MAX),
                gpuInstanceId: p.gpu_instance_id.unwrap_or(NO_ID),
                computeInstanceId: p.compute_instance_id.unwrap_or(NO_ID),
            })
            .collect();
        // SAFETY: non-null and valid for reads and writes per the contract.
        let capacity = unsafe { *info_count } as usize;
        // SAFETY: as above.
        unsafe { *info_count = procs.len() as c_uint };
        if procs.is_empty() {
            return Ok(());
        }
        if infos.is_null() || capacity < procs.len() {
            return Err(INSUFFICIENT_SIZE);
        }
        // SAFETY: `infos` holds `capacity >= procs.len()` elements per the contract.
        unsafe { std::ptr::copy_nonoverlapping(procs.as_ptr(), infos, procs.len()) };
        Ok(())
    })
}

// ---- MIG -----------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMigMode", device, |f, d| {
        let g = f.sim_gpu(d.gpu)?;
        if d.mig.is_some() || !g.model.supports_mig() {
            return Err(NOT_SUPPORTED);
        }
        let m = f.mig_mode(d.gpu)?;
        let word = |on: bool| {
            if on {
                NVML_DEVICE_MIG_ENABLE
            } else {
                NVML_DEVICE_MIG_DISABLE
            }
        };
        // SAFETY: both are null or valid out pointers.
        unsafe {
            put(current, word(m.current))?;
            put(pending, word(m.pending))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMaxMigDeviceCount", device, |f, d| {
        let g = f.sim_gpu(d.gpu)?;
        if d.mig.is_some() || !g.model.supports_mig() {
            return Err(NOT_SUPPORTED);
        }
        // SAFETY: `count` is null or a valid out pointer.
        unsafe { put(count, g.model.compute_slices) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig_device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMigDeviceHandleByIndex", device, |f, d| {
        let g = f.sim_gpu(d.gpu)?;
        if d.mig.is_some() || g.mig.is_none() {
            return Err(INVALID_ARGUMENT);
        }
        if index >= g.model.compute_slices {
            return Err(INVALID_ARGUMENT);
        }
        f.mig_position(g, index).ok_or(NOT_FOUND)?;
        // SAFETY: `mig_device` is null or a valid out pointer.
        unsafe { put(mig_device, device_handle(d.gpu, Some(index))) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(
    device: nvmlDevice_t,
    is_mig: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceIsMigDeviceHandle", device, |_, d| {
        // SAFETY: `is_mig` is null or a valid out pointer.
        unsafe { put(is_mig, d.mig.is_some() as c_uint) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstanceId", device, |f, d| {
        let gi = mig_instance(f, d)?.gpu_instance_id;
        // SAFETY: `id` is null or a valid out pointer.
        unsafe { put(id, gi) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetComputeInstanceId", device, |f, d| {
        let ci = mig_instance(f, d)?.compute_instance_id;
        // SAFETY: `id` is null or a valid out pointer.
        unsafe { put(id, ci) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    device_call(
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        mig_device,
        |_, d| {
            if d.mig.is_none() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: `device` is null or a valid out pointer.
            unsafe { put(device, device_handle(d.gpu, None)) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: nvmlDevice_t,
    id: c_uint,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstanceById", device, |f, d| {
        let g = f.sim_gpu(d.gpu)?;
        if d.mig.is_some() {
            return Err(INVALID_ARGUMENT);
        }
        let insts = g.mig.as_ref().ok_or(NOT_SUPPORTED)?;
        insts
            .iter()
            .find(|m| m.gpu_instance_id == id)
            .ok_or(NOT_FOUND)?;
        // SAFETY: `gpu_instance` is null or a valid out pointer.
        unsafe { put(gpu_instance, gpu_instance_handle(d.gpu, id)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gpu_instance: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    let Some((gpu, gi)) = state::decode_gpu_instance(gpu_instance) else {
        return INVALID_ARGUMENT;
    };
    // Checked as a call on the parent device.
    device_call(
        "nvmlGpuInstanceGetInfo",
        device_handle(gpu, None),
        |f, d| {
            let g = f.sim_gpu(d.gpu)?;
            let inst = g
                .mig
                .as_ref()
                .and_then(|m| m.iter().find(|m| m.gpu_instance_id == gi))
                .ok_or(INVALID_ARGUMENT)?;
            let out = nvmlGpuInstanceInfo_t {
                device: device_handle(d.gpu, None),
                id: gi,
                profileId: inst.layout.profile_id,
                placement: nvmlGpuInstancePlacement_t {
                    start: inst.layout.placement.start,
                    size: inst.layout.placement.size,
                },
            };
            // SAFETY: `info` is null or a valid out pointer.
            unsafe { put(info, out) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstanceProfileInfo", device, |f, d| {
        let model = f.model(d.gpu)?;
        if d.mig.is_some() || !model.supports_mig() {
            return Err(NOT_SUPPORTED);
        }
        let p = state::patched_profile(model.profile_by_index(profile).ok_or(INVALID_ARGUMENT)?)?;
        let out = nvmlGpuInstanceProfileInfo_t {
            id: p.id,
            isP2pSupported: 0,
            sliceCount: p.compute_slices,
            instanceCount: p.max_count,
            multiprocessorCount: p.compute_slices * 16,
            copyEngineCount: p.compute_slices,
            decoderCount: p.compute_slices.div_ceil(2),
            encoderCount: 0,
            jpegCount: u32::from(p.media_extensions),
            ofaCount: u32::from(p.media_extensions),
            memorySizeMB: p.memory_bytes / (1024 * 1024),
        };
        // SAFETY: `info` is null or a valid out pointer.
        unsafe { put(info, out) }
    })
}

// ---- events --------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    system_call("nvmlEventSetCreate", |f| {
        let id = f.new_id();
        f.event_sets.insert(id, EventSetState::default());
        // SAFETY: `set` is null or a valid out pointer.
        unsafe { put(set, state::id_handle(id)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    state::with(|f| {
        if let Some(ret) = f.injected("nvmlEventSetFree", None) {
            return Err(ret);
        }
        f.event_sets
            .remove(&set.addr())
            .map(|_| ())
            .ok_or(INVALID_ARGUMENT)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    event_types: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetSupportedEventTypes", device, |_, _| {
        // SAFETY: `event_types` is null or a valid out pointer.
        unsafe { put(event_types, XID_EVENT) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    event_types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceRegisterEvents", device, |f, d| {
        if d.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        if event_types & !XID_EVENT != 0 {
            return Err(NOT_SUPPORTED);
        }
        let s = f.event_sets.get_mut(&set.addr()).ok_or(INVALID_ARGUMENT)?;
        *s.registered.entry(d.gpu).or_insert(0) |= event_types;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    _timeout_ms: c_uint,
) -> nvmlReturn_t {
    system_call("nvmlEventSetWait_v2", |f| {
        let s = f.event_sets.get_mut(&set.addr()).ok_or(INVALID_ARGUMENT)?;
        let ev = s.queue.pop_front().ok_or(TIMEOUT)?;
        let out = nvmlEventData_t {
            device: device_handle(ev.gpu, None),
            eventType: XID_EVENT,
            eventData: ev.xid,
            gpuInstanceId: ev.gpu_instance_id,
            computeInstanceId: NO_ID,
        };
        // SAFETY: `data` is null or a valid out pointer.
        unsafe { put(data, out) }
    })
}
