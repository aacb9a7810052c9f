//! [`extract_part`]'s steps, one node partition's demand: the GPUs (and the fleet), the
//! processes (names per MIG instance, and per-process measurements outside MIG), the MIG
//! instance workloads, and the workloads of GPUs outside MIG mode (their processes, or the GPU
//! itself). The rules are the parent module's (`super`, its module documentation).
//!
//! This module does not merge partitions or make ids unique (that is [`super::merge`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use polars::prelude::*;
use tessera_core::mig;
use tessera_core::mig::plan_sections::{WorkloadKind, WorkloadSource};

use super::{
    DemandError, DemandParams, Measured, Named, PartDemand, compute_need, hour_of, memory_need,
    quantile, slices_of,
};
use crate::frames::Frames;
use crate::frames::columns::{
    self, DirectCache, F64s, FastMap, I64s, Ids, Strs, cache_slot, ts_ms,
};
use crate::frames::shared::{TableIds, Whole};
use crate::mig_planner::{FleetGpu, Workload};

/// A GPU of the partition, measured over its rows.
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

/// A process outside MIG: its label, peak memory, activity values and loaded hours.
type Proc = (String, f64, Vec<f64>, BTreeSet<i64>);
/// Labels of the processes seen per MIG instance, by (node, uuid, GPU instance).
type OnInstance = BTreeMap<(String, String, i64), BTreeSet<String>>;
/// Processes outside MIG, by (node, uuid).
type ProcsByGpu = HashMap<(String, String), Vec<Proc>>;

/// The demand of the rows of one partition (ids not yet unique; see [`super::merge_parts`]).
pub fn extract_part(frames: &Frames, p: &DemandParams) -> Result<PartDemand, DemandError> {
    extract_part_with(frames, p, Whole::default())
}

/// [`extract_part`] with the string ids of the tables of `frames` interned before, for every
/// consumer of the same rows ([`crate::frames::shared`]): those are not interned again.
pub fn extract_part_with(
    frames: &Frames,
    p: &DemandParams,
    shared: Whole,
) -> Result<PartDemand, DemandError> {
    let mut d = PartDemand::default();
    // GPUs.
    let (mut gpus, no_node) = gpu_rows(&gpu_frame(frames)?, p, shared.gpu)?;
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
    let (on_instance, mut procs_by_gpu) = processes(frames, p, shared.process)?;
    // MIG instances.
    (d.mig, d.unknown_profiles) = mig_workloads(frames, p, &gpus, &on_instance)?;
    // GPUs outside MIG mode: their processes, or the GPU itself.
    for g in gpus.iter_mut().filter(|g| !g.mig) {
        let procs = procs_by_gpu
            .remove(&(g.node.clone(), g.uuid.clone()))
            .unwrap_or_default();
        gpu_workloads(g, procs, p, &mut d.other);
    }
    Ok(d)
}

/// The GPU frame's columns [`gpu_rows`] reads.
fn gpu_frame(frames: &Frames) -> Result<DataFrame, DemandError> {
    Ok(frames
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
        .collect()?)
}

