//! Sampling one GPU, field group by field group: utilisation, memory, power, energy,
//! temperature, clocks, clock-event reasons, ECC, row remapping, PCIe, processes with their SM
//! utilisation, MIG instances and their memory, and GPM SM activity/occupancy (two samples
//! apart, kept in the GPU's state between calls).
//!
//! It does not enumerate GPUs, register or drain XID events ([`super::xid`]) or decide what a
//! failed read means ([`super::errors::Reads`] applies the rules).

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_ENABLE;

use super::errors::{Lost, Reads, note_missing};
use super::{GpuState, PROCESS_NAME_LEN, raw, trace};
use crate::device::SlowReads;
use crate::model::Field;
use crate::model::{GpuSample, GpuStatus, MigMode, MigSample, ProcessSample, Profiling, XidEvent};

/// The GPM metrics read for a whole GPU, in the order [`gpu_profile`] reads them.
const GPU_METRICS: [GpmMetricId; 15] = [
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DfmaTensorUtil,
    GpmMetricId::HmmaTensorUtil,
    GpmMetricId::ImmaTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::Fp64Util,
    GpmMetricId::Fp32Util,
    GpmMetricId::Fp16Util,
    GpmMetricId::IntegerUtil,
    GpmMetricId::PcieTxPerSec,
    GpmMetricId::PcieRxPerSec,
    GpmMetricId::NvlinkTotalTxPerSec,
    GpmMetricId::NvlinkTotalRxPerSec,
];

/// The GPM metrics read for a GPU instance (no occupancy, PCIe or NVLink per instance).
const MIG_METRICS: [GpmMetricId; 10] = [
    GpmMetricId::SmUtil,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DfmaTensorUtil,
    GpmMetricId::HmmaTensorUtil,
    GpmMetricId::ImmaTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::Fp64Util,
    GpmMetricId::Fp32Util,
    GpmMetricId::Fp16Util,
    GpmMetricId::IntegerUtil,
];

/// Bytes in a MiB (GPM's PCIe and NVLink figures are MiB/s).
const MIB: f64 = 1_048_576.0;

/// A percentage as a ratio.
fn ratio(v: Option<f64>) -> Option<f64> {
    v.map(|pct| pct / 100.0)
}

/// The profiling pipes of [`MIG_METRICS`]' or [`GPU_METRICS`]' values from `AnyTensorUtil` on
/// (`v[at..]`), NVLink where `nvlink` holds its two values.
fn profiling(v: &[Option<f64>], nvlink: Option<(Option<f64>, Option<f64>)>) -> Profiling {
    let g = |i: usize| v.get(i).copied().flatten();
    Profiling {
        tensor_active_ratio: ratio(g(0)),
        tensor_dfma_ratio: ratio(g(1)),
        tensor_hmma_ratio: ratio(g(2)),
        tensor_imma_ratio: ratio(g(3)),
        dram_active_ratio: ratio(g(4)),
        fp64_ratio: ratio(g(5)),
        fp32_ratio: ratio(g(6)),
        fp16_ratio: ratio(g(7)),
        integer_ratio: ratio(g(8)),
        nvlink_tx_bytes_per_second: nvlink.and_then(|n| n.0).map(|m| m * MIB),
        nvlink_rx_bytes_per_second: nvlink.and_then(|n| n.1).map(|m| m * MIB),
    }
}

