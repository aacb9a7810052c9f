//! `tessera replay`'s library (docs/replay.md): what a plan file (`tessera-plan` v1,
//! docs/plan.md) would have done to a period of history. Each workload's measured rows are moved
//! to where the plan puts it — a MIG instance, a whole GPU, or a consolidation host shared with
//! others — interval by interval, under the config the plan's `schedule` makes active then, and
//! each placement is judged against its target's memory and compute: peak and p99 memory, the
//! intervals where memory would have been exceeded (the work would have failed), the intervals
//! where the co-located activity exceeds the compute (contention) with a proportional-sharing
//! slowdown there, and a verdict (`safe`, `tight`, `unsafe`) with the intervals that decide it.
//! For the plan: GPUs before and after, GPU-hours and cost freed, allocation and work
//! utilization before → after, energy where power is known.
//!
//! - [`targets`] — the plan's placements and their capacity, the schedule, the refusals (a plan
//!   with no workloads, a plan naming GPUs or nodes not in the data);
//! - [`series`] — the rows of each workload (and GPU) the plan names, read from the frames one
//!   node partition at a time;
//! - [`stream`] — judges each placement and workload as soon as its partitions are read and
//!   drops its rows, so that a replay holds about one partition's rows at a time;
//! - [`combine`] — the interval-by-interval model, the verdicts and the fleet figures;
//! - [`render`] — table and Markdown; [`html`] — one self-contained page with the charts;
//! - [`train`] — out of sample: a plan made from one range (the MIG planner or the advisor's
//!   consolidation moves) and replayed on another.
//!
//! Pure: frames and a plan value in, a [`Replay`] out. It reads no file, has no clock and
//! makes plans only through the MIG planner or the advisor ([`train`]); it never changes a GPU.

pub mod combine;
pub mod html;
pub mod render;
pub mod series;
pub mod stream;
pub mod targets;
pub mod train;

use serde::Serialize;
use tessera_core::mig::plan::TesseraPlan;

use crate::frames::{Frames, FramesError};
use crate::prices::Prices;
use crate::range::TimeRange;

/// The `version` of the replay JSON (docs/replay.md).
pub const REPLAY_JSON_VERSION: u32 = 1;

/// p99 memory above this share of the capacity makes a placement `tight`.
pub const TIGHT_MEMORY_SHARE: f64 = 0.9;
/// Contention in more than this share of a placement's intervals makes it `tight`.
pub const TIGHT_CONTENTION_SHARE: f64 = 0.05;

/// Why a replay could not be made. Each names what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Frames(#[from] FramesError),
    /// The plan cannot be replayed at all (no workloads, no config to choose, …).
    #[error("{0}")]
    Plan(String),
    /// The plan names what the data does not have (a node, a GPU).
    #[error("{0}")]
    NotInData(String),
    #[error("no rows in the sources for the chosen range: nothing to replay")]
    NoRows,
}

/// What the command asks for.
#[derive(Debug, Clone)]
pub struct ReplayRequest {
    /// The replayed range (rows ending in `(since, until]`).
    pub range: TimeRange,
    /// Where the plan came from (printed; `None` for a plan made by `--train`).
    pub plan_file: Option<String>,
    /// `--config LABEL`: replay this config all the time instead of the schedule.
    pub config: Option<String>,
    pub prices: Prices,
    /// The sources, as given.
    pub sources: Vec<String>,
    /// `--train`: the range the plan was made from, and which planner (`mig`, `consolidation`).
    pub trained: Option<(TimeRange, String)>,
}

/// A span of consecutive intervals (row ends `from` exclusive .. `until` inclusive).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Span {
    /// Start of the first interval, RFC 3339.
    pub from: String,
    /// End of the last interval, RFC 3339.
    pub until: String,
    pub intervals: u64,
}

