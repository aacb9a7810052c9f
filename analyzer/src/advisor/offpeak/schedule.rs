//! The off-peak schedule: the profile's windows with the same local start hour and length
//! grouped into one [`ScheduleEntry`] (one finding), with cron lines and systemd `OnCalendar=`
//! expressions at the start and the end, and the cap: at most [`MAX_WINDOW_FINDINGS`] entries,
//! those adding the most GPU-hours above the baseline; the rest are left out (and named in a
//! note by the detector).
//!
//! Pure over a [`Profile`]. This module does not find windows (that is `profile`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::DAYS;
use super::profile::{Profile, Window};
use crate::advisor::evidence::PeakEvidence;

/// Most window findings: those adding the most GPU-hours above the baseline. One per day of
/// the week: a week's distinct nights and a weekend fit, and a schedule stays one screen; the
/// rest are named in a note.
pub const MAX_WINDOW_FINDINGS: usize = 7;

/// Cron day-of-week (0 = Sunday) of a weekday index (0 = Monday).
fn cron_dow(day: usize) -> usize {
    (day % 7 + 1) % 7
}

/// Weekday indexes (0 = Monday) as systemd's list: runs of three or more as `Mon..Thu`.
fn systemd_days(days: &BTreeSet<usize>) -> String {
    let mut parts = Vec::new();
    let v: Vec<usize> = days.iter().copied().collect();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            parts.push(format!("{}..{}", DAYS[v[i]], DAYS[v[j]]));
        } else {
            parts.extend(v[i..=j].iter().map(|&d| DAYS[d].to_string()));
        }
        i = j + 1;
    }
    parts.join(",")
}

/// Weekday indexes for people: `Mon–Thu`, `Fri`, `Mon, Wed`.
fn days_label(days: &BTreeSet<usize>) -> String {
    systemd_days(days).replace("..", "–").replace(',', ", ")
}

/// Windows with the same local start hour and length, grouped: one finding.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleEntry {
    /// Rank of its level among the reported entries' levels (1 = fewest GPUs free).
    pub tier: usize,
    /// Days the windows start on (`Mon`…), empty in daily mode (every day).
    pub days: Vec<&'static str>,
    /// Days the windows end on.
    pub end_days: Vec<&'static str>,
    /// `Mon–Thu 19:00–07:00`, `Fri 19:00–Mon 07:00`, `every day 19:00–07:00`.
    pub label: String,
    pub start: String,
    pub end: String,
    pub hours: u32,
    /// The windows' free GPUs (the least of them, baseline included) and those above the
    /// baseline.
    pub expected_free_gpus: u32,
    pub above_baseline: u32,
    pub confidence: f64,
    /// Σ hours × GPUs above the baseline over its windows, per week (day).
    pub gpu_hours: u64,
    /// The first slot of each of its windows ([`Window::start_slot`]).
    pub start_slots: Vec<usize>,
    /// Its windows' peaks (≥ K more GPUs free for ≥ `min_hours` inside them).
    pub peaks: Vec<PeakEvidence>,
    /// `CRON_TZ=<tz> M H * * DOW` at the start and at the end.
    pub cron_start: String,
    pub cron_end: String,
    /// `OnCalendar=<days> *-*-* HH:MM:00 <tz>` at the start and at the end.
    pub systemd_start: String,
    pub systemd_end: String,
}

/// The schedule: the entries that are findings (by start) and those the cap left out.
#[derive(Debug, Clone, Default)]
pub struct Schedule {
    pub entries: Vec<ScheduleEntry>,
    pub left_out: Vec<ScheduleEntry>,
}

/// `Sat 15:00–Sun 15:00`, `Mon 20:00–Tue 03:00`, `Mon 08:00–12:00` (weekly), `20:00–03:00`
/// (daily): one span of `hours` from `start_slot`, naming the day it ends on when that is
/// another.
pub fn span_label(start_slot: usize, hours: usize, weekly: bool) -> String {
    let h0 = start_slot % 24;
    let end_h = (h0 + hours) % 24;
    if !weekly {
        return format!("{h0:02}:00–{end_h:02}:00");
    }
    let d0 = DAYS[start_slot / 24 % 7];
    let d1 = DAYS[(start_slot + hours) % 168 / 24 % 7];
    if h0 + hours > 24 {
        format!("{d0} {h0:02}:00–{d1} {end_h:02}:00")
    } else {
        format!("{d0} {h0:02}:00–{end_h:02}:00")
    }
}

/// A window group's label: `every day 22:00–06:00`, else its start days and, when it ends on
/// other days (over a day, or one start day crossing midnight), its end days.
fn window_label(
    h0: usize,
    len: u32,
    start: &str,
    end: &str,
    (start_days, end_days): (&BTreeSet<usize>, &BTreeSet<usize>),
    weekly: bool,
) -> String {
    let day_shift = (h0 + len as usize) / 24;
    if !weekly {
        format!("every day {start}–{end}")
    } else if day_shift >= 2 || len >= 24 || (day_shift == 1 && start_days.len() == 1) {
        format!(
            "{} {start}–{} {end}",
            days_label(start_days),
            days_label(end_days)
        )
    } else {
        format!("{} {start}–{end}", days_label(start_days))
    }
}

