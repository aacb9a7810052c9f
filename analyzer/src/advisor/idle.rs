//! Idle-loaded models: an entity that holds ≥ `min_memory` of GPU memory while its activity stays
//! ≤ `max_activity` — judged on the *max* of each history interval, never the mean — for
//! ≥ `min_duration` without a break. A row that is not idle, has no activity signal, or follows a
//! gap longer than `max_gap_intervals` intervals ends a span.
//!
//! Entities, most specific first: processes (the `process` table; identified by node, GPU, MIG
//! instance, pid, process name and pod); MIG instances without
//! process rows; whole GPUs (outside MIG mode) without process rows (e.g. dcgm-exporter data).
//! Activity, first present: the process's own SM utilisation, its MIG instance's SM activity,
//! the GPU's SM activity, the GPU's busy ratio — the finding says which one it used.
//!
//! This module does not decide what to do with a model beyond suggesting an action.

use std::collections::BTreeMap;

use polars::prelude::*;
use serde::Serialize;
use serde_json::json;

use super::columns::{self, FastMap as HashMap, FastSet as HashSet, ts_ms};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity, finding_id,
    hours, r3, unbox,
};
use crate::ingest::{Frames, fmt_ms};

const GIB: f64 = (1u64 << 30) as f64;

/// Thresholds (flags `--idle.*`).
#[derive(Debug, Clone)]
pub struct IdleParams {
    /// Memory held for an entity to count as loaded, bytes (default 1 GiB).
    pub min_memory_bytes: f64,
    /// Highest activity (0–1) that still counts as idle (default 0.01).
    pub max_activity: f64,
    /// Shortest idle span reported, ms (default 60 min).
    pub min_duration_ms: i64,
    /// A gap longer than this many intervals breaks a span (default 2).
    pub max_gap_intervals: f64,
}

impl Default for IdleParams {
    fn default() -> Self {
        IdleParams {
            min_memory_bytes: GIB,
            max_activity: 0.01,
            min_duration_ms: 3_600_000,
            max_gap_intervals: 2.0,
        }
    }
}

/// The idle-loaded detector.
pub struct IdleLoaded;

/// One idle span of an entity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleSpan {
    /// Start (the start of the first idle interval) and end (end of the last), unix ms.
    pub start_ms: i64,
    pub end_ms: i64,
    /// Peak memory held during the span, bytes.
    pub memory_max_bytes: f64,
    /// Σ memory × time over the span, GiB-hours.
    pub gib_hours: f64,
    /// GPU-hours during which the entity's whole GPU (or MIG instance) was idle too, weighted by
    /// the instance's share of the GPU.
    pub reclaimable_gpu_hours: f64,
}

/// An entity's idle spans (the detector's raw result; [`IdleLoaded`] turns them into findings).
#[derive(Debug, Clone, Serialize)]
pub struct IdleEntity {
    pub entity: Entity,
    /// `process_sm`, `mig_sm_active`, `gpu_sm_active` or `gpu_busy` (the most used one).
    pub activity_source: String,
    pub spans: Vec<IdleSpan>,
    /// Time the entity was observed (rows × interval), ms.
    pub observed_ms: i64,
    /// Rows with memory held but no activity signal at all.
    pub unjudged_rows: u64,
}

/// Compute slices of a MIG profile name (`3g.40gb` → 3), as a share of the GPU's 7.
fn profile_share(profile: Option<&str>) -> f64 {
    profile
        .and_then(|p| p.split('g').next())
        .and_then(|n| n.parse::<f64>().ok())
        .map_or(1.0, |n| (n / 7.0).min(1.0))
}

/// Interns `(node, uuid)` pairs of one partition as small integers.
#[derive(Default)]
struct GpuIds<'a> {
    ids: HashMap<(&'a str, &'a str), u32>,
    last: Option<((&'a str, &'a str), u32)>,
}

