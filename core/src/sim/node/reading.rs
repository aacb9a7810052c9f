//! One simulated GPU's reading at an instant ([`SimNode::read_gpu`]): the workloads' load summed
//! per MIG instance (or over the whole GPU), the values derived from it (memory, power,
//! temperature, clocks, clock-event reasons, PCIe, the profiling pipes), the injected faults'
//! counters and events (ECC, row remapping, XID) and the NVML errors injected, kept apart.
//!
//! It does not integrate energy, follow the MIG schedules or decide driver-level faults
//! ([`SimNode::read`] does).

use std::collections::BTreeMap;

use super::{GpuReading, SimGpu, SimNode};
use crate::mig::GpuModel;
use crate::model::{
    Field, GpuSample, GpuStatus, MigSample, ProcessSample, Profiling, RemappedRows, XidEvent,
};
use crate::sim::activity::{activity, pipe_mix};
use crate::sim::scenario::{FaultKind, FaultSpec, WorkloadSpec};

/// Bytes in a MiB (GPM's unit for PCIe and NVLink).
const MIB: f64 = 1_048_576.0;

/// The workloads' load on one GPU in the second read, per MIG instance (or the whole GPU as one
/// pseudo-instance, slot 0) and over the GPU.
struct Load {
    /// Summed SM activity per instance, capped at 1.
    inst_sm: Vec<f64>,
    /// The profiling pipes (GPM), summed like SM activity: per instance and per GPU.
    inst_pipes: Vec<[f64; 10]>,
    gpu_pipes: [f64; 10],
    /// Summed memory per instance.
    inst_mem: Vec<u64>,
    /// Busy and SM activity over the GPU, each workload's weighed by its instance's share of the
    /// GPU (not capped).
    busy: f64,
    sm_gpu: f64,
    processes: Vec<ProcessSample>,
}

impl SimNode {
    /// What GPU `gi` reports for the second `t` (read at `t_ms`; XID events since `since_ms`):
    /// lost while a GPU-lost fault holds, its values otherwise, the injected NVML errors apart.
    pub(super) fn read_gpu(&self, gi: usize, t: i64, t_ms: i64, since_ms: i64) -> GpuReading {
        let g = &self.gpus[gi];
        let m = g.model;
        let faults: Vec<_> = self
            .scenario
            .faults
            .iter()
            .filter(|f| f.node == self.node && f.gpu == Some(g.index))
            .collect();
        let lost = faults.iter().any(|f| {
            f.kind == FaultKind::GpuLost
                && Self::in_window(
                    f.at.map(|a| a.timestamp_millis()),
                    f.until.map(|u| u.timestamp_millis()),
                    t_ms,
                )
        });
        if lost {
            return GpuReading {
                sample: GpuSample::empty(g.index, g.uuid.clone(), GpuStatus::Lost),
                errors: BTreeMap::new(),
            };
        }
        let mig_on = g.mig.is_some();
        let summed = self.load_on(g, t);
        let busy = summed.busy.min(1.0);
        let sm = summed.sm_gpu.min(1.0);
        // Drivers reserve some memory; in MIG mode each instance reserves its own.
        let reserved: u64 = if mig_on { 0 } else { 512 << 20 };
        let mem_used = (summed.inst_mem.iter().sum::<u64>() + reserved).min(m.memory_total_bytes);
        let load = 0.25 * busy + 0.75 * sm;
        let power = m.idle_power_watts + (m.power_limit_watts - m.idle_power_watts) * load;
        let power = (power * 1000.0).round() / 1000.0;
        let temp = (32.0 + 50.0 * load).round();
        let unit = if m.gpm { MIB } else { 1024.0 };
        let pcie = |bps: f64| (bps / unit).round() * unit;
        let mut sample = GpuSample {
            index: g.index,
            uuid: g.uuid.clone(),
            status: GpuStatus::Ok,
            // NVML has no device utilisation in MIG mode.
            busy_ratio: (!mig_on).then_some(round3(busy)),
            memory_controller_ratio: (!mig_on).then_some(round3(busy * 0.45)),
            sm_active_ratio: m.gpm.then_some(round3(sm)),
            sm_occupancy_ratio: m.gpm.then_some(round3(sm * 0.55)),
            memory_used_bytes: Some(mem_used),
            memory_total_bytes: Some(m.memory_total_bytes),
            power_watts: Some(power),
            energy_joules: Some(0.0),
            temperature_celsius: Some(temp),
            sm_clock_hertz: Some(
                if busy >= 0.01 {
                    m.max_sm_clock_mhz
                } else {
                    m.idle_sm_clock_mhz
                } as f64
                    * 1e6,
            ),
            memory_clock_hertz: Some(m.memory_clock_mhz as f64 * 1e6),
            throttle_reasons: Some(throttle_reasons(m, busy, power)),
            ecc_corrected_total: Some(ecc_total(&faults, false, t_ms)),
            ecc_uncorrected_total: Some(ecc_total(&faults, true, t_ms)),
            remapped_rows: Some(remapped_rows(&faults, t_ms)),
            // NVML reports KB/s (GPM: MiB/s); keep whole units.
            pcie_tx_bytes_per_second: Some(pcie(busy * 1.5e9)),
            pcie_rx_bytes_per_second: Some(pcie(busy * 4.0e9)),
            profiling: profiling(m, &summed.gpu_pipes, true),
            xid_events: xid_events(&faults, since_ms, t_ms),
            mig: mig_samples(g, &summed),
            processes: summed.processes,
            errors: Vec::new(),
        };
        for (field, from) in &g.unsupported {
            if t_ms > *from {
                field.clear(&mut sample);
            }
        }
        let errors = nvml_errors(&faults, t_ms);
        GpuReading { sample, errors }
    }

