//! The report's trend (`--trend.weeks N`, default 4; docs/report.md "Trend"): the last N weeks
//! ending at the report's end — per week the GPU-hours available, the work utilization, the
//! idle-loaded GPU-hours, the allocated-but-unused GPU-hours and the cost, each as that week's
//! own report would give it — and the savings the layout changes found in those weeks realized,
//! per month.
//!
//! A week is 7 × 24 hours back from the report's end (the last week is the report's own when the
//! report covers exactly a week, or when all of that week's rows are in the report, as in a
//! history shorter than a week: its figures are taken from it). For every other week the
//! detectors the trend needs (`idle_loaded`, `allocated_unused`) run over that week alone, on
//! the advisor's workers, and the fleet figures are summed from the same rows read once per
//! partition (`super::tally::week_part`); the change detection runs over the week's rows, and
//! compares the periods around a change it finds. A week without rows is left out; a week the
//! data covers in part says its hours.
//!
//! Where a source counts work ([`WorkInput`]), each change's work per GPU-hour is compared as in
//! the Changes section; a change flagged there (a team's fell by more than
//! `crate::work::DROP_FLAGGED`) is listed with what it saved but left out of the realized
//! savings' sum: what it freed cost throughput, it is not a plain saving.
//!
//! What it does not do: read sources (the command reads far enough back: `trend_reach_ms`), the
//! other detectors, per-team or per-node trends, or forecasts.

use super::tally::{WeekPart, week_part};
use super::{
    HOUR_MS, MONTH_HOURS, Prices, RealizedChange, Report, ReportError, Trend, TrendWeek, r2, r3,
};
use crate::advisor::{self, Detector, Params};
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
    /// The work the sources counted, when they did (each change's work per GPU-hour).
    pub work: Option<&'a WorkInput>,
}

/// What the join of work to GPU-hours needs, read once for the report and its trend.
#[derive(Debug, Clone)]
pub struct WorkInput {
    /// The GPU-hours each pod held per hour, over every week read.
    pub held: crate::work::Held,
    pub rows: Vec<crate::work::WorkRow>,
    pub ctx: crate::work::WorkContext,
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
    let all = weeks(range.until, req.weeks);
    // The report's own week: the report's range, or a week ending with it whose rows all end
    // in it (the data's first row ends after the report's start: a history shorter than a week
    // is not read and judged a second time).
    let own = |w: &(i64, i64)| {
        *w == (range.since, range.until)
            || (w.1 == range.until
                && w.0 <= range.since
                && req.first_ts.is_some_and(|f| f > range.since))
    };
    // The weeks to read: not the report's own, not ending before the data's first row.
    let earlier: Vec<(i64, i64)> = all
        .iter()
        .copied()
        .filter(|w| !own(w) && req.first_ts.is_none_or(|f| w.1 >= f))
        .collect();
    let watch = crate::timing::Stopwatch::start("trend");
    let mut read = earlier_weeks(parts, &earlier, req)?.into_iter().peekable();
    if !earlier.is_empty() {
        watch.lap(&format!("{} earlier week(s) read", earlier.len()));
    }
    for w in &all {
        if own(w) {
            out.push(from_report(report));
            realized.extend(report.changes.as_ref().map(realized_of).unwrap_or_default());
            continue;
        }
        if let Some((week, changes)) = read.next_if(|(tw, _)| tw.until == fmt_ms(w.1)) {
            out.push(week);
            realized.extend(realized_of(&changes));
        }
    }
    // A change that work per GPU-hour flags is not a plain saving: left out of the sum.
    let known: Vec<f64> = realized
        .iter()
        .filter(|c| c.work_flagged.is_empty())
        .filter_map(|c| c.saving_per_month)
        .collect();
    let flagged_left_out = realized
        .iter()
        .filter(|c| !c.work_flagged.is_empty())
        .map(|c| c.at.clone())
        .collect();
    Ok(Some(Trend {
        weeks_asked: req.weeks,
        weeks: out,
        realized_saving_per_month: (!known.is_empty()).then(|| r2(known.iter().sum())),
        realized,
        flagged_left_out,
    }))
}