impl<'a> GpuIds<'a> {
    fn id(&mut self, node: &'a str, uuid: &'a str) -> u32 {
        if let Some((k, v)) = self.last
            && k == (node, uuid)
        {
            return v;
        }
        let n = self.ids.len() as u32;
        let v = *self.ids.entry((node, uuid)).or_insert(n);
        self.last = Some(((node, uuid), v));
        v
    }
    fn get(&self, node: &str, uuid: &str) -> Option<u32> {
        self.ids.get(&(node, uuid)).copied()
    }
}

/// One MIG instance at one timestamp (rows of the same instance and `ts` combined).
#[derive(Clone, Copy)]
struct MigAt {
    sm: Option<f64>,
    mem: f64,
    gpu: Option<i64>,
    interval: Option<i64>,
}

/// A MIG instance's first MIG UUID and profile, and its timestamps in first-seen order.
type Instance = (Option<String>, Option<String>, Vec<i64>);

/// One row of an entity's series.
#[derive(Clone, Copy)]
struct Row {
    ts: i64,
    interval: Option<i64>,
    mem: f64,
    act: Option<f64>,
    src: Option<&'static str>,
    whole: Option<f64>,
}

/// An entity's identity while its rows are collected.
struct Ent {
    sort_key: [String; 7],
    entity: Entity,
    profile: Option<String>,
    rows: Vec<Row>,
}

