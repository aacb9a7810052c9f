//! NVML functions of newer drivers, exported only by the full fake library (`libnvidia_ml.so`),
//! not by the "old driver" one: total energy, the renamed clock event reasons, per-process
//! utilisation, GPU instance placements, and GPM.
//!
//! Safety contract: as in `core_exports` (NVML's C API; null pointers are rejected).

#![allow(clippy::missing_safety_doc)]
// bindgen names the NVML constants matched on here.
#![allow(non_upper_case_globals)]

use std::ffi::{c_uint, c_ulonglong};

use nvml_wrapper_sys::bindings::*;
use tessera_core::model::Field;

use crate::core_exports::clocks_event_reasons;
use crate::state::{
    self, GpmSnap, INSUFFICIENT_SIZE, INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED, SUCCESS,
    UNINITIALIZED, VERSION_MISMATCH, device_call, put,
};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetTotalEnergyConsumption", device, |f, d| {
        if d.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        let j = f
            .field(d.gpu, Field::Energy)?
            .sample
            .energy_joules
            .ok_or(NOT_SUPPORTED)?;
        // SAFETY: `energy` is null or a valid out pointer.
        unsafe { put(energy, (j * 1000.0).round() as c_ulonglong) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: nvmlDevice_t,
    reasons: *mut c_ulonglong,
) -> nvmlReturn_t {
    clocks_event_reasons("nvmlDeviceGetCurrentClocksEventReasons", device, reasons)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen_timestamp: c_ulonglong,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetProcessUtilization", device, |f, d| {
        if count.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        if d.mig.is_some() {
            return Err(NOT_SUPPORTED);
        }
        let mig_on = f.sim_gpu(d.gpu)?.mig.is_some();
        let unsupported = f.unsupported(d.gpu, Field::ProcessUtilization);
        let g = f.field(d.gpu, Field::ProcessUtilization)?;
        let procs = &g.sample.processes;
        // NVML has no per-process utilisation in MIG mode.
        if mig_on || unsupported || procs.iter().any(|p| p.sm_ratio.is_none()) {
            return Err(NOT_SUPPORTED);
        }
        // Every reading the driver kept that is newer than the caller's timestamp.
        let samples: Vec<nvmlProcessUtilizationSample_t> = f
            .process_readings
            .get(&d.gpu)
            .into_iter()
            .flatten()
            .filter(|(us, _, _)| *us > last_seen_timestamp)
            .map(|&(us, pid, sm)| nvmlProcessUtilizationSample_t {
                pid,
                timeStamp: us,
                smUtil: sm,
                memUtil: 0,
                encUtil: 0,
                decUtil: 0,
            })
            .collect();
        if samples.is_empty() {
            // No sample newer than `last_seen_timestamp`.
            return Err(NOT_FOUND);
        }
        // SAFETY: non-null and valid for reads and writes per the contract.
        let capacity = unsafe { *count } as usize;
        // SAFETY: as above.
        unsafe { *count = samples.len() as c_uint };
        if utilization.is_null() || capacity < samples.len() {
            return Err(INSUFFICIENT_SIZE);
        }
        // SAFETY: `utilization` holds `capacity >= samples.len()` elements per the contract.
        unsafe { std::ptr::copy_nonoverlapping(samples.as_ptr(), utilization, samples.len()) };
        Ok(())
    })
}