/// One GPM step: take a new sample, compute `ids` against the previous one (if any), keep the
/// new one. Values as GPM gives them (percentages, MiB/s). A driver that refuses the whole list
/// (`InvalidArg`: an id it does not know) is asked again for the first `core` ids alone, so SM
/// activity survives an older driver.
fn gpm_step(
    nvml: &Nvml,
    reads: &mut Reads<'_>,
    dev: &Device<'_>,
    gpu_instance: Option<u32>,
    prev: &mut Option<raw::Gpm>,
    ids: &[GpmMetricId],
    core: usize,
) -> Result<Vec<Option<f64>>, Lost> {
    let none = vec![None; ids.len()];
    let Some(new) = reads.take(
        Field::Gpm.as_str(),
        trace::call_opaque(
            if gpu_instance.is_some() {
                "nvmlGpmMigSampleGet"
            } else {
                "nvmlGpmSampleGet"
            },
            gpu_instance
                .map(|gi| format!("gpu_instance={gi}"))
                .as_deref(),
            || raw::gpm_sample(dev, gpu_instance),
        ),
    )?
    else {
        return Ok(none);
    };
    let Some(old) = prev.replace(new) else {
        return Ok(none);
    };
    let metrics = |ids: &[GpmMetricId]| match prev.as_ref() {
        Some(new) => trace::call_json(
            "nvmlGpmMetricsGet",
            gpu_instance
                .map(|gi| format!("gpu_instance={gi}"))
                .as_deref(),
            || raw::gpm_metrics(nvml, &old, new, ids),
            |v| {
                serde_json::Value::Array(
                    v.iter()
                        .map(|r| match r {
                            Ok(x) => serde_json::json!(x),
                            Err(e) => serde_json::json!(super::error_kind(e)),
                        })
                        .collect(),
                )
            },
        ),
        None => Err(NvmlError::Unknown),
    };
    let result = match metrics(ids) {
        Err(NvmlError::InvalidArg) if core < ids.len() => metrics(&ids[..core]),
        r => r,
    };
    raw::gpm_free(nvml, old);
    let Some(values) = reads.take(Field::Gpm.as_str(), result)? else {
        return Ok(none);
    };
    let mut out = Vec::with_capacity(ids.len());
    for v in values {
        out.push(reads.take(Field::Gpm.as_str(), v)?);
    }
    out.resize(ids.len(), None);
    Ok(out)
}

/// Everything read about one MIG device in a sample.
struct MigRead {
    gpu_instance_id: u32,
    compute_instance_id: u32,
    uuid: String,
    memory_used_bytes: Option<u64>,
    memory_total_bytes: Option<u64>,
}

/// Enumerate the MIG devices of a GPU with MIG enabled: every index below the *maximum* count,
/// skipping empty slots (NotFound).
fn read_mig_devices(
    reads: &mut Reads<'_>,
    gpu: u32,
    dev: &Device<'_>,
) -> Result<Vec<MigRead>, Lost> {
    let field = Field::MigMemory.as_str();
    let mut out = Vec::new();
    let Some(max) = reads.take(
        field,
        trace::call("nvmlDeviceGetMaxMigDeviceCount", None, || {
            dev.mig_device_count()
        }),
    )?
    else {
        return Ok(out);
    };
    for idx in 0..max {
        trace::set_gpu(Some(gpu), Some(idx));
        let mig_dev = match trace::call_opaque(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            Some(&idx.to_string()),
            || dev.mig_device_by_index(idx),
        ) {
            Err(NvmlError::NotFound) => continue,
            r => match reads.take(field, r)? {
                Some(d) => d,
                None => continue,
            },
        };
        let Some(gi) = reads.take(
            field,
            trace::call("nvmlDeviceGetGpuInstanceId", None, || {
                raw::gpu_instance_id(&mig_dev)
            }),
        )?
        else {
            continue;
        };
        let Some(ci) = reads.take(
            field,
            trace::call("nvmlDeviceGetComputeInstanceId", None, || {
                raw::compute_instance_id(&mig_dev)
            }),
        )?
        else {
            continue;
        };
        let uuid = reads
            .take(
                field,
                trace::call("nvmlDeviceGetUUID", None, || mig_dev.uuid()),
            )?
            .unwrap_or_default();
        let mem = reads.take(
            field,
            trace::call("nvmlDeviceGetMemoryInfo_v2", None, || mig_dev.memory_info()),
        )?;
        out.push(MigRead {
            gpu_instance_id: gi,
            compute_instance_id: ci,
            uuid,
            memory_used_bytes: mem.as_ref().map(|m| m.used),
            memory_total_bytes: mem.as_ref().map(|m| m.total),
        });
    }
    trace::set_gpu(Some(gpu), None);
    out.sort_by_key(|m| (m.gpu_instance_id, m.compute_instance_id));
    Ok(out)
}

