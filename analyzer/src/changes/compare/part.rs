//! The comparison's sums kept per whole hour of each partition ([`PartHours`], filled by the
//! change scan from the rows the report pass holds in memory), and the compared periods of
//! every change added up from them ([`sum_all`]): the periods are cut on whole hours
//! ([`super::windows`]), so no partition is read a second time. Within a partition, GPUs,
//! nodes, teams and processes are counted by id, and each process row finds its GPU's row at
//! the same `ts` from where the last one was found, not through a map of every row.
//!
//! It decides nothing: the windows are given ([`super::windows`]), the sums are rounded and
//! priced by [`super::Acc::finish`].

use std::collections::BTreeMap;

use polars::prelude::*;

use super::{Acc, BUSY, HELD, HOUR_MS, PartAcc, RowFigures, Sum, TeamSum, Window};
use crate::changes::ChangesError;
use crate::frames::columns::{FastMap, f64s, find_from, i64s, strs};

/// One slot's sums (the rows ending in one whole hour): the fleet, each node and each team (by
/// the partition's team index), GPUs and processes by the partition's ids.
#[derive(Default)]
struct Slot {
    fleet: Sum<u32>,
    nodes: BTreeMap<String, Sum<u32>>,
    teams: BTreeMap<u32, TeamSum<u32>>,
}

/// One partition's sums per whole slot of `slot_ms` (an hour), for rows ending in the range
/// the scan was given. Slot `k` holds the rows ending in `((k − 1)·slot_ms, k·slot_ms]`.
#[derive(Default)]
pub struct PartHours {
    slot_ms: i64,
    slots: Vec<(i64, Slot)>,
    /// The names of the GPU ids (labels), process ids (workload keys) and team indices.
    labels: Vec<String>,
    keys: Vec<String>,
    teams: Vec<String>,
}

impl std::fmt::Debug for PartHours {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartHours")
            .field("slot_ms", &self.slot_ms)
            .field("slots", &self.slots.len())
            .field("gpus", &self.labels.len())
            .field("workloads", &self.keys.len())
            .field("teams", &self.teams.len())
            .finish()
    }
}

/// The slot of a row ending at `ts`.
pub(super) fn slot_of(ts: i64, slot_ms: i64) -> i64 {
    (ts - 1).div_euclid(slot_ms) + 1
}

impl PartHours {
    /// This partition's sums over both periods of `w` (whose ends are whole slots).
    fn window(&self, w: &Window) -> PartAcc {
        let mut out = PartAcc::default();
        let d = self.slot_ms;
        debug_assert!(
            [w.before.0, w.before.1, w.after.0, w.after.1]
                .iter()
                .all(|t| t.rem_euclid(d) == 0),
            "periods on whole slots"
        );
        for (k, slot) in &self.slots {
            // The periods' ends are whole slots: a slot is in the period its end is in.
            let Some(side) = w.side(k * d) else { continue };
            add_sum(&mut out.fleet[side], &slot.fleet);
            for (node, s) in &slot.nodes {
                add_sum(&mut out.nodes.entry(node.clone()).or_default()[side], s);
            }
            for (team, t) in &slot.teams {
                let name = self.teams[*team as usize].clone();
                out.teams.entry(name).or_default()[side].add(t, |&p| p);
            }
        }
        out
    }
}

/// Adds a slot's sums and GPUs to a period's.
fn add_sum(into: &mut Sum<u32>, from: &Sum<u32>) {
    into.add_figures(from);
    into.gpus.extend(from.gpus.iter().copied());
}

/// Sums both periods of every window over every partition's slots, partitions added in order
/// (the output does not depend on which worker scanned which).
pub(in crate::changes) fn sum_all(parts: &[&PartHours], windows: &[Window]) -> Vec<Acc> {
    windows
        .iter()
        .map(|w| {
            let mut acc = Acc::new();
            for p in parts {
                acc.merge(p.window(w), &p.labels, &p.keys);
            }
            acc
        })
        .collect()
}

