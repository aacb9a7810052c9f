//! The GPU rows the tallies read (one partition's `gpu` table in (node, GPU index, model, `ts`)
//! order) and the columns they need. Reads frames; computes nothing.

use polars::prelude::{col, lit};

use super::ReportError;
use crate::frames::Frames;
use crate::frames::columns::{FastMap, f64s, i64s, strs, ts_ms};
use crate::frames::shared::TableIds;

/// One GPU row, as the report reads it. The optional values are kept as `f64` with NaN for
/// none (the columns' readers never give NaN: a non-finite value is read as missing), so a row
/// is 80 bytes instead of 128: the tallies walk tens of millions of them.
#[derive(Clone, Copy)]
pub(super) struct Row {
    pub gpu: usize,
    pub ts: i64,
    pub interval: i64,
    activity: f64,
    /// GPM's tensor and DRAM activity (Hopper and later).
    tensor: f64,
    dram: f64,
    mem: f64,
    total: f64,
    energy_j: f64,
    pub sm: bool,
    /// Status `lost` or `error`: the GPU was there but did not report values.
    pub lost: bool,
    /// Held by a pod or job by allocation (`holders` ≥ 1); `None` when unknown.
    pub held: Option<bool>,
}

/// `None` as NaN.
fn put(x: Option<f64>) -> f64 {
    x.unwrap_or(f64::NAN)
}

/// NaN as `None`.
fn get(x: f64) -> Option<f64> {
    (!x.is_nan()).then_some(x)
}

impl Row {
    /// SM activity, else the busy ratio (see [`Row::sm`]).
    pub fn activity(&self) -> Option<f64> {
        get(self.activity)
    }
    pub fn tensor(&self) -> Option<f64> {
        get(self.tensor)
    }
    pub fn dram(&self) -> Option<f64> {
        get(self.dram)
    }
    /// Memory used (max), bytes.
    pub fn mem(&self) -> Option<f64> {
        get(self.mem)
    }
    /// Memory total, bytes.
    pub fn total(&self) -> Option<f64> {
        get(self.total)
    }
    /// The energy counter's delta, else mean power × interval, J.
    pub fn energy_j(&self) -> Option<f64> {
        get(self.energy_j)
    }
}

/// One GPU's identity.
#[derive(Clone)]
pub(super) struct Gpu {
    pub node: String,
    pub uuid: Option<String>,
    pub index: Option<i64>,
    pub model: String,
    pub source: String,
}

impl Gpu {
    pub fn label(&self) -> String {
        match self.index {
            Some(i) => format!("{}/GPU{i}", self.node),
            None => self.node.clone(),
        }
    }

    pub(super) fn order(&self) -> (&str, Option<i64>, &str) {
        (&self.node, self.index, &self.model)
    }
}

/// The columns of the GPU table the tallies read.
pub(crate) const GPU_COLUMNS: &[&str] = &[
    "node",
    "uuid",
    "gpu",
    "model",
    "ts",
    "interval_ms",
    "busy_mean",
    "sm_active_mean",
    "tensor_active_mean",
    "dram_active_mean",
    "memory_used_max_bytes",
    "memory_total_bytes",
    "power_mean_watts",
    "energy_delta_joules",
    "source",
    "status",
    "holders",
];

/// The columns of the process table the team tally reads.
pub(crate) const PROCESS_COLUMNS: &[&str] = &[
    "node",
    "uuid",
    "pid",
    "ts",
    "interval_ms",
    "namespace",
    "slurm_job_id",
    "memory_used_max_bytes",
];

