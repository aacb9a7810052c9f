//! Equal periods around a change and their usage: [`windows`] (pure: the longest period that
//! fits on both sides, outside the settling margin and the neighbouring changes, in whole
//! hours) and the sums over the rows of both periods per fleet, node and team (each
//! partition's sums per whole hour kept by the change scan, `part::tally`, added up for every
//! change's periods by [`sum_all`]; [`Acc::finish`] rounds and prices, pure).
//!
//! The rules are the report's: a row is in use when it holds ≥ 1 GiB or its activity is above
//! 5%; activity is SM activity, else the busy ratio; energy is the counter's, else mean power ×
//! interval; a GPU's row is split evenly between the processes on it for the teams. It detects
//! nothing ([`super::detect`]).

use std::collections::{BTreeMap, BTreeSet};

mod part;
#[cfg(test)]
mod tests;

pub use part::PartHours;
pub(super) use part::{Rows, sum_all, tally};

use super::ChangeRequest;
use super::model::{
    Comparison, KeyedPeriods, PeriodDelta, PeriodUsage, Side, TeamPeriods, TeamUsage, WorkVerdict,
};
use crate::times::fmt_ms;

const GIB: f64 = (1u64 << 30) as f64;
pub(super) const HOUR_MS: f64 = 3_600_000.0;
/// In use: at least this much memory held, or more than [`BUSY`] activity (the report's rule).
const HELD: f64 = GIB;
const BUSY: f64 = 0.05;

/// The two compared periods: rows ending in `(before.0, before.1]` and `(after.0, after.1]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub before: (i64, i64),
    pub after: (i64, i64),
}

impl Window {
    /// Length of each period, ms.
    pub fn len_ms(&self) -> i64 {
        self.before.1 - self.before.0
    }

    /// 0 for a row ending in the period before, 1 after, `None` outside both.
    fn side(&self, ts: i64) -> Option<usize> {
        if ts > self.before.0 && ts <= self.before.1 {
            Some(0)
        } else if ts > self.after.0 && ts <= self.after.1 {
            Some(1)
        } else {
            None
        }
    }
}

/// The equal periods around a change at `at`: each ends (before) or starts (after) at least
/// `settle` away from it, on whole hours (the sums are kept per hour: `part::tally`), inside
/// the range `(since, until]` and `settle` away from the neighbouring changes `prev` and `next`,
/// as long as the shorter side allows. `None` when not a whole hour, or less than a row of
/// `interval` ms, fits on one side.
pub fn windows(
    at: i64,
    (since, until): (i64, i64),
    prev: Option<i64>,
    next: Option<i64>,
    settle: i64,
    interval: i64,
) -> Option<Window> {
    const H: i64 = HOUR_MS as i64;
    let floor = |t: i64| t.div_euclid(H) * H;
    let ceil = |t: i64| -(-t).div_euclid(H) * H;
    let lo = ceil(prev.map_or(since, |p| since.max(p + settle)));
    let hi = floor(next.map_or(until, |n| until.min(n - settle)));
    let (end, start) = (floor(at - settle), ceil(at + settle));
    let len = (end - lo).min(hi - start);
    (len >= H && len >= interval).then_some(Window {
        before: (end - len, end),
        after: (start, start + len),
    })
}

/// One GPU row's hours, activity and energy (J), for the teams' split.
type RowFigures = (f64, Option<f64>, Option<f64>);

/// One period's sums; `G` names the GPUs counted (labels in [`Acc`], a partition's label ids
/// in [`PartAcc`]).
#[derive(Clone, Default)]
struct Sum<G> {
    gpus: BTreeSet<G>,
    observed: f64,
    in_use: f64,
    busy: f64,
    /// Hours of rows with activity, and with memory or activity: without any, busy (resp. in
    /// use) is unknown, not 0.
    act_h: f64,
    use_h: f64,
    energy: Option<f64>,
}

impl<G> Sum<G> {
    /// Adds `from`'s hours and energy (not its GPUs), in one fixed order.
    fn add_figures<H>(&mut self, from: &Sum<H>) {
        self.observed += from.observed;
        self.in_use += from.in_use;
        self.busy += from.busy;
        self.act_h += from.act_h;
        self.use_h += from.use_h;
        if let Some(e) = from.energy {
            *self.energy.get_or_insert(0.0) += e;
        }
    }
}

/// One team's sums in one period; `P` names its processes as `G` does GPUs.
#[derive(Clone, Default)]
struct TeamSum<P> {
    processes: BTreeSet<P>,
    gpu_hours: f64,
    /// Σ activity × share; `None` while no row of the team's GPUs had activity.
    busy: Option<f64>,
    energy: Option<f64>,
}

