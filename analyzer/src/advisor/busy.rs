//! Busy but not working: GPUs whose busy ratio (NVML `utilization.gpu`, dcgm `GPU_UTIL`) is high
//! while their SM activity is low — a kernel is resident most of the time but uses few SMs
//! (small batches, a single stream, CPU-bound input pipelines). Needs both signals in the same
//! rows; GPUs with only one are skipped and counted in a note.
//!
//! A row qualifies when `busy_mean ≥ min_busy` and `sm_active_mean ≤ max_sm_share × busy_mean`.
//! Rows are joined into spans with the same gap rule as the idle detector; a GPU is reported when
//! its spans add up to at least `min_duration`. This module suggests, it does not profile.

use polars::prelude::*;

use super::columns::{self, groups, ts_ms};
use super::evidence::{BusyEvidence, BusySpanEvidence};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity, finding_id,
    hours, r3, unbox,
};
use crate::ingest::{Frames, fmt_ms};

/// Thresholds (flags `--busy.*`).
#[derive(Debug, Clone)]
pub struct BusyParams {
    /// Lowest busy ratio that counts (default 0.5).
    pub min_busy: f64,
    /// SM activity at most this share of busy (default 0.5).
    pub max_sm_share: f64,
    /// Least total time in such spans for a finding, ms (default 60 min).
    pub min_duration_ms: i64,
    /// A gap longer than this many of the GPU's own rows (and 5 minutes) breaks a span
    /// (default 3).
    pub max_gap_intervals: f64,
}

impl Default for BusyParams {
    fn default() -> Self {
        BusyParams {
            min_busy: 0.5,
            max_sm_share: 0.5,
            min_duration_ms: 3_600_000,
            max_gap_intervals: 3.0,
        }
    }
}

/// The busy-not-working detector.
pub struct BusyNotWorking;

/// One GPU's busy-not-working spans `(start, end)` in unix ms (start = start of the first
/// qualifying interval).
#[derive(Debug, Clone)]
pub struct BusyGpu {
    pub entity: Entity,
    pub spans: Vec<(i64, i64)>,
    pub busy_mean: f64,
    pub sm_mean: f64,
    pub observed_ms: i64,
}

/// Finds every GPU's spans (all of them, before the `min_duration` filter on the total).
pub fn busy_gpus(
    frames: &Frames,
    p: &BusyParams,
) -> Result<(Vec<BusyGpu>, Unjudged), AdvisorError> {
    let df = frames
        .gpu
        .clone()
        .select([
            col("node"),
            col("uuid"),
            col("gpu").cast(DataType::Int64),
            col("model"),
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("busy_mean"),
            col("sm_active_mean"),
        ])
        .collect()?;
    let node = columns::strs(&df, "node")?;
    let uuid = columns::strs(&df, "uuid")?;
    let model = columns::strs(&df, "model")?;
    let gpu = columns::i64s(&df, "gpu")?;
    let ts = columns::i64s(&df, "ts")?;
    let iv = columns::i64s(&df, "interval_ms")?;
    let busy = columns::f64s(&df, "busy_mean")?;
    let sm = columns::f64s(&df, "sm_active_mean")?;
    let mut out = Vec::new();
    let mut unjudged = Unjudged::default();
    for r in groups(&[&node, &uuid], &ts, df.height()) {
        let first = r[0];
        let mut spans: Vec<(i64, i64)> = Vec::new();
        let mut cur: Option<(i64, i64)> = None;
        let mut prev: Option<i64> = None;
        let (mut bsum, mut ssum, mut k, mut observed) = (0.0, 0.0, 0u64, 0i64);
        let (mut both, mut any_busy, mut any_sm) = (false, false, false);
        for i in r {
            any_busy |= busy.get(i).is_some();
            any_sm |= sm.get(i).is_some();
            let (Some(t), Some(d)) = (ts.get(i), iv.get(i)) else {
                continue;
            };
            let d = d.max(1);
            if let Some(pt) = prev
                && super::breaks_span(t - pt, d, p.max_gap_intervals)
            {
                spans.extend(cur.take());
            }
            prev = Some(t);
            let (Some(b), Some(s)) = (busy.get(i), sm.get(i)) else {
                spans.extend(cur.take());
                continue;
            };
            both = true;
            observed += d;
            bsum += b;
            ssum += s;
            k += 1;
            if b >= p.min_busy && s <= p.max_sm_share * b {
                let c = cur.get_or_insert((t - d, t));
                c.1 = t;
            } else {
                spans.extend(cur.take());
            }
        }
        spans.extend(cur.take());
        if !both {
            match (any_busy, any_sm) {
                (_, false) => unjudged.no_sm += 1,
                (false, true) => unjudged.no_busy += 1,
                (true, true) => unjudged.apart += 1,
            }
            continue;
        }
        let o = |v: Option<&str>| v.map(str::to_string);
        out.push(BusyGpu {
            entity: Entity {
                kind: "gpu".into(),
                node: o(node.get(first)),
                gpu: gpu.get(first).map(|g| g as u32),
                uuid: o(uuid.get(first)),
                model: o(model.get(first)),
                ..Entity::default()
            },
            spans,
            busy_mean: if k > 0 { bsum / k as f64 } else { 0.0 },
            sm_mean: if k > 0 { ssum / k as f64 } else { 0.0 },
            observed_ms: observed,
        });
    }
    Ok((out, unjudged))
}

