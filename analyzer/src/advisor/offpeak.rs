//! Off-peak training windows: the fleet's hour-of-week profile of free GPUs and the windows in
//! which at least K GPUs were free in at least P of the observed weeks (or days, when the data
//! spans less than two weeks), as a schedule in a chosen time zone with cron lines.
//!
//! A GPU is free in an hour when every row of it in that hour holds less than `free_memory`
//! (nothing loaded beyond the driver's reserve) and shows activity ≤ `max_activity` (SM activity,
//! else busy ratio, judged on the interval max), and its rows cover at least half the hour. Free
//! capacity is counted in whole GPUs (GPU-equivalents): training needs whole GPUs, and a MIG GPU
//! counts only when all of it is free. An hour with no data at all is not an observation.
//!
//! This module does not plan what to run in a window (the MIG planner and schedules do).

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, Timelike, Utc};
use polars::prelude::*;
use serde::Serialize;
use serde_json::json;

use super::columns::{self, ts_ms};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity, finding_id,
    unbox,
};
use crate::ingest::Frames;

const HOUR_MS: i64 = 3_600_000;
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// K: how many GPUs a window needs free.
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
    /// K (default 10% of the GPUs observed).
    pub min_gpus: MinGpus,
    /// P: share of observed weeks (or days) in which ≥ K GPUs must be free (default 0.9).
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

/// One slot of the profile (an hour of the week, or of the day).
#[derive(Debug, Clone, Serialize)]
pub struct Slot {
    /// `Mon 20:00` (weekly) or `20:00` (daily), local time.
    pub label: String,
    /// Observed weeks (days) with data in this slot.
    pub observations: usize,
    /// Share of observations with ≥ K GPUs free.
    pub share: f64,
    /// Free GPUs reached in at least P of the observations.
    pub free_at_p: u32,
    /// Median free GPUs.
    pub free_median: f64,
}

/// A window found in the profile.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Window {
    /// First slot (0 = Monday 00:00 local, or 00:00 in daily mode) and length in hours.
    pub start_slot: usize,
    pub hours: u32,
    /// Free GPUs reached in ≥ P of observations in every hour of the window.
    pub expected_free_gpus: u32,
    /// Lowest share of observations with ≥ K free over the window's hours.
    pub confidence: f64,
}

/// The profile and its windows.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// `week` or `day`.
    pub period: &'static str,
    pub k: u32,
    pub gpus_observed: usize,
    pub slots: Vec<Slot>,
    pub windows: Vec<Window>,
}

/// Free GPUs per UTC hour (hour index since the epoch), and how many GPUs were seen.
pub fn free_gpus_per_hour(
    frames: &Frames,
    p: &OffpeakParams,
) -> Result<(BTreeMap<i64, u32>, usize), AdvisorError> {
    let act = when(col("sm_active_max").is_not_null())
        .then(col("sm_active_max"))
        .otherwise(col("busy_max"));
    let free = col("memory_used_max_bytes")
        .cast(DataType::Float64)
        .lt(lit(p.free_memory_bytes))
        .and(act.clone().is_null().or(act.lt_eq(lit(p.max_activity))))
        .fill_null(lit(false));
    let per_gpu = frames
        .gpu
        .clone()
        .select([
            col("node"),
            col("uuid"),
            // ts > 0, so truncation is floor.
            ((ts_ms() - lit(1i64)).cast(DataType::Float64) / lit(HOUR_MS as f64))
                .cast(DataType::Int64)
                .alias("hour"),
            col("interval_ms").cast(DataType::Int64),
            free.cast(DataType::Int32).alias("free"),
        ])
        .group_by([col("node"), col("uuid"), col("hour")])
        .agg([
            col("free").min().alias("all_free"),
            col("interval_ms").sum().alias("covered"),
        ]);
    let gpus = per_gpu
        .clone()
        .select([col("node"), col("uuid")])
        .unique(None, UniqueKeepStrategy::Any)
        .collect()?
        .height();
    let df = per_gpu
        .with_column(
            col("all_free")
                .eq(lit(1))
                .and(col("covered").gt_eq(lit(HOUR_MS / 2)))
                .cast(DataType::Int64)
                .alias("is_free"),
        )
        .group_by([col("hour")])
        .agg([col("is_free").sum().alias("free")])
        .collect()?;
    let hour = columns::i64s(&df, "hour")?;
    let freec = columns::i64s(&df, "free")?;
    let mut out = BTreeMap::new();
    for i in 0..df.height() {
        if let (Some(h), Some(f)) = (hour.get(i), freec.get(i)) {
            out.insert(h, f.max(0) as u32);
        }
    }
    Ok((out, gpus))
}