impl<P: Ord> TeamSum<P> {
    /// Adds `from`'s figures, its processes named by `name`.
    fn add<Q>(&mut self, from: &TeamSum<Q>, name: impl Fn(&Q) -> P) {
        self.processes.extend(from.processes.iter().map(name));
        self.gpu_hours += from.gpu_hours;
        for (to, x) in [(&mut self.busy, from.busy), (&mut self.energy, from.energy)] {
            if let Some(x) = x {
                *to.get_or_insert(0.0) += x;
            }
        }
    }
}

/// The sums of both periods of one change, over every partition.
pub(super) struct Acc {
    fleet: [Sum<String>; 2],
    nodes: BTreeMap<String, [Sum<String>; 2]>,
    teams: BTreeMap<String, [TeamSum<String>; 2]>,
}

impl Acc {
    pub(super) fn new() -> Acc {
        Acc {
            fleet: Default::default(),
            nodes: BTreeMap::new(),
            teams: BTreeMap::new(),
        }
    }

    /// Adds one partition's sums (partitions in order: the output does not depend on which
    /// worker read which).
    fn merge(&mut self, p: PartAcc, labels: &[String], keys: &[String]) {
        fn sum(into: &mut Sum<String>, from: Sum<u32>, labels: &[String]) {
            into.add_figures(&from);
            into.gpus
                .extend(from.gpus.into_iter().map(|g| labels[g as usize].clone()));
        }
        for (side, s) in p.fleet.into_iter().enumerate() {
            sum(&mut self.fleet[side], s, labels);
        }
        for (node, sides) in p.nodes {
            let into = self.nodes.entry(node).or_default();
            for (side, s) in sides.into_iter().enumerate() {
                sum(&mut into[side], s, labels);
            }
        }
        for (team, sides) in p.teams {
            let into = self.teams.entry(team).or_default();
            for (side, t) in sides.iter().enumerate() {
                into[side].add(t, |k| keys[*k as usize].clone());
            }
        }
    }
}

/// One partition's sums of both periods of one change, its GPUs and processes by id.
#[derive(Default)]
struct PartAcc {
    fleet: [Sum<u32>; 2],
    nodes: BTreeMap<String, [Sum<u32>; 2]>,
    teams: BTreeMap<String, [TeamSum<u32>; 2]>,
}

fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn usage(s: &Sum<String>, hours: f64, req: &ChangeRequest) -> PeriodUsage {
    let kwh = s.energy.map(|j| r3(j / 3.6e6));
    let in_use = (s.use_h > 0.0).then_some(s.in_use);
    let busy = (s.act_h > 0.0).then_some(s.busy);
    let cost_gpu_hours = in_use.map(|u| r2(u * req.gpu_hour));
    let cost_energy = kwh.map(|k| r2(k * req.kwh));
    let observed = (s.observed > 0.0).then_some(s.observed);
    PeriodUsage {
        gpus: s.gpus.len(),
        gpus_in_use: in_use.filter(|_| hours > 0.0).map(|u| r3(u / hours)),
        gpu_hours_observed: r3(s.observed),
        gpu_hours_in_use: in_use.map(r3),
        gpu_hours_busy: busy.map(r3),
        gpu_hours_idle: in_use.zip(busy).map(|(u, b)| r3((u - b).max(0.0))),
        gpu_hours_free: in_use.map(|u| r3((s.observed - u).max(0.0))),
        allocation_utilization: in_use.zip(observed).map(|(u, o)| r3(u / o)),
        work_utilization: busy.zip(observed).map(|(b, o)| r3(b / o)),
        energy_kwh: kwh,
        cost_gpu_hours,
        cost_energy,
        cost_total: (cost_gpu_hours.is_some() || cost_energy.is_some())
            .then(|| r2(cost_gpu_hours.unwrap_or(0.0) + cost_energy.unwrap_or(0.0))),
    }
}

/// `a − b` when both are known.
fn minus(a: Option<f64>, b: Option<f64>, round: fn(f64) -> f64) -> Option<f64> {
    a.zip(b).map(|(a, b)| round(a - b))
}

