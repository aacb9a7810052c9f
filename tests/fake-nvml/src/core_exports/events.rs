//! Events: event sets, supported event types, registration, and waiting for XID events.
//!
//! It does not make events: they come from the simulated node's readings.

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::*;

use crate::state::{
    self, EventSetState, INVALID_ARGUMENT, NO_ID, NOT_SUPPORTED, TIMEOUT, XID_EVENT, device_call,
    device_handle, put, system_call,
};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    system_call("nvmlEventSetCreate", |f| {
        let id = f.new_id();
        f.event_sets.insert(id, EventSetState::default());
        // SAFETY: `set` is null or a valid out pointer.
        unsafe { put(set, state::id_handle(id)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    state::with(|f| {
        if let Some(ret) = f.injected("nvmlEventSetFree", None) {
            return Err(ret);
        }
        f.event_sets
            .remove(&set.addr())
            .map(|_| ())
            .ok_or(INVALID_ARGUMENT)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    event_types: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetSupportedEventTypes", device, |_, _| {
        // SAFETY: `event_types` is null or a valid out pointer.
        unsafe { put(event_types, XID_EVENT) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    event_types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceRegisterEvents", device, |f, d| {
        if d.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        if event_types & !XID_EVENT != 0 {
            return Err(NOT_SUPPORTED);
        }
        let s = f.event_sets.get_mut(&set.addr()).ok_or(INVALID_ARGUMENT)?;
        *s.registered.entry(d.gpu).or_insert(0) |= event_types;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    _timeout_ms: c_uint,
) -> nvmlReturn_t {
    system_call("nvmlEventSetWait_v2", |f| {
        let s = f.event_sets.get_mut(&set.addr()).ok_or(INVALID_ARGUMENT)?;
        let ev = s.queue.pop_front().ok_or(TIMEOUT)?;
        let out = nvmlEventData_t {
            device: device_handle(ev.gpu, None),
            eventType: XID_EVENT,
            eventData: ev.xid,
            gpuInstanceId: ev.gpu_instance_id,
            computeInstanceId: NO_ID,
        };
        // SAFETY: `data` is null or a valid out pointer.
        unsafe { put(data, out) }
    })
}
