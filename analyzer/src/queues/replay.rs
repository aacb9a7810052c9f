//! A queue plan replayed against history (docs/queues.md, "Replay"): each team's measured
//! demand per hour and model run through its plan's quotas.
//!
//! Per observed hour and GPU model: a team's demand above its limit **waits** (GPU-hours, and the
//! longest run of consecutive hours with waiting work). Waiting GPU-hours are admitted, oldest
//! first (teams in plan order), into the off-peak windows' hours that follow, up to each window
//! hour's GPUs of that model: **admitted into windows**; the rest is still waiting at the range's
//! end. A team's guaranteed part is `min(demand, guarantee)`; when the teams' guaranteed parts
//! and the deferred work the windows took in that hour add up to more than the model's GPUs in
//! the replayed data, the hour is a **guarantee that does not fit** (a window that promised GPUs
//! serving needed). Measured demand is what ran, so demand below the limit is admitted from the
//! cohort's unused guarantees.
//!
//! Verdict: `unsafe` with any guarantee that does not fit, `tight` with waiting work the windows
//! did not take, else `safe`. Pure: no I/O, no clock.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tessera_core::mig::plan_queues::{OffpeakQueue, QueuePlan};

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

/// The UTC hours (index since the epoch) inside the plan's windows, between `first` and `last`,
/// each with the index of its window line (the first line, where lines overlap).
pub fn window_hours(o: &OffpeakQueue, first: i64, last: i64) -> BTreeMap<i64, usize> {
    let mut out = BTreeMap::new();
    let Ok(tz) = super::clock::zone(o) else {
        return out;
    };
    let to_utc = |h: i64| DateTime::<Utc>::from_timestamp_millis(h * HOUR_MS);
    let (Some(a), Some(b)) = (to_utc(first), to_utc(last + 1)) else {
        return out;
    };
    for w in super::clock::openings(o, tz, a, b) {
        let s = w.start.timestamp_millis().div_euclid(HOUR_MS);
        for h in s..s + (w.end - w.start).num_hours() {
            if (first..=last).contains(&h) {
                out.entry(h).or_insert(w.line);
            }
        }
    }
    out
}

/// A team's demand of a model per hour of `hours` (0 where it held none).
fn series(demand: &TeamDemand, hours: &[i64], team: &str, model: &str) -> Vec<u32> {
    let held = demand.held.get(&(team.to_string(), model.to_string()));
    hours
        .iter()
        .map(|h| held.and_then(|m| m.get(h)).copied().unwrap_or(0))
        .collect()
}

/// The hours of `model` whose teams' guaranteed parts, with the deferred work the windows took
/// in that hour (`window_used`), add up to more than its `cap` GPUs.
fn misfits_of(
    plan: &QueuePlan,
    demand: &TeamDemand,
    hours: &[i64],
    (model, cap): (&str, u32),
    window_used: &dyn Fn(i64) -> u32,
) -> Vec<Misfit> {
    let mut guaranteed: Vec<u32> = hours.iter().map(|h| window_used(*h)).collect();
    for t in &plan.teams {
        for q in t.quotas.iter().filter(|q| q.model == model) {
            let s = series(demand, hours, &t.team, model);
            for (g, d) in guaranteed.iter_mut().zip(s) {
                *g += d.min(q.guarantee);
            }
        }
    }
    guaranteed
        .iter()
        .enumerate()
        .filter(|(_, g)| **g > cap)
        .map(|(i, g)| Misfit {
            hour: crate::times::fmt_ms(hours[i] * HOUR_MS),
            model: model.to_string(),
            guaranteed: *g,
            gpus: cap,
        })
        .collect()
}

/// One team's waits for one model, taking window capacity from `left` (model, hour) oldest
/// wait first.
fn team_replay(
    team: &str,
    q: &tessera_core::mig::plan_queues::ModelQuota,
    s: &[u32],
    hours: &[i64],
    in_window: &BTreeMap<i64, usize>,
    left: &mut BTreeMap<(String, i64), u32>,
) -> TeamReplay {
    let mut r = TeamReplay {
        team: team.to_string(),
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
        // This hour's wait into the first window hours after it.
        let mut rest = wait;
        for (h, _) in in_window.range(hours[i] + 1..) {
            if rest == 0 {
                break;
            }
            if let Some(g) = left.get_mut(&(q.model.clone(), *h)) {
                let take = rest.min(*g);
                *g -= take;
                rest -= take;
                r.admitted_in_windows_gpu_hours += u64::from(take);
            }
        }
        r.still_waiting_gpu_hours += u64::from(rest);
    }
    r
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
    let in_window = match (&plan.offpeak, hours.first(), hours.last()) {
        (Some(o), Some(&a), Some(&b)) => window_hours(o, a, b),
        _ => BTreeMap::new(),
    };
    let models: BTreeSet<&str> = plan
        .teams
        .iter()
        .flat_map(|t| t.quotas.iter().map(|q| q.model.as_str()))
        .collect();
    // Window capacity left per model and hour, taken by the teams in plan order.
    let mut left: BTreeMap<(String, i64), u32> = BTreeMap::new();
    let mut window_gpu_hours: BTreeMap<String, u64> = BTreeMap::new();
    if let Some(o) = &plan.offpeak {
        for model in &models {
            for (h, line) in &in_window {
                let g = o.windows[*line]
                    .gpus
                    .iter()
                    .find(|g| g.model == *model)
                    .map_or(0, |g| g.gpus);
                left.insert((model.to_string(), *h), g);
                if g > 0 {
                    *window_gpu_hours.entry(model.to_string()).or_default() += u64::from(g);
                }
            }
        }
    }
    let offered = left.clone();
    let mut teams = Vec::new();
    for t in &plan.teams {
        for q in &t.quotas {
            let s = series(demand, hours, &t.team, &q.model);
            teams.push(team_replay(&t.team, q, &s, hours, &in_window, &mut left));
        }
    }
    let misfits: Vec<Misfit> = models
        .iter()
        .flat_map(|m| {
            let used = |h: i64| {
                let k = (m.to_string(), h);
                offered.get(&k).copied().unwrap_or(0) - left.get(&k).copied().unwrap_or(0)
            };
            let cap = capacity.get(*m).copied().unwrap_or(0);
            misfits_of(plan, demand, hours, (m, cap), &used)
        })
        .collect();
    let mut notes = Vec::new();
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
        let got: BTreeSet<i64> =
            window_hours(&o, h("2026-10-24T00:00:00Z"), h("2026-10-26T23:00:00Z"))
                .into_keys()
                .collect();
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