fn delta(b: &PeriodUsage, a: &PeriodUsage) -> PeriodDelta {
    PeriodDelta {
        gpus_in_use: minus(a.gpus_in_use, b.gpus_in_use, r3),
        gpu_hours_in_use: minus(a.gpu_hours_in_use, b.gpu_hours_in_use, r3),
        gpu_hours_busy: minus(a.gpu_hours_busy, b.gpu_hours_busy, r3),
        gpu_hours_idle: minus(a.gpu_hours_idle, b.gpu_hours_idle, r3),
        gpu_hours_free: minus(a.gpu_hours_free, b.gpu_hours_free, r3),
        energy_kwh: minus(a.energy_kwh, b.energy_kwh, r3),
        cost_total: minus(a.cost_total, b.cost_total, r2),
    }
}

fn keyed(key: &str, s: &[Sum<String>; 2], hours: f64, req: &ChangeRequest) -> KeyedPeriods {
    let (before, after) = (usage(&s[0], hours, req), usage(&s[1], hours, req));
    KeyedPeriods {
        key: key.to_string(),
        delta: delta(&before, &after),
        before,
        after,
    }
}

fn team(s: &TeamSum<String>, req: &ChangeRequest) -> TeamUsage {
    let kwh = s.energy.map(|j| r3(j / 3.6e6));
    TeamUsage {
        processes: s.processes.len(),
        gpu_hours: r3(s.gpu_hours),
        gpu_hours_busy: s.busy.map(r3),
        gpu_hours_idle: s.busy.map(|b| r3((s.gpu_hours - b).max(0.0))),
        energy_kwh: kwh,
        cost_total: r2(s.gpu_hours * req.gpu_hour + kwh.map_or(0.0, |k| k * req.kwh)),
    }
}

impl Acc {
    /// The comparison: both periods per fleet, node and team, rounded and priced.
    pub(super) fn finish(self, w: &Window, req: &ChangeRequest) -> Comparison {
        let hours = w.len_ms() as f64 / HOUR_MS;
        let mut c = Comparison {
            hours: r3(hours),
            before: Side {
                from: fmt_ms(w.before.0),
                until: fmt_ms(w.before.1),
            },
            after: Side {
                from: fmt_ms(w.after.0),
                until: fmt_ms(w.after.1),
            },
            fleet: keyed("fleet", &self.fleet, hours, req),
            by_node: self
                .nodes
                .iter()
                .map(|(k, s)| keyed(k, s, hours, req))
                .collect(),
            by_team: self
                .teams
                .iter()
                .map(|(k, s)| TeamPeriods {
                    team: k.clone(),
                    before: team(&s[0], req),
                    after: team(&s[1], req),
                })
                .collect(),
            predicted: None,
            work: None,
            work_per_gpu_hour: Vec::new(),
        };
        c.work = work_verdict(&c.fleet, &self.teams);
        c
    }
}

/// At most this many gone workloads are named.
const GONE_NAMED: usize = 20;

/// [`WorkVerdict`] of a comparison whose fleet work fell by more than 5%.
fn work_verdict(
    fleet: &KeyedPeriods,
    teams: &BTreeMap<String, [TeamSum<String>; 2]>,
) -> Option<WorkVerdict> {
    let (b, a) = (fleet.before.gpu_hours_busy?, fleet.after.gpu_hours_busy?);
    if b <= 0.0 || a >= b * 0.95 {
        return None;
    }
    let side = |k: usize| -> BTreeSet<&String> {
        teams.values().flat_map(|s| s[k].processes.iter()).collect()
    };
    let (before, after) = (side(0), side(1));
    let gone: Vec<String> = before.difference(&after).map(|s| s.to_string()).collect();
    let fell = format!(
        "GPU-hours of work fell {:.0}% ({b:.1} → {a:.1})",
        (b - a) / b * 100.0
    );
    let explanation = if gone.is_empty() {
        format!(
            "{fell}, but all {} workload(s) that ran before run after: the work moved, it was not lost. GPU-hours of work are whole GPUs' activity × time: a workload in a MIG instance counts only its instance's share of the GPU's SMs, so the same work reads as fewer.",
            before.len()
        )
    } else {
        format!(
            "{fell}, and {} of the {} workload(s) that ran before did not run after ({}{}): that work stopped or was lost, it did not only move.",
            gone.len(),
            before.len(),
            gone.iter()
                .take(GONE_NAMED)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            if gone.len() > GONE_NAMED { ", …" } else { "" }
        )
    };
    Some(WorkVerdict {
        verdict: if gone.is_empty() { "moved" } else { "lost" }.into(),
        workloads_before: before.len(),
        workloads_after: after.len(),
        gone_total: gone.len(),
        gone: gone.into_iter().take(GONE_NAMED).collect(),
        explanation,
    })
}
