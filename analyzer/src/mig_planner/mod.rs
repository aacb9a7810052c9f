//! The MIG layout planner: packs workloads (memory and compute needs) into MIG instances on the
//! fleet's GPUs with explicit placements, minimising GPUs used and then fragmentation.
//!
//! - Input: [`Workload`]s (memory need in bytes, headroom already included; compute need in
//!   slices) and the fleet's [`FleetGpu`]s (node, index, UUID, model).
//! - Each workload gets its own GPU instance: on a model, the smallest profile (by memory slices,
//!   then compute slices; `+me` profiles are never chosen) whose memory and compute slices cover
//!   the need. On the tables in `tessera_core::mig` that profile dominates every larger one
//!   (fewer slots, fewer slices, at least as many legal starts), so choosing it loses nothing.
//! - Search: [`exact`] branch and bound for small cases (proves optimality of the GPU count when it
//!   finishes within its node budget), [`heuristic`] best-fit decreasing with a bin-emptying local
//!   improvement for large fleets. Either way each GPU's placements are chosen last, among all
//!   legal placements of its instances, to keep the largest contiguous free range (fragmentation).
//! - Every plan reports a lower bound on GPUs and its gap (`lower_bound`).
//! - A GPU whose layout is one instance of its model's full-GPU profile (`7g.*` on the 7-slice
//!   models, `4g.24gb` on A30: one workload that needs the whole GPU) is left out of MIG mode
//!   ([`PlannedGpu::mig_enabled`] false, [`is_whole_gpu`]): MIG would give it nothing and cost
//!   peer-to-peer and some profiling. It still counts as a used GPU.
//! - Work keeps the GPU it has when the plan gives it no other place: a workload no profile of
//!   any MIG model in the fleet can hold (with its headroom: it runs on a whole GPU today), and a
//!   workload for which the fleet has no GPU left, keeps the MIG-capable GPU it runs on, whole and
//!   MIG off ([`Proposal::kept`]). Only such workloads without a known GPU are reported in
//!   [`Proposal::unplaceable`]; none is ever dropped. [`Proposal::gpu_count`] gives GPUs before,
//!   after and freed by the one definition ([`GpuCount`]). GPUs of models
//!   without a MIG table are kept out of the plan and listed in [`Proposal::non_mig_gpus`].
//!
//! Pure: no I/O. Demand extraction from frames is in [`demand`], file output in [`export`],
//! day/night schedules in [`schedule`].

pub mod demand;
pub mod exact;
pub mod export;
pub mod heuristic;
pub mod placement;
mod run;
pub mod schedule;
mod summary;

mod packing;
pub use run::{PlanOutcome, PlanRequest, PlanRunError, Progress, Units, day_file, run};

pub use crate::gpu_count::{GpuCount, does_not_help_sentence};
pub use packing::plan;
pub(crate) use packing::prepare;

use std::collections::BTreeSet;

use serde::Serialize;
use tessera_core::mig::{self, GpuModel, LayoutInstance, MigProfile};
use tessera_core::model::Placement;

pub use placement::{best_placement, first_placement};

/// A workload to place: needs one MIG instance with at least this memory and these compute slices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    /// Unique name (`team-a/llm-chat`, `node/GPU1/GI2`, …).
    pub id: String,
    /// Node it runs on now.
    pub node: Option<String>,
    /// UUID of the GPU it runs on now.
    pub current_gpu: Option<String>,
    /// Memory need in bytes (peak × (1 + headroom)).
    pub memory_bytes: u64,
    /// Compute need in slices (≥ 1).
    pub compute_slices: u32,
}

/// One GPU of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetGpu {
    pub node: String,
    /// NVML index on the node.
    pub index: u32,
    pub uuid: Option<String>,
    /// tessera model key (`H100-80GB`) or NVML product name (`NVIDIA H100 80GB HBM3`).
    pub model: String,
}

impl FleetGpu {
    /// The MIG model of this GPU, if tessera has a table for it.
    pub fn mig_model(&self) -> Option<&'static GpuModel> {
        mig::model(&self.model)
            .or_else(|| mig::model_by_nvml_name(&self.model))
            .filter(|m| m.supports_mig())
    }
}

/// Search limits.
#[derive(Debug, Clone)]
pub struct PlannerOptions {
    /// Use the exact search up to this many placeable workloads (default 14).
    pub exact_max_workloads: usize,
    /// Node budget of the exact search (default 300,000).
    pub exact_node_limit: u64,
    /// Force the heuristic (for benchmarks).
    pub heuristic_only: bool,
}

