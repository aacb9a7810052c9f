//! Off-peak capacity: the fleet's hour-of-week profile of free GPUs, the capacity that is free
//! at every hour (the **baseline**: over-provisioning, reported as its own finding with the GPU
//! models), and the **off-peak windows** in which free capacity rises above that baseline, in
//! tiers, as a schedule in a chosen time zone with cron and systemd `OnCalendar=` lines.
//!
//! A GPU is free in an hour when every row of it in that hour holds less than `free_memory`
//! (nothing loaded beyond the driver's reserve) and shows activity ≤ `max_activity` (SM activity,
//! else busy ratio, judged on the interval max), and its rows cover at least half the hour. Free
//! capacity is counted in whole GPUs (GPU-equivalents) per GPU model: training needs whole GPUs,
//! and a MIG GPU counts only when all of it is free. An hour with no data at all is not an
//! observation.
//!
//! The profile has one slot per local hour of the week (of the day when the data spans less than
//! two weeks). Per slot s, f(s) = the free GPUs reached in ≥ P (`min_share`) of the slot's
//! observations. Then:
//!
//! - **Baseline** B = min of f over the observed slots: GPUs free at every hour in ≥ P of the
//!   observed weeks (days). Per model likewise (b_m = min over slots of the model's own f), so
//!   the finding can name them. It is never a window.
//! - **Levels**: the distinct values L of f with L − B ≥ K (`min_gpus`: a tier must add at least
//!   K GPUs beyond the baseline). The windows of a level are the cyclic runs (across midnight and
//!   the end of the week) of observed slots with f ≥ L lasting ≥ `min_hours`. A slot without
//!   observations ends a run; since f(s) = B somewhere, no run goes around the clock.
//! - **Tiers**: a level is a tier when it has windows that the next higher level does not have
//!   and that add at least `min_hours` hours to the next level's windows; the tier reports just
//!   those (each window once, at the highest level that keeps its exact shape, so its level is
//!   the least f over it; a window only an hour or two longer than the more-GPUs windows inside
//!   it is not worth a schedule line of its own). At most [`MAX_TIERS`] tiers, those adding the
//!   most GPU-hours above the baseline; a note names the others.
//! - The windows of the lowest level (every run with ≥ B + K free) are the profile's
//!   [`Profile::windows`], which the MIG planner's night schedule uses.
//!
//! Windows of a tier with the same start hour and length on several days are grouped into one
//! [`ScheduleEntry`] (one finding) with cron lines (`CRON_TZ=<tz> M H * * DOW`) and systemd
//! `OnCalendar=` expressions for start and stop.
//!
//! Two phases: each partition's partial is its free GPUs per UTC hour and model ([`FreeGpus`]:
//! small, hours × models), added up in `finish`, which builds the profile. Pure: no I/O, no clock.
//!
//! Files: `free` (the partial), `profile` (profile, baseline, windows, tiers), `schedule`
//! (schedule lines); this module holds the parameters and the detector, which makes the
//! findings ([`OffpeakEvidence`]) and the detector data.
//!
//! This module does not plan what to run in a window (the MIG planner and schedules do).

mod free;
mod profile;
mod schedule;
#[cfg(test)]
mod tests;

pub use free::{FreeGpus, free_gpus_per_hour};
pub use profile::{Baseline, Profile, Slot, Tier, Window, profile};
pub use schedule::{ScheduleEntry, schedule};

pub use super::evidence::ModelGpus;

use serde_json::json;

use super::evidence::{BaselineEvidence, OffpeakEvidence, WindowEvidence};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity, finding_id,
    unbox,
};
use crate::ingest::Frames;

const HOUR_MS: i64 = 3_600_000;
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
/// The model name of GPUs whose `model` is unknown (null).
pub const UNKNOWN_MODEL: &str = "unknown model";
/// Most tiers reported (those adding the most GPU-hours above the baseline).
pub const MAX_TIERS: usize = 3;

