//! The rows a replay moves, read from one node partition's frames ([`extract`]): for every
//! workload the plan names, its intervals with memory and activity (in compute slices), and for
//! every GPU of the data the figures of the "before" side (rows, memory total, energy, power,
//! hours loaded).
//!
//! Where a workload's rows are (docs/plan.md, `workloads`): kind `mig` — the MIG table's rows of
//! (node, GPU index, GPU instance), activity = the instance's `sm_active_mean` × its compute
//! slices; kind `gpu` — the GPU table's rows of (node, GPU index), activity = `sm_active_mean`,
//! else `busy_mean`, × the GPU's compute slices; kind `process` — the process table's rows
//! outside MIG whose label (`namespace/pod`, the pod, `slurm-JOB`, else `name-pid`) is the
//! workload's, memory summed over its processes, activity as the MIG planner measures it: the
//! GPU's when it is the GPU's only process workload in the partition, else its own `sm_mean`
//! (else the GPU's). `slices-basis` of the plan wins over the model's slices where given.
//!
//! This module judges nothing and knows no target.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use polars::prelude::*;
use tessera_core::mig;
use tessera_core::mig::plan_sections::{WorkloadKind, WorkloadSource};

use crate::frames::columns::{self, FastMap, ts_ms};
use crate::frames::{Frames, FramesError};

/// A process holds memory when it holds at least this (the MIG planner's `min_memory_bytes`).
pub const MIN_MEMORY_BYTES: f64 = 256.0 * 1024.0 * 1024.0;
/// A GPU is loaded when it holds at least this (the planner's `min_gpu_memory_bytes`).
pub const MIN_GPU_MEMORY_BYTES: f64 = 1024.0 * 1024.0 * 1024.0;

/// One interval of a workload: its end (unix ms), length, peak memory and mean activity in
/// compute slices (null where unknown).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub ts: i64,
    pub len: i64,
    pub mem: Option<f64>,
    pub act: Option<f64>,
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
    /// Mean power of its rows (only for the GPUs the plan names).
    pub power: Vec<f64>,
    /// Time it held at least [`MIN_GPU_MEMORY_BYTES`], ms.
    pub loaded_ms: i64,
    /// The UUIDs seen at this (node, index) (more than one: the GPUs were renumbered).
    pub uuids: BTreeSet<String>,
}

/// What [`extract`] gathered over the partitions.
#[derive(Debug, Default)]
pub struct Extracted {
    /// Intervals of each workload by id (in time order once [`Extracted::finish`]ed).
    pub series: BTreeMap<String, Vec<Point>>,
    /// The whole GPU's compute slices for each workload (its activity ÷ this is GPUs).
    pub gpu_slices: BTreeMap<String, f64>,
    pub gpus: BTreeMap<(String, u32), GpuStat>,
    pub nodes: BTreeSet<String>,
}

impl Extracted {
    /// Sorts each series by time and merges rows ending at the same time (memory and activity
    /// summed: two processes of one pod).
    pub fn finish(&mut self) {
        for pts in self.series.values_mut() {
            pts.sort_by_key(|p| p.ts);
            let mut out: Vec<Point> = Vec::with_capacity(pts.len());
            for p in pts.drain(..) {
                match out.last_mut() {
                    Some(l) if l.ts == p.ts => {
                        l.mem = add(l.mem, p.mem);
                        l.act = add(l.act, p.act);
                        l.len = l.len.max(p.len);
                    }
                    _ => out.push(p),
                }
            }
            *pts = out;
        }
    }
}

/// The sum of two values where either is known.
pub fn add(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x + y),
        (x, None) => x,
        (None, y) => y,
    }
}

fn slices_of(model: &str) -> u32 {
    mig::model(model)
        .or_else(|| mig::model_by_nvml_name(model))
        .map_or(7, |m| m.compute_slices)
}

type Key = (String, u32);

