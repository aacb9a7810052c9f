//! Busy but not working: GPUs whose busy ratio (NVML `utilization.gpu`, dcgm `GPU_UTIL`) is high
//! while their SM activity is low — a kernel is resident most of the time but uses few SMs
//! (small batches, a single stream, CPU-bound input pipelines). Needs both signals in the same
//! rows; GPUs with only one are skipped and counted in a note.
//!
//! A row qualifies when `busy_mean ≥ min_busy` and `sm_active_mean ≤ max_sm_share × busy_mean`
//! (the SM rule), or — where the row has GPM's tensor and DRAM activity (history format version
//! 2, Hopper and later; dcgm-exporter's profiling fields) — when `busy_mean ≥ min_busy`,
//! `tensor_active_mean ≤ max_tensor`, `dram_active_mean ≤ max_dram` and each of the FP64, FP32
//! and FP16 pipes the row has is `≤ max_pipe`, whatever its SM activity (the no-work rule: SMs
//! held by kernels that spin or wait). Rows are joined into spans with the same gap rule as the
//! idle detector; a GPU is reported when its spans add up to at least `min_duration`. Rows
//! without tensor and DRAM activity are judged by the SM rule alone, exactly as before the
//! no-work rule existed. This module suggests, it does not profile.

use polars::prelude::*;

use super::evidence::{BusyEvidence, BusySignals, BusySpanEvidence};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity, finding_id,
    hours, r3, unbox,
};
use crate::frames::Frames;
use crate::frames::columns::{self, groups, ts_ms};
use crate::times::fmt_ms;

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
    /// No-work rule (rows with GPM's tensor and DRAM activity): highest tensor activity
    /// (default 0.05).
    pub max_tensor: f64,
    /// No-work rule: highest DRAM activity, the share of peak bandwidth (default 0.10).
    pub max_dram: f64,
    /// No-work rule: highest activity of each of the FP64, FP32 and FP16 pipes, where the row
    /// has them (default 0.10).
    pub max_pipe: f64,
}

impl Default for BusyParams {
    fn default() -> Self {
        BusyParams {
            min_busy: 0.5,
            max_sm_share: 0.5,
            min_duration_ms: 3_600_000,
            max_gap_intervals: 3.0,
            max_tensor: 0.05,
            max_dram: 0.10,
            max_pipe: 0.10,
        }
    }
}

impl BusyParams {
    /// Whether a row qualifies by the SM rule.
    fn sm_rule(&self, busy: f64, sm: f64) -> bool {
        busy >= self.min_busy && sm <= self.max_sm_share * busy
    }

    /// Whether a row qualifies by the no-work rule: busy, with its tensor and DRAM activity
    /// known and at most their thresholds, and no FP pipe it has above `max_pipe`.
    fn no_work_rule(
        &self,
        busy: f64,
        tensor: Option<f64>,
        dram: Option<f64>,
        fp: [Option<f64>; 3],
    ) -> bool {
        busy >= self.min_busy
            && tensor.is_some_and(|t| t <= self.max_tensor)
            && dram.is_some_and(|d| d <= self.max_dram)
            && fp.iter().all(|p| p.is_none_or(|p| p <= self.max_pipe))
    }
}

/// Sum and count of a figure's known values.
#[derive(Debug, Clone, Copy, Default)]
pub struct MeanAcc {
    sum: f64,
    n: u64,
}

impl MeanAcc {
    fn add(&mut self, v: Option<f64>) {
        if let Some(v) = v {
            self.sum += v;
            self.n += 1;
        }
    }

    /// The mean; `None` when no value was known (unknown, not 0).
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }
}

/// The action of a GPU whose SMs mostly idled (the SM rule; tensor and DRAM unknown or not low).
const SM_ACTION: &str = "profile the workload (Nsight Systems): larger batches, more CUDA streams or a faster input pipeline would use the SMs it already holds; busy ratio overstates its use";

/// The action of a GPU whose spans show no tensor or DRAM work (GPM).
const SPIN_ACTION: &str = "find what its kernels wait for (Nsight Systems): a collective (NCCL) waiting for a slower rank, a kernel polling a flag, a persistent kernel without work, or an input pipeline the GPU spins on; busy ratio and SM activity both overstate its use";

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
    /// Tensor and DRAM activity (GPM) over the rows of the spans that have them.
    pub span_tensor: MeanAcc,
    pub span_dram: MeanAcc,
    /// The FP64, FP32 and FP16 pipes over the rows of the spans that have them.
    pub span_fp: [MeanAcc; 3],
    /// Time of the spans that qualified by the no-work rule only (not by the SM rule), ms.
    pub no_work_ms: i64,
    /// Whether any judged row had both tensor and DRAM activity.
    pub has_profiling: bool,
}

