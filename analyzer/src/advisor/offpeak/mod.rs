//! Off-peak capacity: the fleet's hour-of-week profile of free GPUs, the capacity that is free
//! at every hour (the **baseline**: over-provisioning, reported as its own finding with the GPU
//! models), and the **off-peak windows** in which free capacity rises above that baseline, in
//! tiers, as a schedule in a chosen time zone with cron and systemd `OnCalendar=` lines.
//!
//! A GPU is free in an hour when no pod or job holds it by allocation in any row of that hour
//! (`holders`: held is never free, whatever its use; unknown holders are not held against it),
//! every row of it in that hour holds less than `free_memory`
//! (nothing loaded beyond the driver's reserve) and shows activity ≤ `max_activity` (SM activity,
//! else busy ratio, judged on the interval max), and its rows cover at least half the hour. A
//! signal the data lacks is not held against a row (without memory, a GPU is judged on activity
//! alone, and a note says so; with holders alone — occupancy data — free means allocated to
//! nobody), but a row with none of the three is never free. Free capacity is counted in
//! whole GPUs (GPU-equivalents) per GPU model: training needs whole GPUs, and a MIG GPU counts
//! only when all of it is free. An hour is an observation only when the rows in it cover at
//! least half of it for the GPUs seen in it: an hour at the range's edge, or in a fleet-wide gap,
//! is no observation (never an hour with nothing free).
//!
//! The profile has one slot per local hour of the week (of the day when the observed hours
//! span less than two weeks). Per slot s, f(s) = the free GPUs reached in ≥ P (`min_share`) of
//! the slot's observations. Then:
//!
//! - **Baseline** B = min of f over the observed slots: GPUs free at every hour in ≥ P of the
//!   observed weeks (days). Per model likewise (b_m = min over slots of the model's own f), so
//!   the finding can name them. It is never a window.
//! - **Windows**: the cyclic runs (across midnight and the end of the week) of observed slots
//!   with f ≥ B + K (`min_gpus`) lasting ≥ `min_hours`, each at its full length and at the level
//!   that holds over it (the least f in it). Runs never overlap, so no window repeats another,
//!   and together they cover every such hour. A run's **peak** — the part with ≥ K more GPUs
//!   free than its level for ≥ `min_hours`, adding the most GPU-hours — is part of its finding,
//!   not a finding beside it. A slot without observations ends a run; since f(s) = B somewhere,
//!   no run goes around the clock.
//! - **Findings**: windows with the same start hour and length on several days are grouped into
//!   one [`ScheduleEntry`] with cron lines (`CRON_TZ=<tz> M H * * DOW`) and systemd
//!   `OnCalendar=` expressions for start and stop. At most [`MAX_WINDOW_FINDINGS`], those adding
//!   the most GPU-hours above the baseline; a note names the others (days, times, GPUs).
//!
//! Two phases: each partition's partial is its free GPUs per UTC hour and model ([`FreeGpus`]:
//! small, hours × models), added up in `finish`, which builds the profile. Pure: no I/O, no clock.
//!
//! Files: `free` (the partial), `profile` (profile, baseline, windows and peaks), `schedule`
//! (schedule lines and the cap); this module holds the parameters and the detector, which makes
//! the findings ([`OffpeakEvidence`]), the notes and the detector data.
//!
//! This module does not plan what to run in a window (the MIG planner and schedules do).

mod free;
mod profile;
mod schedule;
#[cfg(test)]
mod tests;

pub use free::HourCover;
pub use free::{FreeGpus, free_gpus_per_hour};
pub use profile::{Baseline, Peak, Profile, Slot, Window, profile};
pub use schedule::{MAX_WINDOW_FINDINGS, Schedule, ScheduleEntry, schedule, span_label};

pub use super::evidence::ModelGpus;

use serde_json::json;

use super::evidence::{BaselineEvidence, OffpeakEvidence, WindowEvidence};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity, finding_id,
    unbox,
};
use crate::frames::Frames;

const HOUR_MS: i64 = 3_600_000;
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
/// The model name of GPUs whose `model` is unknown (null).
pub const UNKNOWN_MODEL: &str = "unknown model";

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
        let sched = schedule(&prof, tz);
        let f = Found {
            id: self.id(),
            p,
            free: &free,
            prof: &prof,
            sched: &sched,
            tz,
            share: format!("{:.0}%", p.min_share * 100.0),
            all_the_time: if prof.period == "week" {
                "all week"
            } else {
                "around the clock"
            },
        };
        let mut out = DetectorOutput {
            notes: f.notes(),
            ..DetectorOutput::default()
        };
        out.findings.extend(f.baseline());
        for e in &sched.entries {
            out.findings.push(f.window(e));
        }
        out.summary = f.summary();
        out.data = f.data();
        Ok(out)
    }
}

