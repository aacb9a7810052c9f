//! Demand extraction: the planner's workloads and fleet from the canonical frames
//! (`docs/frames.md`). Pure over the frames it is given.
//!
//! A workload is, in this order of preference:
//! - **a MIG instance** (GPU in MIG mode): memory = the instance's peak used memory; compute =
//!   the `quantile` of its SM activity × the instance's compute slices. Without SM activity (NVML
//!   has no per-instance utilisation on A100/A30) the instance keeps its current compute slices.
//!   Named after the pods/processes seen on it, else `node/GPUi/GIj`;
//! - **a process or pod** on a GPU outside MIG mode: memory = its peak; compute = the quantile of
//!   the GPU's SM activity (else busy ratio) × the GPU's compute slices when it is the GPU's only
//!   process; on a shared GPU the quantile of its own per-process SM utilisation (a time share,
//!   like busy), else the GPU's;
//! - **the GPU itself** when it holds memory but no process was seen on it: memory = its peak,
//!   compute from its SM activity, else busy ratio.
//!
//! Activity is the per-row *mean* (`sm_active_mean`, `sm_mean`, `busy_mean`: the mean over each
//! history interval), and its `quantile` over the rows is taken; memory is the per-row maximum.
//! Memory need = peak × (1 + headroom), rounded up to bytes; compute need = ceil(activity ×
//! slices), at least 1, at most the GPU's slices. Every workload records which activity signal
//! it used. Memory below `min_memory_bytes` (per process and MIG instance) or
//! `min_gpu_memory_bytes` (a whole GPU, which includes the driver's reserve) is not a workload.
//!
//! This module does not plan; it only measures.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use polars::prelude::*;
use serde::Serialize;
use tessera_core::mig;

use super::{FleetGpu, Workload};
use crate::advisor::AdvisorError;
use crate::advisor::columns::{self, FastMap, ts_ms};
use crate::ingest::Frames;

const MIB: f64 = (1u64 << 20) as f64;

/// Parameters (flags of `tessera mig plan`).
#[derive(Debug, Clone)]
pub struct DemandParams {
    /// Memory headroom on the peak (default 0.2).
    pub headroom: f64,
    /// Activity quantile (default 0.95).
    pub quantile: f64,
    /// Least peak memory of a process or MIG instance workload (default 256 MiB).
    pub min_memory_bytes: f64,
    /// Least peak memory of a whole-GPU workload (default 1 GiB).
    pub min_gpu_memory_bytes: f64,
}

impl Default for DemandParams {
    fn default() -> Self {
        DemandParams {
            headroom: 0.2,
            quantile: 0.95,
            min_memory_bytes: 256.0 * MIB,
            min_gpu_memory_bytes: 1024.0 * MIB,
        }
    }
}

/// How a workload's demand was measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    /// `mig`, `process` or `gpu`.
    pub kind: &'static str,
    pub peak_memory_bytes: u64,
    /// The activity quantile used (0–1), if any signal existed.
    pub activity: Option<f64>,
    /// `sm_active` (GPU or MIG instance), `process_sm`, `busy`, or `none` (kept the instance's
    /// compute slices, or the whole GPU when nothing is known).
    pub activity_source: &'static str,
    /// Compute slices the activity was scaled by.
    pub slices_basis: u32,
    /// UTC hours (hours since the epoch) in which the workload held memory (schedules use them).
    #[serde(skip)]
    pub loaded_hours: BTreeSet<i64>,
}

/// The UTC hour (since the epoch) a row ending at `ts` ms belongs to.
pub fn hour_of(ts: i64) -> i64 {
    (ts - 1).div_euclid(3_600_000)
}

/// Workloads, their measurements and the fleet.
#[derive(Debug, Clone, Default)]
pub struct Demand {
    pub workloads: Vec<Workload>,
    pub measured: Vec<Measured>,
    pub fleet: Vec<FleetGpu>,
    pub notes: Vec<String>,
}

pub use crate::stats::quantile;

/// Compute slices for an activity share of `slices`: ceil, at least 1, at most `slices`.
pub fn compute_need(activity: f64, slices: u32) -> u32 {
    ((activity.clamp(0.0, 1.0) * f64::from(slices) - 1e-9).ceil() as u32).clamp(1, slices.max(1))
}

