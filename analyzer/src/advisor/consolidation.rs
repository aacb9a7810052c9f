//! Consolidation candidates: whole-GPU workloads (everything running on one GPU outside MIG
//! mode) whose *time-aligned* combined demand fits on fewer GPUs of the same model.
//!
//! Each loaded GPU's series is bucketed to `step` (memory: max; activity: max of SM activity,
//! else of the busy ratio), aligned on the same buckets, and packed first-fit-decreasing by peak
//! memory onto GPUs of its model. A group fits on one GPU when, on the *summed* series,
//! - peak memory × (1 + headroom) ≤ the GPU's memory,
//! - the `quantile` of summed activity ≤ `compute_target`, and
//! - the summed activity never exceeds 1 (so the plan never exceeds capacity on history).
//!
//! A row longer than the step fills every bucket its interval covers, so data sampled every
//! 5 minutes is aligned as well as 10-second rows. Buckets where a GPU has no data count at that
//! GPU's own peak (a gap never makes a plan look better). Risk is the share of buckets where the combined activity exceeded the target.
//! MIG-enabled GPUs are left to the MIG planner. This module plans on history; it moves nothing:
//! each move names who would carry it out ([`super::scheduler::moved_by`]: the Kubernetes
//! scheduler for a pod, Slurm for a job's next submission, no one across the two).

mod raw;

use std::collections::BTreeMap;

use super::evidence::{ConsolidationEvidence, PlanGpu, PlanGroup, PlanWorkload};
use super::scheduler::{self, Scheduler};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity, finding_id,
    hours, r3, unbox,
};
use crate::frames::Frames;
pub use raw::{RawWorkload, RawWorkloads, raw_workloads};

const GIB: f64 = (1u64 << 30) as f64;

/// Thresholds (flags `--consolidation.*`).
#[derive(Debug, Clone)]
pub struct ConsolidationParams {
    /// Bucket length of the aligned series, ms (default 60 s).
    pub step_ms: i64,
    /// Memory headroom on the combined peak (default 0.10).
    pub headroom: f64,
    /// Quantile of combined activity that must stay under the target (default 0.95).
    pub quantile: f64,
    /// Activity target for that quantile (default 0.8).
    pub compute_target: f64,
    /// Memory peak below which a GPU is not a workload (empty GPU), bytes (default 1 GiB).
    pub min_memory_bytes: f64,
}

impl Default for ConsolidationParams {
    fn default() -> Self {
        ConsolidationParams {
            step_ms: 60_000,
            headroom: 0.10,
            quantile: 0.95,
            compute_target: 0.8,
            min_memory_bytes: GIB,
        }
    }
}

/// The consolidation detector.
pub struct Consolidation;

/// One loaded GPU with its aligned series.
#[derive(Debug, Clone)]
pub struct Workload {
    pub entity: Entity,
    /// Processes/pods seen on it.
    pub tenants: Vec<String>,
    /// Who held it: pods, Slurm jobs, both or unknown.
    pub scheduler: Scheduler,
    pub capacity_bytes: f64,
    pub mem: Vec<f32>,
    pub act: Vec<f32>,
    pub peak_mem: f32,
    pub peak_act: f32,
    /// `sm_active` or `busy`.
    pub activity_source: &'static str,
}

/// A group of workloads planned onto one GPU (the host: the first member).
#[derive(Debug, Clone)]
pub struct Bin {
    pub members: Vec<usize>,
    pub mem: Vec<f32>,
    pub act: Vec<f32>,
    pub peak_mem: f32,
    pub peak_act: f32,
}

/// The nearest-rank quantile of `v` ([`crate::stats::quantile`] on a copy); 0 when empty.
fn quantile(v: &[f32], q: f64) -> f32 {
    crate::stats::quantile(&mut v.to_vec(), q).unwrap_or(0.0)
}

