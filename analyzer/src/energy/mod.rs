//! Energy per workload (`docs/report.md`, "Energy per workload"): one GPU's energy in one
//! interval split among the workloads that ran on it — its MIG instances and its processes — by
//! their share of the interval's activity, and what no workload explains kept as **idle**.
//!
//! [`split`] is the pure rule over one interval ([`Interval`] → [`Split`]); [`frames`] reads a
//! partition's rows into intervals and adds the splits up per key (a team, a Slurm job). The
//! invariant both keep: for every interval, Σ workloads + idle = the GPU's energy (up to one
//! rounding of the last addition), every share is finite and at least 0.
//!
//! The rule, for an interval with energy `E` (the row's `energy_delta_joules`, else mean power ×
//! interval):
//!
//! - **Outside MIG.** The GPU's activity `a` (its SM activity, else its busy ratio, else the sum
//!   of its processes' `sm_mean`, capped at 1) decides the workload part `E·a`; the rest,
//!   `E·(1 − a)`, is idle. The workload part goes to the processes by their `sm_mean` share;
//!   where no process has `sm_mean` above 0, equally to the processes holding memory, else equally
//!   to all of them. Without processes, or without any activity value, all of `E` is idle.
//! - **MIG.** Each instance with a process counts `s·c/C` of the GPU: its own SM activity `s`
//!   (GPM, within the instance), its compute slices `c`, the GPU's compute slices `C`. Where some
//!   instance with a process has no activity of its own, the GPU's activity `a` is split among
//!   the instances with a process by their compute slices instead; without `a` either, only the
//!   instances with their own activity get `s·c/C`. An instance's part goes to its processes as
//!   above; instances without a process, and processes whose instance has no row, get nothing:
//!   their part stays idle.
//! - **No activity at all** (no value for the GPU, its instances or its processes, e.g. an A100
//!   in MIG mode read through NVML: no GPM, no utilisation): nothing is guessed; all of `E` is
//!   idle and [`Split::no_activity`] says why, so callers can say how much energy they could not
//!   split.
//!
//! Idle is its own bucket, not spread over the workloads: a GPU draws its idle power whether or
//! not anything runs, and charging it to whoever happened to hold memory would charge teams for
//! an empty GPU (and make a team's bill depend on who else was on the GPU).
//!
//! This module does not decide who a workload belongs to (the caller's key), price anything, or
//! round; it does not model power (a share of activity is a share of the interval's energy, the
//! GPU's idle floor included), and it does not guess activity that the data does not have.

pub mod frames;
mod intervals;
mod per_gpu;

pub use frames::{Contributions, EnergyError, Held, ProcessRef, contributions, contributions_of};
pub use intervals::{GpuIntervals, IntervalsBuilder};

/// One process in an interval.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Process {
    /// Its SM utilisation over the interval (0–1; none in MIG mode).
    pub sm: Option<f64>,
    /// Memory it held, bytes.
    pub memory: Option<f64>,
    /// Its GPU instance (MIG); `None` outside MIG.
    pub instance: Option<u32>,
}

/// One MIG instance in an interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Instance {
    pub id: u32,
    /// Compute slices of its profile (`3g.40gb` → 3).
    pub slices: u32,
    /// Its own SM activity (0–1, within the instance), where the data has it.
    pub activity: Option<f64>,
}

/// One GPU's interval: its energy, activity, MIG instances and processes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Interval {
    /// The GPU's energy in the interval, J (finite, ≥ 0: the caller's values are checked).
    pub energy_j: f64,
    /// The GPU's activity (SM activity, else busy ratio), 0–1.
    pub activity: Option<f64>,
    /// Compute slices of the whole GPU (7, or 4 on A30); `None`: the larger of 7 and the
    /// instances' slices.
    pub slices: Option<u32>,
    /// MIG instances; empty outside MIG mode.
    pub instances: Vec<Instance>,
    pub processes: Vec<Process>,
}

/// An interval's energy split: each process's joules (in the order of
/// [`Interval::processes`]) and the idle rest.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Split {
    pub processes: Vec<f64>,
    pub idle: f64,
    /// Processes ran, but no activity value could split the energy: all of it is idle.
    pub no_activity: bool,
}

/// A ratio as a share: finite, in 0–1; anything else is unknown.
fn ratio(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite()).map(|v| v.clamp(0.0, 1.0))
}

/// Splits `part` joules among the processes `idx` of `procs` (by `sm_mean` share, else equally
/// among those holding memory, else equally), adding to `out`. Returns what was given.
fn to_processes<I>(part: f64, idx: I, procs: &[Process], out: &mut [f64]) -> f64
where
    I: Iterator<Item = usize> + Clone,
{
    if idx.clone().next().is_none() || part <= 0.0 {
        return 0.0;
    }
    let sm = |i: usize| ratio(procs[i].sm).unwrap_or(0.0);
    let sm_sum: f64 = idx.clone().map(sm).sum();
    if sm_sum > 0.0 {
        for i in idx {
            out[i] += part * (sm(i) / sm_sum);
        }
        return part;
    }
    let holds = |i: &usize| procs[*i].memory.is_some_and(|m| m.is_finite() && m > 0.0);
    let holding = idx.clone().filter(holds).count();
    let all = idx.clone().count();
    // Equally among those holding memory, else among all (no list is collected).
    let each = part / if holding == 0 { all } else { holding } as f64;
    for i in idx {
        if holding == 0 || holds(&i) {
            out[i] += each;
        }
    }
    part
}

/// The interval's split (see the module documentation for the rule).
pub fn split(iv: &Interval) -> Split {
    let mut processes = Vec::new();
    let (idle, no_activity) = split_into(iv, &mut processes);
    Split {
        processes,
        idle,
        no_activity,
    }
}

