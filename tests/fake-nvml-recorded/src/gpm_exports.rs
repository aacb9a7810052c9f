//! The GPM functions of the recorded library: support query, sample alloc/get/free (handles that
//! remember the GPU and GPU instance they were filled for) and the metrics-get, which writes the
//! recorded values into the request in the order asked.
//!
//! It keeps no state but the GPM sample handles.

use super::*;

// ---- GPM -------------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: nvmlDevice_t,
    support: *mut nvmlGpmSupport_t,
) -> nvmlReturn_t {
    device_answer("nvmlGpmQueryDeviceSupport", device, None, |x| {
        if support.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null and writable per the contract.
        unsafe { (*support).isSupportedDevice = u32::from(x.as_bool().unwrap_or(false)) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut nvmlGpmSample_t) -> nvmlReturn_t {
    let mut g = GPM.lock().unwrap_or_else(|e| e.into_inner());
    g.push(None);
    let id = g.len();
    // SAFETY: null or a valid out pointer per the contract.
    match unsafe { put(sample, (0x3000_0000usize + id) as nvmlGpmSample_t) } {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

fn gpm_slot(sample: nvmlGpmSample_t) -> Option<usize> {
    (sample as usize).checked_sub(0x3000_0001)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleFree(sample: nvmlGpmSample_t) -> nvmlReturn_t {
    match gpm_slot(sample) {
        Some(_) => SUCCESS,
        None => INVALID_ARGUMENT,
    }
}

fn gpm_get(device: nvmlDevice_t, gi: Option<u32>, sample: nvmlGpmSample_t) -> Ret {
    let Some((gpu, _)) = decode(device) else {
        return INVALID_ARGUMENT;
    };
    let (function, arg) = match gi {
        None => ("nvmlGpmSampleGet", None),
        Some(gi) => ("nvmlGpmMigSampleGet", Some(format!("gpu_instance={gi}"))),
    };
    answer(function, Some(gpu), None, arg.as_deref(), |_| {
        let slot = gpm_slot(sample).ok_or(INVALID_ARGUMENT)?;
        let mut g = GPM.lock().unwrap_or_else(|e| e.into_inner());
        let s = g.get_mut(slot).ok_or(INVALID_ARGUMENT)?;
        *s = Some((gpu, gi));
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleGet(
    device: nvmlDevice_t,
    sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    gpm_get(device, None, sample)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMigSampleGet(
    device: nvmlDevice_t,
    gpu_instance_id: c_uint,
    sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    gpm_get(device, Some(gpu_instance_id), sample)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMetricsGet(m: *mut nvmlGpmMetricsGet_t) -> nvmlReturn_t {
    if m.is_null() {
        return INVALID_ARGUMENT;
    }
    // SAFETY: non-null and valid for reads and writes per the contract.
    let m = unsafe { &mut *m };
    let owner = {
        let g = GPM.lock().unwrap_or_else(|e| e.into_inner());
        gpm_slot(m.sample2).and_then(|s| g.get(s).copied().flatten())
    };
    let Some((gpu, gi)) = owner else {
        return INVALID_ARGUMENT;
    };
    let arg = gi.map(|gi| format!("gpu_instance={gi}"));
    answer("nvmlGpmMetricsGet", Some(gpu), None, arg.as_deref(), |x| {
        let values = x.as_array().ok_or(UNKNOWN)?;
        let n = (m.numMetrics as usize).min(m.metrics.len());
        for (j, metric) in m.metrics[..n].iter_mut().enumerate() {
            match values.get(j).and_then(Value::as_f64) {
                Some(v) => {
                    metric.value = v;
                    metric.nvmlReturn = SUCCESS;
                }
                None => {
                    metric.value = 0.0;
                    metric.nvmlReturn = values
                        .get(j)
                        .and_then(Value::as_str)
                        .map_or(NOT_SUPPORTED, ret_of);
                }
            }
            metric.metricInfo.shortName = std::ptr::null_mut();
            metric.metricInfo.longName = std::ptr::null_mut();
            metric.metricInfo.unit = std::ptr::null_mut();
        }
        Ok(())
    })
}
