//! The rows a replay moves, read from one node partition's frames ([`read`]: only the reading,
//! which the replay does for the next partition on a worker) and taken apart ([`extract`]): for every
//! workload the plan names, its intervals with memory and activity (in compute slices), and for
//! every GPU of the data the figures of the "before" side (rows, memory total, energy, idle
//! power, hours loaded). It returns the nodes the partition held, so that [`super::stream`]
//! can judge their workloads and drop their rows. Rows are walked by string ids and kept as
//! 32-byte [`Point`]s; no string is made per row.
//!
//! Where a workload's rows are (docs/plan.md, `workloads`): kind `mig` — the MIG table's rows of
//! (node, GPU index, GPU instance), activity = the instance's `sm_active_mean` × its compute
//! slices; kind `gpu` — the GPU table's rows of (node, GPU index), activity = `sm_active_mean`,
//! else `busy_mean`, × the GPU's compute slices; kind `process` — the process table's rows
//! outside MIG whose label (`namespace/pod`, the pod, `slurm-JOB`, else `name-pid`) is the
//! workload's, memory summed over its processes, activity as the MIG planner measures it: the
//! GPU's when it is the GPU's only process workload in the partition, else its own `sm_mean`
//! (else the GPU's) (`series/process.rs`). `slices-basis` of the plan wins over the model's
//! slices where given.
//!
//! This module judges nothing and knows no target.

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::*;
use tessera_core::mig::plan_sections::{WorkloadKind, WorkloadSource};
use tessera_core::mig::{self, GpuModel};

use crate::frames::columns::{self, DirectCache, FastMap, cache_slot, ts_ms};
use crate::frames::{Frames, FramesError};
use crate::stats::quantile;

/// A process holds memory when it holds at least this (the MIG planner's `min_memory_bytes`).
pub const MIN_MEMORY_BYTES: f64 = 256.0 * 1024.0 * 1024.0;
/// A GPU is loaded when it holds at least this (the planner's `min_gpu_memory_bytes`).
pub const MIN_GPU_MEMORY_BYTES: f64 = 1024.0 * 1024.0 * 1024.0;

/// One interval of a workload: its end (unix ms), length, peak memory and mean activity in
/// compute slices. 32 bytes (a replay holds one per row of a partition's workloads): an unknown
/// memory or activity is held as NaN, an internal sentinel read back as `None` through
/// [`Point::mem`] and [`Point::act`] (the frames read non-finite values as missing, so no
/// measured value is NaN); the length is clamped to `u32::MAX` ms (49 days).
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub ts: i64,
    mem: f64,
    act: f64,
    len: u32,
}

impl Point {
    pub fn new(ts: i64, len: i64, mem: Option<f64>, act: Option<f64>) -> Point {
        Point {
            ts,
            mem: mem.unwrap_or(f64::NAN),
            act: act.unwrap_or(f64::NAN),
            len: u32::try_from(len.max(0)).unwrap_or(u32::MAX),
        }
    }
    /// The row's length, ms.
    pub fn length(&self) -> i64 {
        i64::from(self.len)
    }
    /// Peak memory, bytes (`None`: unknown).
    pub fn mem(&self) -> Option<f64> {
        known(self.mem)
    }
    /// Activity in compute slices (`None`: unknown).
    pub fn act(&self) -> Option<f64> {
        known(self.act)
    }
}

/// `None` for the NaN sentinel.
pub fn known(v: f64) -> Option<f64> {
    (!v.is_nan()).then_some(v)
}

/// The sum of two values where either is known (NaN: unknown), as [`add`] on options.
pub fn add_raw(a: f64, b: f64) -> f64 {
    if a.is_nan() {
        b
    } else if b.is_nan() {
        a
    } else {
        a + b
    }
}

/// One GPU of the data, over the range.
#[derive(Debug, Clone, Default)]
pub struct GpuStat {
    pub model: String,
    pub memory_total: Option<f64>,
    pub rows: u64,
    /// Energy of its rows, joules (energy counter, else mean power × length).
    pub joules: f64,
    /// Rows with neither energy nor power.
    pub rows_without_power: u64,
    /// Its idle power: the 5th percentile of its rows' mean power, W, at least 0 (0 without
    /// power; only for the GPUs the plan names).
    pub idle_watts: f64,
    /// Time it held at least [`MIN_GPU_MEMORY_BYTES`], ms.
    pub loaded_ms: i64,
    /// The UUIDs seen at this (node, index) (more than one: the GPUs were renumbered).
    pub uuids: BTreeSet<String>,
}

