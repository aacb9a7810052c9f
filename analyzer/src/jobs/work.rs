//! Work per GPU-hour of one Slurm job (`tessera job`, docs/jobs.md "Work"): the work its
//! counters counted in each of its runs ([`crate::work::SpanWork`], read by the `prometheus:`
//! source from series labelled `slurm_job_id="ID"`) joined to the GPU-hours the job held in the
//! same runs, from its own rows: whole GPUs count their rows' hours, MIG instances by their share
//! of the GPU (`crate::frames::mig_profile_share`: a `3g.40gb` instance-hour is 3/7 of a
//! GPU-hour; an instance whose profile the data does not name counts as a whole GPU).
//!
//! Per unit, the runs are summed, counting only the runs in which the unit's work is known: a
//! run without a sample of the counter leaves its GPU-hours out too, never counted as 0 work.
//! Units are never added together. Pure: no I/O, no clock. What it does not do: query
//! Prometheus (`ingest::prometheus::job_work` does), split the figures per run, or judge them.

use serde::Serialize;

use super::JobRows;
use crate::work::SpanWork;

const HOUR_MS: f64 = 3_600_000.0;

/// The job's work of one unit over the runs in which it was counted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobWork {
    pub unit: String,
    pub work: f64,
    /// The GPU-hours the job held in those runs (MIG instances by their share of the GPU).
    pub gpu_hours: f64,
    /// `work / gpu_hours`; `null` without GPU-hours.
    pub per_gpu_hour: Option<f64>,
}

/// The job's runs, `(start, end)` unix ms, in time order (`runs`): the spans its work is read
/// over.
pub fn spans(rows: &JobRows) -> Vec<(i64, i64)> {
    super::runs::runs(rows.devices.values().flatten())
}

/// The GPU-hours the job held in `(start, end]`: each device's rows ending in it, MIG instances
/// by their profile's share of the GPU.
pub fn gpu_hours_in(rows: &JobRows, (start, end): (i64, i64)) -> f64 {
    rows.devices
        .iter()
        .map(|(d, rs)| {
            let share = if d.gpu_instance.is_some() {
                crate::frames::mig_profile_share(rows.profiles.get(d).map(String::as_str))
            } else {
                1.0
            };
            let ms: i64 = rs
                .iter()
                .filter(|r| r.ts > start && r.ts <= end)
                .map(|r| r.interval_ms.max(0))
                .sum();
            ms as f64 / HOUR_MS * share
        })
        .sum()
}

fn round(x: f64, decimals: i32) -> f64 {
    let p = 10f64.powi(decimals);
    (x * p).round() / p + 0.0
}

/// The job's work per unit (in the order the units first appear in `found`), each over the runs
/// in which it was counted, with the GPU-hours of those runs.
pub fn join(rows: &JobRows, found: &[SpanWork]) -> Vec<JobWork> {
    let mut units: Vec<&str> = Vec::new();
    for f in found {
        if !units.contains(&f.unit.as_str()) {
            units.push(&f.unit);
        }
    }
    units
        .into_iter()
        .map(|unit| {
            let mut runs: Vec<(i64, i64)> = Vec::new();
            let mut work = 0.0;
            for f in found.iter().filter(|f| f.unit == unit) {
                if f.amount.is_finite() && f.amount >= 0.0 && !runs.contains(&f.run) {
                    work += f.amount;
                    runs.push(f.run);
                }
            }
            let gpu_hours: f64 = runs.iter().map(|r| gpu_hours_in(rows, *r)).sum();
            let per = (gpu_hours > 0.0)
                .then(|| work / gpu_hours)
                .filter(|v| v.is_finite());
            JobWork {
                unit: unit.to_string(),
                work: round(work, 3),
                gpu_hours: round(gpu_hours, 3),
                per_gpu_hour: per.map(|v| round(v, 3)),
            }
        })
        .collect()
}

/// The note of a job without any counter of its label.
pub fn no_work_metric(job: &str) -> String {
    format!(
        "no work metric (push a counter with {}={job}: docs/work.md)",
        crate::work::JOB_LABEL
    )
}

/// Sets `summary`'s work from what the sources read for the job's runs (`found`, per unit and
/// run; `Err`: why none could be asked): the figures per GPU-hour held, else the note saying why
/// there are none (never 0).
pub fn set(summary: &mut super::JobSummary, rows: &JobRows, found: Result<Vec<SpanWork>, String>) {
    match found {
        Ok(found) if found.is_empty() => summary.work_note = Some(no_work_metric(&summary.job)),
        Ok(found) => summary.work = Some(join(rows, &found)),
        Err(reason) => summary.work_note = Some(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Device, Row};
    use super::*;

    fn device(gi: Option<u32>) -> Device {
        Device {
            node: "n1".into(),
            gpu: 0,
            uuid: None,
            gpu_instance: gi,
        }
    }

    fn rows(from_min: i64, to_min: i64) -> Vec<Row> {
        (from_min / 5 + 1..=to_min / 5)
            .map(|k| Row {
                ts: k * 300_000,
                interval_ms: 300_000,
                memory: None,
                activity: None,
                capacity: None,
            })
            .collect()
    }

    #[test]
    fn work_is_divided_by_the_gpu_hours_of_the_runs_it_was_counted_in() {
        // A whole GPU and a 3g.40gb instance, two runs of 2 h each, a day apart.
        let mut job = JobRows::default();
        let mut r = rows(0, 120);
        r.extend(rows(1440, 1560));
        job.devices.insert(device(None), r.clone());
        job.devices.insert(device(Some(1)), r);
        job.profiles.insert(device(Some(1)), "3g.40gb".into());
        let s = spans(&job);
        assert_eq!(s, vec![(0, 7_200_000), (86_400_000, 93_600_000)]);
        let per_run = 2.0 * (1.0 + 3.0 / 7.0);
        assert!((gpu_hours_in(&job, s[0]) - per_run).abs() < 1e-9);
        let found = vec![
            SpanWork {
                unit: "steps".into(),
                run: s[0],
                amount: 1000.0,
            },
            SpanWork {
                unit: "steps".into(),
                run: s[1],
                amount: 3000.0,
            },
            // Only the first run counted samples: the second run's GPU-hours are left out.
            SpanWork {
                unit: "samples".into(),
                run: s[0],
                amount: 500.0,
            },
        ];
        let w = join(&job, &found);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].unit, "steps");
        assert_eq!(w[0].work, 4000.0);
        assert!((w[0].gpu_hours - 2.0 * per_run).abs() < 1e-3);
        let want = 4000.0 / (2.0 * per_run);
        assert!((w[0].per_gpu_hour.unwrap() - want).abs() < 1e-3, "{w:?}");
        assert_eq!(w[1].unit, "samples");
        assert!((w[1].per_gpu_hour.unwrap() - 500.0 / per_run).abs() < 1e-3);
        // No work found: nothing, never a 0.
        assert!(join(&job, &[]).is_empty());
        assert_eq!(
            no_work_metric("81"),
            "no work metric (push a counter with slurm_job_id=81: docs/work.md)"
        );
    }

    #[test]
    fn without_gpu_hours_the_rate_is_unknown() {
        let job = JobRows::default();
        let w = join(
            &job,
            &[SpanWork {
                unit: "steps".into(),
                run: (0, 1),
                amount: 5.0,
            }],
        );
        assert_eq!(w[0].per_gpu_hour, None);
        assert_eq!(w[0].gpu_hours, 0.0);
    }
}
