//! The queue plan (docs/queues.md): team quotas from measured demand and the off-peak windows
//! as numbers a batch scheduler's queues enforce, written as the `queues` section of tessera's
//! one plan file ([`tessera_core::mig::plan_queues`]).
//!
//! **Team quotas.** A team is a namespace; its demand of a GPU model in an hour is the whole GPUs
//! it held by allocation at some point of the hour ([`demand`]), 0 in an observed hour in which
//! it held none (hours are the off-peak profile's observations: rows covering at least half of
//! the hour). Over the observed hours, with nearest-rank quantiles ([`crate::stats`]):
//! - its **class** is `serving` when it held GPUs in ≥ `serving_share` of the hours, else
//!   `job-like` (or as the user sets it);
//! - a serving team's **guarantee** is the `guarantee_quantile` of its demand (what it holds in
//!   all but that share of hours: its always-on demand); a job-like team's is 0;
//! - every team's **limit** is the `limit_quantile` of its demand, at least its guarantee, at most
//!   the model's GPUs;
//! - when a model's guarantees add up to more than its GPUs, the largest are lowered one GPU at a
//!   time (ties: the later team by name) until they fit, and a note says so.
//!
//! **Off-peak windows.** The off-peak profile's windows ([`crate::advisor::offpeak`]), each at the
//! level per GPU model that holds over all its hours (the least of the slots' free GPUs at P),
//! grouped by start, length and GPUs into weekly lines; the **floor** outside windows is each
//! model's baseline (free at every hour). **End of window** is the user's choice, `finish` (no
//! work lost) by default.
//!
//! Pure over frames and values: no I/O, no clock. Writing the file and printing are the
//! command's; applying it to Kueue or Volcano is [`apply`] over [`objects`].

pub mod apply;
pub mod clock;
pub mod demand;
pub mod kueue;
pub mod objects;
mod render;
pub mod replay;
pub mod slurm;
pub mod slurm_apply;
pub mod slurm_reservations;
pub mod volcano;

use std::collections::{BTreeMap, BTreeSet};

use chrono_tz::Tz;
use tessera_core::mig::plan_queues::{
    DAYS, DemandClass, EndOfWindow, MeasuredDemand, ModelGpus, ModelQuota, OffpeakQueue, QueuePlan,
    QueueRules, QueueWindow, TeamQueue,
};

pub use demand::{TeamDemand, team_demand};
pub use render::{json, replay_sections, table};

use crate::advisor::offpeak::{FreeGpus, OffpeakParams, Profile};
use crate::frames::Frames;

/// Errors of the queue plan.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("reading the rows: {0}")]
    Polars(#[from] polars::prelude::PolarsError),
    #[error("finding the free hours: {0}")]
    Advisor(#[from] crate::advisor::AdvisorError),
    #[error(
        "no allocation in the data: the rows say nothing about which pods hold the GPUs (holders), so there is no team demand to plan quotas from (docs/queues.md)"
    )]
    NoHolders,
    #[error("no observed hour in the range: nothing to plan from")]
    NoHours,
}

/// How the plan is made.
#[derive(Debug, Clone)]
pub struct QueueParams {
    pub rules: QueueRules,
    /// Classes set by hand, by team.
    pub classes: BTreeMap<String, DemandClass>,
    pub cohort: String,
    pub offpeak_queue: String,
    pub end: EndOfWindow,
    pub offpeak: OffpeakParams,
    pub tz: Tz,
    /// Slurm job id → account: the team of the GPUs a job holds (none: Slurm-held GPUs count
    /// for no team).
    pub accounts: BTreeMap<String, String>,
}

impl Default for QueueParams {
    fn default() -> QueueParams {
        QueueParams {
            rules: QueueRules {
                guarantee_quantile: 0.05,
                limit_quantile: 0.95,
                serving_share: 0.9,
            },
            classes: BTreeMap::new(),
            cohort: "tessera".into(),
            offpeak_queue: "tessera-offpeak".into(),
            end: EndOfWindow::Finish,
            offpeak: OffpeakParams::default(),
            tz: Tz::UTC,
            accounts: BTreeMap::new(),
        }
    }
}

/// The plan and what it could not plan.
#[derive(Debug, Clone)]
pub struct QueueOutcome {
    pub plan: QueuePlan,
    pub notes: Vec<String>,
}

/// Plans over `parts` (one node partition at a time).
pub fn run(parts: &[&Frames], p: &QueueParams) -> Result<QueueOutcome, QueueError> {
    let (free, demand) = measure(parts, &p.offpeak, &p.accounts)?;
    let params = crate::advisor::Params {
        tz: p.tz,
        offpeak: p.offpeak.clone(),
        ..crate::advisor::Params::default()
    };
    let profile = crate::advisor::offpeak::profile(&free, &params);
    plan(&demand, &free, &profile, p)
}