/// A partition's GPU rows in the range, per GPU in `ts` order (of rows with equal `ts`, the
/// last): each process row finds its GPU's row from where the last one was found (rows come
/// in time order), else by binary search.
#[derive(Default)]
struct GpuRows {
    ts: Vec<Vec<i64>>,
    fig: Vec<Vec<RowFigures>>,
    count: Vec<Vec<u32>>,
    cursor: Vec<usize>,
}

impl GpuRows {
    fn push(&mut self, g: u32, t: i64, fig: RowFigures) {
        let g = g as usize;
        if g >= self.ts.len() {
            self.ts.resize_with(g + 1, Vec::new);
            self.fig.resize_with(g + 1, Vec::new);
        }
        self.ts[g].push(t);
        self.fig[g].push(fig);
    }

    /// Sorts each GPU's rows by `ts` (stable) and keeps the last of equal ones.
    fn seal(&mut self) {
        for (ts, fig) in self.ts.iter_mut().zip(self.fig.iter_mut()) {
            let strictly = ts.windows(2).all(|w| w[0] < w[1]);
            if strictly {
                continue;
            }
            let mut order: Vec<usize> = (0..ts.len()).collect();
            order.sort_by_key(|&k| ts[k]);
            let (mut t2, mut f2) = (Vec::with_capacity(ts.len()), Vec::with_capacity(ts.len()));
            for k in order {
                if t2.last() == Some(&ts[k]) {
                    // A later row of the same `ts` replaces the earlier.
                    *f2.last_mut().expect("one per ts") = fig[k];
                } else {
                    t2.push(ts[k]);
                    f2.push(fig[k]);
                }
            }
            (*ts, *fig) = (t2, f2);
        }
        self.count = self.ts.iter().map(|t| vec![0; t.len()]).collect();
        self.cursor = vec![0; self.ts.len()];
    }

    /// Where GPU `g`'s row at `t` is.
    fn find(&mut self, g: u32, t: i64) -> Option<usize> {
        let g = g as usize;
        find_from(self.ts.get(g)?, &mut self.cursor[g], t)
    }
}

/// A slot's sums while the rows are read: GPUs as flags by id.
#[derive(Default, Clone)]
struct Dense {
    sum: Sum<u32>,
    seen: Vec<bool>,
}

impl Dense {
    fn add(&mut self, gpu: u32, h: f64, act: Option<f64>, in_use: Option<bool>, e: Option<f64>) {
        let g = gpu as usize;
        if g >= self.seen.len() {
            self.seen.resize(g + 1, false);
        }
        self.seen[g] = true;
        let s = &mut self.sum;
        s.observed += h;
        if let Some(u) = in_use {
            s.use_h += h;
            if u {
                s.in_use += h;
            }
        }
        if let Some(a) = act {
            s.busy += a * h;
            s.act_h += h;
        }
        if let Some(e) = e {
            *s.energy.get_or_insert(0.0) += e;
        }
    }

    fn done(self) -> Sum<u32> {
        let mut s = self.sum;
        s.gpus = (0..self.seen.len() as u32)
            .filter(|&g| self.seen[g as usize])
            .collect();
        s
    }
}

/// One team's sums in one slot while the rows are read: its processes as a list (sorted and
/// made unique when done).
#[derive(Default, Clone)]
struct DenseTeam {
    sum: TeamSum<u32>,
    procs: Vec<u32>,
}

/// One slot's sums while the rows are read: the nodes by node id, the teams by team index
/// (`None` until a row of theirs is in the slot).
#[derive(Default)]
struct DenseSlot {
    fleet: Dense,
    nodes: Vec<Option<Dense>>,
    teams: Vec<Option<DenseTeam>>,
}

/// The slot index of rows ending at `ts`, for the last `ts` asked (rows come `ts` by `ts`),
/// and each slot's sums while the rows are read.
struct Slots {
    slot_ms: i64,
    index: FastMap<i64, usize>,
    keys: Vec<i64>,
    last: Option<(i64, usize)>,
    dense: Vec<DenseSlot>,
}

impl Slots {
    fn new(slot_ms: i64) -> Self {
        Slots {
            slot_ms,
            index: FastMap::default(),
            keys: Vec::new(),
            last: None,
            dense: Vec::new(),
        }
    }

