//! Teams: GPU-hours and memory per namespace (or Slurm job) from the process table, summed per
//! partition and merged in order.

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::{col, lit};

use super::rows::PROCESS_COLUMNS;
use super::{
    AllocatedDevice, GIB, HOUR_MS, IdleModel, Prices, ReportError, TeamUsage, Teams, r2, r3,
    team_of,
};
use crate::frames::Frames;
use crate::frames::columns::{DirectCache, FastMap, FastSet, cache_slot, f64s, i64s, strs, ts_ms};
use crate::frames::shared::TableIds;

/// A process's identity: node and pid.
pub(super) type Proc = (Option<String>, Option<i64>);

/// Team usage being summed over the process rows, in frame order.
#[derive(Default)]
pub(super) struct TeamsAcc {
    pub(super) has_ns: bool,
    pub(super) has_job: bool,
    /// Team name → its entry in `accs`.
    pub(super) index: BTreeMap<String, usize>,
    pub(super) accs: Vec<(TeamUsage, BTreeSet<Proc>)>,
}

/// One partition's process rows as the team tally adds them: per row its team (an index into
/// `names`), GPU-hours and GiB-hours, in frame order; the distinct processes of each team.
pub(super) struct TeamRows {
    pub(super) names: Vec<String>,
    pub(super) has_ns: bool,
    pub(super) has_job: bool,
    pub(super) rows: Vec<(usize, f64, f64)>,
    pub(super) procs: Vec<(usize, Proc)>,
}

/// Rows of one `ts` counted in a list rather than a map, up to this many.
const SMALL_BLOCK: usize = 48;

/// Reads one partition's process rows for the team tally (no shared state: runs on a worker).
/// `shared`: the process table's ids when every row is in the range
/// ([`crate::frames::shared`]); the rows are then read unfiltered and not interned again.
pub(super) fn team_rows(
    frames: &Frames,
    range: (i64, i64),
    shared: Option<&TableIds>,
) -> Result<TeamRows, ReportError> {
    let mut out = TeamRows {
        names: Vec::new(),
        has_ns: false,
        has_job: false,
        rows: Vec::new(),
        procs: Vec::new(),
    };
    {
        let lf = frames.process.clone().with_column(ts_ms());
        let lf = match shared {
            Some(_) => lf,
            None => lf.filter(
                col("ts")
                    .gt(lit(range.0))
                    .and(col("ts").lt_eq(lit(range.1))),
            ),
        };
        let df = lf
            .select(PROCESS_COLUMNS.iter().map(|c| col(*c)).collect::<Vec<_>>())
            .collect()?;
        let n = df.height();
        let (node, uuid, ns, job) = (
            strs(&df, "node")?,
            strs(&df, "uuid")?,
            strs(&df, "namespace")?,
            strs(&df, "slurm_job_id")?,
        );
        // Rows keyed by string ids (each string read once per distinct view, not per row).
        let sh = |c: &str| shared.and_then(|t| t.col(c, n));
        let (node, uuid, ns, job) = (
            node.ids_or(sh("node")),
            uuid.ids_or(sh("uuid")),
            ns.ids_or(sh("namespace")),
            job.ids_or(sh("slurm_job_id")),
        );
        // Borrowed once here, not at every row.
        let (node, uuid, ns, job) = (&*node, &*uuid, &*ns, &*job);
        let (pid, ts, interval, mem) = (
            i64s(&df, "pid")?,
            i64s(&df, "ts")?,
            i64s(&df, "interval_ms")?,
            f64s(&df, "memory_used_max_bytes")?,
        );
        type IdKey = (Option<u32>, Option<u32>, Option<i64>);
        // Processes per GPU and interval, to split the GPU's time between them: per row, the
        // number of rows with its (node, uuid, ts). Rows in time order are counted one `ts` at a
        // time (a small map); others in one map over the partition.
        let mut share: Vec<u32> = Vec::with_capacity(n);
        let in_order = (1..n).all(|i| ts.get(i - 1) <= ts.get(i));
        let mut per_gpu: FastMap<IdKey, u32> = FastMap::default();
        let mut small: Vec<(IdKey, u32)> = Vec::new();
        let mut block = 0;
        while block < n {
            let end = if in_order {
                let t = ts.get(block);
                (block..n).find(|&i| ts.get(i) != t).unwrap_or(n)
            } else {
                n
            };
            let key = |i: usize| (node.at(i), uuid.at(i), ts.get(i));
            if end - block <= SMALL_BLOCK {
                // One `ts` of a node: a dozen rows, counted in a list.
                small.clear();
                for i in block..end {
                    let k = key(i);
                    match small.iter_mut().find(|(x, _)| *x == k) {
                        Some(e) => e.1 += 1,
                        None => small.push((k, 1)),
                    }
                }
                share.extend((block..end).map(|i| {
                    let k = key(i);
                    small.iter().find(|(x, _)| *x == k).map_or(1, |e| e.1)
                }));
            } else {
                per_gpu.clear();
                for i in block..end {
                    *per_gpu.entry(key(i)).or_default() += 1;
                }
                share.extend((block..end).map(|i| per_gpu[&key(i)]));
            }
            block = end;
        }
        // Team names by (namespace, job), made once each; processes seen, by team.
        let mut names: FastMap<(Option<u32>, Option<u32>), usize> = FastMap::default();
        type Process = (usize, Option<u32>, Option<i64>);
        let mut seen: FastSet<Process> = FastSet::default();
        // Processes seen recently (rows cycle through a node's few processes): no set insert.
        let mut recent: DirectCache<Process, ()> = DirectCache::default();
        out.rows.reserve(n);
        type TeamKey = (Option<u32>, Option<u32>);
        let mut last_team: Option<(TeamKey, usize)> = None;
        for (i, &k) in share.iter().enumerate() {
            out.has_ns |= ns.at(i).is_some();
            out.has_job |= job.at(i).is_some();
            let team_key = (ns.at(i), job.at(i));
            let t = match last_team {
                Some((k, t)) if k == team_key => t,
                _ => {
                    let t = *names.entry(team_key).or_insert_with(|| {
                        out.names.push(
                            team_of(ns.get(i), job.get(i))
                                .unwrap_or_else(|| "(unattributed)".into()),
                        );
                        out.names.len() - 1
                    });
                    last_team = Some((team_key, t));
                    t
                }
            };
            let h = interval.get(i).unwrap_or(0).max(0) as f64 / HOUR_MS;
            let k = k.max(1);
            out.rows
                .push((t, h / f64::from(k), mem.get(i).unwrap_or(0.0) / GIB * h));
            let process = (t, node.at(i), pid.get(i));
            let at = cache_slot([
                t as u64,
                process.1.map_or(u64::MAX, u64::from),
                process.2.map_or(u64::MAX, |p| p as u64),
            ]);
            if recent.get(at, &process).is_some() {
                continue;
            }
            recent.put(at, process, ());
            if seen.insert(process) {
                out.procs
                    .push((t, (node.get(i).map(str::to_string), pid.get(i))));
            }
        }
    }
    Ok(out)
}