    /// The load of the workloads running on `g` in the second `t`, each in its MIG instance (a
    /// workload whose instance is gone does not run), with their processes.
    fn load_on(&self, g: &SimGpu, t: i64) -> Load {
        let mig_on = g.mig.is_some();
        let slots = g.mig.as_ref().map_or(1, |v| v.len());
        let mut l = Load {
            inst_sm: vec![0.0f64; slots],
            inst_pipes: vec![[0.0f64; 10]; slots],
            gpu_pipes: [0.0f64; 10],
            inst_mem: vec![0u64; slots],
            busy: 0.0,
            sm_gpu: 0.0,
            processes: Vec::new(),
        };
        for &w in &self.workloads {
            let spec = &self.scenario.workloads[w];
            let place = spec.place_at(t);
            if place.gpu != g.index || place.node != self.node {
                continue;
            }
            let Some(a) = activity(&self.scenario, w, t) else {
                continue;
            };
            let Some((slot, share)) = slot_and_share(g, place.mig_start) else {
                continue;
            };
            l.inst_sm[slot] = (l.inst_sm[slot] + a.sm).min(1.0);
            for (k, p) in pipe_weights(spec).iter().enumerate() {
                l.inst_pipes[slot][k] += p * a.sm;
                l.gpu_pipes[k] += p * a.sm * share;
            }
            l.inst_mem[slot] += a.memory_bytes;
            l.sm_gpu += a.sm * share;
            l.busy += a.busy * share;
            let inst = g.mig.as_ref().map(|v| &v[slot]);
            l.processes.push(ProcessSample {
                pid: Self::pid(w),
                name: Some(spec.process.clone()),
                used_memory_bytes: Some(a.memory_bytes),
                // NVML reports no per-process utilisation in MIG mode.
                sm_ratio: (!mig_on).then_some((a.busy * 100.0).round() / 100.0),
                sm_readings: Vec::new(),
                gpu_instance_id: inst.map(|i| i.gpu_instance_id),
                compute_instance_id: inst.map(|i| i.compute_instance_id),
            });
        }
        l
    }
}

/// The slot a workload runs in on `g` (its MIG instance's index, 0 without MIG) and that slot's
/// share of the GPU's compute; `None` when the instance at `mig_start` is gone (the layout was
/// changed by a MIG write call): the workload cannot run.
fn slot_and_share(g: &SimGpu, mig_start: Option<u32>) -> Option<(usize, f64)> {
    let m = g.model;
    let slot = match (&g.mig, mig_start) {
        (Some(insts), Some(start)) => insts
            .iter()
            .position(|i| i.layout.placement.start == start)?,
        _ => 0,
    };
    let share = match &g.mig {
        Some(insts) => {
            let p = m.profile(insts[slot].layout.profile_id).expect("validated");
            p.compute_slices as f64 / m.compute_slices as f64
        }
        None => 1.0,
    };
    Some((slot, share))
}

/// A workload's profiling pipes per unit of SM activity, in the order [`profiling`] reads them
/// (NVLink bytes per second last).
fn pipe_weights(spec: &WorkloadSpec) -> [f64; 10] {
    let mix = pipe_mix(spec);
    [
        mix.tensor,
        mix.dfma,
        mix.hmma,
        mix.imma,
        mix.dram,
        mix.fp64,
        mix.fp32,
        mix.fp16,
        mix.integer,
        mix.nvlink_bytes_per_second,
    ]
}

/// A value kept to 3 decimals.
fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The clock-event reasons: idle below 1% busy, power capping from 97% of the power limit.
fn throttle_reasons(m: &GpuModel, busy: f64, power: f64) -> u64 {
    let mut throttle = 0u64;
    if busy < 0.01 {
        throttle |= 0x1;
    }
    if power >= 0.97 * m.power_limit_watts {
        throttle |= 0x4;
    }
    throttle
}