/// Reads one partition's rows of the workloads in `sources` (and every GPU's figures) into `ex`.
pub fn extract(
    frames: &Frames,
    sources: &BTreeMap<String, WorkloadSource>,
    ex: &mut Extracted,
) -> Result<(), FramesError> {
    let mut by_gpu: HashMap<Key, Vec<&str>> = HashMap::new();
    let mut by_mig: HashMap<(String, u32, i64), Vec<&str>> = HashMap::new();
    let mut by_proc: HashMap<Key, HashMap<&str, Vec<&str>>> = HashMap::new();
    let mut scope: BTreeSet<Key> = BTreeSet::new();
    for (id, s) in sources {
        let k = (s.node.clone(), s.gpu);
        scope.insert(k.clone());
        match s.kind {
            WorkloadKind::Gpu => by_gpu.entry(k).or_default().push(id),
            WorkloadKind::Mig => by_mig
                .entry((
                    s.node.clone(),
                    s.gpu,
                    i64::from(s.gpu_instance.unwrap_or(0)),
                ))
                .or_default()
                .push(id),
            WorkloadKind::Process => by_proc
                .entry(k)
                .or_default()
                .entry(s.label.as_deref().unwrap_or(""))
                .or_default()
                .push(id),
        }
    }
    let gpu_act = gpus(frames, sources, &by_gpu, &by_proc, &scope, ex)?;
    migs(frames, sources, &by_mig, ex)?;
    processes(frames, sources, &by_proc, &gpu_act, ex)?;
    Ok(())
}

/// GPU activity (slices) by (GPU, row end), for the GPUs that hold process workloads.
type GpuAct = HashMap<Key, HashMap<i64, f64>>;

fn gpus(
    frames: &Frames,
    sources: &BTreeMap<String, WorkloadSource>,
    by_gpu: &HashMap<Key, Vec<&str>>,
    by_proc: &HashMap<Key, HashMap<&str, Vec<&str>>>,
    scope: &BTreeSet<Key>,
    ex: &mut Extracted,
) -> Result<GpuAct, FramesError> {
    let df = frames
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
        .collect()?;
    let ts = columns::i64s(&df, "ts")?;
    let len = columns::i64s(&df, "interval_ms")?;
    let node_s = columns::strs(&df, "node")?;
    let node = node_s.ids();
    let gpu = columns::i64s(&df, "gpu")?;
    let model = columns::strs(&df, "model")?;
    let uuid = columns::strs(&df, "uuid")?;
    let mem = columns::f64s(&df, "memory_used_max_bytes")?;
    let total = columns::f64s(&df, "memory_total_bytes")?;
    let sm = columns::f64s(&df, "sm_active_mean")?;
    let busy = columns::f64s(&df, "busy_mean")?;
    let power = columns::f64s(&df, "power_mean_watts")?;
    let energy = columns::f64s(&df, "energy_delta_joules")?;
    let mut out: GpuAct = HashMap::new();
    // (node id, index) → the GPU's key, whether the plan names it, its slices.
    let mut keys: FastMap<(u32, u32), (Key, bool, f64)> = FastMap::default();
    for i in 0..df.height() {
        let (Some(n), Some(g), Some(t)) = (node.at(i), gpu.get(i), ts.get(i)) else {
            continue;
        };
        let Ok(g) = u32::try_from(g) else { continue };
        let (k, in_scope, slices) = keys
            .entry((n, g))
            .or_insert_with(|| {
                let k = (node.get(i).unwrap_or("").to_string(), g);
                let slices = f64::from(slices_of(model.get(i).unwrap_or("")));
                let s = scope.contains(&k);
                (k, s, slices)
            })
            .clone();
        let l = len.get(i).unwrap_or(0).max(0);
        let st = ex.gpus.entry(k.clone()).or_default();
        if st.rows == 0 {
            ex.nodes.insert(k.0.clone());
        }
        st.rows += 1;
        if let Some(m) = model.get(i)
            && st.model.is_empty()
        {
            st.model = m.to_string();
        }
        if let Some(u) = uuid.get(i)
            && !st.uuids.contains(u)
        {
            st.uuids.insert(u.to_string());
        }
        if let Some(v) = total.get(i) {
            st.memory_total = Some(st.memory_total.unwrap_or(0.0).max(v));
        }
        match (energy.get(i), power.get(i)) {
            (Some(j), _) => st.joules += j.max(0.0),
            (None, Some(w)) => st.joules += w.max(0.0) * l as f64 / 1000.0,
            (None, None) => st.rows_without_power += 1,
        }
        let m = mem.get(i);
        if in_scope {
            if let Some(w) = power.get(i) {
                st.power.push(w);
            }
            if m.unwrap_or(0.0) >= MIN_GPU_MEMORY_BYTES {
                st.loaded_ms += l;
            }
        } else {
            continue;
        }
        let a = sm.get(i).or_else(|| busy.get(i));
        if let Some(ids) = by_gpu.get(&k) {
            for id in ids {
                let basis = sources
                    .get(*id)
                    .and_then(|s| s.slices_basis)
                    .map_or(slices, f64::from);
                ex.gpu_slices.insert(id.to_string(), slices);
                ex.series.entry(id.to_string()).or_default().push(Point {
                    ts: t,
                    len: l,
                    mem: m,
                    act: a.map(|a| a * basis),
                });
            }
        }
        if by_proc.contains_key(&k)
            && let Some(a) = a
        {
            out.entry(k.clone()).or_default().insert(t, a * slices);
        }
    }
    Ok(out)
}

