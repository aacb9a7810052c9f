//! The tests' reference: the change scan as it was before it ran in the report pass, row by row
//! through maps and sets (one partition's lazy frames filtered to `(since, until]`, each GPU's
//! states per row, each workload's devices per `ts` in a `BTreeSet`). [`super::part`] must give
//! the same events and runs.

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::*;

use super::super::ChangesError;
use super::super::detect::{Event, GpuState, Run, gpu_events};
use super::super::keys::{Interner, gpu_ids, workload_ids};
use crate::frames::Frames;
use crate::frames::columns::{FastMap, bools, i64s, strs, ts_ms};

/// What one partition contributes.
pub(super) struct Scan {
    /// MIG mode and layout events of its GPUs.
    pub events: Vec<Event>,
    /// Its workloads' runs on their devices.
    pub runs: Vec<Run>,
}

/// The longest row of one partition's GPU table in `(since, until]`, ms (0 without rows).
pub(super) fn longest_row(frames: &Frames, since: i64, until: i64) -> Result<i64, ChangesError> {
    let df = in_range(&frames.gpu, since, until, &["interval_ms"])
        .select([col("interval_ms").max()])
        .collect()?;
    Ok(i64s(&df, "interval_ms")?.get(0).unwrap_or(0).max(0))
}

fn in_range(f: &LazyFrame, since: i64, until: i64, columns: &[&str]) -> LazyFrame {
    f.clone()
        .with_column(ts_ms())
        .filter(col("ts").gt(lit(since)).and(col("ts").lt_eq(lit(until))))
        .select(columns.iter().map(|c| col(*c)).collect::<Vec<_>>())
}

/// Scans one partition's rows in `(since, until]`; MIG states shorter than `settle` are passed
/// over ([`gpu_events`]).
pub(super) fn scan(
    frames: &Frames,
    since: i64,
    until: i64,
    settle: i64,
) -> Result<Scan, ChangesError> {
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

    let mut labels = Interner::default();
    // MIG instances per (GPU, ts), as ids of their `profile@start` names.
    let mut insts = Interner::default();
    let mut layouts: FastMap<(u32, i64), Vec<u32>> = FastMap::default();
    {
        let gpu_of = gpu_ids(&mig, &mut labels)?;
        let profile = strs(&mig, "profile")?;
        let profile = profile.ids();
        let (ts, start) = (i64s(&mig, "ts")?, i64s(&mig, "placement_start")?);
        let mut cache: FastMap<(Option<u32>, Option<i64>), u32> = FastMap::default();
        for (i, &g) in gpu_of.iter().enumerate() {
            let Some(t) = ts.get(i) else { continue };
            let inst = *cache
                .entry((profile.at(i), start.get(i)))
                .or_insert_with(|| {
                    insts.id(format!(
                        "{}@{}",
                        profile.get(i).unwrap_or("?"),
                        start.get(i).map_or("?".into(), |s| s.to_string())
                    ))
                });
            layouts.entry((g, t)).or_default().push(inst);
        }
    }
    let layouts_known = mig.height() > 0;

    // Each GPU's states in time order.
    let mut states: BTreeMap<u32, Vec<GpuState>> = BTreeMap::new();
    {
        let gpu_of = gpu_ids(&gpu, &mut labels)?;
        let status = strs(&gpu, "status")?;
        let (ts, interval) = (i64s(&gpu, "ts")?, i64s(&gpu, "interval_ms")?);
        let mode = bools(&gpu, "mig_enabled")?;
        for (i, &g) in gpu_of.iter().enumerate() {
            let (Some(t), iv) = (ts.get(i), interval.get(i).unwrap_or(0).max(0)) else {
                continue;
            };
            // A lost GPU's row has no values: it says nothing of the layout.
            if matches!(status.get(i), Some("lost" | "error")) {
                continue;
            }
            let mut layout = layouts.remove(&(g, t)).unwrap_or_default();
            layout.sort_unstable();
            states.entry(g).or_default().push(GpuState {
                start: t - iv,
                end: t,
                mig: mode.get(i),
                layout,
            });
        }
    }
    let mut events = Vec::new();
    for (g, mut s) in states {
        s.sort_by_key(|g| g.start);
        events.extend(gpu_events(
            &labels.names[g as usize],
            &s,
            layouts_known,
            &insts.names,
            settle,
        ));
    }

    // Each workload's devices per row, then runs of the same devices.
    let mut seen: FastMap<u32, BTreeMap<i64, (i64, BTreeSet<u32>)>> = FastMap::default();
    {
        let p = &process;
        let gpu_of = gpu_ids(p, &mut labels)?;
        let mut keys = Interner::default();
        let workload_of = workload_ids(p, &mut keys)?;
        let (ts, interval) = (i64s(p, "ts")?, i64s(p, "interval_ms")?);
        for i in 0..p.height() {
            let Some(t) = ts.get(i) else { continue };
            let e = seen
                .entry(workload_of[i])
                .or_default()
                .entry(t)
                .or_insert_with(|| (interval.get(i).unwrap_or(0).max(0), BTreeSet::new()));
            e.1.insert(gpu_of[i]);
        }
        let mut runs = Vec::new();
        let mut seen: Vec<_> = seen.into_iter().collect();
        seen.sort_by_key(|(w, _)| *w);
        for (w, rows) in seen {
            let workload = &keys.names[w as usize];
            let mut cur: Option<Run> = None;
            for (t, (iv, devices)) in rows {
                let mut devices: Vec<String> = devices
                    .into_iter()
                    .map(|d| labels.names[d as usize].clone())
                    .collect();
                devices.sort();
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
        Ok(Scan { events, runs })
    }
}
