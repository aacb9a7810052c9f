//! The simulated node: GPUs with their real MIG tables, the workloads on them, and the faults
//! injected into them, read at any virtual instant.
//!
//! [`SimNode::read`] gives a [`NodeReading`]: the values a perfect driver would report, with
//! hardware-faithful absences (no GPM on Ampere → SM activity absent; MIG mode → no GPU
//! utilisation and no per-process utilisation, as on real GPUs) and the injected faults kept
//! apart, so that both the simulated backend and the fake NVML library turn the same reading into
//! their own error shapes (a `FieldError` here, an NVML return code there).
//!
//! Counters (energy) are the only state: they integrate power between successive reads, so reads
//! must move forward in time to be meaningful; reading the same instant twice adds nothing.

use std::collections::BTreeMap;

use super::activity::{activity, mix, pipe_mix};
use super::scenario::{FaultKind, Scenario};
use super::schedule::{ScheduledLayout, crossed};
use crate::mig::{GpuModel, LayoutInstance};
use crate::model::Field;

/// Bytes in a MiB (GPM's unit for PCIe and NVLink).
const MIB: f64 = 1_048_576.0;
use crate::model::{
    GpuInfo, GpuSample, GpuStatus, Inventory, MigInstanceInfo, MigMode, MigSample, ProcessSample,
    Profiling, RemappedRows, XidEvent,
};

/// One simulated GPU: its model, identity and MIG layout.
#[derive(Debug, Clone)]
pub struct SimGpu {
    pub index: u32,
    pub model: &'static GpuModel,
    pub uuid: String,
    pub pci_bus_id: String,
    /// MIG instances when MIG is enabled, sorted by GPU instance id.
    pub mig: Option<Vec<SimMigInstance>>,
    /// The scenario's layouts of this GPU over time, when any has a window (`from`/`until`):
    /// [`SimNode::read`] puts the one in force into `mig` when the time crosses a window's
    /// edge. Empty for a GPU whose layout never changes on its own.
    pub schedule: Vec<ScheduledLayout<SimMigInstance>>,
    /// Index into `schedule` of the layout last put in force (`None`: MIG off).
    scheduled: Option<Option<usize>>,
    /// Fields NotSupported on this GPU by scenario fault (beyond what the model lacks).
    pub unsupported: Vec<(Field, i64)>,
}

/// One simulated MIG instance (one compute instance per GPU instance).
#[derive(Debug, Clone)]
pub struct SimMigInstance {
    pub layout: LayoutInstance,
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    pub uuid: String,
}

/// What the simulated driver reports for one GPU at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    /// Values as a perfect driver reports them; a `None` is NotSupported. Status is `Ok` or `Lost`.
    pub sample: GpuSample,
    /// Fields whose read fails at this instant, with the error kind (see [`crate::model::ERROR_KINDS`]).
    pub errors: BTreeMap<Field, String>,
}

/// What the simulated driver reports for the whole node at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeReading {
    pub timestamp_ms: i64,
    /// Every NVML call fails at this instant (driver-level fault).
    pub driver_error: bool,
    pub gpus: Vec<GpuReading>,
}

/// A simulated node of a scenario.
#[derive(Debug, Clone)]
pub struct SimNode {
    scenario: Scenario,
    node: String,
    gpus: Vec<SimGpu>,
    /// Workload indices on this node.
    workloads: Vec<usize>,
    energy_joules: Vec<f64>,
    last_ms: Option<i64>,
    /// Bumped each time a scheduled layout change takes effect (the inventory changed).
    layout_epoch: u64,
}

fn uuid_like(prefix: &str, seed: u64, a: u64, b: u64) -> String {
    let h1 = mix(seed ^ mix(a) ^ mix(b.wrapping_add(0xA5A5)));
    let h2 = mix(h1 ^ 0x5EED);
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        h1 >> 32,
        (h1 >> 16) & 0xffff,
        h1 & 0xffff,
        h2 >> 48,
        h2 & 0xffff_ffff_ffff
    )
}