/// The ECC errors (corrected or `uncorrected`) the faults injected up to `t_ms`.
fn ecc_total(faults: &[&FaultSpec], uncorrected: bool, t_ms: i64) -> u64 {
    faults
        .iter()
        .filter(|f| {
            f.kind == FaultKind::Ecc
                && f.uncorrected == uncorrected
                && f.at.is_some_and(|a| a.timestamp_millis() <= t_ms)
        })
        .map(|f| f.count.unwrap_or(1))
        .sum()
}

/// Row remapping at `t_ms` from the faults injected up to then: every modelled GPU (Ampere and
/// later) supports it.
fn remapped_rows(faults: &[&FaultSpec], t_ms: i64) -> RemappedRows {
    let remaps: Vec<_> = faults
        .iter()
        .filter(|f| {
            f.kind == FaultKind::RowRemap && f.at.is_some_and(|a| a.timestamp_millis() <= t_ms)
        })
        .collect();
    let remapped = |uncorrected: bool| -> u32 {
        remaps
            .iter()
            .filter(|f| f.uncorrected == uncorrected && !f.failure)
            .map(|f| f.count.unwrap_or(1) as u32)
            .sum()
    };
    RemappedRows {
        correctable: remapped(false),
        uncorrectable: remapped(true),
        pending: remaps
            .iter()
            .any(|f| !f.failure && f.until.is_none_or(|u| t_ms < u.timestamp_millis())),
        failure: remaps.iter().any(|f| f.failure),
    }
}

/// The XID events injected after `since_ms` and up to `t_ms`.
fn xid_events(faults: &[&FaultSpec], since_ms: i64, t_ms: i64) -> Vec<XidEvent> {
    faults
        .iter()
        .filter(|f| f.kind == FaultKind::Xid)
        .filter_map(|f| {
            let at = f.at?.timestamp_millis();
            (at > since_ms && at <= t_ms).then_some(XidEvent {
                xid: f.xid?,
                timestamp_ms: at,
                gpu_instance_id: None,
            })
        })
        .collect()
}

/// The profiling pipes `v` as GPM reports them (none without GPM): ratios capped at 1 and kept
/// to 3 decimals; NVLink (when `nvlink`) to whole MiB/s (GPM's unit).
fn profiling(m: &GpuModel, v: &[f64; 10], nvlink: bool) -> Profiling {
    if !m.gpm {
        return Profiling::default();
    }
    let r = |k: usize| Some(round3(v[k].min(1.0)));
    let link = |f: f64| nvlink.then_some((v[9] * f / MIB).round() * MIB);
    Profiling {
        tensor_active_ratio: r(0),
        tensor_dfma_ratio: r(1),
        tensor_hmma_ratio: r(2),
        tensor_imma_ratio: r(3),
        dram_active_ratio: r(4),
        fp64_ratio: r(5),
        fp32_ratio: r(6),
        fp16_ratio: r(7),
        integer_ratio: r(8),
        nvlink_tx_bytes_per_second: link(1.0),
        nvlink_rx_bytes_per_second: link(1.0),
    }
}

/// Each MIG instance's sample: its memory (capped at the profile's), SM activity and pipes.
fn mig_samples(g: &SimGpu, summed: &Load) -> Vec<MigSample> {
    let m = g.model;
    g.mig
        .iter()
        .flatten()
        .enumerate()
        .map(|(slot, inst)| {
            let p = m.profile(inst.layout.profile_id).expect("validated");
            MigSample {
                gpu_instance_id: inst.gpu_instance_id,
                compute_instance_id: inst.compute_instance_id,
                uuid: inst.uuid.clone(),
                memory_used_bytes: Some(summed.inst_mem[slot].min(p.memory_bytes)),
                memory_total_bytes: Some(p.memory_bytes),
                sm_active_ratio: m.gpm.then_some(round3(summed.inst_sm[slot])),
                profiling: profiling(m, &summed.inst_pipes[slot], false),
            }
        })
        .collect()
}

/// The NVML errors injected at `t_ms`, by field.
fn nvml_errors(faults: &[&FaultSpec], t_ms: i64) -> BTreeMap<Field, String> {
    faults
        .iter()
        .filter(|f| {
            f.kind == FaultKind::NvmlError
                && SimNode::in_window(
                    f.at.map(|a| a.timestamp_millis()),
                    f.until.map(|u| u.timestamp_millis()),
                    t_ms,
                )
        })
        .filter_map(|f| {
            Some((
                Field::parse(f.field.as_deref()?)?,
                f.error.clone().unwrap_or_else(|| "unknown".into()),
            ))
        })
        .collect()
}