/// Each GPU (rows grouped by node and uuid) measured, and how many GPUs lack a node, uuid or
/// index.
fn gpu_rows(
    df: &DataFrame,
    p: &DemandParams,
    shared: Option<&TableIds>,
) -> Result<(Vec<GpuRow>, usize), DemandError> {
    let ts = columns::i64s(df, "ts")?;
    let node = columns::strs(df, "node")?;
    let uuid = columns::strs(df, "uuid")?;
    let gpu = columns::i64s(df, "gpu")?;
    let model = columns::strs(df, "model")?;
    let mig_on = columns::bools(df, "mig_enabled")?;
    let mem = columns::f64s(df, "memory_used_max_bytes")?;
    let sm = columns::f64s(df, "sm_active_mean")?;
    let busy = columns::f64s(df, "busy_mean")?;
    let mut gpus: Vec<GpuRow> = Vec::new();
    let mut no_node = 0;
    let n = df.height();
    let sh = |c: &str| shared.and_then(|t| t.col(c, n));
    let (node_ids, uuid_ids) = (node.ids_or(sh("node")), uuid.ids_or(sh("uuid")));
    for rows in columns::groups_of(&[&node_ids, &uuid_ids], &ts, n) {
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
    Ok((gpus, no_node))
}

/// The processes' labels per MIG instance, and the processes outside MIG by GPU.
fn processes(
    frames: &Frames,
    p: &DemandParams,
    shared: Option<&TableIds>,
) -> Result<(OnInstance, ProcsByGpu), DemandError> {
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
    let n = pdf.height();
    let sh = |c: &str| shared.and_then(|t| t.col(c, n));
    let (node, uuid, name) = (
        pn.ids_or(sh("node")),
        pu.ids_or(sh("uuid")),
        pname.ids_or(sh("process")),
    );
    let (ns, pod, job) = (
        pns.ids_or(sh("namespace")),
        ppod.ids_or(sh("pod")),
        pjob.ids_or(sh("slurm_job_id")),
    );
    // Borrowed once here, not at every row.
    let c = ProcCols {
        ts: pts,
        node: &node,
        uuid: &uuid,
        pid,
        name: &name,
        gi: pgi,
        ns: &ns,
        pod: &pod,
        job: &job,
        mem: pmem,
        sm: psm,
    };
    let mut scan = ProcScan::default();
    for i in 0..pdf.height() {
        scan.row(&c, i, p);
    }
    Ok(scan.finish(&c))
}

/// The process frame's columns, string columns as ids.
struct ProcCols<'a> {
    ts: I64s,
    node: &'a Ids<'a>,
    uuid: &'a Ids<'a>,
    pid: I64s,
    name: &'a Ids<'a>,
    gi: I64s,
    ns: &'a Ids<'a>,
    pod: &'a Ids<'a>,
    job: &'a Ids<'a>,
    mem: F64s,
    sm: F64s,
}

impl ProcCols<'_> {
    /// Row `i`'s workload label: `namespace/pod`, the pod, `slurm-JOB`, else `process-pid`.
    fn label(&self, i: usize) -> String {
        match (self.ns.get(i), self.pod.get(i), self.job.get(i)) {
            (Some(ns), Some(pod), _) => format!("{ns}/{pod}"),
            (None, Some(pod), _) => pod.to_string(),
            (_, _, Some(j)) => format!("slurm-{j}"),
            _ => format!(
                "{}-{}",
                self.name.get(i).unwrap_or("process"),
                self.pid.get(i).unwrap_or(0)
            ),
        }
    }
}

/// A label's key: string ids of namespace, pod, job and process name, and the pid.
type LabelKey = (
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<i64>,
);
/// Peak memory, activity values, loaded hours.
type ProcAcc = (f64, Vec<f64>, BTreeSet<i64>);

/// The process rows read so far. Labels are made once per distinct (namespace, pod, job, name,
/// pid) and numbered by their text (two keys with one text are one workload, as before); rows
/// are keyed by string ids and the label's number, and turned into owned keys once per
/// workload ([`ProcScan::finish`]).
#[derive(Default)]
struct ProcScan {
    label_of: FastMap<LabelKey, usize>,
    label_ids: FastMap<String, usize>,
    labels: Vec<String>,
    /// (node, uuid, gi) -> labels
    on_instance_ids: FastMap<(u32, u32, i64), BTreeSet<usize>>,
    /// (node, uuid, label) -> its place in `procs`.
    procs_ids: FastMap<(u32, u32, usize), usize>,
    /// The process's measurements and the last hour added (rows of one key come in time order
    /// in history, so most rows add no hour).
    procs: Vec<(ProcAcc, Option<i64>)>,
    /// Recent label keys and process keys (rows cycle through a node's few processes).
    recent_labels: DirectCache<LabelKey, usize>,
    recent_procs: DirectCache<(u32, u32, usize), usize>,
}

