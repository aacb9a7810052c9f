//! Error mapping of the NVML backend: an [`NvmlError`] as the short token of
//! [`FieldError::kind`] ([`error_kind`]), as a [`DeviceError`] for calls with no GPU to blame,
//! and the per-field rules of the module docs applied to one GPU's reads ([`Reads`]:
//! NotSupported → `None`, missing function → `None` and one warning, GpuIsLost → [`Lost`],
//! anything else → `None` and a field error).
//!
//! It makes no NVML calls itself.

use std::collections::BTreeSet;

use nvml_wrapper::error::NvmlError;

use crate::device::DeviceError;
use crate::model::{Field, FieldError};

/// The short, stable token of an NVML error, as used in [`FieldError::kind`].
pub fn error_kind(e: &NvmlError) -> &'static str {
    match e {
        NvmlError::Unknown => "unknown",
        NvmlError::Timeout => "timeout",
        NvmlError::NoPermission => "no_permission",
        NvmlError::GpuLost => "gpu_lost",
        NvmlError::InsufficientSize(_) => "insufficient_size",
        NvmlError::Uninitialized => "uninitialized",
        NvmlError::InvalidArg => "invalid_argument",
        NvmlError::NotSupported => "not_supported",
        NvmlError::NotFound => "not_found",
        NvmlError::InsufficientPower => "insufficient_power",
        NvmlError::DriverNotLoaded => "driver_not_loaded",
        NvmlError::IrqIssue => "irq_issue",
        NvmlError::LibraryNotFound => "library_not_found",
        NvmlError::FunctionNotFound => "function_not_found",
        NvmlError::CorruptedInfoROM => "corrupted_inforom",
        NvmlError::ResetRequired => "reset_required",
        NvmlError::OperatingSystem => "operating_system",
        NvmlError::LibRmVersionMismatch => "lib_rm_version_mismatch",
        NvmlError::InUse => "in_use",
        NvmlError::InsufficientMemory => "insufficient_memory",
        NvmlError::NoData => "no_data",
        NvmlError::FailedToLoadSymbol(_) => "missing_symbol",
        NvmlError::LibloadingError(_) => "library_not_found",
        NvmlError::Utf8Error(_) | NvmlError::NulError(_) => "bad_string",
        _ => "unexpected",
    }
}

/// The symbol named in a `FailedToLoadSymbol` message (libloading says `...: undefined symbol: X`).
pub(super) fn missing_symbol_name(detail: &str) -> String {
    detail
        .rsplit("undefined symbol: ")
        .next()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| detail.to_string())
}

/// Map a failed call that has no GPU to blame to a [`DeviceError`].
pub(super) fn call_error(call: &str, e: NvmlError) -> DeviceError {
    match e {
        NvmlError::FailedToLoadSymbol(detail) => DeviceError::MissingSymbol {
            symbol: missing_symbol_name(&detail),
        },
        NvmlError::DriverNotLoaded => DeviceError::DriverNotLoaded {
            detail: format!("{call} returned NVML_ERROR_DRIVER_NOT_LOADED"),
        },
        e => DeviceError::Nvml {
            call: call.to_string(),
            kind: error_kind(&e).to_string(),
        },
    }
}

/// Map an `Nvml::init` failure to a [`DeviceError`].
pub(super) fn init_error(lib: &str, e: NvmlError) -> DeviceError {
    match e {
        NvmlError::LibloadingError(err) => {
            let text = err.to_string();
            let detail = if text.contains("No such file") || text.contains("cannot open") {
                format!("{lib} not found")
            } else {
                format!("{lib} could not be loaded ({text})")
            };
            DeviceError::LibraryNotFound { detail }
        }
        NvmlError::DriverNotLoaded => DeviceError::DriverNotLoaded {
            detail: "nvmlInit_v2 returned NVML_ERROR_DRIVER_NOT_LOADED".into(),
        },
        e => call_error("nvmlInit_v2", e),
    }
}

/// The GPU was lost (`NVML_ERROR_GPU_IS_LOST`) during a read.
pub(super) struct Lost;

/// Collects the outcome of one GPU's reads.
pub(super) struct Reads<'a> {
    pub(super) errors: Vec<(String, String)>,
    pub(super) missing: &'a mut BTreeSet<String>,
    pub(super) driver_down: bool,
}

impl Reads<'_> {
    /// Apply the rules to one call's result: NotSupported → `None`; missing symbol → `None` and a
    /// warning; GpuIsLost → `Err(Lost)`; anything else → `None` and a field error.
    pub(super) fn take<T>(
        &mut self,
        field: &str,
        r: Result<T, NvmlError>,
    ) -> Result<Option<T>, Lost> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(NvmlError::NotSupported) => Ok(None),
            Err(NvmlError::GpuLost) => Err(Lost),
            Err(NvmlError::FailedToLoadSymbol(detail)) => {
                note_missing(self.missing, &detail);
                Ok(None)
            }
            Err(e) => {
                if matches!(e, NvmlError::Uninitialized | NvmlError::DriverNotLoaded) {
                    self.driver_down = true;
                }
                self.errors
                    .push((field.to_string(), error_kind(&e).to_string()));
                Ok(None)
            }
        }
    }

    /// The field errors, one per field, in the simulator's field order.
    pub(super) fn into_errors(self) -> Vec<FieldError> {
        let mut seen = BTreeSet::new();
        let mut errors: Vec<FieldError> = self
            .errors
            .into_iter()
            .filter(|(f, _)| seen.insert(f.clone()))
            .map(|(field, kind)| FieldError { field, kind })
            .collect();
        errors.sort_by_key(|e| Field::parse(&e.field));
        // `None` (a name that is no simulator field, e.g. `uuid`) sorts first; put it last.
        errors.sort_by_key(|e| Field::parse(&e.field).is_none());
        errors
    }
}

pub(super) fn note_missing(missing: &mut BTreeSet<String>, detail: &str) {
    let name = missing_symbol_name(detail);
    if missing.insert(name.clone()) {
        log::warn!(
            "NVML function {name} is missing from the loaded library (driver too old?); its values are absent"
        );
    }
}