impl Default for PlannerOptions {
    fn default() -> Self {
        PlannerOptions {
            exact_max_workloads: 14,
            exact_node_limit: 300_000,
            heuristic_only: false,
        }
    }
}

/// One instance of a planned GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedInstance {
    pub profile_id: u32,
    /// Name on the GPU's model.
    pub profile: String,
    pub placement: Placement,
    /// Indices into the planner's workload list.
    pub workloads: Vec<usize>,
}

/// A GPU the plan uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedGpu {
    pub gpu: FleetGpu,
    /// tessera model key.
    pub model: &'static str,
    pub instances: Vec<PlannedInstance>,
    /// False when the layout is one full-GPU instance ([`is_whole_gpu`]): the GPU runs its one
    /// workload whole, MIG mode off; `instances` still shows the packing.
    pub mig_enabled: bool,
    /// The GPU is kept as it is for work no MIG instance can hold ([`Proposal::kept`]): MIG off,
    /// its workloads stay on it.
    pub kept: bool,
}

/// Why a whole-GPU layout stays out of MIG mode (completes "GPU X runs one workload that needs
/// the whole GPU").
pub const WHOLE_GPU_REASON: &str =
    "left out of MIG mode (MIG would only cost peer-to-peer and profiling)";

/// Whether these profiles on `model` are one instance of its full-GPU profile: every compute slice
/// and every memory slot (`7g.*` on A100/H100/H200, `4g.24gb` on A30). Such a GPU gains nothing
/// from MIG mode.
pub fn is_whole_gpu(model: &GpuModel, profs: &[&MigProfile]) -> bool {
    matches!(profs, [p] if p.compute_slices == model.compute_slices
        && p.memory_slices == model.memory_slots)
}

/// One plain sentence on the plan's GPUs left out of MIG mode, if any (the kept GPUs have their
/// own: [`kept_sentence`]).
pub fn whole_gpu_sentence(plan: &Proposal) -> Option<String> {
    let whole: Vec<&PlannedGpu> = plan
        .gpus
        .iter()
        .filter(|g| !g.mig_enabled && !g.kept)
        .collect();
    match whole.as_slice() {
        [] => None,
        [g] => Some(format!(
            "{}/GPU{} runs one workload that needs the whole GPU: {WHOLE_GPU_REASON}.",
            g.gpu.node, g.gpu.index
        )),
        many => Some(format!(
            "{} GPUs each run one workload that needs the whole GPU: {WHOLE_GPU_REASON}.",
            many.len()
        )),
    }
}

impl PlannedGpu {
    /// The layout as the checker's instances.
    pub fn layout(&self) -> Vec<LayoutInstance> {
        self.instances
            .iter()
            .map(|i| LayoutInstance {
                profile_id: i.profile_id,
                placement: i.placement,
            })
            .collect()
    }
}

/// One plain sentence on the work that keeps the GPU it runs on, if any.
pub fn kept_sentence(plan: &Proposal) -> Option<String> {
    match plan.kept.as_slice() {
        [] => None,
        [k] => Some(format!(
            "{} keeps the whole GPU it runs on ({}/GPU{}, MIG off): {}.",
            k.id, k.node, k.index, k.reason
        )),
        many => {
            let gpus: std::collections::BTreeSet<(&str, u32)> =
                many.iter().map(|k| (k.node.as_str(), k.index)).collect();
            Some(format!(
                "{} workload(s) keep the {} whole GPU(s) they run on (MIG off): no MIG instance holds them or no GPU has room for them.",
                many.len(),
                gpus.len()
            ))
        }
    }
}

/// A workload that keeps the GPU it runs on today (MIG off there), and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kept {
    pub workload: usize,
    pub id: String,
    pub node: String,
    /// NVML index of the GPU it keeps.
    pub index: u32,
    pub reason: String,
}

/// A workload the plan could not place, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unplaceable {
    pub workload: usize,
    pub id: String,
    pub reason: String,
}

/// The lower bound of one model, over the workloads the plan put on it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelBound {
    pub model: &'static str,
    pub workloads: usize,
    pub memory_slices: u32,
    pub compute_slices: u32,
    /// max(ceil(memory slices / slots), ceil(compute slices / compute slices per GPU)).
    pub lower_bound: u32,
    pub gpus_used: u32,
}

