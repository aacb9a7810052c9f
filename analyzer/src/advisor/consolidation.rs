//! Consolidation candidates: whole-GPU workloads (everything running on one GPU outside MIG
//! mode) whose *time-aligned* combined demand fits on fewer GPUs of the same model.
//!
//! Each loaded GPU's series is bucketed to `step` (memory: max; activity: max of SM activity,
//! else of the busy ratio), aligned on the same buckets, and packed first-fit-decreasing by peak
//! memory onto GPUs of its model. A group fits on one GPU when, on the *summed* series,
//! - peak memory × (1 + headroom) ≤ the GPU's memory,
//! - the `quantile` of summed activity ≤ `compute_target`, and
//! - the summed activity never exceeds 1 (so the plan never exceeds capacity on history).
//!
//! A row longer than the step fills every bucket its interval covers, so data sampled every
//! 5 minutes is aligned as well as 10-second rows. Buckets where a GPU has no data count at that
//! GPU's own peak (a gap never makes a plan look better). Risk is the share of buckets where the combined activity exceeded the target.
//! MIG-enabled GPUs are left to the MIG planner. This module plans on history; it moves nothing:
//! each move names who would carry it out ([`super::scheduler::moved_by`]: the Kubernetes
//! scheduler for a pod, Slurm for a job's next submission, no one across the two).

use std::collections::BTreeMap;

use polars::prelude::*;

use super::evidence::{ConsolidationEvidence, PlanGpu, PlanGroup, PlanWorkload};
use super::scheduler::{self, Scheduler};
use super::{
    AdvisorError, Detector, DetectorOutput, Entity, Finding, Params, Partial, Severity, finding_id,
    hours, r3, unbox,
};
use crate::frames::Frames;
use crate::frames::columns::{self, FastMap, FastSet, ts_ms};

const GIB: f64 = (1u64 << 30) as f64;

/// Thresholds (flags `--consolidation.*`).
#[derive(Debug, Clone)]
pub struct ConsolidationParams {
    /// Bucket length of the aligned series, ms (default 60 s).
    pub step_ms: i64,
    /// Memory headroom on the combined peak (default 0.10).
    pub headroom: f64,
    /// Quantile of combined activity that must stay under the target (default 0.95).
    pub quantile: f64,
    /// Activity target for that quantile (default 0.8).
    pub compute_target: f64,
    /// Memory peak below which a GPU is not a workload (empty GPU), bytes (default 1 GiB).
    pub min_memory_bytes: f64,
}

impl Default for ConsolidationParams {
    fn default() -> Self {
        ConsolidationParams {
            step_ms: 60_000,
            headroom: 0.10,
            quantile: 0.95,
            compute_target: 0.8,
            min_memory_bytes: GIB,
        }
    }
}

/// The consolidation detector.
pub struct Consolidation;

/// One loaded GPU with its aligned series.
#[derive(Debug, Clone)]
pub struct Workload {
    pub entity: Entity,
    /// Processes/pods seen on it.
    pub tenants: Vec<String>,
    /// Who held it: pods, Slurm jobs, both or unknown.
    pub scheduler: Scheduler,
    pub capacity_bytes: f64,
    pub mem: Vec<f32>,
    pub act: Vec<f32>,
    pub peak_mem: f32,
    pub peak_act: f32,
    /// `sm_active` or `busy`.
    pub activity_source: &'static str,
}

/// A group of workloads planned onto one GPU (the host: the first member).
#[derive(Debug, Clone)]
pub struct Bin {
    pub members: Vec<usize>,
    pub mem: Vec<f32>,
    pub act: Vec<f32>,
    pub peak_mem: f32,
    pub peak_act: f32,
}

/// The nearest-rank quantile of `v` ([`crate::stats::quantile`] on a copy); 0 when empty.
fn quantile(v: &[f32], q: f64) -> f32 {
    crate::stats::quantile(&mut v.to_vec(), q).unwrap_or(0.0)
}

