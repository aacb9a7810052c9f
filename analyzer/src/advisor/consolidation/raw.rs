//! One partition's loaded GPUs for the consolidation detector, before alignment: each GPU's
//! rows outside MIG mode bucketed to the step (memory: max; activity: max of SM activity, else
//! of the busy ratio) over its own bucket range ([`raw_workloads`]), with its tenants and who
//! holds it ([`tenants`]).
//!
//! It does not align the partitions' workloads on the fleet's range or pack them (the parent
//! module does).

use std::collections::BTreeMap;

use polars::prelude::*;

use super::ConsolidationParams;
use crate::advisor::scheduler::{self, Scheduler};
use crate::advisor::{AdvisorError, Entity};
use crate::frames::Frames;
use crate::frames::columns::{self, FastMap, FastSet, ts_ms};

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

/// Loaded GPUs outside MIG mode, bucketed over their own range (pure over one partition).
///
/// Rows are grouped by GPU and bucket in Rust (GPUs keyed by their strings' arrow views), not
/// by a polars group-by on string keys, which cost more than the rest of the detector.
pub fn raw_workloads(
    frames: &Frames,
    p: &ConsolidationParams,
) -> Result<RawWorkloads, AdvisorError> {
    let step = p.step_ms.max(1);
    let df = gpu_columns(frames)?;
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
    let mut gpus = gpu_rows(&df, (&node, &uuid), (&ts, &iv), step);
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
    for g in &gpus {
        let (gmin, cap, uses_sm, m, a) = bucket_series(g, &mem, (&sm, &busy), &total);
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

/// The GPU frame's columns the detector reads, rows outside MIG mode only: the GPU's names,
/// time and interval, memory used (`mem`) and total (`total`), activity and holders.
fn gpu_columns(frames: &Frames) -> Result<DataFrame, AdvisorError> {
    Ok(frames
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
        .collect()?)
}

/// One GPU's rows: (bucket, row) in row order, and its first row of its first bucket.
struct Gpu<'a> {
    key: (Option<&'a str>, Option<&'a str>),
    rows: Vec<(i64, usize)>,
    first: (i64, usize),
}

/// Each GPU's rows by bucket of `step` (ts > 0: the bucket of the interval ending at ts),
/// GPUs in order of first row.
fn gpu_rows<'a>(
    df: &DataFrame,
    (node, uuid): (&'a columns::Strs, &'a columns::Strs),
    (ts, iv): (&columns::I64s, &columns::I64s),
    step: i64,
) -> Vec<Gpu<'a>> {
    let bucket = |t: i64| (t - 1).div_euclid(step);
    let mut gpus: Vec<Gpu> = Vec::new();
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
    gpus
}

/// A GPU's series over its own buckets: per bucket the max memory, and the max SM activity
/// (else busy ratio, when no bucket has SM activity), `NaN` where none; with its first bucket,
/// its largest memory total and whether the activity is SM activity.
#[allow(clippy::type_complexity)]
fn bucket_series(
    g: &Gpu,
    mem: &columns::F64s,
    (sm, busy): (&columns::F64s, &columns::F64s),
    total: &columns::F64s,
) -> (i64, f64, bool, Vec<f32>, Vec<f32>) {
    let max = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
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
    (gmin, cap, uses_sm, m, a)
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