impl ProcScan {
    /// Adds process row `i`.
    fn row(&mut self, c: &ProcCols, i: usize, p: &DemandParams) {
        let (Some(n), Some(u)) = (c.node.at(i), c.uuid.at(i)) else {
            return;
        };
        let l = self.label(c, i);
        if let Some(gi) = c.gi.get(i) {
            self.on_instance_ids
                .entry((n, u, gi))
                .or_default()
                .insert(l);
            return;
        }
        let key = (n, u, l);
        let at = cache_slot([u64::from(n), u64::from(u), l as u64]);
        let k = match self.recent_procs.get(at, &key) {
            Some(k) => k,
            None => {
                let procs = &mut self.procs;
                let k = *self.procs_ids.entry(key).or_insert_with(|| {
                    procs.push(((0.0, Vec::new(), BTreeSet::new()), None));
                    procs.len() - 1
                });
                self.recent_procs.put(at, key, k);
                k
            }
        };
        let (e, last_hour) = &mut self.procs[k];
        let m = c.mem.get(i).unwrap_or(0.0);
        e.0 = e.0.max(m);
        if m >= p.min_memory_bytes
            && let Some(t) = c.ts.get(i)
        {
            let h = hour_of(t);
            if *last_hour != Some(h) {
                e.2.insert(h);
                *last_hour = Some(h);
            }
        }
        if let Some(v) = c.sm.get(i) {
            e.1.push(v);
        }
    }

    /// Row `i`'s label number (a recent key's from the cache).
    fn label(&mut self, c: &ProcCols, i: usize) -> usize {
        let key = (
            c.ns.at(i),
            c.pod.at(i),
            c.job.at(i),
            c.name.at(i),
            c.pid.get(i),
        );
        let at = cache_slot([
            key.0.map_or(u64::MAX, u64::from),
            key.1.map_or(u64::MAX, u64::from),
            key.2.map_or(u64::MAX, u64::from),
            key.3.map_or(u64::MAX, u64::from),
            key.4.map_or(u64::MAX, |p| p as u64),
        ]);
        match self.recent_labels.get(at, &key) {
            Some(l) => l,
            None => {
                let (label_ids, labels) = (&mut self.label_ids, &mut self.labels);
                let l = *self.label_of.entry(key).or_insert_with(|| {
                    let text = c.label(i);
                    *label_ids.entry(text.clone()).or_insert_with(|| {
                        labels.push(text);
                        labels.len() - 1
                    })
                });
                self.recent_labels.put(at, key, l);
                l
            }
        }
    }

    /// The labels per MIG instance and the processes by GPU, keyed by their strings.
    fn finish(self, c: &ProcCols) -> (OnInstance, ProcsByGpu) {
        let labels = self.labels;
        let str_of = |ids: &columns::Ids, id: u32| ids.strings[id as usize].to_string();
        let on_instance: OnInstance = self
            .on_instance_ids
            .into_iter()
            .map(|((n, u, gi), ls)| {
                let names = ls.into_iter().map(|l| labels[l].clone()).collect();
                ((str_of(c.node, n), str_of(c.uuid, u), gi), names)
            })
            .collect();
        let mut accs = self.procs;
        let procs: BTreeMap<(String, String, String), ProcAcc> = self
            .procs_ids
            .into_iter()
            .map(|((n, u, l), k)| {
                let acc = std::mem::take(&mut accs[k].0);
                let key = (str_of(c.node, n), str_of(c.uuid, u), labels[l].clone());
                (key, acc)
            })
            .collect();
        let mut procs_by_gpu: ProcsByGpu = HashMap::new();
        for ((n, u, l), (m, s, h)) in procs {
            procs_by_gpu.entry((n, u)).or_default().push((l, m, s, h));
        }
        (on_instance, procs_by_gpu)
    }
}

