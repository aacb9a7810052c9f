//! Layout changes found in the data, and what they changed (`docs/report.md`, "Changes"):
//! a GPU's MIG mode switching, MIG instances appearing or disappearing (a new layout), and
//! workloads moving to other GPUs, each seen in the rows themselves; grouped into changes, and
//! for each change equal periods before and after it compared — GPUs in use, allocation and work
//! utilization, idle and free GPU-hours, energy and cost — per fleet, node and team.
//!
//! [`run`] is the workflow over frames already read: one scan per partition ([`scan::part`], run
//! by the report pass on the partition it holds in memory: the per-GPU MIG states and each
//! workload's devices, reduced to states and runs, and the comparison's sums per whole hour),
//! the events found and grouped into changes (`detect`, pure), then the compared periods of
//! every change, on whole hours, added up from the scans' hours (`compare`; no partition is
//! read again). `--change-at` gives the time instead of detecting it ([`ChangeRequest::at`]).
//!
//! The apply journal beside a history (`journal`) adds `journal` events: the caller reads it
//! (`journal::beside`) and passes its runs in [`ChangeRequest::journal`].
//!
//! With the plan that made a change (`ChangeRequest::plan`, its `prediction` block), the first
//! change after the plan was made gets the prediction beside what it realized, and a large
//! difference explained from the data ([`predicted`]).
//!
//! Where a source counts work, [`add_work`] sets each compared change's work per GPU-hour
//! before and after (`crate::work::compare`, docs/work.md) on a section already made.
//!
//! What it does not do: read sources or files (the caller does), judge whether a change was
//! good (but for flagging a fall of work per GPU-hour), or predict (the prediction is the plan's, made by `tessera replay`). Times in unix
//! ms; rows are `(ts − interval_ms, ts]` as everywhere.

mod compare;
mod detect;
pub mod journal;
mod keys;
mod model;
pub mod predicted;
pub mod scan;
#[cfg(test)]
mod testing;

pub use compare::{Window, windows};
pub use detect::{Event, EventKind, group};
pub use model::{
    Change, ChangeSection, Comparison, KeyedPeriods, PeriodDelta, PeriodUsage, Side, TeamPeriods,
    TeamUsage,
};

use crate::range::TimeRange;

/// Version of the `changes` section of the report JSON (`docs/report.md`).
pub const CHANGES_VERSION: u32 = 1;

/// The settling margin around a change left out of both compared periods (the apply itself,
/// workloads restarting): at least an hour, at least one row of the data.
pub const SETTLE_MS: i64 = 3_600_000;

/// At most this many changes are listed and compared (the first in time order); the summary
/// says how many there were.
pub const MAX_CHANGES: usize = 20;

/// Errors of the change detection and comparison.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    #[error(transparent)]
    Frames(#[from] crate::frames::FramesError),
    #[error("reading frames: {0}")]
    Polars(#[from] polars::prelude::PolarsError),
    /// `--change-at` outside the reported range.
    #[error(
        "--change-at {at} is outside the reported range ({since}, {until}]: give a time inside it \
         (or widen --since/--until)"
    )]
    OutsideRange {
        at: String,
        since: String,
        until: String,
    },
}

/// What the change section is asked for.
#[derive(Debug, Clone)]
pub struct ChangeRequest {
    /// The reported range.
    pub range: TimeRange,
    /// `--change-at`: the change's time, instead of the ones found in the data.
    pub at: Option<i64>,
    /// `tessera mig apply` runs read from journals beside the history (`journal::beside`).
    pub journal: Vec<journal::JournalRun>,
    /// `--plan FILE`: the plan that made a change, with its prediction.
    pub plan: Option<predicted::PlanPrediction>,
    /// Price per GPU-hour and per kWh, and the currency (as the report's).
    pub gpu_hour: f64,
    pub kwh: f64,
    pub currency: String,
}

impl ChangeRequest {
    /// Checks `--change-at` against the range: it must lie inside `(since, until)`.
    pub fn check(&self) -> Result<(), ChangesError> {
        match self.at {
            Some(at) if at <= self.range.since || at >= self.range.until => {
                Err(ChangesError::OutsideRange {
                    at: crate::times::fmt_ms(at),
                    since: crate::times::fmt_ms(self.range.since),
                    until: crate::times::fmt_ms(self.range.until),
                })
            }
            _ => Ok(()),
        }
    }
}

