//! The report's tallies, one node partition at a time: usage (fleet, previous period, by node,
//! by model), teams, charts and the per-GPU data-quality notes are folded over the partitions
//! in key order ([`build_parts`]), so that memory holds one partition's rows, not the fleet's.
//!
//! The result is the one a single pass over the union of the partitions gives, byte for byte:
//! partitions are keyed by node and come in node order, and the report reads rows in (node, GPU
//! index, model, `ts`) order, so every sum adds the same numbers in the same order. Where that
//! does not hold (a node in two partitions, GPUs out of order) [`build_parts`] builds over the
//! union instead, as one partition.
//!
//! Quantiles of groups that span partitions (fleet, previous period, GPU model) are exact, from
//! a histogram of 2^20 equal buckets over 0–1 (values outside, NaN and −0 are kept exactly, by
//! value): the rank's bucket decides the reported (3-decimal) value unless the bucket straddles a
//! rounding boundary; then a second pass reads the values of that bucket only. A node's and a
//! GPU's quantiles are taken from their values (one partition holds them). docs/report.md says
//! so.
//!
//! This module reads the lazy frames it is given and nothing else; it does not price findings
//! or plan MIG layouts (see the parent module).

use crate::stats::{nearest_rank, quantile};
use std::collections::{BTreeMap, BTreeSet, HashSet};

use chrono_tz::Tz;
use polars::prelude::*;

use super::*;
use crate::advisor::columns::{FastMap, FastSet, f64s, i64s, strs, ts_ms};
use crate::ingest::{Frames, fmt_ms};

/// One GPU row, as the report reads it.
#[derive(Clone, Copy)]
pub(super) struct Row {
    pub gpu: usize,
    pub ts: i64,
    pub interval: i64,
    pub activity: Option<f64>,
    pub sm: bool,
    pub mem: Option<f64>,
    pub total: Option<f64>,
    pub energy_j: Option<f64>,
    /// Status `lost` or `error`: the GPU was there but did not report values.
    pub lost: bool,
}

/// One GPU's identity.
#[derive(Clone)]
pub(super) struct Gpu {
    pub node: String,
    pub index: Option<i64>,
    pub model: String,
    pub source: String,
}

impl Gpu {
    pub fn label(&self) -> String {
        match self.index {
            Some(i) => format!("{}/GPU{i}", self.node),
            None => self.node.clone(),
        }
    }

    fn order(&self) -> (&str, Option<i64>, &str) {
        (&self.node, self.index, &self.model)
    }
}

/// The columns of the GPU table the tallies read.
pub(crate) const GPU_COLUMNS: &[&str] = &[
    "node",
    "uuid",
    "gpu",
    "model",
    "ts",
    "interval_ms",
    "busy_mean",
    "sm_active_mean",
    "memory_used_max_bytes",
    "memory_total_bytes",
    "power_mean_watts",
    "energy_delta_joules",
    "source",
    "status",
];

/// The columns of the process table the team tally reads.
pub(crate) const PROCESS_COLUMNS: &[&str] = &[
    "node",
    "uuid",
    "pid",
    "ts",
    "interval_ms",
    "namespace",
    "slurm_job_id",
    "memory_used_max_bytes",
];

/// Reads the GPU rows in `[from, until]`: the GPUs in (node, index, model) order and the rows
/// sorted by (GPU, `ts`).
fn gpu_rows(frames: &Frames, from: i64, until: i64) -> Result<(Vec<Gpu>, Vec<Row>), ReportError> {
    let df = frames
        .gpu
        .clone()
        .with_column(ts_ms())
        .filter(col("ts").gt_eq(lit(from)).and(col("ts").lt_eq(lit(until))))
        .select(GPU_COLUMNS.iter().map(|c| col(*c)).collect::<Vec<_>>())
        .collect()?;
    let n = df.height();
    let (status, node, uuid, model, source) = (
        strs(&df, "status")?,
        strs(&df, "node")?,
        strs(&df, "uuid")?,
        strs(&df, "model")?,
        strs(&df, "source")?,
    );
    // Rows keyed by string ids (a string is read once per distinct view, not per row).
    let (status_ids, node_ids, uuid_ids) = (status.ids(), node.ids(), uuid.ids());
    let lost_status: Vec<bool> = status_ids
        .strings
        .iter()
        .map(|s| matches!(*s, "lost" | "error"))
        .collect();
    let (gpu, ts, interval) = (
        i64s(&df, "gpu")?,
        i64s(&df, "ts")?,
        i64s(&df, "interval_ms")?,
    );
    let (busy, sm, mem, total, power, energy) = (
        f64s(&df, "busy_mean")?,
        f64s(&df, "sm_active_mean")?,
        f64s(&df, "memory_used_max_bytes")?,
        f64s(&df, "memory_total_bytes")?,
        f64s(&df, "power_mean_watts")?,
        f64s(&df, "energy_delta_joules")?,
    );
    type IdKey = (Option<u32>, Option<u32>, Option<i64>);
    let mut ids: FastMap<IdKey, usize> = FastMap::default();
    let mut gpus = Vec::new();
    let mut rows = Vec::with_capacity(n);
    for i in 0..n {
        let key = (node_ids.at(i), uuid_ids.at(i), gpu.get(i));
        let g = *ids.entry(key).or_insert_with(|| {
            gpus.push(Gpu {
                node: node_ids.get(i).unwrap_or("?").to_string(),
                index: gpu.get(i),
                model: model.get(i).unwrap_or("unknown").to_string(),
                source: source.get(i).unwrap_or("").to_string(),
            });
            gpus.len() - 1
        });
        let interval = interval.get(i).unwrap_or(0).max(0);
        let (activity, is_sm) = match (sm.get(i), busy.get(i)) {
            (Some(s), _) => (Some(s), true),
            (None, Some(b)) => (Some(b), false),
            _ => (None, false),
        };
        let energy_j = energy
            .get(i)
            .or_else(|| power.get(i).map(|w| w * interval as f64 / 1000.0));
        rows.push(Row {
            gpu: g,
            ts: ts.get(i).unwrap_or(0),
            interval,
            activity,
            sm: is_sm,
            mem: mem.get(i),
            total: total.get(i),
            energy_j,
            lost: status_ids.at(i).is_some_and(|s| lost_status[s as usize]),
        });
    }
    // Stable GPU order: node, index.
    let mut order: Vec<usize> = (0..gpus.len()).collect();
    order.sort_by(|&a, &b| gpus[a].order().cmp(&gpus[b].order()));
    let mut rank = vec![0; gpus.len()];
    for (r, &g) in order.iter().enumerate() {
        rank[g] = r;
    }
    let gpus: Vec<Gpu> = order.iter().map(|&g| gpus[g].clone()).collect();
    // Sorted by (GPU, ts), stably: rows bucketed by GPU in frame order, then each bucket sorted
    // by ts unless it already is (a node's files are in time order).
    let mut counts = vec![0usize; gpus.len() + 1];
    for r in &rows {
        counts[rank[r.gpu] + 1] += 1;
    }
    for g in 1..counts.len() {
        counts[g] += counts[g - 1];
    }
    let mut at = counts.clone();
    let mut index = vec![0usize; rows.len()];
    for (i, r) in rows.iter_mut().enumerate() {
        r.gpu = rank[r.gpu];
        index[at[r.gpu]] = i;
        at[r.gpu] += 1;
    }
    let mut rows: Vec<Row> = index.into_iter().map(|i| rows[i]).collect();
    for w in counts.windows(2) {
        let bucket = &mut rows[w[0]..w[1]];
        if !bucket.windows(2).all(|p| p[0].ts <= p[1].ts) {
            bucket.sort_by_key(|r| r.ts);
        }
    }
    Ok((gpus, rows))
}