/// The week the report covers, from the report itself.
fn from_report(r: &Report) -> TrendWeek {
    let f = &r.fleet;
    let no_memory = f.memory_peak_gib.is_none() && f.memory_used_share.is_none();
    let idle: f64 = r.idle_models.iter().map(|m| m.reclaimable_gpu_hours).sum();
    // The sum of the models' own costs, as the summary's Waste line adds them.
    let idle_cost: f64 = r.idle_models.iter().map(|m| m.wasted_cost).sum();
    TrendWeek {
        from: r.from.clone(),
        until: r.until.clone(),
        hours: r3(r.hours),
        gpus: f.gpus,
        gpu_hours_available: f.gpu_hours_available,
        work_utilization: utilization(f.gpu_hours_busy, f.gpu_hours_available),
        idle_loaded_gpu_hours: (!no_memory).then(|| r3(idle)),
        idle_loaded_cost: (!no_memory).then(|| r2(idle_cost)),
        allocated_unused_gpu_hours: r.allocation.as_ref().map(|a| a.unused_gpu_hours),
        allocated_unused_cost: r.allocation.as_ref().map(|a| a.unused_cost),
        energy_kwh: f.energy_kwh,
        cost: f.cost_total,
    }
}

fn utilization(busy: Option<f64>, available: f64) -> Option<f64> {
    busy.filter(|_| available > 0.0).map(|b| r3(b / available))
}

/// One partition's share of one earlier week: its fleet sums, its change scan and each
/// detector's partial.
struct PartWeek {
    sums: WeekPart,
    scan: changes::scan::PartScan,
    partials: Vec<advisor::Partial>,
}

/// Reads partition `f`'s rows of every week in `weeks` (contiguous, oldest first) once, and
/// gives each week's share: the slice of the week in memory, the fleet sums, the change scan and
/// the detectors' partials.
fn read_part(
    f: &Frames,
    weeks: &[(i64, i64)],
    dets: &[Box<dyn Detector>],
    params: &Params,
) -> Result<Vec<PartWeek>, ReportError> {
    let (lo, hi) = (weeks[0].0, weeks[weeks.len() - 1].1);
    let mem = super::pass::materialize_within(f, lo, hi)?;
    let mut out = Vec::with_capacity(weeks.len());
    for &(since, until) in weeks {
        let week = super::pass::materialize_within(&mem, since, until)?;
        let frames = advisor::prepare(&week)?;
        let mut partials = Vec::with_capacity(dets.len());
        for d in dets {
            partials.push(d.partial(&frames, params)?);
        }
        out.push(PartWeek {
            sums: week_part(&week, since, until)?,
            scan: changes::scan::part(&week, since, until)?,
            partials,
        });
    }
    Ok(out)
}

/// Every partition's [`read_part`], on a few worker threads (each its own partition, as the
/// advisor's), in partition order.
fn read_parts(
    parts: &[&Frames],
    weeks: &[(i64, i64)],
    dets: &[Box<dyn Detector>],
    params: &Params,
) -> Result<Vec<Vec<PartWeek>>, ReportError> {
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
        .min(parts.len().max(1));
    let queue = std::sync::Mutex::new(parts.iter().enumerate());
    type Done = Vec<(usize, Vec<PartWeek>)>;
    let results: Vec<Result<Done, ReportError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| -> Result<Done, ReportError> {
                    let mut done = Vec::new();
                    loop {
                        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                        let Some((i, f)) = next else { return Ok(done) };
                        done.push((i, read_part(f, weeks, dets, params)?));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(ReportError::Worker)))
            .collect()
    });
    let mut all = Vec::with_capacity(parts.len());
    for r in results {
        all.extend(r?);
    }
    all.sort_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, w)| w).collect())
}

