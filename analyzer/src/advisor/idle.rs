//! Idle-loaded models: an entity that holds ≥ `min_memory` of GPU memory while its activity stays
//! ≤ `max_activity` — judged on the *max* of each history interval, never the mean — for
//! ≥ `min_duration` without a break. A row that is not idle, has no activity signal, or follows a
//! gap longer than `max_gap_intervals` intervals ends a span.
//!
//! Entities, most specific first: processes (the `process` table); MIG instances without
//! process rows; whole GPUs (outside MIG mode) without process rows (e.g. dcgm-exporter data).
//! Activity, first present: the process's own SM utilisation, its MIG instance's SM activity,
//! the GPU's SM activity, the GPU's busy ratio — the finding says which one it used.
//!
//! This module does not decide what to do with a model beyond suggesting an action.

use std::collections::BTreeMap;

use polars::prelude::*;
use serde::Serialize;
use serde_json::json;

use super::columns::{self, Strs, groups, ts_ms};
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

/// A typed all-null column (keeps the three entity kinds' schemas equal for the concat).
fn null(name: &str, ty: DataType) -> Expr {
    lit(NULL).cast(ty).alias(name)
}

/// Unified per-row columns of all three entity kinds.
fn rows(frames: &Frames) -> Result<LazyFrame, AdvisorError> {
    let s = |v: &str| lit(v.to_string());
    let gpu = frames.gpu.clone().select([
        col("node"),
        col("uuid"),
        ts_ms().alias("ts"),
        col("sm_active_max").alias("g_sm"),
        col("busy_max").alias("g_busy"),
        col("model"),
        col("mig_enabled"),
    ]);
    let mig = frames
        .mig
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("gpu_instance").cast(DataType::Int64),
            ts_ms().alias("ts"),
            col("sm_active_max"),
            col("memory_used_max_bytes"),
            col("mig_uuid"),
            col("profile"),
        ])
        .group_by([col("node"), col("uuid"), col("gpu_instance"), col("ts")])
        .agg([
            col("sm_active_max").max().alias("m_sm"),
            col("memory_used_max_bytes")
                .cast(DataType::Float64)
                .sum()
                .alias("m_mem"),
            col("mig_uuid").first(),
            col("profile").first(),
        ]);
    let proc_keys = frames
        .process
        .clone()
        .select([col("node"), col("uuid")])
        .unique(None, UniqueKeepStrategy::Any)
        .with_column(lit(true).alias("gpu_has_proc"));
    let proc_gi_keys = frames
        .process
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("gpu_instance").cast(DataType::Int64),
        ])
        .unique(None, UniqueKeepStrategy::Any)
        .with_column(lit(true).alias("gi_has_proc"));
    let on = |c: &[&str]| c.iter().map(|c| col(*c)).collect::<Vec<_>>();
    let left = |a: LazyFrame, b: LazyFrame, keys: &[&str]| {
        a.join(
            b,
            on(keys),
            on(keys),
            JoinArgs::new(JoinType::Left).with_coalesce(JoinCoalesce::CoalesceColumns),
        )
    };

    let act_src = |p: Option<&str>, m: Option<&str>| {
        // The first present of process sm, MIG sm, GPU sm, GPU busy.
        let mut c: Vec<(Expr, &str)> = Vec::new();
        if let Some(p) = p {
            c.push((col(p), "process_sm"));
        }
        if let Some(m) = m {
            c.push((col(m), "mig_sm_active"));
        }
        c.push((col("g_sm"), "gpu_sm_active"));
        c.push((col("g_busy"), "gpu_busy"));
        let mut act = lit(NULL).cast(DataType::Float64);
        let mut src = lit(NULL).cast(DataType::String);
        for (e, name) in c.into_iter().rev() {
            act = when(e.clone().is_not_null()).then(e.clone()).otherwise(act);
            src = when(e.is_not_null()).then(s(name)).otherwise(src);
        }
        (act, src)
    };

    // Processes.
    let procs = frames.process.clone().select([
        col("node"),
        col("uuid"),
        col("gpu").cast(DataType::Int64),
        col("pid").cast(DataType::Int64),
        col("process"),
        col("gpu_instance").cast(DataType::Int64),
        col("namespace"),
        col("pod"),
        col("pod_uid"),
        col("slurm_job_id"),
        ts_ms().alias("ts"),
        col("interval_ms").cast(DataType::Int64),
        col("memory_used_max_bytes")
            .cast(DataType::Float64)
            .alias("mem"),
        col("sm_max").alias("p_sm"),
    ]);
    let procs = left(procs, gpu.clone(), &["node", "uuid", "ts"]);
    let procs = left(procs, mig.clone(), &["node", "uuid", "gpu_instance", "ts"]);
    let (p_act, p_src) = act_src(Some("p_sm"), Some("m_sm"));
    let (w_act, _) = act_src(None, Some("m_sm"));
    let procs = procs.select([
        s("process").alias("kind"),
        col("node"),
        col("uuid"),
        col("gpu"),
        col("gpu_instance"),
        col("pid"),
        col("process"),
        col("namespace"),
        col("pod").fill_null(col("pod_uid")).alias("pod"),
        col("slurm_job_id"),
        col("model"),
        col("mig_uuid"),
        col("profile"),
        col("ts"),
        col("interval_ms"),
        col("mem"),
        p_act.alias("act"),
        p_src.alias("act_src"),
        w_act.alias("whole_act"),
    ]);

    // MIG instances without process rows.
    let migs = frames.mig.clone().select([
        col("node"),
        col("uuid"),
        col("gpu").cast(DataType::Int64),
        col("gpu_instance").cast(DataType::Int64),
        ts_ms().alias("ts"),
        col("interval_ms").cast(DataType::Int64),
    ]);
    let migs = migs
        .group_by([col("node"), col("uuid"), col("gpu_instance"), col("ts")])
        .agg([col("gpu").first(), col("interval_ms").first()]);
    let migs =
        left(migs, mig, &["node", "uuid", "gpu_instance", "ts"]).filter(col("m_mem").is_not_null());
    let migs = left(migs, proc_gi_keys, &["node", "uuid", "gpu_instance"])
        .filter(col("gi_has_proc").is_null());
    let migs = left(migs, gpu.clone(), &["node", "uuid", "ts"]);
    let migs = migs.select([
        s("mig").alias("kind"),
        col("node"),
        col("uuid"),
        col("gpu"),
        col("gpu_instance"),
        null("pid", DataType::Int64),
        null("process", DataType::String),
        null("namespace", DataType::String),
        null("pod", DataType::String),
        null("slurm_job_id", DataType::String),
        col("model"),
        col("mig_uuid"),
        col("profile"),
        col("ts"),
        col("interval_ms"),
        col("m_mem").alias("mem"),
        col("m_sm").alias("act"),
        when(col("m_sm").is_not_null())
            .then(s("mig_sm_active"))
            .otherwise(lit(NULL).cast(DataType::String))
            .alias("act_src"),
        col("m_sm").alias("whole_act"),
    ]);

    // Whole GPUs outside MIG mode without process rows.
    let gpus = frames.gpu.clone().select([
        col("node"),
        col("uuid"),
        col("gpu").cast(DataType::Int64),
        ts_ms().alias("ts"),
        col("interval_ms").cast(DataType::Int64),
        col("memory_used_max_bytes")
            .cast(DataType::Float64)
            .alias("mem"),
        col("sm_active_max").alias("g_sm"),
        col("busy_max").alias("g_busy"),
        col("model"),
        col("mig_enabled"),
    ]);
    let gpus = left(gpus, proc_keys, &["node", "uuid"])
        .filter(col("gpu_has_proc").is_null())
        .filter(col("mig_enabled").fill_null(lit(false)).not());
    let (g_act, g_src) = act_src(None, None);
    let gpus = gpus.select([
        s("gpu").alias("kind"),
        col("node"),
        col("uuid"),
        col("gpu"),
        null("gpu_instance", DataType::Int64),
        null("pid", DataType::Int64),
        null("process", DataType::String),
        null("namespace", DataType::String),
        null("pod", DataType::String),
        null("slurm_job_id", DataType::String),
        col("model"),
        null("mig_uuid", DataType::String),
        null("profile", DataType::String),
        col("ts"),
        col("interval_ms"),
        col("mem"),
        g_act.clone().alias("act"),
        g_src.alias("act_src"),
        g_act.alias("whole_act"),
    ]);

    let all = concat([procs, migs, gpus], UnionArgs::default())?;
    Ok(all.with_columns([
        col("gpu_instance")
            .cast(DataType::String)
            .fill_null(lit(""))
            .alias("gi_key"),
        col("pid")
            .cast(DataType::String)
            .fill_null(lit(""))
            .alias("pid_key"),
        col("process").fill_null(lit("")).alias("process_key"),
    ]))
}

