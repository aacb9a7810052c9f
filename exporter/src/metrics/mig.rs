//! MIG instance metrics: identity with profile and placement (`tessera_mig_info`), memory, SM
//! activity and the profiling pipes (GPM, Hopper and later) per instance; with `--mig.config`, per GPU whether its layout
//! differs from the planned one (`tessera_mig_layout_drift`, computed from the snapshot's
//! inventory, see [`tessera_core::mig::parted`]).
//!
//! Labels: `gpu`, `uuid` (of the parent GPU), `gpu_instance`, `compute_instance`, `profile`, and
//! `pod`, `namespace`, `container` when exactly one container holds the instance's MIG device
//! (from the kubelet, see [`super::HolderLabels`]); the drift series have `gpu`, `uuid` and
//! `config` (the label of the selected config). Names, help and units come from
//! [`super::catalog`].
//!
//! The collector's steps, in output order: the drift against the plan, identity (from the
//! inventory), then the sampled values of each instance.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use super::catalog::{self as c, MetricDesc};
use super::{Collector, Context, HolderLabels, gauge, held};
use crate::sampler::Snapshot;
use tessera_core::mig::parted::PartedConfig;
use tessera_core::model::{Inventory, MigInstanceInfo, MigSample, NodeSample, Profiling};

/// The pipes of a [`Profiling`] as (`pipe` label, value).
type Pipes = Vec<(&'static str, Option<f64>)>;

/// `gpu`, `uuid`, `gpu_instance`, `compute_instance`, `profile` and the holder's labels.
type InstanceLabels<'a> = ([(&'static str, &'a str); 5], HolderLabels<'a>);

/// MIG instance metrics.
pub struct MigCollector;

impl Collector for MigCollector {
    fn name(&self) -> &'static str {
        "mig"
    }

    fn collect(&self, ctx: &Context<'_>, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let Some(inventory) = ctx.snapshot.inventory.as_deref() else {
            return Ok(());
        };
        if let Some(plan) = ctx.options.mig_plan.as_deref() {
            drift(enc, plan, inventory)?;
        }
        let instances = instances(ctx.snapshot, inventory);
        info(enc, &instances)?;
        let Some(sample) = &ctx.snapshot.sample else {
            return Ok(());
        };
        values(enc, &instances, sample)
    }
}

/// Per GPU the plan selects, whether its layout differs from the plan and by how many instances.
fn drift(
    enc: &mut DescriptorEncoder<'_>,
    plan: &PartedConfig,
    inventory: &Inventory,
) -> fmt::Result {
    let drift = plan.drift(inventory);
    let idx: Vec<String> = drift.iter().map(|d| d.index.to_string()).collect();
    let labels = |i: usize| {
        [
            ("gpu", idx[i].as_str()),
            ("uuid", drift[i].uuid.as_str()),
            ("config", plan.label.as_str()),
        ]
    };
    gauge(
        enc,
        &c::MIG_LAYOUT_DRIFT,
        (0..drift.len())
            .map(|i| (labels(i), drift[i].drifted as i64))
            .collect(),
    )?;
    gauge(
        enc,
        &c::MIG_LAYOUT_DRIFT_INSTANCES,
        (0..drift.len())
            .map(|i| (labels(i), drift[i].differing_instances as i64))
            .collect(),
    )
}

/// One MIG instance of the inventory and its label values.
struct Instance<'a> {
    info: &'a MigInstanceInfo,
    /// The parent GPU's NVML index.
    index: u32,
    gpu: String,
    uuid: &'a str,
    gi: String,
    ci: String,
    holder: HolderLabels<'a>,
}

impl Instance<'_> {
    /// The labels of every per-instance series.
    fn labels(&self) -> InstanceLabels<'_> {
        (
            [
                ("gpu", self.gpu.as_str()),
                ("uuid", self.uuid),
                ("gpu_instance", self.gi.as_str()),
                ("compute_instance", self.ci.as_str()),
                ("profile", self.info.profile_name.as_str()),
            ],
            self.holder,
        )
    }

    /// This instance's values in a sample, when the sample lists it.
    fn in_sample<'s>(&self, sample: &'s NodeSample) -> Option<&'s MigSample> {
        sample
            .gpus
            .iter()
            .find(|g| g.index == self.index)?
            .mig
            .iter()
            .find(|m| {
                m.gpu_instance_id == self.info.gpu_instance_id
                    && m.compute_instance_id == self.info.compute_instance_id
            })
    }
}

