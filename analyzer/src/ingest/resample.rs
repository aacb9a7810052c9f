//! Observations → canonical rows at each entity's own sampling period: the common back end of the
//! sources that do not come in rows already (CSV, Prometheus).
//!
//! A source hands over [`Observations`]: per observation its entity, time, the raw samples it
//! holds, and values for canonical columns with their aggregation; per entity its identity
//! columns. [`resample`] sorts them by entity and time (polars), finds each entity's sampling
//! period and rows with `period` (in Rust: rolling estimates over sorted timestamps), then
//! aggregates every row with polars expressions — mean weighted by samples, max, or sum (null,
//! never 0, when nothing fed the cell) — and builds the table with the history schema (`ts` =
//! row end, `interval_ms` = row length, `samples` = raw samples in the row).
//!
//! It also says what it found ([`Sampling`]): entities per row length, series that changed period,
//! and, for an explicit `--interval` finer than the data, how many of its steps would have held
//! no sample. It does not read files or servers.

use std::collections::BTreeMap;

use crate::frames::schema::{Polars as _, TableSchema as _};
use polars::prelude::*;
use serde::Serialize;

use super::IngestError;
use super::period::{self, Segment};
use crate::frames::schema::{ColType, Table};

mod rows;

use rows::{Out, Resampler, Src, SrcView};

/// How a canonical column aggregates the observations of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agg {
    /// Mean weighted by the samples each observation holds.
    Mean,
    Max,
    Sum,
}

