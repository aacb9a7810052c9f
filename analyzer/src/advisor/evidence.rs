//! The typed evidence of each detector's findings (`docs/findings.md`, "Detectors"): one struct
//! per kind of finding, held by [`Finding`](super::Finding) as an [`Evidence`] and read by the
//! report by field, so that renaming a field is a compile error, not a silently zeroed report.
//!
//! A finding's JSON `evidence` is its [`Evidence`] serialised through a `serde_json::Value`
//! ([`Evidence::to_json`]), whose
//! objects print their keys in alphabetical order (serde_json without `preserve_order`): field
//! order here does not change the output, but fields are declared in that order so that they
//! read like it. Numbers keep their types (a count is an integer, a measure a float) and
//! `Option`s print `null`, as documented.
//!
//! This module only declares the shapes and the detector each belongs to; the detectors fill
//! them in (and round them, `super::r3`), and it computes nothing.

use serde::Serialize;

pub use super::scheduler::Scheduler;

/// The evidence of one finding: one variant per detector (serialised untagged: each variant is
/// just its struct; off-peak findings carry their own `type`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Evidence {
    IdleLoaded(IdleEvidence),
    Consolidation(ConsolidationEvidence),
    Offpeak(OffpeakEvidence),
    BusyNotWorking(BusyEvidence),
    Allocated(AllocatedEvidence),
}

impl Evidence {
    /// The evidence as the findings document prints it (a JSON object, keys in alphabetical
    /// order).
    pub fn to_json(&self) -> serde_json::Value {
        // Structs of numbers, strings and lists with string keys: serialising cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The id of the detector that finds this kind of evidence (`idle_loaded`).
    pub fn detector(&self) -> &'static str {
        match self {
            Evidence::IdleLoaded(_) => IdleEvidence::DETECTOR,
            Evidence::Consolidation(_) => ConsolidationEvidence::DETECTOR,
            Evidence::Offpeak(_) => OffpeakEvidence::DETECTOR,
            Evidence::BusyNotWorking(_) => BusyEvidence::DETECTOR,
            Evidence::Allocated(_) => AllocatedEvidence::DETECTOR,
        }
    }
}

impl From<IdleEvidence> for Evidence {
    fn from(e: IdleEvidence) -> Self {
        Evidence::IdleLoaded(e)
    }
}

impl From<ConsolidationEvidence> for Evidence {
    fn from(e: ConsolidationEvidence) -> Self {
        Evidence::Consolidation(e)
    }
}

impl From<OffpeakEvidence> for Evidence {
    fn from(e: OffpeakEvidence) -> Self {
        Evidence::Offpeak(e)
    }
}

impl From<AllocatedEvidence> for Evidence {
    fn from(e: AllocatedEvidence) -> Self {
        Evidence::Allocated(e)
    }
}

impl From<BusyEvidence> for Evidence {
    fn from(e: BusyEvidence) -> Self {
        Evidence::BusyNotWorking(e)
    }
}

/// An idle-loaded model (`idle_loaded`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleEvidence {
    /// `process_sm`, `mig_sm_active`, `gpu_sm_active` or `gpu_busy` (the most used one).
    pub activity_source: String,
    /// Σ memory × time while idle, GiB-hours.
    pub idle_gib_hours: f64,
    pub idle_hours: f64,
    /// Of the time observed (0–1).
    pub idle_share: f64,
    pub memory_max_gib: f64,
    pub observed_hours: f64,
    /// Idle time during which the whole GPU or MIG instance was idle too, weighted by the
    /// instance's share of the GPU.
    pub reclaimable_gpu_hours: f64,
    pub spans: Vec<IdleSpanEvidence>,
}

impl IdleEvidence {
    pub const DETECTOR: &'static str = "idle_loaded";
}

/// One idle span of an idle-loaded model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleSpanEvidence {
    /// RFC 3339 UTC.
    pub end: String,
    pub memory_max_gib: f64,
    pub minutes: f64,
    /// RFC 3339 UTC.
    pub start: String,
}

/// GPUs of one model whose workloads fit on fewer (`consolidation`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConsolidationEvidence {
    /// The least memory of the model's GPUs, GiB.
    pub capacity_gib: f64,
    /// `--consolidation.compute-target`.
    pub compute_target: f64,
    pub gpu_hours_freed: f64,
    pub gpus_freed: usize,
    pub gpus_loaded: usize,
    pub gpus_needed: usize,
    /// `--consolidation.headroom`.
    pub headroom: f64,
    pub model: String,
    /// The groups of more than one workload (a GPU alone keeps its workload).
    pub plan: Vec<PlanGroup>,
    /// `--consolidation.quantile`.
    pub quantile: f64,
    /// `--consolidation.step`, seconds.
    pub step_seconds: i64,
}

