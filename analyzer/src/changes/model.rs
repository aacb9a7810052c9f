//! The `changes` section of the report (`docs/report.md`, "Changes"): the changes found (or
//! given), their events, and the equal periods before and after each compared. Types and their
//! assembly only: nothing here reads rows.

use serde::Serialize;

use super::detect::{Event, EventKind};
use crate::times::fmt_ms;

/// The report's `changes` section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangeSection {
    pub version: u32,
    /// `data` (found in the rows) or `given` (`--change-at`).
    pub source: String,
    /// The margin left out on each side of a change, hours.
    pub settle_hours: f64,
    /// One sentence: what was found, or that nothing was.
    pub summary: String,
    /// The changes in time order; empty when none was found.
    pub changes: Vec<Change>,
}

/// One change: a time and what happened around it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// When it happened: the start of the first row that shows it (or `--change-at`).
    pub at: String,
    /// GPUs whose MIG mode switched or whose MIG instances changed.
    pub gpus_changed: usize,
    /// Workloads seen on other GPUs after it.
    pub workloads_moved: usize,
    /// What the rows show, one line each (at most 50; `events_total` counts them all).
    pub events: Vec<ChangeEvent>,
    pub events_total: usize,
    /// Equal periods before and after compared; `null` when the range holds no period on one
    /// side (`note` says why).
    pub comparison: Option<Comparison>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One event of a change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangeEvent {
    /// `mig_mode`, `mig_layout`, `move` or `journal`.
    pub kind: String,
    pub at: String,
    /// The GPU (`node/GPUi`), the workload, or the node (`journal`).
    pub subject: String,
    pub detail: String,
}

/// Equal periods before and after a change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Length of each period, hours.
    pub hours: f64,
    pub before: Side,
    pub after: Side,
    pub fleet: KeyedPeriods,
    pub by_node: Vec<KeyedPeriods>,
    pub by_team: Vec<TeamPeriods>,
    /// The plan's prediction beside what was realized (`--plan FILE` with a `prediction`
    /// block, for the first change after the plan was made); `null` otherwise.
    pub predicted: Option<PredictedVsRealized>,
    /// The fleet's work fell by more than 5%: lost, or only moved (`WorkVerdict`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work: Option<WorkVerdict>,
    /// Work per GPU-hour before and after, per team and unit, where a `prometheus:` source
    /// counts work (`crate::work::compare`, docs/work.md); absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub work_per_gpu_hour: Vec<crate::work::WorkChange>,
}

/// The prediction beside what the change realized.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredictedVsRealized {
    pub plan: String,
    /// The replay the prediction came from.
    pub replayed_from: String,
    pub replayed_until: String,
    pub verdict: String,
    pub gpus_before_predicted: u32,
    pub gpus_after_predicted: u32,
    pub gpus_freed_predicted: f64,
    /// The fall of the mean GPUs in use; `null` when the periods do not know GPUs in use.
    pub gpus_freed_realized: Option<f64>,
    /// Realized − predicted GPUs freed.
    pub gpus_freed_difference: Option<f64>,
    /// kW saved (kWh ÷ hours); `null` where energy is unknown.
    pub energy_kw_saved_predicted: Option<f64>,
    pub energy_kw_saved_realized: Option<f64>,
    /// Whether realized and predicted differ by more than `predicted::LARGE_GPUS` GPUs or
    /// `predicted::LARGE_SHARE` of the prediction.
    pub large_difference: bool,
    /// Why (from the data), or that it was as predicted.
    pub explanation: Vec<String>,
    /// Each team's work per GPU-hour before and after the change, beside the prediction (the
    /// comparison's `work_per_gpu_hour`: a flagged team's fall means what the plan freed is not
    /// a plain saving); absent where no source counts work.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub work_per_gpu_hour: Vec<crate::work::WorkChange>,
}

/// One compared period: rows ending in `(from, until]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    pub from: String,
    pub until: String,
}

/// A group (the fleet, a node) before and after, and the difference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyedPeriods {
    pub key: String,
    pub before: PeriodUsage,
    pub after: PeriodUsage,
    pub delta: PeriodDelta,
}

/// Usage of a group over one compared period. A figure the data cannot give (no memory and no
/// activity: in use unknown; no activity: busy unknown; no energy or power) is `null`, never 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PeriodUsage {
    /// GPUs with rows in the period.
    pub gpus: usize,
    /// Mean GPUs in use: `gpu_hours_in_use` ÷ the period's hours.
    pub gpus_in_use: Option<f64>,
    pub gpu_hours_observed: f64,
    /// Rows holding ≥ 1 GiB or with activity > 5% (the report's "allocated").
    pub gpu_hours_in_use: Option<f64>,
    /// Σ activity × interval.
    pub gpu_hours_busy: Option<f64>,
    /// In use but not working: `gpu_hours_in_use − gpu_hours_busy`.
    pub gpu_hours_idle: Option<f64>,
    /// Not in use: `gpu_hours_observed − gpu_hours_in_use`.
    pub gpu_hours_free: Option<f64>,
    /// `gpu_hours_in_use ÷ gpu_hours_observed`.
    pub allocation_utilization: Option<f64>,
    /// `gpu_hours_busy ÷ gpu_hours_observed`.
    pub work_utilization: Option<f64>,
    /// From the energy counter, else mean power × interval.
    pub energy_kwh: Option<f64>,
    /// `gpu_hours_in_use` × price per GPU-hour.
    pub cost_gpu_hours: Option<f64>,
    /// `energy_kwh` × price per kWh.
    pub cost_energy: Option<f64>,
    /// `cost_gpu_hours` + `cost_energy` where known; `null` when neither is.
    pub cost_total: Option<f64>,
}