/// Aligns every partition's workloads on the common bucket range and fills the gaps: a bucket
/// without data counts at the workload's own peak (a gap never makes a plan look better).
pub fn align(parts: Vec<RawWorkloads>) -> (Vec<Workload>, Vec<String>) {
    let range = parts
        .iter()
        .filter_map(|p| p.buckets)
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
    let no_total: usize = parts.iter().map(|p| p.no_total).sum();
    let no_memory: usize = parts.iter().map(|p| p.no_memory).sum();
    let gpus: usize = parts.iter().map(|p| p.gpus).sum();
    let mut notes: Vec<String> = parts.iter().flat_map(|p| p.notes.clone()).collect();
    notes.dedup();
    let Some((bmin, bmax)) = range else {
        return (Vec::new(), notes);
    };
    let len = (bmax - bmin + 1) as usize;
    let mut out = Vec::new();
    for w in parts.into_iter().flat_map(|p| p.workloads) {
        let off = (w.first_bucket - bmin) as usize;
        let mut m = vec![f32::NAN; len];
        let mut a = vec![f32::NAN; len];
        m[off..off + w.mem.len()].copy_from_slice(&w.mem);
        a[off..off + w.act.len()].copy_from_slice(&w.act);
        let peak_mem = m
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .fold(0.0, f32::max);
        let peak_act = a
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .fold(0.0, f32::max);
        // Unknown buckets count at the workload's own peak.
        for v in &mut m {
            if v.is_nan() {
                *v = peak_mem;
            }
        }
        let any_act = a.iter().any(|v| !v.is_nan());
        for v in &mut a {
            if v.is_nan() {
                // No activity signal at all: assume the GPU is fully used (never consolidated).
                *v = if any_act { peak_act } else { 1.0 };
            }
        }
        out.push(Workload {
            entity: w.entity,
            tenants: w.tenants,
            scheduler: w.scheduler,
            capacity_bytes: w.capacity_bytes,
            peak_mem,
            peak_act: if any_act { peak_act } else { 1.0 },
            mem: m,
            act: a,
            activity_source: if w.uses_sm { "sm_active" } else { "busy" },
        });
    }
    if no_total > 0 {
        notes.push(format!(
            "{no_total} loaded GPU(s) report no memory total and were left out"
        ));
    }
    if no_memory > 0 {
        notes.push(format!(
            "memory used is missing for {no_memory} of {gpus} GPU(s) outside MIG: not judged (whether workloads fit on one GPU depends on their memory; activity alone cannot tell)"
        ));
    }
    (out, notes)
}

/// Loaded GPUs outside MIG mode, bucketed and aligned (pure over the frames).
pub fn workloads(
    frames: &Frames,
    p: &ConsolidationParams,
) -> Result<(Vec<Workload>, Vec<String>), AdvisorError> {
    Ok(align(vec![raw_workloads(frames, p)?]))
}

/// Would `w` fit into `bin` on a GPU of `cap` bytes?
fn fits(bin: &Bin, w: &Workload, cap: f64, p: &ConsolidationParams) -> bool {
    let limit = (cap / (1.0 + p.headroom)) as f32;
    if bin.peak_mem + w.peak_mem > limit {
        let peak = bin
            .mem
            .iter()
            .zip(&w.mem)
            .map(|(a, b)| a + b)
            .fold(0.0, f32::max);
        if peak > limit {
            return false;
        }
    }
    if bin.peak_act + w.peak_act <= p.compute_target as f32 {
        return true;
    }
    let sum: Vec<f32> = bin.act.iter().zip(&w.act).map(|(a, b)| a + b).collect();
    if sum.iter().any(|&v| v > 1.0) {
        return false;
    }
    quantile(&sum, p.quantile) <= p.compute_target as f32
}