impl ConsolidationEvidence {
    pub const DETECTOR: &'static str = "consolidation";
}

/// One GPU of a consolidation plan and the workloads it would run (its own first).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanGroup {
    pub combined_activity_max: f64,
    pub combined_activity_p95: f64,
    pub combined_activity_p99: f64,
    pub combined_memory_peak_gib: f64,
    /// The GPU that stays.
    pub host: PlanGpu,
    pub memory_headroom: f64,
    /// Share of buckets where the combined series exceeded the GPU (0 by construction).
    pub over_capacity_share: f64,
    /// Share of buckets where the combined activity exceeded the target.
    pub risk_over_target_share: f64,
    pub workloads: Vec<PlanWorkload>,
}

/// A GPU in a consolidation plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanGpu {
    pub gpu: Option<u32>,
    pub node: Option<String>,
    pub uuid: Option<String>,
}

/// One workload (a whole GPU's) of a consolidation group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanWorkload {
    pub activity_peak: f64,
    /// `sm_active` or `busy`.
    pub activity_source: String,
    pub gpu: Option<u32>,
    /// The GPU with the processes/pods seen on it.
    pub label: String,
    pub memory_peak_gib: f64,
    /// Who carries out the move of this workload onto the host (`None` for the host's own
    /// work, which stays): tessera moves no pod or job.
    pub moved_by: Option<String>,
    pub node: Option<String>,
    /// The scheduler that held the GPU in the range (`kubernetes`, `slurm`, `both`,
    /// `unknown`).
    pub scheduler: Scheduler,
    pub uuid: Option<String>,
}

/// An `offpeak_window` finding: the GPUs free around the clock, or an off-peak window (JSON
/// `"type": "baseline"` or `"window"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum OffpeakEvidence {
    Baseline(BaselineEvidence),
    Window(Box<WindowEvidence>),
}

impl OffpeakEvidence {
    pub const DETECTOR: &'static str = "offpeak_window";
}

/// GPUs of one model in the off-peak baseline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelGpus {
    /// Free at every observed hour in ≥ P of the observations (this model on its own).
    pub gpus: u32,
    /// GPUs of this model observed.
    pub gpus_observed: usize,
    pub model: String,
}

/// The GPUs free at every hour of the profile: over-provisioning.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineEvidence {
    /// Per model, most first.
    pub by_model: Vec<ModelGpus>,
    /// B × the slots of the period (168 or 24).
    pub gpu_hours_per_period: u64,
    /// B.
    pub gpus: u32,
    pub gpus_observed: usize,
    /// P.
    pub min_share: f64,
    /// `week` or `day`.
    pub period: &'static str,
    pub tz: &'static str,
    /// B minus the models' sum, when positive.
    pub unattributed_gpus: u32,
}

/// A peak inside an off-peak window: ≥ K more GPUs free than the window's level for ≥
/// `min_hours`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeakEvidence {
    /// Lowest share of observations with ≥ `expected_free_gpus` free over its hours.
    pub confidence: f64,
    /// The day it starts on (`Sat`); null in the daily profile.
    pub day: Option<&'static str>,
    /// Local `HH:MM`.
    pub end: String,
    /// Free GPUs in every hour of it, the baseline included.
    pub expected_free_gpus: u32,
    pub hours: u32,
    /// `Sat 15:00–Sun 15:00`, `22:00–02:00`.
    pub label: String,
    /// Local `HH:MM`.
    pub start: String,
}

/// One off-peak window finding (the windows with the same start and length).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowEvidence {
    /// L − B.
    pub above_baseline: u32,
    /// B.
    pub baseline_gpus: u32,
    /// Lowest share of observations with ≥ L free over the window's hours.
    pub confidence: f64,
    pub cron_end: String,
    pub cron_start: String,
    /// Start days (`Mon` …); empty: every day.
    pub days: Vec<&'static str>,
    /// Local `HH:MM`.
    pub end: String,
    pub end_days: Vec<&'static str>,
    /// The level L that holds over the whole window (baseline included).
    pub expected_free_gpus: u32,
    /// Σ hours × (L − B) over its windows, per week (day).
    pub gpu_hours_per_period: u64,
    pub hours: u32,
    /// K.
    pub min_gpus: u32,
    /// Its windows' peaks: ≥ K more GPUs free than L for ≥ `min_hours` inside them.
    pub peaks: Vec<PeakEvidence>,
    /// `week` or `day`.
    pub period: &'static str,
    /// Local `HH:MM`.
    pub start: String,
    pub systemd_end: String,
    pub systemd_start: String,
    /// Rank of L among the window findings' levels, 1 = fewest GPUs.
    pub tier: usize,
    pub tz: &'static str,
}