/// Reads the GPU rows in `[from, until]`: the GPUs in (node, index, model) order and the rows
/// sorted by (GPU, `ts`). `shared`: the GPU table's ids when every row is in the range
/// ([`crate::frames::shared`]); the rows are then read unfiltered and not interned again.
pub(super) fn gpu_rows(
    frames: &Frames,
    from: i64,
    until: i64,
    shared: Option<&TableIds>,
) -> Result<(Vec<Gpu>, Vec<Row>), ReportError> {
    let lf = frames.gpu.clone().with_column(ts_ms());
    let lf = match shared {
        Some(_) => lf,
        None => lf.filter(col("ts").gt_eq(lit(from)).and(col("ts").lt_eq(lit(until)))),
    };
    let df = lf
        .select(GPU_COLUMNS.iter().map(|c| col(*c)).collect::<Vec<_>>())
        .collect()?;
    let n = df.height();
    let (status, node, uuid, model, source) = (
        strs(&df, "status")?,
        strs(&df, "node")?,
        strs(&df, "uuid")?,
        strs(&df, "model")?,
        strs(&df, "source")?,
    );
    // Rows keyed by string ids (a string is read once per distinct view, not per row).
    let sh = |c: &str| shared.and_then(|t| t.col(c, n));
    let (status_ids, node_ids, uuid_ids) = (
        status.ids_or(sh("status")),
        node.ids_or(sh("node")),
        uuid.ids_or(sh("uuid")),
    );
    // Borrowed once here, not at every row.
    let (status_ids, node_ids, uuid_ids) = (&*status_ids, &*node_ids, &*uuid_ids);
    let lost_status: Vec<bool> = status_ids
        .strings
        .iter()
        .map(|s| matches!(*s, "lost" | "error"))
        .collect();
    let (gpu, ts, interval) = (
        i64s(&df, "gpu")?,
        i64s(&df, "ts")?,
        i64s(&df, "interval_ms")?,
    );
    let (busy, sm, mem, total, power, energy) = (
        f64s(&df, "busy_mean")?,
        f64s(&df, "sm_active_mean")?,
        f64s(&df, "memory_used_max_bytes")?,
        f64s(&df, "memory_total_bytes")?,
        f64s(&df, "power_mean_watts")?,
        f64s(&df, "energy_delta_joules")?,
    );
    let (tensor, dram, holders) = (
        f64s(&df, "tensor_active_mean")?,
        f64s(&df, "dram_active_mean")?,
        i64s(&df, "holders")?,
    );
    // Each row's GPU, numbered in order of first appearance. A GPU is almost always known by
    // its uuid alone: a table by uuid id answers most rows, the map the rest.
    type IdKey = (Option<u32>, Option<u32>, Option<i64>);
    let mut ids: FastMap<IdKey, usize> = FastMap::default();
    /// A uuid's last GPU: its node id, index and number.
    type Known = Option<(Option<u32>, Option<i64>, usize)>;
    let mut by_uuid: Vec<Known> = vec![None; uuid_ids.strings.len()];
    let mut gpus = Vec::new();
    let mut gpu_of: Vec<u32> = Vec::with_capacity(n);
    for i in 0..n {
        let (node_id, uuid_id, index) = (node_ids.at(i), uuid_ids.at(i), gpu.get(i));
        let known = uuid_id
            .and_then(|u| by_uuid[u as usize])
            .filter(|&(n, g, _)| n == node_id && g == index)
            .map(|(_, _, g)| g);
        let g = match known {
            Some(g) => g,
            None => {
                let g = *ids.entry((node_id, uuid_id, index)).or_insert_with(|| {
                    gpus.push(Gpu {
                        node: node_ids.get(i).unwrap_or("?").to_string(),
                        uuid: uuid_ids.get(i).map(str::to_string),
                        index,
                        model: model.get(i).unwrap_or("unknown").to_string(),
                        source: source.get(i).unwrap_or("").to_string(),
                    });
                    gpus.len() - 1
                });
                if let Some(u) = uuid_id {
                    by_uuid[u as usize] = Some((node_id, index, g));
                }
                g
            }
        };
        gpu_of.push(g as u32);
    }
    // Stable GPU order: node, index.
    let mut order: Vec<usize> = (0..gpus.len()).collect();
    order.sort_by(|&a, &b| gpus[a].order().cmp(&gpus[b].order()));
    let mut rank = vec![0usize; gpus.len()];
    for (r, &g) in order.iter().enumerate() {
        rank[g] = r;
    }
    let gpus: Vec<Gpu> = order.iter().map(|&g| gpus[g].clone()).collect();
    // Sorted by (GPU, ts), stably: the frame's rows bucketed by GPU in frame order (a counting
    // sort), each row built once in its place, then each bucket sorted by ts unless it already
    // is (a node's files are in time order).
    let mut counts = vec![0usize; gpus.len() + 1];
    for &g in &gpu_of {
        counts[rank[g as usize] + 1] += 1;
    }
    for g in 1..counts.len() {
        counts[g] += counts[g - 1];
    }
    let row = |i: usize| {
        let interval = interval.get(i).unwrap_or(0).max(0);
        let (activity, is_sm) = match (sm.get(i), busy.get(i)) {
            (Some(s), _) => (Some(s), true),
            (None, Some(b)) => (Some(b), false),
            _ => (None, false),
        };
        let energy_j = energy
            .get(i)
            .or_else(|| power.get(i).map(|w| w * interval as f64 / 1000.0));
        Row {
            gpu: rank[gpu_of[i] as usize],
            ts: ts.get(i).unwrap_or(0),
            interval,
            activity: put(activity),
            sm: is_sm,
            tensor: put(tensor.get(i)),
            dram: put(dram.get(i)),
            mem: put(mem.get(i)),
            total: put(total.get(i)),
            energy_j: put(energy_j),
            lost: status_ids.at(i).is_some_and(|s| lost_status[s as usize]),
            held: holders.get(i).map(|h| h > 0),
        }
    };
    // The frame's rows in (GPU, ts) order, as row numbers (a counting sort by GPU, stable,
    // then each GPU's rows sorted by ts unless they already are: a node's files are in time
    // order); each row is then built once, in that order (no placeholder rows written first).
    let mut order: Vec<u32> = vec![0; n];
    let mut at = counts.clone();
    for (i, &g) in gpu_of.iter().enumerate() {
        let r = rank[g as usize];
        order[at[r]] = i as u32;
        at[r] += 1;
    }
    let ts_of = |i: u32| ts.get(i as usize).unwrap_or(0);
    for w in counts.windows(2) {
        let bucket = &mut order[w[0]..w[1]];
        if !bucket.windows(2).all(|p| ts_of(p[0]) <= ts_of(p[1])) {
            bucket.sort_by_key(|&i| ts_of(i));
        }
    }
    let rows: Vec<Row> = order.iter().map(|&i| row(i as usize)).collect();
    Ok((gpus, rows))
}

// ---- exact quantiles over partitions --------------------------------------------------------
