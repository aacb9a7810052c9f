//! Time-varying readings of a device: memory (also of MIG devices), utilisation, power,
//! temperature, clocks, clock event (throttle) reasons, ECC totals, row remapping and PCIe
//! throughput, each from the simulated reading of its field.
//!
//! It does not enumerate devices ([`super::device`]) nor list processes
//! ([`super::processes`]).

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::*;
use tessera_core::model::Field;

use crate::state::{
    Dev, Fake, INVALID_ARGUMENT, NOT_SUPPORTED, Ret, VERSION_MISMATCH, device_call, put,
};

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

/// The reading of a physical GPU for a read of `field` (MIG handles: NotSupported).
pub(super) fn physical(
    f: &Fake,
    d: Dev,
    field: Field,
) -> Result<&tessera_core::sim::GpuReading, Ret> {
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