// ---- exact quantiles over partitions --------------------------------------------------------

/// Buckets of the histogram over [0, 1): 2^20, each 2^-20 wide (exact in binary).
const BUCKETS: usize = 1 << 20;

/// f64 bits ordered as `total_cmp` orders the values.
fn total_key(v: f64) -> i64 {
    let b = v.to_bits() as i64;
    b ^ (((b >> 63) as u64) >> 1) as i64
}

fn from_total_key(k: i64) -> f64 {
    f64::from_bits((k ^ (((k >> 63) as u64) >> 1) as i64) as u64)
}

/// The values of one group: a histogram of [0, 1) plus the exact values outside it.
#[derive(Default)]
struct Hist {
    n: u64,
    /// Values ordered before +0 (negative, −0, −NaN), by total order key.
    below: BTreeMap<i64, u64>,
    buckets: Vec<u64>,
    /// Values from 1 up (and +NaN), by total order key.
    above: BTreeMap<i64, u64>,
}

/// Where the rank of a quantile falls.
enum Found {
    Value(f64),
    /// In bucket `k`, at `rank` among the bucket's values.
    Bucket {
        k: usize,
        rank: u64,
    },
}

fn bucket_of(v: f64) -> Option<usize> {
    (v.is_sign_positive() && v < 1.0).then(|| ((v * BUCKETS as f64) as usize).min(BUCKETS - 1))
}

impl Hist {
    fn add(&mut self, v: f64) {
        self.n += 1;
        match bucket_of(v) {
            Some(k) => {
                if self.buckets.is_empty() {
                    self.buckets = vec![0; BUCKETS];
                }
                self.buckets[k] += 1;
            }
            None if v.is_sign_negative() => *self.below.entry(total_key(v)).or_default() += 1,
            None => *self.above.entry(total_key(v)).or_default() += 1,
        }
    }

    fn find(&self, mut rank: u64) -> Found {
        for (&k, &c) in &self.below {
            if rank < c {
                return Found::Value(from_total_key(k));
            }
            rank -= c;
        }
        for (k, &c) in self.buckets.iter().enumerate() {
            if rank < c {
                return Found::Bucket { k, rank };
            }
            rank -= c;
        }
        for (&k, &c) in &self.above {
            if rank < c {
                return Found::Value(from_total_key(k));
            }
            rank -= c;
        }
        Found::Value(f64::NAN)
    }
}

/// The reported (rounded) quantile `q` of a histogram, or the bucket whose values a second pass
/// must read (and the rank among them) when the bucket straddles a rounding boundary.
fn rounded_quantile(h: &Hist, q: f64) -> Result<Option<f64>, (usize, u64)> {
    if h.n == 0 {
        return Ok(None);
    }
    match h.find(nearest_rank(h.n, q)) {
        Found::Value(v) => Ok(Some(r3(v))),
        Found::Bucket { k, rank } => {
            let lo = k as f64 / BUCKETS as f64;
            let hi = f64::from_bits(((k + 1) as f64 / BUCKETS as f64).to_bits() - 1);
            // r3 is monotone: equal at both ends, equal for every value in between.
            if r3(lo).to_bits() == r3(hi).to_bits() {
                Ok(Some(r3(lo)))
            } else {
                Err((k, rank))
            }
        }
    }
}

/// How a group's quantile is kept: every value (a group inside one partition) or a histogram.
enum Values {
    All(Vec<f64>),
    Hist(Hist),
}