/// The GPU frame's columns the busy rule reads: the GPU's names, time and interval, busy and
/// SM activity, and the profiling signals (tensor, DRAM, each floating-point pipe).
fn busy_columns(frames: &Frames) -> Result<DataFrame, AdvisorError> {
    Ok(frames
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
            col("tensor_active_mean"),
            col("dram_active_mean"),
            col("fp64_active_mean"),
            col("fp32_active_mean"),
            col("fp16_active_mean"),
        ])
        .collect()?)
}

/// The GPU of row `first` as a finding's entity.
fn gpu_entity(
    node: &columns::Strs,
    gpu: &columns::I64s,
    uuid: &columns::Strs,
    model: &columns::Strs,
    first: usize,
) -> Entity {
    let o = |v: Option<&str>| v.map(str::to_string);
    Entity {
        kind: "gpu".into(),
        node: o(node.get(first)),
        gpu: gpu.get(first).map(|g| g as u32),
        uuid: o(uuid.get(first)),
        model: o(model.get(first)),
        ..Entity::default()
    }
}

/// Finds every GPU's spans (all of them, before the `min_duration` filter on the total).
pub fn busy_gpus(
    frames: &Frames,
    p: &BusyParams,
) -> Result<(Vec<BusyGpu>, Unjudged), AdvisorError> {
    let df = busy_columns(frames)?;
    let node = columns::strs(&df, "node")?;
    let uuid = columns::strs(&df, "uuid")?;
    let model = columns::strs(&df, "model")?;
    let gpu = columns::i64s(&df, "gpu")?;
    let ts = columns::i64s(&df, "ts")?;
    let iv = columns::i64s(&df, "interval_ms")?;
    let busy = columns::f64s(&df, "busy_mean")?;
    let sm = columns::f64s(&df, "sm_active_mean")?;
    let tensor = columns::f64s(&df, "tensor_active_mean")?;
    let dram = columns::f64s(&df, "dram_active_mean")?;
    let fp = [
        columns::f64s(&df, "fp64_active_mean")?,
        columns::f64s(&df, "fp32_active_mean")?,
        columns::f64s(&df, "fp16_active_mean")?,
    ];
    let mut out = Vec::new();
    let mut unjudged = Unjudged::default();
    for r in groups(&[&node, &uuid], &ts, df.height()) {
        let first = r[0];
        let mut spans: Vec<(i64, i64)> = Vec::new();
        let mut cur: Option<(i64, i64)> = None;
        let mut prev: Option<i64> = None;
        let (mut bsum, mut ssum, mut k, mut observed) = (0.0, 0.0, 0u64, 0i64);
        let (mut both, mut any_busy, mut any_sm) = (false, false, false);
        let (mut span_tensor, mut span_dram) = (MeanAcc::default(), MeanAcc::default());
        let mut span_fp = [MeanAcc::default(); 3];
        let (mut no_work_ms, mut has_profiling) = (0i64, false);
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
            let (tn, dr) = (tensor.get(i), dram.get(i));
            has_profiling |= tn.is_some() && dr.is_some();
            let by_sm = p.sm_rule(b, s);
            let pipes = fp.each_ref().map(|c| c.get(i));
            let by_work = !by_sm && p.no_work_rule(b, tn, dr, pipes);
            if by_sm || by_work {
                // The span time this row adds (a gap the span bridges included).
                let added = cur.map_or(d, |c| t - c.1);
                let c = cur.get_or_insert((t - d, t));
                c.1 = t;
                if by_work {
                    no_work_ms += added;
                }
                span_tensor.add(tn);
                span_dram.add(dr);
                for (acc, v) in span_fp.iter_mut().zip(pipes) {
                    acc.add(v);
                }
            } else {
                spans.extend(cur.take());
            }
        }
        spans.extend(cur.take());
        if !both {
            unjudged.count(any_busy, any_sm);
            continue;
        }
        out.push(BusyGpu {
            entity: gpu_entity(&node, &gpu, &uuid, &model, first),
            spans,
            busy_mean: if k > 0 { bsum / k as f64 } else { 0.0 },
            sm_mean: if k > 0 { ssum / k as f64 } else { 0.0 },
            observed_ms: observed,
            span_tensor,
            span_dram,
            span_fp,
            no_work_ms,
            has_profiling,
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

impl Unjudged {
    /// Counts a GPU never judged: no SM activity, else no busy ratio, else the two apart.
    fn count(&mut self, any_busy: bool, any_sm: bool) {
        match (any_busy, any_sm) {
            (_, false) => self.no_sm += 1,
            (false, true) => self.no_busy += 1,
            (true, true) => self.apart += 1,
        }
    }

    /// The notes on the GPUs not judged, of the `seen` ones, by why.
    fn notes(&self, seen: u64, notes: &mut Vec<String>) {
        if self.no_sm > 0 {
            notes.push(format!(
            "SM activity is missing for {} of {seen} GPU(s) (MIG mode, pre-Hopper without DCGM profiling): not judged, busy ratio alone cannot tell busy from working",
            self.no_sm
        ));
        }
        if self.no_busy > 0 {
            notes.push(format!(
                "busy ratio is missing for {} of {seen} GPU(s): not judged",
                self.no_busy
            ));
        }
        if self.apart > 0 {
            notes.push(format!(
            "{} of {seen} GPU(s) have busy ratio and SM activity but never in the same row: not judged",
            self.apart
        ));
        }
    }
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
        un.notes(seen, &mut out.notes);
        let with_profiling = gpus.iter().filter(|g| g.has_profiling).count();
        if with_profiling > 0 && with_profiling < gpus.len() {
            out.notes.push(format!(
                "tensor and DRAM activity (GPM) are missing for {} of {judged} judged GPU(s): those are judged by busy ratio and SM activity alone",
                gpus.len() - with_profiling
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
            let (tensor, dram) = (g.span_tensor.mean(), g.span_dram.mean());
            // What the spans' tensor and DRAM activity say: nothing (unknown), that the GPU
            // computed or moved little (spinning or waiting: the no-work rule's thresholds on
            // the spans' means), or that it did some work.
            let spinning = tensor.is_some_and(|t| t <= p.max_tensor)
                && dram.is_some_and(|d| d <= p.max_dram)
                && g.span_fp
                    .iter()
                    .all(|a| a.mean().is_none_or(|m| m <= p.max_pipe));
            let (summary, action) = busy_summary(&g, total, share, (tensor, dram), spinning);
            out.findings.push(Finding::new(
                finding_id(self.id(), &ident),
                if share >= 0.25 {
                    Severity::Warning
                } else {
                    Severity::Info
                },
                g.entity.clone(),
                summary,
                action.into(),
                BusyEvidence {
                    hours: r3(hours(total)),
                    share: r3(share),
                    busy_mean: r3(g.busy_mean),
                    sm_active_mean: r3(g.sm_mean),
                    tensor_active_mean: tensor.map(r3),
                    dram_active_mean: dram.map(r3),
                    no_work_hours: r3(hours(g.no_work_ms)),
                    verdict: if spinning {
                        "spinning_or_waiting"
                    } else {
                        "sm_idle"
                    },
                    signals: BusySignals::new(tensor.is_some(), dram.is_some()),
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
            "{} GPU(s) busy by utilization.gpu while SM activity stayed ≤ {:.0}% of it{} for ≥ {} min",
            out.findings.len(),
            p.max_sm_share * 100.0,
            if with_profiling > 0 {
                format!(
                    ", or tensor ≤ {:.0}% and DRAM ≤ {:.0}% (GPM),",
                    p.max_tensor * 100.0,
                    p.max_dram * 100.0
                )
            } else {
                String::new()
            },
            p.min_duration_ms / 60_000
        );
        Ok(out)
    }
}

/// A busy GPU's finding text and action: spinning or waiting when its spans' tensor and DRAM
/// activity (and every pipe's) stayed under the no-work thresholds, else its SMs idle (with the
/// spans' tensor and DRAM activity when known).
fn busy_summary(
    g: &BusyGpu,
    total: i64,
    share: f64,
    (tensor, dram): (Option<f64>, Option<f64>),
    spinning: bool,
) -> (String, &'static str) {
    match (tensor, dram) {
        (Some(t), Some(d)) if spinning => (
            format!(
                "{} looked busy but did no tensor or DRAM work for {:.1} h ({:.0}% of the time observed; busy {:.0}% and SM activity {:.0}% on average, tensor {:.0}% and DRAM {:.0}% in those spans): its kernels spun or waited",
                g.entity.label(),
                hours(total),
                share * 100.0,
                g.busy_mean * 100.0,
                g.sm_mean * 100.0,
                t * 100.0,
                d * 100.0
            ),
            SPIN_ACTION,
        ),
        (Some(t), Some(d)) => (
            format!(
                "{} looked busy but its SMs mostly idled for {:.1} h ({:.0}% of the time observed; busy {:.0}% vs SM activity {:.0}% on average; tensor {:.0}% and DRAM {:.0}% in those spans)",
                g.entity.label(),
                hours(total),
                share * 100.0,
                g.busy_mean * 100.0,
                g.sm_mean * 100.0,
                t * 100.0,
                d * 100.0
            ),
            SM_ACTION,
        ),
        _ => (
            format!(
                "{} looked busy but its SMs mostly idled for {:.1} h ({:.0}% of the time observed; busy {:.0}% vs SM activity {:.0}% on average)",
                g.entity.label(),
                hours(total),
                share * 100.0,
                g.busy_mean * 100.0,
                g.sm_mean * 100.0
            ),
            SM_ACTION,
        ),
    }
}