/// Finds the changes in `req.range` (or takes `req.at`) and compares equal periods around each.
/// `scans` are the partitions' [`scan::part`] over `req.range`, in partition order; nothing is
/// read again (the compared periods are added up from the hours the scans kept).
pub fn run(
    mut scans: Vec<scan::PartScan>,
    req: &ChangeRequest,
) -> Result<ChangeSection, ChangesError> {
    req.check()?;
    let (since, until) = (req.range.since, req.range.until);
    // The margin needs the rows' length: the longest row of the GPU tables.
    let interval = scans.iter().map(|s| s.longest).max().unwrap_or(0);
    let hours: Vec<compare::PartHours> = scans
        .iter_mut()
        .map(|s| std::mem::take(&mut s.hours))
        .collect();
    let settle = SETTLE_MS.max(interval);
    let mut events: Vec<Event> = scans.iter().flat_map(|s| s.events(settle)).collect();
    events.extend(detect::moves(
        scans.into_iter().flat_map(|s| s.runs),
        settle,
    ));
    events.extend(journal::events(&req.journal, (since, until)));
    // In time order; at one time, the GPUs' layouts before the workloads' moves.
    let order = |e: &Event| (e.at, matches!(e.kind, EventKind::Move { .. }));
    events.sort_by(|a, b| (order(a), &a.subject).cmp(&(order(b), &b.subject)));
    let groups = match req.at {
        Some(at) => vec![detect::given(at, &events, settle)],
        None => group(&events, settle),
    };
    // Every change bounds its neighbours' periods, listed or not.
    let cuts: Vec<i64> = groups.iter().map(|g| g.0).collect();
    let found = groups.len();
    let listed: Vec<(i64, Vec<Event>)> = groups.into_iter().take(MAX_CHANGES).collect();
    // Neighbouring changes bound the periods (a given time stands alone).
    let ws: Vec<Option<Window>> = listed
        .iter()
        .enumerate()
        .map(|(i, (at, _))| {
            let prev = i.checked_sub(1).map(|p| cuts[p]);
            let next = cuts.get(i + 1).copied();
            windows(*at, (since, until), prev, next, settle, interval)
        })
        .collect();
    let compared: Vec<Window> = ws.iter().flatten().copied().collect();
    let mut accs = compare::sum_all(&hours.iter().collect::<Vec<_>>(), &compared).into_iter();
    let mut changes = Vec::with_capacity(listed.len());
    for ((at, evs), w) in listed.into_iter().zip(&ws) {
        let comparison = match w {
            Some(w) => accs.next().map(|acc| acc.finish(w, req)),
            None => None,
        };
        changes.push(model::change(at, evs, comparison, req.at.is_some(), settle));
    }
    // The plan's prediction beside the first compared change after the plan was made.
    if let Some(plan) = &req.plan {
        let after_plan = |c: &&mut Change| {
            plan.planned_until.is_none_or(|u| {
                chrono::DateTime::parse_from_rfc3339(&c.at).is_ok_and(|t| t.timestamp_millis() >= u)
            })
        };
        if let Some(c) = changes
            .iter_mut()
            .filter(|c| c.comparison.is_some())
            .find(after_plan)
        {
            let events = c.events.clone();
            if let Some(cmp) = c.comparison.as_mut() {
                cmp.predicted = Some(predicted::compare(plan, cmp, &events));
            }
        }
    }
    let mut section = model::section(changes, req.at.is_some(), settle, (since, until));
    if found > MAX_CHANGES {
        section.summary.push_str(&format!(
            " {found} changes in all: the first {MAX_CHANGES} are listed; narrow the range for the others."
        ));
    }
    Ok(section)
}

/// Each compared change of `section`: each team's work per GPU-hour over its before and after
/// periods (`crate::work::compare` of `held` and `rows`), also beside the plan's prediction
/// where the change has one.
pub fn add_work(
    section: &mut ChangeSection,
    held: &crate::work::Held,
    rows: &[crate::work::WorkRow],
    ctx: &crate::work::WorkContext,
) {
    let ms = |t: &str| crate::times::parse_time(t, 0).ok();
    for c in &mut section.changes {
        let Some(cmp) = c.comparison.as_mut() else {
            continue;
        };
        let (Some(b0), Some(b1), Some(a0), Some(a1)) = (
            ms(&cmp.before.from),
            ms(&cmp.before.until),
            ms(&cmp.after.from),
            ms(&cmp.after.until),
        ) else {
            continue;
        };
        cmp.work_per_gpu_hour = crate::work::compare(held, rows, (b0, b1), (a0, a1), ctx);
        if let Some(p) = cmp.predicted.as_mut() {
            p.work_per_gpu_hour = cmp.work_per_gpu_hour.clone();
        }
    }
}