/// Whether MIG is currently enabled (`None` if the GPU has no MIG or the read failed).
fn mig_mode(reads: &mut Reads<'_>, dev: &Device<'_>) -> Result<Option<MigMode>, Lost> {
    Ok(reads
        .take(
            Field::MigMemory.as_str(),
            trace::call_json(
                "nvmlDeviceGetMigMode",
                None,
                || dev.mig_mode(),
                |m| serde_json::json!({"current": m.current, "pending": m.pending}),
            ),
        )?
        .map(|m| MigMode {
            current: m.current == NVML_DEVICE_MIG_ENABLE,
            pending: m.pending == NVML_DEVICE_MIG_ENABLE,
        }))
}

/// Read every value of one GPU.
pub(super) fn read_gpu(
    nvml: &Nvml,
    index: u32,
    dev: &Device<'_>,
    state: &mut GpuState,
    xids: Vec<XidEvent>,
    missing: &mut BTreeSet<String>,
    slow: SlowReads,
) -> (Result<GpuSample, Lost>, bool) {
    trace::set_gpu(Some(index), None);
    let mut reads = Reads {
        errors: Vec::new(),
        missing,
        driver_down: false,
    };
    let sample = read_gpu_values(nvml, index, dev, state, xids, &mut reads, slow);
    let driver_down = reads.driver_down;
    let sample = sample.map(|mut s| {
        s.errors = reads.into_errors();
        if !s.errors.is_empty() {
            s.status = GpuStatus::Degraded;
        }
        s
    });
    (sample, driver_down)
}

/// What the two slow calls gave at their last read: the energy counter and each process's newest
/// SM ratio by pid.
type Carried = (Option<f64>, BTreeMap<u32, f64>);

fn read_gpu_values(
    nvml: &Nvml,
    index: u32,
    dev: &Device<'_>,
    state: &mut GpuState,
    xids: Vec<XidEvent>,
    r: &mut Reads<'_>,
    slow: SlowReads,
) -> Result<GpuSample, Lost> {
    // The two slow calls (energy, per-process utilisation) are made when asked, or when nothing
    // was read yet to carry.
    let carried = match slow {
        SlowReads::Carry => state.carried.take(),
        SlowReads::Read => None,
    };
    let uuid = read_uuid(r, dev, state)?;
    let mut s = GpuSample::empty(index, uuid, GpuStatus::Ok);
    read_load_and_memory(r, dev, &mut s)?;
    read_power_and_energy(r, dev, &mut s, carried.as_ref())?;
    read_temperature_and_clocks(r, dev, &mut s)?;
    read_health(r, dev, &mut s)?;
    let gpm_supported = read_pcie(r, dev, &mut s)?;
    read_processes(nvml, r, dev, state, &mut s, carried)?;

    // MIG instances.
    let mig_on = mig_mode(r, dev)?.is_some_and(|m| m.current);
    let migs = if mig_on {
        read_mig_devices(r, index, dev)?
    } else {
        Vec::new()
    };

    let mig_gpm = if gpm_supported {
        read_gpm(nvml, r, dev, state, &mut s, &migs)?
    } else {
        free_gpm(nvml, state);
        BTreeMap::new()
    };
    s.mig = mig_samples(migs, &mig_gpm);
    s.xid_events = xids;
    Ok(s)
}

/// The GPU's UUID, remembered in its state so a failed read later still names it.
fn read_uuid(r: &mut Reads<'_>, dev: &Device<'_>, state: &mut GpuState) -> Result<String, Lost> {
    Ok(
        match r.take(
            "uuid",
            trace::call("nvmlDeviceGetUUID", None, || dev.uuid()),
        )? {
            Some(u) => {
                state.uuid = Some(u.clone());
                u
            }
            None => state.uuid.clone().unwrap_or_default(),
        },
    )
}

