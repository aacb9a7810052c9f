//! One partition's rows made into GPU intervals and split ([`super::split`]): [`contributions`]
//! reads the `gpu`, `mig` and `process` rows of a range, matches MIG and process rows to the GPU
//! row with the same node, uuid, GPU index and `ts` (every source cuts a node's tables on one grid
//! when they share a sampling period: the exporter's history, Prometheus scrapes), and returns
//! each interval's energy and idle part and each process row's joules under the caller's key, in
//! (node, GPU index, uuid, `ts`) order — the order a single pass over the union of node
//! partitions gives, so sums folded partition by partition are byte-identical to it.
//!
//! A GPU row's energy is its `energy_delta_joules`, else `power_mean_watts` × `interval_ms`
//! (what the report's energy is); a row with neither is not an interval here (its energy is
//! unknown, never 0), and its processes get nothing. A MIG instance's compute slices come from the
//! GPU model's profile table (`tessera_core::mig`), else from the profile's name. Reads the lazy
//! frames it is given and nothing else; keys, sums and prices are the caller's.

use std::hash::Hash;

use polars::prelude::{DataType, PolarsError, col, lit};

use tessera_core::mig::GpuModel;
use tessera_core::mig::profiles::model_by_nvml_name;

use super::{Instance, Interval, Process, profile_slices, split};
use crate::frames::columns::{FastMap, f64s, i64s, strs, ts_ms};
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

/// One partition's split, in (node, GPU index, uuid, `ts`) order.
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

/// A GPU row's key: node, uuid, GPU index, `ts`.
type RowKey<'a> = (Option<&'a str>, Option<&'a str>, Option<i64>, i64);

