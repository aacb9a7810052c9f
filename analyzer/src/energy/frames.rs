//! One partition's rows made into GPU intervals and split ([`super::split`]): [`contributions`]
//! reads the `gpu`, `mig` and `process` rows of a range, matches MIG and process rows to the GPU
//! row with the same node, uuid, GPU index and `ts` (every source cuts a node's tables on one grid
//! when they share a sampling period: the exporter's history, Prometheus scrapes), and returns
//! each interval's energy and idle part and each process row's joules under the caller's key, in
//! (node, GPU index, uuid, `ts`) order — the order a single pass over the union of node
//! partitions gives, so sums folded partition by partition are byte-identical to it. A caller
//! that walks the GPU rows already (the report's tallies) makes the intervals itself
//! ([`IntervalsBuilder`], in its own GPU order) and [`contributions_of`] reads only the MIG and
//! process rows.
//!
//! A GPU row's energy is its `energy_delta_joules`, else `power_mean_watts` × `interval_ms`
//! (what the report's energy is); a row with neither is not an interval here (its energy is
//! unknown, never 0), and its processes get nothing. Of several GPU rows with the same node,
//! uuid, index and `ts`, the first is the interval. A MIG instance's compute slices come from the
//! profile table of its GPU's model (the model of the GPU's first interval, `tessera_core::mig`),
//! else from the profile's name. Reads the lazy frames it is given and nothing else; keys, sums
//! and prices are the caller's.
//!
//! Rows are matched without hashing strings per row: strings become small ids once per distinct
//! value ([`crate::frames::columns::Strs::ids`]), each GPU's intervals are kept sorted by `ts`
//! and a MIG or process row finds its interval from where its GPU's last match was (rows come in
//! time order), and the caller's key is asked once per distinct process row identity met, not
//! once per row.

use std::hash::Hash;

use polars::prelude::{ChunkAgg, DataType, IntoLazy, PolarsError, col, lit};

use tessera_core::mig::GpuModel;

use super::intervals::{GpuIntervals, Gpus, IntervalsBuilder, Iv};
use super::per_gpu::PerGpu;
use super::{Instance, Interval, Process, idle_alone, profile_slices, split_into, split_one};
use crate::frames::columns::{
    DirectCache, F64s, FastMap, I64s, Ids, Strs, cache_slot, cache_word as word, f64s, i64s, strs,
    ts_ms,
};
use crate::frames::{Frames, FramesError};

/// Why a partition's rows could not be read.
#[derive(Debug, thiserror::Error)]
pub enum EnergyError {
    #[error("reading frames: {0}")]
    Polars(#[from] PolarsError),
    #[error(transparent)]
    Frames(#[from] FramesError),
}

/// What the caller's key sees of a process row.
#[derive(Debug, Clone, Copy)]
pub struct ProcessRef<'a> {
    pub node: Option<&'a str>,
    pub gpu: Option<i64>,
    pub uuid: Option<&'a str>,
    pub gpu_instance: Option<i64>,
    pub pid: Option<i64>,
    pub namespace: Option<&'a str>,
    pub slurm_job: Option<&'a str>,
}

/// One partition's split, in the intervals' order ([`contributions`]: (node, GPU index, uuid,
/// `ts`)).
#[derive(Debug, Clone)]
pub struct Contributions<K> {
    /// The keys met, in order of first appearance.
    pub keys: Vec<K>,
    /// Per process row of an interval with known energy whose key is not `None`, in order: its
    /// key (an index into `keys`) and its joules. Rows of intervals left unsplit for lack of
    /// activity are not here (their share is unknown, not 0).
    pub shares: Vec<(usize, f64)>,
    /// Per GPU interval with known energy, in order: its energy and its idle part, J.
    pub intervals: Vec<(f64, f64)>,
    /// Energy of the intervals whose processes could not be given any for lack of an activity
    /// value (part of their idle), J.
    pub no_activity_j: f64,
    /// Process rows with no GPU row of known energy at their `ts` (they get nothing).
    pub unmatched: u64,
}

impl<K> Contributions<K> {
    /// Σ energy of the intervals, J.
    pub fn energy_j(&self) -> f64 {
        self.intervals.iter().map(|(e, _)| e).sum()
    }

