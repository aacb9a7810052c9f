//! One partition's rows read for change detection, in the report pass (`crate::report::pass`,
//! on the worker that holds the partition in memory, so nothing is decoded twice): each GPU's
//! MIG state per row (mode and instances), consecutive equal rows merged into one state, and
//! each workload's devices per row reduced to runs. The result does not depend on the settling
//! margin, which needs every partition's longest row: `PartScan::events` applies it later.
//!
//! Rows are `(ts − interval_ms, ts]`; only rows ending in `(since, until]` count. It decides
//! nothing itself (`super::detect` does). The row-per-row version it replaced is kept as the
//! tests' reference (`reference.rs`): both give the same events and runs.

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

use polars::prelude::*;

use super::ChangesError;
use super::detect::{Event, GpuState, Run, gpu_events};
use super::keys::{Interner, gpu_ids, workload_ids};
use crate::frames::Frames;
use crate::frames::columns::{FastMap, bools, i64s, strs, ts_ms};

/// What one partition contributes, before the settling margin is known.
#[derive(Debug, Default)]
pub struct PartScan {
    /// The longest GPU row ending in the range, ms (0 without rows).
    pub(super) longest: i64,
    /// Each GPU's label and its MIG states in time order, equal consecutive rows merged (a
    /// GPU without rows of values has none).
    gpus: Vec<(String, Vec<GpuState>)>,
    /// The source has MIG instance rows in the range at all.
    layouts_known: bool,
    /// The instances' `profile@start` names by id.
    insts: Vec<String>,
    /// Its workloads' runs on their devices, workload by workload, each in time order.
    pub(super) runs: Vec<Run>,
    /// The comparison's sums per whole hour of the range (`compare::tally`).
    pub(super) hours: super::compare::PartHours,
}

impl PartScan {
    /// The partition's MIG mode and layout events: states shorter than `settle` are passed
    /// over ([`gpu_events`]).
    pub(super) fn events(&self, settle: i64) -> Vec<Event> {
        self.gpus
            .iter()
            .flat_map(|(label, states)| {
                gpu_events(label, states, self.layouts_known, &self.insts, settle)
            })
            .collect()
    }
}

/// The columns the scan reads, per table (the report pass reads them with its own).
pub const COLUMNS: &[(crate::frames::Table, &[&str])] = &[
    (
        crate::frames::Table::Gpu,
        &[
            "node",
            "gpu",
            "uuid",
            "ts",
            "interval_ms",
            "mig_enabled",
            "status",
            // The comparison's figures (`compare::tally`).
            "busy_mean",
            "sm_active_mean",
            "memory_used_max_bytes",
            "power_mean_watts",
            "energy_delta_joules",
        ],
    ),
    (
        crate::frames::Table::Mig,
        &["node", "gpu", "uuid", "ts", "profile", "placement_start"],
    ),
    (
        crate::frames::Table::Process,
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
    ),
];

/// The scan's columns of one table, `ts` as unix ms, every row (in memory: no copy of the
/// string columns, so their interned ids are shared with the pass's other readers).
fn read(frames: &Frames, t: crate::frames::Table) -> Result<DataFrame, ChangesError> {
    let names = COLUMNS
        .iter()
        .find(|(u, _)| *u == t)
        .map_or(&[][..], |(_, c)| *c);
    Ok(frames
        .table(t)
        .clone()
        .with_column(ts_ms())
        .select(names.iter().map(|c| col(*c)).collect::<Vec<_>>())
        .collect()?)
}

