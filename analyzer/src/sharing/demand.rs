//! What each host GPU of a plan's consolidation moves would run, measured: per GPU of the
//! frames its peak memory (`memory_used_max_bytes`), memory size, activity quantile (of
//! `sm_active_max`, else `busy_max`, per row) and whether it was in MIG mode ([`gpu_stats`]);
//! then per move the host's own work and each guest's, each one workload ([`host_demands`]).
//! Each GPU also carries the scheduler that held it in the window (pods: Kubernetes; jobs:
//! Slurm; `advisor::scheduler`), which decides whose sharing applies to it.
//!
//! Pure over the frames given (one partition at a time: a GPU lives in one partition, so the
//! per-partition results are simply concatenated). A GPU's work counts as one workload even when
//! several processes shared it (one pod per GPU is what the moves assume). It does not replay the
//! moves interval by interval (`tessera replay` does): the choice needs each workload's own peak
//! and activity, not the combined series.

use std::collections::BTreeMap;

use polars::prelude::*;
use tessera_core::mig::plan_sections::{ConsolidationMove, GpuRef};

use crate::advisor::scheduler::{self, Scheduler};
use crate::frames::columns;
use crate::frames::{Frames, FramesError};

/// Reading the frames failed.
#[derive(Debug, thiserror::Error)]
pub enum DemandError {
    #[error(transparent)]
    Frames(#[from] FramesError),
    #[error("reading frames: {0}")]
    Polars(#[from] PolarsError),
    #[error("reading the GPUs' holders")]
    Holders(#[source] crate::advisor::AdvisorError),
}

/// One GPU's measured use in the window read.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuStats {
    pub node: String,
    pub gpu: u32,
    pub uuid: Option<String>,
    pub model: Option<String>,
    /// The largest `memory_used_max_bytes` of its rows.
    pub peak_memory_bytes: Option<f64>,
    /// The largest `memory_total_bytes` of its rows.
    pub memory_total_bytes: Option<f64>,
    /// The quantile of its rows' activity (0–1).
    pub activity: Option<f64>,
    /// `sm_active` or `busy`.
    pub activity_source: Option<&'static str>,
    pub rows: u64,
    /// Any row in MIG mode.
    pub mig: bool,
    /// Who held it in the window: pods (Kubernetes), Slurm jobs, both, or unknown.
    pub scheduler: Scheduler,
    /// The holders named (`pod ns/name, slurm job 81234`; empty when unknown).
    pub holders: String,
}

/// Per GPU of `frames` (node, index), its [`GpuStats`] with the `quantile` of activity.
pub fn gpu_stats(frames: &Frames, quantile: f64) -> Result<Vec<GpuStats>, DemandError> {
    let df = gpu_columns(frames)?;
    let node = columns::strs(&df, "node")?;
    let gpu = columns::i64s(&df, "gpu")?;
    let uuid = columns::strs(&df, "uuid")?;
    let model = columns::strs(&df, "model")?;
    let mem = columns::f64s(&df, "mem")?;
    let total = columns::f64s(&df, "total")?;
    let sm = columns::f64s(&df, "sm_active_max")?;
    let busy = columns::f64s(&df, "busy_max")?;
    let mig = columns::bools(&df, "mig_enabled")?;
    struct Acc {
        stats: GpuStats,
        sm: Vec<f64>,
        busy: Vec<f64>,
    }
    let mut by: BTreeMap<(String, u32), Acc> = BTreeMap::new();
    for i in 0..df.height() {
        let (Some(n), Some(g)) = (node.get(i), gpu.get(i).and_then(|g| u32::try_from(g).ok()))
        else {
            continue;
        };
        let a = by.entry((n.to_string(), g)).or_insert_with(|| Acc {
            stats: GpuStats::unmeasured(n, g),
            sm: Vec::new(),
            busy: Vec::new(),
        });
        let s = &mut a.stats;
        s.rows += 1;
        if s.uuid.is_none() {
            s.uuid = uuid.get(i).map(str::to_string);
        }
        if s.model.is_none() {
            s.model = model.get(i).map(str::to_string);
        }
        let max = |old: Option<f64>, v: Option<f64>| match (old, v) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        s.peak_memory_bytes = max(s.peak_memory_bytes, mem.get(i));
        s.memory_total_bytes = max(s.memory_total_bytes, total.get(i));
        s.mig |= mig.get(i) == Some(true);
        if let Some(v) = sm.get(i) {
            a.sm.push(v);
        }
        if let Some(v) = busy.get(i) {
            a.busy.push(v);
        }
    }
    let held = scheduler::holders(frames).map_err(DemandError::Holders)?;
    Ok(by
        .into_values()
        .map(|mut a| {
            if let Some(h) = held.get(&a.stats.node, Some(a.stats.gpu), a.stats.uuid.as_deref()) {
                a.stats.scheduler = h.scheduler();
                a.stats.holders = h.names();
            }
            let (values, source) = if a.sm.is_empty() {
                (&mut a.busy, "busy")
            } else {
                (&mut a.sm, "sm_active")
            };
            if let Some(q) = crate::stats::quantile(values, quantile) {
                a.stats.activity = Some(q.clamp(0.0, 1.0));
                a.stats.activity_source = Some(source);
            }
            a.stats
        })
        .collect())
}

/// The GPU frame's columns the stats read: node, index, uuid, model, peak and total memory (as
/// `mem`, `total`), both activity maxima and the MIG flag.
fn gpu_columns(frames: &Frames) -> Result<DataFrame, DemandError> {
    Ok(frames
        .gpu
        .clone()
        .select([
            col("node"),
            col("gpu").cast(DataType::Int64),
            col("uuid"),
            col("model"),
            col("memory_used_max_bytes")
                .cast(DataType::Float64)
                .alias("mem"),
            col("memory_total_bytes")
                .cast(DataType::Float64)
                .alias("total"),
            col("sm_active_max").cast(DataType::Float64),
            col("busy_max").cast(DataType::Float64),
            col("mig_enabled"),
        ])
        .collect()?)
}

impl GpuStats {
    /// A GPU seen, nothing of it measured yet (no rows, scheduler unknown).
    fn unmeasured(node: &str, gpu: u32) -> GpuStats {
        GpuStats {
            node: node.to_string(),
            gpu,
            uuid: None,
            model: None,
            peak_memory_bytes: None,
            memory_total_bytes: None,
            activity: None,
            activity_source: None,
            rows: 0,
            mig: false,
            scheduler: Scheduler::Unknown,
            holders: String::new(),
        }
    }
}

/// Whether a workload is the host's own or moves there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Host,
    Guest,
}

/// One workload a host GPU would run: the work of one GPU of the move.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub role: Role,
    pub gpu: GpuRef,
    /// `None`: no rows of that GPU in the window.
    pub stats: Option<GpuStats>,
}

