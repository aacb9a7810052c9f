//! Device enumeration and identity: count, handles by index, index, UUID, name, PCI info and
//! the enforced power limit, for GPUs and (where NVML allows) MIG device handles.
//!
//! It reports no time-varying reading ([`super::readings`]) and no MIG layout
//! ([`super::mig`]).

use std::ffi::{c_char, c_uint};

use nvml_wrapper_sys::bindings::*;

use crate::state::{
    self, Dev, Fake, INVALID_ARGUMENT, NOT_SUPPORTED, Ret, UNINITIALIZED, device_call,
    device_handle, put, put_str,
};

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

/// # Safety
/// `minor` is null or a valid out pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(
    device: nvmlDevice_t,
    minor: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetMinorNumber", device, |_, d| {
        // A MIG device has no /dev/nvidiaN of its own.
        if d.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        // The simulated driver numbers its device nodes as NVML does: /dev/nvidia<index>.
        // SAFETY: `minor` is null or a valid out pointer.
        unsafe { put(minor, d.gpu) }
    })
}

/// The MIG instance behind a MIG device handle.
pub(super) fn mig_instance(
    f: &Fake,
    d: Dev,
) -> Result<&tessera_core::sim::node::SimMigInstance, Ret> {
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