/// The MIG frame's columns [`mig_workloads`] reads.
struct MigCols {
    ts: I64s,
    node: Strs,
    uuid: Strs,
    gpu: I64s,
    gi_s: Strs,
    gi: I64s,
    prof: I64s,
    mem: F64s,
    sm: F64s,
}

impl MigCols {
    fn read(frames: &Frames) -> Result<(MigCols, usize), DemandError> {
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
        let c = MigCols {
            ts: columns::i64s(&mdf, "ts")?,
            node: columns::strs(&mdf, "node")?,
            uuid: columns::strs(&mdf, "uuid")?,
            gpu: columns::i64s(&mdf, "gpu")?,
            gi_s: columns::strs(&mdf, "gpu_instance")?,
            gi: columns::i64s(&mdf, "gpu_instance")?,
            prof: columns::i64s(&mdf, "profile_id")?,
            mem: columns::f64s(&mdf, "memory_used_max_bytes")?,
            sm: columns::f64s(&mdf, "sm_active_mean")?,
        };
        Ok((c, mdf.height()))
    }
}

/// One MIG instance's outcome in [`mig_workloads`].
// One value per instance, matched at once: boxing the workload would buy nothing.
enum MigInstance {
    /// Not a workload (too little memory and no process seen, or its GPU not in MIG mode now).
    Skip,
    /// On a GPU of unknown model, or of an unknown profile id.
    UnknownProfile,
    Workload(Box<Named>),
}

/// The MIG instance workloads (rows grouped by node, uuid and GPU instance), and how many
/// instances were left out for unknown profiles.
fn mig_workloads(
    frames: &Frames,
    p: &DemandParams,
    gpus: &[GpuRow],
    on_instance: &OnInstance,
) -> Result<(Vec<Named>, usize), DemandError> {
    let (c, height) = MigCols::read(frames)?;
    let model_of: HashMap<(&str, &str), &str> = gpus
        .iter()
        .map(|g| ((g.node.as_str(), g.uuid.as_str()), g.model.as_str()))
        .collect();
    let mig_now: HashSet<(&str, &str)> = gpus
        .iter()
        .filter(|g| g.mig)
        .map(|g| (g.node.as_str(), g.uuid.as_str()))
        .collect();
    let (mut out, mut unknown_profiles) = (Vec::new(), 0);
    for rows in columns::groups(&[&c.node, &c.uuid, &c.gi_s], &c.ts, height) {
        match mig_instance(&c, &rows, p, on_instance, &model_of, &mig_now) {
            MigInstance::Skip => {}
            MigInstance::UnknownProfile => unknown_profiles += 1,
            MigInstance::Workload(w) => out.push(*w),
        }
    }
    Ok((out, unknown_profiles))
}

