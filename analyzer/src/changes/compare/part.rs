//! One read of each partition for the compared periods of every change at once: the rows of the
//! windows' union selected, each row added to the periods it is in ([`tally_all`], on a few
//! worker threads; the partitions' sums are added in partition order, so the output does not
//! depend on which worker read which). Within a partition, GPUs, nodes, teams and processes are
//! counted by id, and each process row finds its GPU's row at the same `ts` from where the last
//! one was found, not through a map of every row.
//!
//! It decides nothing: the windows are given ([`super::windows`]), the sums are rounded and
//! priced by [`super::Acc::finish`].

use polars::prelude::*;

use super::{Acc, BUSY, HELD, HOUR_MS, PartAcc, RowFigures, Sum, TeamSum, Window};
use crate::changes::ChangesError;
use crate::changes::keys::{Interner, gpu_ids, workload_ids};
use crate::frames::Frames;
use crate::frames::columns::{FastMap, f64s, find_from, i64s, strs, ts_ms};

/// The rows of `f` ending in any of the windows' periods, with `columns`.
fn select(f: &LazyFrame, windows: &[Window], columns: &[&str]) -> LazyFrame {
    let from = windows.iter().map(|w| w.before.0).min().unwrap_or(0);
    let until = windows.iter().map(|w| w.after.1).max().unwrap_or(0);
    // The filter on the frame's own `ts` (as `Frames::within` does): polars can push it down
    // into the scan.
    let ts = col("ts").cast(DataType::Int64);
    f.clone()
        .filter(ts.clone().gt(lit(from)).and(ts.lt_eq(lit(until))))
        .with_column(ts_ms())
        .select(columns.iter().map(|c| col(*c)).collect::<Vec<_>>())
}

/// Sums both periods of every window over every partition: the partitions are read once each
/// (all windows from one read), on a few worker threads, and added in partition order.
pub(in crate::changes) fn tally_all(
    parts: &[&Frames],
    windows: &[Window],
) -> Result<Vec<Acc>, ChangesError> {
    let mut accs: Vec<Acc> = windows.iter().map(|_| Acc::new()).collect();
    if windows.is_empty() {
        return Ok(accs);
    }
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
        .min(parts.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let read = std::sync::atomic::AtomicU64::new(0);
    type Done = (usize, Result<PartTally, ChangesError>);
    let done: std::sync::Mutex<Vec<Done>> = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(f) = parts.get(i) else { break };
                    let r = tally(f, windows, &read);
                    let failed = r.is_err();
                    done.lock().unwrap_or_else(|e| e.into_inner()).push((i, r));
                    if failed {
                        // No more partitions for anyone: the first error is the answer.
                        next.store(parts.len(), std::sync::atomic::Ordering::Relaxed);
                        break;
                    }
                }
            });
        }
    });
    crate::timing::report(
        "changes (summed)",
        "read",
        std::time::Duration::from_nanos(read.load(std::sync::atomic::Ordering::Relaxed)),
    );
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|(i, _)| *i);
    for (_, part) in done {
        let part = part?;
        for (acc, p) in accs.iter_mut().zip(part.accs) {
            acc.merge(p, &part.labels, &part.keys);
        }
    }
    Ok(accs)
}

/// One partition's sums per window, and the names of its GPU and process ids.
struct PartTally {
    accs: Vec<PartAcc>,
    labels: Vec<String>,
    keys: Vec<String>,
}

/// The windows' periods a row ending at `ts` is in, as (window, side), for the last `ts` asked
/// (rows come `ts` by `ts`).
struct SidesAt<'w> {
    windows: &'w [Window],
    ts: Option<i64>,
    list: Vec<(usize, usize)>,
}

impl<'w> SidesAt<'w> {
    fn new(windows: &'w [Window]) -> Self {
        SidesAt {
            windows,
            ts: None,
            list: Vec::new(),
        }
    }