/// Utilisation (busy and memory controller) and memory used and total.
fn read_load_and_memory(
    r: &mut Reads<'_>,
    dev: &Device<'_>,
    s: &mut GpuSample,
) -> Result<(), Lost> {
    if let Some(u) = r.take(
        Field::Utilization.as_str(),
        trace::call("nvmlDeviceGetUtilizationRates", None, || {
            dev.utilization_rates()
        }),
    )? {
        s.busy_ratio = Some(u.gpu as f64 / 100.0);
        s.memory_controller_ratio = Some(u.memory as f64 / 100.0);
    }
    if let Some(m) = r.take(
        Field::Memory.as_str(),
        trace::call("nvmlDeviceGetMemoryInfo_v2", None, || dev.memory_info()),
    )? {
        s.memory_used_bytes = Some(m.used);
        s.memory_total_bytes = Some(m.total);
    }
    Ok(())
}

/// Power draw, and the energy counter (one of the two slow calls: carried when `carried` holds
/// it).
fn read_power_and_energy(
    r: &mut Reads<'_>,
    dev: &Device<'_>,
    s: &mut GpuSample,
    carried: Option<&Carried>,
) -> Result<(), Lost> {
    s.power_watts = r
        .take(
            Field::Power.as_str(),
            trace::call("nvmlDeviceGetPowerUsage", None, || dev.power_usage()),
        )?
        .map(|mw| mw as f64 / 1000.0);
    s.energy_joules = match carried {
        Some((energy, _)) => *energy,
        None => r
            .take(
                Field::Energy.as_str(),
                trace::call("nvmlDeviceGetTotalEnergyConsumption", None, || {
                    dev.total_energy_consumption()
                }),
            )?
            .map(|mj| mj as f64 / 1000.0),
    };
    Ok(())
}

/// GPU temperature and the SM and memory clocks.
fn read_temperature_and_clocks(
    r: &mut Reads<'_>,
    dev: &Device<'_>,
    s: &mut GpuSample,
) -> Result<(), Lost> {
    s.temperature_celsius = r
        .take(
            Field::Temperature.as_str(),
            trace::call("nvmlDeviceGetTemperature", Some("gpu"), || {
                dev.temperature(TemperatureSensor::Gpu)
            }),
        )?
        .map(f64::from);
    let clocks = Field::Clocks.as_str();
    s.sm_clock_hertz = r
        .take(
            clocks,
            trace::call("nvmlDeviceGetClockInfo", Some("sm"), || {
                dev.clock_info(Clock::SM)
            }),
        )?
        .map(|mhz| mhz as f64 * 1e6);
    s.memory_clock_hertz = r
        .take(
            clocks,
            trace::call("nvmlDeviceGetClockInfo", Some("mem"), || {
                dev.clock_info(Clock::Memory)
            }),
        )?
        .map(|mhz| mhz as f64 * 1e6);
    Ok(())
}

/// Clock-event (throttle) reasons, volatile ECC error totals and row remapping.
fn read_health(r: &mut Reads<'_>, dev: &Device<'_>, s: &mut GpuSample) -> Result<(), Lost> {
    s.throttle_reasons = r.take(
        Field::Throttle.as_str(),
        trace::call("nvmlDeviceGetCurrentClocksEventReasons", None, || {
            raw::clocks_event_reasons(dev)
        }),
    )?;
    let ecc = Field::Ecc.as_str();
    s.ecc_corrected_total = r.take(
        ecc,
        trace::call(
            "nvmlDeviceGetTotalEccErrors",
            Some("corrected,volatile"),
            || dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
        ),
    )?;
    s.ecc_uncorrected_total = r.take(
        ecc,
        trace::call(
            "nvmlDeviceGetTotalEccErrors",
            Some("uncorrected,volatile"),
            || dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        ),
    )?;
    s.remapped_rows = r.take(
        Field::RowRemap.as_str(),
        trace::call("nvmlDeviceGetRemappedRows", None, || {
            raw::remapped_rows(dev)
        }),
    )?;
    Ok(())
}