/// K: how many GPUs a window needs free beyond the baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MinGpus {
    Count(u32),
    /// A share of the GPUs observed (0–1), rounded up, at least 1.
    Share(f64),
}

impl std::str::FromStr for MinGpus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("bad GPU count {s:?}: expected a number (4) or a share of the fleet (10%)");
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| bad())?;
            if !(v > 0.0 && v <= 100.0) {
                return Err(bad());
            }
            Ok(MinGpus::Share(v / 100.0))
        } else {
            let v: u32 = s.trim().parse().map_err(|_| bad())?;
            if v == 0 {
                return Err(bad());
            }
            Ok(MinGpus::Count(v))
        }
    }
}

/// Thresholds (flags `--offpeak.*`).
#[derive(Debug, Clone)]
pub struct OffpeakParams {
    /// K: GPUs a tier adds beyond the baseline (default 10% of the GPUs observed).
    pub min_gpus: MinGpus,
    /// P: share of observed weeks (or days) in which the GPUs must be free (default 0.9).
    pub min_share: f64,
    /// Shortest window, hours (default 4).
    pub min_hours: u32,
    /// Memory below which a GPU counts as empty, bytes (default 1 GiB).
    pub free_memory_bytes: f64,
    /// Highest activity of a free GPU (default 0.05).
    pub max_activity: f64,
}

impl Default for OffpeakParams {
    fn default() -> Self {
        OffpeakParams {
            min_gpus: MinGpus::Share(0.1),
            min_share: 0.9,
            min_hours: 4,
            free_memory_bytes: (1u64 << 30) as f64,
            max_activity: 0.05,
        }
    }
}

/// The off-peak window detector.
pub struct OffPeak;

