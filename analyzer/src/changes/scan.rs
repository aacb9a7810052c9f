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
}

/// The longest row of one partition's GPU table in `(since, until]`, ms (0 without rows).
pub(super) fn longest_row(frames: &Frames, since: i64, until: i64) -> Result<i64, ChangesError> {
    let df = in_range(&frames.gpu, since, until, &["interval_ms"])
        .select([col("interval_ms").max()])
        .collect()?;
    Ok(i64s(&df, "interval_ms")?.get(0).unwrap_or(0).max(0))
}

/// A GPU's label: `node/GPUi`, else `node/uuid`.
fn gpu_label(node: Option<&str>, index: Option<i64>, uuid: Option<&str>) -> String {
    let node = node.unwrap_or("?");
    match (index, uuid) {
        (Some(i), _) => format!("{node}/GPU{i}"),
        (None, Some(u)) => format!("{node}/{u}"),
        (None, None) => format!("{node}/?"),
    }
}

/// A workload's identity: the pod (`namespace/pod`), else the Slurm job and process, else the
/// node, pid and process name (a process cannot keep its pid on another node).
fn workload_key(
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

/// Strings numbered in order of first appearance.
#[derive(Default)]
pub(super) struct Interner {
    map: FastMap<String, u32>,
    pub names: Vec<String>,
}

impl Interner {
    pub(super) fn id(&mut self, s: String) -> u32 {
        if let Some(&id) = self.map.get(&s) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(s.clone());
        self.map.insert(s, id);
        id
    }
}

/// Each row's GPU (its [`gpu_label`] interned in `labels`): a label is built once per distinct
/// (node, index, uuid) of the frame.
pub(super) fn gpu_ids(df: &DataFrame, labels: &mut Interner) -> Result<Vec<u32>, ChangesError> {
    let (node, uuid, index) = (strs(df, "node")?, strs(df, "uuid")?, i64s(df, "gpu")?);
    let (n, u) = (node.ids(), uuid.ids());
    /// A row's (node, index, uuid) by string ids.
    type Key = (Option<u32>, Option<i64>, Option<u32>);
    let mut cache: FastMap<Key, u32> = FastMap::default();
    Ok((0..df.height())
        .map(|i| {
            *cache
                .entry((n.at(i), index.get(i), u.at(i)))
                .or_insert_with(|| labels.id(gpu_label(n.get(i), index.get(i), u.get(i))))
        })
        .collect())
}

/// Each row's workload (its [`workload_key`] interned in `keys`), built once per distinct
/// identity of the frame.
pub(super) fn workload_ids(df: &DataFrame, keys: &mut Interner) -> Result<Vec<u32>, ChangesError> {
    let (node, name) = (strs(df, "node")?, strs(df, "process")?);
    let (ns, pod, slurm) = (
        strs(df, "namespace")?,
        strs(df, "pod")?,
        strs(df, "slurm_job_id")?,
    );
    let pid = i64s(df, "pid")?;
    let (node, name, ns, pod, slurm) = (node.ids(), name.ids(), ns.ids(), pod.ids(), slurm.ids());
    type Key = (
        Option<u32>,
        Option<i64>,
        Option<u32>,
        Option<u32>,
        Option<u32>,
        Option<u32>,
    );
    let mut cache: FastMap<Key, u32> = FastMap::default();
    Ok((0..df.height())
        .map(|i| {
            let key = (
                node.at(i),
                pid.get(i),
                name.at(i),
                ns.at(i),
                pod.at(i),
                slurm.at(i),
            );
            *cache.entry(key).or_insert_with(|| {
                keys.id(workload_key(
                    node.get(i),
                    pid.get(i),
                    name.get(i),
                    ns.get(i),
                    pod.get(i),
                    slurm.get(i),
                ))
            })
        })
        .collect())
}