/// Whether the GPU supports GPM, and PCIe throughput from NVML's counters when it does not.
fn read_pcie(r: &mut Reads<'_>, dev: &Device<'_>, s: &mut GpuSample) -> Result<bool, Lost> {
    // GPM (Hopper+) gives PCIe over the whole interval with the sample it already takes; the
    // 20 ms reads of nvmlDeviceGetPcieThroughput (41.6 of a 48 ms sample on a real H100,
    // fixtures/real/nvidia-h100-80gb-hbm3) are made only without it.
    let gpm_supported = r
        .take(
            Field::Gpm.as_str(),
            trace::call("nvmlGpmQueryDeviceSupport", None, || dev.gpm_support()),
        )?
        .unwrap_or(false);
    let pcie = Field::Pcie.as_str();
    if !gpm_supported {
        s.pcie_tx_bytes_per_second = r
            .take(
                pcie,
                trace::call("nvmlDeviceGetPcieThroughput", Some("tx"), || {
                    dev.pcie_throughput(PcieUtilCounter::Send)
                }),
            )?
            .map(|kb| kb as f64 * 1024.0);
        s.pcie_rx_bytes_per_second = r
            .take(
                pcie,
                trace::call("nvmlDeviceGetPcieThroughput", Some("rx"), || {
                    dev.pcie_throughput(PcieUtilCounter::Receive)
                }),
            )?
            .map(|kb| kb as f64 * 1024.0);
    }
    Ok(gpm_supported)
}

/// Processes and their SM utilisation since the previous sample; what the two slow calls gave
/// (or the carried values) is kept in the state for the next sample to carry.
fn read_processes(
    nvml: &Nvml,
    r: &mut Reads<'_>,
    dev: &Device<'_>,
    state: &mut GpuState,
    s: &mut GpuSample,
    carried: Option<Carried>,
) -> Result<(), Lost> {
    let processes = r.take(
        Field::Processes.as_str(),
        trace::call("nvmlDeviceGetComputeRunningProcesses_v3", None, || {
            dev.running_compute_processes()
        }),
    )?;
    // A GPU known to run no compute process has no per-process utilisation to give.
    let no_process = matches!(&processes, Some(p) if p.is_empty());
    let readings = read_sm_readings(r, dev, state, no_process || carried.is_some())?;
    let mut newest: BTreeMap<u32, f64> = BTreeMap::new();
    for p in processes.into_iter().flatten() {
        let name = process_name(nvml, r, p.pid);
        let sm_ratio = match &carried {
            Some((_, sm)) => sm.get(&p.pid).copied(),
            None => readings
                .get(&p.pid)
                .and_then(|v| v.last())
                .map(|(_, sm)| *sm as f64 / 100.0),
        };
        s.processes.push(ProcessSample {
            pid: p.pid,
            name,
            used_memory_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            },
            sm_ratio,
            gpu_instance_id: p.gpu_instance_id,
            compute_instance_id: p.compute_instance_id,
            sm_readings: readings
                .get(&p.pid)
                .map(|v| v.iter().map(|(_, sm)| *sm as f64 / 100.0).collect())
                .unwrap_or_default(),
        });
        if let Some(sm) = s.processes.last().and_then(|p| p.sm_ratio) {
            newest.insert(p.pid, sm);
        }
    }
    state.carried = Some(match carried {
        Some(c) => c,
        None => (s.energy_joules, newest),
    });
    Ok(())
}

/// Every SM utilisation reading since the last one seen, oldest first, per pid (`(timestamp,
/// percent)`); none without the call when `skip`. On the first read (nothing seen yet: NVML's
/// whole buffer) the newest only, as the previous sample's window is unknown.
fn read_sm_readings(
    r: &mut Reads<'_>,
    dev: &Device<'_>,
    state: &mut GpuState,
    skip: bool,
) -> Result<BTreeMap<u32, Vec<(u64, u32)>>, Lost> {
    let since = state.process_last_seen_us;
    // Per-process utilisation is one of the two slow calls (2 ms a GPU on H100/H200:
    // docs/performance.md). The "since" timestamp stays, so the next call, once a process runs,
    // returns what NVML kept since then.
    let utilisation = if skip {
        Some(Vec::new())
    } else {
        match trace::call(
            "nvmlDeviceGetProcessUtilization",
            Some(&format!("since_us={since}")),
            || dev.process_utilization_stats(since),
        ) {
            // No sample newer than the last one seen.
            Err(NvmlError::NotFound) => Some(Vec::new()),
            other => r.take(Field::ProcessUtilization.as_str(), other)?,
        }
    };
    let mut readings: BTreeMap<u32, Vec<(u64, u32)>> = BTreeMap::new();
    for u in utilisation.iter().flatten() {
        state.process_last_seen_us = state.process_last_seen_us.max(u.timestamp);
        readings
            .entry(u.pid)
            .or_default()
            .push((u.timestamp, u.sm_util));
    }
    for v in readings.values_mut() {
        v.sort_unstable();
        if since == 0 {
            v.drain(..v.len().saturating_sub(1));
        }
    }
    Ok(readings)
}

