//! The MIG write side of the fake: GPU instances listed, created at a placement and destroyed;
//! compute instances (one spanning its GPU instance) listed, created and destroyed; MIG mode set.
//! Exported only by the full fake library, so the "old driver" one lacks them (missing symbols).
//!
//! The rules are the simulated backend's ([`tessera_core::sim::control::SimMigControl`]:
//! placements, overlap, max counts, one `+me`, `IN_USE` with processes, pending mode on Ampere),
//! turned into NVML return codes by [`state::control_ret`]; after every change the simulated
//! node's layout is updated, so the read calls (MIG devices, GPU instance info, processes) see it.
//! Every call honours `tesseraFakeInjectError` under its own name, on the parent GPU.
//!
//! Compute instances: only the profile spanning the whole GPU instance exists here; its id is
//! the compute-instance profile index of that slice count (as on real GPUs).
//!
//! Safety contract: as in `core_exports` (NVML's C API; null pointers are rejected).

#![allow(clippy::missing_safety_doc)]

use std::ffi::c_uint;

use nvml_wrapper_sys::bindings::*;
use tessera_core::mig::control::{GpuInstanceState, MigControl};
use tessera_core::model::Placement;

use crate::state::{
    self, Fake, IN_USE, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, Ret, SUCCESS, device_call,
    device_handle, gpu_instance_handle, put,
};

const CI_TAG: usize = 0x5C10_0000;
const TAG_MASK: usize = !0xFFFF;

fn ci_handle(gpu: u32, gi: u32, ci: u32) -> nvmlComputeInstance_t {
    std::ptr::without_provenance_mut(
        CI_TAG | ((gpu as usize & 0x3F) << 10) | ((gi as usize & 0x3F) << 4) | (ci as usize & 0xF),
    )
}

fn decode_ci(h: nvmlComputeInstance_t) -> Option<(u32, u32, u32)> {
    let a = h.addr();
    (a & TAG_MASK == CI_TAG).then_some((
        ((a >> 10) & 0x3F) as u32,
        ((a >> 4) & 0x3F) as u32,
        (a & 0xF) as u32,
    ))
}

/// Compute slices of the compute-instance profile indices 0..=6 (`NVML_COMPUTE_INSTANCE_PROFILE_*`).
const CI_SLICES: [u32; 7] = [1, 2, 3, 4, 7, 8, 6];

/// The GPU instance `gi` of GPU `gpu` and its compute slices.
fn gi_state(f: &mut Fake, gpu: u32, gi: u32) -> Result<(GpuInstanceState, u32), Ret> {
    let model = f.model(gpu)?;
    let state = f.mig_state()?;
    let inst = state
        .gpu(gpu)
        .and_then(|g| g.instances.iter().find(|i| i.gpu_instance_id == gi))
        .cloned()
        .ok_or(INVALID_ARGUMENT)?;
    let slices = model
        .profile(inst.profile_id)
        .map(|p| p.compute_slices)
        .ok_or(INVALID_ARGUMENT)?;
    Ok((inst, slices))
}

/// The id of the compute-instance profile spanning `slices` compute slices.
fn full_ci_profile(slices: u32) -> Result<u32, Ret> {
    CI_SLICES
        .iter()
        .position(|&s| s == slices)
        .map(|i| i as u32)
        .ok_or(NOT_SUPPORTED)
}