impl Detector for OffPeak {
    fn id(&self) -> &'static str {
        OffpeakEvidence::DETECTOR
    }

    fn title(&self) -> &'static str {
        "Off-peak training windows"
    }

    fn validate(&self, params: &Params) -> Result<(), AdvisorError> {
        let p = &params.offpeak;
        if !(0.0..=1.0).contains(&p.min_share) {
            return Err(AdvisorError::Param {
                name: "--offpeak.min-share",
                reason: format!("{} is not a share in 0–1", p.min_share),
            });
        }
        Ok(())
    }

    fn partial(&self, frames: &Frames, params: &Params) -> Result<Partial, AdvisorError> {
        Ok(Box::new(free_gpus_per_hour(frames, &params.offpeak)?))
    }

    fn finish(&self, parts: Vec<Partial>, params: &Params) -> Result<DetectorOutput, AdvisorError> {
        let p = &params.offpeak;
        // Partitions hold disjoint GPUs: free counts and GPU counts add up.
        let mut free = FreeGpus::default();
        for part in unbox::<FreeGpus>(self.id(), parts)? {
            free.merge(part);
        }
        let prof = profile(&free, params);
        let tz = params.tz.name();
        let entries = schedule(&prof, tz);
        let period = prof.period;
        let share = format!("{:.0}%", p.min_share * 100.0);
        let mut out = DetectorOutput::default();
        let periods = prof.slots.iter().map(|s| s.observations).max().unwrap_or(0);
        if periods < 2 {
            out.notes.push(format!(
                "only {periods} {period}(s) observed: the baseline and windows are a guess until more history exists"
            ));
        }
        if !prof.tiers_left_out.is_empty() {
            out.notes.push(format!(
                "{} more tier(s) of free capacity left out ({}): only the {MAX_TIERS} adding the most GPU-hours are reported",
                prof.tiers_left_out.len(),
                prof.tiers_left_out
                    .iter()
                    .map(|t| format!(
                        "≥ {} GPU(s) free, {} GPU-hour(s) per {period} above the baseline",
                        t.free_gpus, t.gpu_hours
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        let b = &prof.baseline;
        let all_the_time = if period == "week" {
            "all week"
        } else {
            "around the clock"
        };
        if b.gpus > 0 {
            out.findings.push(Finding::new(
                finding_id(self.id(), &["baseline"]),
                Severity::Warning,
                Entity {
                    kind: "fleet".into(),
                    ..Entity::default()
                },
                format!(
                    "{} of {} GPU(s) free {all_the_time} in ≥ {share} of observed {period}s: {} — over-provisioned",
                    b.gpus,
                    prof.gpus_observed,
                    b.models_text()
                ),
                format!(
                    "release or repurpose them (return them to the pool, shrink the reservation, or give them to batch and training queues): they were free at every observed hour of the {period} ({tz})"
                ),
                OffpeakEvidence::Baseline(BaselineEvidence {
                    period,
                    tz,
                    gpus: b.gpus,
                    gpus_observed: prof.gpus_observed,
                    by_model: b.by_model.clone(),
                    unattributed_gpus: b.unattributed(),
                    min_share: p.min_share,
                    gpu_hours_per_period: u64::from(b.gpus) * prof.nslots() as u64,
                }),
            ));
        }
        for e in &entries {
            let key = if e.days.is_empty() {
                "every day".to_string()
            } else {
                e.days.join(",")
            };
            let above = if b.gpus > 0 {
                format!(
                    " ({} more than the {} free {all_the_time})",
                    e.above_baseline, b.gpus
                )
            } else {
                String::new()
            };
            out.findings.push(Finding::new(
                finding_id(self.id(), &[period, &key, &e.start, &e.hours.to_string()]),
                Severity::Info,
                Entity {
                    kind: "fleet".into(),
                    ..Entity::default()
                },
                format!(
                    "{} {tz} ({} h): ≥ {} GPU(s) free{above} in {:.0}% of observed {period}s",
                    e.label,
                    e.hours,
                    e.expected_free_gpus,
                    e.confidence * 100.0,
                ),
                format!(
                    "schedule training or batch jobs to start at {} and stop by {} ({tz}); cron: {} (start), {} (stop); systemd timer: {} (start), {} (stop)",
                    e.start, e.end, e.cron_start, e.cron_end, e.systemd_start, e.systemd_end
                ),
                OffpeakEvidence::Window(WindowEvidence {
                    period,
                    tz,
                    tier: e.tier,
                    days: e.days.clone(),
                    end_days: e.end_days.clone(),
                    start: e.start.clone(),
                    end: e.end.clone(),
                    hours: e.hours,
                    min_gpus: prof.k,
                    expected_free_gpus: e.expected_free_gpus,
                    baseline_gpus: b.gpus,
                    above_baseline: e.above_baseline,
                    confidence: super::r3(e.confidence),
                    cron_start: e.cron_start.clone(),
                    cron_end: e.cron_end.clone(),
                    systemd_start: e.systemd_start.clone(),
                    systemd_end: e.systemd_end.clone(),
                }),
            ));
        }
        out.summary = format!(
            "{} of {} GPU(s) free {all_the_time} (baseline); {} window(s) in {} tier(s) of ≥ {} h with ≥ {} more GPU(s) free, in ≥ {share} of observed {period}s ({tz})",
            b.gpus,
            prof.gpus_observed,
            entries.len(),
            prof.tiers.len(),
            p.min_hours,
            prof.k,
        );
        out.data = json!({
            "period": period,
            "min_gpus": prof.k,
            "gpus_observed": prof.gpus_observed,
            "baseline": prof.baseline,
            "profile": prof.slots.iter().map(|s| json!({
                "slot": s.label, "observations": s.observations, "share": super::r3(s.share),
                "free_at_p": s.free_at_p, "free_median": s.free_median,
            })).collect::<Vec<_>>(),
            "windows": prof.windows,
            "tiers": prof.tiers,
        });
        Ok(out)
    }
}
