//! The weekly report (`tessera report`, `docs/report.md`): a pure model built from the canonical
//! frames and the advisor's [`Analysis`](crate::advisor::Analysis) — fleet summary with cost, breakdowns by node, GPU model
//! and team, the idle-loaded models and consolidation plan priced, the off-peak windows and the
//! GPUs free around the clock (over-provisioning), the previous period for week-over-week change,
//! data-quality notes and the series the HTML charts draw — serialised as versioned JSON
//! ([`REPORT_VERSION`]) and rendered by [`render`] (table, markdown) and [`html`].
//!
//! This module does no I/O besides collecting the lazy frames it is given and reading the
//! `--config` file in [`ReportConfig::load`]; it does not detect anything itself (the advisor's
//! findings are re-priced, not recomputed) and it does not plan MIG layouts: [`run`] (the whole
//! workflow over frames already read) runs the MIG planner and sets [`Report::mig`] from
//! [`mig_section`].
//!
//! Files: `model` (the document's types; prices come from `crate::prices`), the usage and chart tallies over the rows
//! (`tally`), `findings` (the advisor's findings priced), `charts` (hour-of-week slots) and
//! `quality` (data-quality notes), `change_chart` (the before/after chart of a layout change),
//! [`out_of_sample`] (the opt-in out-of-sample check's figures and section; the command makes
//! them through `crate::replay`); [`render`] and [`html`] print it, [`pass`] reads each
//! partition once for the advisor, the tallies and the MIG demand.

pub mod archive;
mod change_chart;
mod charts;
mod findings;
pub mod html;
mod model;
pub mod out_of_sample;
pub use out_of_sample::verdicts_from_replays;
pub mod pass;
mod quality;
pub mod render;
mod run;
mod tally;
pub mod trend;
mod trend_chart;

pub use crate::prices::{PriceConfig, Prices, ReportConfig, prices};
pub use model::{
    AllocatedDevice, AllocationSummary, BaselineModel, Charts, ConsolidationStep, EnergySplit,
    FreeHour, GpuActivity, IdleModel, IdlePower, MigSection, NextStep, OffpeakBaseline,
    OffpeakWindow, QualityNote, RealizedChange, Report, ReportInput, TeamUsage, Teams, Trend,
    TrendWeek, Usage,
};
pub use quality::source_matches;
pub use run::{Replays, ReportRequest, run};
pub use tally::{AbortGuard, PartTally, build_parts, build_parts_with};

// Used by the tallies (`use super::*`).
use charts::{slot_of, window_slots};
use findings::{allocated, consolidation, idle_models, offpeak, offpeak_baseline, team_of};
use quality::data_quality;

use polars::prelude::*;

use crate::advisor::AdvisorError;
use crate::frames::Frames;

/// Version of the report JSON document (`docs/report.md`).
pub const REPORT_VERSION: u32 = 2;

const GIB: f64 = (1u64 << 30) as f64;
const HOUR_MS: f64 = 3_600_000.0;
/// A GPU holding less than this and at most [`FREE_ACTIVITY`] is free (as in the off-peak
/// detector).
const FREE_MEMORY: f64 = GIB;
const FREE_ACTIVITY: f64 = 0.05;
/// Hours in a month, for monthly savings (365.25 × 24 / 12).
const MONTH_HOURS: f64 = 730.5;

/// The file the report's suggested commands write the MIG plan to (`Report::next_steps`).
pub const MIG_PLAN_FILE: &str = crate::actions::MIG_PLAN_FILE;
/// The file the report's suggested commands write the consolidation moves to.
pub const CONSOLIDATION_PLAN_FILE: &str = crate::actions::CONSOLIDATION_PLAN_FILE;