/// How the GPU count was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Branch and bound finished: the GPU count is optimal.
    Exact,
    /// Branch and bound ran out of its node budget: best found so far.
    ExactIncomplete,
    Heuristic,
}

/// A plan.
#[derive(Debug, Clone, Serialize)]
pub struct Proposal {
    pub gpus: Vec<PlannedGpu>,
    /// MIG-capable fleet GPUs the plan leaves empty (free as whole GPUs).
    pub free_gpus: Vec<FleetGpu>,
    pub unplaceable: Vec<Unplaceable>,
    /// Workloads that keep the MIG-capable GPU they run on today, MIG off: no MIG instance holds
    /// them (with the headroom), or no GPU has room left for them. Their GPUs are in `gpus`
    /// ([`PlannedGpu::kept`]) and count as used.
    pub kept: Vec<Kept>,
    /// Fleet GPUs of models without a MIG table: kept out of the plan.
    pub non_mig_gpus: Vec<FleetGpu>,
    pub gpus_used: u32,
    /// Lower bound on GPUs for the placed workloads (see `lower_bound`).
    pub lower_bound: u32,
    pub per_model: Vec<ModelBound>,
    pub method: Method,
}

impl Proposal {
    /// GPUs before and after this plan of `workloads` (the planner's input), by the one
    /// definition ([`GpuCount`]): before, the GPUs the workloads run on now; after, the GPUs the
    /// plan uses (kept ones included) and the GPUs of workloads it could not place, which stay
    /// where they are.
    pub fn gpu_count(&self, workloads: &[Workload]) -> GpuCount {
        let key = |g: &FleetGpu| {
            g.uuid
                .clone()
                .unwrap_or_else(|| format!("{}/GPU{}", g.node, g.index))
        };
        let before: BTreeSet<&str> = workloads
            .iter()
            .filter_map(|w| w.current_gpu.as_deref())
            .collect();
        let mut after: BTreeSet<String> = self.gpus.iter().map(|g| key(&g.gpu)).collect();
        for u in &self.unplaceable {
            if let Some(g) = workloads
                .get(u.workload)
                .and_then(|w| w.current_gpu.clone())
            {
                after.insert(g);
            }
        }
        GpuCount::new(before.len() as u32, after.len() as u32)
    }

    /// (used − bound) / bound, 0 when the bound is 0.
    pub fn gap(&self) -> f64 {
        if self.lower_bound == 0 {
            0.0
        } else {
            f64::from(self.gpus_used - self.lower_bound.min(self.gpus_used))
                / f64::from(self.lower_bound)
        }
    }
}

/// Why planning failed outright (as opposed to a workload being unplaceable).
#[derive(Debug, thiserror::Error)]
pub enum PlannerError {
    #[error("workload id {0:?} appears twice; ids must be unique")]
    DuplicateWorkload(String),
    #[error("workload {id:?} has a compute need of 0 slices; the least is 1")]
    ZeroCompute { id: String },
    #[error("GPU {index} on {node} appears twice in the fleet")]
    DuplicateGpu { node: String, index: u32 },
}

/// The planner's working view: the fleet's distinct MIG models and each workload's profile on
/// each of them.
pub(crate) struct Prepared<'a> {
    pub models: Vec<&'static GpuModel>,
    /// Fleet indices of the GPUs of each model.
    pub avail: Vec<Vec<usize>>,
    /// `need[w][m]`: index into `models[m].profiles` of workload w's profile on model m.
    pub need: Vec<Vec<Option<usize>>>,
    /// Workloads to place (indices into the input).
    pub placeable: Vec<usize>,
    pub workloads: &'a [Workload],
    /// Per workload: the index in `models` of the GPU it runs on now, when known (a new GPU for
    /// it is opened of that model when others are no better: no needless move across models).
    pub current_model: Vec<Option<usize>>,
}

impl Prepared<'_> {
    pub fn profile(&self, w: usize, m: usize) -> Option<&'static MigProfile> {
        self.need[w][m].map(|p| &self.models[m].profiles[p])
    }

    /// Share of a GPU of model m in memory slots and in compute slices that workload w takes.
    pub fn fractions(&self, w: usize, m: usize) -> Option<(f64, f64)> {
        let p = self.profile(w, m)?;
        let model = self.models[m];
        Some((
            f64::from(p.memory_slices) / f64::from(model.memory_slots),
            f64::from(p.compute_slices) / f64::from(model.compute_slices),
        ))
    }

    /// The least memory and compute fractions of workload w over all models.
    pub fn min_fractions(&self, w: usize) -> (f64, f64) {
        let mut best = (f64::INFINITY, f64::INFINITY);
        for m in 0..self.models.len() {
            if let Some((a, b)) = self.fractions(w, m) {
                best.0 = best.0.min(a);
                best.1 = best.1.min(b);
            }
        }
        best
    }
}

