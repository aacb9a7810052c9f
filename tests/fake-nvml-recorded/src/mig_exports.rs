//! The MIG inventory functions of the recorded library: a GPU instance by id and its info
//! (profile and placement), answered from the recorded `nvmlGpuInstanceGetInfo` call.
//!
//! It keeps no state.

use super::*;

// ---- MIG GPU instances (inventory) -----------------------------------------------------------

/// A GPU instance handle: GPU index and GPU instance id, never null.
fn gpu_instance_handle(gpu: u32, gi: u32) -> nvmlGpuInstance_t {
    (0x4000_0000usize + ((gpu as usize) << 12) + gi as usize) as nvmlGpuInstance_t
}

fn decode_gpu_instance(h: nvmlGpuInstance_t) -> Option<(u32, u32)> {
    let v = (h as usize).checked_sub(0x4000_0000)?;
    Some(((v >> 12) as u32, (v & 0xfff) as u32))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: nvmlDevice_t,
    id: c_uint,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    let Some((gpu, None)) = decode(device) else {
        return INVALID_ARGUMENT;
    };
    // Recorded as one call with the info: the handle exists where the info was read.
    let arg = format!("gpu_instance={id}");
    let call = match recording::lock().as_mut() {
        Some(r) if r.init_count > 0 => {
            r.peek("nvmlGpuInstanceGetInfo", Some(gpu), None, Some(&arg))
        }
        _ => return UNINITIALIZED,
    };
    match call {
        Some(c) if ret_of(&c.rc) == SUCCESS => {
            // SAFETY: null or a valid out pointer per the contract.
            match unsafe { put(gpu_instance, gpu_instance_handle(gpu, id)) } {
                Ok(()) => SUCCESS,
                Err(e) => e,
            }
        }
        Some(c) => ret_of(&c.rc),
        None => NOT_SUPPORTED,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpuInstanceGetInfo(
    gpu_instance: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    let Some((gpu, gi)) = decode_gpu_instance(gpu_instance) else {
        return INVALID_ARGUMENT;
    };
    let arg = format!("gpu_instance={gi}");
    answer("nvmlGpuInstanceGetInfo", Some(gpu), None, Some(&arg), |x| {
        // SAFETY: nvmlGpuInstanceInfo_t is plain old data; all zeroes is a valid value.
        let mut i: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
        i.device = device_handle(gpu, None);
        i.id = gi;
        i.profileId = u32_of(field(x, "profile_id"))?;
        i.placement.start = u32_of(field(field(x, "placement"), "start"))?;
        i.placement.size = u32_of(field(field(x, "placement"), "size"))?;
        // SAFETY: null or a valid out pointer per the contract.
        unsafe { put(info, i) }
    })
}
