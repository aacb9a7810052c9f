//! The process rows of the plan's `process` workloads (docs/plan.md, `workloads`): the
//! process table's rows outside MIG whose label (`namespace/pod`, the pod, `slurm-JOB`, else
//! `name-pid`, as the MIG planner makes it) is the workload's, memory summed over its processes
//! of one interval; activity the GPU's when the label is the GPU's only one holding memory in
//! the partition, else its own `sm_mean` (else the GPU's). Labels are made once per distinct
//! (namespace, pod, job, process, pid); only the plan's labels keep rows.

use std::collections::BTreeSet;

use polars::prelude::*;

use super::{
    Extracted, GpuAct, Key, MIN_MEMORY_BYTES, Point, Wanted, Ws, act_at, add_raw, known, slices_of,
};
use crate::frames::columns::{self, DirectCache, FastMap, cache_slot, ts_ms};
use crate::frames::{Frames, FramesError};

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

/// A process row kept: end, length, memory and own activity (NaN: unknown).
#[derive(Clone, Copy)]
struct Row {
    ts: i64,
    len: i64,
    mem: f64,
    own: f64,
}

/// One label's rows on one GPU: its peak memory, the plan's workloads with that label (their
/// index and `slices-basis`) and, when there are any, its rows.
struct Label {
    peak: f64,
    ids: Ws,
    rows: Vec<Row>,
}

/// A GPU with process workloads of the plan, within a partition.
struct ProcSlot<'w> {
    key: Key,
    wanted: &'w FastMap<&'w str, Ws>,
    /// Label id → index in `labels`.
    by_label: FastMap<u32, usize>,
    labels: Vec<Label>,
}

/// The process frame's columns the replay reads: time, interval, node, index, pid, name, GPU
/// instance, namespace, pod, Slurm job, memory and own activity.
pub(super) fn process_rows(frames: &Frames) -> Result<DataFrame, FramesError> {
    Ok(frames
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
        .collect()?)
}

impl ProcSlot<'_> {
    /// Adds one process row with label `lid` (text `text`) and memory `m`: to the label's peak
    /// always, the row itself only when the plan has workloads with that label.
    fn record(&mut self, lid: u32, text: &str, m: Option<f64>, row: Row) {
        let ProcSlot {
            wanted,
            by_label,
            labels,
            ..
        } = self;
        let e = *by_label.entry(lid).or_insert_with(|| {
            let ids = wanted.get(text).cloned().unwrap_or_default();
            labels.push(Label {
                peak: 0.0,
                ids,
                rows: Vec::new(),
            });
            labels.len() - 1
        });
        let e = &mut labels[e];
        e.peak = e.peak.max(m.unwrap_or(0.0));
        if !e.ids.is_empty() {
            e.rows.push(row);
        }
    }
}

/// Pushes a GPU's kept labels' rows into their workloads' series in `ex`: rows of one interval
/// merged (memory and own activity summed), activity the GPU's when the label is alone on it,
/// else its own (else the GPU's).
fn emit_slot(s: ProcSlot, gpu_act: &GpuAct, ex: &mut Extracted) {
    let slices = ex
        .gpus
        .get(&s.key)
        .map_or(7.0, |st| f64::from(slices_of(&st.model)));
    // The planner's rule: a process alone on its GPU takes the GPU's activity.
    let alone = s
        .labels
        .iter()
        .filter(|l| l.peak >= MIN_MEMORY_BYTES)
        .count()
        <= 1;
    let acts = gpu_act.get(&s.key);
    for Label { ids, mut rows, .. } in s.labels {
        if ids.is_empty() {
            continue;
        }
        // Several processes of one label in one interval: memory and own activity summed.
        rows.sort_by_key(|r| r.ts);
        rows.dedup_by(|b, a| {
            let same = a.ts == b.ts;
            if same {
                a.mem = add_raw(a.mem, b.mem);
                a.own = add_raw(a.own, b.own);
            }
            same
        });
        for (idx, basis) in ids {
            let basis = basis.map_or(slices, f64::from);
            ex.gpu_slices[idx] = Some(slices);
            for r in &rows {
                let gpu = acts.and_then(|a| act_at(a, r.ts)).map(|a| a / slices);
                let own = known(r.own);
                let act = if alone { gpu.or(own) } else { own.or(gpu) };
                ex.push(
                    idx,
                    Point::new(r.ts, r.len, known(r.mem), act.map(|a| a * basis)),
                );
            }
        }
    }
}

