//! A queue plan replayed against history (docs/queues.md, "Replay"): each team's measured
//! demand per hour and model run through its plan's quotas.
//!
//! Per observed hour and GPU model: a team's guaranteed part is `min(demand, guarantee)`; when
//! the teams' guaranteed parts add up to more than the model's GPUs in the replayed data, the
//! hour is a **guarantee that does not fit**. A team's demand above its limit **waits**
//! (GPU-hours, and the longest run of consecutive hours with waiting work). Waiting GPU-hours are
//! then admitted, oldest first, into the off-peak windows' hours that follow, up to each window
//! hour's GPUs of that model: **admitted into windows**; the rest is still waiting at the range's
//! end. Measured demand is what ran, so the model never asks for more GPUs than existed; demand
//! below the limit is admitted from the cohort's unused guarantees.
//!
//! Verdict: `unsafe` with any guarantee that does not fit, `tight` with waiting work the windows
//! did not take, else `safe`. Pure: no I/O, no clock.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Datelike, Duration, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::Serialize;
use tessera_core::mig::plan_queues::{DAYS, OffpeakQueue, QueuePlan};

use super::TeamDemand;

const HOUR_MS: i64 = 3_600_000;

/// The replay of a queue plan.
#[derive(Debug, Clone, Serialize)]
pub struct QueueReplay {
    pub version: u32,
    pub from: String,
    pub until: String,
    pub hours: usize,
    pub verdict: &'static str,
    pub teams: Vec<TeamReplay>,
    /// Hours (RFC 3339, the hour's start) in which the guarantees did not fit, with the model.
    pub guarantee_misfits: Vec<Misfit>,
    /// GPU-hours the windows offered over the range, per model.
    pub window_gpu_hours: BTreeMap<String, u64>,
    pub notes: Vec<String>,
}

/// One team's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TeamReplay {
    pub team: String,
    pub model: String,
    pub demand_gpu_hours: u64,
    pub waited_gpu_hours: u64,
    pub longest_wait_hours: u64,
    pub admitted_in_windows_gpu_hours: u64,
    pub still_waiting_gpu_hours: u64,
}

/// An hour whose guarantees did not fit.
#[derive(Debug, Clone, Serialize)]
pub struct Misfit {
    pub hour: String,
    pub model: String,
    pub guaranteed: u32,
    pub gpus: u32,
}

/// The UTC hours (index since the epoch) inside the plan's windows, between `first` and `last`.
pub fn window_hours(o: &OffpeakQueue, first: i64, last: i64) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    let Ok(tz) = o.timezone.parse::<Tz>() else {
        return out;
    };
    let to_utc = |h: i64| DateTime::<Utc>::from_timestamp_millis(h * HOUR_MS);
    let (Some(a), Some(b)) = (to_utc(first), to_utc(last)) else {
        return out;
    };
    // Windows that start up to a week before the range can reach into it.
    let mut day = a.with_timezone(&tz).date_naive() - Duration::days(7);
    let end = b.with_timezone(&tz).date_naive();
    while day <= end {
        let name = DAYS[day.weekday().num_days_from_monday() as usize];
        for w in &o.windows {
            if !(w.days.is_empty() || w.days.iter().any(|d| d == name)) {
                continue;
            }
            let Ok(t) = NaiveTime::parse_from_str(&w.start, "%H:%M") else {
                continue;
            };
            // A start in a skipped local hour (spring forward) is at the hour after it.
            let local = day.and_time(t);
            let start = tz.from_local_datetime(&local).earliest().or_else(|| {
                tz.from_local_datetime(&(local + Duration::hours(1)))
                    .earliest()
            });
            let Some(start) = start else { continue };
            let s = start.timestamp_millis().div_euclid(HOUR_MS);
            for h in s..s + i64::from(w.hours) {
                if (first..=last).contains(&h) {
                    out.insert(h);
                }
            }
        }
        day += Duration::days(1);
    }
    out
}

/// GPUs per model the window at hour `h` gives (the line that covers it; the most of them when
/// lines overlap).
fn window_gpus(o: &OffpeakQueue, model: &str) -> u32 {
    o.windows
        .iter()
        .flat_map(|w| &w.gpus)
        .filter(|g| g.model == model)
        .map(|g| g.gpus)
        .max()
        .unwrap_or(0)
}