/// Every MIG instance of the inventory, GPU by GPU.
fn instances<'a>(snap: &'a Snapshot, inventory: &'a Inventory) -> Vec<Instance<'a>> {
    inventory
        .gpus
        .iter()
        .flat_map(|g| {
            g.mig_instances.iter().map(move |m| Instance {
                info: m,
                index: g.index,
                gpu: g.index.to_string(),
                uuid: &g.uuid,
                gi: m.gpu_instance_id.to_string(),
                ci: m.compute_instance_id.to_string(),
                holder: held(snap, &m.uuid),
            })
        })
        .collect()
}

/// `tessera_mig_info`: profile, placement and MIG UUID of each instance.
fn info(enc: &mut DescriptorEncoder<'_>, instances: &[Instance<'_>]) -> fmt::Result {
    let extra: Vec<[String; 3]> = instances
        .iter()
        .map(|r| {
            [
                r.info.profile_id.to_string(),
                r.info.placement.start.to_string(),
                r.info.placement.size.to_string(),
            ]
        })
        .collect();
    let series = instances.iter().zip(&extra).map(|(r, e)| {
        let ([gpu, uuid, gi, ci, profile], holder) = r.labels();
        let labels = [
            gpu,
            uuid,
            gi,
            ci,
            profile,
            ("profile_id", e[0].as_str()),
            ("placement_start", e[1].as_str()),
            ("placement_size", e[2].as_str()),
            ("mig_uuid", r.info.uuid.as_str()),
        ];
        ((labels, holder), 1i64)
    });
    gauge(enc, &c::MIG_INFO, series.collect())
}

/// Memory, SM activity and the profiling pipes of each instance the sample lists.
fn values(
    enc: &mut DescriptorEncoder<'_>,
    instances: &[Instance<'_>],
    sample: &NodeSample,
) -> fmt::Result {
    let sampled: Vec<(&Instance<'_>, &MigSample)> = instances
        .iter()
        .filter_map(|r| Some((r, r.in_sample(sample)?)))
        .collect();
    let series = |f: &dyn Fn(&MigSample) -> Option<f64>| {
        sampled
            .iter()
            .filter_map(|(r, m)| Some((r.labels(), f(m)?)))
            .collect::<Vec<_>>()
    };
    gauge(
        enc,
        &c::MIG_MEMORY_USED,
        series(&|m| m.memory_used_bytes.map(|v| v as f64)),
    )?;
    gauge(
        enc,
        &c::MIG_MEMORY_TOTAL,
        series(&|m| m.memory_total_bytes.map(|v| v as f64)),
    )?;
    gauge(enc, &c::MIG_SM_ACTIVE, series(&|m| m.sm_active_ratio))?;
    gauge(
        enc,
        &c::MIG_TENSOR_ACTIVE,
        series(&|m| m.profiling.tensor_active_ratio),
    )?;
    gauge(
        enc,
        &c::MIG_DRAM_ACTIVE,
        series(&|m| m.profiling.dram_active_ratio),
    )?;
    let tensor_pipes = |p: &Profiling| p.tensor_pipes().to_vec();
    piped(enc, &c::MIG_TENSOR_PIPE_ACTIVE, &sampled, tensor_pipes)?;
    piped(enc, &c::MIG_PIPE_ACTIVE, &sampled, |p| p.pipes().to_vec())
}

/// A family with a `pipe` label: one series per sampled instance and pipe that has a value.
fn piped(
    enc: &mut DescriptorEncoder<'_>,
    desc: &MetricDesc,
    sampled: &[(&Instance<'_>, &MigSample)],
    pipes: impl Fn(&Profiling) -> Pipes,
) -> fmt::Result {
    let mut out = Vec::new();
    for (r, m) in sampled {
        let ([gpu, uuid, gi, ci, profile], holder) = r.labels();
        for (pipe, v) in pipes(&m.profiling) {
            if let Some(v) = v {
                out.push((([gpu, uuid, gi, ci, profile, ("pipe", pipe)], holder), v));
            }
        }
    }
    gauge(enc, desc, out)
}
