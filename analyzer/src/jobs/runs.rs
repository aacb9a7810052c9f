//! A job id's runs: Slurm ids are reused (a daily job resubmitted under one id, a requeued
//! array task), so the rows of one id can be several runs with hours of nothing between them.
//! A run is a stretch of the job's rows (all its devices together) in which no gap between one
//! row's end and the next row's start reaches [`RUN_GAP_MS`] (or three of the job's longest rows,
//! if longer): a job's own gaps (a missed scrape, a step between phases) stay inside its run.
//! The job's duration is the sum of its runs' hours, not first start to last end. Pure.
//!
//! What it does not do: split the job's other figures per run (activity, memory, energy and the
//! idle spans stay over all its rows; the runs say when it ran).

use serde::Serialize;

use super::Row;
use crate::times::fmt_ms;

/// The least gap, ms, between two rows of one id that starts another run (1 hour).
pub const RUN_GAP_MS: i64 = 3_600_000;

/// One run of a job id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRun {
    pub start: String,
    pub end: String,
    pub hours: f64,
}

/// The runs of `rows` (any order, any devices), in time order; `(start, end)` unix ms each.
pub fn runs<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Vec<(i64, i64)> {
    let mut spans: Vec<(i64, i64)> = rows
        .into_iter()
        .map(|r| (r.ts - r.interval_ms, r.ts))
        .collect();
    let longest = spans.iter().map(|(s, e)| e - s).max().unwrap_or(0);
    let gap = RUN_GAP_MS.max(3 * longest);
    spans.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (s, e) in spans {
        match out.last_mut() {
            Some(last) if s - last.1 < gap => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The runs as the summary shows them.
pub fn describe(runs: &[(i64, i64)]) -> Vec<JobRun> {
    runs.iter()
        .map(|&(s, e)| JobRun {
            start: fmt_ms(s),
            end: fmt_ms(e),
            hours: ((e - s) as f64 / 3_600_000.0 * 1000.0).round() / 1000.0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ts_min: i64) -> Row {
        Row {
            ts: ts_min * 60_000,
            interval_ms: 300_000,
            memory: None,
            activity: None,
            capacity: None,
        }
    }

    #[test]
    fn rows_hours_apart_are_runs_and_short_gaps_stay_inside_one() {
        // Two daily runs of 2 h (5-minute rows), the first with a 30-minute gap inside.
        let mut rows: Vec<Row> = (1..=24)
            .filter(|k| !(10..16).contains(k))
            .map(|k| row(k * 5))
            .collect();
        rows.extend((1..=24).map(|k| row(24 * 60 + k * 5)));
        let r = runs(rows.iter().rev());
        assert_eq!(r, vec![(0, 120 * 60_000), (1440 * 60_000, 1560 * 60_000)]);
        let d = describe(&r);
        assert_eq!((d[0].hours, d[1].hours), (2.0, 2.0));
        assert_eq!(d[1].start, "1970-01-02T00:00:00.000Z");
        // A gap of exactly an hour starts another run; 59 minutes does not.
        let two = runs([row(5), row(70)].iter());
        assert_eq!(two.len(), 2);
        let one = runs([row(5), row(69)].iter());
        assert_eq!(one.len(), 1);
        assert!(runs(std::iter::empty()).is_empty());
    }

    #[test]
    fn a_reused_id_runs_for_its_runs_hours_not_first_to_last() {
        // Three daily runs of 2 h on one GPU: 50 h from first start to last end, 6 h running.
        let mut rows = Vec::new();
        for day in 0..3 {
            rows.extend((1..=24).map(|k| Row {
                activity: Some((0.8, super::super::ActivitySource::GpuSmActive)),
                ..row(day * 1440 + k * 5)
            }));
        }
        let mut job = super::super::JobRows::default();
        job.devices.insert(
            super::super::Device {
                node: "n1".into(),
                gpu: 0,
                uuid: None,
                gpu_instance: None,
            },
            rows,
        );
        let s = super::super::summarise("81234", &job).unwrap();
        assert_eq!(s.runs.len(), 3);
        assert_eq!(s.duration_hours, 6.0);
        assert_eq!(s.gpu_hours, 6.0);
        assert!(s.verdict[0].contains("ran 3 times"), "{:?}", s.verdict);
        let text = super::super::render_table(&s);
        assert!(
            text.contains("3 runs of this id, 6.0 h running in all"),
            "{text}"
        );
    }
}