/// Scans one partition's rows ending in `(since, until]` (`frames` in memory; rows outside the
/// range are skipped, not filtered out).
pub fn part(frames: &Frames, since: i64, until: i64) -> Result<PartScan, ChangesError> {
    use crate::frames::Table;
    let inside = |t: Option<i64>| t.filter(|&t| t > since && t <= until);
    let gpu = read(frames, Table::Gpu)?;
    let mig = read(frames, Table::Mig)?;
    let process = read(frames, Table::Process)?;
    let mut labels = Interner::default();

    // Each (GPU, ts)'s instances, sorted, as one layout id (0: none).
    let mut insts = Interner::default();
    let mut layout_ids: FastMap<Vec<u32>, u32> = FastMap::default();
    layout_ids.insert(Vec::new(), 0);
    let mut layouts: Vec<Vec<u32>> = vec![Vec::new()];
    let mut layout_at: FastMap<(u32, i64), u32> = FastMap::default();
    let mut has_mig: Vec<bool> = Vec::new();
    let mut layouts_known = false;
    {
        let gpu_of = gpu_ids(&mig, &mut labels)?;
        let profile = strs(&mig, "profile")?;
        let profile = profile.ids();
        let (ts, start) = (i64s(&mig, "ts")?, i64s(&mig, "placement_start")?);
        let mut inst_of: FastMap<(Option<u32>, Option<i64>), u32> = FastMap::default();
        let mut rows: Vec<(u32, i64, u32)> = Vec::new();
        for (i, &g) in gpu_of.iter().enumerate() {
            let Some(t) = inside(ts.get(i)) else { continue };
            let inst = *inst_of
                .entry((profile.at(i), start.get(i)))
                .or_insert_with(|| {
                    insts.id(format!(
                        "{}@{}",
                        profile.get(i).unwrap_or("?"),
                        start.get(i).map_or("?".into(), |s| s.to_string())
                    ))
                });
            rows.push((g, t, inst));
        }
        layouts_known = layouts_known || !rows.is_empty();
        rows.sort_unstable();
        for same in rows.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let (g, t) = (same[0].0, same[0].1);
            let list: Vec<u32> = same.iter().map(|r| r.2).collect();
            let id = match layout_ids.get(&list) {
                Some(&id) => id,
                None => {
                    let id = layouts.len() as u32;
                    layouts.push(list.clone());
                    layout_ids.insert(list, id);
                    id
                }
            };
            layout_at.insert((g, t), id);
            if has_mig.len() <= g as usize {
                has_mig.resize(g as usize + 1, false);
            }
            has_mig[g as usize] = true;
        }
    }

    // Each GPU's rows of values: (start, end, mode, layout id), in row order.
    let mut rows: Vec<Vec<StateRow>> = Vec::new();
    let mut longest = 0i64;
    let gpu_of = gpu_ids(&gpu, &mut labels)?;
    {
        let status = strs(&gpu, "status")?;
        let status = status.ids();
        // Per status id: a lost GPU's row has no values, it says nothing of the layout.
        let lost: Vec<bool> = status
            .strings
            .iter()
            .map(|s| matches!(*s, "lost" | "error"))
            .collect();
        let (ts, interval) = (i64s(&gpu, "ts")?, i64s(&gpu, "interval_ms")?);
        let mode = bools(&gpu, "mig_enabled")?;
        for (i, &g) in gpu_of.iter().enumerate() {
            let Some(t) = inside(ts.get(i)) else { continue };
            let iv = interval.get(i);
            longest = longest.max(iv.unwrap_or(0));
            if status.at(i).is_some_and(|s| lost[s as usize]) {
                continue;
            }
            // The first row of a (GPU, ts) takes its instances.
            let layout = if has_mig.get(g as usize).copied().unwrap_or(false) {
                layout_at.remove(&(g, t)).unwrap_or(0)
            } else {
                0
            };
            if rows.len() <= g as usize {
                rows.resize_with(g as usize + 1, Vec::new);
            }
            let iv = iv.unwrap_or(0).max(0);
            rows[g as usize].push((t - iv, t, mode.get(i), layout));
        }
    }
    let mut gpus = Vec::new();
    for (g, mut rows) in rows.into_iter().enumerate() {
        if rows.is_empty() {
            continue;
        }
        if !rows.is_sorted_by_key(|r| r.0) {
            rows.sort_by_key(|r| r.0);
        }
        let same = |a: &StateRow, b: &StateRow| a.2 == b.2 && (!layouts_known || a.3 == b.3);
        let mut states: Vec<GpuState> = Vec::new();
        let mut first = rows[0];
        let mut end = first.1;
        for r in &rows[1..] {
            if same(&first, r) {
                end = r.1;
                continue;
            }
            states.push(state(&first, end, &layouts));
            first = *r;
            end = r.1;
        }
        states.push(state(&first, end, &layouts));
        gpus.push((labels.names[g].clone(), states));
    }

    let process_gpu_of = gpu_ids(&process, &mut labels)?;
    let mut keys = Interner::default();
    let workload_of = workload_ids(&process, &mut keys)?;
    let runs = workload_runs(
        &process,
        &process_gpu_of,
        &workload_of,
        &labels,
        &keys,
        inside,
    )?;
    let hours = super::compare::tally(
        super::compare::Rows {
            gpu: &gpu,
            gpu_of: &gpu_of,
            process: &process,
            process_gpu_of: &process_gpu_of,
            workload_of: &workload_of,
        },
        (since, until),
        super::compare::HOUR_MS as i64,
        labels.names,
        keys.names,
    )?;
    Ok(PartScan {
        longest,
        gpus,
        layouts_known,
        insts: insts.names,
        runs,
        hours,
    })
}