/// [`split`] into a buffer the caller reuses: `out` is set to each process's joules (in the
/// order of [`Interval::processes`]); returns the idle rest and [`Split::no_activity`]. The same
/// arithmetic in the same order, without allocating per interval.
pub fn split_into(iv: &Interval, out: &mut Vec<f64>) -> (f64, bool) {
    let e = if iv.energy_j.is_finite() {
        iv.energy_j.max(0.0)
    } else {
        0.0
    };
    out.clear();
    out.resize(iv.processes.len(), 0.0);
    let known = if iv.instances.is_empty() {
        split_whole(e, iv, out)
    } else {
        split_mig(e, iv, out)
    };
    // Idle is the rest, so the parts add up to the energy; a last rounding below 0 is 0.
    let given: f64 = out.iter().sum();
    ((e - given).max(0.0), !known && !iv.processes.is_empty())
}

/// The idle part of an interval with energy `energy_j` and no process: all of it, by the same
/// arithmetic as [`split_into`] (which is what it returns for such an interval).
pub fn idle_alone(energy_j: f64) -> f64 {
    let e = if energy_j.is_finite() {
        energy_j.max(0.0)
    } else {
        0.0
    };
    let given: f64 = [0.0f64; 0].iter().sum();
    (e - given).max(0.0)
}

/// [`split_into`] of an interval outside MIG with exactly one process, without building the
/// interval: the idle rest and the process's joules (`None`: no activity value splits it,
/// [`Split::no_activity`]). `sm` (the process's `sm_mean`) is asked only when the GPU's
/// `activity` is unknown. The same arithmetic as [`split_into`], bit for bit (a property test).
pub fn split_one(
    energy_j: f64,
    activity: Option<f64>,
    sm: impl FnOnce() -> Option<f64>,
) -> (f64, Option<f64>) {
    let e = if energy_j.is_finite() {
        energy_j.max(0.0)
    } else {
        0.0
    };
    let a = ratio(activity).or_else(|| ratio(sm()).map(|s| s.min(1.0)));
    // The one process gets all of the workload part (its share of the activity sum is 1).
    let share = a.map(|a| e * a).filter(|&part| part > 0.0).unwrap_or(0.0);
    let given: f64 = std::iter::once(share).sum();
    ((e - given).max(0.0), a.map(|_| share))
}

/// Outside MIG; `false` when no activity value was there to split by.
fn split_whole(e: f64, iv: &Interval, out: &mut [f64]) -> bool {
    let sm_sum: Option<f64> = iv
        .processes
        .iter()
        .filter_map(|p| ratio(p.sm))
        .fold(None, |s, v| Some(s.unwrap_or(0.0) + v));
    let Some(a) = ratio(iv.activity).or(sm_sum.map(|s| s.min(1.0))) else {
        return false;
    };
    to_processes(e * a, 0..iv.processes.len(), &iv.processes, out);
    true
}

/// In MIG mode; `false` when no activity value was there to split by.
fn split_mig(e: f64, iv: &Interval, out: &mut [f64]) -> bool {
    let total = f64::from(
        iv.slices
            .filter(|&s| s > 0)
            .unwrap_or_else(|| iv.instances.iter().map(|i| i.slices).sum::<u32>().max(7)),
    );
    // Instances with a process (the first of each id), and their processes: walked again
    // where needed rather than collected (a GPU has at most a few of each; no allocation per
    // interval).
    let of =
        |id: u32| (0..iv.processes.len()).filter(move |&p| iv.processes[p].instance == Some(id));
    let loaded = || {
        iv.instances
            .iter()
            .enumerate()
            .filter(|&(k, inst)| !iv.instances[..k].iter().any(|j| j.id == inst.id))
            .map(|(_, inst)| inst)
            .filter(move |inst| of(inst.id).next().is_some())
    };
    if loaded().next().is_none() {
        // Nothing ran: idle, and nothing was left unsplit for lack of activity.
        return true;
    }
    // Each loaded instance's share of the GPU: its own activity × slices when every loaded
    // instance has it, else the GPU's activity by slices, else what the instances have.
    let own = |i: &Instance| ratio(i.activity).map(|s| s * f64::from(i.slices) / total);
    let slices: f64 = loaded().map(|i| f64::from(i.slices)).sum();
    let by_gpu = match ratio(iv.activity) {
        Some(a) if slices > 0.0 && loaded().any(|i| own(i).is_none()) => Some(a),
        _ => {
            if loaded().all(|i| own(i).is_none()) {
                return false;
            }
            None
        }
    };
    let share = |i: &Instance| match by_gpu {
        Some(a) => a * f64::from(i.slices) / slices,
        None => own(i).unwrap_or(0.0),
    };
    // Instances claiming more than the GPU (bad slice counts) are scaled to the whole GPU.
    let sum: f64 = loaded().map(share).sum();
    let scale = if sum > 1.0 { 1.0 / sum } else { 1.0 };
    for inst in loaded() {
        to_processes(e * share(inst) * scale, of(inst.id), &iv.processes, out);
    }
    true
}

/// Compute slices of a MIG profile name: the number before `g` (`3g.40gb` → 3, `1g.10gb+me` →
/// 1); `None` when the name does not start with one.
pub fn profile_slices(profile: &str) -> Option<u32> {
    // A compute-instance profile (`1c.3g.40gb`) names the GPU instance after the `c.`.
    let gi = match profile.split_once("c.") {
        Some((c, rest)) if c.chars().all(|ch| ch.is_ascii_digit()) => rest,
        _ => profile,
    };
    gi.split_once('g')
        .and_then(|(n, _)| n.parse::<u32>().ok())
        .filter(|&n| n > 0)
}

#[cfg(test)]
mod tests;