    /// Σ idle part, J.
    pub fn idle_j(&self) -> f64 {
        self.intervals.iter().map(|(_, i)| i).sum()
    }
}

/// A matched process row's identity as the caller's key sees it: its GPU (node, uuid and index,
/// as a [`Gpus`] index), GPU instance, pid, namespace and Slurm job (ids of the process table's
/// strings).
type ProcKey = (usize, Option<i64>, Option<i64>, Option<u32>, Option<u32>);

/// No owner, in [`contributions`]' per-row owners.
const NO_OWNER: u32 = u32::MAX;

/// Per id of `ids`, the id of the same string among `to`'s (`None`: `to` does not have it).
fn translate(ids: &Ids, to: &FastMap<String, u32>) -> Vec<Option<u32>> {
    ids.strings.iter().map(|s| to.get(*s).copied()).collect()
}

/// The string of an id of `ids`.
fn name<'a>(ids: &Ids<'a>, id: Option<u32>) -> Option<&'a str> {
    id.map(|x| ids.strings[x as usize])
}

/// Row `i`'s string id in the GPU table's ids: `None` when the GPU table has no such string
/// (`Some(None)`: null).
fn as_gpu_id(ids: &Ids, tr: &[Option<u32>], i: usize) -> Option<Option<u32>> {
    match ids.at(i) {
        None => Some(None),
        Some(id) => tr[id as usize].map(Some),
    }
}

/// The energy split of every GPU interval of `frames` with `ts` in `(range.0, range.1]`; `key`
/// names each process row's owner (`None`: not counted in `shares`, but still a process of its
/// interval). `key` is called once per distinct [`ProcessRef`] (rows with equal fields get the
/// same key), in row order. The intervals are made from the GPU rows, in (node, GPU index, uuid,
/// `ts`) order.
pub fn contributions<K: Eq + Hash + Clone>(
    frames: &Frames,
    range: (i64, i64),
    held: Held,
    key: impl FnMut(&ProcessRef) -> Option<K>,
) -> Result<Contributions<K>, EnergyError> {
    let g = within(frames.gpu.clone(), GPU, range, held)?;
    let gc = GpuColumns::read(&g)?;
    let intervals = gpu_intervals(&gc, g.height());
    contributions_of(frames, range, held, intervals, key)
}

/// [`contributions`] over GPU intervals the caller made already ([`IntervalsBuilder`]: the
/// report's tallies walk the same GPU rows); only the MIG and process rows of `frames` are read.
/// Shares come in the order of `intervals`.
pub fn contributions_of<K: Eq + Hash + Clone>(
    frames: &Frames,
    range: (i64, i64),
    held: Held,
    intervals: GpuIntervals,
    mut key: impl FnMut(&ProcessRef) -> Option<K>,
) -> Result<Contributions<K>, EnergyError> {
    let GpuIntervals {
        mut gpus,
        nodes,
        uuids,
        models,
        ivs,
    } = intervals;
    let m = within(frames.mig.clone(), MIG, range, held)?;
    let p = within(frames.process.clone(), PROCESS, range, held)?;
    let strings = |list: &[String]| -> FastMap<String, u32> {
        (list.iter().enumerate())
            .map(|(id, s)| (s.clone(), id as u32))
            .collect()
    };
    let (node_id, uuid_id) = (strings(&nodes), strings(&uuids));
    let ids = (&node_id, &uuid_id);
    let instances = mig_instances(&m, &mut gpus, &models, ids)?;
    let pc = ProcessColumns::read(&p)?;
    let mut out = Contributions {
        keys: Vec::new(),
        shares: Vec::new(),
        intervals: Vec::with_capacity(ivs.len()),
        no_activity_j: 0.0,
        unmatched: 0,
    };
    let procs = match_processes(&pc, p.height(), &mut gpus, ids, &mut key, &mut out);
    // At most one share per matched process row.
    out.shares.reserve(procs.len());
    split_intervals(ivs, instances, procs, &models, &pc, &mut out);
    Ok(out)
}