    fn of(&mut self, ts: i64) -> &[(usize, usize)] {
        if self.ts != Some(ts) {
            self.ts = Some(ts);
            self.list.clear();
            for (k, w) in self.windows.iter().enumerate() {
                if let Some(side) = w.side(ts) {
                    self.list.push((k, side));
                }
            }
        }
        &self.list
    }
}

/// A partition's GPU rows in the periods, per GPU in `ts` order (of rows with equal `ts`, the
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

/// A partition's period sums while its rows are read: GPUs and processes as flags by id.
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

/// One team's sums in one period while the rows are read.
#[derive(Default, Clone)]
struct DenseTeam {
    sum: TeamSum<u32>,
    seen: Vec<bool>,
}

impl DenseTeam {
    fn done(self) -> TeamSum<u32> {
        let mut t = self.sum;
        t.processes = (0..self.seen.len() as u32)
            .filter(|&k| self.seen[k as usize])
            .collect();
        t
    }
}

/// One window's sums of a partition while its rows are read: the nodes by node id, the teams by
/// team index (`None` until a row of theirs is in a period).
#[derive(Default)]
struct DenseAcc {
    fleet: [Dense; 2],
    nodes: Vec<Option<[Dense; 2]>>,
    teams: Vec<Option<[DenseTeam; 2]>>,
}