/// The evidence of each window of a group that has a peak: when it is, its expected free GPUs
/// and its confidence.
fn peak_evidence(ws: &[&Window], weekly: bool) -> Vec<PeakEvidence> {
    ws.iter()
        .filter_map(|w| w.peak.as_ref())
        .map(|p| PeakEvidence {
            label: span_label(p.start_slot, p.hours as usize, weekly),
            day: weekly.then(|| DAYS[p.start_slot / 24 % 7]),
            start: format!("{:02}:00", p.start_slot % 24),
            end: format!("{:02}:00", (p.start_slot + p.hours as usize) % 24),
            hours: p.hours,
            expected_free_gpus: p.expected_free_gpus,
            confidence: crate::advisor::r3(p.confidence),
        })
        .collect()
}

/// Groups the profile's windows into schedule entries and keeps the [`MAX_WINDOW_FINDINGS`]
/// adding the most GPU-hours above the baseline (ties: the earlier), each set by start.
pub fn schedule(profile: &Profile, tz: &str) -> Schedule {
    let weekly = profile.period == "week";
    let nslots = profile.nslots();
    let mut groups: BTreeMap<(usize, u32), Vec<&Window>> = BTreeMap::new();
    for w in &profile.windows {
        groups
            .entry((w.start_slot % 24, w.hours))
            .or_default()
            .push(w);
    }
    let mut entries: Vec<(usize, ScheduleEntry)> = Vec::new();
    for ((h0, len), ws) in groups {
        let end_h = (h0 + len as usize) % 24;
        let start_days: BTreeSet<usize> = ws.iter().map(|w| w.start_slot / 24 % 7).collect();
        let end_days: BTreeSet<usize> = ws
            .iter()
            .map(|w| (w.start_slot + w.hours as usize) % nslots / 24 % 7)
            .collect();
        let cron_days = |days: &BTreeSet<usize>| -> String {
            if weekly {
                days.iter()
                    .map(|&d| cron_dow(d).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                "*".into()
            }
        };
        let on_calendar = |days: &BTreeSet<usize>, h: usize| -> String {
            let d = if weekly {
                format!("{} ", systemd_days(days))
            } else {
                String::new()
            };
            format!("OnCalendar={d}*-*-* {h:02}:00:00 {tz}")
        };
        let (start, end) = (format!("{h0:02}:00"), format!("{end_h:02}:00"));
        let label = window_label(h0, len, &start, &end, (&start_days, &end_days), weekly);
        let first = ws.iter().map(|w| w.start_slot).min().unwrap_or(0);
        let peaks = peak_evidence(&ws, weekly);
        entries.push((
            first,
            ScheduleEntry {
                tier: 0,
                days: if weekly {
                    start_days.iter().map(|&d| DAYS[d]).collect()
                } else {
                    Vec::new()
                },
                end_days: if weekly {
                    end_days.iter().map(|&d| DAYS[d]).collect()
                } else {
                    Vec::new()
                },
                label,
                start,
                end,
                hours: len,
                expected_free_gpus: ws.iter().map(|w| w.expected_free_gpus).min().unwrap_or(0),
                above_baseline: ws.iter().map(|w| w.above_baseline).min().unwrap_or(0),
                confidence: ws.iter().map(|w| w.confidence).fold(1.0, f64::min),
                gpu_hours: ws
                    .iter()
                    .map(|w| u64::from(w.hours) * u64::from(w.above_baseline))
                    .sum(),
                start_slots: ws.iter().map(|w| w.start_slot).collect(),
                peaks,
                cron_start: format!("CRON_TZ={tz} 0 {h0} * * {}", cron_days(&start_days)),
                cron_end: format!("CRON_TZ={tz} 0 {end_h} * * {}", cron_days(&end_days)),
                systemd_start: on_calendar(&start_days, h0),
                systemd_end: on_calendar(&end_days, end_h),
            },
        ));
    }
    // The cap: the entries adding the most GPU-hours (ties: the earlier one).
    entries.sort_by(|a, b| b.1.gpu_hours.cmp(&a.1.gpu_hours).then(a.0.cmp(&b.0)));
    let mut left: Vec<(usize, ScheduleEntry)> =
        entries.split_off(entries.len().min(MAX_WINDOW_FINDINGS));
    entries.sort_by_key(|(first, _)| *first);
    left.sort_by_key(|(first, _)| *first);
    let levels: BTreeSet<u32> = entries.iter().map(|(_, e)| e.expected_free_gpus).collect();
    let mut entries: Vec<ScheduleEntry> = entries.into_iter().map(|(_, e)| e).collect();
    for e in &mut entries {
        e.tier = levels.iter().filter(|&&l| l < e.expected_free_gpus).count() + 1;
    }
    Schedule {
        entries,
        left_out: left.into_iter().map(|(_, e)| e).collect(),
    }
}