/// What [`extract`] gathered over the partitions.
#[derive(Debug, Default)]
pub struct Extracted {
    /// The rows of each workload, by its index in the plan's sources (the order of
    /// `Targets::sources`): in time order once [`finish`]ed; emptied once the workload is
    /// judged (`super::stream`).
    pub series: Vec<Vec<Point>>,
    /// The whole GPU's compute slices of each workload, by index (its activity ÷ this is GPUs).
    pub gpu_slices: Vec<Option<f64>>,
    pub gpus: BTreeMap<(String, u32), GpuStat>,
    pub nodes: BTreeSet<String>,
    /// Whether any workload row was read.
    pub workload_rows: bool,
}

impl Extracted {
    /// Empty, for a plan of `sources` workloads.
    pub fn new(sources: usize) -> Extracted {
        Extracted {
            series: vec![Vec::new(); sources],
            gpu_slices: vec![None; sources],
            ..Extracted::default()
        }
    }

    fn push(&mut self, idx: usize, p: Point) {
        self.series[idx].push(p);
        self.workload_rows = true;
    }
}

/// Sorts a series by time and merges rows ending at the same time (memory and activity
/// summed: two processes of one pod).
pub fn finish(pts: &mut Vec<Point>) {
    pts.sort_by_key(|p| p.ts);
    let mut w = 0;
    for r in 0..pts.len() {
        let p = pts[r];
        if w > 0 && pts[w - 1].ts == p.ts {
            let l = &mut pts[w - 1];
            l.mem = add_raw(l.mem, p.mem);
            l.act = add_raw(l.act, p.act);
            l.len = l.len.max(p.len);
        } else {
            pts[w] = p;
            w += 1;
        }
    }
    pts.truncate(w);
}

/// The sum of two values where either is known.
pub fn add(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x + y),
        (x, None) => x,
        (None, y) => y,
    }
}

fn model_of(name: &str) -> Option<&'static GpuModel> {
    mig::model(name).or_else(|| mig::model_by_nvml_name(name))
}

fn slices_of(model: &str) -> u32 {
    model_of(model).map_or(7, |m| m.compute_slices)
}

type Key = (String, u32);

mod process;

/// Workloads of the plan: index in the sources, and `slices-basis`.
type Ws = Vec<(usize, Option<u32>)>;