/// One table's observations from one source.
pub struct Observations {
    pub table: Table,
    /// Columns `__eid` (UInt32: index into `labels`), `ts` (Int64 ms), `__n` (UInt32: raw samples
    /// the observation holds, ≥ 1), and whatever columns `values` read.
    pub df: DataFrame,
    /// The canonical value columns and where their values are.
    pub values: Values,
    /// Per entity: its identity and attribute columns (canonical name → value as text).
    pub labels: Vec<Vec<(&'static str, String)>>,
    /// Per entity: a name for messages.
    pub names: Vec<String>,
}

/// Where an [`Observations`] frame keeps its values.
pub enum Values {
    /// One Float64 column per canonical value column, named after it (null: no value).
    Wide(Vec<(&'static str, Agg)>),
    /// Long: the metric id in `__m` (UInt32) and its value in `__v` (Float64); per canonical
    /// column, its aggregation and the metric ids it takes.
    Long(Vec<(&'static str, Agg, Vec<u32>)>),
}

impl Values {
    fn columns(&self) -> Vec<(&'static str, Agg)> {
        match self {
            Values::Wide(v) => v.clone(),
            Values::Long(v) => v.iter().map(|(c, a, _)| (*c, *a)).collect(),
        }
    }
}

/// What resampling found out about a source's sampling.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Sampling {
    /// Entities (segments of one period) per row length, ms.
    pub rows: BTreeMap<i64, u64>,
    /// Median estimated sampling period over the segments, ms.
    pub median_period_ms: Option<f64>,
    /// Series that changed period: "entity: 15 s → 60 s at 2026-11-02T12:00:00.000Z".
    pub changes: Vec<String>,
    /// With an explicit `--interval` finer than the data: its steps that would hold no sample,
    /// and all its steps, over the entities whose data is coarser.
    pub finer_request: Option<(u64, u64)>,
    /// What `rows` counts when not entities (history: node folders).
    #[serde(skip)]
    pub counted: &'static str,
    /// Prometheus: where the activity and memory maxima came from, the advisor's recorded series
    /// or the raw ones (docs/recording-rules.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxima: Option<String>,
    /// The estimated periods behind `median_period_ms`, sorted (so that partitions of one
    /// table can pool them); not serialized.
    #[serde(skip)]
    pub periods: Vec<f64>,
}

impl Sampling {
    /// Adds another source's (or table's) findings.
    pub fn merge(&mut self, o: Sampling) {
        for (k, v) in o.rows {
            *self.rows.entry(k).or_default() += v;
        }
        self.median_period_ms = match (self.median_period_ms, o.median_period_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.changes.extend(o.changes);
        if self.counted.is_empty() {
            self.counted = o.counted;
        }
        if self.maxima.is_none() {
            self.maxima = o.maxima;
        }
        self.finer_request = match (self.finer_request, o.finer_request) {
            (Some(a), Some(b)) => Some((a.0 + b.0, a.1 + b.1)),
            (a, b) => a.or(b),
        };
    }

    /// One line: "60 s rows (143 entities), 15 s rows (8 entities)".
    pub fn describe(&self) -> String {
        let mut parts: Vec<(i64, u64)> = self.rows.iter().map(|(k, v)| (*k, *v)).collect();
        parts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        parts
            .iter()
            .map(|(ms, n)| {
                let what = match (self.counted, *n == 1) {
                    ("", true) => "entity".to_string(),
                    ("", false) => "entities".to_string(),
                    (c, true) => c.to_string(),
                    (c, false) => format!("{c}s"),
                };
                format!("{} rows ({n} {what})", period::fmt_period(*ms as f64))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// How to choose rows.
#[derive(Debug, Clone, Copy)]
pub struct RowSpec {
    /// The source's time grid (1 for raw timestamps; Prometheus' query step).
    pub grid_ms: i64,
    /// An explicit `--interval` (rows never finer than it), or `None` for `auto`.
    pub requested_ms: Option<i64>,
    /// Period assumed for an entity with a single sample.
    pub fallback_ms: f64,
}

/// Rows of one table from `obs` (the history file schema, `ts` as int64 ms), and what was found
/// about the sampling.
pub fn resample(obs: Observations, spec: RowSpec) -> Result<(DataFrame, Sampling), IngestError> {
    let Observations {
        table,
        df,
        values,
        labels,
        names,
    } = obs;
    let aggs: Vec<(&'static str, Agg)> = values.columns();
    let mut sampling = Sampling::default();
    if df.height() == 0 {
        return Ok((DataFrame::empty_with_schema(&table.file_schema()), sampling));
    }
    let watch = crate::timing::Stopwatch::start("resample");
    let df = sorted_by_entity(df)?;
    let eid_ca = df.column("__eid")?.u32()?.rechunk().into_owned();
    let ts_ca = df.column("ts")?.i64()?.rechunk().into_owned();
    let n_ca = df.column("__n")?.u32()?.rechunk().into_owned();
    let (eid, ts, n) = (
        eid_ca.cont_slice()?,
        ts_ca.cont_slice()?,
        n_ca.cont_slice()?,
    );
    let len = df.height();
    watch.lap("sorted");

    // The values: wide (one column each) or long (metric id and value; NaN = none).
    let src = Src::read(&df, &values)?;
    // At most one row per observation, about one when rows are not asked coarser than the
    // data: reserved then, not grown.
    let cap = if spec.requested_ms.is_some_and(|r| r > spec.grid_ms) {
        0
    } else {
        len
    };
    let mut out = Out::with_capacity(cap, aggs.len());
    Resampler {
        spec,
        aggs: &aggs,
        names: &names,
        eid,
        ts,
        n,
        values: SrcView::new(&src),
        sampling: &mut sampling,
        dts: Vec::new(),
        dcounts: Vec::new(),
    }
    .run(&mut out);
    let rows = out.into_frame(&aggs)?;
    watch.lap("rows");
    let out = build(table, &rows, &aggs, &labels)?;
    watch.lap("built");
    Ok((out, sampling))
}

/// `df` sorted by entity and time: most files come so (one entity after another, or a time
/// series per entity), and then nothing is copied.
fn sorted_by_entity(df: DataFrame) -> Result<DataFrame, IngestError> {
    let sorted = {
        let (e, t) = (df.column("__eid")?.u32()?, df.column("ts")?.i64()?);
        let mut prev: Option<(u32, i64)> = None;
        e.iter().zip(t.iter()).all(|(e, t)| {
            let k = (e.unwrap_or(0), t.unwrap_or(i64::MIN));
            let ok = prev.is_none_or(|p| p <= k);
            prev = Some(k);
            ok
        })
    };
    Ok(if sorted {
        df
    } else {
        df.sort(
            ["__eid", "ts"],
            SortMultipleOptions::default().with_multithreaded(true),
        )?
    })
}

/// Records one entity's segments in `sampling`.
fn note_segments(
    segs: &[Segment],
    ts: &[i64],
    spec: RowSpec,
    name: &str,
    sampling: &mut Sampling,
    periods: &mut Vec<f64>,
) {
    for s in segs {
        *sampling.rows.entry(s.bucket_ms).or_default() += 1;
        if let Some(p) = s.period_ms {
            periods.push(p);
        }
        if let Some(req) = spec.requested_ms
            && s.bucket_ms > req
            && s.period_ms.is_some()
        {
            let (empty, total) = period::empty_share(&ts[s.start..s.end], req);
            let acc = sampling.finer_request.get_or_insert((0, 0));
            acc.0 += empty;
            acc.1 += total;
        }
    }
    for w in segs.windows(2) {
        sampling.changes.push(format!(
            "{name}: every {} → every {} at {}",
            period::fmt_period(w[0].period_ms.unwrap_or(w[0].bucket_ms as f64)),
            period::fmt_period(w[1].period_ms.unwrap_or(w[1].bucket_ms as f64)),
            super::fmt_ms(ts[w[1].start])
        ));
    }
}

/// Status names by rank (Prometheus' `tessera_gpu_status`): the worst wins.
pub const STATUS_RANKS: [&str; 5] = ["", "ok", "degraded", "error", "lost"];

/// The table in the history file schema from the aggregated rows.
fn build(
    table: Table,
    rows: &DataFrame,
    aggs: &[(&'static str, Agg)],
    labels: &[Vec<(&'static str, String)>],
) -> Result<DataFrame, IngestError> {
    let h = rows.height();
    let eid_ca = rows.column("__eid")?.u32()?.clone();
    let idx: IdxCa = eid_ca.rechunk().into_owned();
    let mut columns = Vec::new();
    for c in table.columns() {
        let name: PlSmallStr = c.name.into();
        let col = match c.name {
            "ts" => rows
                .column("__end")?
                .cast(&DataType::Int64)?
                .with_name(name),
            "interval_ms" => rows.column("__iv")?.cast(&DataType::Int64)?.with_name(name),
            "samples" => rows
                .column("__samples")?
                .cast(&DataType::UInt32)?
                .with_name(name),
            _ if aggs.iter().any(|(a, _)| *a == c.name) => {
                let v = rows.column(c.name)?.cast(&DataType::Float64)?;
                let v = v.f64()?;
                if c.name == "status" {
                    Column::new(
                        name,
                        v.iter()
                            .map(|x| {
                                x.and_then(|r| STATUS_RANKS.get(r.round() as usize))
                                    .filter(|s| !s.is_empty())
                                    .map(|s| s.to_string())
                            })
                            .collect::<Vec<_>>(),
                    )
                } else {
                    from_f64(name, c.ty, v)
                }
            }
            _ => {
                // Identity/attribute column: per entity, gathered by row.
                let per_entity: Vec<Option<&str>> = labels
                    .iter()
                    .map(|l| {
                        l.iter()
                            .find(|(k, _)| *k == c.name)
                            .map(|(_, v)| v.as_str())
                    })
                    .collect();
                if per_entity.iter().all(Option::is_none) {
                    Column::full_null(name, h, &c.ty.polars())
                } else {
                    // Typed once per entity, then gathered by row.
                    let typed = from_text(name, c.ty, per_entity).take_materialized_series();
                    typed.take(&idx)?.into_column()
                }
            }
        };
        columns.push(col);
    }
    Ok(DataFrame::new(h, columns)?)
}

/// A Float64 column as the canonical type (integers rounded, unsigned clamped at 0).
fn from_f64(name: PlSmallStr, ty: ColType, v: &Float64Chunked) -> Column {
    match ty {
        ColType::Float64 => Column::new(name, v.iter().collect::<Vec<_>>()),
        ColType::Int64 => Column::new(
            name,
            v.iter()
                .map(|x| x.map(|x| x.round() as i64))
                .collect::<Vec<_>>(),
        ),
        ColType::UInt32 => Column::new(
            name,
            v.iter()
                .map(|x| x.map(|x| x.round().clamp(0.0, u32::MAX as f64) as u32))
                .collect::<Vec<_>>(),
        ),
        ColType::UInt64 => Column::new(
            name,
            v.iter()
                .map(|x| x.map(|x| x.round().max(0.0) as u64))
                .collect::<Vec<_>>(),
        ),
        ColType::Bool => Column::new(
            name,
            v.iter().map(|x| x.map(|x| x != 0.0)).collect::<Vec<_>>(),
        ),
        ColType::Utf8 => Column::new(
            name,
            v.iter()
                .map(|x| x.map(|x| x.to_string()))
                .collect::<Vec<_>>(),
        ),
    }
}

/// A text column as the canonical type (labels were checked by the source).
fn from_text(name: PlSmallStr, ty: ColType, v: Vec<Option<&str>>) -> Column {
    match ty {
        ColType::Utf8 => Column::new(name, v),
        ColType::Bool => Column::new(
            name,
            v.iter()
                .map(|s| s.map(|s| s == "true" || s == "1"))
                .collect::<Vec<_>>(),
        ),
        ColType::Float64 => Column::new(
            name,
            v.iter()
                .map(|s| s.and_then(|s| s.parse::<f64>().ok()))
                .collect::<Vec<_>>(),
        ),
        ColType::Int64 => Column::new(
            name,
            v.iter()
                .map(|s| s.and_then(|s| s.parse::<i64>().ok()))
                .collect::<Vec<_>>(),
        ),
        ColType::UInt32 => Column::new(
            name,
            v.iter()
                .map(|s| s.and_then(|s| s.parse::<u32>().ok()))
                .collect::<Vec<_>>(),
        ),
        ColType::UInt64 => Column::new(
            name,
            v.iter()
                .map(|s| s.and_then(|s| s.parse::<u64>().ok()))
                .collect::<Vec<_>>(),
        ),
    }
}

/// Builds an [`Observations`] frame from per-observation vectors.
/// A Float64 column being built: values and a validity bitmap, made into a column at once
/// (not value by value through a builder).
#[derive(Default)]
pub struct OptCol {
    vals: Vec<f64>,
    valid: polars_arrow::bitmap::MutableBitmap,
}

impl OptCol {
    pub fn with_capacity(n: usize) -> Self {
        OptCol {
            vals: Vec::with_capacity(n),
            valid: polars_arrow::bitmap::MutableBitmap::with_capacity(n),
        }
    }

    pub fn push(&mut self, v: Option<f64>) {
        self.vals.push(v.unwrap_or(0.0));
        self.valid.push(v.is_some());
    }

    pub fn into_column(self, name: &str) -> Column {
        Float64Chunked::from_vec_validity(name.into(), self.vals, Some(self.valid.into()))
            .into_column()
    }
}

impl From<Vec<Option<f64>>> for OptCol {
    fn from(v: Vec<Option<f64>>) -> Self {
        let mut c = OptCol::with_capacity(v.len());
        for x in v {
            c.push(x);
        }
        c
    }
}

pub fn frame(
    eid: Vec<u32>,
    ts: Vec<i64>,
    n: Vec<u32>,
    values: Vec<(&'static str, impl Into<OptCol>)>,
) -> Result<DataFrame, IngestError> {
    let h = ts.len();
    let mut cols = vec![
        Column::new("__eid".into(), eid),
        Column::new("ts".into(), ts),
        Column::new("__n".into(), n),
    ];
    for (name, v) in values {
        cols.push(v.into().into_column(name));
    }
    Ok(DataFrame::new(h, cols)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_at_each_entitys_own_period_with_weighted_means() {
        // Entity 0 every 60 s, entity 1 every 15 s, both for 30 min; entity 1's points hold 2
        // samples each.
        let (mut eid, mut ts, mut n, mut v, mut m) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 1..=30i64 {
            eid.push(0);
            ts.push(i * 60_000);
            n.push(1);
            v.push(Some(0.5));
            m.push(Some(i as f64));
        }
        for i in 1..=120i64 {
            eid.push(1);
            ts.push(i * 15_000);
            n.push(2);
            v.push(Some(if i % 2 == 0 { 1.0 } else { 0.0 }));
            m.push(None);
        }
        let df = frame(
            eid,
            ts,
            n,
            vec![("busy_mean", v.clone()), ("memory_used_max_bytes", m)],
        )
        .unwrap();
        let obs = Observations {
            table: Table::Gpu,
            df,
            values: Values::Wide(vec![
                ("busy_mean", Agg::Mean),
                ("memory_used_max_bytes", Agg::Max),
            ]),
            labels: vec![
                vec![("uuid", "GPU-a".into()), ("gpu", "0".into())],
                vec![("uuid", "GPU-b".into())],
            ],
            names: vec!["a".into(), "b".into()],
        };
        let (out, s) = resample(
            obs,
            RowSpec {
                grid_ms: 15_000,
                requested_ms: None,
                fallback_ms: 60_000.0,
            },
        )
        .unwrap();
        assert_eq!(s.rows, BTreeMap::from([(15_000, 1), (60_000, 1)]));
        assert_eq!(out.height(), 150);
        let a = out
            .clone()
            .lazy()
            .filter(col("uuid").eq(lit("GPU-a")))
            .collect()
            .unwrap();
        assert_eq!(a.height(), 30);
        let iv = a.column("interval_ms").unwrap().i64().unwrap();
        assert!(iv.into_no_null_iter().all(|x| x == 60_000));
        assert_eq!(a.column("gpu").unwrap().u32().unwrap().get(0), Some(0));
        assert_eq!(
            a.column("memory_used_max_bytes")
                .unwrap()
                .u64()
                .unwrap()
                .get(29),
            Some(30)
        );
        // An explicit 60 s interval: entity 1's 15 s points become 60 s rows holding 8 samples,
        // mean of 0/1 alternating = 0.5; entity 0 has no memory there: null, not 0.
        let obs = Observations {
            table: Table::Gpu,
            df: frame(
                vec![1; 120],
                (1..=120).map(|i| i * 15_000).collect(),
                vec![2; 120],
                vec![("busy_mean", v[30..].to_vec())],
            )
            .unwrap(),
            values: Values::Wide(vec![
                ("busy_mean", Agg::Mean),
                ("energy_delta_joules", Agg::Sum),
            ]),
            labels: vec![vec![], vec![("uuid", "GPU-b".into())]],
            names: vec!["a".into(), "b".into()],
        };
        let mut obs = obs;
        obs.df
            .with_column(Column::new(
                "energy_delta_joules".into(),
                vec![None::<f64>; 120],
            ))
            .unwrap();
        let (out, s) = resample(
            obs,
            RowSpec {
                grid_ms: 1,
                requested_ms: Some(60_000),
                fallback_ms: 60_000.0,
            },
        )
        .unwrap();
        assert_eq!(s.rows, BTreeMap::from([(60_000, 1)]));
        assert_eq!(out.height(), 30);
        let samples = out.column("samples").unwrap().u32().unwrap();
        assert!(samples.into_no_null_iter().all(|x| x == 8));
        let busy = out.column("busy_mean").unwrap().f64().unwrap();
        assert!(busy.into_no_null_iter().all(|x| (x - 0.5).abs() < 1e-12));
        assert_eq!(out.column("energy_delta_joules").unwrap().null_count(), 30);
    }

    #[test]
    fn a_finer_request_is_measured() {
        let n = 60;
        let obs = Observations {
            table: Table::Gpu,
            df: frame(
                vec![0; n],
                (1..=n as i64).map(|i| i * 60_000).collect(),
                vec![1; n],
                vec![("busy_mean", vec![Some(0.1); n])],
            )
            .unwrap(),
            values: Values::Wide(vec![("busy_mean", Agg::Mean)]),
            labels: vec![vec![("uuid", "GPU-a".into())]],
            names: vec!["a".into()],
        };
        let (out, s) = resample(
            obs,
            RowSpec {
                grid_ms: 1,
                requested_ms: Some(10_000),
                fallback_ms: 60_000.0,
            },
        )
        .unwrap();
        assert_eq!(out.height(), 60);
        let (empty, total) = s.finer_request.unwrap();
        assert_eq!(total, 355);
        assert!((empty as f64 / total as f64 - 0.83).abs() < 0.01);
    }
}
