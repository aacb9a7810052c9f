//! Cells into rows for the `prometheus:` source: each series' labels into a canonical entity
//! ([`identity`], its node by `discovery`'s rule), its points into that entity's per-row cell
//! arrays ([`collect`]: scaled, range-checked, refused values counted), the entities into
//! observations per table ([`observations`]) for resampling, and a partition's resampled rows
//! kept in memory or spilled to Parquet ([`settle`]).
//!
//! It sends no request and knows no PromQL beyond the column a query feeds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use polars::prelude::*;

use super::catalogue::{Family, Query};
use super::discovery::node_name;
use crate::frames::schema::{ColType, Table};
use crate::ingest::resample::{self, Agg, Observations, Sampling, Values};
use crate::ingest::{IngestError, Partitions, history, value_range};

/// A canonical entity: its table and label-derived columns.
pub(super) type Key = (Table, Vec<(&'static str, String)>);

#[derive(Default)]
pub(super) struct Entity {
    /// Row times, ascending.
    ts: Vec<i64>,
    /// Per row, the value of each of the table's [`cells`] (row-major, `width` per row), NaN
    /// where none (values are never NaN: refused).
    cells: Vec<f64>,
    width: usize,
    /// Per ts: the worst status seen ([`status_rank`]) and its position in
    /// [`resample::STATUS_RANKS`] (none for a state it does not know).
    status: BTreeMap<i64, (u8, Option<u8>)>,
}

impl Entity {
    fn new(width: usize) -> Self {
        Entity {
            width,
            ..Entity::default()
        }
    }

    /// The row at `i`.
    fn row(&self, i: usize) -> &[f64] {
        &self.cells[i * self.width..(i + 1) * self.width]
    }

    /// Puts one column's points (cell `ci`) into the rows, adding rows for new times; a cell
    /// that has a value keeps it (the first query for a column wins). Points in time order are
    /// merged in one pass; others are sorted first.
    fn put(&mut self, ci: usize, mut points: Vec<(i64, f64)>) {
        if !points.is_sorted_by_key(|p| p.0) {
            points.sort_by_key(|p| p.0);
        }
        points.dedup_by_key(|p| p.0);
        let w = self.width;
        let mut missing = 0usize;
        let mut i = 0;
        for &(t, _) in &points {
            while i < self.ts.len() && self.ts[i] < t {
                i += 1;
            }
            if i == self.ts.len() || self.ts[i] != t {
                missing += 1;
            }
        }
        if missing > 0 {
            let n = self.ts.len() + missing;
            let mut ts = Vec::with_capacity(n);
            let mut cells = Vec::with_capacity(n * w);
            let mut i = 0;
            for &(t, _) in &points {
                while i < self.ts.len() && self.ts[i] < t {
                    ts.push(self.ts[i]);
                    cells.extend_from_slice(&self.cells[i * w..(i + 1) * w]);
                    i += 1;
                }
                if i < self.ts.len() && self.ts[i] == t {
                    continue;
                }
                ts.push(t);
                cells.extend(std::iter::repeat_n(f64::NAN, w));
            }
            ts.extend_from_slice(&self.ts[i..]);
            cells.extend_from_slice(&self.cells[i * w..]);
            self.ts = ts;
            self.cells = cells;
        }
        let mut i = 0;
        for (t, v) in points {
            while self.ts[i] < t {
                i += 1;
            }
            let c = &mut self.cells[i * w + ci];
            if c.is_nan() {
                *c = v;
            }
        }
    }
}

/// The numeric cells of a table's rows, in column order: its columns that aggregate
/// ([`agg_of`]) but `status` (kept as text), and `samples`.
fn cells(table: Table) -> &'static [&'static str] {
    static CELLS: std::sync::OnceLock<[Vec<&'static str>; 3]> = std::sync::OnceLock::new();
    &CELLS.get_or_init(|| {
        Table::ALL.map(|t| {
            t.columns()
                .iter()
                .copied()
                .map(|c| c.name)
                .filter(|n| *n == "samples" || (*n != "status" && agg_of(n).is_some()))
                .collect()
        })
    })[table as usize]
}

/// Index of `column` in [`cells`] of `table`.
fn cell(table: Table, column: &str) -> Option<usize> {
    cells(table).iter().position(|c| *c == column)
}

/// Label-derived identity of a series in `table`, from the family's labels. `None` when the
/// series lacks what identifies it (e.g. a dcgm GPU series that is a MIG instance).
pub(super) fn identity(
    table: Table,
    family: Family,
    m: &BTreeMap<String, String>,
) -> Option<Vec<(&'static str, String)>> {
    let get = |names: &[&str]| -> Option<String> {
        names
            .iter()
            .filter_map(|n| m.get(*n))
            .find(|v| !v.is_empty())
            .cloned()
    };
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut put = |col: &'static str, v: Option<String>| {
        if let Some(v) = v {
            out.push((col, v));
        }
    };
    put("node", node_name(m));
    match family {
        Family::Tessera => {
            put("gpu", get(&["gpu"]));
            put("uuid", get(&["uuid"]));
            match table {
                Table::Gpu => {}
                Table::Mig => {
                    for c in ["gpu_instance", "compute_instance", "profile"] {
                        put(c, get(&[c]));
                    }
                }
                Table::Process => {
                    for c in [
                        "pid",
                        "process",
                        "gpu_instance",
                        "compute_instance",
                        "pod_uid",
                        "container_id",
                        "slurm_job_id",
                        "namespace",
                        "pod",
                    ] {
                        put(c, get(&[c]));
                    }
                }
            }
        }
        Family::Dcgm => {
            let mig = get(&["GPU_I_ID"]);
            put("gpu", get(&["gpu"]));
            put("uuid", get(&["UUID"]));
            match table {
                Table::Gpu if mig.is_some() => return None,
                Table::Gpu => {}
                Table::Mig => {
                    mig.as_ref()?;
                    put("gpu_instance", mig);
                    put("profile", get(&["GPU_I_PROFILE"]));
                }
                Table::Process => {
                    // Only series of a GPU (or MIG instance) given to a pod.
                    let pod = get(&["pod", "pod_name"])?;
                    put("gpu_instance", mig);
                    put("namespace", get(&["namespace", "pod_namespace"]));
                    put("pod", Some(pod));
                }
            }
        }
        Family::NvidiaSmi => {
            put("gpu", get(&["gpu"]));
            put("uuid", get(&["uuid"]).map(|u| canonical_uuid(&u)));
            match table {
                Table::Gpu => {}
                // Per GPU instance; compute instance and profile come from `nvidia_smi_mig_info`.
                Table::Mig => put("gpu_instance", Some(get(&["gpu_instance_id"])?)),
                Table::Process => {
                    put("pid", Some(get(&["pid"])?));
                    put("process", get(&["process_name"]));
                    put("gpu_instance", get(&["gpu_instance_id"]));
                    put("compute_instance", get(&["compute_instance_id"]));
                }
            }
        }
    }
    Some(out)
}

/// nvidia_gpu_exporter writes GPU UUIDs lower-cased without NVML's `GPU-` prefix; restores it so
/// they join with other sources (the hex digits are lower case in NVML's form too).
fn canonical_uuid(u: &str) -> String {
    let lower = u.to_ascii_lowercase();
    if lower.starts_with("gpu-") || lower.starts_with("mig-") {
        format!("{}{}", &u[..4].to_ascii_uppercase(), &u[4..])
    } else {
        format!("GPU-{u}")
    }
}

/// Worse status first wins: `ok` < `degraded` < `error` < `lost`.
fn status_rank(s: &str) -> u8 {
    match s {
        "ok" => 1,
        "degraded" => 2,
        "error" => 3,
        "lost" => 4,
        _ => 0,
    }
}

/// The attributes a series carries as labels, into `attrs`: the model named on data series
/// (dcgm-exporter's `modelName`; older nvidia_gpu_exporter versions' `name`), and the labels of
/// the info series (`model`, `mig_info`). True for an info series: its labels are all it gives.
fn label_attrs(
    query: &Query,
    m: &BTreeMap<String, String>,
    key: &Key,
    attrs: &mut BTreeMap<Key, BTreeMap<&'static str, String>>,
) -> bool {
    // Attributes carried as labels on data series (dcgm-exporter's `modelName`; older
    // nvidia_gpu_exporter versions put `name` on every series).
    if let Some(model) = ["modelName", "name"]
        .iter()
        .find_map(|l| m.get(*l).filter(|v| !v.is_empty()))
        && key.0 == Table::Gpu
    {
        attrs
            .entry(key.clone())
            .or_default()
            .insert("model", model.clone());
    }
    match query.column {
        "model" => {
            let a = attrs.entry(key.clone()).or_default();
            if let Some(name) = m.get("name").filter(|v| !v.is_empty()) {
                a.insert("model", name.clone());
            }
            // nvidia_gpu_exporter has the GPU index only as a label of its info series.
            if let Some(index) = m.get("index").filter(|v| !v.is_empty()) {
                a.insert("gpu", index.clone());
            }
            return true;
        }
        "mig_info" => {
            let a = attrs.entry(key.clone()).or_default();
            for c in [
                "profile_id",
                "placement_start",
                "placement_size",
                "mig_uuid",
            ] {
                if let Some(v) = m.get(c).filter(|v| !v.is_empty()) {
                    a.insert(c, v.clone());
                }
            }
            // nvidia_gpu_exporter: the profile and the (first) compute instance of the GPU
            // instance (tessera has them in the identity already, which wins).
            for (col, label) in [
                ("profile", "profile"),
                ("compute_instance", "compute_instance_id"),
            ] {
                if let Some(v) = m.get(label).filter(|v| !v.is_empty()) {
                    a.entry(col).or_insert_with(|| v.clone());
                }
            }
            return true;
        }
        _ => {}
    }
    false
}

/// Adds one series' points into its entity (or label-derived attributes for info/status).
/// The points of one answer's series (its labels `m`; time in ms and value, or the text that
/// is not a number) into the entity `key`'s cells for `query`'s column.
#[allow(clippy::too_many_arguments)]
pub(super) fn collect<'v>(
    query: &Query,
    promql: &str,
    m: &BTreeMap<String, String>,
    values: impl Iterator<Item = (i64, Result<f64, &'v str>)>,
    key: &Key,
    entities: &mut BTreeMap<Key, Entity>,
    attrs: &mut BTreeMap<Key, BTreeMap<&'static str, String>>,
    refused: &mut Refused,
) {
    if label_attrs(query, m, key, attrs) {
        return;
    }
    let ent = entities
        .entry(key.clone())
        .or_insert_with(|| Entity::new(cells(key.0).len()));
    let ci = cell(key.0, query.column);
    let mut points = Vec::with_capacity(values.size_hint().0);
    let range = value_range(query.column);
    // A status series' state (the series' label, the same for all its points).
    let state = {
        let s = m.get("state").map(String::as_str).unwrap_or_default();
        let pos = resample::STATUS_RANKS.iter().position(|r| *r == s);
        (status_rank(s), pos.map(|p| p as u8))
    };
    for (ts, x) in values {
        let x = match x {
            Ok(x) => x,
            Err(v) => {
                refused.add("not a number", promql, v);
                continue;
            }
        };
        if query.column == "status" {
            if x >= 1.0 {
                let (rank, pos) = state;
                ent.status
                    .entry(ts)
                    .and_modify(|cur| {
                        if rank > cur.0 {
                            *cur = (rank, pos);
                        }
                    })
                    .or_insert((rank, pos));
            }
            continue;
        }
        if x.is_nan() {
            refused.add("NaN", promql, "NaN");
            continue;
        }
        let v = if query.scale < 0.0 {
            x / -query.scale
        } else {
            x * query.scale
        };
        if let Err(why) = range.check(v) {
            refused.add(why, promql, &x.to_string());
            continue;
        }
        points.push((ts, v));
    }
    if let Some(ci) = ci
        && !points.is_empty()
    {
        ent.put(ci, points);
    }
}

/// Values refused from the server's answers, by reason: how many, and the first query and value.
#[derive(Default)]
pub(super) struct Refused(pub(super) BTreeMap<&'static str, (u64, String)>);

impl Refused {
    pub(super) fn add(&mut self, why: &'static str, promql: &str, value: &str) {
        let e = self.0.entry(why).or_insert_with(|| {
            let v: String = value.chars().take(40).collect();
            (0, format!("{v} from {promql:?}"))
        });
        e.0 += 1;
    }
}

/// Whether a series' identity labels fit their columns' types (a `gpu` or `pid` label must be an
/// integer): the first that does not, as "label=value".
pub(super) fn bad_label(key: &Key) -> Option<String> {
    let table = key.0;
    key.1.iter().find_map(|(name, v)| {
        let ty = table.column(name)?.ty;
        let ok = match ty {
            ColType::UInt32 => v.parse::<u32>().is_ok(),
            ColType::UInt64 => v.parse::<u64>().is_ok(),
            ColType::Int64 => v.parse::<i64>().is_ok(),
            ColType::Float64 => v.parse::<f64>().is_ok_and(f64::is_finite),
            ColType::Bool | ColType::Utf8 => true,
        };
        (!ok).then(|| format!("{name}={v:?}"))
    })
}

/// An entity's labels: its identity's, then each attribute its identity does not have.
fn entity_labels(
    key: &Key,
    attrs: Option<&BTreeMap<&'static str, String>>,
) -> Vec<(&'static str, String)> {
    let mut l: Vec<(&'static str, String)> = key.1.clone();
    if let Some(a) = attrs {
        for (k, v) in a {
            if !l.iter().any(|(n, _)| n == k) {
                l.push((k, v.clone()));
            }
        }
    }
    l
}

/// An entity's name in messages: `SPEC: table label=value,…`.
fn entity_name(spec: &str, table: Table, key: &Key) -> String {
    format!(
        "{spec}: {} {}",
        table.name(),
        key.1
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// The observations of every table: one per entity and evaluation time that has a gauge's
/// value (not only a status, a count or a counter's increase — counters have points between the
/// gauges' samples), weighted by the raw samples the point holds (`count_over_time` of the
/// table's memory metric; 1 where it has none).
pub(super) fn observations(
    entities: BTreeMap<Key, Entity>,
    attrs: BTreeMap<Key, BTreeMap<&'static str, String>>,
    spec: &str,
) -> Result<Vec<Observations>, IngestError> {
    let mut out = Vec::new();
    for table in Table::ALL {
        let value_cols: Vec<(&'static str, Agg)> = table
            .columns()
            .iter()
            .copied()
            .filter(|c| !matches!(c.name, "ts" | "interval_ms" | "samples"))
            .filter_map(|c| agg_of(c.name).map(|a| (c.name, a)))
            .collect();
        // Per value column: its cell (none for status).
        let value_cells: Vec<Option<usize>> =
            value_cols.iter().map(|(c, _)| cell(table, c)).collect();
        let samples_cell = cell(table, "samples");
        // Cells that make a row an observation: not the count, not a counter's increase.
        let gauge: Vec<bool> = cells(table)
            .iter()
            .map(|c| !matches!(*c, "samples" | "energy_delta_joules" | "xid_count"))
            .collect();
        let rows: usize = entities
            .iter()
            .filter(|(k, _)| k.0 == table)
            .map(|(_, e)| e.ts.len())
            .sum();
        let (mut eid, mut ts, mut n) = (
            Vec::with_capacity(rows),
            Vec::with_capacity(rows),
            Vec::with_capacity(rows),
        );
        let mut vals: Vec<resample::OptCol> = (0..value_cols.len())
            .map(|_| resample::OptCol::with_capacity(rows))
            .collect();
        let mut labels: Vec<Vec<(&'static str, String)>> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for (key, ent) in &entities {
            if key.0 != table {
                continue;
            }
            let e = labels.len() as u32;
            let l = entity_labels(key, attrs.get(key));
            names.push(entity_name(spec, table, key));
            labels.push(l);
            for (r, t) in ent.ts.iter().enumerate() {
                let row = ent.row(r);
                let has_value = row.iter().zip(&gauge).any(|(v, g)| *g && !v.is_nan());
                if !has_value {
                    continue;
                }
                eid.push(e);
                ts.push(*t);
                let got = |ci: Option<usize>| ci.map(|i| row[i]).filter(|v| !v.is_nan());
                n.push(
                    got(samples_cell).map_or(1, |c| c.round().clamp(1.0, u32::MAX as f64) as u32),
                );
                let status = ent.status.get(t).and_then(|s| s.1);
                for (((c, _), ci), v) in value_cols.iter().zip(&value_cells).zip(vals.iter_mut()) {
                    v.push(if *c == "status" {
                        status.map(f64::from)
                    } else {
                        got(*ci)
                    });
                }
            }
        }
        if ts.is_empty() {
            continue;
        }
        let df = resample::frame(
            eid,
            ts,
            n,
            value_cols
                .iter()
                .zip(vals)
                .map(|((c, _), v)| (*c, v))
                .collect(),
        )?;
        out.push(Observations {
            table,
            df,
            values: Values::Wide(value_cols.clone()),
            labels,
            names,
        });
    }
    Ok(out)
}

/// How a canonical column of the Prometheus source aggregates when points are combined into a
/// coarser row; `None` for identity and attribute columns.
fn agg_of(column: &str) -> Option<Agg> {
    Some(match column {
        "energy_delta_joules" | "xid_count" => Agg::Sum,
        c if c.ends_with("_mean")
            || c == "power_mean_watts"
            || c.ends_with("_mean_bytes_per_second") =>
        {
            Agg::Mean
        }
        c if c.ends_with("_max")
            || c.ends_with("_max_bytes")
            || c.ends_with("_max_celsius")
            || c == "memory_total_bytes"
            || c == "mig_enabled"
            || c == "status" =>
        {
            Agg::Max
        }
        _ => return None,
    })
}

/// Rows of one partition: per table, its frame (none when empty) and what resampling found.
pub(super) type PartTables = Vec<(Table, Option<DataFrame>, Sampling)>;

/// [`PartTables`] once kept: per table, its frame (in memory, or scanning the Parquet file it
/// was spilled to) and what resampling found.
pub(super) type Settled = Vec<(Table, Option<(LazyFrame, Option<PathBuf>)>, Sampling)>;

/// Keeps a partition's rows: in memory, or written to `spill` as Parquet and scanned from there
/// (file names from `n`, unique per read).
pub(super) fn settle(
    tables: PartTables,
    spill: Option<&Path>,
    n: usize,
) -> Result<Settled, IngestError> {
    let mut out = Vec::with_capacity(tables.len());
    for (table, df, s) in tables {
        let rows = match (df, spill) {
            (None, _) => None,
            (Some(df), None) => Some((df.lazy(), None)),
            (Some(mut df), Some(dir)) => {
                let path = dir.join(format!("prometheus-{n:06}-{}.parquet", table.name()));
                let io = |e: std::io::Error| IngestError::Io {
                    path: path.clone(),
                    source: e,
                };
                let file = std::fs::File::create(&path).map_err(io)?;
                // LZ4: the file lives for one run; zstd cost more CPU than the disk it saved.
                ParquetWriter::new(file)
                    .with_compression(ParquetCompression::Lz4Raw)
                    .finish(&mut df)
                    .map_err(|e| IngestError::Parquet {
                        path: path.clone(),
                        reason: format!("writing the spilled rows: {e}"),
                    })?;
                drop(df);
                let lf = history::scan_parquet_files(None, std::slice::from_ref(&path))?;
                Some((lf, Some(path)))
            }
        };
        out.push((table, rows, s));
    }
    Ok(out)
}
/// The partitions' rows, and the sampling: each table's over every partition (their periods
/// pooled, so the median is the fleet's), then the tables together.
pub(super) fn partitions(parts: Vec<(String, Settled)>) -> (Partitions, Sampling) {
    let mut by_table: BTreeMap<Table, Sampling> = BTreeMap::new();
    let mut out = Vec::with_capacity(parts.len());
    for (key, tables) in parts {
        let mut lfs = Vec::new();
        let mut files = Vec::new();
        for (table, rows, s) in tables {
            match by_table.get_mut(&table) {
                Some(acc) => merge_table(acc, s),
                None => {
                    by_table.insert(table, s);
                }
            }
            if let Some((lf, file)) = rows {
                lfs.push((table, lf));
                files.extend(file);
            }
        }
        out.push((key, lfs, files));
    }
    let mut sampling = Sampling::default();
    for table in Table::ALL {
        if let Some(mut s) = by_table.remove(&table) {
            s.periods = Vec::new();
            sampling.merge(s);
        }
    }
    (out, sampling)
}

/// Pools a table's resampling findings over partitions: the median period is the median of
/// every partition's periods.
fn merge_table(acc: &mut Sampling, s: Sampling) {
    let mut periods = std::mem::take(&mut acc.periods);
    periods.extend(s.periods.iter().copied());
    acc.merge(s);
    if !periods.is_empty() {
        periods.sort_by(|a, b| a.total_cmp(b));
        acc.median_period_ms = Some(periods[periods.len() / 2]);
    }
    acc.periods = periods;
}
