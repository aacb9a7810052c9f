//! Raw NVML calls for what nvml-wrapper 0.13 does not wrap, wraps wrongly, or wraps with a
//! lifetime that cannot be stored next to the [`Nvml`] it borrows.
//!
//! Every call goes through the crate's function table ([`Nvml::lib`]) with [`nvml_sym`] (a symbol
//! missing from the loaded library becomes [`NvmlError::FailedToLoadSymbol`], never a panic) and
//! [`nvml_try`]. The table's own convenience methods are never used: they `expect()` the symbol.
//!
//! Covered here: MIG identity (`nvmlDeviceGetGpuInstanceId`, `nvmlDeviceGetComputeInstanceId`,
//! `nvmlDeviceGetGpuInstanceById` + `nvmlGpuInstanceGetInfo`), the GPU instance profile table and
//! its placements (`nvmlDeviceGetGpuInstancePossiblePlacements_v2`: the wrapper's version returns
//! an empty list), clock event reasons as raw bits, row remapping (`nvmlDeviceGetRemappedRows`),
//! event sets (created once and kept across samples) and GPM sample handles (kept across samples
//! to compute metrics between them). The MIG write side: GPU instances listed per profile, created
//! at a placement and destroyed; compute instances listed, created (spanning their GPU instance)
//! and destroyed; MIG mode set with its activation status.

use std::mem::ManuallyDrop;
use std::os::raw::{c_uint, c_ulonglong};
use std::ptr;

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::gpm::{GpmSample, gpm_metrics_get};
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstance_t, nvmlComputeInstanceInfo_t, nvmlDevice_t, nvmlEventData_t,
    nvmlEventSet_t, nvmlGpmSample_t, nvmlGpuInstance_t, nvmlGpuInstanceInfo_t,
    nvmlGpuInstancePlacement_t, nvmlGpuInstanceProfileInfo_t, nvmlGpuInstanceProfileInfo_v2_t,
};

use crate::model::Placement;

/// NVML's "no value" for ids (`gpuInstanceId` of an event on a GPU without MIG, ...).
pub const NO_ID: u32 = u32::MAX;

/// GPU instance id of a MIG device handle.
pub fn gpu_instance_id(mig: &Device<'_>) -> Result<u32, NvmlError> {
    let sym = nvml_sym(mig.nvml().lib().nvmlDeviceGetGpuInstanceId.as_ref())?;
    let mut id: c_uint = 0;
    // SAFETY: the handle comes from the live `Device` of this library; `id` is a valid out pointer.
    nvml_try(unsafe { sym(mig.handle(), &mut id) })?;
    Ok(id)
}

/// Compute instance id of a MIG device handle.
pub fn compute_instance_id(mig: &Device<'_>) -> Result<u32, NvmlError> {
    let sym = nvml_sym(mig.nvml().lib().nvmlDeviceGetComputeInstanceId.as_ref())?;
    let mut id: c_uint = 0;
    // SAFETY: as in `gpu_instance_id`.
    nvml_try(unsafe { sym(mig.handle(), &mut id) })?;
    Ok(id)
}

/// Profile id and placement of GPU instance `gi_id` on a physical GPU.
pub fn gpu_instance_info(parent: &Device<'_>, gi_id: u32) -> Result<(u32, Placement), NvmlError> {
    let nvml = parent.nvml();
    let by_id = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceById.as_ref())?;
    let get_info = nvml_sym(nvml.lib().nvmlGpuInstanceGetInfo.as_ref())?;
    let mut gi: nvmlGpuInstance_t = ptr::null_mut();
    // SAFETY: the handle comes from the live `parent`; `gi` is a valid out pointer.
    nvml_try(unsafe { by_id(parent.handle(), gi_id, &mut gi) })?;
    // SAFETY: an all-zero `nvmlGpuInstanceInfo_t` (null handle, zero ids) is a valid value.
    let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `gi` was just returned by NVML; `info` is a valid out pointer of the right type.
    nvml_try(unsafe { get_info(gi, &mut info) })?;
    Ok((
        info.profileId,
        Placement {
            start: info.placement.start,
            size: info.placement.size,
        },
    ))
}

