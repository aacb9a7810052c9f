//! XID events: registering each GPU with the backend's event set ([`register_xid`], retried
//! every sample until it succeeds or proves impossible) and draining the queued events once per
//! sample, attributed to GPU indices by device handle ([`drain_xids`]).
//!
//! It does not stamp events with their own time (NVML events carry none): they get the time of
//! the sample that drained them.

use std::collections::{BTreeMap, BTreeSet};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlEventTypeXidCriticalError};

use super::errors::note_missing;
use super::{GpuState, raw, trace};
use crate::model::XidEvent;

/// Most events drained from the event set in one sample.
const MAX_EVENTS_PER_SAMPLE: usize = 1024;

/// XID registration state of one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum XidRegistration {
    /// Not registered yet (or the last attempt failed transiently): try again next sample.
    #[default]
    Pending,
    Registered,
    /// The GPU (or the library) cannot deliver XID events.
    Unavailable,
}

/// Register a GPU for XID events if it is not yet.
pub(super) fn register_xid(
    events: Option<&raw::EventSet>,
    dev: &Device<'_>,
    state: &mut GpuState,
    missing: &mut BTreeSet<String>,
) {
    let Some(set) = events else {
        state.xid = XidRegistration::Unavailable;
        return;
    };
    if state.xid != XidRegistration::Pending {
        return;
    }
    state.xid = match trace::call("nvmlDeviceRegisterEvents", Some("xid"), || {
        raw::register_events(dev, nvmlEventTypeXidCriticalError as u64, set)
    }) {
        Ok(()) => XidRegistration::Registered,
        Err(NvmlError::NotSupported) => XidRegistration::Unavailable,
        Err(NvmlError::FailedToLoadSymbol(detail)) => {
            note_missing(missing, &detail);
            XidRegistration::Unavailable
        }
        Err(e) => {
            log::debug!("nvmlDeviceRegisterEvents failed ({e}); retrying next sample");
            XidRegistration::Pending
        }
    };
}

/// Drain every queued event (wait 0 ms until Timeout) and attribute XIDs to GPU indices.
pub(super) fn drain_xids(
    nvml: &Nvml,
    events: Option<&raw::EventSet>,
    handles: &[Option<nvmlDevice_t>],
    timestamp_ms: i64,
    missing: &mut BTreeSet<String>,
) -> BTreeMap<usize, Vec<XidEvent>> {
    let mut out: BTreeMap<usize, Vec<XidEvent>> = BTreeMap::new();
    let Some(set) = events else {
        return out;
    };
    for _ in 0..MAX_EVENTS_PER_SAMPLE {
        match trace::call_json(
            "nvmlEventSetWait_v2",
            Some("0ms"),
            || raw::event_wait(nvml, set, 0),
            |ev| serde_json::json!({"event_type": ev.event_type, "data": ev.data, "gpu_instance_id": ev.gpu_instance_id}),
        ) {
            Ok(ev) => {
                if ev.event_type & nvmlEventTypeXidCriticalError as u64 == 0 {
                    continue;
                }
                match handles.iter().position(|h| *h == Some(ev.device)) {
                    Some(i) => out.entry(i).or_default().push(XidEvent {
                        xid: ev.data,
                        timestamp_ms,
                        gpu_instance_id: (ev.gpu_instance_id != raw::NO_ID)
                            .then_some(ev.gpu_instance_id),
                    }),
                    None => log::warn!(
                        "XID {} from a device handle of no known GPU; dropped",
                        ev.data
                    ),
                }
            }
            Err(NvmlError::Timeout) => break,
            Err(NvmlError::FailedToLoadSymbol(detail)) => {
                note_missing(missing, &detail);
                break;
            }
            Err(e) => {
                log::debug!("nvmlEventSetWait_v2 failed ({e}); events left for the next sample");
                break;
            }
        }
    }
    out
}