/// Replays `plan` on the demand of `hours` (observed, ascending) with `capacity` GPUs per model
/// in the replayed data.
pub fn replay(
    plan: &QueuePlan,
    demand: &TeamDemand,
    hours: &[i64],
    capacity: &BTreeMap<String, u32>,
    range: (String, String),
) -> QueueReplay {
    let fmt = |h: i64| crate::times::fmt_ms(h * HOUR_MS);
    let mut notes = Vec::new();
    let in_window = match (&plan.offpeak, hours.first(), hours.last()) {
        (Some(o), Some(&a), Some(&b)) => window_hours(o, a, b),
        _ => BTreeSet::new(),
    };
    let series = |team: &str, model: &str| -> Vec<u32> {
        let held = demand.held.get(&(team.to_string(), model.to_string()));
        hours
            .iter()
            .map(|h| held.and_then(|m| m.get(h)).copied().unwrap_or(0))
            .collect()
    };
    let mut misfits = Vec::new();
    let models: BTreeSet<&str> = plan
        .teams
        .iter()
        .flat_map(|t| t.quotas.iter().map(|q| q.model.as_str()))
        .collect();
    for model in &models {
        let cap = capacity.get(*model).copied().unwrap_or(0);
        let guaranteed: Vec<u32> = plan
            .teams
            .iter()
            .flat_map(|t| {
                t.quotas
                    .iter()
                    .filter(|q| q.model == *model)
                    .map(move |q| (t, q))
            })
            .map(|(t, q)| {
                series(&t.team, model)
                    .into_iter()
                    .map(|d| d.min(q.guarantee))
                    .collect::<Vec<u32>>()
            })
            .fold(vec![0; hours.len()], |acc, s| {
                acc.iter().zip(s).map(|(a, b)| a + b).collect()
            });
        for (i, g) in guaranteed.iter().enumerate() {
            if *g > cap {
                misfits.push(Misfit {
                    hour: fmt(hours[i]),
                    model: model.to_string(),
                    guaranteed: *g,
                    gpus: cap,
                });
            }
        }
    }
    let mut teams = Vec::new();
    // Window capacity left per model and hour, taken oldest wait first across teams by name.
    let mut left: BTreeMap<(&str, i64), u32> = BTreeMap::new();
    if let Some(o) = &plan.offpeak {
        for model in &models {
            for h in &in_window {
                left.insert((model, *h), window_gpus(o, model));
            }
        }
    }
    let window_gpu_hours: BTreeMap<String, u64> = models
        .iter()
        .map(|m| {
            let n: u64 = left
                .iter()
                .filter(|((mm, _), _)| mm == m)
                .map(|(_, g)| u64::from(*g))
                .sum();
            (m.to_string(), n)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    for t in &plan.teams {
        for q in &t.quotas {
            let s = series(&t.team, &q.model);
            let mut r = TeamReplay {
                team: t.team.clone(),
                model: q.model.clone(),
                demand_gpu_hours: s.iter().map(|&d| u64::from(d)).sum(),
                waited_gpu_hours: 0,
                longest_wait_hours: 0,
                admitted_in_windows_gpu_hours: 0,
                still_waiting_gpu_hours: 0,
            };
            let mut run = 0u64;
            for (i, &d) in s.iter().enumerate() {
                let wait = d.saturating_sub(q.limit);
                if wait == 0 {
                    run = 0;
                    continue;
                }
                run += 1;
                r.longest_wait_hours = r.longest_wait_hours.max(run);
                r.waited_gpu_hours += u64::from(wait);
                // Oldest first: this hour's wait into the first window hours after it.
                let mut rest = wait;
                for h in in_window.range(hours[i] + 1..) {
                    if rest == 0 {
                        break;
                    }
                    if let Some(g) = left.get_mut(&(q.model.as_str(), *h)) {
                        let take = rest.min(*g);
                        *g -= take;
                        rest -= take;
                        r.admitted_in_windows_gpu_hours += u64::from(take);
                    }
                }
                r.still_waiting_gpu_hours += u64::from(rest);
            }
            teams.push(r);
        }
    }
    if plan.offpeak.is_none() {
        notes.push("the plan has no off-peak queue: waiting work has no window to go to".into());
    }
    let verdict = if !misfits.is_empty() {
        "unsafe"
    } else if teams.iter().any(|t| t.still_waiting_gpu_hours > 0) {
        "tight"
    } else {
        "safe"
    };
    QueueReplay {
        version: 1,
        from: range.0,
        until: range.1,
        hours: hours.len(),
        verdict,
        teams,
        guarantee_misfits: misfits,
        window_gpu_hours,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::mig::plan_queues::{EndOfWindow, ModelGpus, QueueWindow};

    #[test]
    fn windows_follow_local_time_across_a_daylight_saving_change() {
        // Europe/Berlin leaves summer time on Sunday 2026-10-25 (03:00 CEST → 02:00 CET).
        let o = OffpeakQueue {
            queue: "q".into(),
            timezone: "Europe/Berlin".into(),
            floor: vec![],
            windows: vec![QueueWindow {
                days: vec![],
                start: "18:00".into(),
                hours: 2,
                gpus: vec![ModelGpus {
                    model: "m".into(),
                    gpus: 1,
                }],
            }],
            end: EndOfWindow::Finish,
        };
        let h = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .unwrap()
                .timestamp_millis()
                / HOUR_MS
        };
        let got = window_hours(&o, h("2026-10-24T00:00:00Z"), h("2026-10-26T23:00:00Z"));
        let want: BTreeSet<i64> = [
            "2026-10-24T16:00:00Z", // 18:00 CEST
            "2026-10-24T17:00:00Z",
            "2026-10-25T17:00:00Z", // 18:00 CET
            "2026-10-25T18:00:00Z",
            "2026-10-26T17:00:00Z",
            "2026-10-26T18:00:00Z",
        ]
        .iter()
        .map(|s| h(s))
        .collect();
        assert_eq!(got, want);
    }
}