/// A process's name, `None` when NVML cannot give it (a missing symbol is noted).
fn process_name(nvml: &Nvml, r: &mut Reads<'_>, pid: u32) -> Option<String> {
    match trace::call("nvmlSystemGetProcessName", Some(&pid.to_string()), || {
        nvml.sys_process_name(pid, PROCESS_NAME_LEN)
    }) {
        Ok(n) => Some(n),
        Err(NvmlError::FailedToLoadSymbol(detail)) => {
            note_missing(r.missing, &detail);
            None
        }
        Err(_) => None,
    }
}

/// GPM: SM activity and occupancy, the profiling pipes, PCIe and NVLink of the GPU into `s`; SM
/// activity and the pipes of each GPU instance returned by GPU instance id.
fn read_gpm(
    nvml: &Nvml,
    r: &mut Reads<'_>,
    dev: &Device<'_>,
    state: &mut GpuState,
    s: &mut GpuSample,
    migs: &[MigRead],
) -> Result<BTreeMap<u32, Vec<Option<f64>>>, Lost> {
    let v = gpm_step(nvml, r, dev, None, &mut state.gpm, &GPU_METRICS, 2)?;
    s.sm_active_ratio = ratio(v[0]);
    s.sm_occupancy_ratio = ratio(v[1]);
    s.profiling = profiling(&v[2..11], Some((v[13], v[14])));
    s.pcie_tx_bytes_per_second = v[11].map(|m| m * MIB);
    s.pcie_rx_bytes_per_second = v[12].map(|m| m * MIB);
    let mut mig_gpm = BTreeMap::new();
    let mut kept = BTreeMap::new();
    let mut lost = false;
    for m in migs {
        let mut prev = state.mig_gpm.remove(&m.gpu_instance_id);
        let v = gpm_step(
            nvml,
            r,
            dev,
            Some(m.gpu_instance_id),
            &mut prev,
            &MIG_METRICS,
            1,
        );
        if let Some(p) = prev {
            kept.insert(m.gpu_instance_id, p);
        }
        match v {
            Ok(v) => {
                mig_gpm.insert(m.gpu_instance_id, v);
            }
            Err(Lost) => {
                lost = true;
                break;
            }
        }
    }
    // Free samples of GPU instances that no longer exist (the caller frees the rest if lost).
    for (_, old) in std::mem::replace(&mut state.mig_gpm, kept) {
        raw::gpm_free(nvml, old);
    }
    if lost {
        return Err(Lost);
    }
    Ok(mig_gpm)
}

/// Without GPM: free the GPM samples kept for the GPU and its GPU instances.
fn free_gpm(nvml: &Nvml, state: &mut GpuState) {
    if let Some(old) = state.gpm.take() {
        raw::gpm_free(nvml, old);
    }
    for (_, old) in std::mem::take(&mut state.mig_gpm) {
        raw::gpm_free(nvml, old);
    }
}

/// The MIG instances' samples: what was read of each, with its GPU instance's GPM values.
fn mig_samples(migs: Vec<MigRead>, mig_gpm: &BTreeMap<u32, Vec<Option<f64>>>) -> Vec<MigSample> {
    migs.into_iter()
        .map(|m| MigSample {
            gpu_instance_id: m.gpu_instance_id,
            compute_instance_id: m.compute_instance_id,
            uuid: m.uuid,
            memory_used_bytes: m.memory_used_bytes,
            memory_total_bytes: m.memory_total_bytes,
            sm_active_ratio: mig_gpm.get(&m.gpu_instance_id).and_then(|v| ratio(v[0])),
            profiling: mig_gpm
                .get(&m.gpu_instance_id)
                .map(|v| profiling(&v[1..], None))
                .unwrap_or_default(),
        })
        .collect()
}
