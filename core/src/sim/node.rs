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

mod reading;

use std::collections::BTreeMap;

use super::activity::mix;
use super::scenario::{FaultKind, Scenario};
use super::schedule::{ScheduledLayout, crossed};
use crate::mig::{GpuModel, LayoutInstance};
use crate::model::Field;
use crate::model::{GpuInfo, GpuSample, Inventory, MigInstanceInfo, MigMode};

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
}
