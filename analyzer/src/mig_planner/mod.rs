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
//! - Every plan reports a lower bound on GPUs and its gap ([`lower_bound`]).
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

pub use run::{PlanOutcome, PlanRequest, PlanRunError, Progress, Units, run};

use std::collections::{BTreeMap, BTreeSet};

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

/// The one line for a MIG plan that does not reduce GPUs: it says so and points to the plan that
/// may help (consolidation by sharing, `tessera analyze`/`tessera share plan`).
pub fn does_not_help_sentence(count: &GpuCount) -> String {
    let how = if count.freed == 0 {
        "as many GPUs as today".to_string()
    } else {
        format!("{} more GPU(s) than today", -count.freed)
    };
    format!(
        "MIG does not help here: its layouts need {how} (isolated instances cost more than the sharing the workloads have now); follow the consolidation plan instead (`tessera analyze`, `tessera share plan`)."
    )
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

/// GPUs before and after a plan, and the difference: the one definition every plan kind (MIG,
/// consolidation) and every output (`mig plan`, `replay`, `report`, `analyze`) uses.
///
/// - `before`: the GPUs that hold loaded work in the period;
/// - `after`: the GPUs that hold work once the plan is in force — the GPUs the plan fills, the
///   GPUs kept for work it gives no other place (work keeps the GPU it has), and the GPUs of work
///   it leaves where it is; a GPU counts as freed only when nothing loaded remains on it;
/// - `freed`: `before − after`, negative when the plan needs more GPUs than today.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuCount {
    pub before: u32,
    pub after: u32,
    pub freed: i64,
}

impl GpuCount {
    pub fn new(before: u32, after: u32) -> GpuCount {
        GpuCount {
            before,
            after,
            freed: i64::from(before) - i64::from(after),
        }
    }

    /// Whether the plan needs at least as many GPUs as today (it does not help).
    pub fn helps(&self) -> bool {
        self.freed > 0
    }