/// The weeks other than the report's (`weeks`: contiguous, oldest first), each partition read
/// once for all of them: per week the two detectors over its rows, its fleet sums and the
/// changes found in it; a week without rows is left out.
fn earlier_weeks(
    parts: &[&Frames],
    weeks: &[(i64, i64)],
    req: &TrendRequest,
) -> Result<Vec<(TrendWeek, ChangeSection)>, ReportError> {
    if weeks.is_empty() || parts.is_empty() {
        return Ok(Vec::new());
    }
    let dets: Vec<Box<dyn Detector>> = advisor::registry()
        .into_iter()
        .filter(|d| DETECTORS.contains(&d.id()))
        .collect();
    for d in &dets {
        d.validate(req.params)?;
    }
    let mut by_part = read_parts(parts, weeks, &dets, req.params)?;
    let mut out = Vec::new();
    for (k, &week) in weeks.iter().enumerate() {
        let mut sums = WeekPart::default();
        let mut scans = Vec::with_capacity(by_part.len());
        let mut partials: Vec<Vec<advisor::Partial>> = dets.iter().map(|_| Vec::new()).collect();
        for part in by_part.iter_mut() {
            let pw = std::mem::replace(
                &mut part[k],
                PartWeek {
                    sums: WeekPart::default(),
                    scan: changes::scan::PartScan::default(),
                    partials: Vec::new(),
                },
            );
            sums = sums.merge(pw.sums);
            scans.push(pw.scan);
            for (acc, p) in partials.iter_mut().zip(pw.partials) {
                acc.push(p);
            }
        }
        let analysis = finish_detectors(&dets, partials, week, req)?;
        if let Some(w) = week_figures(week, sums, scans, &analysis, req)? {
            out.push(w);
        }
    }
    Ok(out)
}

/// The detectors' findings over one week, as an analysis (the findings and the detectors'
/// figures the report's sections read).
fn finish_detectors(
    dets: &[Box<dyn Detector>],
    partials: Vec<Vec<advisor::Partial>>,
    (since, until): (i64, i64),
    req: &TrendRequest,
) -> Result<advisor::Analysis, ReportError> {
    let mut detectors = Vec::new();
    let mut findings = Vec::new();
    for (d, parts) in dets.iter().zip(partials) {
        let out = d.finish(parts, req.params)?;
        detectors.push(advisor::DetectorReport {
            id: d.id(),
            title: d.title(),
            findings: out.findings.len(),
            summary: out.summary,
            notes: out.notes,
            data: out.data,
        });
        findings.extend(out.findings);
    }
    Ok(advisor::Analysis {
        version: advisor::FINDINGS_VERSION,
        from: Some(fmt_ms(since)),
        until: Some(fmt_ms(until)),
        sources: req.sources.to_vec(),
        tz: req.params.tz.name().to_string(),
        actions: Vec::new(),
        detectors,
        findings,
    })
}

/// One week's row from its sums and findings, and the changes found in it; `None` when no GPU
/// has a row in it.
fn week_figures(
    (since, until): (i64, i64),
    sums: WeekPart,
    scans: Vec<changes::scan::PartScan>,
    analysis: &advisor::Analysis,
    req: &TrendRequest,
) -> Result<Option<(TrendWeek, ChangeSection)>, ReportError> {
    let memory = sums.has_memory();
    let Some(u) = sums.finish(since, until, req.prices) else {
        return Ok(None);
    };
    let power = super::IdlePower::default();
    let models = super::idle_models(analysis, req.prices, &power);
    let idle: f64 = models.iter().map(|m| m.reclaimable_gpu_hours).sum();
    // The sum of the models' own costs, as a report of that week adds them.
    let idle_cost: f64 = models.iter().map(|m| m.wasted_cost).sum();
    let (allocation, _) = super::allocated(analysis, req.prices, &power);
    let mut changes = changes::run(
        scans,
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
    if let Some(w) = req.work {
        changes::add_work(&mut changes, &w.held, &w.rows, &w.ctx);
    }
    let from = until - (u.hours * HOUR_MS).round() as i64;
    Ok(Some((
        TrendWeek {
            from: fmt_ms(from),
            until: fmt_ms(until),
            hours: u.hours,
            gpus: u.gpus,
            gpu_hours_available: u.gpu_hours_available,
            work_utilization: utilization(u.gpu_hours_busy, u.gpu_hours_available),
            idle_loaded_gpu_hours: memory.then(|| r3(idle)),
            idle_loaded_cost: memory.then(|| r2(idle_cost)),
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
                work_flagged: cmp
                    .work_per_gpu_hour
                    .iter()
                    .filter(|w| w.flagged)
                    .map(|w| format!("{} ({})", w.team, w.unit))
                    .collect(),
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