/// The smallest non-`+me` profile of `model` holding `memory_bytes` and `compute_slices`.
pub fn smallest_profile(model: &GpuModel, memory_bytes: u64, compute_slices: u32) -> Option<usize> {
    model
        .profiles
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            !p.media_extensions
                && p.memory_bytes >= memory_bytes
                && p.compute_slices >= compute_slices
        })
        .min_by_key(|(_, p)| (p.memory_slices, p.compute_slices, p.id))
        .map(|(i, _)| i)
}

/// Ceil with a tolerance for float sums of fractions.
fn ceil_eps(x: f64) -> u32 {
    (x - 1e-9).ceil().max(0.0) as u32
}

/// Lower bound on the GPUs any plan needs for `ws`: every GPU offers one GPU's worth of memory
/// slots and one of compute slices, and every workload takes at least its smallest share of each
/// over the models available (its smallest profile on each model); so GPUs ≥ ceil(Σ memory
/// shares) and ≥ ceil(Σ compute shares). With one model this is the per-model bound
/// max(ceil(Σ memory slices / 8), ceil(Σ compute slices / 7)).
pub(crate) fn lower_bound(p: &Prepared, ws: &[usize]) -> u32 {
    let (mut mem, mut comp) = (0.0, 0.0);
    for &w in ws {
        let (a, b) = p.min_fractions(w);
        mem += a;
        comp += b;
    }
    ceil_eps(mem).max(ceil_eps(comp))
}

/// A GPU being filled by a search: its model and workloads.
#[derive(Debug, Clone)]
pub(crate) struct Bin {
    pub model: usize,
    pub workloads: Vec<usize>,
    pub slots: u32,
    pub compute: u32,
}

impl Bin {
    pub fn new(model: usize) -> Bin {
        Bin {
            model,
            workloads: Vec::new(),
            slots: 0,
            compute: 0,
        }
    }

    /// Whether workload w fits in this bin with legal placements.
    pub fn fits(&self, p: &Prepared, w: usize) -> bool {
        let Some(prof) = p.profile(w, self.model) else {
            return false;
        };
        let model = p.models[self.model];
        if self.slots + prof.memory_slices > model.memory_slots
            || self.compute + prof.compute_slices > model.compute_slices
        {
            return false;
        }
        let mut profs: Vec<&MigProfile> = self
            .workloads
            .iter()
            .filter_map(|&o| p.profile(o, self.model))
            .collect();
        profs.push(prof);
        first_placement(model, &profs).is_some()
    }

    pub fn add(&mut self, p: &Prepared, w: usize) {
        let prof = p.profile(w, self.model).expect("checked by fits");
        self.slots += prof.memory_slices;
        self.compute += prof.compute_slices;
        self.workloads.push(w);
    }

    pub fn remove(&mut self, p: &Prepared, w: usize) {
        let prof = p.profile(w, self.model).expect("placed");
        self.slots -= prof.memory_slices;
        self.compute -= prof.compute_slices;
        self.workloads.retain(|&x| x != w);
    }

    /// Free share (memory + compute) of the GPU; smaller = fuller.
    pub fn free_share(&self, p: &Prepared) -> f64 {
        let m = p.models[self.model];
        (1.0 - f64::from(self.slots) / f64::from(m.memory_slots))
            + (1.0 - f64::from(self.compute) / f64::from(m.compute_slices))
    }
}

#[cfg(test)]
mod tests;

/// Baseline for the benchmark: GPUs used by first-fit decreasing by memory (each workload on the
/// first model of the fleet that can hold it, no local improvement), and the workloads it could
/// not place.
pub fn first_fit_decreasing_by_memory(
    workloads: &[Workload],
    fleet: &[FleetGpu],
) -> Result<(u32, usize), PlannerError> {
    let (p, _, _) = prepare(workloads, fleet)?;
    let (bins, left) = heuristic::first_fit_decreasing_by_memory(&p);
    Ok((bins.len() as u32, left.len()))
}