impl Workload {
    /// `node/GPUi [label]`, as the findings name it.
    pub fn name(&self) -> String {
        match &self.gpu.label {
            Some(l) => l.clone(),
            None => format!("{}/GPU{}", self.gpu.node, self.gpu.gpu),
        }
    }
}

/// One host GPU of the moves and everything it would run.
#[derive(Debug, Clone, PartialEq)]
pub struct HostDemand {
    pub model: String,
    pub host: GpuRef,
    /// The host's own work first, then the guests' in the move's order.
    pub workloads: Vec<Workload>,
}

impl HostDemand {
    /// The host GPU's memory size (from its rows, else the largest of its workloads' GPUs).
    pub fn memory_total_bytes(&self) -> Option<f64> {
        let own = self.workloads.first().and_then(|w| w.stats.as_ref());
        own.and_then(|s| s.memory_total_bytes).or_else(|| {
            self.workloads
                .iter()
                .filter_map(|w| w.stats.as_ref()?.memory_total_bytes)
                .reduce(f64::max)
        })
    }
}

/// The stats of `g`: by UUID when both sides have one, else by node and index.
fn find<'a>(stats: &'a [GpuStats], g: &GpuRef) -> Option<&'a GpuStats> {
    if let Some(u) = &g.uuid
        && let Some(s) = stats.iter().find(|s| s.uuid.as_ref() == Some(u))
    {
        return Some(s);
    }
    stats.iter().find(|s| s.node == g.node && s.gpu == g.gpu)
}

