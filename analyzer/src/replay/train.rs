//! Out of sample: a plan made from one range (`train`) and replayed on another (`test`), the
//! way `tessera replay --train … --test …` and `tessera report --out-of-sample` use it (the
//! latter's figures: [`OutOfSample`]). The plan
//! comes from the MIG planner ([`crate::mig_planner::run`], as `tessera mig plan`) or from the
//! advisor's consolidation detector ([`crate::advisor::plan_out`], as `tessera analyze
//! --plan-out`), both with their default parameters.
//!
//! Pure over the frames it is given (each already narrowed to its range by the caller); it
//! reads no file and prints nothing.

use chrono_tz::Tz;
use serde::Serialize;
use tessera_core::mig::plan::TesseraPlan;

use super::ReplayRequest;
use crate::advisor::{self, plan_out::PlanOutError};
use crate::frames::Frames;
use crate::mig_planner::{self, PlanRequest, PlanRunError};
use crate::prices::Prices;
use crate::range::TimeRange;

/// One out-of-sample check: the plan of one kind made from the previous period and replayed on
/// the report's, or why there was none.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutOfSample {
    /// `mig` or `consolidation`.
    pub kind: &'static str,
    pub trained_from: String,
    pub trained_until: String,
    pub replayed_from: String,
    pub replayed_until: String,
    /// Why no plan or no replay was made (nothing to consolidate, no MIG GPU, no rows); `null`
    /// when there is a replay.
    pub skipped: Option<String>,
    /// `safe`, `tight` or `unsafe`; `null` when skipped.
    pub verdict: Option<&'static str>,
    pub failed_intervals: Option<u64>,
    pub gpus_before: Option<u32>,
    pub gpus_after: Option<u32>,
    pub gpu_hours_freed: Option<f64>,
    /// The largest p99 memory of a placement, as a share of its capacity (where known).
    pub p99_memory_share_max: Option<f64>,
    /// The placements and workloads that decided the verdict.
    pub deciding: Vec<String>,
}

/// Which planner makes the plan of the training range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanKind {
    /// MIG layouts (`tessera mig plan`).
    Mig,
    /// Consolidation moves (`tessera analyze --plan-out`).
    Consolidation,
}

impl PlanKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PlanKind::Mig => "mig",
            PlanKind::Consolidation => "consolidation",
        }
    }
}