/// Sums one partition's rows of both periods of every window.
/// `read`: the time spent reading frames, summed (`TESSERA_TIMINGS`).
fn tally(
    frames: &Frames,
    windows: &[Window],
    read: &std::sync::atomic::AtomicU64,
) -> Result<PartTally, ChangesError> {
    let mut accs: Vec<DenseAcc> = windows.iter().map(|_| DenseAcc::default()).collect();
    let mut sides = SidesAt::new(windows);
    let t0 = std::time::Instant::now();
    let gpu = select(
        &frames.gpu,
        windows,
        &[
            "node",
            "gpu",
            "uuid",
            "ts",
            "interval_ms",
            "busy_mean",
            "sm_active_mean",
            "memory_used_max_bytes",
            "power_mean_watts",
            "energy_delta_joules",
        ],
    )
    .collect()?;
    read.fetch_add(
        t0.elapsed().as_nanos() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    let mut labels = Interner::default();
    // Per (GPU, ts): hours, activity, energy (J) of the row (the last of equal rows), and the
    // number of process rows on it, for the teams.
    let mut rows = GpuRows::default();
    let node = strs(&gpu, "node")?;
    let node = node.ids();
    // Node ids, and one more for rows without a node ("?").
    let none = node.strings.len();
    let node_name = |n: usize| node.strings.get(n).copied().unwrap_or("?");
    {
        let gpu_of = gpu_ids(&gpu, &mut labels)?;
        let (ts, interval) = (i64s(&gpu, "ts")?, i64s(&gpu, "interval_ms")?);
        let (busy, sm, mem) = (
            f64s(&gpu, "busy_mean")?,
            f64s(&gpu, "sm_active_mean")?,
            f64s(&gpu, "memory_used_max_bytes")?,
        );
        let (power, energy) = (
            f64s(&gpu, "power_mean_watts")?,
            f64s(&gpu, "energy_delta_joules")?,
        );
        for (i, &g) in gpu_of.iter().enumerate() {
            let Some(t) = ts.get(i) else { continue };
            let here = sides.of(t);
            if here.is_empty() {
                continue;
            }
            let iv = interval.get(i).unwrap_or(0).max(0);
            let h = iv as f64 / HOUR_MS;
            let act = sm.get(i).or(busy.get(i));
            let in_use = (mem.get(i).is_some() || act.is_some())
                .then(|| mem.get(i).is_some_and(|m| m >= HELD) || act.is_some_and(|a| a > BUSY));
            let e = energy
                .get(i)
                .or_else(|| power.get(i).map(|p| p * iv as f64 / 1000.0));
            let n = node.at(i).map_or(none, |n| n as usize);
            for &(k, side) in here {
                let acc = &mut accs[k];
                acc.fleet[side].add(g, h, act, in_use, e);
                if n >= acc.nodes.len() {
                    acc.nodes.resize(n + 1, None);
                }
                acc.nodes[n].get_or_insert_with(Default::default)[side].add(g, h, act, in_use, e);
            }
            rows.push(g, t, (h, act, e));
        }
    }
    let t1 = std::time::Instant::now();
    let p = select(
        &frames.process,
        windows,
        &[
            "node",
            "gpu",
            "uuid",
            "ts",
            "pid",
            "process",
            "namespace",
            "pod",
            "slurm_job_id",
        ],
    )
    .collect()?;
    read.fetch_add(
        t1.elapsed().as_nanos() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    let gpu_of = gpu_ids(&p, &mut labels)?;
    let mut keys = Interner::default();
    let workload_of = workload_ids(&p, &mut keys)?;
    let (ns, slurm) = (strs(&p, "namespace")?, strs(&p, "slurm_job_id")?);
    let (ns, slurm) = (ns.ids(), slurm.ids());
    let ts = i64s(&p, "ts")?;
    // Processes per (GPU, ts): a row's share of its GPU's row.
    rows.seal();
    let mut procs = Vec::with_capacity(p.height());
    for (i, &g) in gpu_of.iter().enumerate() {
        let Some(t) = ts.get(i) else { continue };
        if sides.of(t).is_empty() {
            continue;
        }
        let at = rows.find(g, t);
        if let Some(at) = at {
            rows.count[g as usize][at] += 1;
        }
        procs.push((i, t, g, at));
    }
    // Teams by name: a process's namespace, else its Slurm job.
    let mut team_names: Vec<String> = Vec::new();
    let mut team_index: FastMap<String, usize> = FastMap::default();
    let mut team_of: FastMap<(Option<u32>, Option<u32>), usize> = FastMap::default();
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
        let (figures, count) = match at {
            Some(at) => (Some(rows.fig[g as usize][at]), rows.count[g as usize][at]),
            None => (None, 0),
        };
        let n = f64::from(count.max(1));
        let w = workload_of[i] as usize;
        for &(k, side) in sides.of(t) {
            let acc = &mut accs[k];
            if team >= acc.teams.len() {
                acc.teams.resize(team + 1, None);
            }
            let s = &mut acc.teams[team].get_or_insert_with(Default::default)[side];
            if w >= s.seen.len() {
                s.seen.resize(keys.names.len().max(w + 1), false);
            }
            s.seen[w] = true;
            if let Some((h, act, e)) = figures {
                let s = &mut s.sum;
                s.gpu_hours += h / n;
                if let Some(a) = act {
                    *s.busy.get_or_insert(0.0) += a * h / n;
                }
                if let Some(e) = e {
                    *s.energy.get_or_insert(0.0) += e / n;
                }
            }
        }
    }
    let accs = accs
        .into_iter()
        .map(|a| {
            let mut out = PartAcc {
                fleet: a.fleet.map(Dense::done),
                ..PartAcc::default()
            };
            for (n, sides) in a.nodes.into_iter().enumerate() {
                let Some(sides) = sides else { continue };
                let into = out.nodes.entry(node_name(n).to_string()).or_default();
                for (side, d) in sides.into_iter().enumerate() {
                    add_sum(&mut into[side], d.done());
                }
            }
            for (t, sides) in a.teams.into_iter().enumerate() {
                let Some(sides) = sides else { continue };
                out.teams
                    .insert(team_names[t].clone(), sides.map(DenseTeam::done));
            }
            out
        })
        .collect();
    Ok(PartTally {
        accs,
        labels: labels.names,
        keys: keys.names,
    })
}

/// Adds a node's sums to the same name's (a node named "?" and rows without a node are one).
fn add_sum(into: &mut Sum<u32>, from: Sum<u32>) {
    if into.gpus.is_empty() && into.observed == 0.0 && into.energy.is_none() {
        *into = from;
        return;
    }
    into.add_figures(&from);
    into.gpus.extend(from.gpus);
}