/// One placement judged: a MIG instance, a whole GPU or a consolidation host, under one config.
#[derive(Debug, Clone, Serialize)]
pub struct PlacementResult {
    /// `day mig-1/GPU0 1g.10gb@6`, `consolidation lab-a/GPU0`.
    pub id: String,
    /// The config it belongs to (`None`: a consolidation move, always in force).
    pub config: Option<String>,
    /// `mig`, `gpu` or `shared`.
    pub kind: &'static str,
    pub node: Option<String>,
    pub gpu: u32,
    pub model: String,
    pub profile: Option<String>,
    pub capacity_memory_bytes: u64,
    /// Compute slices of the target (a whole GPU's: 7 on most models).
    pub capacity_slices: u32,
    pub workloads: Vec<String>,
    /// Intervals in which the placement was in force and some workload had rows.
    pub intervals: u64,
    /// The interval length used for the combined series, seconds.
    pub interval_seconds: f64,
    /// Null when no workload of it was seen.
    pub peak_memory_bytes: Option<u64>,
    pub p99_memory_bytes: Option<u64>,
    pub peak_memory_share: Option<f64>,
    pub p99_memory_share: Option<f64>,
    pub exceeded_intervals: u64,
    pub exceeded_hours: f64,
    pub exceeded: Vec<Span>,
    pub contention_intervals: u64,
    pub contention_hours: f64,
    pub contention: Vec<Span>,
    /// Mean and largest slowdown over the contention intervals (combined demand ÷ capacity);
    /// null without contention.
    pub slowdown_mean: Option<f64>,
    pub slowdown_max: Option<f64>,
    /// `safe`, `tight`, `unsafe`, or null when none of its workloads was seen.
    pub verdict: Option<&'static str>,
    /// Why: the rule that decided the verdict.
    pub reasons: Vec<String>,
}

/// One workload the plan names, as the replay found it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResult {
    pub id: String,
    /// `mig`, `process`, `gpu`.
    pub kind: &'static str,
    pub node: String,
    pub gpu: u32,
    /// Whether it has rows in the replayed range (when not, every figure is null: unknown).
    pub seen: bool,
    pub rows: u64,
    pub peak_memory_bytes: Option<u64>,
    /// Intervals in which it held memory while the config in force gave it no place.
    pub unplaced_intervals: u64,
    pub unplaced: Vec<Span>,
    pub note: Option<String>,
}

/// The plan's figures before and after.
#[derive(Debug, Clone, Serialize)]
pub struct FleetResult {
    pub hours: f64,
    pub gpus_before: u32,
    /// GPUs holding a workload under the config in force, the most over the configs.
    pub gpus_after: u32,
    /// `gpus_before − gpus_after` (`mig_planner::GpuCount`, the definition `mig plan` and
    /// `report` use): negative when the plan needs more GPUs than today.
    pub gpus_freed: i64,
    pub gpu_hours_before: f64,
    /// Time-weighted over the configs in force.
    pub gpu_hours_after: f64,
    pub gpu_hours_freed: f64,
    pub cost_freed: f64,
    pub currency: String,
    pub price_gpu_hour: f64,
    /// Share of the GPU-hours holding a loaded workload (0–1); null without hours.
    pub allocation_before: Option<f64>,
    pub allocation_after: Option<f64>,
    /// The workloads' work (activity in GPUs × hours) over the GPU-hours of the plan's GPUs
    /// (before: the GPUs its workloads run on; after: the GPUs the plan uses) — not over every GPU
    /// of the fleet, as the report's "GPU-hours of work" is.
    pub utilization_before: Option<f64>,
    pub utilization_after: Option<f64>,
    /// Over the plan's GPUs' rows that have power or energy (`energy_coverage` says what share
    /// of them); null where none has.
    pub energy_kwh_before: Option<f64>,
    pub energy_kwh_after: Option<f64>,
    /// The share of the plan's GPUs' rows (before) with power or energy: 1 when every row has;
    /// below 1 the energy figures count only those rows. Null with them.
    pub energy_coverage: Option<f64>,
    /// The energy model, in words.
    pub energy_model: String,
}