/// One row of a GPU's GPU-instance profile table (`nvmlDeviceGetGpuInstanceProfileInfo`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GpuInstanceProfile {
    /// Profile *index* queried (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub index: u32,
    /// Profile id (`info.id`, the number `nvidia-smi` shows).
    pub id: u32,
    pub slice_count: u32,
    /// Maximum number of instances of this profile.
    pub instance_count: u32,
    pub multiprocessor_count: u32,
    pub memory_size_mb: u64,
}

/// `nvmlDeviceGetGpuInstanceProfileInfo` for one profile index.
pub fn profile_info(dev: &Device<'_>, index: u32) -> Result<GpuInstanceProfile, NvmlError> {
    let sym = nvml_sym(
        dev.nvml()
            .lib()
            .nvmlDeviceGetGpuInstanceProfileInfo
            .as_ref(),
    )?;
    // SAFETY: the struct is plain integers; all-zero is valid.
    let mut info: nvmlGpuInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: the handle comes from the live `dev`; `info` is a valid out pointer.
    nvml_try(unsafe { sym(dev.handle(), index, &mut info) })?;
    Ok(GpuInstanceProfile {
        index,
        id: info.id,
        slice_count: info.sliceCount,
        instance_count: info.instanceCount,
        multiprocessor_count: info.multiprocessorCount,
        memory_size_mb: info.memorySizeMB,
    })
}

/// The name of profile index `index` (`MIG 1g.10gb`): `nvmlDeviceGetGpuInstanceProfileInfoV`
/// with the v2 struct (the v1 call has no name).
pub fn profile_name(dev: &Device<'_>, index: u32) -> Result<String, NvmlError> {
    let sym = nvml_sym(
        dev.nvml()
            .lib()
            .nvmlDeviceGetGpuInstanceProfileInfoV
            .as_ref(),
    )?;
    // SAFETY: the struct is plain integers and a char array; all-zero is valid.
    let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
    info.version = (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as c_uint) | (2 << 24);
    // SAFETY: the handle comes from the live `dev`; `info` is a valid, versioned out pointer.
    nvml_try(unsafe { sym(dev.handle(), index, &mut info) })?;
    let bytes: Vec<u8> = info
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `nvmlDeviceGetGpuInstancePossiblePlacements_v2` for a profile *id*: first the count, then the
/// list (the wrapper's `possible_placements` never sets the vector's length).
pub fn possible_placements(dev: &Device<'_>, profile_id: u32) -> Result<Vec<Placement>, NvmlError> {
    let sym = nvml_sym(
        dev.nvml()
            .lib()
            .nvmlDeviceGetGpuInstancePossiblePlacements_v2
            .as_ref(),
    )?;
    let mut count: c_uint = 0;
    // SAFETY: the handle comes from the live `dev`; a null list asks for the count only.
    nvml_try(unsafe { sym(dev.handle(), profile_id, ptr::null_mut(), &mut count) })?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut list = vec![nvmlGpuInstancePlacement_t { start: 0, size: 0 }; count as usize];
    // SAFETY: `list` holds `count` elements and NVML writes at most `count`, updating `count`.
    nvml_try(unsafe { sym(dev.handle(), profile_id, list.as_mut_ptr(), &mut count) })?;
    list.truncate(count as usize);
    Ok(list
        .into_iter()
        .map(|p| Placement {
            start: p.start,
            size: p.size,
        })
        .collect())
}

/// Current clock event (throttle) reasons as raw bits: `nvmlDeviceGetCurrentClocksEventReasons`
/// (R535+), falling back to its older name `nvmlDeviceGetCurrentClocksThrottleReasons`.
pub fn clocks_event_reasons(dev: &Device<'_>) -> Result<u64, NvmlError> {
    let lib = dev.nvml().lib();
    let sym = match nvml_sym(lib.nvmlDeviceGetCurrentClocksEventReasons.as_ref()) {
        Ok(sym) => sym,
        Err(_) => nvml_sym(lib.nvmlDeviceGetCurrentClocksThrottleReasons.as_ref())?,
    };
    let mut bits: c_ulonglong = 0;
    // SAFETY: the handle comes from the live `dev`; `bits` is a valid out pointer.
    nvml_try(unsafe { sym(dev.handle(), &mut bits) })?;
    Ok(bits)
}

/// Row remapping state (`nvmlDeviceGetRemappedRows`, Ampere and later): correctable and
/// uncorrectable rows remapped, whether a remapping is pending, whether one failed. Not in
/// nvml-wrapper 0.13's safe API.
pub fn remapped_rows(dev: &Device<'_>) -> Result<crate::model::RemappedRows, NvmlError> {
    let sym = nvml_sym(dev.nvml().lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corr, mut unc, mut pending, mut failure) = (0, 0, 0, 0);
    // SAFETY: the handle comes from the live `dev`; the four are valid out pointers.
    nvml_try(unsafe {
        sym(
            dev.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        )
    })?;
    Ok(crate::model::RemappedRows {
        correctable: corr,
        uncorrectable: unc,
        pending: pending != 0,
        failure: failure != 0,
    })
}

/// An NVML event set, created once and kept for the backend's life.
#[derive(Debug)]
pub struct EventSet(nvmlEventSet_t);

// SAFETY: NVML is thread-safe; an event set handle is an opaque token usable from any thread.
unsafe impl Send for EventSet {}

/// `nvmlEventSetCreate`.
pub fn event_set_create(nvml: &Nvml) -> Result<EventSet, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlEventSetCreate.as_ref())?;
    let mut set: nvmlEventSet_t = ptr::null_mut();
    // SAFETY: `set` is a valid out pointer.
    nvml_try(unsafe { sym(&mut set) })?;
    Ok(EventSet(set))
}