/// How [`contributions`] is to read its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Frames that read their sources (Parquet, a store): the range is filtered in the query,
    /// so that only its rows are read.
    Lazy,
    /// Frames already in memory (the report pass's): the columns are taken as they are and the
    /// range is checked on them, then filtered only when rows lie outside it; their strings'
    /// ids are the ones interned for the pass.
    InMemory,
}

/// `lf`'s columns `cols` (each cast to its type) with `ts` in `(range.0, range.1]`, `ts` as
/// int64 ms.
fn within(
    lf: polars::prelude::LazyFrame,
    cols: &[&str],
    range: (i64, i64),
    held: Held,
) -> Result<polars::prelude::DataFrame, EnergyError> {
    let select = cols
        .iter()
        .map(|c| col(*c).cast(cast_of(c)))
        .collect::<Vec<_>>();
    let in_range = col("ts")
        .gt(lit(range.0))
        .and(col("ts").lt_eq(lit(range.1)));
    let lf = lf.with_column(ts_ms());
    if held == Held::Lazy {
        return Ok(lf.filter(in_range).select(select).collect()?);
    }
    let df = lf.select(select).collect()?;
    let ts = df.column("ts")?.as_materialized_series().i64()?.clone();
    let inside = match (ts.min(), ts.max()) {
        (Some(lo), Some(hi)) => lo > range.0 && hi <= range.1,
        // No rows, or none with a time: nothing to keep.
        _ => df.height() == 0,
    };
    Ok(if inside {
        df
    } else {
        df.lazy().filter(in_range).collect()?
    })
}

/// The GPU rows' columns [`contributions`] reads.
struct GpuColumns {
    node: Strs,
    uuid: Strs,
    model: Strs,
    gpu: I64s,
    ts: I64s,
    iv: I64s,
    sm: F64s,
    busy: F64s,
    power: F64s,
    energy: F64s,
}

impl GpuColumns {
    /// Reads them from the GPU rows `g`.
    fn read(g: &polars::prelude::DataFrame) -> Result<GpuColumns, EnergyError> {
        let (node, uuid, model) = (strs(g, "node")?, strs(g, "uuid")?, strs(g, "model")?);
        let (gpu, ts, iv) = (i64s(g, "gpu")?, i64s(g, "ts")?, i64s(g, "interval_ms")?);
        let (sm, busy, power, energy) = (
            f64s(g, "sm_active_mean")?,
            f64s(g, "busy_mean")?,
            f64s(g, "power_mean_watts")?,
            f64s(g, "energy_delta_joules")?,
        );
        Ok(GpuColumns {
            node,
            uuid,
            model,
            gpu,
            ts,
            iv,
            sm,
            busy,
            power,
            energy,
        })
    }

    /// Row `i`'s energy: its `energy_delta_joules`, else `power_mean_watts` × `interval_ms`;
    /// `None` when neither (or not a finite, non-negative number).
    fn energy_of(&self, i: usize) -> Option<f64> {
        let interval = self.iv.get(i).unwrap_or(0).max(0);
        self.energy
            .get(i)
            .or_else(|| self.power.get(i).map(|w| w * interval as f64 / 1000.0))
            .filter(|e| e.is_finite() && *e >= 0.0)
    }
}

/// The process rows' columns [`contributions`] reads.
struct ProcessColumns {
    node: Strs,
    uuid: Strs,
    ns: Strs,
    job: Strs,
    gpu: I64s,
    gi: I64s,
    ts: I64s,
    pid: I64s,
    mem: F64s,
    sm: F64s,
}

impl ProcessColumns {
    /// Reads them from the process rows `p`.
    fn read(p: &polars::prelude::DataFrame) -> Result<ProcessColumns, EnergyError> {
        let (node, uuid, ns, job) = (
            strs(p, "node")?,
            strs(p, "uuid")?,
            strs(p, "namespace")?,
            strs(p, "slurm_job_id")?,
        );
        let (gpu, gi, ts, pid, mem, sm) = (
            i64s(p, "gpu")?,
            i64s(p, "gpu_instance")?,
            i64s(p, "ts")?,
            i64s(p, "pid")?,
            f64s(p, "memory_used_max_bytes")?,
            f64s(p, "sm_mean")?,
        );
        Ok(ProcessColumns {
            node,
            uuid,
            ns,
            job,
            gpu,
            gi,
            ts,
            pid,
            mem,
            sm,
        })
    }
}