fn migs(
    frames: &Frames,
    sources: &BTreeMap<String, WorkloadSource>,
    by_mig: &HashMap<(String, u32, i64), Vec<&str>>,
    ex: &mut Extracted,
) -> Result<(), FramesError> {
    if by_mig.is_empty() {
        return Ok(());
    }
    let df = frames
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
        .collect()?;
    let ts = columns::i64s(&df, "ts")?;
    let len = columns::i64s(&df, "interval_ms")?;
    let node_s = columns::strs(&df, "node")?;
    let node = node_s.ids();
    let gpu = columns::i64s(&df, "gpu")?;
    let gi = columns::i64s(&df, "gpu_instance")?;
    let prof = columns::i64s(&df, "profile_id")?;
    let mem = columns::f64s(&df, "memory_used_max_bytes")?;
    let sm = columns::f64s(&df, "sm_active_mean")?;
    for i in 0..df.height() {
        let (Some(n), Some(g), Some(k), Some(t)) = (node.get(i), gpu.get(i), gi.get(i), ts.get(i))
        else {
            continue;
        };
        let Ok(g) = u32::try_from(g) else { continue };
        let Some(ids) = by_mig.get(&(n.to_string(), g, k)) else {
            continue;
        };
        let model = ex
            .gpus
            .get(&(n.to_string(), g))
            .map(|s| s.model.clone())
            .unwrap_or_default();
        let m = mig::model(&model).or_else(|| mig::model_by_nvml_name(&model));
        let own = m
            .and_then(|m| prof.get(i).and_then(|p| m.profile(p as u32)))
            .map(|p| p.compute_slices);
        for id in ids {
            let basis = sources
                .get(*id)
                .and_then(|s| s.slices_basis)
                .or(own)
                .unwrap_or(1);
            ex.gpu_slices
                .insert(id.to_string(), f64::from(m.map_or(7, |m| m.compute_slices)));
            ex.series.entry(id.to_string()).or_default().push(Point {
                ts: t,
                len: len.get(i).unwrap_or(0).max(0),
                mem: mem.get(i),
                act: sm.get(i).map(|a| a * f64::from(basis)),
            });
        }
    }
    Ok(())
}

/// A process row's workload label, as the MIG planner makes it.
fn label(
    ns: Option<&str>,
    pod: Option<&str>,
    job: Option<&str>,
    name: Option<&str>,
    pid: Option<i64>,
) -> String {
    match (ns, pod, job) {
        (Some(ns), Some(pod), _) => format!("{ns}/{pod}"),
        (None, Some(pod), _) => pod.to_string(),
        (_, _, Some(j)) => format!("slurm-{j}"),
        _ => format!("{}-{}", name.unwrap_or("process"), pid.unwrap_or(0)),
    }
}

