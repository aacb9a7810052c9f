//! One week's fleet figures for the report's trend (`crate::report::trend`): the GPUs with rows,
//! the GPU-hours of work (activity × time) and the energy of one partition's GPU rows ending in
//! `(since, until]`, summed over the partitions, then finished by the fleet rule of the report's
//! own summary ([`super::usage`]): GPU-hours available = GPUs × the week's hours with data,
//! cost = GPU-hours available × price + kWh × price. Pure sums over rows read from the frames it
//! is given.
//!
//! What it does not do: quantiles, the per-node and per-model tables, teams or charts (the trend
//! shows fleet figures only), or the findings (the trend runs the detectors itself).

use super::rows::gpu_rows;
use super::{HOUR_MS, Prices, ReportError, r2, r3};
use crate::frames::Frames;

/// One partition's sums over a week.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct WeekPart {
    gpus: usize,
    /// Σ activity × hours, and Σ hours of the rows with activity.
    busy: f64,
    act_t: f64,
    /// Σ energy, J; `None` when no row has it.
    energy: Option<f64>,
    /// The earliest row's start (`ts − interval`), unix ms.
    first_start: Option<i64>,
    /// Some row has memory used (else nothing can be called idle-loaded).
    memory: bool,
}

/// The fleet's figures of one week, as the report's summary computes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WeekUsage {
    pub gpus: usize,
    /// Hours of the week from the data's first row start on (the week clipped to the data).
    pub hours: f64,
    pub gpu_hours_available: f64,
    /// `None` when no row has an activity value.
    pub gpu_hours_busy: Option<f64>,
    pub energy_kwh: Option<f64>,
    pub cost_total: f64,
}

/// The sums of `frames`' GPU rows ending in `(since, until]`.
pub(crate) fn week_part(frames: &Frames, since: i64, until: i64) -> Result<WeekPart, ReportError> {
    let (gpus, rows) = gpu_rows(frames, since + 1, until, None)?;
    let mut p = WeekPart {
        gpus: gpus.len(),
        ..WeekPart::default()
    };
    for r in &rows {
        let h = r.interval as f64 / HOUR_MS;
        if let Some(a) = r.activity() {
            p.busy += a * h;
            p.act_t += h;
        }
        if let Some(e) = r.energy_j() {
            *p.energy.get_or_insert(0.0) += e;
        }
        p.memory |= r.mem().is_some();
        let start = r.ts - r.interval;
        p.first_start = Some(p.first_start.map_or(start, |f| f.min(start)));
    }
    Ok(p)
}

impl WeekPart {
    /// The sums of two partitions (no node is in both).
    pub(crate) fn merge(self, o: WeekPart) -> WeekPart {
        WeekPart {
            gpus: self.gpus + o.gpus,
            busy: self.busy + o.busy,
            act_t: self.act_t + o.act_t,
            energy: match (self.energy, o.energy) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            },
            first_start: match (self.first_start, o.first_start) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            memory: self.memory || o.memory,
        }
    }

    /// Whether some row has memory used.
    pub(crate) fn has_memory(&self) -> bool {
        self.memory
    }

    /// The week `(since, until]`'s figures; `None` when no GPU has a row in it.
    pub(crate) fn finish(self, since: i64, until: i64, prices: &Prices) -> Option<WeekUsage> {
        if self.gpus == 0 {
            return None;
        }
        let from = self.first_start.map_or(since, |f| f.max(since));
        let hours = (until - from).max(0) as f64 / HOUR_MS;
        let available = r3(self.gpus as f64 * hours);
        let energy_kwh = self.energy.map(|j| r3(j / 3.6e6));
        let cost_energy = energy_kwh.map(|e| r2(e * prices.kwh));
        Some(WeekUsage {
            gpus: self.gpus,
            hours: r3(hours),
            gpu_hours_available: available,
            gpu_hours_busy: (self.act_t > 0.0).then(|| r3(self.busy)),
            energy_kwh,
            cost_total: r2(r2(available * prices.gpu_hour) + cost_energy.unwrap_or(0.0)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices() -> Prices {
        Prices {
            gpu_hour: 2.0,
            kwh: 0.5,
            ..Prices::default()
        }
    }

    #[test]
    fn a_week_is_clipped_to_the_data_and_priced_as_the_summary_is() {
        let week = 7 * 24 * 3_600_000;
        let a = WeekPart {
            gpus: 2,
            busy: 10.0,
            act_t: 20.0,
            energy: Some(3.6e6),
            first_start: Some(week / 2),
            memory: true,
        };
        let b = WeekPart {
            gpus: 1,
            busy: 5.0,
            act_t: 5.0,
            energy: None,
            first_start: Some(week),
            memory: false,
        };
        let u = a.merge(b).finish(0, week, &prices()).unwrap();
        assert_eq!(u.gpus, 3);
        assert_eq!(u.hours, 84.0);
        assert_eq!(u.gpu_hours_available, 252.0);
        assert_eq!(u.gpu_hours_busy, Some(15.0));
        assert_eq!(u.energy_kwh, Some(1.0));
        assert_eq!(u.cost_total, 504.5);
        assert_eq!(WeekPart::default().finish(0, week, &prices()), None);
        let quiet = WeekPart {
            gpus: 1,
            first_start: Some(-5),
            ..WeekPart::default()
        };
        let q = quiet.finish(0, week, &prices()).unwrap();
        assert_eq!(
            (q.hours, q.gpu_hours_busy, q.energy_kwh),
            (168.0, None, None)
        );
    }
}