/// The plan's workloads by where their rows are.
#[derive(Default)]
struct Wanted<'s> {
    gpu: FastMap<(&'s str, u32), Ws>,
    mig: FastMap<(&'s str, u32, i64), Ws>,
    /// Per GPU, per process label.
    proc: FastMap<(&'s str, u32), FastMap<&'s str, Ws>>,
    scope: BTreeSet<(&'s str, u32)>,
}

/// One partition's rows a replay reads ([`read`]): its GPU rows, and its MIG and process rows
/// when the plan has workloads of those kinds.
pub struct PartRows {
    gpu: DataFrame,
    mig: Option<DataFrame>,
    process: Option<DataFrame>,
}

/// Reads one partition's rows for the workloads in `sources` (only the reading: a worker can
/// read the next partition while [`extract`] takes this one's rows apart).
pub fn read(
    frames: &Frames,
    sources: &BTreeMap<String, WorkloadSource>,
) -> Result<PartRows, FramesError> {
    // The MIG and process rows only for a plan with such workloads ([`extract`] reads what
    // was read).
    let has = |k: WorkloadKind| sources.values().any(|s| s.kind == k);
    Ok(PartRows {
        gpu: gpu_rows(frames)?,
        mig: has(WorkloadKind::Mig)
            .then(|| mig_rows(frames))
            .transpose()?,
        process: has(WorkloadKind::Process)
            .then(|| process::process_rows(frames))
            .transpose()?,
    })
}

/// Takes one partition's rows ([`read`]) of the workloads in `sources` (and every GPU's
/// figures) into `ex`; returns the nodes the partition holds (`ingest_parts` keeps all of a
/// node's rows in one partition, so their workloads are then complete).
pub fn extract(
    rows: &PartRows,
    sources: &BTreeMap<String, WorkloadSource>,
    ex: &mut Extracted,
) -> Result<BTreeSet<String>, FramesError> {
    let mut w = Wanted::default();
    for (idx, s) in sources.values().enumerate() {
        let k = (s.node.as_str(), s.gpu);
        w.scope.insert(k);
        let e = (idx, s.slices_basis);
        match s.kind {
            WorkloadKind::Gpu => w.gpu.entry(k).or_default().push(e),
            WorkloadKind::Mig => w
                .mig
                .entry((k.0, k.1, i64::from(s.gpu_instance.unwrap_or(0))))
                .or_default()
                .push(e),
            WorkloadKind::Process => w
                .proc
                .entry(k)
                .or_default()
                .entry(s.label.as_deref().unwrap_or(""))
                .or_default()
                .push(e),
        }
    }
    let mut nodes = BTreeSet::new();
    let gpu_act = gpus(&rows.gpu, &w, ex, &mut nodes)?;
    if let Some(df) = &rows.mig {
        migs(df, &w, ex, &mut nodes)?;
    }
    if let Some(df) = &rows.process {
        process::processes(df, &w, &gpu_act, ex, &mut nodes)?;
    }
    Ok(nodes)
}

/// GPU activity (slices) by (GPU, row end), for the GPUs that hold process workloads: per GPU,
/// (row end, activity) sorted by end, one per end (the last row's).
type GpuAct = FastMap<Key, Vec<(i64, f64)>>;

/// The activity at row end `ts` in a [`GpuAct`] entry.
fn act_at(acts: &[(i64, f64)], ts: i64) -> Option<f64> {
    acts.binary_search_by_key(&ts, |a| a.0)
        .ok()
        .map(|i| acts[i].1)
}

/// One GPU's figures within a partition.
struct Local {
    key: Key,
    stat: GpuStat,
    power: Vec<f64>,
    uuids: Vec<u32>,
    in_scope: bool,
    slices: f64,
    /// Its `gpu` workloads: index and the slices their activity is measured on.
    ids: Vec<(usize, f64)>,
    acts: Option<Vec<(i64, f64)>>,
}

/// The GPU frame's columns the replay reads: time, interval, node, index, model, uuid, memory
/// used and total, activity, power and energy.
fn gpu_rows(frames: &Frames) -> Result<DataFrame, FramesError> {
    Ok(frames
        .gpu
        .clone()
        .select([
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("node"),
            col("gpu").cast(DataType::Int64),
            col("model"),
            col("uuid"),
            col("memory_used_max_bytes").cast(DataType::Float64),
            col("memory_total_bytes").cast(DataType::Float64),
            col("sm_active_mean").cast(DataType::Float64),
            col("busy_mean").cast(DataType::Float64),
            col("power_mean_watts").cast(DataType::Float64),
            col("energy_delta_joules").cast(DataType::Float64),
        ])
        .collect()?)
}

/// A GPU first seen (node `name`, index `g`, model `model`): its workloads of `w` with the
/// slices their activity is measured on (each noted in `ex`), nothing measured yet.
fn new_local(w: &Wanted, ex: &mut Extracted, name: &str, g: u32, model: &str) -> Local {
    let slices = f64::from(slices_of(model));
    let ids: Vec<(usize, f64)> = w
        .gpu
        .get(&(name, g))
        .map(|v| {
            v.iter()
                .map(|&(idx, b)| (idx, b.map_or(slices, f64::from)))
                .collect()
        })
        .unwrap_or_default();
    for &(idx, _) in &ids {
        ex.gpu_slices[idx] = Some(slices);
    }
    Local {
        key: (name.to_string(), g),
        stat: GpuStat::default(),
        power: Vec::new(),
        uuids: Vec::new(),
        in_scope: w.scope.contains(&(name, g)),
        slices,
        ids,
        acts: w.proc.contains_key(&(name, g)).then(Vec::new),
    }
}

/// Adds a second partition's figures `s` of a GPU to those it already has, `st`.
fn merge_stat(st: &mut GpuStat, s: GpuStat) {
    if st.model.is_empty() {
        st.model = s.model;
    }
    st.memory_total = match (st.memory_total, s.memory_total) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    st.rows += s.rows;
    st.joules += s.joules;
    st.rows_without_power += s.rows_without_power;
    st.idle_watts = st.idle_watts.min(s.idle_watts);
    st.loaded_ms += s.loaded_ms;
    st.uuids.extend(s.uuids);
}

/// Settles the partition's GPUs into `ex`: their uuids named, idle power (5th percentile of
/// their power), nodes noted, figures merged with any already there; returns the activity series
/// of the GPUs with process workloads, one point per end (the last row's).
fn settle_locals(locals: Vec<Local>, uuids: &[&str], ex: &mut Extracted) -> GpuAct {
    let mut out: GpuAct = FastMap::default();
    for mut lo in locals {
        lo.stat.uuids = lo
            .uuids
            .iter()
            .map(|&u| uuids[u as usize].to_string())
            .collect();
        lo.stat.idle_watts = quantile(&mut lo.power, 0.05).unwrap_or(0.0).max(0.0);
        ex.nodes.insert(lo.key.0.clone());
        if let Some(mut a) = lo.acts {
            // The last row of each end wins (as inserting into a map would).
            a.reverse();
            a.sort_by_key(|x| x.0);
            a.dedup_by_key(|x| x.0);
            out.insert(lo.key.clone(), a);
        }
        match ex.gpus.entry(lo.key) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(lo.stat);
            }
            // Not with `ingest_parts`' partitions (a node's rows are in one); kept whole.
            std::collections::btree_map::Entry::Occupied(mut o) => {
                merge_stat(o.get_mut(), lo.stat);
            }
        }
    }
    out
}

fn gpus(
    df: &DataFrame,
    w: &Wanted,
    ex: &mut Extracted,
    nodes: &mut BTreeSet<String>,
) -> Result<GpuAct, FramesError> {
    let ts = columns::i64s(df, "ts")?;
    let len = columns::i64s(df, "interval_ms")?;
    let node_s = columns::strs(df, "node")?;
    let node = node_s.ids();
    nodes.extend(node.strings.iter().map(|s| s.to_string()));
    let gpu = columns::i64s(df, "gpu")?;
    let model = columns::strs(df, "model")?;
    let uuid_s = columns::strs(df, "uuid")?;
    let uuid = uuid_s.ids();
    let mem = columns::f64s(df, "memory_used_max_bytes")?;
    let total = columns::f64s(df, "memory_total_bytes")?;
    let sm = columns::f64s(df, "sm_active_mean")?;
    let busy = columns::f64s(df, "busy_mean")?;
    let power = columns::f64s(df, "power_mean_watts")?;
    let energy = columns::f64s(df, "energy_delta_joules")?;
    // (node id, index) → its figures in `locals`.
    let mut slot: FastMap<(u32, u32), usize> = FastMap::default();
    let mut recent: DirectCache<(u32, u32), usize> = DirectCache::default();
    let mut locals: Vec<Local> = Vec::new();
    for i in 0..df.height() {
        let (Some(n), Some(g), Some(t)) = (node.at(i), gpu.get(i), ts.get(i)) else {
            continue;
        };
        let Ok(g) = u32::try_from(g) else { continue };
        let at = cache_slot([u64::from(n), u64::from(g)]);
        let li = match recent.get(at, &(n, g)) {
            Some(li) => li,
            None => {
                let li = *slot.entry((n, g)).or_insert_with(|| {
                    let name = node.get(i).unwrap_or("");
                    locals.push(new_local(w, ex, name, g, model.get(i).unwrap_or("")));
                    locals.len() - 1
                });
                recent.put(at, (n, g), li);
                li
            }
        };
        let lo = &mut locals[li];
        let l = len.get(i).unwrap_or(0).max(0);
        let st = &mut lo.stat;
        st.rows += 1;
        if st.model.is_empty()
            && let Some(m) = model.get(i)
        {
            st.model = m.to_string();
        }
        if let Some(u) = uuid.at(i)
            && !lo.uuids.contains(&u)
        {
            lo.uuids.push(u);
        }
        if let Some(v) = total.get(i) {
            st.memory_total = Some(st.memory_total.unwrap_or(0.0).max(v));
        }
        match (energy.get(i), power.get(i)) {
            (Some(j), _) => st.joules += j.max(0.0),
            (None, Some(w)) => st.joules += w.max(0.0) * l as f64 / 1000.0,
            (None, None) => st.rows_without_power += 1,
        }
        if !lo.in_scope {
            continue;
        }
        let m = mem.get(i);
        if let Some(w) = power.get(i) {
            lo.power.push(w);
        }
        if m.unwrap_or(0.0) >= MIN_GPU_MEMORY_BYTES {
            st.loaded_ms += l;
        }
        let a = sm.get(i).or_else(|| busy.get(i));
        for &(idx, basis) in &lo.ids {
            ex.series[idx].push(Point::new(t, l, m, a.map(|a| a * basis)));
            ex.workload_rows = true;
        }
        if let (Some(acts), Some(a)) = (&mut lo.acts, a) {
            acts.push((t, a * lo.slices));
        }
    }
    Ok(settle_locals(locals, &uuid.strings, ex))
}

/// A MIG instance of the plan within a partition.
struct MigSlot {
    ids: Ws,
    model: Option<&'static GpuModel>,
}

/// The MIG frame's columns the replay reads: time, interval, node, index, GPU instance,
/// profile id, memory used and activity.
fn mig_rows(frames: &Frames) -> Result<DataFrame, FramesError> {
    Ok(frames
        .mig
        .clone()
        .select([
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("node"),
            col("gpu").cast(DataType::Int64),
            col("gpu_instance").cast(DataType::Int64),
            col("profile_id").cast(DataType::Int64),
            col("memory_used_max_bytes").cast(DataType::Float64),
            col("sm_active_mean").cast(DataType::Float64),
        ])
        .collect()?)
}

fn migs(
    df: &DataFrame,
    w: &Wanted,
    ex: &mut Extracted,
    nodes: &mut BTreeSet<String>,
) -> Result<(), FramesError> {
    let ts = columns::i64s(df, "ts")?;
    let len = columns::i64s(df, "interval_ms")?;
    let node_s = columns::strs(df, "node")?;
    let node = node_s.ids();
    nodes.extend(node.strings.iter().map(|s| s.to_string()));
    let gpu = columns::i64s(df, "gpu")?;
    let gi = columns::i64s(df, "gpu_instance")?;
    let prof = columns::i64s(df, "profile_id")?;
    let mem = columns::f64s(df, "memory_used_max_bytes")?;
    let sm = columns::f64s(df, "sm_active_mean")?;
    let mut slot: FastMap<(u32, u32, i64), Option<usize>> = FastMap::default();
    let mut slots: Vec<MigSlot> = Vec::new();
    for i in 0..df.height() {
        let (Some(n), Some(g), Some(k), Some(t)) = (node.at(i), gpu.get(i), gi.get(i), ts.get(i))
        else {
            continue;
        };
        let Ok(g) = u32::try_from(g) else { continue };
        let s = *slot.entry((n, g, k)).or_insert_with(|| {
            let name = node.get(i).unwrap_or("");
            let ids = w.mig.get(&(name, g, k))?;
            let model = ex
                .gpus
                .get(&(name.to_string(), g))
                .and_then(|s| model_of(&s.model));
            let gpu_slices = f64::from(model.map_or(7, |m| m.compute_slices));
            for &(idx, _) in ids {
                ex.gpu_slices[idx] = Some(gpu_slices);
            }
            slots.push(MigSlot {
                ids: ids.clone(),
                model,
            });
            Some(slots.len() - 1)
        });
        let Some(s) = s else { continue };
        let s = &slots[s];
        let own = s
            .model
            .and_then(|m| prof.get(i).and_then(|p| m.profile(p as u32)))
            .map(|p| p.compute_slices);
        let l = len.get(i).unwrap_or(0).max(0);
        let m = mem.get(i);
        let a = sm.get(i);
        for &(idx, basis) in &s.ids {
            let basis = basis.or(own).unwrap_or(1);
            ex.push(idx, Point::new(t, l, m, a.map(|a| a * f64::from(basis))));
        }
    }
    Ok(())
}
