//! The report's trend (`--trend.weeks N`, default 4; docs/report.md "Trend"): the last N weeks
//! ending at the report's end — per week the GPU-hours available, the work utilization, the
//! idle-loaded GPU-hours, the allocated-but-unused GPU-hours and the cost, each as that week's
//! own report would give it — and the savings the layout changes found in those weeks realized,
//! per month.
//!
//! A week is 7 × 24 hours back from the report's end (the last week is the report's own when the
//! report covers exactly a week: its figures are taken from it). For every other week the
//! detectors the trend needs (`idle_loaded`, `allocated_unused`) run over that week alone, on
//! the advisor's workers, and the fleet figures are summed from the same rows read once per
//! partition ([`super::tally::week_part`]); the change detection runs over the week's rows, and
//! compares the periods around a change it finds. A week without rows is left out; a week the
//! data covers in part says its hours.
//!
//! What it does not do: read sources (the command reads far enough back: `trend_reach_ms`), the
//! other detectors, per-team or per-node trends, or forecasts.

use super::tally::{WeekPart, week_part};
use super::{
    HOUR_MS, MONTH_HOURS, Prices, RealizedChange, Report, ReportError, Trend, TrendWeek, r2, r3,
};
use crate::advisor::{self, AdvisorError, Params};
use crate::changes::{self, ChangeRequest, ChangeSection};
use crate::frames::Frames;
use crate::range::TimeRange;
use crate::times::fmt_ms;

/// The weeks the trend shows unless asked otherwise.
pub const DEFAULT_WEEKS: usize = 4;
/// The most weeks it shows (a year).
pub const MAX_WEEKS: usize = 52;
/// One week, ms.
pub const WEEK_MS: i64 = 7 * 24 * 3_600_000;
/// The detectors the trend runs for each week.
const DETECTORS: [&str; 2] = ["idle_loaded", "allocated_unused"];

/// What the trend needs besides the frames and the report.
pub struct TrendRequest<'a> {
    pub weeks: usize,
    pub params: &'a Params,
    pub prices: &'a Prices,
    pub sources: &'a [String],
    /// The apply journals' runs (evidence of changes, as for the report's change section).
    pub journal: &'a [changes::journal::JournalRun],
    /// The end of the data's first row, unix ms, when known: weeks ending before it have no
    /// rows and are not read.
    pub first_ts: Option<i64>,
}

/// The `n` weeks ending at `until`, oldest first: `(since, until]` each.
pub fn weeks(until: i64, n: usize) -> Vec<(i64, i64)> {
    (0..n as i64)
        .rev()
        .map(|k| (until - (k + 1) * WEEK_MS, until - k * WEEK_MS))
        .collect()
}

/// How far before the report's start the sources must be read for the trend (0 when the
/// report's range already covers the weeks).
pub fn trend_reach_ms(range: TimeRange, weeks: usize) -> i64 {
    (range.until - weeks as i64 * WEEK_MS - range.since)
        .min(0)
        .abs()
}

