//! One partition's rows read for change detection: each GPU's MIG state per row (mode and
//! instances) reduced to events, and each workload's devices per row reduced to runs. Reads
//! the lazy frames it is given (rows ending in `(since, until]`); decides nothing itself
//! ([`super::detect`] does).

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::*;

use super::ChangesError;
use super::detect::{Event, GpuState, Run, gpu_events};
use crate::frames::Frames;
use crate::frames::columns::{FastMap, bools, i64s, strs, ts_ms};

/// What one partition contributes.
pub(super) struct Scan {
    /// MIG mode and layout events of its GPUs.
    pub events: Vec<Event>,
    /// Its workloads' runs on their devices.
    pub runs: Vec<Run>,
    /// The longest row of its GPU table, ms (0 without rows).
    pub interval_ms: i64,
}

/// A GPU's label: `node/GPUi`, else `node/uuid`.
pub(super) fn gpu_label(node: Option<&str>, index: Option<i64>, uuid: Option<&str>) -> String {
    let node = node.unwrap_or("?");
    match (index, uuid) {
        (Some(i), _) => format!("{node}/GPU{i}"),
        (None, Some(u)) => format!("{node}/{u}"),
        (None, None) => format!("{node}/?"),
    }
}

/// A workload's identity: the pod (`namespace/pod`), else the Slurm job and process, else the
/// node, pid and process name (a process cannot keep its pid on another node).
pub(super) fn workload_key(
    node: Option<&str>,
    pid: Option<i64>,
    process: Option<&str>,
    namespace: Option<&str>,
    pod: Option<&str>,
    slurm: Option<&str>,
) -> String {
    match (pod, slurm) {
        (Some(p), _) => format!("{}/{p}", namespace.unwrap_or("default")),
        (None, Some(j)) => format!("slurm job {j} {}", process.unwrap_or("?")),
        (None, None) => format!(
            "{} pid {} ({})",
            node.unwrap_or("?"),
            pid.map_or("?".into(), |p| p.to_string()),
            process.unwrap_or("?")
        ),
    }
}

fn in_range(f: &LazyFrame, since: i64, until: i64, columns: &[&str]) -> LazyFrame {
    f.clone()
        .with_column(ts_ms())
        .filter(col("ts").gt(lit(since)).and(col("ts").lt_eq(lit(until))))
        .select(columns.iter().map(|c| col(*c)).collect::<Vec<_>>())
}

/// Scans one partition's rows in `(since, until]`.
pub(super) fn scan(frames: &Frames, since: i64, until: i64) -> Result<Scan, ChangesError> {
    let gpu = in_range(
        &frames.gpu,
        since,
        until,
        &[
            "node",
            "gpu",
            "uuid",
            "ts",
            "interval_ms",
            "mig_enabled",
            "status",
        ],
    )
    .collect()?;
    let mig = in_range(
        &frames.mig,
        since,
        until,
        &["node", "gpu", "uuid", "ts", "profile", "placement_start"],
    )
    .collect()?;
    let process = in_range(
        &frames.process,
        since,
        until,
        &[
            "node",
            "gpu",
            "uuid",
            "ts",
            "interval_ms",
            "pid",
            "process",
            "namespace",
            "pod",
            "slurm_job_id",
        ],
    )
    .collect()?;

    // MIG instances per (GPU, ts).
    let mut layouts: FastMap<(String, i64), Vec<String>> = FastMap::default();
    {
        let (node, uuid, profile) = (
            strs(&mig, "node")?,
            strs(&mig, "uuid")?,
            strs(&mig, "profile")?,
        );
        let (index, ts, start) = (
            i64s(&mig, "gpu")?,
            i64s(&mig, "ts")?,
            i64s(&mig, "placement_start")?,
        );
        for i in 0..mig.height() {
            let Some(t) = ts.get(i) else { continue };
            let label = gpu_label(node.get(i), index.get(i), uuid.get(i));
            let inst = format!(
                "{}@{}",
                profile.get(i).unwrap_or("?"),
                start.get(i).map_or("?".into(), |s| s.to_string())
            );
            layouts.entry((label, t)).or_default().push(inst);
        }
    }
    let layouts_known = mig.height() > 0;

    // Each GPU's states in time order.
    let mut states: BTreeMap<String, Vec<GpuState>> = BTreeMap::new();
    let mut interval_ms = 0;
    {
        let (node, uuid, status) = (
            strs(&gpu, "node")?,
            strs(&gpu, "uuid")?,
            strs(&gpu, "status")?,
        );
        let (index, ts, interval) = (
            i64s(&gpu, "gpu")?,
            i64s(&gpu, "ts")?,
            i64s(&gpu, "interval_ms")?,
        );
        let mode = bools(&gpu, "mig_enabled")?;
        for i in 0..gpu.height() {
            let (Some(t), iv) = (ts.get(i), interval.get(i).unwrap_or(0).max(0)) else {
                continue;
            };
            interval_ms = interval_ms.max(iv);
            // A lost GPU's row has no values: it says nothing of the layout.
            if matches!(status.get(i), Some("lost" | "error")) {
                continue;
            }
            let label = gpu_label(node.get(i), index.get(i), uuid.get(i));
            let mut layout = layouts.remove(&(label.clone(), t)).unwrap_or_default();
            layout.sort();
            states.entry(label).or_default().push(GpuState {
                start: t - iv,
                mig: mode.get(i),
                layout,
            });
        }
    }
    let mut events = Vec::new();
    for (label, mut s) in states {
        s.sort_by_key(|g| g.start);
        events.extend(gpu_events(&label, &s, layouts_known));
    }

    // Each workload's devices per row, then runs of the same devices.
    let mut seen: BTreeMap<String, BTreeMap<i64, (i64, BTreeSet<String>)>> = BTreeMap::new();
    {
        let p = &process;
        let (node, uuid, name) = (strs(p, "node")?, strs(p, "uuid")?, strs(p, "process")?);
        let (ns, pod, slurm) = (
            strs(p, "namespace")?,
            strs(p, "pod")?,
            strs(p, "slurm_job_id")?,
        );
        let (index, ts, interval, pid) = (
            i64s(p, "gpu")?,
            i64s(p, "ts")?,
            i64s(p, "interval_ms")?,
            i64s(p, "pid")?,
        );
        for i in 0..p.height() {
            let Some(t) = ts.get(i) else { continue };
            let key = workload_key(
                node.get(i),
                pid.get(i),
                name.get(i),
                ns.get(i),
                pod.get(i),
                slurm.get(i),
            );
            let e = seen
                .entry(key)
                .or_default()
                .entry(t)
                .or_insert_with(|| (interval.get(i).unwrap_or(0).max(0), BTreeSet::new()));
            e.1.insert(gpu_label(node.get(i), index.get(i), uuid.get(i)));
        }
    }
    let mut runs = Vec::new();
    for (workload, rows) in seen {
        let mut cur: Option<Run> = None;
        for (t, (iv, devices)) in rows {
            let devices: Vec<String> = devices.into_iter().collect();
            let (start, end) = (t - iv, t);
            match &mut cur {
                Some(r) if r.devices == devices && start <= r.end => r.end = end,
                _ => {
                    runs.extend(cur.take());
                    cur = Some(Run {
                        workload: workload.clone(),
                        devices,
                        start,
                        end,
                    });
                }
            }
        }
        runs.extend(cur);
    }
    Ok(Scan {
        events,
        runs,
        interval_ms,
    })
}