/// The intervals of the partition's `height` GPU rows: each GPU's rows with known energy, one
/// per `ts` (the first), the GPUs in (node, index, uuid) order, each with the model of its first
/// interval.
fn gpu_intervals(gc: &GpuColumns, height: usize) -> GpuIntervals {
    let (g_node, g_uuid) = (gc.node.ids(), gc.uuid.ids());
    let mut gpus = Gpus::default();
    // (GPU, ts, row) of each row with a time and a known energy.
    let mut rows: Vec<(u32, i64, u32)> = (0..height)
        .filter_map(|i| {
            let ts = gc.ts.get(i).filter(|_| gc.energy_of(i).is_some())?;
            let k = gpus.of((g_node.at(i), g_uuid.at(i), gc.gpu.get(i)), true)?;
            Some((k as u32, ts, i as u32))
        })
        .collect();
    let mut rank: Vec<usize> = (0..gpus.keys.len()).collect();
    rank.sort_by_key(|&k| {
        let (node, uuid, index) = gpus.keys[k];
        (name(&g_node, node), index, name(&g_uuid, uuid))
    });
    let mut order = vec![0; rank.len()];
    for (r, &k) in rank.iter().enumerate() {
        order[k] = r;
    }
    // By GPU and `ts`, stably: the first row of a `ts` is the interval.
    rows.sort_by_key(|&(k, ts, _)| (order[k as usize], ts));
    let mut b = IntervalsBuilder::with_capacity(rows.len());
    let mut last = None;
    for (k, ts, i) in rows {
        let i = i as usize;
        if last != Some(k) {
            let (node, uuid, index) = gpus.keys[k as usize];
            b.gpu(
                name(&g_node, node),
                name(&g_uuid, uuid),
                index,
                gc.model.get(i),
            );
            last = Some(k);
        }
        b.row(ts, gc.energy_of(i), gc.sm.get(i).or(gc.busy.get(i)));
    }
    b.finish()
}