fn name_key(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// GPU instance id for an instance, following the pattern the driver uses (7g → 0, 4g/3g → 1–2,
/// 2-slot → 3–5, 1-slot → 7–13); unique per placement.
pub(crate) fn gpu_instance_id(l: &LayoutInstance) -> u32 {
    match l.placement.size {
        8 => 0,
        4 => 1 + l.placement.start / 4,
        2 => 3 + l.placement.start / 2,
        _ => 7 + l.placement.start,
    }
}

impl SimNode {
    /// The node called `name` of a (validated) scenario.
    pub fn new(scenario: &Scenario, name: &str) -> Option<SimNode> {
        let spec = scenario.node(name)?;
        let models = scenario.node_models(spec);
        let nkey = name_key(name);
        let gpus: Vec<SimGpu> = models
            .iter()
            .enumerate()
            .map(|(i, model)| {
                let i = i as u32;
                let instances = |m: &super::scenario::MigSpec| {
                    let mut layout: Vec<SimMigInstance> = scenario
                        .mig_layout(model, m)
                        .expect("validated")
                        .into_iter()
                        .map(|l| SimMigInstance {
                            layout: l,
                            gpu_instance_id: gpu_instance_id(&l),
                            compute_instance_id: 0,
                            uuid: uuid_like(
                                "MIG",
                                scenario.seed,
                                nkey ^ i as u64,
                                l.placement.start as u64 + 100,
                            ),
                        })
                        .collect();
                    layout.sort_by_key(|m| m.gpu_instance_id);
                    layout
                };
                let layouts: Vec<_> = spec.mig.iter().filter(|m| m.gpu == i).collect();
                let schedule: Vec<ScheduledLayout<SimMigInstance>> =
                    if layouts.iter().any(|m| m.is_windowed()) {
                        layouts
                            .iter()
                            .map(|m| ScheduledLayout {
                                from: m.from.map(|f| f.timestamp()),
                                until: m.until.map(|u| u.timestamp()),
                                instances: instances(m),
                            })
                            .collect()
                    } else {
                        Vec::new()
                    };
                // The layout in force at the scenario's start; a scheduled one follows the
                // clock from the first read.
                let t0 = scenario.start.timestamp();
                let scheduled =
                    (!schedule.is_empty()).then(|| schedule.iter().position(|l| l.in_force(t0)));
                let mig = match scheduled {
                    Some(k) => k.map(|k| schedule[k].instances.clone()),
                    None => layouts.first().map(|m| instances(m)),
                };
                let unsupported = scenario
                    .faults
                    .iter()
                    .filter(|f| {
                        f.kind == FaultKind::NotSupported && f.node == name && f.gpu == Some(i)
                    })
                    .filter_map(|f| {
                        Some((
                            Field::parse(f.field.as_deref()?)?,
                            f.at.map_or(i64::MIN, |a| a.timestamp_millis()),
                        ))
                    })
                    .collect();
                SimGpu {
                    index: i,
                    model,
                    uuid: uuid_like("GPU", scenario.seed, nkey, i as u64),
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i * 0x10),
                    mig,
                    schedule,
                    scheduled,
                    unsupported,
                }
            })
            .collect();
        let workloads = (0..scenario.workloads.len())
            .filter(|&w| scenario.workloads[w].ever_on(name))
            .collect();
        let energy_joules = (0..gpus.len())
            .map(|i| 1.0e6 * (1.0 + (mix(scenario.seed ^ nkey ^ i as u64) % 1000) as f64))
            .collect();
        Some(SimNode {
            scenario: scenario.clone(),
            node: name.to_string(),
            gpus,
            workloads,
            energy_joules,
            last_ms: None,
            layout_epoch: 0,
        })
    }

    pub fn name(&self) -> &str {
        &self.node
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    pub fn gpus(&self) -> &[SimGpu] {
        &self.gpus
    }

    /// Bumped by each read at which a layout of the scenario's schedule took effect (on any
    /// number of GPUs): the inventory changed.
    pub fn layout_epoch(&self) -> u64 {
        self.layout_epoch
    }

    /// Put in force the scheduled layouts of unix second `t` (only on GPUs with a schedule,
    /// and only when `t` is in another window than the last: a MIG write between two edges
    /// stays).
    fn follow_schedule(&mut self, t: i64) {
        let mut changed = false;
        for g in &mut self.gpus {
            if g.schedule.is_empty() {
                continue;
            }
            if let Some(k) = crossed(&g.schedule, g.scheduled, t) {
                g.scheduled = Some(k);
                let now = k.map(|k| g.schedule[k].instances.clone());
                let ids = |v: &Option<Vec<SimMigInstance>>| {
                    v.as_ref().map(|v| {
                        v.iter()
                            .map(|i| (i.layout, i.gpu_instance_id))
                            .collect::<Vec<_>>()
                    })
                };
                let same = ids(&now) == ids(&g.mig);
                g.mig = now;
                changed |= !same;
            }
        }
        if changed {
            self.layout_epoch += 1;
        }
    }

    /// Replace GPU `gpu`'s MIG layout (`None`: MIG disabled) with `instances` (layout, GPU
    /// instance id, compute instance id). MIG UUIDs follow the same rule as at creation, so an
    /// instance re-created at the same placement gets the same UUID. For the fake NVML library's
    /// write calls ([`crate::sim::control::SimMigControl`] decides what is legal).
    pub fn set_mig_instances(
        &mut self,
        gpu: u32,
        instances: Option<Vec<(LayoutInstance, u32, u32)>>,
    ) {
        let seed = self.scenario.seed;
        let nkey = name_key(&self.node);
        let Some(g) = self.gpus.get_mut(gpu as usize) else {
            return;
        };
        g.mig = instances.map(|list| {
            let mut out: Vec<SimMigInstance> = list
                .into_iter()
                .map(|(l, gi, ci)| SimMigInstance {
                    layout: l,
                    gpu_instance_id: gi,
                    compute_instance_id: ci,
                    uuid: uuid_like(
                        "MIG",
                        seed,
                        nkey ^ gpu as u64,
                        l.placement.start as u64 + 100,
                    ),
                })
                .collect();
            out.sort_by_key(|m| m.gpu_instance_id);
            out
        });
    }

    /// Attribution of every workload process on this node, as the scenario describes it: a pod
    /// UID and container id derived from the pod and workload names (stable across runs), and the
    /// Slurm job id. The simulator's pids do not exist on the host, so `/proc` cannot be used.
    pub fn attribution(
        &self,
    ) -> std::collections::HashMap<u32, std::sync::Arc<crate::model::Attribution>> {
        self.workloads
            .iter()
            .map(|&w| {
                let spec = &self.scenario.workloads[w];
                let seed = self.scenario.seed;
                let pod_uid = spec.pod.as_ref().map(|p| {
                    let u = uuid_like("P", seed, name_key(p), 1);
                    u[2..].to_string()
                });
                let container_id = spec.pod.as_ref().map(|_| {
                    (0..4)
                        .map(|i| format!("{:016x}", mix(seed ^ name_key(&spec.name) ^ (i + 7))))
                        .collect::<String>()
                });
                (
                    Self::pid(w),
                    std::sync::Arc::new(crate::model::Attribution {
                        pod_uid,
                        container_id,
                        slurm_job_id: spec.slurm_job.clone(),
                        namespace: spec.namespace.clone(),
                        pod: spec.pod.clone(),
                    }),
                )
            })
            .collect()
    }

    /// Indices (into the scenario's `workloads`) of the workloads on this node.
    pub fn workload_indices(&self) -> &[usize] {
        &self.workloads
    }

    /// Process id of a workload (stable for the whole simulation).
    pub fn pid(workload: usize) -> u32 {
        4000 + 17 * workload as u32
    }

    /// Identity and configuration of the node's GPUs.
    pub fn inventory(&self) -> Inventory {
        Inventory {
            node: self.node.clone(),
            driver_version: Some(self.scenario.driver_version.clone()),
            cuda_version: Some(self.scenario.cuda_version.clone()),
            gpus: self
                .gpus
                .iter()
                .map(|g| GpuInfo {
                    index: g.index,
                    // The simulated driver numbers its device nodes as NVML does.
                    minor_number: Some(g.index),
                    uuid: g.uuid.clone(),
                    name: g.model.nvml_name.to_string(),
                    pci_bus_id: g.pci_bus_id.clone(),
                    memory_total_bytes: Some(g.model.memory_total_bytes),
                    power_limit_watts: Some(g.model.power_limit_watts),
                    mig_mode: g.model.supports_mig().then_some(MigMode {
                        current: g.mig.is_some(),
                        pending: g.mig.is_some(),
                    }),
                    mig_instances: g
                        .mig
                        .iter()
                        .flatten()
                        .map(|m| {
                            let p = g.model.profile(m.layout.profile_id).expect("validated");
                            MigInstanceInfo {
                                gpu_instance_id: m.gpu_instance_id,
                                compute_instance_id: m.compute_instance_id,
                                profile_id: p.id,
                                profile_name: p.name.clone(),
                                placement: m.layout.placement,
                                uuid: m.uuid.clone(),
                                memory_total_bytes: Some(p.memory_bytes),
                            }
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// Whether a fault window `[at, until)` holds for a reading at `t_ms`, which describes the
    /// time just before it (see [`SimNode::read`]): `at < t_ms ≤ until`. A GPU lost from 10:00
    /// to 12:00 fails the reads from 10:00:01 to 12:00:00, the rows `(10:00, 12:00]`.
    fn in_window(at: Option<i64>, until: Option<i64>, t_ms: i64) -> bool {
        let t = t_ms - 1;
        at.is_none_or(|a| t >= a) && until.is_none_or(|u| t < u)
    }

    /// Whether a driver-level fault covers `t_ms`.
    pub fn driver_error_at(&self, t_ms: i64) -> bool {
        self.scenario.faults.iter().any(|f| {
            f.kind == FaultKind::DriverError
                && f.node == self.node
                && Self::in_window(
                    f.at.map(|a| a.timestamp_millis()),
                    f.until.map(|u| u.timestamp_millis()),
                    t_ms,
                )
        })
    }

    /// What the node reports at `t_ms` (unix milliseconds). Integrates energy since the last read.
    ///
    /// Like NVML's utilisation, a reading describes the time up to it: the workloads' state in
    /// the second that ends at `t_ms` (a reading at 09:00:00 shows 08:59:59, before a 09:00
    /// start), so that a history row `(ts − interval, ts]` holds exactly the seconds it covers.
    /// Fault windows too: a reading fails when the fault held just before it; events (XID, ECC)
    /// are reported by the first reading at or after them.
    pub fn read(&mut self, t_ms: i64) -> NodeReading {
        let since_ms = self.last_ms.unwrap_or(t_ms - 1000);
        let dt = ((t_ms - since_ms).max(0)) as f64 / 1000.0;
        if self.last_ms.is_none_or(|l| t_ms > l) {
            self.last_ms = Some(t_ms);
        }
        let t = (t_ms - 1).div_euclid(1000);
        self.follow_schedule(t);
        let mut gpus = Vec::with_capacity(self.gpus.len());
        for gi in 0..self.gpus.len() {
            let reading = self.read_gpu(gi, t, t_ms, since_ms);
            if let Some(p) = reading.sample.power_watts
                && dt > 0.0
            {
                self.energy_joules[gi] += p * dt;
            }
            let mut reading = reading;
            if reading.sample.energy_joules.is_some() {
                reading.sample.energy_joules = Some(self.energy_joules[gi]);
            }
            gpus.push(reading);
        }
        NodeReading {
            timestamp_ms: t_ms,
            driver_error: self.driver_error_at(t_ms),
            gpus,
        }
    }

    fn read_gpu(&self, gi: usize, t: i64, t_ms: i64, since_ms: i64) -> GpuReading {
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
        // Per MIG instance (or the whole GPU as one pseudo-instance): summed activity and memory.
        let slots = g.mig.as_ref().map_or(1, |v| v.len());
        let mut inst_sm = vec![0.0f64; slots];
        // The profiling pipes (GPM), summed like SM activity: per instance and per GPU.
        let mut inst_pipes = vec![[0.0f64; 10]; slots];
        let mut gpu_pipes = [0.0f64; 10];
        let mut inst_mem = vec![0u64; slots];
        let mut busy = 0.0f64;
        let mut sm_gpu = 0.0f64;
        let mut processes = Vec::new();
        for &w in &self.workloads {
            let spec = &self.scenario.workloads[w];
            let place = spec.place_at(t);
            if place.gpu != g.index || place.node != self.node {
                continue;
            }
            let Some(a) = activity(&self.scenario, w, t) else {
                continue;
            };
            let slot = match (&g.mig, place.mig_start) {
                // No instance there any more (the layout was changed by a MIG write call): the
                // workload cannot run.
                (Some(insts), Some(start)) => {
                    match insts.iter().position(|i| i.layout.placement.start == start) {
                        Some(slot) => slot,
                        None => continue,
                    }
                }
                _ => 0,
            };
            let share = match &g.mig {
                Some(insts) => {
                    let p = m.profile(insts[slot].layout.profile_id).expect("validated");
                    p.compute_slices as f64 / m.compute_slices as f64
                }
                None => 1.0,
            };
            inst_sm[slot] = (inst_sm[slot] + a.sm).min(1.0);
            let mix = pipe_mix(spec);
            let per = [
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
            ];
            for (k, p) in per.iter().enumerate() {
                inst_pipes[slot][k] += p * a.sm;
                gpu_pipes[k] += p * a.sm * share;
            }
            inst_mem[slot] += a.memory_bytes;
            sm_gpu += a.sm * share;
            busy += a.busy * share;
            let inst = g.mig.as_ref().map(|v| &v[slot]);
            processes.push(ProcessSample {
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
        let busy = busy.min(1.0);
        let sm = sm_gpu.min(1.0);
        // Drivers reserve some memory; in MIG mode each instance reserves its own.
        let reserved: u64 = if mig_on { 0 } else { 512 << 20 };
        let mem_used = (inst_mem.iter().sum::<u64>() + reserved).min(m.memory_total_bytes);
        let load = 0.25 * busy + 0.75 * sm;
        let power = m.idle_power_watts + (m.power_limit_watts - m.idle_power_watts) * load;
        let power = (power * 1000.0).round() / 1000.0;
        let temp = (32.0 + 50.0 * load).round();
        let mut throttle = 0u64;
        if busy < 0.01 {
            throttle |= 0x1;
        }
        if power >= 0.97 * m.power_limit_watts {
            throttle |= 0x4;
        }
        let ecc = |uncorrected: bool| -> u64 {
            faults
                .iter()
                .filter(|f| {
                    f.kind == FaultKind::Ecc
                        && f.uncorrected == uncorrected
                        && f.at.is_some_and(|a| a.timestamp_millis() <= t_ms)
                })
                .map(|f| f.count.unwrap_or(1))
                .sum()
        };
        // Row remapping: every modelled GPU (Ampere and later) supports it.
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
        let remapped_rows = RemappedRows {
            correctable: remapped(false),
            uncorrectable: remapped(true),
            pending: remaps
                .iter()
                .any(|f| !f.failure && f.until.is_none_or(|u| t_ms < u.timestamp_millis())),
            failure: remaps.iter().any(|f| f.failure),
        };
        let xid_events = faults
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
            .collect();
        let round3 = |v: f64| (v * 1000.0).round() / 1000.0;
        let unit = if m.gpm { MIB } else { 1024.0 };
        let pcie = |bps: f64| (bps / unit).round() * unit;
        // Ratios capped at 1 and kept to 3 decimals; NVLink to whole MiB/s (GPM's unit).
        let pipes = |v: &[f64; 10], nvlink: bool| -> Profiling {
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
        };
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
            throttle_reasons: Some(throttle),
            ecc_corrected_total: Some(ecc(false)),
            ecc_uncorrected_total: Some(ecc(true)),
            remapped_rows: Some(remapped_rows),
            // NVML reports KB/s (GPM: MiB/s); keep whole units.
            pcie_tx_bytes_per_second: Some(pcie(busy * 1.5e9)),
            pcie_rx_bytes_per_second: Some(pcie(busy * 4.0e9)),
            profiling: pipes(&gpu_pipes, true),
            xid_events,
            mig: g
                .mig
                .iter()
                .flatten()
                .enumerate()
                .map(|(slot, inst)| {
                    let p = m.profile(inst.layout.profile_id).expect("validated");
                    MigSample {
                        gpu_instance_id: inst.gpu_instance_id,
                        compute_instance_id: inst.compute_instance_id,
                        uuid: inst.uuid.clone(),
                        memory_used_bytes: Some(inst_mem[slot].min(p.memory_bytes)),
                        memory_total_bytes: Some(p.memory_bytes),
                        sm_active_ratio: m.gpm.then_some(round3(inst_sm[slot])),
                        profiling: pipes(&inst_pipes[slot], false),
                    }
                })
                .collect(),
            processes,
            errors: Vec::new(),
        };
        for (field, from) in &g.unsupported {
            if t_ms > *from {
                field.clear(&mut sample);
            }
        }
        let errors = faults
            .iter()
            .filter(|f| {
                f.kind == FaultKind::NvmlError
                    && Self::in_window(
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
            .collect();
        GpuReading { sample, errors }
    }
}