/// GPUs the detector could not judge, by the signal they lack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unjudged {
    /// No SM activity in any row (MIG mode, pre-Hopper without DCGM profiling).
    pub no_sm: u64,
    /// SM activity but no busy ratio in any row.
    pub no_busy: u64,
    /// Both signals, but never in the same row.
    pub apart: u64,
}

impl Detector for BusyNotWorking {
    fn id(&self) -> &'static str {
        BusyEvidence::DETECTOR
    }

    fn title(&self) -> &'static str {
        "Busy but not working"
    }

    fn partial(&self, frames: &Frames, params: &Params) -> Result<Partial, AdvisorError> {
        Ok(Box::new(busy_gpus(frames, &params.busy)?))
    }

    fn finish(&self, parts: Vec<Partial>, params: &Params) -> Result<DetectorOutput, AdvisorError> {
        let p = &params.busy;
        let mut gpus = Vec::new();
        let mut un = Unjudged::default();
        for (g, s) in unbox::<(Vec<BusyGpu>, Unjudged)>(self.id(), parts)? {
            gpus.extend(g);
            un.no_sm += s.no_sm;
            un.no_busy += s.no_busy;
            un.apart += s.apart;
        }
        let mut out = DetectorOutput::default();
        let judged = gpus.len() as u64;
        let seen = judged + un.no_sm + un.no_busy + un.apart;
        if un.no_sm > 0 {
            out.notes.push(format!(
                "SM activity is missing for {} of {seen} GPU(s) (MIG mode, pre-Hopper without DCGM profiling): not judged, busy ratio alone cannot tell busy from working",
                un.no_sm
            ));
        }
        if un.no_busy > 0 {
            out.notes.push(format!(
                "busy ratio is missing for {} of {seen} GPU(s): not judged",
                un.no_busy
            ));
        }
        if un.apart > 0 {
            out.notes.push(format!(
                "{} of {seen} GPU(s) have busy ratio and SM activity but never in the same row: not judged",
                un.apart
            ));
        }
        for g in gpus {
            let total: i64 = g.spans.iter().map(|(a, b)| b - a).sum();
            if total < p.min_duration_ms {
                continue;
            }
            let share = if g.observed_ms > 0 {
                total as f64 / g.observed_ms as f64
            } else {
                0.0
            };
            let ident = [
                g.entity.node.as_deref().unwrap_or(""),
                g.entity.uuid.as_deref().unwrap_or(""),
            ];
            out.findings.push(Finding::new(
                finding_id(self.id(), &ident),
                if share >= 0.25 {
                    Severity::Warning
                } else {
                    Severity::Info
                },
                g.entity.clone(),
                format!(
                    "{} looked busy but its SMs mostly idled for {:.1} h ({:.0}% of the time observed; busy {:.0}% vs SM activity {:.0}% on average)",
                    g.entity.label(),
                    hours(total),
                    share * 100.0,
                    g.busy_mean * 100.0,
                    g.sm_mean * 100.0
                ),
                "profile the workload (Nsight Systems): larger batches, more CUDA streams or a faster input pipeline would use the SMs it already holds; busy ratio overstates its use".into(),
                BusyEvidence {
                    hours: r3(hours(total)),
                    share: r3(share),
                    busy_mean: r3(g.busy_mean),
                    sm_active_mean: r3(g.sm_mean),
                    spans: g
                        .spans
                        .iter()
                        .map(|(a, b)| BusySpanEvidence {
                            start: fmt_ms(*a),
                            end: fmt_ms(*b),
                            minutes: r3((b - a) as f64 / 60_000.0),
                        })
                        .collect(),
                },
            ));
        }
        out.summary = format!(
            "{} GPU(s) busy by utilization.gpu while SM activity stayed ≤ {:.0}% of it for ≥ {} min",
            out.findings.len(),
            p.max_sm_share * 100.0,
            p.min_duration_ms / 60_000
        );
        Ok(out)
    }
}