/// The trend of `report` over `parts` (the partitions the report was built from, reaching back
/// far enough); `None` when no week was asked for. Fewer than two weeks with data is no trend:
/// the renderers say so.
pub fn run(
    parts: &[&Frames],
    report: &Report,
    range: TimeRange,
    req: &TrendRequest,
) -> Result<Option<Trend>, ReportError> {
    if req.weeks == 0 {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut realized = Vec::new();
    for (since, until) in weeks(range.until, req.weeks) {
        if (since, until) == (range.since, range.until) {
            out.push(from_report(report));
            realized.extend(report.changes.as_ref().map(realized_of).unwrap_or_default());
            continue;
        }
        if req.first_ts.is_some_and(|f| until < f) {
            continue;
        }
        if let Some((week, changes)) = one_week(parts, (since, until), req)? {
            out.push(week);
            realized.extend(realized_of(&changes));
        }
    }
    let known: Vec<f64> = realized.iter().filter_map(|c| c.saving_per_month).collect();
    Ok(Some(Trend {
        weeks_asked: req.weeks,
        weeks: out,
        realized_saving_per_month: (!known.is_empty()).then(|| r2(known.iter().sum())),
        realized,
    }))
}

/// The week the report covers, from the report itself.
fn from_report(r: &Report) -> TrendWeek {
    let f = &r.fleet;
    let no_memory = f.memory_peak_gib.is_none() && f.memory_used_share.is_none();
    let idle: f64 = r.idle_models.iter().map(|m| m.reclaimable_gpu_hours).sum();
    TrendWeek {
        from: r.from.clone(),
        until: r.until.clone(),
        hours: r3(r.hours),
        gpus: f.gpus,
        gpu_hours_available: f.gpu_hours_available,
        work_utilization: utilization(f.gpu_hours_busy, f.gpu_hours_available),
        idle_loaded_gpu_hours: (!no_memory).then(|| r3(idle)),
        idle_loaded_cost: (!no_memory).then(|| r2(idle * r.prices.gpu_hour)),
        allocated_unused_gpu_hours: r.allocation.as_ref().map(|a| a.unused_gpu_hours),
        allocated_unused_cost: r.allocation.as_ref().map(|a| a.unused_cost),
        energy_kwh: f.energy_kwh,
        cost: f.cost_total,
    }
}

fn utilization(busy: Option<f64>, available: f64) -> Option<f64> {
    busy.filter(|_| available > 0.0).map(|b| r3(b / available))
}

/// What one week's rows gave: the two detectors' analysis, the fleet sums, each partition's
/// change scan (in partition order) and whether some row has memory used.
struct WeekRead {
    analysis: crate::advisor::Analysis,
    sums: WeekPart,
    scans: Vec<changes::scan::PartScan>,
    memory: bool,
}

/// Reads each partition's rows of `(since, until]` once, on the advisor's workers: the two
/// detectors, the fleet sums and the change scan.
fn read_week(
    parts: &[&Frames],
    (since, until): (i64, i64),
    req: &TrendRequest,
) -> Result<WeekRead, ReportError> {
    let sums = std::sync::Mutex::new(Vec::new());
    let failed: std::sync::Mutex<Option<ReportError>> = std::sync::Mutex::new(None);
    let step = |i: usize, f: Frames| -> Result<Frames, AdvisorError> {
        let run = || -> Result<Frames, ReportError> {
            let mem = super::pass::materialize_within(&f, since, until)?;
            let part = week_part(&mem, since, until)?;
            let scan = changes::scan::part(&mem, since, until)?;
            sums.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((i, part, scan));
            Ok(mem)
        };
        run().map_err(|e| {
            let reason = e.to_string();
            failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(e);
            AdvisorError::Param {
                name: "partition",
                reason,
            }
        })
    };
    let only: Vec<String> = DETECTORS.iter().map(|s| s.to_string()).collect();
    let analysis = advisor::analyze_parts_each(
        parts.iter().map(|f| Ok::<_, AdvisorError>((*f).clone())),
        req.params,
        Some((since, until)),
        req.sources.to_vec(),
        &only,
        &|_| {},
        &step,
    )
    .map_err(|e| {
        failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or(ReportError::Advisor(e))
    })?;
    let mut sums = sums.into_inner().unwrap_or_else(|e| e.into_inner());
    sums.sort_by_key(|(i, _, _)| *i);
    let mut out = WeekRead {
        analysis,
        sums: WeekPart::default(),
        scans: Vec::with_capacity(sums.len()),
        memory: false,
    };
    for (_, part, scan) in sums {
        out.memory |= part.has_memory();
        out.sums = out.sums.merge(part);
        out.scans.push(scan);
    }
    Ok(out)
}

/// One week other than the report's: the two detectors over its rows, its fleet sums from the
/// same rows, and the changes found in it. `None` when no GPU has a row in it.
fn one_week(
    parts: &[&Frames],
    (since, until): (i64, i64),
    req: &TrendRequest,
) -> Result<Option<(TrendWeek, ChangeSection)>, ReportError> {
    let read = read_week(parts, (since, until), req)?;
    let Some(u) = read.sums.finish(since, until, req.prices) else {
        return Ok(None);
    };
    let power = super::IdlePower::default();
    let idle: f64 = super::idle_models(&read.analysis, req.prices, &power)
        .iter()
        .map(|m| m.reclaimable_gpu_hours)
        .sum();
    let (allocation, _) = super::allocated(&read.analysis, req.prices, &power);
    let changes = changes::run(
        parts,
        read.scans,
        &ChangeRequest {
            range: TimeRange { since, until },
            at: None,
            journal: req.journal.to_vec(),
            plan: None,
            gpu_hour: req.prices.gpu_hour,
            kwh: req.prices.kwh,
            currency: req.prices.currency.clone(),
        },
    )?;
    let from = until - (u.hours * HOUR_MS).round() as i64;
    let memory = read.memory;
    Ok(Some((
        TrendWeek {
            from: fmt_ms(from),
            until: fmt_ms(until),
            hours: u.hours,
            gpus: u.gpus,
            gpu_hours_available: u.gpu_hours_available,
            work_utilization: utilization(u.gpu_hours_busy, u.gpu_hours_available),
            idle_loaded_gpu_hours: memory.then(|| r3(idle)),
            idle_loaded_cost: memory.then(|| r2(idle * req.prices.gpu_hour)),
            allocated_unused_gpu_hours: allocation.as_ref().map(|a| a.unused_gpu_hours),
            allocated_unused_cost: allocation.as_ref().map(|a| a.unused_cost),
            energy_kwh: u.energy_kwh,
            cost: u.cost_total,
        },
        changes,
    )))
}

/// The compared changes of a change section, with what each saved per month.
fn realized_of(s: &ChangeSection) -> Vec<RealizedChange> {
    s.changes
        .iter()
        .filter_map(|c| {
            let cmp = c.comparison.as_ref()?;
            let (b, a) = (&cmp.fleet.before, &cmp.fleet.after);
            let per_month = |x: f64| r2(x / cmp.hours * MONTH_HOURS);
            Some(RealizedChange {
                at: c.at.clone(),
                gpus_freed: match (b.gpus_in_use, a.gpus_in_use) {
                    (Some(b), Some(a)) => Some(r3(b - a)),
                    _ => None,
                },
                saving_per_month: match (b.cost_total, a.cost_total) {
                    (Some(b), Some(a)) if cmp.hours > 0.0 => Some(per_month(b - a)),
                    _ => None,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weeks_end_at_the_reports_end_oldest_first() {
        let w = weeks(10 * WEEK_MS, 3);
        assert_eq!(
            w,
            vec![
                (7 * WEEK_MS, 8 * WEEK_MS),
                (8 * WEEK_MS, 9 * WEEK_MS),
                (9 * WEEK_MS, 10 * WEEK_MS)
            ]
        );
        assert!(weeks(0, 0).is_empty());
    }

    #[test]
    fn the_reach_covers_the_weeks_before_the_range() {
        let r = TimeRange {
            since: 3 * WEEK_MS,
            until: 4 * WEEK_MS,
        };
        assert_eq!(trend_reach_ms(r, 4), 3 * WEEK_MS);
        assert_eq!(trend_reach_ms(r, 1), 0);
        // A range longer than the weeks needs nothing more.
        let long = TimeRange {
            since: 0,
            until: 4 * WEEK_MS,
        };
        assert_eq!(trend_reach_ms(long, 2), 0);
    }
}
