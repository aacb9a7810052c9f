//! Per-process metrics: GPU memory, SM utilisation and idle time of every process NVML reports, with
//! attribution labels (Kubernetes pod UID and container id, Slurm job id) from the sampler.
//!
//! Capped at `--collector.processes.max` series per family: the processes holding the most memory
//! are kept, and the number left out is exported as `tessera_exporter_processes_truncated`
//! (by the exporter collector), so nothing is dropped silently. Off with
//! `--no-collector.processes`.
//!
//! Labels: `gpu`, `uuid`, `pid`, `process`, `gpu_instance`, `compute_instance` (empty outside
//! MIG), `pod_uid`, `container_id`, `slurm_job_id` (empty when unknown), and `pod`, `namespace`,
//! `container` when exactly one container holds the process's device (from the kubelet; the
//! device is the process's MIG instance in MIG mode, else its GPU: [`device_of`]). Names, help
//! and units come from [`super::catalog`].

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use super::catalog as c;
use super::{Collector, Context, HolderLabels, gauge, held};
use crate::sampler::Snapshot;
use tessera_core::model::{Attribution, GpuSample, NodeSample, ProcessSample};

/// Per-process metrics.
pub struct ProcessCollector;

/// The processes to export (largest memory first, capped at `max`) and how many were left out.
pub fn selected(sample: &NodeSample, max: usize) -> (Vec<(&GpuSample, &ProcessSample)>, usize) {
    let mut all: Vec<(&GpuSample, &ProcessSample)> = sample
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter().map(move |p| (g, p)))
        .collect();
    let total = all.len();
    if total > max {
        all.sort_by(|a, b| {
            b.1.used_memory_bytes
                .unwrap_or(0)
                .cmp(&a.1.used_memory_bytes.unwrap_or(0))
                .then(a.0.index.cmp(&b.0.index))
                .then(a.1.pid.cmp(&b.1.pid))
        });
        all.truncate(max);
        all.sort_by(|a, b| a.0.index.cmp(&b.0.index).then(a.1.pid.cmp(&b.1.pid)));
    }
    let kept = all.len();
    (all, total - kept)
}

/// The device a process runs on, as the kubelet names it: its MIG instance's UUID when it runs in
/// one (found by GPU and compute instance id in the sample), else its GPU's UUID. `None` for a
/// process in a MIG instance the sample does not list.
pub fn device_of<'a>(gpu: &'a GpuSample, process: &ProcessSample) -> Option<&'a str> {
    match (process.gpu_instance_id, process.compute_instance_id) {
        (None, _) => Some(&gpu.uuid),
        (Some(gi), ci) => gpu
            .mig
            .iter()
            .find(|m| m.gpu_instance_id == gi && ci.is_none_or(|ci| m.compute_instance_id == ci))
            .map(|m| m.uuid.as_str()),
    }
}

impl Collector for ProcessCollector {
    fn name(&self) -> &'static str {
        "process"
    }

    fn collect(&self, ctx: &Context<'_>, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let Some(sample) = &ctx.snapshot.sample else {
            return Ok(());
        };
        if !ctx.options.processes {
            return Ok(());
        }
        let (procs, _) = selected(sample, ctx.options.processes_max);
        let rows = rows(ctx.snapshot, &procs);
        let each = |f: &dyn Fn(&GpuSample, &ProcessSample) -> Option<f64>| {
            procs
                .iter()
                .zip(&rows)
                .filter_map(|((g, p), r)| Some((r.labels(), f(g, p)?)))
                .collect::<Vec<_>>()
        };
        gauge(
            enc,
            &c::PROCESS_MEMORY_USED,
            each(&|_, p| Some(p.used_memory_bytes? as f64)),
        )?;
        gauge(enc, &c::PROCESS_SM_UTILIZATION, each(&|_, p| p.sm_ratio))?;
        let idle = &ctx.snapshot.idle.processes;
        gauge(
            enc,
            &c::PROCESS_IDLE,
            each(&|g, p| idle.get(&(g.uuid.clone(), p.pid)).copied()),
        )
    }
}

/// The label names of a process series, in order (before the holder's).
const KEYS: [&str; 9] = [
    "gpu",
    "uuid",
    "pid",
    "process",
    "gpu_instance",
    "compute_instance",
    "pod_uid",
    "container_id",
    "slurm_job_id",
];

/// A selected process's label values ([`KEYS`]) and its device's holder.
struct Row<'a> {
    values: [String; 9],
    holder: HolderLabels<'a>,
}

impl<'a> Row<'a> {
    fn labels(&self) -> ([(&'static str, String); 9], HolderLabels<'a>) {
        (
            std::array::from_fn(|i| (KEYS[i], self.values[i].clone())),
            self.holder,
        )
    }
}

/// The labels of each selected process: its GPU, name, MIG instance, attribution (empty when
/// unknown) and the kubelet's holder of its device.
fn rows<'a>(snap: &'a Snapshot, procs: &[(&GpuSample, &ProcessSample)]) -> Vec<Row<'a>> {
    let opt = |v: Option<u32>| v.map(|x| x.to_string()).unwrap_or_default();
    procs
        .iter()
        .map(|(g, p)| {
            let a = snap.attribution.get(&p.pid);
            let get = |f: fn(&Attribution) -> &Option<String>| {
                a.and_then(|a| f(a).clone()).unwrap_or_default()
            };
            let values = [
                g.index.to_string(),
                g.uuid.clone(),
                p.pid.to_string(),
                p.name.clone().unwrap_or_default(),
                opt(p.gpu_instance_id),
                opt(p.compute_instance_id),
                get(|a| &a.pod_uid),
                get(|a| &a.container_id),
                get(|a| &a.slurm_job_id),
            ];
            let holder = device_of(g, p).map(|d| held(snap, d)).unwrap_or_default();
            Row { values, holder }
        })
        .collect()
}