/// What [`OffPeak::finish`] makes its findings, notes, summary and data of: the free GPUs added
/// up, their profile and schedule.
struct Found<'a> {
    /// The detector's id.
    id: &'static str,
    p: &'a OffpeakParams,
    free: &'a FreeGpus,
    prof: &'a Profile,
    sched: &'a Schedule,
    tz: &'static str,
    /// P, as a percentage.
    share: String,
    /// The baseline's time: `all week` or `around the clock`.
    all_the_time: &'static str,
}

impl Found<'_> {
    /// Notes: few periods observed, hours left out, GPUs judged on activity alone or not at all,
    /// windows left out by the cap.
    fn notes(&self) -> Vec<String> {
        let (p, prof, free, sched) = (self.p, self.prof, self.free, self.sched);
        let (period, tz) = (prof.period, self.tz);
        let mut notes = Vec::new();
        let periods = prof.slots.iter().map(|s| s.observations).max().unwrap_or(0);
        if periods < 2 {
            notes.push(format!(
                "only {periods} {period}(s) observed: the baseline and windows are a guess until more history exists"
            ));
        }
        if prof.hours_unobserved > 0 {
            notes.push(format!(
                "{} hour(s) with rows covering less than half of the hour (the range's edges, gaps in the data) are not observations: left out of the profile",
                prof.hours_unobserved
            ));
        }
        let gpus = prof.gpus_observed;
        let on_activity = free
            .gpus_without_memory
            .saturating_sub(free.gpus_without_signal + free.gpus_by_allocation_only);
        if on_activity > 0 {
            notes.push(format!(
                "memory used is missing for {on_activity} of {gpus} GPU(s): they are judged free on activity alone (busy ratio or SM activity ≤ {:.0}% over the hour); a GPU holding an idle model looks free in such data",
                p.max_activity * 100.0
            ));
        }
        if free.gpus_by_allocation_only > 0 {
            notes.push(format!(
                "{} of {gpus} GPU(s) have only the scheduler's allocation (occupancy data, no memory or activity): free means allocated to nobody; whether held GPUs were used, and which GPU of a node was held, is not known from such data",
                free.gpus_by_allocation_only
            ));
        }
        if free.gpus_without_signal > 0 {
            notes.push(format!(
                "{} of {gpus} GPU(s) have neither memory used, activity (busy ratio or SM activity) nor holders: not judged, never counted free",
                free.gpus_without_signal
            ));
        }
        if !sched.left_out.is_empty() {
            notes.push(format!(
                "{} more window(s) left out: only the {MAX_WINDOW_FINDINGS} adding the most GPU-hours above the baseline are findings: {}",
                sched.left_out.len(),
                sched
                    .left_out
                    .iter()
                    .map(|e| format!(
                        "{} {tz} ({} h, ≥ {} GPU(s) free, {} GPU-hour(s) per {period} above the baseline)",
                        e.label, e.hours, e.expected_free_gpus, e.gpu_hours
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        notes
    }

    /// The baseline's finding (over-provisioning), when there is one.
    fn baseline(&self) -> Option<Finding> {
        let (p, prof, b) = (self.p, self.prof, &self.prof.baseline);
        let (period, tz, share, all_the_time) =
            (prof.period, self.tz, &self.share, self.all_the_time);
        if b.gpus == 0 {
            return None;
        }
        Some(Finding::new(
            finding_id(self.id, &["baseline"]),
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
        ))
    }

    /// A schedule entry's finding id.
    fn id_of(&self, e: &ScheduleEntry) -> String {
        let key = if e.days.is_empty() {
            "every day".to_string()
        } else {
            e.days.join(",")
        };
        finding_id(
            self.id,
            &[self.prof.period, &key, &e.start, &e.hours.to_string()],
        )
    }

    /// A window's finding: when to start and stop, with cron and systemd lines.
    fn window(&self, e: &ScheduleEntry) -> Finding {
        let b = &self.prof.baseline;
        let (period, tz) = (self.prof.period, self.tz);
        let above = if b.gpus > 0 {
            format!(
                " ({} more than the {} free {})",
                e.above_baseline, b.gpus, self.all_the_time
            )
        } else {
            String::new()
        };
        let peaks = if e.peaks.is_empty() {
            String::new()
        } else {
            format!(
                "; more inside it: {}",
                e.peaks
                    .iter()
                    .map(|pk| format!("≥ {} {}", pk.expected_free_gpus, pk.label))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        Finding::new(
            self.id_of(e),
            Severity::Info,
            Entity {
                kind: "fleet".into(),
                ..Entity::default()
            },
            format!(
                "{} {tz} ({} h): ≥ {} GPU(s) free{above} in {:.0}% of observed {period}s{peaks}",
                e.label,
                e.hours,
                e.expected_free_gpus,
                e.confidence * 100.0,
            ),
            format!(
                "schedule training or batch jobs to start at {} and stop by {} ({tz}); cron: {} (start), {} (stop); systemd timer: {} (start), {} (stop)",
                e.start, e.end, e.cron_start, e.cron_end, e.systemd_start, e.systemd_end
            ),
            OffpeakEvidence::Window(Box::new(self.window_evidence(e))),
        )
    }

    fn window_evidence(&self, e: &ScheduleEntry) -> WindowEvidence {
        WindowEvidence {
            period: self.prof.period,
            tz: self.tz,
            tier: e.tier,
            days: e.days.clone(),
            end_days: e.end_days.clone(),
            start: e.start.clone(),
            end: e.end.clone(),
            hours: e.hours,
            min_gpus: self.prof.k,
            expected_free_gpus: e.expected_free_gpus,
            gpu_hours_per_period: e.gpu_hours,
            peaks: e.peaks.clone(),
            baseline_gpus: self.prof.baseline.gpus,
            above_baseline: e.above_baseline,
            confidence: super::r3(e.confidence),
            cron_start: e.cron_start.clone(),
            cron_end: e.cron_end.clone(),
            systemd_start: e.systemd_start.clone(),
            systemd_end: e.systemd_end.clone(),
        }
    }

    fn summary(&self) -> String {
        let (prof, sched) = (self.prof, self.sched);
        let left = if sched.left_out.is_empty() {
            String::new()
        } else {
            format!(" ({} more named in a note)", sched.left_out.len())
        };
        format!(
            "{} of {} GPU(s) free {} (baseline); {} window(s) of ≥ {} h with ≥ {} more GPU(s) free, in ≥ {} of observed {}s ({}){left}",
            prof.baseline.gpus,
            prof.gpus_observed,
            self.all_the_time,
            sched.entries.len(),
            self.p.min_hours,
            prof.k,
            self.share,
            prof.period,
            self.tz,
        )
    }

    /// The detector data: the profile, its windows and the findings grouped by level.
    fn data(&self) -> serde_json::Value {
        let (prof, free, b) = (self.prof, self.free, &self.prof.baseline);
        let mut tiers: std::collections::BTreeMap<u32, Vec<&ScheduleEntry>> =
            std::collections::BTreeMap::new();
        for e in &self.sched.entries {
            tiers.entry(e.expected_free_gpus).or_default().push(e);
        }
        json!({
            "period": prof.period,
            "min_gpus": prof.k,
            "gpus_observed": prof.gpus_observed,
            "gpus_without_memory": free.gpus_without_memory,
            "gpus_without_signal": free.gpus_without_signal,
            "gpus_by_allocation_only": free.gpus_by_allocation_only,
            "hours_unobserved": prof.hours_unobserved,
            "baseline": prof.baseline,
            "profile": prof.slots.iter().map(|s| json!({
                "slot": s.label, "observations": s.observations, "share": super::r3(s.share),
                "free_at_p": s.free_at_p, "free_median": s.free_median,
            })).collect::<Vec<_>>(),
            "windows": self.windows(),
            "tiers": tiers.iter().map(|(l, es)| json!({
                "free_gpus": l,
                "above_baseline": l.saturating_sub(b.gpus),
                "gpu_hours": es.iter().map(|e| e.gpu_hours).sum::<u64>(),
                "windows": prof
                    .windows
                    .iter()
                    .filter(|w| es.iter().any(|e| e.start_slots.contains(&w.start_slot)))
                    .collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }

    /// Each window of the profile with the finding it belongs to (null: left out by the cap,
    /// named in a note).
    fn windows(&self) -> Vec<serde_json::Value> {
        let weekly = self.prof.period == "week";
        let finding_of = |slot: usize| {
            self.sched
                .entries
                .iter()
                .find(|e| e.start_slots.contains(&slot))
                .map(|e| self.id_of(e))
        };
        self.prof
            .windows
            .iter()
            .map(|w| {
                json!({
                    "start_slot": w.start_slot,
                    "hours": w.hours,
                    "label": schedule::span_label(w.start_slot, w.hours as usize, weekly),
                    "expected_free_gpus": w.expected_free_gpus,
                    "above_baseline": w.above_baseline,
                    "confidence": super::r3(w.confidence),
                    "peak": w.peak.as_ref().map(|pk| json!({
                        "start_slot": pk.start_slot,
                        "hours": pk.hours,
                        "label": schedule::span_label(pk.start_slot, pk.hours as usize, weekly),
                        "expected_free_gpus": pk.expected_free_gpus,
                    })),
                    "finding": finding_of(w.start_slot),
                })
            })
            .collect()
    }
}
