//! Demand extraction: the planner's workloads and fleet from the canonical frames
//! (`docs/frames.md`). Pure over the frames it is given.
//!
//! A workload is, in this order of preference:
//! - **a MIG instance** (GPU in MIG mode): memory = the instance's peak used memory; compute =
//!   the `quantile` of its SM activity × the instance's compute slices. Without SM activity (NVML
//!   has no per-instance utilisation on A100/A30) the instance keeps its current compute slices.
//!   Named after the pods/processes seen on it, else `node/GPUi/GIj`;
//! - **a process or pod** on a GPU outside MIG mode: memory = its peak; compute = the quantile of
//!   the GPU's SM activity (else busy ratio) × the GPU's compute slices when it is the GPU's only
//!   process; on a shared GPU the quantile of its own per-process SM utilisation (a time share,
//!   like busy), else the GPU's;
//! - **the GPU itself** when it holds memory but no process was seen on it: memory = its peak,
//!   compute from its SM activity, else busy ratio.
//!
//! Activity is the per-row *mean* (`sm_active_mean`, `sm_mean`, `busy_mean`: the mean over each
//! history interval), and its `quantile` over the rows is taken; memory is the per-row maximum.
//! Memory need = peak × (1 + headroom), rounded up to bytes; compute need = ceil(activity ×
//! slices), at least 1, at most the GPU's slices. Every workload records which activity signal
//! it used. Memory below `min_memory_bytes` (per process and MIG instance) or
//! `min_gpu_memory_bytes` (a whole GPU, which includes the driver's reserve) is not a workload.
//!
//! This module does not plan; it only measures.

use std::collections::BTreeSet;

use serde::Serialize;
use tessera_core::mig;
use tessera_core::mig::plan_sections::WorkloadSource;

use super::{FleetGpu, Workload};
use crate::frames::{Frames, FramesError};

/// Why the demand could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum DemandError {
    #[error("reading frames: {0}")]
    Polars(#[from] polars::prelude::PolarsError),
    #[error(transparent)]
    Frames(#[from] FramesError),
    #[error("bad parameter {name}: {reason}")]
    Param { name: &'static str, reason: String },
    /// A worker thread of [`extract_parts_with`] panicked.
    #[error("internal error: a demand worker thread failed")]
    Worker,
}

mod part;

pub use part::{extract_part, extract_part_with};

const MIB: f64 = (1u64 << 20) as f64;

/// Parameters (flags of `tessera mig plan`).
#[derive(Debug, Clone)]
pub struct DemandParams {
    /// Memory headroom on the peak (default 0.2).
    pub headroom: f64,
    /// Activity quantile (default 0.95).
    pub quantile: f64,
    /// Least peak memory of a process or MIG instance workload (default 256 MiB).
    pub min_memory_bytes: f64,
    /// Least peak memory of a whole-GPU workload (default 1 GiB).
    pub min_gpu_memory_bytes: f64,
}

impl Default for DemandParams {
    fn default() -> Self {
        DemandParams {
            headroom: 0.2,
            quantile: 0.95,
            min_memory_bytes: 256.0 * MIB,
            min_gpu_memory_bytes: 1024.0 * MIB,
        }
    }
}

/// How a workload's demand was measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    /// `mig`, `process` or `gpu`.
    pub kind: &'static str,
    pub peak_memory_bytes: u64,
    /// The activity quantile used (0–1), if any signal existed.
    pub activity: Option<f64>,
    /// `sm_active` (GPU or MIG instance), `process_sm`, `busy`, or `none` (kept the instance's
    /// compute slices, or the whole GPU when nothing is known).
    pub activity_source: &'static str,
    /// Compute slices the activity was scaled by.
    pub slices_basis: u32,
    /// UTC hours (hours since the epoch) in which the workload held memory (schedules use them).
    #[serde(skip)]
    pub loaded_hours: BTreeSet<i64>,
    /// Where its rows are (the plan file's `workloads` entry; a replay moves these rows).
    #[serde(skip)]
    pub source: Option<WorkloadSource>,
}

/// The UTC hour (since the epoch) a row ending at `ts` ms belongs to.
pub fn hour_of(ts: i64) -> i64 {
    (ts - 1).div_euclid(3_600_000)
}

/// Workloads, their measurements and the fleet.
#[derive(Debug, Clone, Default)]
pub struct Demand {
    pub workloads: Vec<Workload>,
    pub measured: Vec<Measured>,
    pub fleet: Vec<FleetGpu>,
    pub notes: Vec<String>,
}

pub use crate::stats::quantile;

/// Compute slices for an activity share of `slices`: ceil, at least 1, at most `slices`.
pub fn compute_need(activity: f64, slices: u32) -> u32 {
    ((activity.clamp(0.0, 1.0) * f64::from(slices) - 1e-9).ceil() as u32).clamp(1, slices.max(1))
}

fn memory_need(peak: f64, headroom: f64) -> u64 {
    (peak * (1.0 + headroom)).ceil() as u64
}

fn slices_of(model: &str) -> u32 {
    mig::model(model)
        .or_else(|| mig::model_by_nvml_name(model))
        .map_or(7, |m| m.compute_slices)
}

/// Workloads before their ids are made unique, as (id, workload, measurement).
type Named = (String, Workload, Measured);

/// The demand of one node partition, before [`merge`].
#[derive(Default)]
pub struct PartDemand {
    /// MIG instance workloads, then the others (that is their order in [`Demand`]).
    mig: Vec<Named>,
    other: Vec<Named>,
    fleet: Vec<FleetGpu>,
    no_node: usize,
    unknown_profiles: usize,
}

/// Extract workloads and the fleet from the frames.
pub fn extract(frames: &Frames, p: &DemandParams) -> Result<Demand, DemandError> {
    Ok(merge([extract_part(frames, p)?]))
}

/// [`extract`] one node partition at a time (memory holds one partition's rows), merged into
/// the demand the union of the partitions gives: every workload is measured from its own
/// node's rows, and the merge keeps the union's order (MIG instances first, each kind in node
/// order) and makes ids unique in that order. Partitions whose nodes are not in order, or
/// overlap, are extracted from their union instead.
pub fn extract_parts(parts: &[&Frames], p: &DemandParams) -> Result<Demand, DemandError> {
    extract_parts_with(parts, p, &|_| {})
}

/// [`extract_parts`], calling `on_done(n)` before the `n`-th partition's rows are read
/// (progress on a terminal).
pub fn extract_parts_with(
    parts: &[&Frames],
    p: &DemandParams,
    on_done: &dyn Fn(usize),
) -> Result<Demand, DemandError> {
    // A few partitions at a time on worker threads (each reads its own rows), merged in order.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4);
    let mut extracted = Vec::new();
    for (c, chunk) in parts.chunks(workers).enumerate() {
        on_done(c * workers);
        let got: Vec<Result<PartDemand, DemandError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|f| scope.spawn(|| extract_part(f, p)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(DemandError::Worker)))
                .collect()
        });
        for g in got {
            extracted.push(g?);
        }
    }
    merge_parts(extracted, parts, p)
}