/// A process row's label key: the string ids of its namespace, pod, job and process name, and
/// its pid.
type LabelKey = (
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<i64>,
);

/// Labels made once per distinct (namespace, pod, job, process, pid), by string id; each label
/// text has one id.
#[derive(Default)]
struct LabelIds {
    of: FastMap<LabelKey, u32>,
    id: FastMap<String, u32>,
    /// The label texts by id.
    text: Vec<String>,
    recent: DirectCache<LabelKey, u32>,
}

impl LabelIds {
    /// The id of the label of `key`, made by `make` the first time the key is seen.
    fn id(&mut self, key: LabelKey, make: impl FnOnce() -> String) -> u32 {
        let p = key.4;
        let at = cache_slot(
            [key.0, key.1, key.2, key.3]
                .map(|v| v.map_or(u64::MAX, u64::from))
                .into_iter()
                .chain([p.map_or(u64::MAX, |p| p as u64)]),
        );
        let LabelIds {
            of,
            id,
            text,
            recent,
        } = self;
        match recent.get(at, &key) {
            Some(lid) => lid,
            None => {
                let lid = *of.entry(key).or_insert_with(|| {
                    *id.entry(make()).or_insert_with_key(|l| {
                        text.push(l.clone());
                        (text.len() - 1) as u32
                    })
                });
                recent.put(at, key, lid);
                lid
            }
        }
    }
}

pub(super) fn processes(
    df: &DataFrame,
    w: &Wanted,
    gpu_act: &GpuAct,
    ex: &mut Extracted,
    nodes: &mut BTreeSet<String>,
) -> Result<(), FramesError> {
    let ts = columns::i64s(df, "ts")?;
    let len = columns::i64s(df, "interval_ms")?;
    let node_s = columns::strs(df, "node")?;
    let node = node_s.ids();
    nodes.extend(node.strings.iter().map(|s| s.to_string()));
    let gpu = columns::i64s(df, "gpu")?;
    let pid = columns::i64s(df, "pid")?;
    let (name_s, ns_s, pod_s, job_s) = (
        columns::strs(df, "process")?,
        columns::strs(df, "namespace")?,
        columns::strs(df, "pod")?,
        columns::strs(df, "slurm_job_id")?,
    );
    let (name, ns, pod, job) = (name_s.ids(), ns_s.ids(), pod_s.ids(), job_s.ids());
    let gi = columns::i64s(df, "gpu_instance")?;
    let mem = columns::f64s(df, "memory_used_max_bytes")?;
    let sm = columns::f64s(df, "sm_mean")?;
    let mut label_ids = LabelIds::default();
    let mut slot: FastMap<(u32, u32), Option<usize>> = FastMap::default();
    let mut recent: DirectCache<(u32, u32), Option<usize>> = DirectCache::default();
    let mut slots: Vec<ProcSlot> = Vec::new();
    for i in 0..df.height() {
        if gi.get(i).is_some() {
            continue;
        }
        let (Some(n), Some(g), Some(t)) = (node.at(i), gpu.get(i), ts.get(i)) else {
            continue;
        };
        let Ok(g) = u32::try_from(g) else { continue };
        let at = cache_slot([u64::from(n), u64::from(g)]);
        let s = match recent.get(at, &(n, g)) {
            Some(s) => s,
            None => {
                let s = *slot.entry((n, g)).or_insert_with(|| {
                    let name = node.get(i).unwrap_or("");
                    let wanted = w.proc.get(&(name, g))?;
                    slots.push(ProcSlot {
                        key: (name.to_string(), g),
                        wanted,
                        by_label: FastMap::default(),
                        labels: Vec::new(),
                    });
                    Some(slots.len() - 1)
                });
                recent.put(at, (n, g), s);
                s
            }
        };
        let Some(s) = s else { continue };
        let p = pid.get(i);
        let key = (ns.at(i), pod.at(i), job.at(i), name.at(i), p);
        let lid = label_ids.id(key, || {
            label(ns.get(i), pod.get(i), job.get(i), name.get(i), p)
        });
        let m = mem.get(i);
        let row = Row {
            ts: t,
            len: len.get(i).unwrap_or(0).max(0),
            mem: m.unwrap_or(f64::NAN),
            own: sm.get(i).unwrap_or(f64::NAN),
        };
        slots[s].record(lid, &label_ids.text[lid as usize], m, row);
    }
    for s in slots {
        emit_slot(s, gpu_act, ex);
    }
    Ok(())
}