/// The MIG rows `m` matched to their GPU's interval (ids of the GPU table's strings: `ids`),
/// each instance with its compute slices from its GPU model's profile table (`models`, per GPU),
/// else from the profile's name.
fn mig_instances(
    m: &polars::prelude::DataFrame,
    gpus: &mut Gpus,
    models: &[Option<&'static GpuModel>],
    (node_id, uuid_id): (&FastMap<String, u32>, &FastMap<String, u32>),
) -> Result<PerGpu<Instance>, EnergyError> {
    let (m_node, m_uuid, m_profile) = (strs(m, "node")?, strs(m, "uuid")?, strs(m, "profile")?);
    let (m_node, m_uuid, m_profile) = (m_node.ids(), m_uuid.ids(), m_profile.ids());
    let (m_node_tr, m_uuid_tr) = (translate(&m_node, node_id), translate(&m_uuid, uuid_id));
    let (m_gpu, m_gi, m_ts, m_sm) = (
        i64s(m, "gpu")?,
        i64s(m, "gpu_instance")?,
        i64s(m, "ts")?,
        f64s(m, "sm_active_mean")?,
    );
    // A profile's slices on a model (the model's table by address).
    let mut slices_of: FastMap<(u32, usize), Option<u32>> = FastMap::default();
    // The last one asked: a GPU's instances come together, often of one profile.
    let mut last_slices: Option<((u32, usize), Option<u32>)> = None;
    let mut instances: PerGpu<Instance> = PerGpu::new();
    for i in 0..m.height() {
        let (Some(ts), Some(gi)) = (m_ts.get(i), m_gi.get(i)) else {
            continue;
        };
        let (Some(node), Some(uuid)) = (
            as_gpu_id(&m_node, &m_node_tr, i),
            as_gpu_id(&m_uuid, &m_uuid_tr, i),
        ) else {
            continue;
        };
        let Some((k, v)) = gpus
            .of((node, uuid, m_gpu.get(i)), false)
            .and_then(|k| Some((k, gpus.interval(k, ts)?)))
        else {
            continue;
        };
        let Ok(id) = u32::try_from(gi) else { continue };
        let model = models[k];
        let slices = m_profile.at(i).and_then(|pid| {
            let at = model.map_or(0, |m| m as *const GpuModel as usize);
            if let Some((k, s)) = last_slices
                && k == (pid, at)
            {
                return s;
            }
            let s = *slices_of.entry((pid, at)).or_insert_with(|| {
                let name = m_profile.strings[pid as usize];
                model
                    .and_then(|m| m.profile_by_name(name))
                    .map(|p| p.compute_slices)
                    .or_else(|| profile_slices(name))
            });
            last_slices = Some(((pid, at), s));
            s
        });
        instances.push(
            k,
            v,
            Instance {
                id,
                slices: slices.unwrap_or(1),
                activity: m_sm.get(i),
            },
        );
    }
    Ok(instances)
}

/// The process rows matched to their GPU's interval, each with its owner (the caller's `key`,
/// asked once per distinct identity; its keys into `out`); rows without an interval are
/// counted as unmatched.
fn match_processes<K: Eq + Hash + Clone>(
    pc: &ProcessColumns,
    height: usize,
    gpus: &mut Gpus,
    (node_id, uuid_id): (&FastMap<String, u32>, &FastMap<String, u32>),
    key: &mut impl FnMut(&ProcessRef) -> Option<K>,
    out: &mut Contributions<K>,
) -> PerGpu<(u32, u32)> {
    let (p_node, p_uuid, p_ns, p_job) = (pc.node.ids(), pc.uuid.ids(), pc.ns.ids(), pc.job.ids());
    let (p_node_tr, p_uuid_tr) = (translate(&p_node, node_id), translate(&p_uuid, uuid_id));
    let mut key_index: FastMap<K, usize> = FastMap::default();
    // The owners of the process identities met (the caller's key, asked once per identity).
    let mut owner_of: FastMap<ProcKey, u32> = FastMap::default();
    let mut owner_cache: DirectCache<ProcKey, u32> = DirectCache::default();
    // Per process row of an interval, by GPU: its interval, its row and its owner (or
    // `NO_OWNER`).
    let mut procs: PerGpu<(u32, u32)> = PerGpu::new();
    for i in 0..height {
        let Some(ts) = pc.ts.get(i) else { continue };
        let gpu = pc.gpu.get(i);
        let v = match (
            as_gpu_id(&p_node, &p_node_tr, i),
            as_gpu_id(&p_uuid, &p_uuid_tr, i),
        ) {
            (Some(node), Some(uuid)) => gpus
                .of((node, uuid, gpu), false)
                .and_then(|k| Some((k, gpus.interval(k, ts)?))),
            _ => None,
        };
        let Some((k, v)) = v else {
            out.unmatched += 1;
            continue;
        };
        let (gi, pid) = (pc.gi.get(i), pc.pid.get(i));
        let pk: ProcKey = (k, gi, pid, p_ns.at(i), p_job.at(i));
        let slot = cache_slot([k as u64, word(gi), word(pid), word(pk.3), word(pk.4)]);
        let owner = match owner_cache.get(slot, &pk) {
            Some(o) => o,
            None => {
                let o = *owner_of.entry(pk).or_insert_with(|| {
                    let r = ProcessRef {
                        node: p_node.get(i),
                        gpu,
                        uuid: p_uuid.get(i),
                        gpu_instance: gi,
                        pid,
                        namespace: p_ns.get(i),
                        slurm_job: p_job.get(i),
                    };
                    key(&r).map_or(NO_OWNER, |k| match key_index.get(&k) {
                        Some(&x) => x as u32,
                        None => {
                            out.keys.push(k.clone());
                            key_index.insert(k, out.keys.len() - 1);
                            (out.keys.len() - 1) as u32
                        }
                    })
                });
                owner_cache.put(slot, pk, o);
                o
            }
        };
        procs.push(k, v, (i as u32, owner));
    }
    procs
}

/// Splits each interval among its MIG instances and processes into `out`: its energy and idle
/// part, each owned process's joules; an interval without an activity value leaves its
/// processes nothing.
fn split_intervals<K>(
    ivs: Vec<Iv>,
    instances: PerGpu<Instance>,
    procs: PerGpu<(u32, u32)>,
    models: &[Option<&'static GpuModel>],
    pc: &ProcessColumns,
    out: &mut Contributions<K>,
) {
    let (inst_at, instances) = instances.by_interval(ivs.len());
    let (proc_at, procs) = procs.by_interval(ivs.len());
    // One interval at a time, its instances, processes and split in vectors reused.
    let mut iv = Interval::default();
    let mut joules: Vec<f64> = Vec::new();
    for (
        v,
        Iv {
            gpu,
            energy_j,
            activity,
        },
    ) in ivs.into_iter().enumerate()
    {
        let here = &procs[proc_at[v]..proc_at[v + 1]];
        if here.is_empty() {
            // No process: nothing to split, all of it is idle.
            out.intervals.push((energy_j, idle_alone(energy_j)));
            continue;
        }
        let activity = (!activity.is_nan()).then_some(activity);
        if let ([(i, owner)], true) = (here, inst_at[v] == inst_at[v + 1]) {
            // One process outside MIG (the most common interval): split without building it.
            let (idle, share) = split_one(energy_j, activity, || pc.sm.get(*i as usize));
            match share {
                None => out.no_activity_j += energy_j,
                Some(j) if *owner != NO_OWNER => out.shares.push((*owner as usize, j)),
                Some(_) => {}
            }
            out.intervals.push((energy_j, idle));
            continue;
        }
        iv.instances.clear();
        iv.instances
            .extend_from_slice(&instances[inst_at[v]..inst_at[v + 1]]);
        iv.processes.clear();
        iv.processes.extend(here.iter().map(|&(i, _)| {
            let i = i as usize;
            Process {
                sm: pc.sm.get(i),
                memory: pc.mem.get(i),
                instance: pc.gi.get(i).and_then(|x| u32::try_from(x).ok()),
            }
        }));
        (iv.energy_j, iv.activity, iv.slices) = (
            energy_j,
            activity,
            if iv.instances.is_empty() {
                // Read only in MIG mode.
                None
            } else {
                models[gpu as usize].map(|m| m.compute_slices)
            },
        );
        let (idle, no_activity) = split_into(&iv, &mut joules);
        if no_activity {
            // Unknown, not 0: the processes get no share at all (their keys stay unknown unless
            // another interval gives them one).
            out.no_activity_j += iv.energy_j;
        } else {
            for (&(_, owner), j) in here.iter().zip(&joules) {
                if owner != NO_OWNER {
                    out.shares.push((owner as usize, *j));
                }
            }
        }
        out.intervals.push((iv.energy_j, idle));
    }
}

/// The columns read, by table.
const GPU: &[&str] = &[
    "node",
    "uuid",
    "gpu",
    "model",
    "ts",
    "interval_ms",
    "sm_active_mean",
    "busy_mean",
    "power_mean_watts",
    "energy_delta_joules",
];
const MIG: &[&str] = &[
    "node",
    "uuid",
    "gpu",
    "gpu_instance",
    "ts",
    "profile",
    "sm_active_mean",
];
const PROCESS: &[&str] = &[
    "node",
    "uuid",
    "gpu",
    "gpu_instance",
    "ts",
    "pid",
    "namespace",
    "slurm_job_id",
    "memory_used_max_bytes",
    "sm_mean",
];

/// The type a column is read as.
fn cast_of(c: &str) -> DataType {
    match c {
        "node" | "uuid" | "model" | "profile" | "namespace" | "slurm_job_id" => DataType::String,
        "gpu" | "gpu_instance" | "ts" | "interval_ms" | "pid" => DataType::Int64,
        _ => DataType::Float64,
    }
}

/// Every column [`contributions`] reads, by table (for callers that materialise a partition).
pub const COLUMNS: &[(crate::frames::Table, &[&str])] = &[
    (crate::frames::Table::Gpu, GPU),
    (crate::frames::Table::Mig, MIG),
    (crate::frames::Table::Process, PROCESS),
];