/// Each move's host with its workloads, measured by `stats`.
pub fn host_demands(moves: &[ConsolidationMove], stats: &[GpuStats]) -> Vec<HostDemand> {
    moves
        .iter()
        .map(|m| HostDemand {
            model: m.model.clone(),
            host: m.host.clone(),
            workloads: std::iter::once((Role::Host, &m.host))
                .chain(m.guests.iter().map(|g| (Role::Guest, g)))
                .map(|(role, g)| Workload {
                    role,
                    gpu: g.clone(),
                    stats: find(stats, g).cloned(),
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// node, gpu, uuid, memory used, memory total, SM activity, busy, MIG mode.
    type Row<'a> = (&'a str, i64, &'a str, f64, f64, Option<f64>, f64, bool);

    fn frames(rows: &[Row]) -> Frames {
        let df = df!(
            "node" => rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            "gpu" => rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            "uuid" => rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            "model" => rows.iter().map(|_| "H100").collect::<Vec<_>>(),
            "memory_used_max_bytes" => rows.iter().map(|r| r.3).collect::<Vec<_>>(),
            "memory_total_bytes" => rows.iter().map(|r| r.4).collect::<Vec<_>>(),
            "sm_active_max" => rows.iter().map(|r| r.5).collect::<Vec<_>>(),
            "busy_max" => rows.iter().map(|r| r.6).collect::<Vec<_>>(),
            "mig_enabled" => rows.iter().map(|r| r.7).collect::<Vec<_>>(),
        )
        .unwrap();
        let empty = DataFrame::empty().lazy();
        Frames {
            gpu: df.lazy(),
            mig: empty.clone(),
            process: empty,
        }
    }

    #[test]
    fn peaks_quantiles_and_mig_per_gpu() {
        let mut rows = Vec::new();
        for i in 0..20 {
            rows.push((
                "a",
                0,
                "GPU-0",
                1e9 * f64::from(i),
                8e10,
                Some(f64::from(i) / 20.0),
                0.9,
                false,
            ));
            rows.push((
                "a",
                1,
                "GPU-1",
                5e9,
                8e10,
                None,
                f64::from(i) / 40.0,
                i == 3,
            ));
        }
        let s = gpu_stats(&frames(&rows), 0.95).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].peak_memory_bytes, Some(19e9));
        assert_eq!(s[0].activity_source, Some("sm_active"));
        // Nearest rank of 0.95 among 20: round(19 × 0.95) = 18 → 18/20.
        assert_eq!(s[0].activity, Some(0.9));
        assert!(!s[0].mig);
        assert_eq!(s[1].activity_source, Some("busy"));
        assert_eq!(s[1].activity, Some(18.0 / 40.0));
        assert!(s[1].mig);
    }

    #[test]
    fn moves_find_their_gpus_by_uuid_then_index() {
        let rows = [
            ("a", 0, "GPU-0", 1e9, 8e10, Some(0.1), 0.1, false),
            ("a", 1, "GPU-1", 2e9, 8e10, Some(0.2), 0.2, false),
        ];
        let s = gpu_stats(&frames(&rows), 0.95).unwrap();
        let r = |gpu, uuid: Option<&str>| GpuRef {
            node: "a".into(),
            gpu,
            uuid: uuid.map(str::to_string),
            label: None,
        };
        let m = ConsolidationMove {
            model: "H100".into(),
            // The index is stale but the UUID names GPU 1's rows.
            host: r(7, Some("GPU-1")),
            guests: vec![r(0, None), r(2, None)],
        };
        let d = host_demands(&[m], &s);
        assert_eq!(d[0].workloads.len(), 3);
        assert_eq!(d[0].workloads[0].stats.as_ref().unwrap().gpu, 1);
        assert_eq!(d[0].workloads[1].stats.as_ref().unwrap().gpu, 0);
        assert_eq!(d[0].workloads[2].stats, None);
        assert_eq!(d[0].memory_total_bytes(), Some(8e10));
        assert_eq!(d[0].workloads[2].name(), "a/GPU2");
    }
}
