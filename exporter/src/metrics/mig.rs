//! MIG instance metrics: identity with profile and placement (`tessera_mig_info`), memory, SM
//! activity and the profiling pipes (GPM, Hopper and later) per instance; with `--mig.config`, per GPU whether its layout
//! differs from the planned one (`tessera_mig_layout_drift`, computed from the snapshot's
//! inventory, see [`tessera_core::mig::parted`]).
//!
//! Labels: `gpu`, `uuid` (of the parent GPU), `gpu_instance`, `compute_instance`, `profile`, and
//! `pod`, `namespace`, `container` when exactly one container holds the instance's MIG device
//! (from the kubelet, see [`super::HolderLabels`]); the drift series have `gpu`, `uuid` and
//! `config` (the label of the selected config).

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use super::{Collector, Context, HolderLabels, family, held, units};
use tessera_core::model::Profiling;

/// The pipes of a [`Profiling`] as (`pipe` label, value).
type Pipes = Vec<(&'static str, Option<f64>)>;

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
            let drift = plan.drift(inventory);
            let idx: Vec<String> = drift.iter().map(|d| d.index.to_string()).collect();
            let labels = |i: usize| {
                [
                    ("gpu", idx[i].as_str()),
                    ("uuid", drift[i].uuid.as_str()),
                    ("config", plan.label.as_str()),
                ]
            };
            family(
                enc,
                "tessera_mig_layout_drift",
                "1 when the GPU's MIG mode or GPU instances per profile differ from the planned layout (--mig.config, --mig.config-label), 0 when they match.",
                None,
                (0..drift.len())
                    .map(|i| (labels(i), drift[i].drifted as i64))
                    .collect(),
            )?;
            family(
                enc,
                "tessera_mig_layout_drift_instances",
                "GPU instances to create or destroy to match the planned MIG layout.",
                None,
                (0..drift.len())
                    .map(|i| (labels(i), drift[i].differing_instances as i64))
                    .collect(),
            )?;
        }
        struct Row<'a> {
            gpu: String,
            uuid: &'a str,
            gi: String,
            ci: String,
            profile: &'a str,
            holder: HolderLabels<'a>,
        }
        let mut rows = Vec::new();
        let mut info = Vec::new();
        for g in &inventory.gpus {
            for m in &g.mig_instances {
                rows.push((
                    g.index,
                    m.gpu_instance_id,
                    m.compute_instance_id,
                    Row {
                        gpu: g.index.to_string(),
                        uuid: &g.uuid,
                        gi: m.gpu_instance_id.to_string(),
                        ci: m.compute_instance_id.to_string(),
                        profile: &m.profile_name,
                        holder: held(ctx.snapshot, &m.uuid),
                    },
                ));
                info.push((m, g.index.to_string(), g.uuid.as_str()));
            }
        }
        let extra: Vec<[String; 3]> = info
            .iter()
            .map(|(m, _, _)| {
                [
                    m.profile_id.to_string(),
                    m.placement.start.to_string(),
                    m.placement.size.to_string(),
                ]
            })
            .collect();
        family(
            enc,
            "tessera_mig_info",
            "MIG instance identity: profile, profile id, placement on the memory-slice axis and MIG UUID (value is always 1).",
            None,
            rows.iter()
                .zip(&info)
                .zip(&extra)
                .map(|(((_, _, _, r), (m, _, _)), e)| {
                    (
                        (
                            [
                                ("gpu", r.gpu.as_str()),
                                ("uuid", r.uuid),
                                ("gpu_instance", r.gi.as_str()),
                                ("compute_instance", r.ci.as_str()),
                                ("profile", r.profile),
                                ("profile_id", e[0].as_str()),
                                ("placement_start", e[1].as_str()),
                                ("placement_size", e[2].as_str()),
                                ("mig_uuid", m.uuid.as_str()),
                            ],
                            r.holder,
                        ),
                        1i64,
                    )
                })
                .collect(),
        )?;
        let Some(sample) = &ctx.snapshot.sample else {
            return Ok(());
        };
        let series = |f: &dyn Fn(&tessera_core::model::MigSample) -> Option<f64>| {
            let mut out = Vec::new();
            for (gpu, gi, ci, r) in &rows {
                let Some(m) = sample.gpus.iter().find(|g| g.index == *gpu).and_then(|g| {
                    g.mig
                        .iter()
                        .find(|m| m.gpu_instance_id == *gi && m.compute_instance_id == *ci)
                }) else {
                    continue;
                };
                if let Some(v) = f(m) {
                    out.push((
                        (
                            [
                                ("gpu", r.gpu.as_str()),
                                ("uuid", r.uuid),
                                ("gpu_instance", r.gi.as_str()),
                                ("compute_instance", r.ci.as_str()),
                                ("profile", r.profile),
                            ],
                            r.holder,
                        ),
                        v,
                    ));
                }
            }
            out
        };
        family(
            enc,
            "tessera_mig_memory_used",
            "Memory in use in the MIG instance.",
            units::bytes(),
            series(&|m| m.memory_used_bytes.map(|v| v as f64)),
        )?;
        family(
            enc,
            "tessera_mig_memory_total",
            "Memory of the MIG instance.",
            units::bytes(),
            series(&|m| m.memory_total_bytes.map(|v| v as f64)),
        )?;
        family(
            enc,
            "tessera_mig_sm_active",
            "SM activity of the MIG instance (GPM, Hopper and later; NVML has none on Ampere).",
            units::ratio(),
            series(&|m| m.sm_active_ratio),
        )?;
        family(
            enc,
            "tessera_mig_tensor_active",
            "Share of the interval any tensor pipe of the MIG instance was active (GPM, Hopper and later).",
            units::ratio(),
            series(&|m| m.profiling.tensor_active_ratio),
        )?;
        family(
            enc,
            "tessera_mig_dram_active",
            "Share of the interval the MIG instance's DRAM bandwidth was in use (GPM, Hopper and later).",
            units::ratio(),
            series(&|m| m.profiling.dram_active_ratio),
        )?;
        for (name, help, pipes) in [
            (
                "tessera_mig_tensor_pipe_active",
                "Share of the interval a tensor pipe of this kind of the MIG instance was active: dfma, hmma, imma (GPM, Hopper and later).",
                (|p: &Profiling| p.tensor_pipes().to_vec()) as fn(&Profiling) -> Pipes,
            ),
            (
                "tessera_mig_pipe_active",
                "Share of the interval a non-tensor pipe of the MIG instance was active: fp64, fp32, fp16, integer (GPM, Hopper and later).",
                |p: &Profiling| p.pipes().to_vec(),
            ),
        ] {
            let mut out = Vec::new();
            for (gpu, gi, ci, r) in &rows {
                let Some(m) = sample.gpus.iter().find(|g| g.index == *gpu).and_then(|g| {
                    g.mig
                        .iter()
                        .find(|m| m.gpu_instance_id == *gi && m.compute_instance_id == *ci)
                }) else {
                    continue;
                };
                for (pipe, v) in pipes(&m.profiling) {
                    if let Some(v) = v {
                        out.push((
                            (
                                [
                                    ("gpu", r.gpu.as_str()),
                                    ("uuid", r.uuid),
                                    ("gpu_instance", r.gi.as_str()),
                                    ("compute_instance", r.ci.as_str()),
                                    ("profile", r.profile),
                                    ("pipe", pipe),
                                ],
                                r.holder,
                            ),
                            v,
                        ));
                    }
                }
            }
            family(enc, name, help, units::ratio(), out)?;
        }
        Ok(())
    }
}