fn memory_need(peak: f64, headroom: f64) -> u64 {
    (peak * (1.0 + headroom)).ceil() as u64
}

fn slices_of(model: &str) -> u32 {
    mig::model(model)
        .or_else(|| mig::model_by_nvml_name(model))
        .map_or(7, |m| m.compute_slices)
}

struct GpuRow {
    node: String,
    index: u32,
    uuid: String,
    model: String,
    mig: bool,
    peak_mem: f64,
    sm: Vec<f64>,
    busy: Vec<f64>,
    loaded: BTreeSet<i64>,
}

/// Workloads before their ids are made unique, as (id, workload, measurement).
type Named = (String, Workload, Measured);

/// The demand of one node partition, before [`merge`].
#[derive(Default)]
pub struct PartDemand {
    /// MIG instance workloads, then the others (that is their order in [`Demand`]).
    mig: Vec<Named>,
    other: Vec<Named>,
    fleet: Vec<FleetGpu>,
    no_node: usize,
    unknown_profiles: usize,
}

/// Extract workloads and the fleet from the frames.
pub fn extract(frames: &Frames, p: &DemandParams) -> Result<Demand, AdvisorError> {
    Ok(merge([extract_part(frames, p)?]))
}

/// [`extract`] one node partition at a time (memory holds one partition's rows), merged into
/// the demand the union of the partitions gives: every workload is measured from its own
/// node's rows, and the merge keeps the union's order (MIG instances first, each kind in node
/// order) and makes ids unique in that order. Partitions whose nodes are not in order, or
/// overlap, are extracted from their union instead.
pub fn extract_parts(parts: &[&Frames], p: &DemandParams) -> Result<Demand, AdvisorError> {
    extract_parts_with(parts, p, &|_| {})
}

/// [`extract_parts`], calling `on_done(n)` before the `n`-th partition's rows are read
/// (progress on a terminal).
pub fn extract_parts_with(
    parts: &[&Frames],
    p: &DemandParams,
    on_done: &dyn Fn(usize),
) -> Result<Demand, AdvisorError> {
    // A few partitions at a time on worker threads (each reads its own rows), merged in order.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4);
    let mut extracted = Vec::new();
    for (c, chunk) in parts.chunks(workers).enumerate() {
        on_done(c * workers);
        let got: Vec<Result<PartDemand, AdvisorError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|f| scope.spawn(|| extract_part(f, p)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err(AdvisorError::Worker)))
                .collect()
        });
        for g in got {
            extracted.push(g?);
        }
    }
    merge_parts(extracted, parts, p)
}

/// The demand of the partitions from their [`extract_part`]s, in partition order (`parts`: the
/// same partitions): [`merge`]d when their nodes are in order and do not overlap, else extracted
/// again from the union of the partitions.
pub fn merge_parts(
    extracted: Vec<PartDemand>,
    parts: &[&Frames],
    p: &DemandParams,
) -> Result<Demand, AdvisorError> {
    let mut out = Vec::with_capacity(extracted.len());
    let mut last: Option<String> = None;
    for part in extracted {
        let nodes = || part.fleet.iter().map(|g| g.node.as_str());
        let ordered = nodes().zip(nodes().skip(1)).all(|(a, b)| a <= b)
            && match (&last, nodes().next()) {
                (Some(l), Some(first)) => l.as_str() < first,
                _ => true,
            };
        if !ordered {
            let union = Frames::union(parts.iter().map(|f| (*f).clone())).map_err(|e| {
                AdvisorError::Param {
                    name: "frames",
                    reason: e.to_string(),
                }
            })?;
            return extract(&union, p);
        }
        if let Some(l) = nodes().next_back() {
            last = Some(l.to_string());
        }
        out.push(part);
    }
    Ok(merge(out))
}