/// Replays a queue plan over `parts` (docs/queues.md, "Replay"): the teams' demand in the
/// range's observed hours against the plan's quotas and windows; the GPUs per model are the
/// replayed data's; `accounts` as in [`QueueParams::accounts`].
pub fn replay_parts(
    parts: &[&Frames],
    plan: &QueuePlan,
    range: (String, String),
    accounts: &BTreeMap<String, String>,
) -> Result<replay::QueueReplay, QueueError> {
    let (free, demand) = measure(parts, &OffpeakParams::default(), accounts)?;
    let (hours, capacity) = hours_and_capacity(&demand, &free)?;
    Ok(replay::replay(plan, &demand, &hours, &capacity, range))
}

/// The fleet's free GPUs per hour and the teams' demand over `parts`, one partition at a time.
fn measure(
    parts: &[&Frames],
    offpeak: &OffpeakParams,
    accounts: &BTreeMap<String, String>,
) -> Result<(FreeGpus, TeamDemand), QueueError> {
    let mut free = FreeGpus::default();
    let mut demand = TeamDemand::default();
    for f in parts {
        free.merge(crate::advisor::offpeak::free_gpus_per_hour(f, offpeak)?);
        demand.merge(team_demand(f, accounts)?);
    }
    Ok((free, demand))
}

/// The observed hours (ascending) and the GPUs per model; an error when the data says nothing
/// about allocation or has no observed hour.
fn hours_and_capacity(
    demand: &TeamDemand,
    free: &FreeGpus,
) -> Result<(Vec<i64>, BTreeMap<String, u32>), QueueError> {
    if !demand.holders_known {
        return Err(QueueError::NoHolders);
    }
    let hours: Vec<i64> = free
        .cover
        .keys()
        .copied()
        .filter(|h| free.observed(*h))
        .collect();
    if hours.is_empty() {
        return Err(QueueError::NoHours);
    }
    let capacity = free
        .gpus
        .iter()
        .map(|(m, n)| (m.clone(), *n as u32))
        .collect();
    Ok((hours, capacity))
}