/// Loaded GPUs outside MIG mode, bucketed over their own range (pure over one partition).
///
/// Rows are grouped by GPU and bucket in Rust (GPUs keyed by their strings' arrow views), not
/// by a polars group-by on string keys, which cost more than the rest of the detector.
pub fn raw_workloads(
    frames: &Frames,
    p: &ConsolidationParams,
) -> Result<RawWorkloads, AdvisorError> {
    let step = p.step_ms.max(1);
    let df = frames
        .gpu
        .clone()
        .filter(col("mig_enabled").fill_null(lit(false)).not())
        .select([
            col("node"),
            col("uuid"),
            col("gpu").cast(DataType::Int64),
            col("model"),
            ts_ms().alias("ts"),
            col("interval_ms").cast(DataType::Int64),
            col("memory_used_max_bytes")
                .cast(DataType::Float64)
                .alias("mem"),
            col("memory_total_bytes")
                .cast(DataType::Float64)
                .alias("total"),
            col("sm_active_max"),
            col("busy_max"),
            col("holder_namespace"),
            col("holder_pod"),
            col("holder_slurm_job_id"),
        ])
        .collect()?;
    let node = columns::strs(&df, "node")?;
    let uuid = columns::strs(&df, "uuid")?;
    let model = columns::strs(&df, "model")?;
    let gpu = columns::i64s(&df, "gpu")?;
    let ts = columns::i64s(&df, "ts")?;
    let iv = columns::i64s(&df, "interval_ms")?;
    let mem = columns::f64s(&df, "mem")?;
    let total = columns::f64s(&df, "total")?;
    let sm = columns::f64s(&df, "sm_active_max")?;
    let busy = columns::f64s(&df, "busy_max")?;
    let holder: [columns::Strs; 3] = [
        columns::strs(&df, "holder_namespace")?,
        columns::strs(&df, "holder_pod")?,
        columns::strs(&df, "holder_slurm_job_id")?,
    ];
    let holder = holder.each_ref().map(columns::Strs::ids);
    // ts > 0: the bucket of the interval ending at ts.
    let bucket = |t: i64| (t - 1).div_euclid(step);

    /// One GPU's rows: (bucket, row) in row order, and its first row of its first bucket.
    struct Gpu<'a> {
        key: (Option<&'a str>, Option<&'a str>),
        rows: Vec<(i64, usize)>,
        first: (i64, usize),
    }
    let mut gpus: Vec<Gpu> = Vec::new();
    {
        // Rows keyed by string ids (each string read once per distinct view).
        let (vn, vu) = (node.ids(), uuid.ids());
        let mut by_id: FastMap<(Option<u32>, Option<u32>), usize> = FastMap::default();
        for i in 0..df.height() {
            let Some(t) = ts.get(i) else { continue };
            let b = bucket(t);
            let g = *by_id.entry((vn.at(i), vu.at(i))).or_insert_with(|| {
                gpus.push(Gpu {
                    key: (vn.get(i), vu.get(i)),
                    rows: Vec::new(),
                    first: (b, i),
                });
                gpus.len() - 1
            });
            // A row longer than the step fills every bucket its interval covers (5-minute
            // data on a 1-minute step), so a coarse series is not read as gaps.
            let from = bucket(t - iv.get(i).unwrap_or(0).max(1) + 1).min(b);
            let e = &mut gpus[g];
            for k in from..=b {
                e.rows.push((k, i));
            }
            if from < e.first.0 {
                e.first = (from, i);
            }
        }
    }
    gpus.sort_by(|a, b| a.key.cmp(&b.key));
    let range = gpus
        .iter()
        .flat_map(|g| g.rows.iter().map(|r| r.0))
        .fold((i64::MAX, i64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let mut raw = RawWorkloads {
        workloads: Vec::new(),
        no_total: 0,
        no_memory: 0,
        gpus: gpus.len(),
        buckets: (range.0 <= range.1).then_some(range),
        notes: Vec::new(),
    };
    if range.0 > range.1 {
        return Ok(raw);
    }
    let (tenants, mut held) = tenants(frames)?;
    let max = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    for g in &gpus {
        let (gmin, gmax) = g.rows.iter().fold((i64::MAX, i64::MIN), |(lo, hi), r| {
            (lo.min(r.0), hi.max(r.0))
        });
        let len = (gmax - gmin + 1) as usize;
        // Per bucket: max memory, max SM activity, max busy.
        let mut bm: Vec<Option<f64>> = vec![None; len];
        let mut bs: Vec<Option<f64>> = vec![None; len];
        let mut bb: Vec<Option<f64>> = vec![None; len];
        let mut cap: f64 = 0.0;
        for &(b, i) in &g.rows {
            let k = (b - gmin) as usize;
            bm[k] = max(bm[k], mem.get(i));
            bs[k] = max(bs[k], sm.get(i));
            bb[k] = max(bb[k], busy.get(i));
            cap = cap.max(total.get(i).unwrap_or(0.0));
        }
        let uses_sm = bs.iter().any(Option::is_some);
        let m: Vec<f32> = bm
            .iter()
            .map(|v| v.map_or(f32::NAN, |v| v as f32))
            .collect();
        let a: Vec<f32> = (if uses_sm { &bs } else { &bb })
            .iter()
            .map(|v| v.map_or(f32::NAN, |v| v as f32))
            .collect();
        if m.iter().all(|v| v.is_nan()) {
            raw.no_memory += 1;
            continue;
        }
        let peak_mem = m
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .fold(0.0, f32::max);
        if f64::from(peak_mem) < p.min_memory_bytes {
            continue;
        }
        if cap <= 0.0 {
            raw.no_total += 1;
            continue;
        }
        let first = g.first.1;
        let n = g.key.0.unwrap_or("").to_string();
        let u = g.key.1.unwrap_or("").to_string();
        // The GPU's holders, read where they change (a row at a time, in its rows' order).
        let mut last = None;
        for &(_, i) in &g.rows {
            let k = holder.each_ref().map(|h| h.at(i));
            if k != [None; 3] && last != Some(k) {
                last = Some(k);
                let [ns, pod, job] = holder.each_ref().map(|h| h.get(i));
                held.add_row(&n, None, Some(&u), ns, pod, None, job);
            }
        }
        raw.workloads.push(RawWorkload {
            tenants: tenants
                .get(&(n.clone(), u.clone()))
                .cloned()
                .unwrap_or_default(),
            scheduler: held.scheduler(&n, gpu.get(first).map(|g| g as u32), Some(&u)),
            entity: Entity {
                kind: "gpu".into(),
                node: Some(n),
                gpu: gpu.get(first).map(|g| g as u32),
                uuid: Some(u),
                model: model.get(first).map(str::to_string),
                ..Entity::default()
            },
            capacity_bytes: cap,
            first_bucket: gmin,
            mem: m,
            act: a,
            uses_sm,
        });
    }
    Ok(raw)
}

/// One loaded GPU's bucketed series over its own bucket range (`NaN` = no data), before
/// alignment on the fleet's range.
#[derive(Debug, Clone)]
pub struct RawWorkload {
    pub entity: Entity,
    pub tenants: Vec<String>,
    pub scheduler: Scheduler,
    pub capacity_bytes: f64,
    pub first_bucket: i64,
    pub mem: Vec<f32>,
    pub act: Vec<f32>,
    pub uses_sm: bool,
}

/// One partition's loaded GPUs (the detector's partial).
#[derive(Debug, Clone, Default)]
pub struct RawWorkloads {
    pub workloads: Vec<RawWorkload>,
    /// Loaded GPUs left out for lack of a memory total.
    pub no_total: usize,
    /// GPUs outside MIG mode without a memory-used value in any row: not judged (whether
    /// workloads fit together is a question of memory; activity alone cannot tell).
    pub no_memory: usize,
    /// GPUs outside MIG mode with rows.
    pub gpus: usize,
    /// First and last bucket of any non-MIG GPU row in the partition (loaded or not).
    pub buckets: Option<(i64, i64)>,
    pub notes: Vec<String>,
}

/// Aligns every partition's workloads on the common bucket range and fills the gaps: a bucket
/// without data counts at the workload's own peak (a gap never makes a plan look better).
pub fn align(parts: Vec<RawWorkloads>) -> (Vec<Workload>, Vec<String>) {
    let range = parts
        .iter()
        .filter_map(|p| p.buckets)
        .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
    let no_total: usize = parts.iter().map(|p| p.no_total).sum();
    let no_memory: usize = parts.iter().map(|p| p.no_memory).sum();
    let gpus: usize = parts.iter().map(|p| p.gpus).sum();
    let mut notes: Vec<String> = parts.iter().flat_map(|p| p.notes.clone()).collect();
    notes.dedup();
    let Some((bmin, bmax)) = range else {
        return (Vec::new(), notes);
    };
    let len = (bmax - bmin + 1) as usize;
    let mut out = Vec::new();
    for w in parts.into_iter().flat_map(|p| p.workloads) {
        let off = (w.first_bucket - bmin) as usize;
        let mut m = vec![f32::NAN; len];
        let mut a = vec![f32::NAN; len];
        m[off..off + w.mem.len()].copy_from_slice(&w.mem);
        a[off..off + w.act.len()].copy_from_slice(&w.act);
        let peak_mem = m
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .fold(0.0, f32::max);
        let peak_act = a
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .fold(0.0, f32::max);
        // Unknown buckets count at the workload's own peak.
        for v in &mut m {
            if v.is_nan() {
                *v = peak_mem;
            }
        }
        let any_act = a.iter().any(|v| !v.is_nan());
        for v in &mut a {
            if v.is_nan() {
                // No activity signal at all: assume the GPU is fully used (never consolidated).
                *v = if any_act { peak_act } else { 1.0 };
            }
        }
        out.push(Workload {
            entity: w.entity,
            tenants: w.tenants,
            scheduler: w.scheduler,
            capacity_bytes: w.capacity_bytes,
            peak_mem,
            peak_act: if any_act { peak_act } else { 1.0 },
            mem: m,
            act: a,
            activity_source: if w.uses_sm { "sm_active" } else { "busy" },
        });
    }
    if no_total > 0 {
        notes.push(format!(
            "{no_total} loaded GPU(s) report no memory total and were left out"
        ));
    }
    if no_memory > 0 {
        notes.push(format!(
            "memory used is missing for {no_memory} of {gpus} GPU(s) outside MIG: not judged (whether workloads fit on one GPU depends on their memory; activity alone cannot tell)"
        ));
    }
    (out, notes)
}

/// Loaded GPUs outside MIG mode, bucketed and aligned (pure over the frames).
pub fn workloads(
    frames: &Frames,
    p: &ConsolidationParams,
) -> Result<(Vec<Workload>, Vec<String>), AdvisorError> {
    Ok(align(vec![raw_workloads(frames, p)?]))
}

/// Tenants per GPU.
type Tenants = BTreeMap<(String, String), Vec<String>>;

/// Processes/pods per GPU, for labels: the distinct (process, namespace, pod, Slurm job) of each
/// GPU, in string order (nulls last), deduplicated in Rust by the strings' arrow views; and the
/// pods and jobs they belong to ([`scheduler::Holders`], by node and UUID).
fn tenants(frames: &Frames) -> Result<(Tenants, scheduler::Holders), AdvisorError> {
    const COLS: [&str; 7] = [
        "node",
        "uuid",
        "process",
        "namespace",
        "pod",
        "slurm_job_id",
        "pod_uid",
    ];
    let df = frames.process.clone().select(COLS.map(col)).collect()?;
    let cols: Vec<columns::Strs> = COLS
        .iter()
        .map(|n| columns::strs(&df, n))
        .collect::<Result<_, _>>()?;
    // Rows keyed by string ids (each string read once per distinct view).
    let ids: Vec<columns::Ids> = cols.iter().map(columns::Strs::ids).collect();
    let mut seen: FastSet<[Option<u32>; 7]> = FastSet::default();
    // Sorted as polars sorts with nulls last: (is null, value) per column.
    type Key<'a> = [(bool, &'a str); 7];
    let mut rows: std::collections::BTreeSet<Key> = std::collections::BTreeSet::new();
    for i in 0..df.height() {
        if seen.insert(std::array::from_fn(|c| ids[c].at(i))) {
            rows.insert(std::array::from_fn(|c| match ids[c].get(i) {
                Some(s) => (false, s),
                None => (true, ""),
            }));
        }
    }
    fn get<'a>(k: &(bool, &'a str)) -> Option<&'a str> {
        (!k.0).then_some(k.1)
    }
    let mut out: Tenants = BTreeMap::new();
    let mut held = scheduler::Holders::default();
    for r in &rows {
        held.add_row(
            get(&r[0]).unwrap_or(""),
            None,
            Some(get(&r[1]).unwrap_or("")),
            get(&r[3]),
            get(&r[4]),
            get(&r[6]),
            get(&r[5]),
        );
        let mut label = get(&r[2]).unwrap_or("?").to_string();
        match (get(&r[3]), get(&r[4])) {
            (Some(n), Some(p)) => label.push_str(&format!(" ({n}/{p})")),
            (None, Some(p)) => label.push_str(&format!(" ({p})")),
            _ => {}
        }
        if let Some(j) = get(&r[5]) {
            label.push_str(&format!(" (slurm job {j})"));
        }
        let e = out
            .entry((
                get(&r[0]).unwrap_or("").into(),
                get(&r[1]).unwrap_or("").into(),
            ))
            .or_default();
        if !e.contains(&label) {
            e.push(label);
        }
    }
    Ok((out, held))
}