/// The demand of the partitions, in order: their fleets, workloads (ids made unique in the
/// union's order) and notes.
pub fn merge(parts: impl IntoIterator<Item = PartDemand>) -> Demand {
    let mut d = Demand::default();
    let (mut no_node, mut unknown_profiles) = (0, 0);
    let (mut mig, mut other) = (Vec::new(), Vec::new());
    for part in parts {
        no_node += part.no_node;
        unknown_profiles += part.unknown_profiles;
        d.fleet.extend(part.fleet);
        mig.extend(part.mig);
        other.extend(part.other);
    }
    if no_node > 0 {
        d.notes.push(format!(
            "{no_node} GPU(s) without node, index or UUID were left out (a plan needs all three)"
        ));
    }
    if unknown_profiles > 0 {
        d.notes.push(format!(
            "{unknown_profiles} MIG instance(s) on GPUs of unknown models or with unknown profile ids were left out"
        ));
    }
    let mut used_ids: BTreeSet<String> = BTreeSet::new();
    for (mut id, w, m) in mig.into_iter().chain(other) {
        if !used_ids.insert(id.clone()) {
            let base = format!("{id}@{}/GPU", w.node.as_deref().unwrap_or("?"));
            let mut k = 2;
            id = base.clone();
            while !used_ids.insert(id.clone()) {
                id = format!("{base}#{k}");
                k += 1;
            }
        }
        d.workloads.push(Workload { id, ..w });
        d.measured.push(m);
    }
    d
}

/// The columns [`extract_part`] reads, per table.
pub const COLUMNS: [(crate::ingest::Table, &[&str]); 3] = [
    (
        crate::ingest::Table::Gpu,
        &[
            "ts",
            "node",
            "gpu",
            "uuid",
            "model",
            "mig_enabled",
            "memory_used_max_bytes",
            "sm_active_mean",
            "busy_mean",
        ],
    ),
    (
        crate::ingest::Table::Process,
        &[
            "ts",
            "node",
            "uuid",
            "pid",
            "process",
            "gpu_instance",
            "namespace",
            "pod",
            "slurm_job_id",
            "memory_used_max_bytes",
            "sm_mean",
        ],
    ),
    (
        crate::ingest::Table::Mig,
        &[
            "ts",
            "node",
            "uuid",
            "gpu",
            "gpu_instance",
            "profile_id",
            "memory_used_max_bytes",
            "sm_active_mean",
        ],
    ),
];