/// A [`Usage`] being summed, row by row in report order.
struct UsageAcc {
    key: String,
    gpus: BTreeSet<usize>,
    /// The GPU of the last row added (rows come GPU by GPU): no set insert for its next rows.
    last_gpu: Option<usize>,
    observed: f64,
    busy: f64,
    allocated: f64,
    act_w: f64,
    act_t: f64,
    mem_share: f64,
    mem_n: usize,
    energy: Option<f64>,
    peak: Option<f64>,
    values: Values,
}

impl UsageAcc {
    fn new(key: &str, exact: bool) -> UsageAcc {
        UsageAcc {
            key: key.to_string(),
            gpus: BTreeSet::new(),
            last_gpu: None,
            observed: 0.0,
            busy: 0.0,
            allocated: 0.0,
            act_w: 0.0,
            act_t: 0.0,
            mem_share: 0.0,
            mem_n: 0,
            energy: None,
            peak: None,
            values: if exact {
                Values::All(Vec::new())
            } else {
                Values::Hist(Hist::default())
            },
        }
    }

    fn add(&mut self, gpu: usize, r: &Row) {
        if self.last_gpu != Some(gpu) {
            self.gpus.insert(gpu);
            self.last_gpu = Some(gpu);
        }
        let h = r.interval as f64 / HOUR_MS;
        self.observed += h;
        if let Some(a) = r.activity {
            match &mut self.values {
                Values::All(v) => v.push(a),
                Values::Hist(hist) => hist.add(a),
            }
            self.act_w += a * h;
            self.act_t += h;
            self.busy += a * h;
        }
        let held = r.mem.is_some_and(|m| m >= FREE_MEMORY);
        if held || r.activity.is_some_and(|a| a > FREE_ACTIVITY) {
            self.allocated += h;
        }
        if let (Some(m), Some(t)) = (r.mem, r.total)
            && t > 0.0
        {
            self.mem_share += m / t;
            self.mem_n += 1;
        }
        if let Some(m) = r.mem {
            self.peak = Some(self.peak.map_or(m, |p: f64| p.max(m)));
        }
        if let Some(e) = r.energy_j {
            *self.energy.get_or_insert(0.0) += e;
        }
    }

    /// The quantile, or the histogram bucket a second pass must read.
    fn p95(&mut self) -> Result<Option<f64>, (usize, u64)> {
        match &mut self.values {
            Values::All(v) => Ok(quantile(v, 0.95).map(r3)),
            Values::Hist(h) => rounded_quantile(h, 0.95),
        }
    }

    fn finish(self, p95: Option<f64>, hours: f64, prices: &Prices) -> Usage {
        let mut u = Usage {
            key: self.key,
            ..Usage::default()
        };
        u.gpus = self.gpus.len();
        u.gpu_hours_available = r3(u.gpus as f64 * hours);
        u.gpu_hours_observed = r3(self.observed);
        u.gpu_hours_allocated = r3(self.allocated);
        u.gpu_hours_busy = r3(self.busy);
        u.activity_mean = (self.act_t > 0.0).then(|| r3(self.act_w / self.act_t));
        u.activity_p95 = p95;
        u.memory_used_share = (self.mem_n > 0).then(|| r3(self.mem_share / self.mem_n as f64));
        u.memory_peak_gib = self.peak.map(|p| r3(p / GIB));
        u.energy_kwh = self.energy.map(|j| r3(j / 3.6e6));
        u.cost_gpu_hours = r2(u.gpu_hours_available * prices.gpu_hour);
        u.cost_energy = r2(u.energy_kwh.unwrap_or(0.0) * prices.kwh);
        u.cost_total = r2(u.cost_gpu_hours + u.cost_energy);
        u
    }
}

// ---- teams ----------------------------------------------------------------------------------

/// A process's identity: node and pid.
type Proc = (Option<String>, Option<i64>);

/// Team usage being summed over the process rows, in frame order.
#[derive(Default)]
struct TeamsAcc {
    has_ns: bool,
    has_job: bool,
    /// Team name → its entry in `accs`.
    index: BTreeMap<String, usize>,
    accs: Vec<(TeamUsage, BTreeSet<Proc>)>,
}

/// One partition's process rows as the team tally adds them: per row its team (an index into
/// `names`), GPU-hours and GiB-hours, in frame order; the distinct processes of each team.
struct TeamRows {
    names: Vec<String>,
    has_ns: bool,
    has_job: bool,
    rows: Vec<(usize, f64, f64)>,
    procs: Vec<(usize, Proc)>,
}

