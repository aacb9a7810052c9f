//! A fake `libnvidia-ml.so` that answers from a recording of a real GPU: the "recorded" mode of
//! the fake library (issue 28). The GPU check kit (`scripts/gpu-check.sh`) records every NVML
//! call tessera's backend makes on a real GPU (`TESSERA_NVML_TRACE`, `core/src/nvml/trace.rs`);
//! this library, loaded with `--nvml.lib-path`, replays that file (`TESSERA_FAKE_NVML_RECORDING`,
//! optionally cut to its first N samples with `TESSERA_FAKE_NVML_RECORDING_SAMPLES`), so the
//! exporter's output on the recording can be compared in CI with what it printed on the GPU
//! (`fixtures/real/<gpu-model>/`, `tests/e2e/tests/real_gpu.rs`).
//!
//! It exports the calls the backend makes when it reads (the ones the recording names) and the
//! bookkeeping around them (init, shutdown, GPM sample alloc/free, event set free). The values
//! are written back into NVML's C structures from nvml-wrapper's serde form as recorded; the
//! return code is the recorded one. Which recorded call answers which call:
//! [`recording`]'s module docs.
//!
//! It does not simulate anything: no time passes, nothing is computed, and a call the recording
//! lacks answers `NVML_ERROR_NOT_SUPPORTED`. MIG inventory calls that tessera does not trace
//! (GPU instance info by id) are not exported, so a recording made with MIG on replays without
//! MIG profiles and placements. A symbol missing from the recorded driver is recorded as
//! `missing_symbol` and replayed as `NVML_ERROR_FUNCTION_NOT_FOUND`.
//!
//! This crate is test tooling: it is never linked into the exporter.

#![allow(clippy::missing_safety_doc)]

pub mod recording;

use std::ffi::{c_char, c_int, c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::*;
use serde_json::Value;

use recording::{Call, Replay};

type Ret = nvmlReturn_t;
const SUCCESS: Ret = nvmlReturn_enum_NVML_SUCCESS;
const UNINITIALIZED: Ret = nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
const INVALID_ARGUMENT: Ret = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const NOT_SUPPORTED: Ret = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const INSUFFICIENT_SIZE: Ret = nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
const UNKNOWN: Ret = nvmlReturn_enum_NVML_ERROR_UNKNOWN;

/// The NVML return code of a recorded `rc` token (tessera's `error_kind`).
pub fn ret_of(rc: &str) -> Ret {
    match rc {
        "success" => SUCCESS,
        "uninitialized" => UNINITIALIZED,
        "invalid_argument" => INVALID_ARGUMENT,
        "not_supported" => NOT_SUPPORTED,
        "no_permission" => nvmlReturn_enum_NVML_ERROR_NO_PERMISSION,
        "not_found" => nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
        "insufficient_size" => INSUFFICIENT_SIZE,
        "insufficient_power" => nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_POWER,
        "driver_not_loaded" => nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
        "timeout" => nvmlReturn_enum_NVML_ERROR_TIMEOUT,
        "irq_issue" => nvmlReturn_enum_NVML_ERROR_IRQ_ISSUE,
        "library_not_found" => nvmlReturn_enum_NVML_ERROR_LIBRARY_NOT_FOUND,
        "missing_symbol" | "function_not_found" => nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND,
        "corrupted_inforom" => nvmlReturn_enum_NVML_ERROR_CORRUPTED_INFOROM,
        "gpu_lost" => nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST,
        "reset_required" => nvmlReturn_enum_NVML_ERROR_RESET_REQUIRED,
        "operating_system" => nvmlReturn_enum_NVML_ERROR_OPERATING_SYSTEM,
        "lib_rm_version_mismatch" => nvmlReturn_enum_NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        "in_use" => nvmlReturn_enum_NVML_ERROR_IN_USE,
        "insufficient_memory" => nvmlReturn_enum_NVML_ERROR_MEMORY,
        "no_data" => nvmlReturn_enum_NVML_ERROR_NO_DATA,
        _ => UNKNOWN,
    }
}

// ---- handles ---------------------------------------------------------------------------------

/// A device handle: GPU index and MIG device index, never null.
fn device_handle(gpu: u32, mig: Option<u32>) -> nvmlDevice_t {
    let v = 0x1000_0000usize + ((gpu as usize) << 12) + mig.map_or(0, |m| m as usize + 1);
    v as nvmlDevice_t
}

fn decode(h: nvmlDevice_t) -> Option<(u32, Option<u32>)> {
    let v = (h as usize).checked_sub(0x1000_0000)?;
    let gpu = (v >> 12) as u32;
    let mig = (v & 0xfff).checked_sub(1).map(|m| m as u32);
    Some((gpu, mig))
}

/// The GPU and GPU instance a GPM sample was filled for.
type GpmOwner = (u32, Option<u32>);

/// GPM sample handles by id: what each was filled for.
static GPM: std::sync::Mutex<Vec<Option<GpmOwner>>> = std::sync::Mutex::new(Vec::new());

// ---- the call wrapper ------------------------------------------------------------------------

/// Answer one call from the recording: `write` puts the recorded value into the out pointers
/// when the recorded call succeeded.
fn answer(
    function: &str,
    gpu: Option<u32>,
    mig: Option<u32>,
    arg: Option<&str>,
    write: impl FnOnce(&Value) -> Result<(), Ret>,
) -> Ret {
    let call: Option<Call> = {
        let mut guard = recording::lock();
        let Some(r) = guard.as_mut() else {
            return UNINITIALIZED;
        };
        if r.init_count == 0 {
            return UNINITIALIZED;
        }
        r.answer(function, gpu, mig, arg)
    };
    let Some(call) = call else {
        return NOT_SUPPORTED;
    };
    let ret = ret_of(&call.rc);
    if ret != SUCCESS {
        return ret;
    }
    // A panic must not cross the C boundary.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write(&call.value))) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => UNKNOWN,
    }
}

fn device_answer(
    function: &str,
    device: nvmlDevice_t,
    arg: Option<&str>,
    write: impl FnOnce(&Value) -> Result<(), Ret>,
) -> Ret {
    match decode(device) {
        Some((gpu, mig)) => answer(function, Some(gpu), mig, arg, write),
        None => INVALID_ARGUMENT,
    }
}

unsafe fn put<T>(p: *mut T, v: T) -> Result<(), Ret> {
    if p.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    // SAFETY: non-null and writable per the NVML contract of the caller.
    unsafe { p.write(v) };
    Ok(())
}

unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), Ret> {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let bytes = s.as_bytes();
    if bytes.len() + 1 > len as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` holds `len > bytes.len()` bytes per the contract.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), buf, bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    Ok(())
}

fn fill(dst: &mut [c_char], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().chain(std::iter::once(0))) {
        *d = b as c_char;
    }
}

fn u64_of(v: &Value) -> Result<u64, Ret> {
    v.as_u64().ok_or(UNKNOWN)
}
fn u32_of(v: &Value) -> Result<u32, Ret> {
    u64_of(v).and_then(|x| u32::try_from(x).map_err(|_| UNKNOWN))
}
fn field<'a>(v: &'a Value, name: &str) -> &'a Value {
    v.get(name).unwrap_or(&Value::Null)
}
fn str_of(v: &Value) -> Result<&str, Ret> {
    v.as_str().ok_or(UNKNOWN)
}

mod exports;
mod gpm_exports;
mod mig_exports;