/// Compute slices of a MIG profile name (`3g.40gb` → 3), as a share of the GPU's 7.
fn profile_share(profile: Option<&str>) -> f64 {
    profile
        .and_then(|p| p.split('g').next())
        .and_then(|n| n.parse::<f64>().ok())
        .map_or(1.0, |n| (n / 7.0).min(1.0))
}

/// Finds every entity's idle spans.
pub fn idle_entities(frames: &Frames, p: &IdleParams) -> Result<Vec<IdleEntity>, AdvisorError> {
    let df = rows(frames)?.collect()?;
    let n = df.height();
    let key = |c: &str| columns::strs(&df, c);
    let (kind, node, uuid, gi_key, pid_key, process_key) = (
        key("kind")?,
        key("node")?,
        key("uuid")?,
        key("gi_key")?,
        key("pid_key")?,
        key("process_key")?,
    );
    let gpu = columns::i64s(&df, "gpu")?;
    let gi = columns::i64s(&df, "gpu_instance")?;
    let pid = columns::i64s(&df, "pid")?;
    let process = key("process")?;
    let namespace = key("namespace")?;
    let pod = key("pod")?;
    let slurm = key("slurm_job_id")?;
    let model = key("model")?;
    let mig_uuid = key("mig_uuid")?;
    let profile = key("profile")?;
    let ts = columns::i64s(&df, "ts")?;
    let interval = columns::i64s(&df, "interval_ms")?;
    let mem = columns::f64s(&df, "mem")?;
    let act = columns::f64s(&df, "act")?;
    let act_src = key("act_src")?;
    let whole = columns::f64s(&df, "whole_act")?;

    let keys: [&Strs; 6] = [&kind, &node, &uuid, &gi_key, &pid_key, &process_key];
    let mut out = Vec::new();
    for r in groups(&keys, &ts, n) {
        let first = r[0];
        let mut spans = Vec::new();
        let mut observed = 0i64;
        let mut unjudged = 0u64;
        let mut sources: BTreeMap<String, u64> = BTreeMap::new();
        let mut cur: Option<IdleSpan> = None;
        let mut prev_ts: Option<i64> = None;
        let share = profile_share(profile.get(first));
        let close = |cur: &mut Option<IdleSpan>, spans: &mut Vec<IdleSpan>| {
            if let Some(s) = cur.take()
                && s.end_ms - s.start_ms >= p.min_duration_ms
            {
                spans.push(s);
            }
        };
        for &i in &r {
            let (Some(t), Some(iv)) = (ts.get(i), interval.get(i)) else {
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
            let m = mem.get(i).unwrap_or(0.0);
            let a = act.get(i);
            if let Some(src) = act_src.get(i) {
                *sources.entry(src.to_string()).or_default() += 1;
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
            let whole_idle = whole.get(i).is_some_and(|w| w <= p.max_activity);
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
        let o = |s: &Strs| s.get(first).filter(|v| !v.is_empty()).map(str::to_string);
        let entity = Entity {
            kind: kind.get(first).unwrap_or("").to_string(),
            node: o(&node),
            gpu: gpu.get(first).map(|g| g as u32),
            uuid: o(&uuid),
            model: o(&model),
            mig_uuid: o(&mig_uuid),
            gpu_instance: gi.get(first).map(|g| g as u32),
            pid: pid.get(first).map(|p| p as u32),
            process: o(&process),
            namespace: o(&namespace),
            pod: o(&pod),
            slurm_job: o(&slurm),
        };
        let activity_source = sources
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(s, _)| s.clone())
            .unwrap_or_else(|| "none".into());
        out.push(IdleEntity {
            entity,
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