/// Reads one partition's process rows for the team tally (no shared state: runs on a worker).
fn team_rows(frames: &Frames, range: (i64, i64)) -> Result<TeamRows, ReportError> {
    let mut out = TeamRows {
        names: Vec::new(),
        has_ns: false,
        has_job: false,
        rows: Vec::new(),
        procs: Vec::new(),
    };
    {
        let df = frames
            .process
            .clone()
            .with_column(ts_ms())
            .filter(
                col("ts")
                    .gt(lit(range.0))
                    .and(col("ts").lt_eq(lit(range.1))),
            )
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
        let (node, uuid, ns, job) = (node.ids(), uuid.ids(), ns.ids(), job.ids());
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
        let mut block = 0;
        while block < n {
            let end = if in_order {
                let t = ts.get(block);
                (block..n).find(|&i| ts.get(i) != t).unwrap_or(n)
            } else {
                n
            };
            per_gpu.clear();
            for i in block..end {
                *per_gpu
                    .entry((node.at(i), uuid.at(i), ts.get(i)))
                    .or_default() += 1;
            }
            share.extend((block..end).map(|i| per_gpu[&(node.at(i), uuid.at(i), ts.get(i))]));
            block = end;
        }
        // Team names by (namespace, job), made once each; processes seen, by team.
        let mut names: FastMap<(Option<u32>, Option<u32>), usize> = FastMap::default();
        let mut seen: FastSet<(usize, Option<u32>, Option<i64>)> = FastSet::default();
        for (i, &k) in share.iter().enumerate() {
            out.has_ns |= ns.at(i).is_some();
            out.has_job |= job.at(i).is_some();
            let t = *names.entry((ns.at(i), job.at(i))).or_insert_with(|| {
                out.names.push(
                    team_of(ns.get(i), job.get(i)).unwrap_or_else(|| "(unattributed)".into()),
                );
                out.names.len() - 1
            });
            let h = interval.get(i).unwrap_or(0).max(0) as f64 / HOUR_MS;
            let k = k.max(1);
            out.rows
                .push((t, h / f64::from(k), mem.get(i).unwrap_or(0.0) / GIB * h));
            if seen.insert((t, node.at(i), pid.get(i))) {
                out.procs
                    .push((t, (node.get(i).map(str::to_string), pid.get(i))));
            }
        }
    }
    Ok(out)
}