/// Why no plan could be made from the training range.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Mig(#[from] PlanRunError),
    #[error(transparent)]
    Advisor(#[from] advisor::AdvisorError),
    #[error(transparent)]
    Moves(#[from] PlanOutError),
}

/// The plan `kind` makes from `frames` (already within `range`).
pub fn make_plan(
    frames: &[Frames],
    range: TimeRange,
    kind: PlanKind,
    tz: Tz,
    sources: &[String],
    on_note: &(dyn Fn(&str) + Sync),
) -> Result<TesseraPlan, TrainError> {
    match kind {
        PlanKind::Mig => {
            let refs: Vec<&Frames> = frames.iter().collect();
            let req = PlanRequest {
                demand: mig_planner::demand::DemandParams::default(),
                offpeak: advisor::offpeak::OffpeakParams::default(),
                tz,
                sources: sources.to_vec(),
                plan_ref: "plan.yaml".into(),
                range: Some(range),
            };
            let outcome = mig_planner::run(&refs, &req, &|p| {
                if let mig_planner::Progress::Note(n) = p {
                    on_note(n);
                }
            })?;
            Ok(outcome.file)
        }
        PlanKind::Consolidation => {
            let params = advisor::Params {
                tz,
                ..advisor::Params::default()
            };
            let analysis = advisor::analyze_parts_with(
                frames.iter().cloned().map(Ok::<_, advisor::AdvisorError>),
                &params,
                Some((range.since, range.until)),
                sources.to_vec(),
                &[advisor::evidence::ConsolidationEvidence::DETECTOR.to_string()],
                &|_| {},
            )?;
            Ok(advisor::plan_out::consolidation_plan(&analysis)?)
        }
    }
}

/// For each kind: a plan made from `train` (frames narrowed to it here) and replayed on `test`.
/// A kind for which no plan can be made is `skipped` with the reason, never an error.
pub fn out_of_sample(
    frames: &[&Frames],
    train: TimeRange,
    test: TimeRange,
    kinds: &[PlanKind],
    tz: Tz,
    sources: &[String],
    prices: &Prices,
) -> Vec<OutOfSample> {
    let within = |r: TimeRange| -> Vec<Frames> {
        frames.iter().map(|f| f.within(r.since, r.until)).collect()
    };
    let train_frames = within(train);
    let test_frames = within(test);
    let test_refs: Vec<&Frames> = test_frames.iter().collect();
    let fmt = crate::times::fmt_ms;
    kinds
        .iter()
        .map(|&kind| {
            let mut out = OutOfSample {
                kind: kind.as_str(),
                trained_from: fmt(train.since),
                trained_until: fmt(train.until),
                replayed_from: fmt(test.since),
                replayed_until: fmt(test.until),
                skipped: None,
                verdict: None,
                failed_intervals: None,
                gpus_before: None,
                gpus_after: None,
                gpu_hours_freed: None,
                p99_memory_share_max: None,
                deciding: Vec::new(),
            };
            let plan = match make_plan(&train_frames, train, kind, tz, sources, &|_| {}) {
                Ok(p) => p,
                Err(e) => {
                    out.skipped = Some(format!("no plan from the previous period: {e}"));
                    return out;
                }
            };
            replay_into(
                &mut out,
                &test_refs,
                &plan,
                test,
                Some((train, kind.as_str())),
                sources,
                prices,
            );
            out
        })
        .collect()
}

/// Replays `plan` on `frames` (already within `test`) into `out`: the verdict, failed intervals,
/// GPUs before and after, GPU-hours freed, the largest p99 memory share and what decided it; or
/// `skipped` with why the replay failed.
fn replay_into(
    out: &mut OutOfSample,
    frames: &[&Frames],
    plan: &TesseraPlan,
    test: TimeRange,
    trained: Option<(TimeRange, &str)>,
    sources: &[String],
    prices: &Prices,
) {
    let req = ReplayRequest {
        range: test,
        plan_file: None,
        config: None,
        prices: prices.clone(),
        sources: sources.to_vec(),
        trained: trained.map(|(r, k)| (r, k.to_string())),
    };
    match super::run(frames, plan, &req) {
        Ok(r) => {
            out.verdict = Some(r.verdict);
            out.failed_intervals = Some(r.failed_intervals);
            out.gpus_before = Some(r.fleet.gpus_before);
            out.gpus_after = Some(r.fleet.gpus_after);
            out.gpu_hours_freed = Some(r.fleet.gpu_hours_freed);
            out.p99_memory_share_max = r
                .placements
                .iter()
                .filter_map(|p| p.p99_memory_share)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
            out.deciding = r.deciding;
        }
        Err(e) => out.skipped = Some(format!("not replayed: {e}")),
    }
}

/// In sample: each of `plans` (kind — `consolidation` or `mig` — and the plan the report's
/// actions propose, made from `range`) replayed on `range` itself, the report's default check
/// of its plan actions. Its `trained_*` equal its `replayed_*`.
pub fn in_sample(
    frames: &[&Frames],
    range: TimeRange,
    plans: &[(&'static str, TesseraPlan)],
    sources: &[String],
    prices: &Prices,
) -> Vec<OutOfSample> {
    let within: Vec<Frames> = frames
        .iter()
        .map(|f| f.within(range.since, range.until))
        .collect();
    let refs: Vec<&Frames> = within.iter().collect();
    let fmt = crate::times::fmt_ms;
    plans
        .iter()
        .map(|(kind, plan)| {
            let mut out = OutOfSample {
                kind,
                trained_from: fmt(range.since),
                trained_until: fmt(range.until),
                replayed_from: fmt(range.since),
                replayed_until: fmt(range.until),
                skipped: None,
                verdict: None,
                failed_intervals: None,
                gpus_before: None,
                gpus_after: None,
                gpu_hours_freed: None,
                p99_memory_share_max: None,
                deciding: Vec::new(),
            };
            replay_into(&mut out, &refs, plan, range, None, sources, prices);
            out
        })
        .collect()
}