/// First-fit decreasing by peak memory over the workloads of one model; returns the bins.
pub fn pack(ws: &[Workload], idx: &[usize], p: &ConsolidationParams) -> Vec<Bin> {
    let cap = idx
        .iter()
        .map(|&i| ws[i].capacity_bytes)
        .fold(f64::INFINITY, f64::min);
    let mut order = idx.to_vec();
    order.sort_by(|&a, &b| {
        ws[b]
            .peak_mem
            .total_cmp(&ws[a].peak_mem)
            .then(ws[b].peak_act.total_cmp(&ws[a].peak_act))
            .then(a.cmp(&b))
    });
    let mut bins: Vec<Bin> = Vec::new();
    for i in order {
        let w = &ws[i];
        if let Some(bin) = bins.iter_mut().find(|bin| fits(bin, w, cap, p)) {
            for (a, b) in bin.mem.iter_mut().zip(&w.mem) {
                *a += b;
            }
            for (a, b) in bin.act.iter_mut().zip(&w.act) {
                *a += b;
            }
            bin.peak_mem = bin.mem.iter().copied().fold(0.0, f32::max);
            bin.peak_act = bin.act.iter().copied().fold(0.0, f32::max);
            bin.members.push(i);
        } else {
            bins.push(Bin {
                members: vec![i],
                mem: w.mem.clone(),
                act: w.act.clone(),
                peak_mem: w.peak_mem,
                peak_act: w.peak_act,
            });
        }
    }
    bins
}

impl Detector for Consolidation {
    fn id(&self) -> &'static str {
        ConsolidationEvidence::DETECTOR
    }

    fn title(&self) -> &'static str {
        "Consolidation candidates"
    }

    fn validate(&self, params: &Params) -> Result<(), AdvisorError> {
        let p = &params.consolidation;
        if !(0.0..=1.0).contains(&p.quantile) || !(0.0..=1.0).contains(&p.compute_target) {
            return Err(AdvisorError::Param {
                name: "--consolidation.quantile/--consolidation.compute-target",
                reason: "must be in 0–1".into(),
            });
        }
        Ok(())
    }

    fn partial(&self, frames: &Frames, params: &Params) -> Result<Partial, AdvisorError> {
        Ok(Box::new(raw_workloads(frames, &params.consolidation)?))
    }

    fn finish(&self, parts: Vec<Partial>, params: &Params) -> Result<DetectorOutput, AdvisorError> {
        let p = &params.consolidation;
        let (ws, notes) = align(unbox::<RawWorkloads>(self.id(), parts)?);
        let mut out = DetectorOutput {
            notes,
            ..DetectorOutput::default()
        };
        let mut by_model: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, w) in ws.iter().enumerate() {
            by_model
                .entry(w.entity.model.clone().unwrap_or_else(|| "unknown".into()))
                .or_default()
                .push(i);
        }
        let step_h = hours(p.step_ms);
        let mut freed_total = 0usize;
        for (model, idx) in &by_model {
            let bins = pack(&ws, idx, p);
            let freed = idx.len() - bins.len();
            if freed == 0 {
                continue;
            }
            freed_total += freed;
            let cap = idx
                .iter()
                .map(|&i| ws[i].capacity_bytes)
                .fold(f64::INFINITY, f64::min);
            let buckets = ws[idx[0]].mem.len();
            let mut schedulers = std::collections::BTreeSet::new();
            let plan: Vec<PlanGroup> = bins
                .iter()
                .filter(|b| b.members.len() > 1)
                .map(|b| plan_group(&ws, b, cap, buckets, p))
                .collect();
            let moves: Vec<String> = bins
                .iter()
                .filter(|b| b.members.len() > 1)
                .flat_map(|b| {
                    let host = b.members[0];
                    b.members[1..].iter().map(move |&i| (i, host))
                })
                .map(|(i, host)| {
                    let s = moved_by(&ws, i, host).0;
                    schedulers.insert(s);
                    format!(
                        "{} → {} ({})",
                        label(&ws[i]),
                        ws[host].entity.label(),
                        s.by()
                    )
                })
                .collect();
            let gpu_hours = freed as f64 * buckets as f64 * step_h;
            out.findings.push(Finding::new(
                finding_id(self.id(), &[model]),
                Severity::Warning,
                Entity {
                    kind: "gpu_model".into(),
                    model: Some(model.clone()),
                    ..Entity::default()
                },
                format!(
                    "{model}: {} loaded GPU(s) fit on {} — {freed} GPU(s) freed ({:.0} GPU-hours over the period)",
                    idx.len(),
                    bins.len(),
                    gpu_hours
                ),
                format!(
                    "co-locate (MPS or time-slicing, or MIG layouts from tessera mig plan): {}. {}",
                    moves.join("; "),
                    scheduler::who_moves(&schedulers)
                ),
                ConsolidationEvidence {
                    model: model.clone(),
                    gpus_loaded: idx.len(),
                    gpus_needed: bins.len(),
                    gpus_freed: freed,
                    gpu_hours_freed: r3(gpu_hours),
                    capacity_gib: r3(cap / GIB),
                    headroom: p.headroom,
                    quantile: p.quantile,
                    compute_target: p.compute_target,
                    step_seconds: p.step_ms / 1000,
                    plan,
                },
            ));
        }
        let count =
            crate::gpu_count::GpuCount::new(ws.len() as u32, (ws.len() - freed_total) as u32);
        out.summary = format!(
            "{} loaded GPU(s) outside MIG: {} by co-locating workloads whose combined peak memory (+{:.0}%) and p{:.0} activity (≤ {:.0}%) fit",
            ws.len(),
            count.text(),
            p.headroom * 100.0,
            p.quantile * 100.0,
            p.compute_target * 100.0
        );
        Ok(out)
    }
}