/// One MIG instance's workload from its `rows` (in time order).
fn mig_instance(
    c: &MigCols,
    rows: &[usize],
    p: &DemandParams,
    on_instance: &OnInstance,
    model_of: &HashMap<(&str, &str), &str>,
    mig_now: &HashSet<(&str, &str)>,
) -> MigInstance {
    let f = rows[rows.len() - 1];
    let (Some(n), Some(u), Some(gi)) = (c.node.get(f), c.uuid.get(f), c.gi.get(f)) else {
        return MigInstance::Skip;
    };
    let peak = rows
        .iter()
        .map(|&r| c.mem.get(r).unwrap_or(0.0))
        .fold(0.0, f64::max);
    let names = on_instance.get(&(n.to_string(), u.to_string(), gi));
    if peak < p.min_memory_bytes && names.is_none() {
        return MigInstance::Skip;
    }
    if !mig_now.contains(&(n, u)) {
        return MigInstance::Skip;
    }
    let model = model_of.get(&(n, u)).copied().unwrap_or("");
    let prof = mig::model(model)
        .or_else(|| mig::model_by_nvml_name(model))
        .and_then(|m| c.prof.get(f).and_then(|id| m.profile(id as u32)));
    let Some(prof) = prof else {
        return MigInstance::UnknownProfile;
    };
    let mut act: Vec<f64> = rows.iter().filter_map(|&r| c.sm.get(r)).collect();
    let q = quantile(&mut act, p.quantile);
    let slices = prof.compute_slices;
    let index = c.gpu.get(f).unwrap_or(0);
    let id = match names {
        Some(ns) => ns.iter().cloned().collect::<Vec<_>>().join("+"),
        None => format!("{n}/GPU{index}/GI{gi}"),
    };
    MigInstance::Workload(Box::new((
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
                .filter(|&&r| c.mem.get(r).unwrap_or(0.0) >= p.min_memory_bytes)
                .filter_map(|&r| c.ts.get(r).map(hour_of))
                .collect(),
            source: Some(WorkloadSource {
                kind: WorkloadKind::Mig,
                node: n.to_string(),
                gpu: u32::try_from(index).unwrap_or(0),
                uuid: Some(u.to_string()),
                gpu_instance: u32::try_from(gi).ok(),
                label: None,
                memory_peak_bytes: Some(peak as u64),
                activity: q,
                slices_basis: Some(slices),
            }),
        },
    )))
}

/// The workloads of a GPU outside MIG mode, pushed to `out`: its processes (`procs`) that hold
/// enough memory, else the GPU itself when it does.
fn gpu_workloads(g: &mut GpuRow, procs: Vec<Proc>, p: &DemandParams, out: &mut Vec<Named>) {
    let gpu_act = if !g.sm.is_empty() {
        quantile(&mut g.sm, p.quantile).map(|a| (a, "sm_active"))
    } else {
        quantile(&mut g.busy, p.quantile).map(|a| (a, "busy"))
    };
    let procs: Vec<_> = procs
        .into_iter()
        .filter(|(_, m, _, _)| *m >= p.min_memory_bytes)
        .collect();
    if procs.is_empty() {
        if g.peak_mem < p.min_gpu_memory_bytes {
            return;
        }
        let name = format!("{}/GPU{}", g.node, g.index);
        let loaded = g.loaded.clone();
        out.push(named(g, name, "gpu", g.peak_mem, gpu_act, loaded, p));
        return;
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
        out.push(named(g, l, "process", m, act, hours, p));
    }
}

/// A workload on GPU `g` (outside MIG mode) of `kind`, with its peak memory, activity (and its
/// signal) and loaded hours; compute is scaled by the GPU's compute slices.
fn named(
    g: &GpuRow,
    id: String,
    kind: &'static str,
    peak: f64,
    act: Option<(f64, &'static str)>,
    loaded_hours: BTreeSet<i64>,
    p: &DemandParams,
) -> Named {
    let slices = slices_of(&g.model);
    let source = WorkloadSource {
        kind: if kind == "gpu" {
            WorkloadKind::Gpu
        } else {
            WorkloadKind::Process
        },
        node: g.node.clone(),
        gpu: g.index,
        uuid: Some(g.uuid.clone()),
        gpu_instance: None,
        label: (kind != "gpu").then(|| id.clone()),
        memory_peak_bytes: Some(peak as u64),
        activity: act.map(|(a, _)| a),
        slices_basis: Some(slices),
    };
    (
        id,
        Workload {
            id: String::new(),
            node: Some(g.node.clone()),
            current_gpu: Some(g.uuid.clone()),
            memory_bytes: memory_need(peak, p.headroom),
            compute_slices: act.map_or(slices, |(a, _)| compute_need(a, slices)),
        },
        Measured {
            kind,
            peak_memory_bytes: peak as u64,
            activity: act.map(|(a, _)| a),
            activity_source: act.map_or("none", |(_, s)| s),
            slices_basis: slices,
            loaded_hours,
            source: Some(source),
        },
    )
}