/// Would `w` fit into `bin` on a GPU of `cap` bytes?
fn fits(bin: &Bin, w: &Workload, cap: f64, p: &ConsolidationParams) -> bool {
    let limit = (cap / (1.0 + p.headroom)) as f32;
    if bin.peak_mem + w.peak_mem > limit {
        let peak = bin
            .mem
            .iter()
            .zip(&w.mem)
            .map(|(a, b)| a + b)
            .fold(0.0, f32::max);
        if peak > limit {
            return false;
        }
    }
    if bin.peak_act + w.peak_act <= p.compute_target as f32 {
        return true;
    }
    let sum: Vec<f32> = bin.act.iter().zip(&w.act).map(|(a, b)| a + b).collect();
    if sum.iter().any(|&v| v > 1.0) {
        return false;
    }
    quantile(&sum, p.quantile) <= p.compute_target as f32
}

/// First-fit decreasing by peak memory over the workloads of one model; returns the bins.
pub fn pack(ws: &[Workload], idx: &[usize], p: &ConsolidationParams) -> Vec<Bin> {
    let cap = idx
        .iter()
        .map(|&i| ws[i].capacity_bytes)
        .fold(f64::INFINITY, f64::min);
    let mut order = idx.to_vec();
    order.sort_by(|&a, &b| {
        ws[b]
            .peak_mem
            .total_cmp(&ws[a].peak_mem)
            .then(ws[b].peak_act.total_cmp(&ws[a].peak_act))
            .then(a.cmp(&b))
    });
    let mut bins: Vec<Bin> = Vec::new();
    for i in order {
        let w = &ws[i];
        if let Some(bin) = bins.iter_mut().find(|bin| fits(bin, w, cap, p)) {
            for (a, b) in bin.mem.iter_mut().zip(&w.mem) {
                *a += b;
            }
            for (a, b) in bin.act.iter_mut().zip(&w.act) {
                *a += b;
            }
            bin.peak_mem = bin.mem.iter().copied().fold(0.0, f32::max);
            bin.peak_act = bin.act.iter().copied().fold(0.0, f32::max);
            bin.members.push(i);
        } else {
            bins.push(Bin {
                members: vec![i],
                mem: w.mem.clone(),
                act: w.act.clone(),
                peak_mem: w.peak_mem,
                peak_act: w.peak_act,
            });
        }
    }
    bins
}