/// Who moves workload `i` onto host `h`: its scheduler, not tessera.
fn moved_by(ws: &[Workload], i: usize, h: usize) -> (Scheduler, String) {
    let node = |k: usize| ws[k].entity.node.as_deref().unwrap_or("?");
    scheduler::moved_by(ws[i].scheduler, ws[h].scheduler, node(i), node(h))
}

/// A workload's label: its GPU and, when known, its tenants.
fn label(w: &Workload) -> String {
    let mut s = w.entity.label();
    if !w.tenants.is_empty() {
        s.push_str(&format!(" [{}]", w.tenants.join("; ")));
    }
    s
}

/// One bin of several workloads as a plan group: its host, each workload (and who moves it),
/// and the combined series' peaks, headroom on a GPU of `cap` bytes and shares of the `buckets`
/// over the compute target and over capacity.
fn plan_group(
    ws: &[Workload],
    b: &Bin,
    cap: f64,
    buckets: usize,
    p: &ConsolidationParams,
) -> PlanGroup {
    let host = &ws[b.members[0]];
    let over_target = b
        .act
        .iter()
        .filter(|&&v| f64::from(v) > p.compute_target)
        .count();
    let over_cap = b.act.iter().filter(|&&v| v > 1.0).count()
        + b.mem.iter().filter(|&&v| f64::from(v) > cap).count();
    PlanGroup {
        host: PlanGpu {
            node: host.entity.node.clone(),
            gpu: host.entity.gpu,
            uuid: host.entity.uuid.clone(),
        },
        workloads: b
            .members
            .iter()
            .map(|&i| PlanWorkload {
                moved_by: (i != b.members[0]).then(|| moved_by(ws, i, b.members[0]).1),
                scheduler: ws[i].scheduler,
                node: ws[i].entity.node.clone(),
                gpu: ws[i].entity.gpu,
                uuid: ws[i].entity.uuid.clone(),
                label: label(&ws[i]),
                memory_peak_gib: r3(f64::from(ws[i].peak_mem) / GIB),
                activity_peak: r3(f64::from(ws[i].peak_act)),
                activity_source: ws[i].activity_source.to_string(),
            })
            .collect(),
        combined_memory_peak_gib: r3(f64::from(b.peak_mem) / GIB),
        memory_headroom: r3(1.0 - f64::from(b.peak_mem) / cap),
        combined_activity_p95: r3(f64::from(quantile(&b.act, 0.95))),
        combined_activity_p99: r3(f64::from(quantile(&b.act, 0.99))),
        combined_activity_max: r3(f64::from(b.peak_act)),
        risk_over_target_share: r3(over_target as f64 / buckets.max(1) as f64),
        over_capacity_share: r3(over_cap as f64 / buckets.max(1) as f64),
    }
}