/// The demand of the rows of one partition (ids not yet unique; see [`merge_parts`]).
pub fn extract_part(frames: &Frames, p: &DemandParams) -> Result<PartDemand, AdvisorError> {
    let mut d = PartDemand::default();
    // GPUs.
    let df = frames
        .gpu
        .clone()
        .select([
            ts_ms().alias("ts"),
            col("node"),
            col("gpu").cast(DataType::Int64),
            col("uuid"),
            col("model"),
            col("mig_enabled"),
            col("memory_used_max_bytes").cast(DataType::Float64),
            col("sm_active_mean").cast(DataType::Float64),
            col("busy_mean").cast(DataType::Float64),
        ])
        .collect()?;
    let ts = columns::i64s(&df, "ts")?;
    let node = columns::strs(&df, "node")?;
    let uuid = columns::strs(&df, "uuid")?;
    let gpu = columns::i64s(&df, "gpu")?;
    let model = columns::strs(&df, "model")?;
    let mig_on = columns::bools(&df, "mig_enabled")?;
    let mem = columns::f64s(&df, "memory_used_max_bytes")?;
    let sm = columns::f64s(&df, "sm_active_mean")?;
    let busy = columns::f64s(&df, "busy_mean")?;
    let mut gpus: Vec<GpuRow> = Vec::new();
    let mut no_node = 0;
    for rows in columns::groups(&[&node, &uuid], &ts, df.height()) {
        let f = rows[rows.len() - 1];
        let (Some(n), Some(u), Some(i)) = (node.get(f), uuid.get(f), gpu.get(f)) else {
            no_node += 1;
            continue;
        };
        let mut g = GpuRow {
            node: n.to_string(),
            index: i as u32,
            uuid: u.to_string(),
            model: rows
                .iter()
                .rev()
                .find_map(|&r| model.get(r))
                .unwrap_or("")
                .to_string(),
            // The state at the end of the range is what a plan changes.
            mig: mig_on.get(f).unwrap_or(false),
            peak_mem: 0.0,
            sm: Vec::new(),
            busy: Vec::new(),
            loaded: BTreeSet::new(),
        };
        // Rows in time order: an hour is added once, not per row.
        let mut last_hour = None;
        for &r in &rows {
            let m = mem.get(r).unwrap_or(0.0);
            g.peak_mem = g.peak_mem.max(m);
            if m >= p.min_gpu_memory_bytes
                && let Some(t) = ts.get(r)
                && last_hour != Some(hour_of(t))
            {
                last_hour = Some(hour_of(t));
                g.loaded.insert(hour_of(t));
            }
            if let Some(v) = sm.get(r) {
                g.sm.push(v);
            }
            if let Some(v) = busy.get(r) {
                g.busy.push(v);
            }
        }
        gpus.push(g);
    }
    d.no_node = no_node;
    d.fleet = gpus
        .iter()
        .map(|g| FleetGpu {
            node: g.node.clone(),
            index: g.index,
            uuid: Some(g.uuid.clone()),
            model: g.model.clone(),
        })
        .collect();

    // Processes: names per MIG instance, and workloads per process outside MIG.
    let pdf = frames
        .process
        .clone()
        .select([
            ts_ms().alias("ts"),
            col("node"),
            col("uuid"),
            col("pid").cast(DataType::Int64),
            col("process"),
            col("gpu_instance").cast(DataType::Int64),
            col("namespace"),
            col("pod"),
            col("slurm_job_id"),
            col("memory_used_max_bytes").cast(DataType::Float64),
            col("sm_mean").cast(DataType::Float64),
        ])
        .collect()?;
    let pts = columns::i64s(&pdf, "ts")?;
    let pn = columns::strs(&pdf, "node")?;
    let pu = columns::strs(&pdf, "uuid")?;
    let pid = columns::i64s(&pdf, "pid")?;
    let pname = columns::strs(&pdf, "process")?;
    let pgi = columns::i64s(&pdf, "gpu_instance")?;
    let pns = columns::strs(&pdf, "namespace")?;
    let ppod = columns::strs(&pdf, "pod")?;
    let pjob = columns::strs(&pdf, "slurm_job_id")?;
    let pmem = columns::f64s(&pdf, "memory_used_max_bytes")?;
    let psm = columns::f64s(&pdf, "sm_mean")?;
    // Rows keyed by string ids (a string is read once per distinct view, not per row).
    let (pn, pu, pname, pns, ppod, pjob) = (
        pn.ids(),
        pu.ids(),
        pname.ids(),
        pns.ids(),
        ppod.ids(),
        pjob.ids(),
    );
    let label = |i: usize| -> String {
        match (pns.get(i), ppod.get(i), pjob.get(i)) {
            (Some(ns), Some(pod), _) => format!("{ns}/{pod}"),
            (None, Some(pod), _) => pod.to_string(),
            (_, _, Some(j)) => format!("slurm-{j}"),
            _ => format!(
                "{}-{}",
                pname.get(i).unwrap_or("process"),
                pid.get(i).unwrap_or(0)
            ),
        }
    };
    // Labels are made once per distinct (namespace, pod, job, name, pid) and numbered by their
    // text (two keys with one text are one workload, as before); rows are keyed by string ids
    // and the label's number, and turned into owned keys once per workload below.
    type LabelKey = (
        Option<u32>,
        Option<u32>,
        Option<u32>,
        Option<u32>,
        Option<i64>,
    );
    let mut label_of: FastMap<LabelKey, usize> = FastMap::default();
    let mut label_ids: FastMap<String, usize> = FastMap::default();
    let mut labels: Vec<String> = Vec::new();
    // (node, uuid, gi) -> labels; (node, uuid, label) -> rows
    let mut on_instance_ids: FastMap<(u32, u32, i64), BTreeSet<usize>> = FastMap::default();
    // Peak memory, activity values, loaded hours and the last hour added (rows of one key come
    // in time order in history, so most rows add no hour).
    type ProcAcc = (f64, Vec<f64>, BTreeSet<i64>);
    let mut procs_ids: FastMap<(u32, u32, usize), (ProcAcc, Option<i64>)> = FastMap::default();
    let mut last: Option<(LabelKey, usize)> = None;
    for i in 0..pdf.height() {
        let (Some(n), Some(u)) = (pn.at(i), pu.at(i)) else {
            continue;
        };
        let key = (pns.at(i), ppod.at(i), pjob.at(i), pname.at(i), pid.get(i));
        let l = match last {
            Some((k, l)) if k == key => l,
            _ => {
                let l = *label_of.entry(key).or_insert_with(|| {
                    let text = label(i);
                    *label_ids.entry(text.clone()).or_insert_with(|| {
                        labels.push(text);
                        labels.len() - 1
                    })
                });
                last = Some((key, l));
                l
            }
        };
        if let Some(gi) = pgi.get(i) {
            on_instance_ids.entry((n, u, gi)).or_default().insert(l);
            continue;
        }
        let (e, last_hour) = procs_ids
            .entry((n, u, l))
            .or_insert(((0.0, Vec::new(), BTreeSet::new()), None));
        let m = pmem.get(i).unwrap_or(0.0);
        e.0 = e.0.max(m);
        if m >= p.min_memory_bytes
            && let Some(t) = pts.get(i)
        {
            let h = hour_of(t);
            if *last_hour != Some(h) {
                e.2.insert(h);
                *last_hour = Some(h);
            }
        }
        if let Some(v) = psm.get(i) {
            e.1.push(v);
        }
    }
    let str_of = |ids: &columns::Ids, id: u32| ids.strings[id as usize].to_string();
    let on_instance: BTreeMap<(String, String, i64), BTreeSet<String>> = on_instance_ids
        .into_iter()
        .map(|((n, u, gi), ls)| {
            let names = ls.into_iter().map(|l| labels[l].clone()).collect();
            ((str_of(&pn, n), str_of(&pu, u), gi), names)
        })
        .collect();
    let procs: BTreeMap<(String, String, String), ProcAcc> = procs_ids
        .into_iter()
        .map(|((n, u, l), (acc, _))| ((str_of(&pn, n), str_of(&pu, u), labels[l].clone()), acc))
        .collect();
    type Proc = (String, f64, Vec<f64>, BTreeSet<i64>);
    let mut procs_by_gpu: HashMap<(String, String), Vec<Proc>> = HashMap::new();
    for ((n, u, l), (m, s, h)) in procs {
        procs_by_gpu.entry((n, u)).or_default().push((l, m, s, h));
    }

    // MIG instances.
    let mdf = frames
        .mig
        .clone()
        .select([
            ts_ms().alias("ts"),
            col("node"),
            col("uuid"),
            col("gpu").cast(DataType::Int64),
            col("gpu_instance").cast(DataType::Int64),
            col("profile_id").cast(DataType::Int64),
            col("memory_used_max_bytes").cast(DataType::Float64),
            col("sm_active_mean").cast(DataType::Float64),
        ])
        .collect()?;
    let mts = columns::i64s(&mdf, "ts")?;
    let mn = columns::strs(&mdf, "node")?;
    let mu = columns::strs(&mdf, "uuid")?;
    let mgpu = columns::i64s(&mdf, "gpu")?;
    let mgi_s = columns::strs(&mdf, "gpu_instance")?;
    let mgi = columns::i64s(&mdf, "gpu_instance")?;
    let mprof = columns::i64s(&mdf, "profile_id")?;
    let mmem = columns::f64s(&mdf, "memory_used_max_bytes")?;
    let msm = columns::f64s(&mdf, "sm_active_mean")?;
    let model_of: HashMap<(&str, &str), &str> = gpus
        .iter()
        .map(|g| ((g.node.as_str(), g.uuid.as_str()), g.model.as_str()))
        .collect();
    let mig_now: HashSet<(&str, &str)> = gpus
        .iter()
        .filter(|g| g.mig)
        .map(|g| (g.node.as_str(), g.uuid.as_str()))
        .collect();
    let mut unknown_profiles = 0;
    for rows in columns::groups(&[&mn, &mu, &mgi_s], &mts, mdf.height()) {
        let f = rows[rows.len() - 1];
        let (Some(n), Some(u), Some(gi)) = (mn.get(f), mu.get(f), mgi.get(f)) else {
            continue;
        };
        let peak = rows
            .iter()
            .map(|&r| mmem.get(r).unwrap_or(0.0))
            .fold(0.0, f64::max);
        let names = on_instance.get(&(n.to_string(), u.to_string(), gi));
        if peak < p.min_memory_bytes && names.is_none() {
            continue;
        }
        if !mig_now.contains(&(n, u)) {
            continue;
        }
        let model = model_of.get(&(n, u)).copied().unwrap_or("");
        let prof = mig::model(model)
            .or_else(|| mig::model_by_nvml_name(model))
            .and_then(|m| mprof.get(f).and_then(|id| m.profile(id as u32)));
        let Some(prof) = prof else {
            unknown_profiles += 1;
            continue;
        };
        let mut act: Vec<f64> = rows.iter().filter_map(|&r| msm.get(r)).collect();
        let q = quantile(&mut act, p.quantile);
        let slices = prof.compute_slices;
        let index = mgpu.get(f).unwrap_or(0);
        let id = match names {
            Some(ns) => ns.iter().cloned().collect::<Vec<_>>().join("+"),
            None => format!("{n}/GPU{index}/GI{gi}"),
        };
        d.mig.push((
            id,
            Workload {
                id: String::new(),
                node: Some(n.to_string()),
                current_gpu: Some(u.to_string()),
                memory_bytes: memory_need(peak, p.headroom),
                compute_slices: q.map_or(slices, |a| compute_need(a, slices)),
            },
            Measured {
                kind: "mig",
                peak_memory_bytes: peak as u64,
                activity: q,
                activity_source: if q.is_some() { "sm_active" } else { "none" },
                slices_basis: slices,
                loaded_hours: rows
                    .iter()
                    .filter(|&&r| mmem.get(r).unwrap_or(0.0) >= p.min_memory_bytes)
                    .filter_map(|&r| mts.get(r).map(hour_of))
                    .collect(),
            },
        ));
    }
    d.unknown_profiles = unknown_profiles;

    // GPUs outside MIG mode: their processes, or the GPU itself.
    for g in gpus.iter_mut().filter(|g| !g.mig) {
        let slices = slices_of(&g.model);
        let gpu_act = if !g.sm.is_empty() {
            quantile(&mut g.sm, p.quantile).map(|a| (a, "sm_active"))
        } else {
            quantile(&mut g.busy, p.quantile).map(|a| (a, "busy"))
        };
        let procs = procs_by_gpu
            .remove(&(g.node.clone(), g.uuid.clone()))
            .unwrap_or_default();
        let procs: Vec<_> = procs
            .into_iter()
            .filter(|(_, m, _, _)| *m >= p.min_memory_bytes)
            .collect();
        if procs.is_empty() {
            if g.peak_mem < p.min_gpu_memory_bytes {
                continue;
            }
            d.other.push((
                format!("{}/GPU{}", g.node, g.index),
                Workload {
                    id: String::new(),
                    node: Some(g.node.clone()),
                    current_gpu: Some(g.uuid.clone()),
                    memory_bytes: memory_need(g.peak_mem, p.headroom),
                    compute_slices: gpu_act.map_or(slices, |(a, _)| compute_need(a, slices)),
                },
                Measured {
                    kind: "gpu",
                    peak_memory_bytes: g.peak_mem as u64,
                    activity: gpu_act.map(|(a, _)| a),
                    activity_source: gpu_act.map_or("none", |(_, s)| s),
                    slices_basis: slices,
                    loaded_hours: g.loaded.clone(),
                },
            ));
            continue;
        }
        let alone = procs.len() == 1;
        for (l, m, mut s, hours) in procs {
            // NVML's per-process utilisation is a time share (like busy), so a process alone on
            // its GPU takes the GPU's SM activity; only a shared GPU is split by process.
            let own = quantile(&mut s, p.quantile).map(|a| (a, "process_sm"));
            let act = if alone {
                gpu_act.or(own)
            } else {
                own.or(gpu_act)
            };
            d.other.push((
                l,
                Workload {
                    id: String::new(),
                    node: Some(g.node.clone()),
                    current_gpu: Some(g.uuid.clone()),
                    memory_bytes: memory_need(m, p.headroom),
                    compute_slices: act.map_or(slices, |(a, _)| compute_need(a, slices)),
                },
                Measured {
                    kind: "process",
                    peak_memory_bytes: m as u64,
                    activity: act.map(|(a, _)| a),
                    activity_source: act.map_or("none", |(_, s)| s),
                    slices_basis: slices,
                    loaded_hours: hours,
                },
            ));
        }
    }
    Ok(d)
}