/// The first present of the process's SM, its MIG instance's SM, the GPU's SM, the GPU's busy.
fn first_present(c: [(Option<f64>, &'static str); 4]) -> (Option<f64>, Option<&'static str>) {
    c.into_iter()
        .find(|(v, _)| v.is_some())
        .map_or((None, None), |(v, s)| (v, Some(s)))
}

/// Every entity of one partition with its rows (sorted by `ts`), in key order.
///
/// Rows are matched in Rust on interned `(node, uuid)` ids and `ts`, not by joins on string
/// keys (which dominated the advisor's time: docs/performance.md).
fn entities(frames: &Frames) -> Result<Vec<Ent>, AdvisorError> {
    let gdf = frames
        .gpu
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("gpu").cast(DataType::Int64),
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("sm_active_max"),
            col("busy_max"),
            col("memory_used_max_bytes")
                .cast(DataType::Float64)
                .alias("mem"),
            col("model"),
            col("mig_enabled"),
        ])
        .collect()?;
    let mdf = frames
        .mig
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("gpu").cast(DataType::Int64),
            col("gpu_instance").cast(DataType::Int64),
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("sm_active_max"),
            col("memory_used_max_bytes")
                .cast(DataType::Float64)
                .alias("mem"),
            col("mig_uuid"),
            col("profile"),
        ])
        .collect()?;
    let pdf = frames
        .process
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("gpu").cast(DataType::Int64),
            col("pid").cast(DataType::Int64),
            col("process"),
            col("gpu_instance").cast(DataType::Int64),
            col("namespace"),
            col("pod").fill_null(col("pod_uid")).alias("pod"),
            col("slurm_job_id"),
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("memory_used_max_bytes")
                .cast(DataType::Float64)
                .alias("mem"),
            col("sm_max"),
        ])
        .collect()?;

    let mut ids = GpuIds::default();
    // GPU rows.
    let (g_node, g_uuid) = (columns::strs(&gdf, "node")?, columns::strs(&gdf, "uuid")?);
    let g_gpu = columns::i64s(&gdf, "gpu")?;
    let g_ts = columns::i64s(&gdf, "ts")?;
    let g_iv = columns::i64s(&gdf, "interval_ms")?;
    let g_sm = columns::f64s(&gdf, "sm_active_max")?;
    let g_busy = columns::f64s(&gdf, "busy_max")?;
    let g_mem = columns::f64s(&gdf, "mem")?;
    let g_model = columns::strs(&gdf, "model")?;
    let g_mig = columns::bools(&gdf, "mig_enabled")?;
    let mut gpu_at: HashMap<(u32, i64), usize> =
        HashMap::with_capacity_and_hasher(gdf.height(), Default::default());
    let mut model_of: HashMap<u32, String> = HashMap::default();
    let (gv_node, gv_uuid) = (g_node.view_keys(), g_uuid.view_keys());
    // Row → interned GPU id (None when node or uuid is null).
    let mut g_id: Vec<Option<u32>> = Vec::with_capacity(gdf.height());
    let mut by_view: HashMap<(columns::ViewKey, columns::ViewKey), u32> = HashMap::default();
    for i in 0..gdf.height() {
        let id = match (gv_node[i], gv_uuid[i]) {
            (Some(vn), Some(vu)) => Some(match by_view.get(&(vn, vu)) {
                Some(&id) => id,
                None => {
                    let id = ids.id(g_node.get(i).unwrap_or(""), g_uuid.get(i).unwrap_or(""));
                    by_view.insert((vn, vu), id);
                    id
                }
            }),
            _ => None,
        };
        g_id.push(id);
        let (Some(id), Some(t)) = (id, g_ts.get(i)) else {
            continue;
        };
        gpu_at.entry((id, t)).or_insert(i);
        if let Some(m) = g_model.get(i) {
            model_of.entry(id).or_insert_with(|| m.to_string());
        }
    }
    let gpu_act = |id: u32, t: i64| -> [(Option<f64>, &'static str); 2] {
        match gpu_at.get(&(id, t)) {
            Some(&i) => [(g_sm.get(i), "gpu_sm_active"), (g_busy.get(i), "gpu_busy")],
            None => [(None, "gpu_sm_active"), (None, "gpu_busy")],
        }
    };

    // MIG rows, combined per instance and ts (SM: max; memory: sum).
    let (m_node, m_uuid) = (columns::strs(&mdf, "node")?, columns::strs(&mdf, "uuid")?);
    let m_gpu = columns::i64s(&mdf, "gpu")?;
    let m_gi = columns::i64s(&mdf, "gpu_instance")?;
    let m_ts = columns::i64s(&mdf, "ts")?;
    let m_iv = columns::i64s(&mdf, "interval_ms")?;
    let m_sm = columns::f64s(&mdf, "sm_active_max")?;
    let m_mem = columns::f64s(&mdf, "mem")?;
    let m_uuid_mig = columns::strs(&mdf, "mig_uuid")?;
    let m_profile = columns::strs(&mdf, "profile")?;
    let mut mig_at: HashMap<(u32, Option<i64>, i64), MigAt> = HashMap::default();
    // Instance → (first mig uuid, first profile), and its timestamps in first-seen order.
    let mut instances: BTreeMap<(u32, Option<i64>), Instance> = BTreeMap::new();
    let (mv_node, mv_uuid) = (m_node.view_keys(), m_uuid.view_keys());
    let mut by_view: HashMap<(columns::ViewKey, columns::ViewKey), u32> = HashMap::default();
    for i in 0..mdf.height() {
        let (Some(vn), Some(vu), Some(t)) = (mv_node[i], mv_uuid[i], m_ts.get(i)) else {
            continue;
        };
        let id = match by_view.get(&(vn, vu)) {
            Some(&id) => id,
            None => {
                let id = ids.id(m_node.get(i).unwrap_or(""), m_uuid.get(i).unwrap_or(""));
                by_view.insert((vn, vu), id);
                id
            }
        };
        let gi = m_gi.get(i);
        let inst = instances.entry((id, gi)).or_default();
        if inst.0.is_none() {
            inst.0 = m_uuid_mig.get(i).map(str::to_string);
        }
        if inst.1.is_none() {
            inst.1 = m_profile.get(i).map(str::to_string);
        }
        match mig_at.entry((id, gi, t)) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let e = e.get_mut();
                e.sm = match (e.sm, m_sm.get(i)) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                e.mem += m_mem.get(i).unwrap_or(0.0);
                e.gpu = e.gpu.or(m_gpu.get(i));
                e.interval = e.interval.or(m_iv.get(i));
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(MigAt {
                    sm: m_sm.get(i),
                    mem: m_mem.get(i).unwrap_or(0.0),
                    gpu: m_gpu.get(i),
                    interval: m_iv.get(i),
                });
                inst.2.push(t);
            }
        }
    }

    let mut out: Vec<Ent> = Vec::new();
    let key = |kind: &str,
               node: &str,
               uuid: &str,
               gi: Option<i64>,
               pid: Option<i64>,
               process: Option<&str>,
               pod: Option<&str>| {
        [
            kind.to_string(),
            node.to_string(),
            uuid.to_string(),
            gi.map(|g| g.to_string()).unwrap_or_default(),
            pid.map(|p| p.to_string()).unwrap_or_default(),
            process.unwrap_or("").to_string(),
            pod.unwrap_or("").to_string(),
        ]
    };
    let some = |s: &str| (!s.is_empty()).then(|| s.to_string());

    // Processes.
    let (p_node, p_uuid) = (columns::strs(&pdf, "node")?, columns::strs(&pdf, "uuid")?);
    let p_gpu = columns::i64s(&pdf, "gpu")?;
    let p_pid = columns::i64s(&pdf, "pid")?;
    let p_proc = columns::strs(&pdf, "process")?;
    let p_gi = columns::i64s(&pdf, "gpu_instance")?;
    let p_ns = columns::strs(&pdf, "namespace")?;
    let p_pod = columns::strs(&pdf, "pod")?;
    let p_job = columns::strs(&pdf, "slurm_job_id")?;
    let p_ts = columns::i64s(&pdf, "ts")?;
    let p_iv = columns::i64s(&pdf, "interval_ms")?;
    let p_mem = columns::f64s(&pdf, "mem")?;
    let p_sm = columns::f64s(&pdf, "sm_max")?;
    let mut gpus_with_proc: HashSet<(&str, &str)> = HashSet::default();
    let mut gis_with_proc: HashSet<(&str, &str, Option<i64>)> = HashSet::default();
    // A pod is part of a process's identity: pid-less rows (dcgm-exporter's pod-labelled
    // series) of pods that follow each other on one GPU are different workloads.
    type PKey<'a> = (
        &'a str,
        &'a str,
        Option<i64>,
        Option<i64>,
        Option<&'a str>,
        Option<&'a str>,
    );
    let mut proc_index: HashMap<PKey, usize> = HashMap::default();
    // Entity index and GPU id by (views of node, uuid, process; instance; pid): strings are
    // read only the first time a combination of views is seen.
    type VKey = (
        Option<columns::ViewKey>,
        Option<columns::ViewKey>,
        Option<i64>,
        Option<i64>,
        Option<columns::ViewKey>,
        Option<columns::ViewKey>,
    );
    let mut by_view: HashMap<VKey, (usize, Option<u32>)> = HashMap::default();
    let (pv_node, pv_uuid, pv_proc) = (p_node.view_keys(), p_uuid.view_keys(), p_proc.view_keys());
    let pv_pod = p_pod.view_keys();
    for i in 0..pdf.height() {
        let gi = p_gi.get(i);
        let vk: VKey = (
            pv_node[i],
            pv_uuid[i],
            gi,
            p_pid.get(i),
            pv_proc[i],
            pv_pod[i],
        );
        let (e, id) = match by_view.get(&vk) {
            Some(&x) => x,
            None => {
                let n = p_node.get(i).unwrap_or("");
                let u = p_uuid.get(i).unwrap_or("");
                let k: PKey = (n, u, gi, p_pid.get(i), p_proc.get(i), p_pod.get(i));
                let id = ids.get(n, u);
                let e = *proc_index.entry(k).or_insert_with(|| {
                    gpus_with_proc.insert((n, u));
                    gis_with_proc.insert((n, u, gi));
                    let inst = id.and_then(|id| instances.get(&(id, gi)));
                    out.push(Ent {
                        sort_key: key("process", n, u, gi, k.3, k.4, k.5),
                        entity: Entity {
                            kind: "process".into(),
                            node: some(n),
                            gpu: p_gpu.get(i).map(|g| g as u32),
                            uuid: some(u),
                            model: id.and_then(|id| model_of.get(&id).cloned()),
                            mig_uuid: inst.and_then(|x| x.0.clone()),
                            gpu_instance: gi.map(|g| g as u32),
                            pid: k.3.map(|p| p as u32),
                            process: k.4.and_then(some),
                            namespace: p_ns.get(i).and_then(some),
                            pod: p_pod.get(i).and_then(some),
                            slurm_job: p_job.get(i).and_then(some),
                        },
                        profile: inst.and_then(|x| x.1.clone()),
                        rows: Vec::new(),
                    });
                    out.len() - 1
                });
                by_view.insert(vk, (e, id));
                (e, id)
            }
        };
        let Some(t) = p_ts.get(i) else { continue };
        let mig = id.and_then(|id| mig_at.get(&(id, gi, t)));
        let [g_sm_v, g_busy_v] = id.map_or([(None, "gpu_sm_active"), (None, "gpu_busy")], |id| {
            gpu_act(id, t)
        });
        let m_sm_v = (mig.and_then(|m| m.sm), "mig_sm_active");
        let (act, src) = first_present([(p_sm.get(i), "process_sm"), m_sm_v, g_sm_v, g_busy_v]);
        let (whole, _) = first_present([(None, ""), m_sm_v, g_sm_v, g_busy_v]);
        out[e].rows.push(Row {
            ts: t,
            interval: p_iv.get(i),
            mem: p_mem.get(i).unwrap_or(f64::NAN),
            act,
            src,
            whole,
        });
    }

    // MIG instances without process rows.
    let names: HashMap<u32, (&str, &str)> = ids.ids.iter().map(|(k, v)| (*v, *k)).collect();
    for ((id, gi), (mig_uuid, profile, stamps)) in &instances {
        let (n, u) = names[id];
        if gis_with_proc.contains(&(n, u, *gi)) {
            continue;
        }
        let first = mig_at[&(*id, *gi, stamps[0])];
        let mut rows = Vec::with_capacity(stamps.len());
        for &t in stamps {
            let m = mig_at[&(*id, *gi, t)];
            rows.push(Row {
                ts: t,
                interval: m.interval,
                mem: m.mem,
                act: m.sm,
                src: m.sm.map(|_| "mig_sm_active"),
                whole: m.sm,
            });
        }
        out.push(Ent {
            sort_key: key("mig", n, u, *gi, None, None, None),
            entity: Entity {
                kind: "mig".into(),
                node: some(n),
                gpu: first.gpu.map(|g| g as u32),
                uuid: some(u),
                model: model_of.get(id).cloned(),
                mig_uuid: mig_uuid.clone(),
                gpu_instance: gi.map(|g| g as u32),
                ..Entity::default()
            },
            profile: profile.clone(),
            rows,
        });
    }

    // Whole GPUs outside MIG mode without process rows.
    let mut gpu_ents: HashMap<u32, usize> = HashMap::default();
    let with_proc: HashSet<u32> = gpus_with_proc
        .iter()
        .filter_map(|(n, u)| ids.get(n, u))
        .collect();
    for (i, &id) in g_id.iter().enumerate() {
        let (Some(id), Some(t)) = (id, g_ts.get(i)) else {
            continue;
        };
        if g_mig.get(i).unwrap_or(false) || with_proc.contains(&id) {
            continue;
        }
        let (n, u) = (g_node.get(i).unwrap_or(""), g_uuid.get(i).unwrap_or(""));
        let e = *gpu_ents.entry(id).or_insert_with(|| {
            out.push(Ent {
                sort_key: key("gpu", n, u, None, None, None, None),
                entity: Entity {
                    kind: "gpu".into(),
                    node: some(n),
                    gpu: g_gpu.get(i).map(|g| g as u32),
                    uuid: some(u),
                    model: model_of.get(&id).cloned(),
                    ..Entity::default()
                },
                profile: None,
                rows: Vec::new(),
            });
            out.len() - 1
        });
        let (act, src) = first_present([
            (None, ""),
            (None, ""),
            (g_sm.get(i), "gpu_sm_active"),
            (g_busy.get(i), "gpu_busy"),
        ]);
        out[e].rows.push(Row {
            ts: t,
            interval: g_iv.get(i),
            mem: g_mem.get(i).unwrap_or(f64::NAN),
            act,
            src,
            whole: act,
        });
    }
    out.sort_by(|a, b| a.sort_key.cmp(&b.sort_key));
    for e in &mut out {
        if !e.rows.windows(2).all(|w| w[0].ts <= w[1].ts) {
            e.rows.sort_by_key(|r| r.ts);
        }
    }
    Ok(out)
}