/// Builds the profile and finds the windows (pure; `per_hour` from [`free_gpus_per_hour`]).
pub fn profile(per_hour: &BTreeMap<i64, u32>, gpus: usize, params: &Params) -> Profile {
    let p = &params.offpeak;
    let tz = params.tz;
    let k = match p.min_gpus {
        MinGpus::Count(n) => n,
        MinGpus::Share(s) => ((gpus as f64 * s).ceil() as u32).max(1),
    };
    let span_h = match (per_hour.keys().next(), per_hour.keys().next_back()) {
        (Some(a), Some(b)) => b - a + 1,
        _ => 0,
    };
    let weekly = span_h >= 14 * 24;
    let nslots = if weekly { 168 } else { 24 };
    // slot -> period -> free
    let mut obs: Vec<BTreeMap<i64, u32>> = vec![BTreeMap::new(); nslots];
    for (&h, &free) in per_hour {
        let Some(t) = DateTime::<Utc>::from_timestamp(h * 3600, 0) else {
            continue;
        };
        let local = t.with_timezone(&tz);
        let date = local.date_naive();
        let dow = local.weekday().num_days_from_monday() as usize;
        let hr = local.hour() as usize;
        let (slot, period) = if weekly {
            let monday = date - chrono::Days::new(dow as u64);
            (dow * 24 + hr, i64::from(monday.num_days_from_ce()))
        } else {
            (hr, i64::from(date.num_days_from_ce()))
        };
        // DST fall-back repeats an hour: keep the lower count (conservative).
        let e = obs[slot].entry(period).or_insert(free);
        *e = (*e).min(free);
    }
    let slots: Vec<Slot> = obs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut v: Vec<u32> = m.values().copied().collect();
            v.sort_unstable();
            let n = v.len();
            let share = if n == 0 {
                0.0
            } else {
                v.iter().filter(|&&x| x >= k).count() as f64 / n as f64
            };
            let free_at_p = if n == 0 {
                0
            } else {
                let need = ((p.min_share * n as f64).ceil() as usize).clamp(1, n);
                v[n - need]
            };
            let free_median = if n == 0 {
                0.0
            } else if n % 2 == 1 {
                f64::from(v[n / 2])
            } else {
                (f64::from(v[n / 2 - 1]) + f64::from(v[n / 2])) / 2.0
            };
            Slot {
                label: slot_label(i, weekly),
                observations: n,
                share,
                free_at_p,
                free_median,
            }
        })
        .collect();
    let ok: Vec<bool> = slots
        .iter()
        .map(|s| s.observations > 0 && s.share >= p.min_share)
        .collect();
    let mut windows = Vec::new();
    let make = |start: usize, len: usize| {
        let idx = (start..start + len).map(|i| i % nslots);
        Window {
            start_slot: start % nslots,
            hours: len as u32,
            expected_free_gpus: idx.clone().map(|i| slots[i].free_at_p).min().unwrap_or(0),
            confidence: idx.map(|i| slots[i].share).fold(1.0, f64::min),
        }
    };
    if ok.iter().all(|&o| o) && nslots > 0 {
        windows.push(make(0, nslots));
    } else if let Some(first_bad) = ok.iter().position(|&o| !o) {
        // Walk the cycle once starting after a bad slot, so runs wrapping midnight/Sunday join.
        let mut run_start: Option<usize> = None;
        for step in 1..=nslots {
            let i = first_bad + step;
            if ok[i % nslots] {
                run_start.get_or_insert(i);
            } else if let Some(s) = run_start.take()
                && i - s >= p.min_hours as usize
            {
                windows.push(make(s, i - s));
            }
        }
    }
    windows.sort_by_key(|w| w.start_slot);
    Profile {
        period: if weekly { "week" } else { "day" },
        k,
        gpus_observed: gpus,
        slots,
        windows,
    }
}

fn slot_label(slot: usize, weekly: bool) -> String {
    if weekly {
        format!("{} {:02}:00", DAYS[(slot / 24) % 7], slot % 24)
    } else {
        format!("{:02}:00", slot % 24)
    }
}

/// Cron day-of-week (0 = Sunday) of a weekly slot.
fn cron_dow(slot: usize) -> usize {
    ((slot / 24) % 7 + 1) % 7
}