impl TeamsAcc {
    /// Adds one partition's rows, in order.
    fn fold(&mut self, t: TeamRows) {
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
    fn finish(self, idle: &[IdleModel], prices: &Prices) -> Teams {
        let dimension = match (self.has_ns, self.has_job) {
            (true, true) => "namespace, else slurm_job",
            (true, false) => "namespace",
            (false, true) => "slurm_job",
            (false, false) => "none",
        };
        let mut accs: Vec<Option<(TeamUsage, BTreeSet<Proc>)>> =
            self.accs.into_iter().map(Some).collect();
        let mut out: Vec<TeamUsage> = self
            .index
            .into_values()
            .filter_map(|i| accs[i].take())
            .map(|(mut t, procs)| {
                t.processes = procs.len();
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
        }
    }
}

// ---- charts and per-GPU notes of one partition ---------------------------------------------

/// Per-GPU activity distributions of one partition's GPUs (those with rows).
fn gpu_activity(gpus: &[Gpu], per: &[Vec<&Row>]) -> Vec<GpuActivity> {
    gpus.iter()
        .zip(per)
        .filter(|(_, rs)| !rs.is_empty())
        .map(|(g, rs)| {
            let mut acts: Vec<f64> = rs.iter().filter_map(|r| r.activity).collect();
            let mut hist = [0.0; 10];
            let mut t = 0.0;
            for r in rs {
                if let Some(a) = r.activity {
                    hist[((a * 10.0) as usize).min(9)] += r.interval as f64;
                    t += r.interval as f64;
                }
            }
            let mean = (!acts.is_empty()).then(|| r3(acts.iter().sum::<f64>() / acts.len() as f64));
            GpuActivity {
                gpu: g.label(),
                model: g.model.clone(),
                mean,
                p50: quantile(&mut acts, 0.5).map(r3),
                p95: quantile(&mut acts, 0.95).map(r3),
                histogram: hist
                    .iter()
                    .map(|h| if t > 0.0 { r3(h / t) } else { 0.0 })
                    .collect(),
            }
        })
        .collect()
}

/// Free-capacity timeline counts of one partition: per UTC hour of the range, (GPUs with rows,
/// GPUs whose rows all held < 1 GiB and showed ≤ 5% activity, covering at least half the hour).
fn free_counts(rows: &[&Row], range: (i64, i64), timeline: &mut [(u32, u32)]) {
    let first_hour = range.0.div_euclid(3_600_000);
    let nh = timeline.len();
    // Per hour of the current GPU (rows come GPU by GPU): (covered ms, all free, seen).
    let mut cells: Vec<(i64, bool, bool)> = vec![(0, true, false); nh];
    let flush = |cells: &mut Vec<(i64, bool, bool)>, timeline: &mut [(u32, u32)]| {
        for (h, c) in cells.iter_mut().enumerate() {
            if c.2 {
                timeline[h].0 += 1;
                if c.1 && c.0 >= 1_800_000 {
                    timeline[h].1 += 1;
                }
            }
            *c = (0, true, false);
        }
    };
    let mut gpu = None;
    for r in rows {
        if gpu != Some(r.gpu) {
            if gpu.is_some() {
                flush(&mut cells, timeline);
            }
            gpu = Some(r.gpu);
        }
        let h = (r.ts - 1).div_euclid(3_600_000) - first_hour;
        if h < 0 || h as usize >= nh {
            continue;
        }
        let free =
            r.mem.is_some_and(|m| m < FREE_MEMORY) && r.activity.is_none_or(|a| a <= FREE_ACTIVITY);
        let c = &mut cells[h as usize];
        c.0 += r.interval;
        c.1 &= free;
        c.2 = true;
    }
    flush(&mut cells, timeline);
}

/// Per-GPU data-quality notes of one partition (`status`, `stopped`, in GPU order) and its
/// gaps (label, count, hours missing), sorted with every partition's at the end.
fn gpu_notes(
    gpus: &[Gpu],
    per: &[Vec<&Row>],
    range: (i64, i64),
    notes: &mut Vec<QualityNote>,
    gaps: &mut Vec<(String, usize, f64)>,
) {
    let mut note = |kind: &str, message: String| {
        notes.push(QualityNote {
            kind: kind.into(),
            message,
        })
    };
    for (g, rs) in gpus.iter().zip(per) {
        let Some(last) = rs.last() else { continue };
        let (mut n, mut missing) = (0usize, 0i64);
        for w in rs.windows(2) {
            let step = w[1].interval.max(1);
            let d = w[1].ts - w[0].ts;
            // What breaks a detector's span is a gap here too (advisor::breaks_span).
            if crate::advisor::breaks_span(
                d,
                step,
                crate::advisor::idle::IdleParams::default().max_gap_intervals,
            ) {
                n += 1;
                missing += d - step;
            }
        }
        if n > 0 {
            gaps.push((g.label(), n, missing as f64 / HOUR_MS));
        }
        let lost: i64 = rs.iter().filter(|r| r.lost).map(|r| r.interval).sum();
        if lost > 0 {
            note(
                "status",
                format!(
                    "{} ({}) was lost or in error for {:.1} h (rows without values)",
                    g.label(),
                    g.model,
                    lost as f64 / HOUR_MS
                ),
            );
        }
        if range.1 - last.ts > 2 * last.interval.max(60_000) {
            note(
                "stopped",
                format!(
                    "{} ({}) stopped reporting at {} ({:.1} h before the end)",
                    g.label(),
                    g.model,
                    fmt_ms(last.ts),
                    (range.1 - last.ts) as f64 / HOUR_MS
                ),
            );
        }
    }
}

// ---- the fold -------------------------------------------------------------------------------

/// Everything summed over the partitions so far.
struct Tally {
    range: (i64, i64),
    /// GPUs of every partition read so far, in report order.
    gpus: Vec<Gpu>,
    nodes: HashSet<String>,
    sources: BTreeSet<String>,
    n_sm: u64,
    n_busy: u64,
    fleet: UsageAcc,
    previous: UsageAcc,
    has_previous: bool,
    by_node: Vec<Usage>,
    by_model: BTreeMap<String, UsageAcc>,
    teams: TeamsAcc,
    hour_of_week: Vec<Vec<(f64, f64)>>,
    gpu_activity: Vec<GpuActivity>,
    timeline: Vec<(u32, u32)>,
    gpu_notes: Vec<QualityNote>,
    gaps: Vec<(String, usize, f64)>,
}

/// A partition's GPUs do not follow the previous partitions' in report order.
struct OutOfOrder;

impl Tally {
    fn new(range: (i64, i64)) -> Tally {
        let first_hour = range.0.div_euclid(3_600_000);
        let last_hour = (range.1 - 1).div_euclid(3_600_000);
        let nh = (last_hour - first_hour + 1).max(0) as usize;
        Tally {
            range,
            gpus: Vec::new(),
            nodes: HashSet::new(),
            sources: BTreeSet::new(),
            n_sm: 0,
            n_busy: 0,
            fleet: UsageAcc::new("fleet", false),
            previous: UsageAcc::new("previous", false),
            has_previous: false,
            by_node: Vec::new(),
            by_model: BTreeMap::new(),
            teams: TeamsAcc::default(),
            hour_of_week: vec![vec![(0.0, 0.0); 24]; 7],
            gpu_activity: Vec::new(),
            timeline: vec![(0, 0); nh],
            gpu_notes: Vec::new(),
            gaps: Vec::new(),
        }
    }

    /// Adds one partition's prepared rows; `Err(OutOfOrder)` when its GPUs do not come after
    /// the previous partitions' in report order (nothing was added then).
    fn fold(&mut self, p: Prepared) -> Result<(), OutOfOrder> {
        let start = self.range.0;
        // Report order across partitions: each partition's GPUs after the last one's, and no
        // node in two partitions.
        if let (Some(last), Some(first)) = (self.gpus.last(), p.gpus.first())
            && last.order() >= first.order()
        {
            return Err(OutOfOrder);
        }
        let local: BTreeSet<&str> = p.gpus.iter().map(|g| g.node.as_str()).collect();
        if local.iter().any(|n| self.nodes.contains(*n)) {
            return Err(OutOfOrder);
        }
        self.nodes.extend(local.into_iter().map(str::to_string));
        let base = self.gpus.len();
        self.sources.extend(p.gpus.iter().map(|g| g.source.clone()));
        let mut slots = p.slots.iter();
        // The model's accumulator, looked up once per GPU (rows come GPU by GPU).
        let mut model: Option<(usize, &mut UsageAcc)> = None;
        for r in &p.rows {
            if r.ts <= start {
                self.has_previous = true;
                self.previous.add(base + r.gpu, r);
                continue;
            }
            match r.activity {
                Some(_) if r.sm => self.n_sm += 1,
                Some(_) => self.n_busy += 1,
                None => {}
            }
            let g = &p.gpus[r.gpu];
            self.fleet.add(base + r.gpu, r);
            let acc = match model {
                Some((gpu, acc)) if gpu == r.gpu => acc,
                _ => self
                    .by_model
                    .entry(g.model.clone())
                    .or_insert_with(|| UsageAcc::new(&g.model, false)),
            };
            acc.add(base + r.gpu, r);
            model = Some((r.gpu, acc));
            // Hour-of-week heatmap of mean activity (the row's start decides its hour).
            if let (Some(a), Some(Some((d, h)))) = (r.activity, slots.next()) {
                let w = r.interval as f64;
                self.hour_of_week[*d][*h].0 += a * w;
                self.hour_of_week[*d][*h].1 += w;
            }
        }
        self.by_node.extend(p.by_node);
        self.gpu_activity.extend(p.gpu_activity);
        for (t, (g, f)) in self.timeline.iter_mut().zip(p.timeline) {
            t.0 += g;
            t.1 += f;
        }
        self.gpu_notes.extend(p.notes);
        self.gaps.extend(p.gaps);
        self.teams.fold(p.teams);
        self.gpus.extend(p.gpus);
        Ok(())
    }
}

/// One partition read and reduced as far as it can be alone (on a worker thread): its GPUs and
/// rows in report order, the hour-of-week slot of each current row, its nodes' usage (a node's
/// rows are all in one partition), its GPUs' charts and notes, its team rows.
struct Prepared {
    gpus: Vec<Gpu>,
    rows: Vec<Row>,
    /// Per current row (`ts` after the start), in order.
    slots: Vec<Option<(usize, usize)>>,
    by_node: Vec<Usage>,
    gpu_activity: Vec<GpuActivity>,
    timeline: Vec<(u32, u32)>,
    notes: Vec<QualityNote>,
    gaps: Vec<(String, usize, f64)>,
    teams: TeamRows,
}

fn prepare(
    frames: &Frames,
    range: (i64, i64),
    tz: &Tz,
    hours: f64,
    prices: &Prices,
) -> Result<Prepared, ReportError> {
    let (start, end) = range;
    let len = (end - start).max(0);
    let (gpus, rows) = gpu_rows(frames, start - len + 1, end)?;
    let cur: Vec<&Row> = rows.iter().filter(|r| r.ts > start).collect();
    let mut cache: FastMap<i64, Option<(usize, usize)>> = FastMap::default();
    let slots = cur
        .iter()
        .map(|r| {
            *cache
                .entry(r.ts - r.interval)
                .or_insert_with(|| slot_of(r.ts - r.interval, tz))
        })
        .collect();
    // Per node (GPUs are in node order, so a node's accumulator is found by its GPU's index; the
    // nodes come out in the same order a map keyed by node gives).
    let mut node_of: Vec<usize> = Vec::with_capacity(gpus.len());
    let mut node_names: Vec<&str> = Vec::new();
    for g in &gpus {
        if node_names.last() != Some(&g.node.as_str()) {
            node_names.push(&g.node);
        }
        node_of.push(node_names.len() - 1);
    }
    let mut by_node: Vec<Option<UsageAcc>> = node_names.iter().map(|_| None).collect();
    for r in &cur {
        by_node[node_of[r.gpu]]
            .get_or_insert_with(|| UsageAcc::new(&gpus[r.gpu].node, true))
            .add(r.gpu, r);
    }
    let by_node = by_node
        .into_iter()
        .flatten()
        .map(|mut acc| {
            let p95 = acc.p95().unwrap_or(None);
            acc.finish(p95, hours, prices)
        })
        .collect();
    let mut per: Vec<Vec<&Row>> = vec![Vec::new(); gpus.len()];
    for r in &cur {
        per[r.gpu].push(r);
    }
    let gpu_activity = gpu_activity(&gpus, &per);
    let first_hour = start.div_euclid(3_600_000);
    let last_hour = (end - 1).div_euclid(3_600_000);
    let mut timeline = vec![(0, 0); (last_hour - first_hour + 1).max(0) as usize];
    free_counts(&cur, range, &mut timeline);
    let (mut notes, mut gaps) = (Vec::new(), Vec::new());
    gpu_notes(&gpus, &per, range, &mut notes, &mut gaps);
    let teams = team_rows(frames, range)?;
    drop(per);
    drop(cur);
    Ok(Prepared {
        gpus,
        rows,
        slots,
        by_node,
        gpu_activity,
        timeline,
        notes,
        gaps,
        teams,
    })
}

/// Partitions prepared ahead of the next one in order, at most (each holds its rows until it is
/// folded): [`PartTally::add`] waits beyond that.
const AHEAD: usize = 8;

/// The report's tallies built one partition at a time, from any number of threads: each
/// [`add`](PartTally::add) reads and reduces its partition on the calling thread, and the
/// partitions are folded in partition order (the one order that keeps the output byte-identical
/// to the union's). [`finish`](PartTally::finish) makes the report.
pub struct PartTally {
    range: (i64, i64),
    tz: Tz,
    hours: f64,
    prices: Prices,
    state: std::sync::Mutex<FoldState>,
    turn: std::sync::Condvar,
}

struct FoldState {
    tally: Tally,
    /// The partition to fold next, and those prepared ahead of it.
    next: usize,
    pending: BTreeMap<usize, Prepared>,
    /// A partition's GPUs were not after the previous ones': [`PartTally::finish`] reads the
    /// union instead.
    out_of_order: bool,
    /// A partition failed: the others stop waiting.
    aborted: bool,
}

/// Aborts the tally when dropped before [`AbortGuard::disarm`] (an error or a panic on a worker),
/// so that no other worker waits for a partition that will not come.
pub struct AbortGuard<'a>(&'a PartTally, bool);

impl AbortGuard<'_> {
    /// The partition was added: nothing to abort.
    pub fn disarm(mut self) {
        self.1 = false;
    }
}

