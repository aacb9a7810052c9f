//! The off-peak schedule: each tier's windows with the same local start hour and length grouped
//! into one [`ScheduleEntry`] (one finding), with cron lines and systemd `OnCalendar=`
//! expressions at the start and the end.
//!
//! Pure over a [`Profile`]. This module does not find windows (that is `profile`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::DAYS;
use super::profile::{Profile, Window};

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

/// One tier's windows with the same local start hour and length, grouped: one finding.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleEntry {
    /// 1-based index of the tier in [`Profile::tiers`].
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
    /// The tier's free GPUs (baseline included) and those above the baseline.
    pub expected_free_gpus: u32,
    pub above_baseline: u32,
    pub confidence: f64,
    /// `CRON_TZ=<tz> M H * * DOW` at the start and at the end.
    pub cron_start: String,
    pub cron_end: String,
    /// `OnCalendar=<days> *-*-* HH:MM:00 <tz>` at the start and at the end.
    pub systemd_start: String,
    pub systemd_end: String,
}

/// Groups each tier's windows into schedule entries (tiers lowest level first, then by start).
pub fn schedule(profile: &Profile, tz: &str) -> Vec<ScheduleEntry> {
    let weekly = profile.period == "week";
    let nslots = profile.nslots();
    let mut out = Vec::new();
    for (ti, tier) in profile.tiers.iter().enumerate() {
        let mut groups: BTreeMap<(usize, u32), Vec<&Window>> = BTreeMap::new();
        for w in &tier.windows {
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
            let day_shift = (h0 + len as usize) / 24;
            let label = if !weekly {
                format!("every day {start}–{end}")
            } else if day_shift >= 2 || len >= 24 {
                format!(
                    "{} {start}–{} {end}",
                    days_label(&start_days),
                    days_label(&end_days)
                )
            } else {
                format!("{} {start}–{end}", days_label(&start_days))
            };
            let first = ws.iter().map(|w| w.start_slot).min().unwrap_or(0);
            entries.push((
                first,
                ScheduleEntry {
                    tier: ti + 1,
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
                    cron_start: format!("CRON_TZ={tz} 0 {h0} * * {}", cron_days(&start_days)),
                    cron_end: format!("CRON_TZ={tz} 0 {end_h} * * {}", cron_days(&end_days)),
                    systemd_start: on_calendar(&start_days, h0),
                    systemd_end: on_calendar(&end_days, end_h),
                },
            ));
        }
        entries.sort_by_key(|(first, _)| *first);
        out.extend(entries.into_iter().map(|(_, e)| e));
    }
    out
}