    /// The sums of the slot of rows ending at `ts`, and its index.
    fn of(&mut self, ts: i64) -> (usize, &mut DenseSlot) {
        let s = match self.last {
            Some((t, s)) if t == ts => s,
            _ => {
                let k = slot_of(ts, self.slot_ms);
                let n = self.keys.len();
                let s = *self.index.entry(k).or_insert(n);
                if s == n {
                    self.keys.push(k);
                    self.dense.push(DenseSlot::default());
                }
                self.last = Some((ts, s));
                s
            }
        };
        (s, &mut self.dense[s])
    }
}

/// What [`tally`] reads of one partition: the GPU rows (the figures among the scan's
/// columns) and the process rows, each row's GPU id (a label in `labels`) and each
/// process row's workload id (a key in `keys`), as the scan interned them.
pub(in crate::changes) struct Rows<'a> {
    pub gpu: &'a DataFrame,
    pub gpu_of: &'a [u32],
    pub process: &'a DataFrame,
    pub process_gpu_of: &'a [u32],
    pub workload_of: &'a [u32],
}

/// Sums one partition's rows ending in `(since, until]` per whole slot of `slot_ms`; `labels`
/// and `keys` name the GPU and workload ids of `rows`.
pub(in crate::changes) fn tally(
    rows: Rows<'_>,
    (since, until): (i64, i64),
    slot_ms: i64,
    labels: Vec<String>,
    keys: Vec<String>,
) -> Result<PartHours, ChangesError> {
    let inside = |t: Option<i64>| t.filter(|&t| t > since && t <= until);
    let mut slots = Slots::new(slot_ms);
    let node = strs(rows.gpu, "node")?;
    let node = node.ids();
    let mut gpu_rows = gpu_walk(&rows, &node, &inside, &mut slots)?;
    let teams = process_walk(&rows, &inside, &mut slots, &mut gpu_rows, keys.len())?;
    // Node ids, and one more for rows without a node ("?").
    let node_name = |n: usize| node.strings.get(n).copied().unwrap_or("?");
    let mut out: Vec<(i64, Slot)> = slots
        .dense
        .into_iter()
        .zip(slots.keys)
        .map(|(d, k)| (k, d.done(node_name)))
        .collect();
    out.sort_by_key(|(k, _)| *k);
    Ok(PartHours {
        slot_ms,
        slots: out,
        labels,
        keys,
        teams,
    })
}

impl DenseSlot {
    /// The slot's sums, its nodes by name (a node named "?" and rows without a node are one)
    /// and each team's processes listed once.
    fn done<'a>(self, node_name: impl Fn(usize) -> &'a str) -> Slot {
        let mut slot = Slot {
            fleet: self.fleet.done(),
            ..Slot::default()
        };
        for (n, dn) in self.nodes.into_iter().enumerate() {
            let Some(dn) = dn else { continue };
            add_sum(
                slot.nodes.entry(node_name(n).to_string()).or_default(),
                &dn.done(),
            );
        }
        for (t, dt) in self.teams.into_iter().enumerate() {
            let Some(mut dt) = dt else { continue };
            dt.procs.sort_unstable();
            dt.procs.dedup();
            let mut sum = dt.sum;
            sum.processes = dt.procs.into_iter().collect();
            slot.teams.insert(t as u32, sum);
        }
        slot
    }
}