/// Finds every entity's idle spans.
pub fn idle_entities(frames: &Frames, p: &IdleParams) -> Result<Vec<IdleEntity>, AdvisorError> {
    let mut out = Vec::new();
    for ent in entities(frames)? {
        let mut spans = Vec::new();
        let mut observed = 0i64;
        let mut unjudged = 0u64;
        let mut sources: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut cur: Option<IdleSpan> = None;
        let mut prev_ts: Option<i64> = None;
        let share = profile_share(ent.profile.as_deref());
        let close = |cur: &mut Option<IdleSpan>, spans: &mut Vec<IdleSpan>| {
            if let Some(s) = cur.take()
                && s.end_ms - s.start_ms >= p.min_duration_ms
            {
                spans.push(s);
            }
        };
        for r in &ent.rows {
            let (t, Some(iv)) = (r.ts, r.interval) else {
                continue;
            };
            let iv = iv.max(1);
            observed += iv;
            if let Some(pt) = prev_ts
                && (t - pt) as f64 > p.max_gap_intervals * iv as f64
            {
                close(&mut cur, &mut spans);
            }
            prev_ts = Some(t);
            let m = if r.mem.is_finite() { r.mem } else { 0.0 };
            let a = r.act.filter(|a| a.is_finite());
            if let Some(src) = r.src {
                *sources.entry(src).or_default() += 1;
            }
            if m >= p.min_memory_bytes && a.is_none() {
                unjudged += 1;
            }
            let idle = m >= p.min_memory_bytes && a.is_some_and(|a| a <= p.max_activity);
            if !idle {
                close(&mut cur, &mut spans);
                continue;
            }
            let h = hours(iv);
            let whole_idle = r.whole.is_some_and(|w| w <= p.max_activity);
            let s = cur.get_or_insert(IdleSpan {
                start_ms: t - iv,
                end_ms: t,
                memory_max_bytes: 0.0,
                gib_hours: 0.0,
                reclaimable_gpu_hours: 0.0,
            });
            s.end_ms = t;
            s.memory_max_bytes = s.memory_max_bytes.max(m);
            s.gib_hours += m / GIB * h;
            if whole_idle {
                s.reclaimable_gpu_hours += h * share;
            }
        }
        close(&mut cur, &mut spans);
        if spans.is_empty() && unjudged == 0 {
            continue;
        }
        let activity_source = sources
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(s, _)| s.to_string())
            .unwrap_or_else(|| "none".into());
        out.push(IdleEntity {
            entity: ent.entity,
            activity_source,
            spans,
            observed_ms: observed,
            unjudged_rows: unjudged,
        });
    }
    Ok(out)
}