/// The v2 profile info (with the profile's name, `MIG 1g.10gb`): newer drivers only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceProfileInfoV(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_v2_t,
) -> nvmlReturn_t {
    device_call("nvmlDeviceGetGpuInstanceProfileInfoV", device, |f, d| {
        if info.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let expected = (std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() | (2 << 24)) as u32;
        // SAFETY: non-null and readable per the contract (the caller sets `version`).
        if unsafe { (*info).version } != expected {
            return Err(VERSION_MISMATCH);
        }
        let model = f.model(d.gpu)?;
        if d.mig.is_some() || !model.supports_mig() {
            return Err(NOT_SUPPORTED);
        }
        let p = state::patched_profile(model.profile_by_index(profile).ok_or(INVALID_ARGUMENT)?)?;
        let mut out = nvmlGpuInstanceProfileInfo_v2_t {
            version: expected,
            id: p.id,
            isP2pSupported: 0,
            sliceCount: p.compute_slices,
            instanceCount: p.max_count,
            multiprocessorCount: p.compute_slices * 16,
            copyEngineCount: p.compute_slices,
            decoderCount: p.compute_slices.div_ceil(2),
            encoderCount: 0,
            jpegCount: u32::from(p.media_extensions),
            ofaCount: u32::from(p.media_extensions),
            memorySizeMB: p.memory_bytes / (1024 * 1024),
            name: [0; 96],
        };
        state::fill_array(&mut out.name, &format!("MIG {}", p.name));
        // SAFETY: non-null and writable.
        unsafe { put(info, out) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    device: nvmlDevice_t,
    profile_id: c_uint,
    placements: *mut nvmlGpuInstancePlacement_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    device_call(
        "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
        device,
        |f, d| {
            if count.is_null() {
                return Err(INVALID_ARGUMENT);
            }
            let model = f.model(d.gpu)?;
            if d.mig.is_some() || !model.supports_mig() {
                return Err(NOT_SUPPORTED);
            }
            let profile =
                state::patched_profile(model.profile(profile_id).ok_or(INVALID_ARGUMENT)?)?;
            let list: Vec<nvmlGpuInstancePlacement_t> = profile
                .placements()
                .map(|p| nvmlGpuInstancePlacement_t {
                    start: p.start,
                    size: p.size,
                })
                .collect();
            if placements.is_null() {
                // SAFETY: non-null and writable per the contract.
                unsafe { *count = list.len() as c_uint };
                return Ok(());
            }
            // SAFETY: non-null and valid for reads and writes per the contract.
            let capacity = unsafe { *count } as usize;
            // SAFETY: as above.
            unsafe { *count = list.len() as c_uint };
            if capacity < list.len() {
                return Err(INSUFFICIENT_SIZE);
            }
            // SAFETY: `placements` holds `capacity >= list.len()` elements per the contract.
            unsafe { std::ptr::copy_nonoverlapping(list.as_ptr(), placements, list.len()) };
            Ok(())
        },
    )
}

// ---- GPM -----------------------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: nvmlDevice_t,
    gpm_support: *mut nvmlGpmSupport_t,
) -> nvmlReturn_t {
    device_call("nvmlGpmQueryDeviceSupport", device, |f, d| {
        if gpm_support.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null and readable per the contract (the caller sets `version`).
        if unsafe { (*gpm_support).version } != NVML_GPM_SUPPORT_VERSION {
            return Err(VERSION_MISMATCH);
        }
        let supported = d.mig.is_none() && f.model(d.gpu)?.gpm;
        let out = nvmlGpmSupport_t {
            version: NVML_GPM_SUPPORT_VERSION,
            isSupportedDevice: supported as c_uint,
        };
        // SAFETY: non-null and writable.
        unsafe { put(gpm_support, out) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(gpm_sample: *mut nvmlGpmSample_t) -> nvmlReturn_t {
    state::with(|f| {
        if f.init_count == 0 {
            return Err(UNINITIALIZED);
        }
        if let Some(ret) = f.injected("nvmlGpmSampleAlloc", None) {
            return Err(ret);
        }
        let id = f.new_id();
        // SAFETY: `gpm_sample` is null or a valid out pointer.
        unsafe { put(gpm_sample, state::id_handle(id))? };
        f.gpm.insert(id, GpmSnap::default());
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleFree(gpm_sample: nvmlGpmSample_t) -> nvmlReturn_t {
    state::with(|f| {
        if let Some(ret) = f.injected("nvmlGpmSampleFree", None) {
            return Err(ret);
        }
        f.gpm
            .remove(&gpm_sample.addr())
            .map(|_| ())
            .ok_or(INVALID_ARGUMENT)
    })
}

/// Fill a GPM sample of a device (`gpu_instance: None`) or of one of its GPU instances.
fn gpm_fill(
    function: &str,
    device: nvmlDevice_t,
    gpu_instance: Option<u32>,
    sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    device_call(function, device, |f, d| {
        if d.mig.is_some() || !f.model(d.gpu)?.gpm {
            return Err(NOT_SUPPORTED);
        }
        if !f.gpm.contains_key(&sample.addr()) {
            return Err(INVALID_ARGUMENT);
        }
        let g = f.gpu(d.gpu)?;
        let error = g.errors.get(&Field::Gpm).map(|k| state::kind_to_ret(k));
        let (sm, occupancy, profiling, pcie) = match gpu_instance {
            None => (
                g.sample.sm_active_ratio,
                g.sample.sm_occupancy_ratio,
                g.sample.profiling,
                (
                    g.sample.pcie_tx_bytes_per_second,
                    g.sample.pcie_rx_bytes_per_second,
                ),
            ),
            Some(gi) => {
                let sim = f.sim_gpu(d.gpu)?;
                let pos = sim
                    .mig
                    .as_ref()
                    .ok_or(NOT_SUPPORTED)?
                    .iter()
                    .position(|m| m.gpu_instance_id == gi)
                    .ok_or(NOT_FOUND)?;
                let m = g.sample.mig.get(pos);
                (
                    m.and_then(|m| m.sm_active_ratio),
                    None,
                    m.map(|m| m.profiling).unwrap_or_default(),
                    (None, None),
                )
            }
        };
        let snap = GpmSnap {
            gpu: Some(d.gpu),
            gpu_instance,
            time_ms: f.now_ms(),
            sm,
            occupancy,
            profiling,
            pcie_tx: pcie.0,
            pcie_rx: pcie.1,
            error,
        };
        f.gpm.insert(sample.addr(), snap);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmSampleGet(
    device: nvmlDevice_t,
    gpm_sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    gpm_fill("nvmlGpmSampleGet", device, None, gpm_sample)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMigSampleGet(
    device: nvmlDevice_t,
    gpu_instance_id: c_uint,
    gpm_sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    gpm_fill(
        "nvmlGpmMigSampleGet",
        device,
        Some(gpu_instance_id),
        gpm_sample,
    )
}

/// Metrics between two samples, from the later sample's reading: SM_UTIL and SM_OCCUPANCY in
/// percent; any other metric is NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlGpmMetricsGet(metrics_get: *mut nvmlGpmMetricsGet_t) -> nvmlReturn_t {
    state::with(|f| {
        if f.init_count == 0 {
            return Err(UNINITIALIZED);
        }
        if metrics_get.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // SAFETY: non-null and valid for reads and writes per the contract.
        let m = unsafe { &mut *metrics_get };
        if m.version != NVML_GPM_METRICS_GET_VERSION {
            return Err(VERSION_MISMATCH);
        }
        let first = f
            .gpm
            .get(&m.sample1.addr())
            .cloned()
            .ok_or(INVALID_ARGUMENT)?;
        let second = f
            .gpm
            .get(&m.sample2.addr())
            .cloned()
            .ok_or(INVALID_ARGUMENT)?;
        let (Some(gpu), Some(gpu2)) = (first.gpu, second.gpu) else {
            return Err(INVALID_ARGUMENT);
        };
        if gpu != gpu2
            || first.gpu_instance != second.gpu_instance
            || second.time_ms < first.time_ms
        {
            return Err(INVALID_ARGUMENT);
        }
        if let Some(ret) = f.injected("nvmlGpmMetricsGet", Some(gpu)) {
            return Err(ret);
        }
        if let Some(ret) = second.error {
            return Err(ret);
        }
        let n = m.numMetrics as usize;
        if n > m.metrics.len() {
            return Err(INVALID_ARGUMENT);
        }
        for metric in &mut m.metrics[..n] {
            // Ratios as percentages; PCIe and NVLink in MiB/s, as GPM gives them.
            const MIB: f64 = 1_048_576.0;
            let p = &second.profiling;
            let value = match metric.metricId {
                nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_UTIL => second.sm.map(|v| v * 100.0),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_OCCUPANCY => {
                    second.occupancy.map(|v| v * 100.0)
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_ANY_TENSOR_UTIL => {
                    p.tensor_active_ratio.map(|v| v * 100.0)
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_DFMA_TENSOR_UTIL => {
                    p.tensor_dfma_ratio.map(|v| v * 100.0)
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_HMMA_TENSOR_UTIL => {
                    p.tensor_hmma_ratio.map(|v| v * 100.0)
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_IMMA_TENSOR_UTIL => {
                    p.tensor_imma_ratio.map(|v| v * 100.0)
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_DRAM_BW_UTIL => {
                    p.dram_active_ratio.map(|v| v * 100.0)
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_FP64_UTIL => p.fp64_ratio.map(|v| v * 100.0),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_FP32_UTIL => p.fp32_ratio.map(|v| v * 100.0),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_FP16_UTIL => p.fp16_ratio.map(|v| v * 100.0),
                nvmlGpmMetricId_t_NVML_GPM_METRIC_INTEGER_UTIL => {
                    p.integer_ratio.map(|v| v * 100.0)
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_PCIE_TX_PER_SEC => {
                    second.pcie_tx.map(|v| v / MIB)
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_PCIE_RX_PER_SEC => {
                    second.pcie_rx.map(|v| v / MIB)
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC => {
                    p.nvlink_tx_bytes_per_second.map(|v| v / MIB)
                }
                nvmlGpmMetricId_t_NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC => {
                    p.nvlink_rx_bytes_per_second.map(|v| v / MIB)
                }
                _ => None,
            };
            match value {
                Some(v) => {
                    metric.value = v;
                    metric.nvmlReturn = SUCCESS;
                }
                None => {
                    metric.value = 0.0;
                    metric.nvmlReturn = NOT_SUPPORTED;
                }
            }
            metric.metricInfo.shortName = std::ptr::null_mut();
            metric.metricInfo.longName = std::ptr::null_mut();
            metric.metricInfo.unit = std::ptr::null_mut();
        }
        Ok(())
    })
}