/// Adds each GPU row in the range to its slot (fleet and node) and returns the rows' figures
/// per (GPU, `ts`), for the teams' shares.
fn gpu_walk(
    rows: &Rows<'_>,
    node: &crate::frames::columns::Ids<'_>,
    inside: &impl Fn(Option<i64>) -> Option<i64>,
    slots: &mut Slots,
) -> Result<GpuRows, ChangesError> {
    let gpu = rows.gpu;
    // Node ids, and one more for rows without a node ("?").
    let none = node.strings.len();
    let (ts, interval) = (i64s(gpu, "ts")?, i64s(gpu, "interval_ms")?);
    let (busy, sm, mem) = (
        f64s(gpu, "busy_mean")?,
        f64s(gpu, "sm_active_mean")?,
        f64s(gpu, "memory_used_max_bytes")?,
    );
    let (power, energy) = (
        f64s(gpu, "power_mean_watts")?,
        f64s(gpu, "energy_delta_joules")?,
    );
    let mut gpu_rows = GpuRows::default();
    for (i, &g) in rows.gpu_of.iter().enumerate() {
        let Some(t) = inside(ts.get(i)) else { continue };
        let iv = interval.get(i).unwrap_or(0).max(0);
        let h = iv as f64 / HOUR_MS;
        let act = sm.get(i).or(busy.get(i));
        let in_use = (mem.get(i).is_some() || act.is_some())
            .then(|| mem.get(i).is_some_and(|m| m >= HELD) || act.is_some_and(|a| a > BUSY));
        let e = energy
            .get(i)
            .or_else(|| power.get(i).map(|p| p * iv as f64 / 1000.0));
        let n = node.at(i).map_or(none, |n| n as usize);
        let (_, d) = slots.of(t);
        d.fleet.add(g, h, act, in_use, e);
        if n >= d.nodes.len() {
            d.nodes.resize(n + 1, None);
        }
        d.nodes[n]
            .get_or_insert_with(Default::default)
            .add(g, h, act, in_use, e);
        gpu_rows.push(g, t, (h, act, e));
    }
    gpu_rows.seal();
    Ok(gpu_rows)
}

/// Adds each process row in the range to its team's sums in its slot: its process, and its
/// share of its GPU's row (split evenly between the process rows on it). Returns the teams'
/// names by index: a process's namespace, else its Slurm job.
fn process_walk(
    rows: &Rows<'_>,
    inside: &impl Fn(Option<i64>) -> Option<i64>,
    slots: &mut Slots,
    gpu_rows: &mut GpuRows,
    workloads: usize,
) -> Result<Vec<String>, ChangesError> {
    let p = rows.process;
    let (ns, slurm) = (strs(p, "namespace")?, strs(p, "slurm_job_id")?);
    let (ns, slurm) = (ns.ids(), slurm.ids());
    let ts = i64s(p, "ts")?;
    // Processes per (GPU, ts): a row's share of its GPU's row.
    let mut procs = Vec::with_capacity(p.height());
    for (i, &g) in rows.process_gpu_of.iter().enumerate() {
        let Some(t) = inside(ts.get(i)) else { continue };
        let at = gpu_rows.find(g, t);
        if let Some(at) = at {
            gpu_rows.count[g as usize][at] += 1;
        }
        procs.push((i, t, g, at));
    }
    let mut team_names: Vec<String> = Vec::new();
    let mut team_index: FastMap<String, usize> = FastMap::default();
    let mut team_of: FastMap<(Option<u32>, Option<u32>), usize> = FastMap::default();
    // Per workload, the (slot, team) it was last listed in: rows of one slot come together, so
    // most rows add no entry to the list.
    let mut listed: Vec<(usize, usize)> = vec![(usize::MAX, usize::MAX); workloads];
    for (i, t, g, at) in procs {
        let team = *team_of.entry((ns.at(i), slurm.at(i))).or_insert_with(|| {
            let name = match (ns.get(i), slurm.get(i)) {
                (Some(n), _) => n.to_string(),
                (None, Some(j)) => format!("slurm job {j}"),
                _ => "(unattributed)".to_string(),
            };
            *team_index.entry(name.clone()).or_insert_with(|| {
                team_names.push(name);
                team_names.len() - 1
            })
        });
        let figures = at.map(|at| (gpu_rows.fig[g as usize][at], gpu_rows.count[g as usize][at]));
        let w = rows.workload_of[i];
        let (s, d) = slots.of(t);
        if team >= d.teams.len() {
            d.teams.resize(team + 1, None);
        }
        let tm = d.teams[team].get_or_insert_with(Default::default);
        if let Some(l) = listed.get_mut(w as usize)
            && *l != (s, team)
        {
            *l = (s, team);
            tm.procs.push(w);
        }
        if let Some(((h, act, e), count)) = figures {
            let n = f64::from(count.max(1));
            let s = &mut tm.sum;
            s.gpu_hours += h / n;
            if let Some(a) = act {
                *s.busy.get_or_insert(0.0) += a * h / n;
            }
            if let Some(e) = e {
                *s.energy.get_or_insert(0.0) += e / n;
            }
        }
    }
    Ok(team_names)
}