/// The energy split of every GPU interval of `frames` with `ts` in `(range.0, range.1]`; `key`
/// names each process row's owner (`None`: not counted in `shares`, but still a process of its
/// interval).
pub fn contributions<K: Eq + Hash + Clone>(
    frames: &Frames,
    range: (i64, i64),
    mut key: impl FnMut(&ProcessRef) -> Option<K>,
) -> Result<Contributions<K>, EnergyError> {
    let within = |lf: polars::prelude::LazyFrame, cols: &[&str]| {
        lf.with_column(ts_ms())
            .filter(
                col("ts")
                    .gt(lit(range.0))
                    .and(col("ts").lt_eq(lit(range.1))),
            )
            .select(
                cols.iter()
                    .map(|c| col(*c).cast(cast_of(c)))
                    .collect::<Vec<_>>(),
            )
            .collect()
    };
    let g = within(frames.gpu.clone(), GPU)?;
    let m = within(frames.mig.clone(), MIG)?;
    let p = within(frames.process.clone(), PROCESS)?;
    let (g_node, g_uuid, g_model) = (strs(&g, "node")?, strs(&g, "uuid")?, strs(&g, "model")?);
    let (g_gpu, g_ts, g_iv) = (i64s(&g, "gpu")?, i64s(&g, "ts")?, i64s(&g, "interval_ms")?);
    let (g_sm, g_busy, g_power, g_energy) = (
        f64s(&g, "sm_active_mean")?,
        f64s(&g, "busy_mean")?,
        f64s(&g, "power_mean_watts")?,
        f64s(&g, "energy_delta_joules")?,
    );
    // The intervals with known energy, and each one's row key.
    let mut at: FastMap<RowKey, usize> = FastMap::default();
    let mut ivs: Vec<(RowKey, Interval, Option<&'static GpuModel>)> = Vec::new();
    // The last model name looked up, and its table (a partition has a model or two).
    let mut last_model: Option<(&str, Option<&'static GpuModel>)> = None;
    for i in 0..g.height() {
        let Some(ts) = g_ts.get(i) else { continue };
        let interval = g_iv.get(i).unwrap_or(0).max(0);
        let energy = g_energy
            .get(i)
            .or_else(|| g_power.get(i).map(|w| w * interval as f64 / 1000.0))
            .filter(|e| e.is_finite() && *e >= 0.0);
        let Some(energy_j) = energy else { continue };
        let k = (g_node.get(i), g_uuid.get(i), g_gpu.get(i), ts);
        if at.contains_key(&k) {
            continue;
        }
        let model = match (g_model.get(i), last_model) {
            (Some(name), Some((last, m))) if name == last => m,
            (Some(name), _) => {
                let m = model_by_nvml_name(name);
                last_model = Some((name, m));
                m
            }
            (None, _) => None,
        };
        at.insert(k, ivs.len());
        ivs.push((
            k,
            Interval {
                energy_j,
                activity: g_sm.get(i).or(g_busy.get(i)),
                slices: model.map(|m| m.compute_slices),
                instances: Vec::new(),
                processes: Vec::new(),
            },
            model,
        ));
    }
    let (m_node, m_uuid, m_profile) = (strs(&m, "node")?, strs(&m, "uuid")?, strs(&m, "profile")?);
    let (m_gpu, m_gi, m_ts, m_sm) = (
        i64s(&m, "gpu")?,
        i64s(&m, "gpu_instance")?,
        i64s(&m, "ts")?,
        f64s(&m, "sm_active_mean")?,
    );
    for i in 0..m.height() {
        let (Some(ts), Some(gi)) = (m_ts.get(i), m_gi.get(i)) else {
            continue;
        };
        let Some(&v) = at.get(&(m_node.get(i), m_uuid.get(i), m_gpu.get(i), ts)) else {
            continue;
        };
        let Ok(id) = u32::try_from(gi) else { continue };
        let (_, iv, model) = &mut ivs[v];
        let slices = m_profile.get(i).and_then(|name| {
            model
                .and_then(|m| m.profile_by_name(name))
                .map(|p| p.compute_slices)
                .or_else(|| profile_slices(name))
        });
        iv.instances.push(Instance {
            id,
            slices: slices.unwrap_or(1),
            activity: m_sm.get(i),
        });
    }
    let (p_node, p_uuid, p_ns, p_job) = (
        strs(&p, "node")?,
        strs(&p, "uuid")?,
        strs(&p, "namespace")?,
        strs(&p, "slurm_job_id")?,
    );
    let (p_gpu, p_gi, p_ts, p_pid, p_mem, p_sm) = (
        i64s(&p, "gpu")?,
        i64s(&p, "gpu_instance")?,
        i64s(&p, "ts")?,
        i64s(&p, "pid")?,
        f64s(&p, "memory_used_max_bytes")?,
        f64s(&p, "sm_mean")?,
    );
    let mut out = Contributions {
        keys: Vec::new(),
        shares: Vec::new(),
        intervals: Vec::with_capacity(ivs.len()),
        no_activity_j: 0.0,
        unmatched: 0,
    };
    let mut key_index: FastMap<K, usize> = FastMap::default();
    // Per interval, its processes' keys (parallel to `Interval::processes`).
    let mut owners: Vec<Vec<Option<usize>>> = vec![Vec::new(); ivs.len()];
    for i in 0..p.height() {
        let Some(ts) = p_ts.get(i) else { continue };
        let (node, uuid, gpu) = (p_node.get(i), p_uuid.get(i), p_gpu.get(i));
        let Some(&v) = at.get(&(node, uuid, gpu, ts)) else {
            out.unmatched += 1;
            continue;
        };
        let r = ProcessRef {
            node,
            gpu,
            uuid,
            gpu_instance: p_gi.get(i),
            pid: p_pid.get(i),
            namespace: p_ns.get(i),
            slurm_job: p_job.get(i),
        };
        let owner = key(&r).map(|k| match key_index.get(&k) {
            Some(&x) => x,
            None => {
                out.keys.push(k.clone());
                key_index.insert(k, out.keys.len() - 1);
                out.keys.len() - 1
            }
        });
        ivs[v].1.processes.push(Process {
            sm: p_sm.get(i),
            memory: p_mem.get(i),
            instance: p_gi.get(i).and_then(|x| u32::try_from(x).ok()),
        });
        owners[v].push(owner);
    }
    // In (node, GPU index, uuid, ts) order.
    let mut order: Vec<usize> = (0..ivs.len()).collect();
    order.sort_by(|&a, &b| {
        let (ka, kb) = (&ivs[a].0, &ivs[b].0);
        (ka.0, ka.2, ka.1, ka.3).cmp(&(kb.0, kb.2, kb.1, kb.3))
    });
    for v in order {
        let iv = &ivs[v].1;
        let s = split(iv);
        if s.no_activity {
            // Unknown, not 0: the processes get no share at all (their keys stay unknown unless
            // another interval gives them one).
            out.no_activity_j += iv.energy_j;
        } else {
            for (owner, j) in owners[v].iter().zip(&s.processes) {
                if let Some(o) = owner {
                    out.shares.push((*o, *j));
                }
            }
        }
        out.intervals.push((iv.energy_j, s.idle));
    }
    Ok(out)
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