/// A GPU row's state: start, end, MIG mode, layout id.
type StateRow = (i64, i64, Option<bool>, u32);

/// A merged state: the first row's mode and instances, from its start to `end`.
fn state(first: &StateRow, end: i64, layouts: &[Vec<u32>]) -> GpuState {
    GpuState {
        start: first.0,
        end,
        mig: first.2,
        layout: layouts[first.3 as usize].clone(),
    }
}

/// One workload's rows as they come: the devices of its latest `ts`, and its runs so far.
#[derive(Default)]
struct Track {
    /// The latest `ts`, its row length (the first row's), and its devices (label ids).
    at: Option<(i64, i64)>,
    devices: Vec<u32>,
    /// The current run: devices (sorted ids), start, end; and the runs before it.
    run: Option<(Vec<u32>, i64, i64)>,
    done: Vec<(Vec<u32>, i64, i64)>,
}

impl Track {
    /// Ends the latest `ts`: its devices extend the current run or start the next one (the
    /// devices' list is reused while the run goes on).
    fn close(&mut self) {
        let Some((t, iv)) = self.at.take() else {
            return;
        };
        self.devices.sort_unstable();
        let (start, end) = (t - iv, t);
        match &mut self.run {
            Some(r) if r.0 == self.devices && start <= r.2 => {
                r.2 = end;
                self.devices.clear();
            }
            _ => {
                self.done.extend(self.run.take());
                self.run = Some((std::mem::take(&mut self.devices), start, end));
            }
        }
    }

    /// Adds a row on `device` ending at `t`, `iv` long; `false` when `t` is before the latest.
    fn row(&mut self, t: i64, iv: Option<i64>, device: u32) -> bool {
        match self.at {
            Some((at, _)) if at == t => {
                if !self.devices.contains(&device) {
                    self.devices.push(device);
                }
            }
            Some((at, _)) if at > t => return false,
            _ => {
                self.close();
                self.at = Some((t, iv.unwrap_or(0).max(0)));
                self.devices.push(device);
            }
        }
        true
    }
}

/// Each workload's runs on one set of devices (rows of one `ts` make one set; a run goes on
/// while the next row's start is not after its end), workload by workload in order of first
/// appearance, each in time order.
fn workload_runs(
    p: &DataFrame,
    gpu_of: &[u32],
    workload_of: &[u32],
    labels: &Interner,
    keys: &Interner,
    inside: impl Fn(Option<i64>) -> Option<i64>,
) -> Result<Vec<Run>, ChangesError> {
    let (ts, interval) = (i64s(p, "ts")?, i64s(p, "interval_ms")?);
    let mut tracks: Vec<Track> = Vec::new();
    tracks.resize_with(keys.names.len(), Track::default);
    // Rows in `ts` order per workload (as history writes them); else all rows sorted by `ts`
    // (stable: the first row of a `ts` still gives its length) and the walk begins again.
    let mut sorted = true;
    for i in 0..p.height() {
        let Some(t) = inside(ts.get(i)) else { continue };
        if !tracks[workload_of[i] as usize].row(t, interval.get(i), gpu_of[i]) {
            sorted = false;
            break;
        }
    }
    if !sorted {
        let mut order: Vec<(i64, usize)> = (0..p.height())
            .filter_map(|i| Some((inside(ts.get(i))?, i)))
            .collect();
        order.sort_by_key(|&(t, _)| t);
        tracks.clear();
        tracks.resize_with(keys.names.len(), Track::default);
        for (t, i) in order {
            tracks[workload_of[i] as usize].row(t, interval.get(i), gpu_of[i]);
        }
    }
    let mut runs = Vec::new();
    for (w, mut tr) in tracks.into_iter().enumerate() {
        tr.close();
        tr.done.extend(tr.run.take());
        for (devices, start, end) in tr.done {
            let mut devices: Vec<String> = devices
                .into_iter()
                .map(|d| labels.names[d as usize].clone())
                .collect();
            devices.sort();
            runs.push(Run {
                workload: keys.names[w].clone(),
                devices,
                start,
                end,
            });
        }
    }
    Ok(runs)
}
