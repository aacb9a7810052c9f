//! MIG reads: MIG mode, MIG device handles and their GPU/compute instance ids, parent
//! handles, GPU instances by id and their info, and GPU instance profile info.
//!
//! It changes nothing: the MIG writes are in `mig_write_exports` (newer drivers only).

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::*;

use super::device::mig_instance;
use crate::state::{
    self, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, device_call, device_handle,
    gpu_instance_handle, put,
};

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