/// `nvmlDeviceRegisterEvents`.
pub fn register_events(dev: &Device<'_>, types: u64, set: &EventSet) -> Result<(), NvmlError> {
    let sym = nvml_sym(dev.nvml().lib().nvmlDeviceRegisterEvents.as_ref())?;
    // SAFETY: the device handle comes from the live `dev`; `set.0` is a live event set.
    nvml_try(unsafe { sym(dev.handle(), types, set.0) })
}

/// One event: the device handle it came from, its type, its data (the XID) and the GPU instance
/// id ([`NO_ID`] when not on a MIG instance).
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub device: nvmlDevice_t,
    pub event_type: u64,
    pub data: u64,
    pub gpu_instance_id: u32,
}

/// `nvmlEventSetWait_v2` with `timeout_ms` (0: only what is already queued).
pub fn event_wait(nvml: &Nvml, set: &EventSet, timeout_ms: u32) -> Result<Event, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlEventSetWait_v2.as_ref())?;
    // SAFETY: plain data with a nullable handle; all-zero is valid.
    let mut data: nvmlEventData_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set.0` is a live event set; `data` is a valid out pointer.
    nvml_try(unsafe { sym(set.0, &mut data, timeout_ms) })?;
    Ok(Event {
        device: data.device,
        event_type: data.eventType,
        data: data.eventData,
        gpu_instance_id: data.gpuInstanceId,
    })
}

/// `nvmlEventSetFree`.
pub fn event_set_free(nvml: &Nvml, set: EventSet) -> Result<(), NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlEventSetFree.as_ref())?;
    // SAFETY: `set` is consumed, so the handle is freed once.
    nvml_try(unsafe { sym(set.0) })
}

/// A GPM sample handle owned by the backend (freed with [`gpm_free`]).
#[derive(Debug)]
pub struct Gpm(nvmlGpmSample_t);

// SAFETY: a GPM sample is a heap buffer owned by NVML, used from one thread at a time.
unsafe impl Send for Gpm {}

/// Allocate a GPM sample and fill it for a device (`gpu_instance: None`) or one of its GPU
/// instances (`nvmlGpmMigSampleGet`).
pub fn gpm_sample(dev: &Device<'_>, gpu_instance: Option<u32>) -> Result<Gpm, NvmlError> {
    let lib = dev.nvml().lib();
    // Resolve every symbol before allocating so that nothing leaks on a missing one.
    let alloc = *nvml_sym(lib.nvmlGpmSampleAlloc.as_ref())?;
    let free = *nvml_sym(lib.nvmlGpmSampleFree.as_ref())?;
    let get = match gpu_instance {
        None => Some(*nvml_sym(lib.nvmlGpmSampleGet.as_ref())?),
        Some(_) => None,
    };
    let mig_get = match gpu_instance {
        Some(_) => Some(*nvml_sym(lib.nvmlGpmMigSampleGet.as_ref())?),
        None => None,
    };
    let mut sample: nvmlGpmSample_t = ptr::null_mut();
    // SAFETY: `sample` is a valid out pointer.
    nvml_try(unsafe { alloc(&mut sample) })?;
    let filled = match (gpu_instance, get, mig_get) {
        // SAFETY: the handle comes from the live `dev`; `sample` was just allocated.
        (Some(gi), _, Some(mig_get)) => nvml_try(unsafe { mig_get(dev.handle(), gi, sample) }),
        // SAFETY: as above.
        (None, Some(get), _) => nvml_try(unsafe { get(dev.handle(), sample) }),
        _ => Err(NvmlError::Unknown),
    };
    match filled {
        Ok(()) => Ok(Gpm(sample)),
        Err(e) => {
            // SAFETY: `sample` was allocated above and is not used after this.
            let _ = unsafe { free(sample) };
            Err(e)
        }
    }
}

/// Free a GPM sample.
pub fn gpm_free(nvml: &Nvml, sample: Gpm) {
    if let Ok(free) = nvml_sym(nvml.lib().nvmlGpmSampleFree.as_ref()) {
        // SAFETY: `sample` is consumed, so the handle is freed once.
        let _ = unsafe { free(sample.0) };
    }
}

/// Metrics between two GPM samples via `nvml_wrapper::gpm::gpm_metrics_get`; one result per id.
pub fn gpm_metrics(
    nvml: &Nvml,
    first: &Gpm,
    second: &Gpm,
    ids: &[GpmMetricId],
) -> Result<Vec<Result<f64, NvmlError>>, NvmlError> {
    // SAFETY: both handles were allocated by this library and are still live. `ManuallyDrop`
    // keeps the wrapper's `Drop` (which frees through a panicking table method) from running: the
    // backend owns and frees these handles itself.
    let a = ManuallyDrop::new(unsafe { GpmSample::from_handle(nvml, first.0) });
    // SAFETY: as above.
    let b = ManuallyDrop::new(unsafe { GpmSample::from_handle(nvml, second.0) });
    let results = gpm_metrics_get(nvml, &a, &b, ids)?;
    Ok(results.into_iter().map(|r| r.map(|m| m.value)).collect())
}

// ---- MIG write side (used by `control.rs`) ----

/// `nvmlDeviceGetGpuInstances` for one GPU instance profile *id*: every GPU instance of it.
pub fn gpu_instances(
    dev: &Device<'_>,
    profile_id: u32,
) -> Result<Vec<nvmlGpuInstance_t>, NvmlError> {
    let sym = nvml_sym(dev.nvml().lib().nvmlDeviceGetGpuInstances.as_ref())?;
    // At most 8 GPU instances of one profile exist on any GPU (7 × 1g; 8 slots).
    let mut list: Vec<nvmlGpuInstance_t> = vec![ptr::null_mut(); 16];
    let mut count: c_uint = list.len() as c_uint;
    // SAFETY: the handle comes from the live `dev`; `list` holds `count` elements.
    nvml_try(unsafe { sym(dev.handle(), profile_id, list.as_mut_ptr(), &mut count) })?;
    list.truncate(count as usize);
    Ok(list)
}

/// `nvmlGpuInstanceGetInfo`: id, profile id and placement of a GPU instance handle.
pub fn gi_info(nvml: &Nvml, gi: nvmlGpuInstance_t) -> Result<(u32, u32, Placement), NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlGpuInstanceGetInfo.as_ref())?;
    // SAFETY: plain data with nullable handles; all-zero is valid.
    let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `gi` was returned by this library; `info` is a valid out pointer.
    nvml_try(unsafe { sym(gi, &mut info) })?;
    Ok((
        info.id,
        info.profileId,
        Placement {
            start: info.placement.start,
            size: info.placement.size,
        },
    ))
}

/// `nvmlDeviceGetGpuInstanceById`.
pub fn gi_by_id(dev: &Device<'_>, id: u32) -> Result<nvmlGpuInstance_t, NvmlError> {
    let sym = nvml_sym(dev.nvml().lib().nvmlDeviceGetGpuInstanceById.as_ref())?;
    let mut gi: nvmlGpuInstance_t = ptr::null_mut();
    // SAFETY: the handle comes from the live `dev`; `gi` is a valid out pointer.
    nvml_try(unsafe { sym(dev.handle(), id, &mut gi) })?;
    Ok(gi)
}

/// The compute instance profile id of the profile that spans a GPU instance with
/// `compute_slices` slices (`nvmlGpuInstanceGetComputeInstanceProfileInfo`, shared engines).
pub fn full_ci_profile_id(
    nvml: &Nvml,
    gi: nvmlGpuInstance_t,
    compute_slices: u32,
) -> Result<u32, NvmlError> {
    use nvml_wrapper_sys::bindings::*;
    let index = match compute_slices {
        1 => NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
        2 => NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
        3 => NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
        4 => NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
        6 => NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
        7 => NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
        8 => NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
        _ => return Err(NvmlError::InvalidArg),
    };
    let sym = nvml_sym(
        nvml.lib()
            .nvmlGpuInstanceGetComputeInstanceProfileInfo
            .as_ref(),
    )?;
    // SAFETY: plain integers; all-zero is valid.
    let mut info: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `gi` was returned by this library; `info` is a valid out pointer.
    nvml_try(unsafe {
        sym(
            gi,
            index,
            NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            &mut info,
        )
    })?;
    Ok(info.id)
}

/// Every compute instance id of a GPU instance: `nvmlGpuInstanceGetComputeInstances` for each
/// compute instance profile index the GPU instance has, then `nvmlComputeInstanceGetInfo_v2`.
pub fn compute_instance_ids(nvml: &Nvml, gi: nvmlGpuInstance_t) -> Result<Vec<u32>, NvmlError> {
    use nvml_wrapper_sys::bindings::*;
    let lib = nvml.lib();
    let profile_info = nvml_sym(lib.nvmlGpuInstanceGetComputeInstanceProfileInfo.as_ref())?;
    let list_sym = nvml_sym(lib.nvmlGpuInstanceGetComputeInstances.as_ref())?;
    let info_sym = nvml_sym(lib.nvmlComputeInstanceGetInfo_v2.as_ref())?;
    let mut ids = Vec::new();
    for index in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        // SAFETY: plain integers; all-zero is valid.
        let mut info: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `gi` was returned by this library; `info` is a valid out pointer.
        match nvml_try(unsafe {
            profile_info(
                gi,
                index,
                NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                &mut info,
            )
        }) {
            Ok(()) => {}
            Err(NvmlError::NotSupported | NvmlError::InvalidArg | NvmlError::NotFound) => continue,
            Err(e) => return Err(e),
        }
        let mut list: Vec<nvmlComputeInstance_t> = vec![ptr::null_mut(); 8];
        let mut count: c_uint = list.len() as c_uint;
        // SAFETY: `list` holds `count` elements.
        nvml_try(unsafe { list_sym(gi, info.id, list.as_mut_ptr(), &mut count) })?;
        for ci in list.into_iter().take(count as usize) {
            // SAFETY: plain data with nullable handles; all-zero is valid.
            let mut ci_info: nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `ci` was just returned by this library.
            nvml_try(unsafe { info_sym(ci, &mut ci_info) })?;
            ids.push(ci_info.id);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// `nvmlDeviceCreateGpuInstanceWithPlacement`; returns the new GPU instance's id.
pub fn create_gpu_instance(
    dev: &Device<'_>,
    profile_id: u32,
    placement: Placement,
) -> Result<u32, NvmlError> {
    let nvml = dev.nvml();
    let sym = nvml_sym(nvml.lib().nvmlDeviceCreateGpuInstanceWithPlacement.as_ref())?;
    // Resolve the info call first so that a missing symbol fails before anything is created.
    nvml_sym(nvml.lib().nvmlGpuInstanceGetInfo.as_ref())?;
    let p = nvmlGpuInstancePlacement_t {
        start: placement.start,
        size: placement.size,
    };
    let mut gi: nvmlGpuInstance_t = ptr::null_mut();
    // SAFETY: the handle comes from the live `dev`; `p` and `gi` are valid pointers.
    nvml_try(unsafe { sym(dev.handle(), profile_id, &p, &mut gi) })?;
    gi_info(nvml, gi).map(|(id, _, _)| id)
}

/// `nvmlGpuInstanceDestroy` of GPU instance `id`.
pub fn destroy_gpu_instance(dev: &Device<'_>, id: u32) -> Result<(), NvmlError> {
    let sym = nvml_sym(dev.nvml().lib().nvmlGpuInstanceDestroy.as_ref())?;
    let gi = gi_by_id(dev, id)?;
    // SAFETY: `gi` was just returned by this library.
    nvml_try(unsafe { sym(gi) })
}

/// `nvmlGpuInstanceCreateComputeInstance` with the profile spanning the GPU instance.
pub fn create_compute_instance(
    dev: &Device<'_>,
    gi_id: u32,
    compute_slices: u32,
) -> Result<u32, NvmlError> {
    let nvml = dev.nvml();
    let sym = nvml_sym(nvml.lib().nvmlGpuInstanceCreateComputeInstance.as_ref())?;
    let info_sym = nvml_sym(nvml.lib().nvmlComputeInstanceGetInfo_v2.as_ref())?;
    let gi = gi_by_id(dev, gi_id)?;
    let profile = full_ci_profile_id(nvml, gi, compute_slices)?;
    let mut ci: nvmlComputeInstance_t = ptr::null_mut();
    // SAFETY: `gi` was just returned by this library; `ci` is a valid out pointer.
    nvml_try(unsafe { sym(gi, profile, &mut ci) })?;
    // SAFETY: plain data with nullable handles; all-zero is valid.
    let mut info: nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `ci` was just returned by this library.
    nvml_try(unsafe { info_sym(ci, &mut info) })?;
    Ok(info.id)
}

/// `nvmlComputeInstanceDestroy` of compute instance `ci_id` of GPU instance `gi_id`.
pub fn destroy_compute_instance(dev: &Device<'_>, gi_id: u32, ci_id: u32) -> Result<(), NvmlError> {
    let nvml = dev.nvml();
    let by_id = nvml_sym(nvml.lib().nvmlGpuInstanceGetComputeInstanceById.as_ref())?;
    let destroy = nvml_sym(nvml.lib().nvmlComputeInstanceDestroy.as_ref())?;
    let gi = gi_by_id(dev, gi_id)?;
    let mut ci: nvmlComputeInstance_t = ptr::null_mut();
    // SAFETY: `gi` was just returned by this library; `ci` is a valid out pointer.
    nvml_try(unsafe { by_id(gi, ci_id, &mut ci) })?;
    // SAFETY: `ci` was just returned by this library.
    nvml_try(unsafe { destroy(ci) })
}

/// `nvmlDeviceSetMigMode`; returns the activation status (`Ok(())` = done, else its error).
pub fn set_mig_mode(dev: &Device<'_>, enabled: bool) -> Result<Result<(), NvmlError>, NvmlError> {
    let sym = nvml_sym(dev.nvml().lib().nvmlDeviceSetMigMode.as_ref())?;
    let mode = if enabled {
        nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_ENABLE
    } else {
        nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_DISABLE
    };
    let mut activation: nvml_wrapper_sys::bindings::nvmlReturn_t = 0;
    // SAFETY: the handle comes from the live `dev`; `activation` is a valid out pointer.
    nvml_try(unsafe { sym(dev.handle(), mode, &mut activation) })?;
    Ok(nvml_try(activation))
}
