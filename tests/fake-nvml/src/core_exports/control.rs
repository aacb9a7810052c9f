//! The control symbols (not NVML) tests call through `dlopen`: load a scenario, set, advance
//! and read virtual time, inject errors.
//!
//! It answers no NVML call.

use std::ffi::{c_char, c_int};
use std::path::Path;

use crate::state::{self, Ret, c_str};

/// Load `node` (null: the first node) of the scenario file at `path`. Returns 0, or -1 with the
/// reason on stderr. Virtual time restarts at the scenario start; injected errors are cleared.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tesseraFakeLoadScenario(
    path: *const c_char,
    node: *const c_char,
) -> c_int {
    // SAFETY: per the contract, both are null or NUL-terminated strings.
    let (path, node) = unsafe { (c_str(path), c_str(node)) };
    let Some(path) = path else {
        eprintln!("tessera fake NVML: tesseraFakeLoadScenario needs a path");
        return -1;
    };
    state::control(-1, |f| match f.load(Path::new(path), node) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tessera fake NVML: {e}");
            -1
        }
    })
}

/// Set virtual time (unix ms).
#[unsafe(no_mangle)]
pub extern "C" fn tesseraFakeSetTimeMs(t_ms: i64) {
    state::control((), |f| f.set_time(t_ms));
}

/// Move virtual time forward by `delta_ms`.
#[unsafe(no_mangle)]
pub extern "C" fn tesseraFakeAdvanceMs(delta_ms: i64) {
    state::control((), |f| {
        let now = f.now_ms();
        f.set_time(now + delta_ms);
    });
}

/// Current virtual time (unix ms).
#[unsafe(no_mangle)]
pub extern "C" fn tesseraFakeTimeMs() -> i64 {
    state::control(0, |f| f.now_ms())
}

/// Force `function` to return `nvml_return` for GPU `device_index` (-1: every device and calls
/// without a device). `nvml_return == 0` clears; a null `function` clears every injection.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tesseraFakeInjectError(
    function: *const c_char,
    device_index: c_int,
    nvml_return: c_int,
) {
    // SAFETY: null or a NUL-terminated string per the contract.
    let name = unsafe { c_str(function) };
    state::control((), |f| match name {
        Some(name) => f.inject(name, device_index, nvml_return as Ret),
        None => f.injections.clear(),
    });
}
