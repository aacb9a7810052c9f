//! Idle-loaded models: an entity that holds ≥ `min_memory` of GPU memory while its activity stays
//! ≤ `max_activity` — judged on the *max* of each history interval, never the mean — for
//! ≥ `min_duration` without a break. A row that is not idle, has no activity signal, or follows a
//! gap longer than `max_gap_intervals` of its own rows and 5 minutes (`super::breaks_span`)
//! ends a span. Rows may have any length (each source's own sampling period): a process row is
//! judged with the GPU or MIG row whose interval covers its end.
//!
//! Entities, most specific first: processes (the `process` table; identified by node, GPU, MIG
//! instance, pid, process name and pod); MIG instances without
//! process rows; whole GPUs (outside MIG mode) without process rows (e.g. dcgm-exporter data).
//! Activity, first present: the process's own SM utilisation, its MIG instance's SM activity,
//! the GPU's SM activity, the GPU's busy ratio — the finding says which one it used.
//!
//! Each partition's entities and their rows are gathered in `rows`; this module judges them,
//! builds the spans and turns them into findings with [`IdleEvidence`].
//!
//! This module does not decide what to do with a model beyond suggesting an action.

mod cols;
mod rows;

use std::collections::BTreeMap;

use serde::Serialize;

use super::evidence::{IdleEvidence, IdleSpanEvidence};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity, finding_id,
    hours, r3, unbox,
};
use crate::frames::Frames;
use crate::times::fmt_ms;
use rows::entities;

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
    /// A gap longer than this many of the entity's own rows (and 5 minutes) breaks a span
    /// (default 3).
    pub max_gap_intervals: f64,
}

impl Default for IdleParams {
    fn default() -> Self {
        IdleParams {
            min_memory_bytes: GIB,
            max_activity: 0.01,
            min_duration_ms: 3_600_000,
            max_gap_intervals: 3.0,
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

/// Finds every entity's idle spans.
pub fn idle_entities(frames: &Frames, p: &IdleParams) -> Result<Vec<IdleEntity>, AdvisorError> {
    Ok(judged(frames, p)?.0)
}

/// Every entity's idle spans, and the GPUs without a memory-used value in any of their rows or
/// their processes' rows (with the GPUs seen): the entities this detector cannot judge.
fn judged(
    frames: &Frames,
    p: &IdleParams,
) -> Result<(Vec<IdleEntity>, (usize, usize)), AdvisorError> {
    let mut out = Vec::new();
    let (ents, cover) = entities(frames)?;
    for ent in ents {
        let mut spans = Vec::new();
        let mut observed = 0i64;
        let mut unjudged = 0u64;
        let mut sources: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut cur: Option<IdleSpan> = None;
        let mut prev_ts: Option<i64> = None;
        let share = crate::frames::mig_profile_share(ent.profile.as_deref());
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
                && super::breaks_span(t - pt, iv, p.max_gap_intervals)
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
    Ok((out, (cover.without, cover.gpus)))
}

impl Detector for IdleLoaded {
    fn id(&self) -> &'static str {
        IdleEvidence::DETECTOR
    }

    fn title(&self) -> &'static str {
        "Idle-loaded models"
    }

    fn partial(&self, frames: &Frames, params: &Params) -> Result<Partial, AdvisorError> {
        Ok(Box::new(judged(frames, &params.idle)?))
    }

    fn finish(&self, parts: Vec<Partial>, params: &Params) -> Result<DetectorOutput, AdvisorError> {
        let p = &params.idle;
        let mut entities: Vec<IdleEntity> = Vec::new();
        let (mut no_memory, mut gpus) = (0usize, 0usize);
        for (e, (n, g)) in unbox::<(Vec<IdleEntity>, (usize, usize))>(self.id(), parts)? {
            entities.extend(e);
            no_memory += n;
            gpus += g;
        }
        let mut out = DetectorOutput::default();
        if no_memory > 0 {
            out.notes.push(format!(
                "memory used is missing for {no_memory} of {gpus} GPU(s) (on the GPU and its processes): not judged (a model is loaded when it holds memory)"
            ));
        }
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
        let mut found: Vec<(Option<f64>, Finding)> = Vec::new();
        for e in entities.iter().filter(|e| !e.spans.is_empty()) {
            let ((gib_hours, reclaim), keyed) = entity_finding(self.id(), e);
            gib_h += gib_hours;
            gpu_h += reclaim;
            found.push(keyed);
        }
        found.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
        out.findings = found.into_iter().map(|(_, f)| f).collect();
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

/// What to do about an entity idle `idle_share` of the time holding at most `mem_max` bytes:
/// scale to zero, move to a small MIG slice, or share its GPU.
fn idle_action(idle_share: f64, mem_max: f64, e: &IdleEntity) -> String {
    if idle_share >= 0.9 {
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
    }
}

/// One entity's finding (detector `id`) from its idle spans, keyed by its GiB-hours held idle
/// (for the order), with its GiB-hours and reclaimable GPU-hours as summed.
#[allow(clippy::type_complexity)]
fn entity_finding(id: &'static str, e: &IdleEntity) -> ((f64, f64), (Option<f64>, Finding)) {
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
    let idle_share = if e.observed_ms > 0 {
        (idle_ms as f64 / e.observed_ms as f64).min(1.0)
    } else {
        0.0
    };
    let action = idle_action(idle_share, mem_max, e);
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
    let evidence = IdleEvidence {
        activity_source: e.activity_source.clone(),
        idle_hours: r3(hours(idle_ms)),
        idle_share: r3(idle_share),
        observed_hours: r3(hours(e.observed_ms)),
        memory_max_gib: r3(mem_max / GIB),
        idle_gib_hours: r3(gib_hours),
        reclaimable_gpu_hours: r3(reclaim),
        spans: e
            .spans
            .iter()
            .map(|s| IdleSpanEvidence {
                start: fmt_ms(s.start_ms),
                end: fmt_ms(s.end_ms),
                minutes: r3((s.end_ms - s.start_ms) as f64 / 60_000.0),
                memory_max_gib: r3(s.memory_max_bytes / GIB),
            })
            .collect(),
    };
    // Most GiB-hours first; a non-finite value (null in JSON) last.
    let key = Some(evidence.idle_gib_hours).filter(|x| x.is_finite());
    (
        (gib_hours, reclaim),
        (
            key,
            Finding::new(
                finding_id(id, &ident),
                severity,
                e.entity.clone(),
                format!(
                    "{} held up to {:.1} GiB idle for {:.1} h in {} span(s) ({:.0}% of the time observed; activity from {})",
                    e.entity.label(),
                    mem_max / GIB,
                    hours(idle_ms),
                    e.spans.len(),
                    idle_share * 100.0,
                    e.activity_source
                ),
                action,
                evidence,
            ),
        ),
    )
}
