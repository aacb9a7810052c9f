//! Processes: the running compute processes of a GPU and a process's name.
//!
//! Per-process utilisation (`nvmlDeviceGetProcessUtilization`) is a newer function, in
//! `extra_exports`; the driver's buffer of those readings, which both libraries keep, is
//! `process_buffer`.

use std::ffi::{c_char, c_uint};

use nvml_wrapper_sys::bindings::*;
use tessera_core::model::Field;

use super::readings::physical;
use crate::state::{
    INSUFFICIENT_SIZE, INVALID_ARGUMENT, NO_ID, NOT_FOUND, device_call, put_str, system_call,
};

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