fn processes(
    frames: &Frames,
    sources: &BTreeMap<String, WorkloadSource>,
    by_proc: &HashMap<Key, HashMap<&str, Vec<&str>>>,
    gpu_act: &GpuAct,
    ex: &mut Extracted,
) -> Result<(), FramesError> {
    if by_proc.is_empty() {
        return Ok(());
    }
    let df = frames
        .process
        .clone()
        .select([
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("node"),
            col("gpu").cast(DataType::Int64),
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
    let ts = columns::i64s(&df, "ts")?;
    let len = columns::i64s(&df, "interval_ms")?;
    let node_s = columns::strs(&df, "node")?;
    let node = node_s.ids();
    let gpu = columns::i64s(&df, "gpu")?;
    let pid = columns::i64s(&df, "pid")?;
    let name = columns::strs(&df, "process")?;
    let gi = columns::i64s(&df, "gpu_instance")?;
    let ns = columns::strs(&df, "namespace")?;
    let pod = columns::strs(&df, "pod")?;
    let job = columns::strs(&df, "slurm_job_id")?;
    let mem = columns::f64s(&df, "memory_used_max_bytes")?;
    let sm = columns::f64s(&df, "sm_mean")?;
    // Per GPU: each label's rows (end, length, memory, own activity) and peak.
    type Rows = Vec<(i64, i64, Option<f64>, Option<f64>)>;
    let mut found: HashMap<Key, HashMap<String, (f64, Rows)>> = HashMap::new();
    for i in 0..df.height() {
        if gi.get(i).is_some() {
            continue;
        }
        let (Some(n), Some(g), Some(t)) = (node.get(i), gpu.get(i), ts.get(i)) else {
            continue;
        };
        let Ok(g) = u32::try_from(g) else { continue };
        let k = (n.to_string(), g);
        if !by_proc.contains_key(&k) {
            continue;
        }
        let l = label(ns.get(i), pod.get(i), job.get(i), name.get(i), pid.get(i));
        let e = found.entry(k).or_default().entry(l).or_default();
        let m = mem.get(i);
        e.0 = e.0.max(m.unwrap_or(0.0));
        e.1.push((t, len.get(i).unwrap_or(0).max(0), m, sm.get(i)));
    }
    for (k, labels) in found {
        let slices = ex
            .gpus
            .get(&k)
            .map_or(7.0, |s| f64::from(slices_of(&s.model)));
        // The planner's rule: a process alone on its GPU takes the GPU's activity.
        let alone = labels
            .values()
            .filter(|(p, _)| *p >= MIN_MEMORY_BYTES)
            .count()
            <= 1;
        let acts = gpu_act.get(&k);
        let Some(wanted) = by_proc.get(&k) else {
            continue;
        };
        for (l, (_, mut rows)) in labels {
            let Some(ids) = wanted.get(l.as_str()) else {
                continue;
            };
            // Several processes of one label in one interval: memory and own activity summed.
            rows.sort_by_key(|r| r.0);
            rows.dedup_by(|b, a| {
                let same = a.0 == b.0;
                if same {
                    a.2 = add(a.2, b.2);
                    a.3 = add(a.3, b.3);
                }
                same
            });
            for id in ids {
                let basis = sources
                    .get(*id)
                    .and_then(|s| s.slices_basis)
                    .map_or(slices, f64::from);
                ex.gpu_slices.insert(id.to_string(), slices);
                let series = ex.series.entry(id.to_string()).or_default();
                for &(t, len, m, own) in &rows {
                    let gpu = acts.and_then(|a| a.get(&t)).map(|a| a / slices);
                    let act = if alone { gpu.or(own) } else { own.or(gpu) };
                    series.push(Point {
                        ts: t,
                        len,
                        mem: m,
                        act: act.map(|a| a * basis),
                    });
                }
            }
        }
    }
    Ok(())
}