impl Drop for AbortGuard<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.abort();
        }
    }
}

impl PartTally {
    /// Tallies of the report range `(start, end]` (rows may reach back one period before
    /// `start`: the previous period), with the report's time zone and prices.
    pub fn new(range: (i64, i64), tz: Tz, prices: Prices) -> PartTally {
        let len = (range.1 - range.0).max(0);
        PartTally {
            range,
            tz,
            hours: len as f64 / HOUR_MS,
            prices,
            state: std::sync::Mutex::new(FoldState {
                tally: Tally::new(range),
                next: 0,
                pending: BTreeMap::new(),
                out_of_order: false,
                aborted: false,
            }),
            turn: std::sync::Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FoldState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A guard that aborts the tally unless disarmed: a caller that must add partition `i` holds
    /// one from before its own work on `i` that can fail.
    pub fn guard(&self) -> AbortGuard<'_> {
        AbortGuard(self, true)
    }

    /// Stops the tally: workers waiting to add stop waiting, and [`finish`](PartTally::finish)
    /// is not to be called (the error that caused it is the caller's).
    pub fn abort(&self) {
        self.lock().aborted = true;
        self.turn.notify_all();
    }

    /// Reads and reduces partition `i` (partitions are numbered from 0 in report order, each
    /// added exactly once, from any thread) and folds every partition that is next in order.
    /// Waits while `i` is [`AHEAD`] or more partitions past the next one to fold. Returns the
    /// number of partitions folded so far.
    pub fn add(&self, i: usize, frames: &Frames) -> Result<usize, ReportError> {
        let guard = self.guard();
        {
            let st = self.lock();
            let st = self
                .turn
                .wait_while(st, |s| !s.aborted && !s.out_of_order && i >= s.next + AHEAD)
                .unwrap_or_else(|e| e.into_inner());
            if st.aborted || st.out_of_order {
                // Nothing more to fold (the union is read instead, or the run failed).
                let n = st.next;
                drop(st);
                guard.disarm();
                return Ok(n);
            }
        }
        let p = prepare(frames, self.range, &self.tz, self.hours, &self.prices)?;
        let mut st = self.lock();
        st.pending.insert(i, p);
        loop {
            let next = st.next;
            let Some(p) = st.pending.remove(&next) else {
                break;
            };
            if !st.out_of_order && st.tally.fold(p).is_err() {
                st.out_of_order = true;
                st.pending.clear();
            }
            st.next += 1;
        }
        let n = st.next;
        drop(st);
        self.turn.notify_all();
        guard.disarm();
        Ok(n)
    }

    /// The report over the partitions added (`parts`: the same partitions, in the same order,
    /// for the second pass of an exact quantile and for the union when they were out of order).
    pub fn finish(self, parts: &[&Frames], input: &ReportInput) -> Result<Report, ReportError> {
        let st = self.state.into_inner().unwrap_or_else(|e| e.into_inner());
        if st.aborted {
            return Err(ReportError::Frames(crate::advisor::AdvisorError::Worker));
        }
        if st.out_of_order || st.next != parts.len() {
            // Not in report order: the union, as one partition.
            let union = Frames::union(parts.iter().map(|f| (*f).clone()))?;
            return build_parts(&[&union], input);
        }
        finish(st.tally, parts, input)
    }
}

/// Builds the report over the partitions' rows with `ts` in `input.range` = `(start, end]`
/// (the frames may reach back before `start`: the period of the same length before it is
/// reported when it has rows), reading one partition at a time. See the module documentation.
pub fn build_parts(parts: &[&Frames], input: &ReportInput) -> Result<Report, ReportError> {
    build_parts_with(parts, input, &|_| {})
}

/// [`build_parts`], calling `on_done(n)` after the `n`-th partition (progress on a terminal).
pub fn build_parts_with(
    parts: &[&Frames],
    input: &ReportInput,
    on_done: &(dyn Fn(usize) + Sync),
) -> Result<Report, ReportError> {
    let tally = PartTally::new(input.range, input.tz, input.prices.clone());
    // Partitions are read and reduced on a few threads (each its own rows) and folded in order:
    // memory holds the partitions in flight and those prepared ahead.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
        .min(parts.len().max(1));
    let queue = std::sync::Mutex::new(parts.iter().enumerate());
    let results: Vec<Result<(), ReportError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| -> Result<(), ReportError> {
                    loop {
                        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                        let Some((i, f)) = next else { return Ok(()) };
                        on_done(tally.add(i, f)?);
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or(Err(ReportError::Frames(
                    crate::advisor::AdvisorError::Worker,
                )))
            })
            .collect()
    });
    for r in results {
        r?;
    }
    tally.finish(parts, input)
}