/// The demand of the partitions from their [`extract_part`]s, in partition order (`parts`: the
/// same partitions): [`merge`]d when their nodes are in order and do not overlap, else extracted
/// again from the union of the partitions.
pub fn merge_parts(
    extracted: Vec<PartDemand>,
    parts: &[&Frames],
    p: &DemandParams,
) -> Result<Demand, DemandError> {
    let mut out = Vec::with_capacity(extracted.len());
    let mut last: Option<String> = None;
    for part in extracted {
        let nodes = || part.fleet.iter().map(|g| g.node.as_str());
        let ordered = nodes().zip(nodes().skip(1)).all(|(a, b)| a <= b)
            && match (&last, nodes().next()) {
                (Some(l), Some(first)) => l.as_str() < first,
                _ => true,
            };
        if !ordered {
            let union = Frames::union(parts.iter().map(|f| (*f).clone())).map_err(|e| {
                DemandError::Param {
                    name: "frames",
                    reason: e.to_string(),
                }
            })?;
            return extract(&union, p);
        }
        if let Some(l) = nodes().next_back() {
            last = Some(l.to_string());
        }
        out.push(part);
    }
    Ok(merge(out))
}

/// The demand of the partitions, in order: their fleets, workloads (ids made unique in the
/// union's order) and notes.
pub fn merge(parts: impl IntoIterator<Item = PartDemand>) -> Demand {
    let mut d = Demand::default();
    let (mut no_node, mut unknown_profiles) = (0, 0);
    let (mut mig, mut other) = (Vec::new(), Vec::new());
    for part in parts {
        no_node += part.no_node;
        unknown_profiles += part.unknown_profiles;
        d.fleet.extend(part.fleet);
        mig.extend(part.mig);
        other.extend(part.other);
    }
    if no_node > 0 {
        d.notes.push(format!(
            "{no_node} GPU(s) without node, index or UUID were left out (a plan needs all three)"
        ));
    }
    if unknown_profiles > 0 {
        d.notes.push(format!(
            "{unknown_profiles} MIG instance(s) on GPUs of unknown models or with unknown profile ids were left out"
        ));
    }
    let mut used_ids: BTreeSet<String> = BTreeSet::new();
    for (mut id, w, m) in mig.into_iter().chain(other) {
        if !used_ids.insert(id.clone()) {
            let base = format!("{id}@{}/GPU", w.node.as_deref().unwrap_or("?"));
            let mut k = 2;
            id = base.clone();
            while !used_ids.insert(id.clone()) {
                id = format!("{base}#{k}");
                k += 1;
            }
        }
        d.workloads.push(Workload { id, ..w });
        d.measured.push(m);
    }
    d
}

/// The columns [`extract_part`] reads, per table.
pub const COLUMNS: [(crate::frames::Table, &[&str]); 3] = [
    (
        crate::frames::Table::Gpu,
        &[
            "ts",
            "node",
            "gpu",
            "uuid",
            "model",
            "mig_enabled",
            "memory_used_max_bytes",
            "sm_active_mean",
            "busy_mean",
        ],
    ),
    (
        crate::frames::Table::Process,
        &[
            "ts",
            "node",
            "uuid",
            "pid",
            "process",
            "gpu_instance",
            "namespace",
            "pod",
            "slurm_job_id",
            "memory_used_max_bytes",
            "sm_mean",
        ],
    ),
    (
        crate::frames::Table::Mig,
        &[
            "ts",
            "node",
            "uuid",
            "gpu",
            "gpu_instance",
            "profile_id",
            "memory_used_max_bytes",
            "sm_active_mean",
        ],
    ),
];
