//! NVML functions every driver tessera supports has (both fake libraries export these), plus the
//! `tesseraFake*` control symbols tests call through `dlopen`.
//!
//! Safety contract of every function here: NVML's C API. Pointer arguments are null (rejected
//! with `NVML_ERROR_INVALID_ARGUMENT`) or valid for the documented reads/writes; string buffers
//! hold the given length. No function unwinds into the caller.

#![allow(clippy::missing_safety_doc)]
// bindgen names the NVML constants matched on here.
#![allow(non_upper_case_globals)]

mod control;
mod device;
mod events;
mod init;
mod mig;
mod processes;
mod readings;

// Used by `extra_exports`, which tests/fake-nvml-old leaves out.
#[allow(unused_imports)]
pub use readings::clocks_event_reasons;