/// A whole replay (the JSON of docs/replay.md).
#[derive(Debug, Clone, Serialize)]
pub struct Replay {
    pub version: u32,
    pub kind: &'static str,
    pub plan: Option<String>,
    pub from: String,
    pub until: String,
    pub sources: Vec<String>,
    /// `--train`: the range the plan was made from and the planner.
    pub trained_on: Option<Trained>,
    /// Share of the range each config was in force.
    pub configs: std::collections::BTreeMap<String, f64>,
    /// `safe`, `tight` or `unsafe`.
    pub verdict: &'static str,
    /// The placements (and workloads) that decided the verdict, with their intervals.
    pub deciding: Vec<String>,
    /// Intervals in which some placement's memory was exceeded, or a loaded workload had no
    /// place.
    pub failed_intervals: u64,
    pub thresholds: Thresholds,
    pub placements: Vec<PlacementResult>,
    pub workloads: Vec<WorkloadResult>,
    pub fleet: FleetResult,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Trained {
    pub from: String,
    pub until: String,
    pub planner: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Thresholds {
    pub tight_memory_share: f64,
    pub tight_contention_share: f64,
}

/// Replays `plan` over `parts` (one per node partition, read one at a time).
pub fn run(
    parts: &[&Frames],
    plan: &TesseraPlan,
    req: &ReplayRequest,
) -> Result<Replay, ReplayError> {
    let t = targets::targets(plan, req.config.as_deref())?;
    let mut ex = series::Extracted::new(t.sources.len());
    let mut judged = stream::Stream::new(&t);
    // The next partition is read on a worker while this one is taken apart and judged (in
    // partition order: the same rows in the same order as one loop). `TESSERA_TIMINGS`: the
    // reads (on the worker) and the rest (here), summed.
    let (mut read, mut judge) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    std::thread::scope(|scope| -> Result<(), ReplayError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let sources = &t.sources;
        let reader = scope.spawn(move || {
            let mut spent = std::time::Duration::ZERO;
            for f in parts {
                let at = std::time::Instant::now();
                let rows = series::read(f, sources);
                spent += at.elapsed();
                let failed = rows.is_err();
                // The receiver is gone after an error of its own: nothing more to read.
                if tx.send(rows).is_err() || failed {
                    break;
                }
            }
            spent
        });
        for rows in rx {
            let at = std::time::Instant::now();
            let nodes = series::extract(&rows?, &t.sources, &mut ex)?;
            judged.partition(&mut ex, nodes)?;
            judge += at.elapsed();
        }
        // A reader that panicked sent no more partitions: its panic is this one's.
        read = match reader.join() {
            Ok(spent) => spent,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        Ok(())
    })?;
    crate::timing::report("replay (summed)", "read", read);
    crate::timing::report("replay (summed)", "extract and judge", judge);
    if ex.gpus.is_empty() && !ex.workload_rows {
        return Err(ReplayError::NoRows);
    }
    // Out of sample (`--train`), a planned workload or GPU gone from the test period is reported
    // as not seen; a plan file replayed on its own data is refused instead.
    let mut gone = Vec::new();
    if req.trained.is_some() {
        for e in targets::not_in_data(&t, &ex) {
            let note = format!(
                "out of sample: {e}; its rows and placements are not seen in the replayed range"
            );
            if !gone.contains(&note) {
                gone.push(note);
            }
        }
    } else {
        targets::check_in_data(&t, &ex)?;
    }
    let mut r = judged.finish(ex, req);
    r.notes.extend(gone);
    Ok(r)
}

/// The replay's figures as the plan's `prediction` block (docs/plan.md).
pub fn prediction(r: &Replay) -> tessera_core::mig::plan_sections::Prediction {
    let f = &r.fleet;
    tessera_core::mig::plan_sections::Prediction {
        from: r.from.clone(),
        until: r.until.clone(),
        verdict: r.verdict.to_string(),
        gpus_before: f.gpus_before,
        gpus_after: f.gpus_after,
        gpu_hours_freed: f.gpu_hours_freed,
        cost_freed: Some(f.cost_freed),
        energy_kwh_before: f.energy_kwh_before,
        energy_kwh_after: f.energy_kwh_after,
        failed_intervals: r.failed_intervals,
    }
}