/// Run `f` as a call of `function` on the parent GPU of GPU instance handle `gi`.
fn gi_call(
    function: &str,
    gi: nvmlGpuInstance_t,
    f: impl FnOnce(&mut Fake, u32, u32) -> Result<(), Ret>,
) -> Ret {
    let Some((gpu, id)) = state::decode_gpu_instance(gi) else {
        return INVALID_ARGUMENT;
    };
    device_call(function, device_handle(gpu, None), |fake, _| {
        f(fake, gpu, id)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceSetMigMode(
    device: nvmlDevice_t,
    mode: c_uint,
    activation_status: *mut nvmlReturn_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceSetMigMode", device, |f, d| {
        if d.mig.is_some() || activation_status.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let enable = match mode {
            NVML_DEVICE_MIG_ENABLE => true,
            NVML_DEVICE_MIG_DISABLE => false,
            _ => return Err(INVALID_ARGUMENT),
        };
        // A busy GPU is reported in the activation status (the call itself succeeds).
        let status = match f.mig_write(|c| c.set_mig_mode(d.gpu, enable)) {
            Ok(_) => SUCCESS,
            Err(IN_USE) => IN_USE,
            Err(e) => return Err(e),
        };
        // SAFETY: non-null and writable per the contract.
        unsafe { put(activation_status, status) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstances(
    device: nvmlDevice_t,
    profile_id: c_uint,
    gpu_instances: *mut nvmlGpuInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstances", device, |f, d| {
        if d.mig.is_some() || gpu_instances.is_null() || count.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        if !f.mig_mode(d.gpu)?.current {
            return Err(NOT_SUPPORTED);
        }
        let model = f.model(d.gpu)?;
        let max = model
            .profile(profile_id)
            .map(|p| p.max_count)
            .ok_or(INVALID_ARGUMENT)?;
        let state = f.mig_state()?;
        let ids: Vec<u32> = state
            .gpu(d.gpu)
            .map(|g| {
                g.instances
                    .iter()
                    .filter(|i| i.profile_id == profile_id)
                    .map(|i| i.gpu_instance_id)
                    .collect()
            })
            .unwrap_or_default();
        // The caller's array holds the profile's instance count (NVML's contract).
        for (k, id) in ids.iter().take(max as usize).enumerate() {
            // SAFETY: `gpu_instances` holds at least `max` elements per the contract.
            unsafe { gpu_instances.add(k).write(gpu_instance_handle(d.gpu, *id)) };
        }
        // SAFETY: non-null and writable.
        unsafe { put(count, ids.len().min(max as usize) as c_uint) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    device: nvmlDevice_t,
    profile_id: c_uint,
    placement: *const nvmlGpuInstancePlacement_t,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    device_call(
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        device,
        |f, d| {
            if d.mig.is_some() || placement.is_null() || gpu_instance.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            // SAFETY: non-null and readable per the contract.
            let p = unsafe { placement.read() };
            let p = Placement {
                start: p.start,
                size: p.size,
            };
            let id = f.mig_write(|c| c.create_gpu_instance(d.gpu, profile_id, p))?;
            // SAFETY: non-null and writable.
            unsafe { put(gpu_instance, gpu_instance_handle(d.gpu, id)) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceDestroy(gpu_instance: nvmlGpuInstance_t) -> nvmlReturn_t {
    gi_call("nvmlGpuInstanceDestroy", gpu_instance, |f, gpu, gi| {
        f.mig_write(|c| c.destroy_gpu_instance(gpu, gi))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gpu_instance: nvmlGpuInstance_t,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_t,
) -> nvmlReturn_t {
    gi_call(
        "nvmlGpuInstanceGetComputeInstanceProfileInfo",
        gpu_instance,
        |f, gpu, gi| {
            if eng_profile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
                return Err(NOT_SUPPORTED);
            }
            let (_, slices) = gi_state(f, gpu, gi)?;
            let s = *CI_SLICES.get(profile as usize).ok_or(NOT_SUPPORTED)?;
            if s > slices {
                return Err(NOT_SUPPORTED);
            }
            let out = nvmlComputeInstanceProfileInfo_t {
                id: profile,
                sliceCount: s,
                instanceCount: slices / s,
                multiprocessorCount: s * 16,
                sharedCopyEngineCount: slices,
                sharedDecoderCount: 0,
                sharedEncoderCount: 0,
                sharedJpegCount: 0,
                sharedOfaCount: 0,
            };
            // SAFETY: `info` is null or a valid out pointer.
            unsafe { put(info, out) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstances(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    compute_instances: *mut nvmlComputeInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    gi_call(
        "nvmlGpuInstanceGetComputeInstances",
        gpu_instance,
        |f, gpu, gi| {
            if compute_instances.is_null() || count.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            let (inst, slices) = gi_state(f, gpu, gi)?;
            let ids: Vec<u32> = if profile_id == full_ci_profile(slices)? {
                inst.compute_instances.clone()
            } else {
                Vec::new()
            };
            for (k, id) in ids.iter().take(slices as usize).enumerate() {
                // SAFETY: the caller's array holds the profile's instance count (>= 1) per the
                // contract; a spanning profile has exactly one.
                unsafe { compute_instances.add(k).write(ci_handle(gpu, gi, *id)) };
            }
            // SAFETY: non-null and writable.
            unsafe { put(count, ids.len() as c_uint) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    compute_instance: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    gi_call(
        "nvmlGpuInstanceCreateComputeInstance",
        gpu_instance,
        |f, gpu, gi| {
            if compute_instance.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            let (_, slices) = gi_state(f, gpu, gi)?;
            if profile_id != full_ci_profile(slices)? {
                // Only compute instances spanning their GPU instance are modelled.
                return Err(NOT_SUPPORTED);
            }
            let id = f.mig_write(|c| c.create_compute_instance(gpu, gi))?;
            // SAFETY: non-null and writable.
            unsafe { put(compute_instance, ci_handle(gpu, gi, id)) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetComputeInstanceById(
    gpu_instance: nvmlGpuInstance_t,
    id: c_uint,
    compute_instance: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    gi_call(
        "nvmlGpuInstanceGetComputeInstanceById",
        gpu_instance,
        |f, gpu, gi| {
            let (inst, _) = gi_state(f, gpu, gi)?;
            if !inst.compute_instances.contains(&id) {
                return Err(NOT_FOUND);
            }
            // SAFETY: `compute_instance` is null or a valid out pointer.
            unsafe { put(compute_instance, ci_handle(gpu, gi, id)) }
        },
    )
}

/// Run `f` as a call of `function` on the parent GPU of compute instance handle `ci`.
fn ci_call(
    function: &str,
    ci: nvmlComputeInstance_t,
    f: impl FnOnce(&mut Fake, u32, u32, u32) -> Result<(), Ret>,
) -> Ret {
    let Some((gpu, gi, id)) = decode_ci(ci) else {
        return INVALID_ARGUMENT;
    };
    device_call(function, device_handle(gpu, None), |fake, _| {
        f(fake, gpu, gi, id)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlComputeInstanceGetInfo_v2(
    compute_instance: nvmlComputeInstance_t,
    info: *mut nvmlComputeInstanceInfo_t,
) -> nvmlReturn_t {
    ci_call(
        "nvmlComputeInstanceGetInfo_v2",
        compute_instance,
        |f, gpu, gi, id| {
            let (inst, slices) = gi_state(f, gpu, gi)?;
            if !inst.compute_instances.contains(&id) {
                return Err(INVALID_ARGUMENT);
            }
            let out = nvmlComputeInstanceInfo_t {
                device: device_handle(gpu, None),
                gpuInstance: gpu_instance_handle(gpu, gi),
                id,
                profileId: full_ci_profile(slices)?,
                placement: nvmlComputeInstancePlacement_t {
                    start: 0,
                    size: slices,
                },
            };
            // SAFETY: `info` is null or a valid out pointer.
            unsafe { put(info, out) }
        },
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlComputeInstanceDestroy(
    compute_instance: nvmlComputeInstance_t,
) -> nvmlReturn_t {
    ci_call(
        "nvmlComputeInstanceDestroy",
        compute_instance,
        |f, gpu, gi, id| f.mig_write(|c| c.destroy_compute_instance(gpu, gi, id)),
    )
}