/// Errors of the report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("reading frames: {0}")]
    Advisor(#[from] AdvisorError),
    #[error(transparent)]
    Frames(#[from] crate::frames::FramesError),
    #[error(transparent)]
    Demand(#[from] crate::mig_planner::demand::DemandError),
    #[error(transparent)]
    Energy(#[from] crate::energy::EnergyError),
    /// A tally worker thread panicked, or a partition never came.
    #[error("internal error: a report worker thread failed")]
    Worker,
    #[error("reading frames: {0}")]
    Polars(#[from] PolarsError),
    #[error("{0}")]
    Ingest(#[from] crate::ingest::IngestError),
    #[error(transparent)]
    Price(#[from] crate::prices::PriceError),
    #[error(transparent)]
    Changes(#[from] crate::changes::ChangesError),
}

fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Builds the report over rows with `ts` in `input.range` = `(start, end]`. `frames` may reach
/// back before `start`: the period of the same length before it is reported when it has rows.
/// The same as [`tally::build_parts`] over one partition.
pub fn build(frames: &Frames, input: &ReportInput) -> Result<Report, ReportError> {
    tally::build_parts(&[frames], input)
}

/// Relative change `(now − before) / before`, when `before` is not 0.
pub fn change(now: f64, before: f64) -> Option<f64> {
    (before.abs() > 1e-9).then(|| (now - before) / before)
}

/// The report's next steps (`Report::next_steps`, docs/report.md "Next steps"): for the
/// consolidation moves, the plan file, its replay and the sharing configs; for a MIG plan, the
/// plan file, its replay and the dry run of its day layout on a node; for findings, the alerts
/// `tessera notify` would send. Each command names the report's sources and runs as printed, in
/// order, from one folder (the plan commands write the files the later ones read).
pub fn next_steps(r: &Report) -> Vec<NextStep> {
    use crate::commands;
    let (src, range) = (&r.sources, &r.range_flags);
    let step = |what: &str, command: String| NextStep {
        what: what.to_string(),
        command,
    };
    let mut v = Vec::new();
    if !r.consolidation.is_empty() {
        v.push(step(
            "write the consolidation moves as a plan",
            commands::consolidation_plan(src, range, CONSOLIDATION_PLAN_FILE),
        ));
        v.push(step(
            "replay the moves on the data (memory, contention, a verdict)",
            commands::replay(CONSOLIDATION_PLAN_FILE, src, range),
        ));
        v.push(step(
            "the sharing config of each host GPU, with the reasons",
            commands::share("plan", CONSOLIDATION_PLAN_FILE, src),
        ));
    }
    if r.mig.as_ref().is_some_and(|m| m.gpus_after.is_some()) {
        v.push(step(
            "write the MIG plan",
            commands::mig_plan(src, range, MIG_PLAN_FILE),
        ));
        v.push(step(
            "replay the MIG plan on the data",
            commands::replay(MIG_PLAN_FILE, src, range),
        ));
        v.push(step(
            "on each node, the steps of its day layout (a dry run; --yes makes them)",
            commands::mig_apply(MIG_PLAN_FILE, "day"),
        ));
    }
    if !(r.idle_models.is_empty() && r.allocated_unused.is_empty() && r.consolidation.is_empty()) {
        v.push(step(
            "the findings as Alertmanager alerts, sent nowhere (--alertmanager.url URL sends them)",
            commands::notify_dry_run(src),
        ));
    }
    v
}

/// The report's MIG recommendation (`Report::mig`) from the MIG planner's result over the same
/// range: GPUs before, after and freed (`mig_planner::GpuCount`, as `tessera mig plan` and
/// `tessera replay` count them), the lower bound and gap, the work that keeps its GPU, and up to
/// `top` planned GPUs with their instances; and which plan to follow, beside the consolidation
/// plan's `consolidation_freed` GPUs. Pure: planning happens in the caller.
pub fn mig_section(
    d: &crate::mig_planner::demand::Demand,
    plan: &crate::mig_planner::Proposal,
    top: usize,
    consolidation_freed: u64,
    (sources, range): (&[String], &[String]),
) -> MigSection {
    let count = plan.gpu_count(&d.workloads);
    let kept_gpus: std::collections::BTreeSet<(&str, u32)> = plan
        .kept
        .iter()
        .map(|k| (k.node.as_str(), k.index))
        .collect();
    let placed = d.workloads.len() - plan.unplaceable.len() - plan.kept.len();
    let follow = if !count.helps() {
        let mut s = crate::mig_planner::does_not_help_sentence(&count);
        if consolidation_freed == 0 {
            s.push_str(" The consolidation plan frees no GPU either.");
        } else {
            s.push_str(&format!(
                " The consolidation plan frees {consolidation_freed} GPU(s)."
            ));
        }
        s
    } else if consolidation_freed as i64 > count.freed {
        format!(
            "The consolidation plan frees more ({consolidation_freed} GPU(s)): follow it first."
        )
    } else if consolidation_freed > 0 {
        format!(
            "MIG frees at least as many GPUs as the consolidation plan ({consolidation_freed}): follow the MIG plan."
        )
    } else {
        "The consolidation plan frees no GPU: follow the MIG plan.".to_string()
    };
    let summary = format!(
        "MIG layouts would run {placed} workload(s) on {} GPU(s){}{}: {} (lower bound {}, gap {:.1}%). {follow}{}{} Write the plan with `{}` and apply it with `{}` on each node (a dry run: the steps; `--yes` makes them).",
        plan.gpus_used as usize - kept_gpus.len(),
        if plan.kept.is_empty() {
            String::new()
        } else {
            format!(
                " and {} more workload(s) keep the {} whole GPU(s) they run on",
                plan.kept.len(),
                kept_gpus.len()
            )
        },
        if plan.unplaceable.is_empty() {
            String::new()
        } else {
            format!(
                " ({} more have no known GPU and no MIG instance holds them)",
                plan.unplaceable.len()
            )
        },
        count.text(),
        plan.lower_bound,
        plan.gap() * 100.0,
        crate::mig_planner::whole_gpu_sentence(plan).map_or(String::new(), |s| format!(" {s}")),
        crate::mig_planner::kept_sentence(plan).map_or(String::new(), |s| format!(" {s}")),
        crate::commands::mig_plan(sources, range, MIG_PLAN_FILE),
        crate::commands::mig_apply(MIG_PLAN_FILE, "day"),
    );
    let mut lines = Vec::new();
    for g in plan.gpus.iter().take(top) {
        let insts: Vec<String> = g
            .instances
            .iter()
            .map(|i| {
                let names: Vec<&str> = i
                    .workloads
                    .iter()
                    .filter_map(|&w| d.workloads.get(w).map(|w| w.id.as_str()))
                    .collect();
                if g.kept {
                    format!("kept whole, MIG off [{}]", names.join(", "))
                } else if g.mig_enabled {
                    format!("{}@{} [{}]", i.profile, i.placement.start, names.join(", "))
                } else {
                    format!("whole GPU, MIG off [{}]", names.join(", "))
                }
            })
            .collect();
        lines.push(format!(
            "{}/GPU{} ({}): {}",
            g.gpu.node,
            g.gpu.index,
            g.model,
            insts.join("; ")
        ));
    }
    if plan.gpus.len() > top {
        lines.push(format!("… and {} more GPU(s)", plan.gpus.len() - top));
    }
    for u in plan.unplaceable.iter().take(top) {
        lines.push(format!("not placed: {} ({})", u.id, u.reason));
    }
    MigSection {
        gap: Some(r3(plan.gap())),
        gpus_after: Some(u64::from(count.after)),
        gpus_before: Some(u64::from(count.before)),
        gpus_freed: Some(count.freed),
        gpus_kept: Some(kept_gpus.len() as u64),
        gpus_mig_off: Some(
            plan.gpus
                .iter()
                .filter(|g| !g.mig_enabled && !g.kept)
                .count() as u64,
        ),
        helps: Some(count.helps()),
        lines: Some(lines),
        lower_bound: Some(u64::from(plan.lower_bound)),
        summary,
        unplaceable: Some(plan.unplaceable.len() as u64),
        workloads: Some(d.workloads.len() as u64),
    }
}