impl Detector for Consolidation {
    fn id(&self) -> &'static str {
        ConsolidationEvidence::DETECTOR
    }

    fn title(&self) -> &'static str {
        "Consolidation candidates"
    }

    fn validate(&self, params: &Params) -> Result<(), AdvisorError> {
        let p = &params.consolidation;
        if !(0.0..=1.0).contains(&p.quantile) || !(0.0..=1.0).contains(&p.compute_target) {
            return Err(AdvisorError::Param {
                name: "--consolidation.quantile/--consolidation.compute-target",
                reason: "must be in 0–1".into(),
            });
        }
        Ok(())
    }

    fn partial(&self, frames: &Frames, params: &Params) -> Result<Partial, AdvisorError> {
        Ok(Box::new(raw_workloads(frames, &params.consolidation)?))
    }

    fn finish(&self, parts: Vec<Partial>, params: &Params) -> Result<DetectorOutput, AdvisorError> {
        let p = &params.consolidation;
        let (ws, notes) = align(unbox::<RawWorkloads>(self.id(), parts)?);
        let mut out = DetectorOutput {
            notes,
            ..DetectorOutput::default()
        };
        let mut by_model: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, w) in ws.iter().enumerate() {
            by_model
                .entry(w.entity.model.clone().unwrap_or_else(|| "unknown".into()))
                .or_default()
                .push(i);
        }
        let step_h = hours(p.step_ms);
        let mut freed_total = 0usize;
        for (model, idx) in &by_model {
            let bins = pack(&ws, idx, p);
            let freed = idx.len() - bins.len();
            if freed == 0 {
                continue;
            }
            freed_total += freed;
            let cap = idx
                .iter()
                .map(|&i| ws[i].capacity_bytes)
                .fold(f64::INFINITY, f64::min);
            let buckets = ws[idx[0]].mem.len();
            // Who moves workload `i` onto host `h`: its scheduler, not tessera.
            let by = |i: usize, h: usize| {
                let node = |k: usize| ws[k].entity.node.as_deref().unwrap_or("?");
                scheduler::moved_by(ws[i].scheduler, ws[h].scheduler, node(i), node(h))
            };
            let mut schedulers = std::collections::BTreeSet::new();
            let label = |i: usize| {
                let w = &ws[i];
                let mut s = w.entity.label();
                if !w.tenants.is_empty() {
                    s.push_str(&format!(" [{}]", w.tenants.join("; ")));
                }
                s
            };
            let plan: Vec<PlanGroup> = bins
                .iter()
                .filter(|b| b.members.len() > 1)
                .map(|b| {
                    let host = &ws[b.members[0]];
                    let over_target = b
                        .act
                        .iter()
                        .filter(|&&v| f64::from(v) > p.compute_target)
                        .count();
                    let over_cap = b.act.iter().filter(|&&v| v > 1.0).count()
                        + b.mem.iter().filter(|&&v| f64::from(v) > cap).count();
                    PlanGroup {
                        host: PlanGpu {
                            node: host.entity.node.clone(),
                            gpu: host.entity.gpu,
                            uuid: host.entity.uuid.clone(),
                        },
                        workloads: b
                            .members
                            .iter()
                            .map(|&i| PlanWorkload {
                                moved_by: (i != b.members[0]).then(|| by(i, b.members[0]).1),
                                scheduler: ws[i].scheduler,
                                node: ws[i].entity.node.clone(),
                                gpu: ws[i].entity.gpu,
                                uuid: ws[i].entity.uuid.clone(),
                                label: label(i),
                                memory_peak_gib: r3(f64::from(ws[i].peak_mem) / GIB),
                                activity_peak: r3(f64::from(ws[i].peak_act)),
                                activity_source: ws[i].activity_source.to_string(),
                            })
                            .collect(),
                        combined_memory_peak_gib: r3(f64::from(b.peak_mem) / GIB),
                        memory_headroom: r3(1.0 - f64::from(b.peak_mem) / cap),
                        combined_activity_p95: r3(f64::from(quantile(&b.act, 0.95))),
                        combined_activity_p99: r3(f64::from(quantile(&b.act, 0.99))),
                        combined_activity_max: r3(f64::from(b.peak_act)),
                        risk_over_target_share: r3(over_target as f64 / buckets.max(1) as f64),
                        over_capacity_share: r3(over_cap as f64 / buckets.max(1) as f64),
                    }
                })
                .collect();
            let moves: Vec<String> = bins
                .iter()
                .filter(|b| b.members.len() > 1)
                .flat_map(|b| {
                    let host = b.members[0];
                    b.members[1..].iter().map(move |&i| (i, host))
                })
                .map(|(i, host)| {
                    let s = by(i, host).0;
                    schedulers.insert(s);
                    format!("{} → {} ({})", label(i), ws[host].entity.label(), s.by())
                })
                .collect();
            let gpu_hours = freed as f64 * buckets as f64 * step_h;
            out.findings.push(Finding::new(
                finding_id(self.id(), &[model]),
                Severity::Warning,
                Entity {
                    kind: "gpu_model".into(),
                    model: Some(model.clone()),
                    ..Entity::default()
                },
                format!(
                    "{model}: {} loaded GPU(s) fit on {} — {freed} GPU(s) freed ({:.0} GPU-hours over the period)",
                    idx.len(),
                    bins.len(),
                    gpu_hours
                ),
                format!(
                    "co-locate (MPS or time-slicing, or MIG layouts from tessera mig plan): {}. {}",
                    moves.join("; "),
                    scheduler::who_moves(&schedulers)
                ),
                ConsolidationEvidence {
                    model: model.clone(),
                    gpus_loaded: idx.len(),
                    gpus_needed: bins.len(),
                    gpus_freed: freed,
                    gpu_hours_freed: r3(gpu_hours),
                    capacity_gib: r3(cap / GIB),
                    headroom: p.headroom,
                    quantile: p.quantile,
                    compute_target: p.compute_target,
                    step_seconds: p.step_ms / 1000,
                    plan,
                },
            ));
        }
        let count =
            crate::gpu_count::GpuCount::new(ws.len() as u32, (ws.len() - freed_total) as u32);
        out.summary = format!(
            "{} loaded GPU(s) outside MIG: {} by co-locating workloads whose combined peak memory (+{:.0}%) and p{:.0} activity (≤ {:.0}%) fit",
            ws.len(),
            count.text(),
            p.headroom * 100.0,
            p.quantile * 100.0,
            p.compute_target * 100.0
        );
        Ok(out)
    }
}
