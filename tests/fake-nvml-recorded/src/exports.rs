//! The exported NVML functions of the recorded library: each answers from the recording
//! ([`crate::answer`]) and writes the recorded value into NVML's C structures.
//!
//! It keeps no state but GPM sample handles; what each call returns is the recording's.

use super::*;

fn init() -> Ret {
    let mut guard = recording::lock();
    if guard.as_ref().is_none_or(|r| !r.loaded) {
        match recording::load_from_env() {
            Ok(r) => *guard = Some(r),
            Err(e) => {
                eprintln!("tessera recorded NVML: {e}");
                return UNKNOWN;
            }
        }
    }
    let r: &mut Replay = guard.as_mut().expect("loaded above");
    r.init_count += 1;
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    init()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    init()
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    let mut guard = recording::lock();
    match guard.as_mut() {
        Some(r) if r.init_count > 0 => {
            r.init_count -= 1;
            SUCCESS
        }
        _ => UNINITIALIZED,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let s: &'static std::ffi::CStr = match result {
        SUCCESS => c"Success",
        UNINITIALIZED => c"Uninitialized",
        INVALID_ARGUMENT => c"Invalid Argument",
        NOT_SUPPORTED => c"Not Supported",
        INSUFFICIENT_SIZE => c"Insufficient Size",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

// ---- system ----------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(v: *mut c_char, len: c_uint) -> nvmlReturn_t {
    // SAFETY: `v` holds `len` bytes per the contract.
    answer("nvmlSystemGetDriverVersion", None, None, None, |x| unsafe {
        put_str(v, len, str_of(x)?)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> nvmlReturn_t {
    answer("nvmlSystemGetCudaDriverVersion_v2", None, None, None, |x| {
        let n = x.as_i64().ok_or(UNKNOWN)? as c_int;
        // SAFETY: null or a valid out pointer per the contract.
        unsafe { put(v, n) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> nvmlReturn_t {
    // SAFETY: forwarded with the same contract.
    unsafe { nvmlSystemGetCudaDriverVersion_v2(v) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    let call = {
        let mut guard = recording::lock();
        let Some(r) = guard.as_mut().filter(|r| r.init_count > 0) else {
            return UNINITIALIZED;
        };
        r.any_gpu("nvmlSystemGetProcessName", &pid.to_string())
    };
    let Some(call) = call else {
        return NOT_SUPPORTED;
    };
    let ret = ret_of(&call.rc);
    if ret != SUCCESS {
        return ret;
    }
    let Some(s) = call.value.as_str() else {
        return UNKNOWN;
    };
    let s: String = s.chars().take((len as usize).saturating_sub(1)).collect();
    // SAFETY: `name` holds `len` bytes per the contract.
    match unsafe { put_str(name, len, &s) } {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    if let Some(r) = recording::lock().as_mut() {
        r.next_segment();
    }
    answer("nvmlDeviceGetCount_v2", None, None, None, |x| {
        // SAFETY: null or a valid out pointer per the contract.
        unsafe { put(count, u32_of(x)?) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    answer(
        "nvmlDeviceGetHandleByIndex_v2",
        Some(index),
        None,
        None,
        |_| {
            // SAFETY: null or a valid out pointer per the contract.
            unsafe { put(device, device_handle(index, None)) }
        },
    )
}

// ---- events ----------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    answer("nvmlEventSetCreate", None, None, None, |_| {
        // SAFETY: null or a valid out pointer per the contract.
        unsafe { put(set, 0x2000_0000usize as nvmlEventSet_t) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetFree(_set: nvmlEventSet_t) -> nvmlReturn_t {
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    _types: c_ulonglong,
    _set: nvmlEventSet_t,
) -> nvmlReturn_t {
    device_answer("nvmlDeviceRegisterEvents", device, Some("xid"), |_| Ok(()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    _set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    _timeout_ms: c_uint,
) -> nvmlReturn_t {
    answer("nvmlEventSetWait_v2", None, None, Some("0ms"), |x| {
        let ev = nvmlEventData_t {
            // Recorded events name no handle: the first GPU's.
            device: device_handle(0, None),
            eventType: u64_of(field(x, "event_type"))?,
            eventData: u64_of(field(x, "data"))?,
            gpuInstanceId: u32_of(field(x, "gpu_instance_id"))?,
            computeInstanceId: u32::MAX,
        };
        // SAFETY: null or a valid out pointer per the contract.
        unsafe { put(data, ev) }
    })
}

// ---- identity and inventory ------------------------------------------------------------------

/// A string read of a device, copied into `buf` of `len` bytes.
fn string_answer(function: &str, device: nvmlDevice_t, buf: *mut c_char, len: c_uint) -> Ret {
    // SAFETY: `buf` holds `len` bytes per the caller's NVML contract.
    device_answer(function, device, None, |x| unsafe {
        put_str(buf, len, str_of(x)?)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    string_answer("nvmlDeviceGetUUID", device, uuid, len)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    string_answer("nvmlDeviceGetName", device, name, len)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    device_answer("nvmlDeviceGetPciInfo_v3", device, None, |x| {
        // SAFETY: nvmlPciInfo_t is plain old data; all zeroes is a valid value.
        let mut p: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
        let bus_id = str_of(field(x, "bus_id"))?;
        fill(&mut p.busId, bus_id);
        fill(&mut p.busIdLegacy, bus_id.get(4..).unwrap_or(bus_id));
        p.domain = u32_of(field(x, "domain"))?;
        p.bus = u32_of(field(x, "bus"))?;
        p.device = u32_of(field(x, "device"))?;
        p.pciDeviceId = u32_of(field(x, "pci_device_id"))?;
        p.pciSubSystemId = u32_of(field(x, "pci_sub_system_id")).unwrap_or(0);
        // SAFETY: null or a valid out pointer per the contract.
        unsafe { put(pci, p) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    scalar_u32("nvmlDeviceGetEnforcedPowerLimit", device, None, limit)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    device_answer("nvmlDeviceGetMigMode", device, None, |x| {
        // SAFETY: null or valid out pointers per the contract.
        unsafe {
            put(current, u32_of(field(x, "current"))?)?;
            put(pending, u32_of(field(x, "pending"))?)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    scalar_u32("nvmlDeviceGetMaxMigDeviceCount", device, None, count)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig_device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    let Some((gpu, None)) = decode(device) else {
        return INVALID_ARGUMENT;
    };
    // Recorded with the MIG device index as the current MIG device.
    answer(
        "nvmlDeviceGetMigDeviceHandleByIndex",
        Some(gpu),
        Some(index),
        Some(&index.to_string()),
        |_| {
            // SAFETY: null or a valid out pointer per the contract.
            unsafe { put(mig_device, device_handle(gpu, Some(index))) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    scalar_u32("nvmlDeviceGetGpuInstanceId", device, None, id)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    scalar_u32("nvmlDeviceGetComputeInstanceId", device, None, id)
}

// ---- readings --------------------------------------------------------------------------------

fn scalar_u32(function: &str, device: nvmlDevice_t, arg: Option<&str>, out: *mut c_uint) -> Ret {
    device_answer(function, device, arg, |x| {
        // SAFETY: null or a valid out pointer per the contract.
        unsafe { put(out, u32_of(x)?) }
    })
}

fn scalar_u64(
    function: &str,
    device: nvmlDevice_t,
    arg: Option<&str>,
    out: *mut c_ulonglong,
) -> Ret {
    device_answer(function, device, arg, |x| {
        // SAFETY: null or a valid out pointer per the contract.
        unsafe { put(out, u64_of(x)?) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    mem: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    device_answer("nvmlDeviceGetMemoryInfo_v2", device, None, |x| {
        let m = nvmlMemory_v2_t {
            version: (std::mem::size_of::<nvmlMemory_v2_t>() | (2 << 24)) as u32,
            total: u64_of(field(x, "total"))?,
            reserved: u64_of(field(x, "reserved")).unwrap_or(0),
            free: u64_of(field(x, "free"))?,
            used: u64_of(field(x, "used"))?,
        };
        // SAFETY: null or a valid out pointer per the contract.
        unsafe { put(mem, m) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    u: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    device_answer("nvmlDeviceGetUtilizationRates", device, None, |x| {
        let v = nvmlUtilization_t {
            gpu: u32_of(field(x, "gpu"))?,
            memory: u32_of(field(x, "memory"))?,
        };
        // SAFETY: null or a valid out pointer per the contract.
        unsafe { put(u, v) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    power: *mut c_uint,
) -> nvmlReturn_t {
    scalar_u32("nvmlDeviceGetPowerUsage", device, None, power)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    scalar_u64("nvmlDeviceGetTotalEnergyConsumption", device, None, energy)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    _sensor: nvmlTemperatureSensors_t,
    temp: *mut c_uint,
) -> nvmlReturn_t {
    scalar_u32("nvmlDeviceGetTemperature", device, Some("gpu"), temp)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: nvmlDevice_t,
    minor: *mut c_uint,
) -> nvmlReturn_t {
    // Recordings made before the inventory read it lack it: NOT_SUPPORTED, as before.
    scalar_u32("nvmlDeviceGetMinorNumber", device, None, minor)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    clock_type: nvmlClockType_t,
    clock: *mut c_uint,
) -> nvmlReturn_t {
    let arg = if clock_type == nvmlClockType_enum_NVML_CLOCK_SM {
        "sm"
    } else if clock_type == nvmlClockType_enum_NVML_CLOCK_MEM {
        "mem"
    } else {
        return NOT_SUPPORTED;
    };
    scalar_u32("nvmlDeviceGetClockInfo", device, Some(arg), clock)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    scalar_u64(
        "nvmlDeviceGetCurrentClocksEventReasons",
        device,
        None,
        reasons,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    scalar_u64(
        "nvmlDeviceGetCurrentClocksEventReasons",
        device,
        None,
        reasons,
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    _counter: nvmlEccCounterType_t,
    count: *mut c_ulonglong,
) -> nvmlReturn_t {
    let arg = if error_type == nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_CORRECTED {
        "corrected,volatile"
    } else {
        "uncorrected,volatile"
    };
    scalar_u64("nvmlDeviceGetTotalEccErrors", device, Some(arg), count)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: nvmlDevice_t,
    corr: *mut c_uint,
    unc: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> nvmlReturn_t {
    device_answer("nvmlDeviceGetRemappedRows", device, None, |x| {
        let flag = |name: &str| u32::from(field(x, name).as_bool().unwrap_or(false));
        // SAFETY: null or valid out pointers per the contract.
        unsafe {
            put(corr, u32_of(field(x, "correctable"))?)?;
            put(unc, u32_of(field(x, "uncorrectable"))?)?;
            put(pending, flag("pending"))?;
            put(failure, flag("failure"))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: nvmlPcieUtilCounter_t,
    value: *mut c_uint,
) -> nvmlReturn_t {
    let arg = if counter == nvmlPcieUtilCounter_enum_NVML_PCIE_UTIL_TX_BYTES {
        "tx"
    } else {
        "rx"
    };
    scalar_u32("nvmlDeviceGetPcieThroughput", device, Some(arg), value)
}

/// Copy `items` out with NVML's count protocol: `*count` in is the capacity, out the number.
unsafe fn put_list<T: Copy>(count: *mut c_uint, out: *mut T, items: &[T]) -> Result<(), Ret> {
    if count.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-null and valid for reads and writes per the contract.
    let capacity = unsafe { *count } as usize;
    // SAFETY: as above.
    unsafe { *count = items.len() as c_uint };
    if items.is_empty() {
        return Ok(());
    }
    if out.is_null() || capacity < items.len() {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `out` holds `capacity >= items.len()` elements per the contract.
    unsafe { std::ptr::copy_nonoverlapping(items.as_ptr(), out, items.len()) };
    Ok(())
}

fn opt_id(v: &Value) -> u32 {
    v.as_u64()
        .and_then(|x| u32::try_from(x).ok())
        .unwrap_or(u32::MAX)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // nvml-wrapper asks for the count first and then the list: one recorded call, two C calls.
    let first = !count.is_null() && unsafe { *count } == 0;
    let f = |x: &Value| {
        let items = x
            .as_array()
            .ok_or(UNKNOWN)?
            .iter()
            .map(|p| {
                Ok(nvmlProcessInfo_t {
                    pid: u32_of(field(p, "pid"))?,
                    usedGpuMemory: field(field(p, "used_gpu_memory"), "Used")
                        .as_u64()
                        .unwrap_or(u64::MAX),
                    gpuInstanceId: opt_id(field(p, "gpu_instance_id")),
                    computeInstanceId: opt_id(field(p, "compute_instance_id")),
                })
            })
            .collect::<Result<Vec<_>, Ret>>()?;
        // SAFETY: per the NVML contract of the caller.
        unsafe { put_list(count, infos, &items) }
    };
    list_answer(
        "nvmlDeviceGetComputeRunningProcesses_v3",
        device,
        None,
        first,
        f,
    )
}

/// A list call: the count-only first call does not use up the recorded answer.
fn list_answer(
    function: &str,
    device: nvmlDevice_t,
    arg: Option<&str>,
    count_only: bool,
    write: impl FnOnce(&Value) -> Result<(), Ret>,
) -> Ret {
    let Some((gpu, mig)) = decode(device) else {
        return INVALID_ARGUMENT;
    };
    if count_only {
        // Peek: answer, then give the call back to the cursor.
        let mut guard = recording::lock();
        let Some(r) = guard.as_mut() else {
            return UNINITIALIZED;
        };
        let Some(call) = r.peek(function, Some(gpu), mig, arg) else {
            return NOT_SUPPORTED;
        };
        drop(guard);
        let ret = ret_of(&call.rc);
        if ret != SUCCESS {
            return ret;
        }
        return match write(&call.value) {
            Ok(()) => SUCCESS,
            Err(e) => e,
        };
    }
    answer(function, Some(gpu), mig, arg, write)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> nvmlReturn_t {
    let arg = format!("since_us={last_seen}");
    let first = utilization.is_null();
    let f = |x: &Value| {
        let items = x
            .as_array()
            .ok_or(UNKNOWN)?
            .iter()
            .map(|p| {
                Ok(nvmlProcessUtilizationSample_t {
                    pid: u32_of(field(p, "pid"))?,
                    timeStamp: u64_of(field(p, "timestamp"))?,
                    smUtil: u32_of(field(p, "sm_util"))?,
                    memUtil: u32_of(field(p, "mem_util")).unwrap_or(0),
                    encUtil: u32_of(field(p, "enc_util")).unwrap_or(0),
                    decUtil: u32_of(field(p, "dec_util")).unwrap_or(0),
                })
            })
            .collect::<Result<Vec<_>, Ret>>()?;
        // SAFETY: per the NVML contract of the caller.
        unsafe { put_list(count, utilization, &items) }
    };
    list_answer(
        "nvmlDeviceGetProcessUtilization",
        device,
        Some(&arg),
        first,
        f,
    )
}