impl TeamsAcc {
    /// Adds one partition's rows, in order.
    pub(super) fn fold(&mut self, t: TeamRows) {
        self.has_ns |= t.has_ns;
        self.has_job |= t.has_job;
        let global: Vec<usize> = t
            .names
            .iter()
            .map(|name| match self.index.get(name) {
                Some(&g) => g,
                None => {
                    self.accs.push((
                        TeamUsage {
                            team: name.clone(),
                            ..TeamUsage::default()
                        },
                        BTreeSet::new(),
                    ));
                    self.index.insert(name.clone(), self.accs.len() - 1);
                    self.accs.len() - 1
                }
            })
            .collect();
        for (team, gh, mh) in t.rows {
            let e = &mut self.accs[global[team]];
            e.0.gpu_hours += gh;
            e.0.memory_gib_hours += mh;
        }
        for (team, p) in t.procs {
            self.accs[global[team]].1.insert(p);
        }
    }

    /// Idle figures from the idle-loaded findings; rounding and order.
    pub(super) fn finish(
        self,
        idle: &[IdleModel],
        allocated: &[AllocatedDevice],
        allocation_known: bool,
        prices: &Prices,
    ) -> Teams {
        let dimension = match (self.has_ns, self.has_job) {
            (true, true) => "namespace, else slurm_job",
            (true, false) => "namespace",
            (false, true) => "slurm_job",
            (false, false) => "none",
        };
        let self_teams: BTreeSet<String> = self.index.keys().cloned().collect();
        let mut accs: Vec<Option<(TeamUsage, BTreeSet<Proc>)>> =
            self.accs.into_iter().map(Some).collect();
        let mut out: Vec<TeamUsage> = self
            .index
            .into_values()
            .filter_map(|i| accs[i].take())
            .chain(
                // Teams that only held devices (no process of theirs ran): their own rows.
                allocated
                    .iter()
                    .filter_map(|d| d.team.clone())
                    .collect::<BTreeSet<String>>()
                    .into_iter()
                    .filter(|team| !self_teams.contains(team))
                    .map(|team| {
                        (
                            TeamUsage {
                                team,
                                ..TeamUsage::default()
                            },
                            BTreeSet::new(),
                        )
                    }),
            )
            .map(|(mut t, procs)| {
                t.processes = procs.len();
                if allocation_known {
                    let h: f64 = allocated
                        .iter()
                        .filter(|d| d.kind == "unused" && d.team.as_deref() == Some(&t.team))
                        .map(|d| d.wasted_gpu_hours)
                        .sum();
                    t.allocated_unused_gpu_hours = Some(r3(h));
                    t.allocated_unused_cost = Some(r2(r3(h) * prices.gpu_hour));
                }
                for m in idle.iter().filter(|m| m.team.as_deref() == Some(&t.team)) {
                    t.idle_gib_hours += m.idle_gib_hours;
                    t.idle_gpu_hours += m.reclaimable_gpu_hours;
                }
                t.gpu_hours = r3(t.gpu_hours);
                t.memory_gib_hours = r3(t.memory_gib_hours);
                t.idle_gib_hours = r3(t.idle_gib_hours);
                t.idle_gpu_hours = r3(t.idle_gpu_hours);
                t.idle_cost = r2(t.idle_gpu_hours * prices.gpu_hour);
                t.cost = r2(t.gpu_hours * prices.gpu_hour);
                t
            })
            .collect();
        out.sort_by(|a, b| {
            b.gpu_hours
                .total_cmp(&a.gpu_hours)
                .then(a.team.cmp(&b.team))
        });
        Teams {
            dimension: dimension.into(),
            rows: out,
            nobody: None,
            energy: None,
        }
    }
}

// ---- charts and per-GPU notes of one partition ---------------------------------------------