    /// `8 → 6 GPU(s), 2 freed` / `61 → 64 GPU(s), 3 more needed`.
    pub fn text(&self) -> String {
        match self.freed {
            f if f >= 0 => format!("{} → {} GPU(s), {f} freed", self.before, self.after),
            f => format!(
                "{} → {} GPU(s), {} more needed",
                self.before, self.after, -f
            ),
        }
    }
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
    /// Lower bound on GPUs for the placed workloads (see [`lower_bound`]).
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

/// Check inputs and compute each workload's profile per model.
fn prepare<'a>(
    workloads: &'a [Workload],
    fleet: &[FleetGpu],
) -> Result<(Prepared<'a>, Vec<Unplaceable>, Vec<FleetGpu>), PlannerError> {
    let mut ids = std::collections::BTreeSet::new();
    for w in workloads {
        if !ids.insert(w.id.as_str()) {
            return Err(PlannerError::DuplicateWorkload(w.id.clone()));
        }
        if w.compute_slices == 0 {
            return Err(PlannerError::ZeroCompute { id: w.id.clone() });
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut models: Vec<&'static GpuModel> = Vec::new();
    let mut avail: Vec<Vec<usize>> = Vec::new();
    let mut non_mig = Vec::new();
    for (i, g) in fleet.iter().enumerate() {
        if !seen.insert((g.node.as_str(), g.index)) {
            return Err(PlannerError::DuplicateGpu {
                node: g.node.clone(),
                index: g.index,
            });
        }
        match g.mig_model() {
            Some(m) => match models.iter().position(|x| x.key == m.key) {
                Some(k) => avail[k].push(i),
                None => {
                    models.push(m);
                    avail.push(vec![i]);
                }
            },
            None => non_mig.push(g.clone()),
        }
    }
    let need: Vec<Vec<Option<usize>>> = workloads
        .iter()
        .map(|w| {
            models
                .iter()
                .map(|m| smallest_profile(m, w.memory_bytes, w.compute_slices))
                .collect()
        })
        .collect();
    let mut unplaceable = Vec::new();
    let mut placeable = Vec::new();
    for (i, w) in workloads.iter().enumerate() {
        if need[i].iter().any(Option::is_some) {
            placeable.push(i);
            continue;
        }
        let reason = if models.is_empty() {
            "the fleet has no GPU of a MIG-capable model tessera knows".to_string()
        } else {
            let largest: Vec<String> = models
                .iter()
                .filter_map(|m| {
                    m.profiles
                        .iter()
                        .max_by_key(|p| p.memory_bytes)
                        .map(|p| format!("{} {} ({} slices)", m.key, p.name, p.compute_slices))
                })
                .collect();
            format!(
                "needs {:.1} GiB and {} compute slices; no profile holds that (largest: {})",
                w.memory_bytes as f64 / (1u64 << 30) as f64,
                w.compute_slices,
                largest.join(", ")
            )
        };
        unplaceable.push(Unplaceable {
            workload: i,
            id: w.id.clone(),
            reason,
        });
    }
    let current_model = workloads
        .iter()
        .map(|w| {
            let uuid = w.current_gpu.as_deref()?;
            avail
                .iter()
                .position(|gs| gs.iter().any(|&g| fleet[g].uuid.as_deref() == Some(uuid)))
        })
        .collect();
    Ok((
        Prepared {
            models,
            avail,
            need,
            placeable,
            workloads,
            current_model,
        },
        unplaceable,
        non_mig,
    ))
}

/// Plan `workloads` onto `fleet`: the proposed layouts.
///
/// Work keeps the GPU it has when the plan gives it no other place: a workload that no MIG
/// profile holds (its need with headroom is more than the largest instance: it runs on the whole
/// GPU today) and a workload for which no GPU has room left keep the MIG-capable GPU they run on
/// now, whole and MIG off ([`Proposal::kept`]); that GPU is taken out of the packing, which is
/// repeated until no workload is left over that has a GPU to keep. Only workloads with no known
/// GPU of a MIG-capable model are [`Proposal::unplaceable`].
pub fn plan(
    workloads: &[Workload],
    fleet: &[FleetGpu],
    opts: &PlannerOptions,
) -> Result<Proposal, PlannerError> {
    let (mut p, size_unplaceable, non_mig) = prepare(workloads, fleet)?;
    let all_avail = p.avail.clone();
    let all_placeable = p.placeable.clone();
    // The MIG-capable fleet GPU (index into `fleet`) workload w runs on now.
    let gpu_of = |w: usize| -> Option<usize> {
        let uuid = workloads[w].current_gpu.as_deref()?;
        all_avail
            .iter()
            .flatten()
            .copied()
            .find(|&g| fleet[g].uuid.as_deref() == Some(uuid))
    };
    // Fleet GPU -> the workloads that keep it, with why.
    let mut kept: BTreeMap<usize, Vec<(usize, String)>> = BTreeMap::new();
    let mut unplaceable = Vec::new();
    for u in size_unplaceable {
        match gpu_of(u.workload) {
            Some(g) => kept.entry(g).or_default().push((
                u.workload,
                format!(
                    "{}; it runs on that GPU today",
                    u.reason.replace(
                        "; no profile holds that",
                        ", more than any MIG instance holds"
                    )
                ),
            )),
            None => unplaceable.push(u),
        }
    }
    let (mut bins, mut left) = loop {
        let kept_ws: BTreeSet<usize> = kept.values().flatten().map(|(w, _)| *w).collect();
        p.avail = all_avail
            .iter()
            .map(|gs| {
                gs.iter()
                    .copied()
                    .filter(|g| !kept.contains_key(g))
                    .collect()
            })
            .collect();
        p.placeable = all_placeable
            .iter()
            .copied()
            .filter(|w| !kept_ws.contains(w))
            .collect();
        let (bins, left) = heuristic::pack(&p);
        let mut more = false;
        for &w in &left {
            if let Some(g) = gpu_of(w) {
                kept.entry(g).or_default().push((
                    w,
                    "every other GPU that could hold it is full; it runs on that GPU today".into(),
                ));
                more = true;
            }
        }
        if !more {
            break (bins, left);
        }
    };
    let mut method = Method::Heuristic;
    let placed: Vec<usize> = p
        .placeable
        .iter()
        .copied()
        .filter(|w| !left.contains(w))
        .collect();
    if !opts.heuristic_only && left.is_empty() && placed.len() <= opts.exact_max_workloads {
        let lb = lower_bound(&p, &placed);
        if bins.len() as u32 <= lb {
            method = Method::Exact;
        } else {
            let (found, complete) = exact::search(&p, &placed, bins.len(), opts.exact_node_limit);
            if let Some(b) = found {
                bins = b;
            }
            method = if complete {
                Method::Exact
            } else {
                Method::ExactIncomplete
            };
        }
    }
    left.sort_unstable();
    for w in left {
        unplaceable.push(Unplaceable {
            workload: w,
            id: workloads[w].id.clone(),
            reason: "every GPU of the fleet that could hold it is full".into(),
        });
    }
    let placed: Vec<usize> = bins.iter().flat_map(|b| b.workloads.clone()).collect();
    let mut gpus = materialize(&p, fleet, &bins);
    // Never drop a workload silently, even if a bin found no GPU or placement (not expected: the
    // searches only build bins that fit and never open more GPUs of a model than it has).
    let in_gpus: BTreeSet<usize> = gpus
        .iter()
        .flat_map(|g| g.instances.iter().flat_map(|i| i.workloads.iter().copied()))
        .collect();
    for &w in &placed {
        if !in_gpus.contains(&w) {
            unplaceable.push(Unplaceable {
                workload: w,
                id: workloads[w].id.clone(),
                reason: "internal: its planned GPU found no legal placement".into(),
            });
        }
    }
    unplaceable.sort_by_key(|u| u.workload);
    let placed: Vec<usize> = placed.into_iter().filter(|w| in_gpus.contains(w)).collect();
    let lower_bound = lower_bound(&p, &placed) + kept.len() as u32;
    // The kept GPUs: whole, MIG off, their workloads on them.
    let mut kept_list = Vec::new();
    for (&g, ws) in &kept {
        let gpu = &fleet[g];
        let Some(model) = gpu.mig_model() else {
            continue; // not expected: kept GPUs come from the MIG-capable ones
        };
        let full = model
            .profiles
            .iter()
            .filter(|pr| !pr.media_extensions)
            .find(|pr| {
                pr.compute_slices == model.compute_slices && pr.memory_slices == model.memory_slots
            })
            .or_else(|| model.profiles.iter().max_by_key(|pr| pr.memory_bytes));
        let instances = full
            .map(|pr| PlannedInstance {
                profile_id: pr.id,
                profile: pr.name.clone(),
                placement: Placement {
                    start: 0,
                    size: pr.memory_slices,
                },
                workloads: ws.iter().map(|(w, _)| *w).collect(),
            })
            .into_iter()
            .collect();
        gpus.push(PlannedGpu {
            gpu: gpu.clone(),
            model: model.key,
            instances,
            mig_enabled: false,
            kept: true,
        });
        for (w, reason) in ws {
            kept_list.push(Kept {
                workload: *w,
                id: workloads[*w].id.clone(),
                node: gpu.node.clone(),
                index: gpu.index,
                reason: reason.clone(),
            });
        }
    }
    kept_list.sort_by_key(|k| k.workload);
    gpus.sort_by(|a, b| (&a.gpu.node, a.gpu.index).cmp(&(&b.gpu.node, b.gpu.index)));
    let used_fleet: BTreeSet<(String, u32)> = gpus
        .iter()
        .map(|g| (g.gpu.node.clone(), g.gpu.index))
        .collect();
    let free_gpus = all_avail
        .iter()
        .flatten()
        .map(|&i| fleet[i].clone())
        .filter(|g| !used_fleet.contains(&(g.node.clone(), g.index)))
        .collect();
    let per_model = p
        .models
        .iter()
        .enumerate()
        .filter_map(|(m, model)| {
            let mine: Vec<&Bin> = bins.iter().filter(|b| b.model == m).collect();
            if mine.is_empty() {
                return None;
            }
            let slots: u32 = mine.iter().map(|b| b.slots).sum();
            let compute: u32 = mine.iter().map(|b| b.compute).sum();
            Some(ModelBound {
                model: model.key,
                workloads: mine.iter().map(|b| b.workloads.len()).sum(),
                memory_slices: slots,
                compute_slices: compute,
                lower_bound: slots
                    .div_ceil(model.memory_slots)
                    .max(compute.div_ceil(model.compute_slices)),
                gpus_used: mine.len() as u32,
            })
        })
        .collect();
    Ok(Proposal {
        gpus_used: gpus.len() as u32,
        gpus,
        free_gpus,
        unplaceable,
        kept: kept_list,
        non_mig_gpus: non_mig,
        lower_bound,
        per_model,
        method,
    })
}

/// Turn bins into fleet GPUs with placements. A bin goes preferably to the GPU most of its
/// workloads run on now, then to a GPU on the node most of them run on, then to any free one.
fn materialize(p: &Prepared, fleet: &[FleetGpu], bins: &[Bin]) -> Vec<PlannedGpu> {
    let mut taken = vec![false; fleet.len()];
    let mut chosen: Vec<Option<usize>> = vec![None; bins.len()];
    // Pass 0: current GPU (by UUID, or by node+index is not known: UUID only). Pass 1: node.
    for pass in 0..3 {
        for (b, bin) in bins.iter().enumerate() {
            if chosen[b].is_some() {
                continue;
            }
            let mut best: Option<(usize, usize)> = None;
            for &g in &p.avail[bin.model] {
                if taken[g] {
                    continue;
                }
                let gpu = &fleet[g];
                let votes = bin
                    .workloads
                    .iter()
                    .filter(|&&w| {
                        let wl = &p.workloads[w];
                        match pass {
                            0 => gpu.uuid.is_some() && wl.current_gpu == gpu.uuid,
                            1 => wl.node.as_deref() == Some(gpu.node.as_str()),
                            _ => true,
                        }
                    })
                    .count();
                if votes > 0 && best.is_none_or(|(v, _)| votes > v) {
                    best = Some((votes, g));
                }
                if pass == 2 && best.is_some() {
                    break;
                }
            }
            if let Some((_, g)) = best {
                taken[g] = true;
                chosen[b] = Some(g);
            }
        }
    }
    let mut out: Vec<PlannedGpu> = bins
        .iter()
        .zip(chosen)
        .filter_map(|(bin, g)| {
            let g = g?;
            let model = p.models[bin.model];
            let profs: Vec<&MigProfile> = bin
                .workloads
                .iter()
                .filter_map(|&w| p.profile(w, bin.model))
                .collect();
            let starts = best_placement(model, &profs)?;
            let mut instances: Vec<PlannedInstance> = bin
                .workloads
                .iter()
                .zip(profs.iter().zip(starts))
                .map(|(&w, (prof, start))| PlannedInstance {
                    profile_id: prof.id,
                    profile: prof.name.clone(),
                    placement: Placement {
                        start,
                        size: prof.memory_slices,
                    },
                    workloads: vec![w],
                })
                .collect();
            // Largest first: the order a driver should create them in.
            instances.sort_by_key(|i| (std::cmp::Reverse(i.placement.size), i.placement.start));
            Some(PlannedGpu {
                gpu: fleet[g].clone(),
                model: model.key,
                instances,
                mig_enabled: !is_whole_gpu(model, &profs),
                kept: false,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.gpu.node, a.gpu.index).cmp(&(&b.gpu.node, b.gpu.index)));
    out
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