/// The plan from the merged demand, free hours and profile.
pub fn plan(
    demand: &TeamDemand,
    free: &FreeGpus,
    profile: &Profile,
    p: &QueueParams,
) -> Result<QueueOutcome, QueueError> {
    let (hours, capacity) = hours_and_capacity(demand, free)?;
    let mut notes = Vec::new();
    let mut teams = team_queues(demand, &hours, &capacity, p);
    fit_guarantees(&mut teams, &capacity, &mut notes);
    if !demand.mig_teams.is_empty() {
        notes.push(format!(
            "GPUs in MIG mode are left out (a quota of MIG slices is per MIG profile, not planned here); teams that held some: {}",
            demand.mig_teams.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    let offpeak = offpeak_queue(profile, &capacity, p);
    if offpeak.is_none() {
        notes.push("no off-peak window in the profile: no queue for deferred training".into());
    }
    let plan = QueuePlan {
        cohort: p.cohort.clone(),
        rules: p.rules,
        capacity: capacity
            .iter()
            .map(|(m, g)| ModelGpus {
                model: m.clone(),
                gpus: *g,
            })
            .collect(),
        teams,
        offpeak,
    };
    Ok(QueueOutcome { plan, notes })
}

/// Nearest-rank quantile of whole GPUs.
fn quantile(v: &[u32], q: f64) -> u32 {
    let mut f: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
    crate::stats::quantile(&mut f, q).map_or(0, |x| x as u32)
}

/// Every team's class and quotas, before the guarantees are fitted to the fleet.
fn team_queues(
    demand: &TeamDemand,
    hours: &[i64],
    capacity: &BTreeMap<String, u32>,
    p: &QueueParams,
) -> Vec<TeamQueue> {
    let mut by_team: BTreeMap<&str, Vec<(&str, Vec<u32>)>> = BTreeMap::new();
    for ((team, model), held) in &demand.held {
        let series: Vec<u32> = hours
            .iter()
            .map(|h| held.get(h).copied().unwrap_or(0))
            .collect();
        by_team.entry(team).or_default().push((model, series));
    }
    let r = &p.rules;
    by_team
        .into_iter()
        .filter_map(|(team, models)| {
            let held_hours = (0..hours.len())
                .filter(|&i| models.iter().any(|(_, s)| s[i] > 0))
                .count();
            if held_hours == 0 {
                return None;
            }
            let held_share = held_hours as f64 / hours.len() as f64;
            let class = p
                .classes
                .get(team)
                .copied()
                .unwrap_or(if held_share >= r.serving_share {
                    DemandClass::Serving
                } else {
                    DemandClass::JobLike
                });
            let quotas = models
                .into_iter()
                .map(|(model, s)| {
                    let cap = capacity.get(model).copied().unwrap_or(0);
                    let measured = MeasuredDemand {
                        hours: s.len() as u64,
                        held_share: crate::advisor::r3(
                            s.iter().filter(|&&x| x > 0).count() as f64 / s.len() as f64,
                        ),
                        q_guarantee: quantile(&s, r.guarantee_quantile),
                        median: quantile(&s, 0.5),
                        q_limit: quantile(&s, r.limit_quantile),
                        max: s.iter().copied().max().unwrap_or(0),
                    };
                    let guarantee = match class {
                        DemandClass::Serving => measured.q_guarantee.min(cap),
                        DemandClass::JobLike => 0,
                    };
                    ModelQuota {
                        model: model.to_string(),
                        guarantee,
                        limit: measured.q_limit.max(guarantee).min(cap),
                        measured: Some(measured),
                    }
                })
                .collect();
            Some(TeamQueue {
                team: team.to_string(),
                class,
                quotas,
            })
        })
        .collect()
}

/// Lowers the largest guarantees of a model, one GPU at a time, until they fit its GPUs.
fn fit_guarantees(
    teams: &mut [TeamQueue],
    capacity: &BTreeMap<String, u32>,
    notes: &mut Vec<String>,
) {
    for (model, cap) in capacity {
        let total = |teams: &[TeamQueue]| -> u32 {
            teams
                .iter()
                .flat_map(|t| &t.quotas)
                .filter(|q| &q.model == model)
                .map(|q| q.guarantee)
                .sum()
        };
        let before = total(teams);
        if before <= *cap {
            continue;
        }
        while total(teams) > *cap {
            let Some(q) = teams
                .iter_mut()
                .flat_map(|t| t.quotas.iter_mut())
                .filter(|q| &q.model == model)
                .max_by_key(|q| q.guarantee)
            else {
                break;
            };
            q.guarantee -= 1;
        }
        notes.push(format!(
            "{model}: the guarantees added up to {before} GPUs, more than the fleet's {cap}: the largest were lowered until they fit"
        ));
    }
}

/// The deferred-training queue from the profile's windows, or none without windows.
fn offpeak_queue(
    profile: &Profile,
    capacity: &BTreeMap<String, u32>,
    p: &QueueParams,
) -> Option<OffpeakQueue> {
    let n = profile.nslots();
    let weekly = profile.period == "week";
    let mut lines: Vec<QueueWindow> = Vec::new();
    for w in &profile.windows {
        let gpus: Vec<ModelGpus> = capacity
            .keys()
            .filter_map(|m| {
                let level = (0..w.hours as usize)
                    .map(|i| {
                        let slot = &profile.slots[(w.start_slot + i) % n];
                        slot.free_at_p_by_model.get(m).copied().unwrap_or(0)
                    })
                    .min()
                    .unwrap_or(0);
                (level > 0).then(|| ModelGpus {
                    model: m.clone(),
                    gpus: level,
                })
            })
            .collect();
        if gpus.is_empty() {
            continue;
        }
        let start = format!("{:02}:00", w.start_slot % 24);
        let day = weekly.then(|| DAYS[w.start_slot / 24 % 7].to_string());
        match lines
            .iter_mut()
            .find(|l| l.start == start && l.hours == w.hours && l.gpus == gpus)
        {
            Some(l) => l.days.extend(day),
            None => lines.push(QueueWindow {
                days: day.into_iter().collect(),
                start,
                hours: w.hours,
                gpus,
            }),
        }
    }
    if lines.is_empty() {
        return None;
    }
    let order: BTreeMap<&str, usize> = DAYS.iter().enumerate().map(|(i, d)| (*d, i)).collect();
    for l in &mut lines {
        let days: BTreeSet<usize> = l.days.iter().map(|d| order[d.as_str()]).collect();
        l.days = days.into_iter().map(|i| DAYS[i].to_string()).collect();
    }
    // The floor by model name, as the capacity and the windows list models.
    let floor: BTreeMap<&str, u32> = profile
        .baseline
        .by_model
        .iter()
        .filter(|m| m.gpus > 0 && capacity.contains_key(&m.model))
        .map(|m| (m.model.as_str(), m.gpus))
        .collect();
    Some(OffpeakQueue {
        queue: p.offpeak_queue.clone(),
        timezone: p.tz.name().to_string(),
        floor: floor
            .into_iter()
            .map(|(model, gpus)| ModelGpus {
                model: model.to_string(),
                gpus,
            })
            .collect(),
        windows: lines,
        end: p.end,
    })
}

#[cfg(test)]
mod tests;