/// Windows with the same local start hour and length on several days, grouped for cron.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleEntry {
    /// Days the window starts on (`Mon`…), empty in daily mode (every day).
    pub days: Vec<&'static str>,
    pub start: String,
    pub end: String,
    pub hours: u32,
    pub expected_free_gpus: u32,
    pub confidence: f64,
    pub cron_start: String,
    pub cron_end: String,
}

/// Groups windows into schedule entries.
pub fn schedule(profile: &Profile) -> Vec<ScheduleEntry> {
    let weekly = profile.period == "week";
    let nslots = if weekly { 168 } else { 24 };
    let mut groups: BTreeMap<(usize, u32), Vec<&Window>> = BTreeMap::new();
    for w in &profile.windows {
        let key = if w.hours as usize >= nslots {
            (w.start_slot, w.hours)
        } else {
            (w.start_slot % 24, w.hours)
        };
        groups.entry(key).or_default().push(w);
    }
    let mut out = Vec::new();
    for ((h0, len), ws) in groups {
        let always = len as usize >= nslots;
        let end_h = (h0 + len as usize) % 24;
        let days: Vec<&'static str> = if weekly && !always {
            ws.iter().map(|w| DAYS[w.start_slot / 24]).collect()
        } else {
            Vec::new()
        };
        let dows = |shift_days: usize| -> String {
            if !weekly || always {
                return "*".into();
            }
            ws.iter()
                .map(|w| cron_dow(w.start_slot + shift_days * 24).to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let end_day_shift = (h0 % 24 + len as usize) / 24;
        out.push(ScheduleEntry {
            days,
            start: format!("{:02}:00", h0 % 24),
            end: format!("{end_h:02}:00"),
            hours: len,
            expected_free_gpus: ws.iter().map(|w| w.expected_free_gpus).min().unwrap_or(0),
            confidence: ws.iter().map(|w| w.confidence).fold(1.0, f64::min),
            cron_start: if always {
                "@reboot".into()
            } else {
                format!("0 {} * * {}", h0 % 24, dows(0))
            },
            cron_end: if always {
                "-".into()
            } else {
                format!("0 {} * * {}", end_h, dows(end_day_shift))
            },
        });
    }
    out
}

impl Detector for OffPeak {
    fn id(&self) -> &'static str {
        "offpeak_window"
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
        let mut per_hour: BTreeMap<i64, u32> = BTreeMap::new();
        let mut gpus = 0;
        for (m, g) in unbox::<(BTreeMap<i64, u32>, usize)>(self.id(), parts)? {
            for (h, f) in m {
                *per_hour.entry(h).or_default() += f;
            }
            gpus += g;
        }
        let prof = profile(&per_hour, gpus, params);
        let entries = schedule(&prof);
        let tz = params.tz.name();
        let mut out = DetectorOutput::default();
        let periods = prof.slots.iter().map(|s| s.observations).max().unwrap_or(0);
        if periods < 2 {
            out.notes.push(format!(
                "only {periods} {}(s) observed: windows are a guess until more history exists",
                prof.period
            ));
        }
        for e in &entries {
            let when = if e.days.is_empty() {
                if e.hours >= 24 * 7 || (prof.period == "day" && e.hours >= 24) {
                    "always".to_string()
                } else {
                    "every day".to_string()
                }
            } else {
                e.days.join(",")
            };
            out.findings.push(Finding {
                id: finding_id(
                    self.id(),
                    &[prof.period, &when, &e.start, &e.hours.to_string()],
                ),
                detector: self.id(),
                severity: Severity::Info,
                entity: Entity {
                    kind: "fleet".into(),
                    ..Entity::default()
                },
                summary: format!(
                    "{when} {}–{} {tz} ({} h): ≥ {} GPU(s) free in {:.0}% of observed {}s, {} expected free",
                    e.start,
                    e.end,
                    e.hours,
                    prof.k,
                    e.confidence * 100.0,
                    prof.period,
                    e.expected_free_gpus
                ),
                action: format!(
                    "schedule training or batch jobs to start at {} and finish by {} ({tz}); cron: CRON_TZ={tz} {} (start), {} (stop)",
                    e.start, e.end, e.cron_start, e.cron_end
                ),
                evidence: json!({
                    "period": prof.period,
                    "tz": tz,
                    "days": e.days,
                    "start": e.start,
                    "end": e.end,
                    "hours": e.hours,
                    "min_gpus": prof.k,
                    "expected_free_gpus": e.expected_free_gpus,
                    "confidence": super::r3(e.confidence),
                    "cron_start": format!("CRON_TZ={tz} {}", e.cron_start),
                    "cron_end": format!("CRON_TZ={tz} {}", e.cron_end),
                }),
            });
        }
        out.summary = format!(
            "{} window(s) of ≥ {} h with ≥ {} of {} GPU(s) free in ≥ {:.0}% of observed {}s ({tz})",
            entries.len(),
            p.min_hours,
            prof.k,
            prof.gpus_observed,
            p.min_share * 100.0,
            prof.period
        );
        out.data = json!({
            "period": prof.period,
            "min_gpus": prof.k,
            "gpus_observed": prof.gpus_observed,
            "profile": prof.slots.iter().map(|s| json!({
                "slot": s.label, "observations": s.observations, "share": super::r3(s.share),
                "free_at_p": s.free_at_p, "free_median": s.free_median,
            })).collect::<Vec<_>>(),
            "windows": prof.windows,
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-02T00:00Z (a Monday) as an hour index.
    const MON: i64 = 1_793_577_600 / 3600;

    fn params(k: u32) -> Params {
        Params {
            offpeak: OffpeakParams {
                min_gpus: MinGpus::Count(k),
                ..OffpeakParams::default()
            },
            ..Params::default()
        }
    }

    #[test]
    fn weekend_window_wraps_around_the_week() {
        // 3 weeks: free 8 GPUs from Fri 20:00 to Mon 06:00, 0 otherwise.
        let mut m = BTreeMap::new();
        for h in 0..21 * 24 {
            let slot = (h % 168) as usize;
            let free = !(6..4 * 24 + 20).contains(&slot);
            m.insert(MON + h, if free { 8 } else { 0 });
        }
        let p = profile(&m, 8, &params(4));
        assert_eq!(p.period, "week");
        assert_eq!(
            p.windows,
            vec![Window {
                start_slot: 4 * 24 + 20,
                hours: 58,
                expected_free_gpus: 8,
                confidence: 1.0
            }]
        );
        let s = schedule(&p);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].cron_start, "0 20 * * 5");
        assert_eq!(s[0].cron_end, "0 6 * * 1");
    }

    #[test]
    fn short_runs_and_unreliable_hours_are_not_windows() {
        // 10 days, hour-of-day mode: 02:00–05:00 free (3 h, too short); 12:00–18:00 free on
        // only 8 of 10 days (< 90%).
        let mut m = BTreeMap::new();
        for d in 0..10 {
            for h in 0..24 {
                let free = (2..5).contains(&h) || ((12..18).contains(&h) && d < 8);
                m.insert(MON + d * 24 + h, if free { 5 } else { 1 });
            }
        }
        let p = profile(&m, 8, &params(4));
        assert_eq!(p.period, "day");
        assert!(p.windows.is_empty(), "{:?}", p.windows);
        // At P = 0.8 the afternoon qualifies.
        let mut q = params(4);
        q.offpeak.min_share = 0.8;
        let p = profile(&m, 8, &q);
        assert_eq!(p.windows.len(), 1);
        assert_eq!((p.windows[0].start_slot, p.windows[0].hours), (12, 6));
        assert_eq!(p.windows[0].confidence, 0.8);
    }

    #[test]
    fn always_free_is_one_window_and_empty_data_none() {
        let m: BTreeMap<i64, u32> = (0..48).map(|h| (MON + h, 3)).collect();
        let p = profile(&m, 3, &params(1));
        assert_eq!(p.windows.len(), 1);
        assert_eq!(p.windows[0].hours, 24);
        assert_eq!(schedule(&p)[0].cron_start, "@reboot");
        let p = profile(&BTreeMap::new(), 0, &params(1));
        assert!(p.windows.is_empty());
    }

    #[test]
    fn min_gpus_parses_counts_and_shares() {
        assert_eq!("4".parse::<MinGpus>(), Ok(MinGpus::Count(4)));
        assert_eq!("25%".parse::<MinGpus>(), Ok(MinGpus::Share(0.25)));
        for bad in ["0", "0%", "101%", "x", "-1", ""] {
            assert!(bad.parse::<MinGpus>().is_err(), "{bad}");
        }
        // A share rounds up and is at least one GPU.
        let mut p = params(1);
        p.offpeak.min_gpus = MinGpus::Share(0.1);
        let m: BTreeMap<i64, u32> = (0..24).map(|h| (MON + h, 2)).collect();
        assert_eq!(profile(&m, 11, &p).k, 2);
        assert_eq!(profile(&m, 3, &p).k, 1);
    }
}