impl Detector for IdleLoaded {
    fn id(&self) -> &'static str {
        "idle_loaded"
    }

    fn title(&self) -> &'static str {
        "Idle-loaded models"
    }

    fn partial(&self, frames: &Frames, params: &Params) -> Result<Partial, AdvisorError> {
        Ok(Box::new(idle_entities(frames, &params.idle)?))
    }

    fn finish(&self, parts: Vec<Partial>, params: &Params) -> Result<DetectorOutput, AdvisorError> {
        let p = &params.idle;
        let entities: Vec<IdleEntity> = unbox::<Vec<IdleEntity>>(self.id(), parts)?
            .into_iter()
            .flatten()
            .collect();
        let mut out = DetectorOutput::default();
        let unjudged: Vec<&IdleEntity> = entities.iter().filter(|e| e.unjudged_rows > 0).collect();
        if !unjudged.is_empty() {
            let rows: u64 = unjudged.iter().map(|e| e.unjudged_rows).sum();
            out.notes.push(format!(
                "{} entit{} held memory with no activity signal in {rows} row(s) and could not be judged there (e.g. MIG without GPM or per-process utilisation): {}",
                unjudged.len(),
                if unjudged.len() == 1 { "y" } else { "ies" },
                unjudged
                    .iter()
                    .take(5)
                    .map(|e| e.entity.label())
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        let (mut gib_h, mut gpu_h) = (0.0, 0.0);
        for e in entities.iter().filter(|e| !e.spans.is_empty()) {
            let idle_ms: i64 = e.spans.iter().map(|s| s.end_ms - s.start_ms).sum();
            let gib_hours: f64 = e.spans.iter().map(|s| s.gib_hours).sum();
            let reclaim: f64 = e.spans.iter().map(|s| s.reclaimable_gpu_hours).sum();
            let mem_max = e
                .spans
                .iter()
                .map(|s| s.memory_max_bytes)
                .fold(0.0, f64::max);
            let longest = e
                .spans
                .iter()
                .map(|s| s.end_ms - s.start_ms)
                .max()
                .unwrap_or(0);
            gib_h += gib_hours;
            gpu_h += reclaim;
            let idle_share = if e.observed_ms > 0 {
                (idle_ms as f64 / e.observed_ms as f64).min(1.0)
            } else {
                0.0
            };
            let action = if idle_share >= 0.9 {
                "scale to zero: it held memory without doing any work for the whole observed period"
                    .to_string()
            } else if mem_max <= 10.0 * GIB && e.entity.kind != "mig" {
                format!(
                    "move to a 1g MIG slice (it holds at most {:.1} GiB) or scale to zero during its idle spans",
                    mem_max / GIB
                )
            } else {
                "share the GPU (MPS or time-slicing) with another workload, or scale to zero during its idle spans"
                    .to_string()
            };
            let severity = if idle_share >= 0.5 || longest >= 24 * 3_600_000 {
                Severity::Warning
            } else {
                Severity::Info
            };
            let ident = [
                e.entity.kind.as_str(),
                e.entity.node.as_deref().unwrap_or(""),
                e.entity.uuid.as_deref().unwrap_or(""),
                e.entity.mig_uuid.as_deref().unwrap_or(""),
                e.entity.process.as_deref().unwrap_or(""),
                e.entity.pod.as_deref().unwrap_or(""),
                e.entity.slurm_job.as_deref().unwrap_or(""),
                &e.entity.pid.map(|p| p.to_string()).unwrap_or_default(),
            ];
            out.findings.push(Finding {
                id: finding_id(self.id(), &ident),
                detector: self.id(),
                severity,
                summary: format!(
                    "{} held up to {:.1} GiB idle for {:.1} h in {} span(s) ({:.0}% of the time observed; activity from {})",
                    e.entity.label(),
                    mem_max / GIB,
                    hours(idle_ms),
                    e.spans.len(),
                    idle_share * 100.0,
                    e.activity_source
                ),
                entity: e.entity.clone(),
                action,
                evidence: json!({
                    "activity_source": e.activity_source,
                    "idle_hours": r3(hours(idle_ms)),
                    "idle_share": r3(idle_share),
                    "observed_hours": r3(hours(e.observed_ms)),
                    "memory_max_gib": r3(mem_max / GIB),
                    "idle_gib_hours": r3(gib_hours),
                    "reclaimable_gpu_hours": r3(reclaim),
                    "spans": e.spans.iter().map(|s| json!({
                        "start": fmt_ms(s.start_ms),
                        "end": fmt_ms(s.end_ms),
                        "minutes": r3((s.end_ms - s.start_ms) as f64 / 60_000.0),
                        "memory_max_gib": r3(s.memory_max_bytes / GIB),
                    })).collect::<Vec<_>>(),
                }),
            });
        }
        out.findings.sort_by(|a, b| {
            b.evidence["idle_gib_hours"]
                .as_f64()
                .partial_cmp(&a.evidence["idle_gib_hours"].as_f64())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        out.summary = format!(
            "{} idle-loaded model(s): {:.1} GiB-hours held idle, {:.1} GPU-hours reclaimable (≥ {:.1} GiB held, activity ≤ {:.0}% on interval max, ≥ {} min)",
            out.findings.len(),
            gib_h,
            gpu_h,
            p.min_memory_bytes / GIB,
            p.max_activity * 100.0,
            p.min_duration_ms / 60_000
        );
        Ok(out)
    }
}