/// The report from the tallies of every partition, in order.
fn finish(mut t: Tally, parts: &[&Frames], input: &ReportInput) -> Result<Report, ReportError> {
    let (start, end) = input.range;
    let len = (end - start).max(0);
    let hours = len as f64 / HOUR_MS;
    let prices = &input.prices;
    let signal = match (t.n_sm, t.n_busy) {
        (0, 0) => "none",
        (_, 0) => "sm_active",
        (0, _) => "busy",
        _ => "sm_active, else busy",
    };
    // Quantiles of the groups that span partitions; a second pass reads the values of a
    // bucket that straddles a rounding boundary.
    let mut fleet_p95 = t.fleet.p95();
    let mut previous_p95 = t.previous.p95();
    let mut model_p95: BTreeMap<String, Result<Option<f64>, (usize, u64)>> = t
        .by_model
        .iter_mut()
        .map(|(k, acc)| (k.clone(), acc.p95()))
        .collect();
    let pending = |r: &Result<Option<f64>, (usize, u64)>| r.as_ref().err().map(|e| e.0);
    if fleet_p95.is_err() || previous_p95.is_err() || model_p95.values().any(|r| r.is_err()) {
        let (fk, pk) = (pending(&fleet_p95), pending(&previous_p95));
        let mk: BTreeMap<&str, usize> = model_p95
            .iter()
            .filter_map(|(m, r)| pending(r).map(|k| (m.as_str(), k)))
            .collect();
        let (mut fv, mut pv) = (Vec::new(), Vec::new());
        let mut mv: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for frames in parts {
            let (gpus, rows) = gpu_rows(frames, start - len + 1, end)?;
            for r in &rows {
                let Some(a) = r.activity else { continue };
                let k = bucket_of(a);
                if r.ts <= start {
                    if k.is_some() && k == pk {
                        pv.push(a);
                    }
                    continue;
                }
                if k.is_some() && k == fk {
                    fv.push(a);
                }
                let model = gpus[r.gpu].model.as_str();
                if let Some(&mk) = mk.get(model)
                    && k == Some(mk)
                {
                    mv.entry(model.to_string()).or_default().push(a);
                }
            }
        }
        let pick = |r: &mut Result<Option<f64>, (usize, u64)>, mut v: Vec<f64>| {
            if let Err((_, rank)) = *r {
                v.sort_by(|a, b| a.total_cmp(b));
                *r = Ok(v.get(rank as usize).copied().map(r3));
            }
        };
        pick(&mut fleet_p95, fv);
        pick(&mut previous_p95, pv);
        for (m, r) in model_p95.iter_mut() {
            let v = mv.remove(m.as_str()).unwrap_or_default();
            pick(r, v);
        }
    }
    let fleet = t.fleet.finish(fleet_p95.unwrap_or(None), hours, prices);
    let previous_period = t.has_previous.then(|| {
        t.previous
            .finish(previous_p95.unwrap_or(None), hours, prices)
    });
    let by_model = t
        .by_model
        .into_iter()
        .map(|(k, acc)| {
            let p95 = model_p95.remove(&k).and_then(|r| r.ok()).flatten();
            acc.finish(p95, hours, prices)
        })
        .collect();
    let idle = idle_models(input.analysis, prices);
    let teams = t.teams.finish(&idle, prices);
    let offpeak_windows = offpeak(input.analysis);
    let offpeak_baseline = offpeak_baseline(input.analysis);
    // Charts.
    let hour_of_week = t
        .hour_of_week
        .iter()
        .map(|day| {
            day.iter()
                .map(|&(s, w)| (w > 0.0).then(|| r3(s / w)))
                .collect()
        })
        .collect();
    let slots = window_slots(&offpeak_windows);
    let first_hour = start.div_euclid(3_600_000);
    let free_timeline = t
        .timeline
        .iter()
        .enumerate()
        .map(|(i, &(g, f))| {
            let start = (first_hour + i as i64) * 3_600_000;
            let level =
                slot_of(start, &input.tz).and_then(|(d, h)| slots.get(&(d * 24 + h)).copied());
            FreeHour {
                hour: fmt_ms(start),
                gpus: g,
                free_gpus: f,
                offpeak: level.is_some(),
                offpeak_free_gpus: level,
            }
        })
        .collect();
    let charts = Charts {
        hour_of_week,
        gpu_activity: t.gpu_activity,
        free_timeline,
    };
    let data_quality = data_quality(&t.sources, t.gpu_notes, t.gaps, input, signal, &teams);
    Ok(Report {
        version: REPORT_VERSION,
        from: fmt_ms(start),
        until: fmt_ms(end),
        hours: r3(hours),
        tz: input.tz.name().to_string(),
        sources: input.sources.clone(),
        prices: prices.clone(),
        activity_signal: signal.into(),
        fleet,
        previous_period,
        by_node: t.by_node,
        by_model,
        teams,
        idle_models: idle.into_iter().take(input.top).collect(),
        consolidation: consolidation(input.analysis, prices),
        offpeak_windows,
        offpeak_baseline,
        mig: None,
        data_quality,
        charts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(values: &[f64], q: f64) -> Option<f64> {
        quantile(&mut values.to_vec(), q).map(r3)
    }

    fn via_hist(values: &[f64], q: f64) -> Option<f64> {
        let mut h = Hist::default();
        for &v in values {
            h.add(v);
        }
        match rounded_quantile(&h, q) {
            Ok(r) => r,
            Err((k, rank)) => {
                let mut v: Vec<f64> = values
                    .iter()
                    .copied()
                    .filter(|&v| bucket_of(v) == Some(k))
                    .collect();
                v.sort_by(|a, b| a.total_cmp(b));
                v.get(rank as usize).copied().map(r3)
            }
        }
    }

    #[test]
    fn histogram_quantiles_equal_sorted_ones() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for n in [1, 2, 3, 10, 1000, 20_000] {
            let v: Vec<f64> = (0..n).map(|_| next()).collect();
            for q in [0.0, 0.5, 0.95, 1.0] {
                assert_eq!(exact(&v, q), via_hist(&v, q), "n {n} q {q}");
            }
        }
        // Values on rounding boundaries, outside 0–1, −0, NaN, repeated.
        let odd = [
            0.0005,
            0.0015,
            0.9995,
            1.0,
            1.0,
            -0.0,
            0.0,
            -0.25,
            2.0,
            f64::NAN,
            0.0625,
            0.1235,
        ];
        for q in [0.0, 0.1, 0.3, 0.5, 0.7, 0.95, 1.0] {
            let a = exact(&odd, q);
            let b = via_hist(&odd, q);
            assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits), "q {q}");
        }
        assert_eq!(via_hist(&[], 0.5), None);
    }

    #[test]
    fn total_keys_order_as_total_cmp() {
        let v = [
            f64::NAN,
            -f64::NAN,
            -1.0,
            -0.0,
            0.0,
            1e-300,
            0.5,
            1.0,
            f64::INFINITY,
        ];
        for a in v {
            assert_eq!(from_total_key(total_key(a)).to_bits(), a.to_bits());
            for b in v {
                assert_eq!(total_key(a).cmp(&total_key(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
    }
}