/// A GPU busy by `utilization.gpu` while its SMs mostly idled, or while it did no tensor or
/// DRAM work (`busy_not_working`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BusyEvidence {
    /// Over the rows judged (busy ratio and SM activity both known).
    pub busy_mean: f64,
    /// DRAM activity (GPM) over the spans' rows that have it; null: unknown (no GPM).
    pub dram_active_mean: Option<f64>,
    pub hours: f64,
    /// Of `hours`, the time that qualified only by the no-work rule (SM activity above the
    /// SM rule's share, tensor and DRAM below theirs).
    pub no_work_hours: f64,
    /// Of the time observed (0–1).
    pub share: f64,
    /// Where each figure comes from.
    pub signals: BusySignals,
    /// Over the rows judged.
    pub sm_active_mean: f64,
    pub spans: Vec<BusySpanEvidence>,
    /// Tensor activity (GPM) over the spans' rows that have it; null: unknown (no GPM).
    pub tensor_active_mean: Option<f64>,
    /// `spinning_or_waiting` (tensor and DRAM known and at most their thresholds in the spans,
    /// no FP pipe above its own: the kernels spun or waited) or `sm_idle` (the SM rule's
    /// verdict; tensor and DRAM unknown or higher).
    pub verdict: &'static str,
}

impl BusyEvidence {
    pub const DETECTOR: &'static str = "busy_not_working";
}

/// The signal behind each figure of a [`BusyEvidence`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BusySignals {
    pub busy_mean: &'static str,
    pub dram_active_mean: &'static str,
    pub sm_active_mean: &'static str,
    pub tensor_active_mean: &'static str,
}

impl BusySignals {
    /// The signals, tensor and DRAM activity as known or not.
    pub fn new(tensor: bool, dram: bool) -> Self {
        const UNKNOWN: &str = "unknown: not in the data (no GPM: Ampere and older, or a source without profiling metrics)";
        BusySignals {
            busy_mean: "busy ratio: share of time a kernel ran (NVML utilization.gpu; dcgm-exporter DCGM_FI_DEV_GPU_UTIL)",
            sm_active_mean: "SM activity: share of SMs with a warp resident (GPM SM_UTIL; dcgm-exporter DCGM_FI_PROF_SM_ACTIVE)",
            tensor_active_mean: if tensor {
                "tensor activity: share of cycles a tensor pipe was active (GPM ANY_TENSOR_UTIL; dcgm-exporter DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)"
            } else {
                UNKNOWN
            },
            dram_active_mean: if dram {
                "DRAM activity: share of peak DRAM bandwidth in use (GPM DRAM_BW_UTIL; dcgm-exporter DCGM_FI_PROF_DRAM_ACTIVE)"
            } else {
                UNKNOWN
            },
        }
    }
}

/// One span of a busy-but-not-working GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BusySpanEvidence {
    /// RFC 3339 UTC.
    pub end: String,
    pub minutes: f64,
    /// RFC 3339 UTC.
    pub start: String,
}

/// A GPU or MIG instance held by a pod or Slurm job and not used (`allocated_unused`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatedEvidence {
    /// Mean activity over the held rows that have one (0–1; `null` without any).
    pub activity_mean: Option<f64>,
    /// Time the device was held by this owner.
    pub held_hours: f64,
    /// `unused` (held with nothing running: no process, under the loaded threshold of memory,
    /// no activity) or `low_use` (held and used, below the low-use threshold on average).
    pub kind: String,
    /// The unused spans (each at least `--idle.min-duration`).
    pub spans: Vec<AllocatedSpanEvidence>,
    /// Unused time.
    pub unused_hours: f64,
    /// Unused GPU-hours: unused hours × the device's share of its GPU (a MIG instance's compute
    /// slices of 7), or, for `low_use`, held hours × the share × (1 − mean activity).
    pub wasted_gpu_hours: f64,
}

impl AllocatedEvidence {
    pub const DETECTOR: &'static str = "allocated_unused";
}

/// One span of a held device with nothing running.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatedSpanEvidence {
    /// RFC 3339 UTC.
    pub end: String,
    pub minutes: f64,
    /// RFC 3339 UTC.
    pub start: String,
}
