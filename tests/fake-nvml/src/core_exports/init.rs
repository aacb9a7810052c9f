//! Init, shutdown and error strings (`nvmlInit_v2`, `nvmlInitWithFlags`, `nvmlShutdown`,
//! `nvmlErrorString`), and the system queries: driver, NVML and CUDA versions.
//!
//! It reads no device; process names are in [`super::processes`].

use std::ffi::{c_char, c_int, c_uint};

use nvml_wrapper_sys::bindings::*;

use crate::state::{
    self, INSUFFICIENT_SIZE, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, Ret, SUCCESS, TIMEOUT,
    UNINITIALIZED, put, put_str, system_call,
};

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