/// After − before of the figures that can be compared (negative: less after); `null` where a
/// side does not know it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PeriodDelta {
    pub gpus_in_use: Option<f64>,
    pub gpu_hours_in_use: Option<f64>,
    pub gpu_hours_busy: Option<f64>,
    pub gpu_hours_idle: Option<f64>,
    pub gpu_hours_free: Option<f64>,
    pub energy_kwh: Option<f64>,
    pub cost_total: Option<f64>,
}

/// Whether the work that fell across a change was lost or only moved: the workloads (pods,
/// else Slurm job and process, else node and pid) that ran in the period before and in the one
/// after. Set only when the fleet's GPU-hours of work fell by more than 5%.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkVerdict {
    /// `moved`: every workload that ran before runs after; `lost`: some did not.
    pub verdict: String,
    pub workloads_before: usize,
    pub workloads_after: usize,
    /// Workloads that ran before and not after, in name order (at most 20).
    pub gone: Vec<String>,
    pub gone_total: usize,
    /// One sentence a reader acts on.
    pub explanation: String,
}

/// One team before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamPeriods {
    pub team: String,
    pub before: TeamUsage,
    pub after: TeamUsage,
}

/// A team's share of the GPUs over one period: each GPU row split evenly between the
/// processes on it (the report's team rule).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TeamUsage {
    pub processes: usize,
    pub gpu_hours: f64,
    /// `null` when the team's GPUs had no activity in the data.
    pub gpu_hours_busy: Option<f64>,
    pub gpu_hours_idle: Option<f64>,
    pub energy_kwh: Option<f64>,
    pub cost_total: f64,
}

/// At most this many events are listed per change.
const MAX_EVENTS: usize = 50;

impl EventKind {
    fn name(&self) -> &'static str {
        match self {
            EventKind::MigMode { .. } => "mig_mode",
            EventKind::MigLayout { .. } => "mig_layout",
            EventKind::Move { .. } => "move",
            EventKind::Journal { .. } => "journal",
        }
    }
}

fn layout_text(l: &[String]) -> String {
    if l.is_empty() {
        "no instances".into()
    } else {
        l.join(", ")
    }
}

/// A change from its time and events, with its comparison (or a note saying why there is none).
pub(super) fn change(
    at: i64,
    events: Vec<Event>,
    comparison: Option<Comparison>,
    given: bool,
    settle: i64,
) -> Change {
    let gpus: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::MigMode { .. } | EventKind::MigLayout { .. }
            )
        })
        .map(|e| e.subject.as_str())
        .collect();
    let moved: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Move { .. }))
        .map(|e| e.subject.as_str())
        .collect();
    let (gpus_changed, workloads_moved) = (gpus.len(), moved.len());
    let note = comparison.is_none().then(|| {
        format!(
            "not compared: the range holds no whole hour before and after {}{} outside the \
             {:.0}-minute settling margin",
            fmt_ms(at),
            if given {
                ""
            } else {
                " (and the neighbouring changes)"
            },
            settle as f64 / 60_000.0
        )
    });
    let events_total = events.len();
    let events = events
        .into_iter()
        .take(MAX_EVENTS)
        .map(|e| ChangeEvent {
            kind: e.kind.name().into(),
            at: fmt_ms(e.at),
            detail: match &e.kind {
                EventKind::MigMode { on, layout } if *on => {
                    format!("MIG mode on: {}", layout_text(layout))
                }
                EventKind::MigMode { .. } => "MIG mode off: a whole GPU".into(),
                EventKind::MigLayout { before, after } => {
                    format!(
                        "MIG layout {} → {}",
                        layout_text(before),
                        layout_text(after)
                    )
                }
                EventKind::Move { from, to } => format!("{} → {}", from.join("+"), to.join("+")),
                EventKind::Journal { plan, steps } => format!(
                    "tessera mig apply {}: applied, {steps} device call(s) (journal)",
                    plan.as_deref().unwrap_or("(no plan named)")
                ),
            },
            subject: e.subject,
        })
        .collect();
    Change {
        at: fmt_ms(at),
        gpus_changed,
        workloads_moved,
        events,
        events_total,
        comparison,
        note,
    }
}

/// The section from its changes.
pub(super) fn section(
    changes: Vec<Change>,
    given: bool,
    settle: i64,
    (since, until): (i64, i64),
) -> ChangeSection {
    let summary = match (changes.len(), given) {
        (0, _) => format!(
            "No layout change found from {} to {}: no GPU switched MIG mode or MIG layout and no \
             workload moved to another GPU.",
            fmt_ms(since),
            fmt_ms(until)
        ),
        (_, true) => format!(
            "Change given at {} (--change-at): {} GPU(s) changed and {} workload(s) moved around it.",
            changes[0].at, changes[0].gpus_changed, changes[0].workloads_moved
        ),
        (n, false) => format!(
            "{n} layout change(s) found in the data: {}.",
            changes
                .iter()
                .map(|c| format!(
                    "{} ({} GPU(s) changed, {} workload(s) moved)",
                    c.at, c.gpus_changed, c.workloads_moved
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    ChangeSection {
        version: super::CHANGES_VERSION,
        source: if given { "given" } else { "data" }.into(),
        settle_hours: (settle as f64 / 3_600_000.0 * 1000.0).round() / 1000.0,
        summary,
        changes,
    }
}
