//! The ground-truth file: every condition a scenario plants, so the analyzer can be scored.
//!
//! Conditions are found by evaluating the workload models themselves (not by trusting their kind)
//! at [`TRUTH_STEP_SECONDS`] over the simulated range, so an inference service that idles at night
//! or a notebook left open without work appears exactly as it happens. Activity models change
//! state on whole minutes (notebook buckets are 5 minutes), so a one-minute step is exact for
//! them; `from`/`until` bounds at odd seconds are rounded to the minute.
//!
//! Definitions match the advisor's defaults: *idle-loaded* means ≥ 1 GiB held while SM activity
//! is ≤ 1% for ≥ 60 continuous minutes; *busy-not-working* means a workload whose busy ratio is
//! ≥ 0.5 while its SM activity is ≤ half of it.
//!
//! This module computes; writing the file is the caller's business.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::SimNode;
use super::activity::activity;
use super::scenario::{FaultSpec, Scenario, WorkloadKind};

/// Version of the ground-truth file format.
pub const TRUTH_VERSION: u32 = 1;
/// Step at which workload models are evaluated.
pub const TRUTH_STEP_SECONDS: i64 = 60;
/// Memory a workload must hold to count as idle-loaded.
pub const IDLE_MIN_MEMORY_BYTES: u64 = 1 << 30;
/// Activity at or below which a workload counts as idle.
pub const IDLE_MAX_ACTIVITY: f64 = 0.01;
/// Minimum length of an idle-loaded span.
pub const IDLE_MIN_SECONDS: i64 = 3600;

/// The ground truth of one simulated range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroundTruth {
    pub version: u32,
    pub scenario: String,
    pub seed: u64,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub workloads: Vec<TruthWorkload>,
    pub idle_loaded: Vec<TruthSpan>,
    pub busy_not_working: Vec<TruthSpan>,
    pub faults: Vec<FaultSpec>,
}

/// One workload and where it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TruthWorkload {
    pub name: String,
    pub kind: WorkloadKind,
    pub node: String,
    pub gpu: u32,
    pub gpu_uuid: String,
    pub mig_uuid: Option<String>,
    pub pid: u32,
    pub process: String,
    pub namespace: Option<String>,
    pub pod: Option<String>,
    pub slurm_job: Option<String>,
    pub memory_bytes: u64,
    /// Spans during which it was loaded (held memory).
    pub loaded: Vec<Span>,
}

/// A half-open time span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Span {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// A planted condition of one workload over one span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TruthSpan {
    pub workload: String,
    pub node: String,
    pub gpu: u32,
    pub pid: u32,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub memory_bytes: u64,
}

fn spans(mut pred: impl FnMut(i64) -> bool, start: i64, end: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut open: Option<i64> = None;
    let mut t = start;
    while t < end {
        match (pred(t), open) {
            (true, None) => open = Some(t),
            (false, Some(s)) => {
                out.push((s, t));
                open = None;
            }
            _ => {}
        }
        t += TRUTH_STEP_SECONDS;
    }
    if let Some(s) = open {
        out.push((s, end));
    }
    out
}

fn ts(t: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(t, 0).unwrap_or_default()
}

impl GroundTruth {
    /// The conditions a scenario plants between `start` and `end`.
    pub fn compute(scenario: &Scenario, start: DateTime<Utc>, end: DateTime<Utc>) -> GroundTruth {
        let (s, e) = (start.timestamp(), end.timestamp());
        let mut workloads = Vec::new();
        let mut idle_loaded = Vec::new();
        let mut busy_not_working = Vec::new();
        let nodes: Vec<SimNode> = scenario
            .nodes
            .iter()
            .filter_map(|n| SimNode::new(scenario, &n.name))
            .collect();
        for (i, w) in scenario.workloads.iter().enumerate() {
            let node = nodes
                .iter()
                .find(|n| n.name() == w.node)
                .expect("validated");
            let gpu = &node.gpus()[w.gpu as usize];
            let mig_uuid = gpu.mig.as_ref().and_then(|insts| {
                insts
                    .iter()
                    .find(|m| Some(m.layout.placement.start) == w.mig_start)
                    .map(|m| m.uuid.clone())
            });
            let pid = SimNode::pid(i);
            let memory_bytes = (w.memory_gib * (1u64 << 30) as f64) as u64;
            let span = |(a, b): (i64, i64)| TruthSpan {
                workload: w.name.clone(),
                node: w.node.clone(),
                gpu: w.gpu,
                pid,
                start: ts(a),
                end: ts(b),
                memory_bytes,
            };
            if memory_bytes >= IDLE_MIN_MEMORY_BYTES {
                idle_loaded.extend(
                    spans(
                        |t| activity(scenario, i, t).is_some_and(|a| a.sm <= IDLE_MAX_ACTIVITY),
                        s,
                        e,
                    )
                    .into_iter()
                    .filter(|(a, b)| b - a >= IDLE_MIN_SECONDS)
                    .map(span),
                );
            }
            busy_not_working.extend(
                spans(
                    |t| {
                        activity(scenario, i, t)
                            .is_some_and(|a| a.busy >= 0.5 && a.sm <= a.busy / 2.0)
                    },
                    s,
                    e,
                )
                .into_iter()
                .map(span),
            );
            workloads.push(TruthWorkload {
                name: w.name.clone(),
                kind: w.kind,
                node: w.node.clone(),
                gpu: w.gpu,
                gpu_uuid: gpu.uuid.clone(),
                mig_uuid,
                pid,
                process: w.process.clone(),
                namespace: w.namespace.clone(),
                pod: w.pod.clone(),
                slurm_job: w.slurm_job.clone(),
                memory_bytes,
                loaded: spans(|t| activity(scenario, i, t).is_some(), s, e)
                    .into_iter()
                    .map(|(a, b)| Span {
                        start: ts(a),
                        end: ts(b),
                    })
                    .collect(),
            });
        }
        GroundTruth {
            version: TRUTH_VERSION,
            scenario: scenario.name.clone(),
            seed: scenario.seed,
            start,
            end,
            workloads,
            idle_loaded,
            busy_not_working,
            faults: scenario.faults.clone(),
        }
    }
}
