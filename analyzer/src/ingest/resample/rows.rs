//! [`super::resample`]'s middle step: the observations, sorted by entity and time, aggregated
//! into rows one entity at a time ([`Resampler`]): each entity's distinct timestamps, their
//! period segments and rows (`period`), then its observations folded into those rows
//! ([`Acc`]: weighted mean, max or sum) and written to column vectors ([`Out`]).
//!
//! This module does not sort the observations or build the table in the history schema (that
//! is [`super::resample`] and `super::build`); it makes the intermediate rows frame
//! (`__eid`, `__end`, `__iv`, `__samples` and one column per value).

use polars::prelude::*;
use polars_arrow::bitmap::Bitmap;

use super::{Agg, OptCol, RowSpec, Sampling, Values, note_segments};
use crate::ingest::IngestError;
use crate::ingest::period;

/// The values of an observations frame: wide (one column each) or long (metric id and value;
/// NaN = none).
pub(super) enum Src {
    Wide(Vec<Float64Chunked>),
    /// Metric ids, values, and per metric id the value columns it feeds.
    Long(UInt32Chunked, Float64Chunked, Vec<Vec<usize>>),
}

impl Src {
    pub(super) fn read(df: &DataFrame, values: &Values) -> Result<Src, IngestError> {
        let f64_col = |name: &str| -> Result<Float64Chunked, IngestError> {
            Ok(df
                .column(name)?
                .cast(&DataType::Float64)?
                .f64()?
                .rechunk()
                .into_owned())
        };
        Ok(match values {
            Values::Wide(v) => Src::Wide(
                v.iter()
                    .map(|(c, _)| f64_col(c))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Values::Long(v) => {
                // metric id → the value columns it feeds.
                let max_id = v
                    .iter()
                    .flat_map(|(_, _, ids)| ids.iter().copied())
                    .max()
                    .unwrap_or(0) as usize;
                let mut feeds: Vec<Vec<usize>> = vec![Vec::new(); max_id + 1];
                for (j, (_, _, ids)) in v.iter().enumerate() {
                    for &id in ids {
                        feeds[id as usize].push(j);
                    }
                }
                Src::Long(
                    df.column("__m")?.u32()?.rechunk().into_owned(),
                    f64_col("__v")?,
                    feeds,
                )
            }
        })
    }
}

/// A [`Src`]'s values read in place: the long columns as slices, the wide columns as slices and
/// validity (one chunk each: rechunked).
pub(super) struct SrcView<'a> {
    src: &'a Src,
    long_m: Option<&'a [u32]>,
    long_v: Option<&'a [f64]>,
    wide: Vec<(&'a [f64], Option<&'a Bitmap>)>,
}

impl<'a> SrcView<'a> {
    pub(super) fn new(src: &'a Src) -> SrcView<'a> {
        let (long_m, long_v) = match src {
            Src::Long(m, v, _) => (m.cont_slice().ok(), v.cont_slice().ok()),
            Src::Wide(_) => (None, None),
        };
        let wide = match src {
            Src::Wide(cols) => cols
                .iter()
                .map(|c| {
                    let a = c.downcast_iter().next().expect("rechunked: one chunk");
                    (a.values().as_slice(), a.validity())
                })
                .collect(),
            Src::Long(..) => Vec::new(),
        };
        SrcView {
            src,
            long_m,
            long_v,
            wide,
        }
    }

    /// Adds observation `k`'s values, of weight `w`, to the row being built.
    #[inline]
    fn add(&self, k: usize, w: f64, acc: &mut [Acc], aggs: &[(&'static str, Agg)]) {
        match self.src {
            Src::Wide(_) => {
                for (jj, (vals, valid)) in self.wide.iter().enumerate() {
                    if valid.is_none_or(|b| b.get_bit(k)) {
                        acc[jj].add(aggs[jj].1, vals[k], w);
                    }
                }
            }
            Src::Long(m, v, feeds) => {
                let (m, v) = match (self.long_m, self.long_v) {
                    (Some(ms), Some(vs)) => (Some(ms[k]), Some(vs[k])),
                    _ => (m.get(k), v.get(k)),
                };
                if let (Some(m), Some(v)) = (m, v.filter(|v| !v.is_nan()))
                    && let Some(js) = feeds.get(m as usize)
                {
                    for &jj in js {
                        acc[jj].add(aggs[jj].1, v, w);
                    }
                }
            }
        }
    }
}

/// One value column's aggregate over the row being built.
#[derive(Clone, Copy, Default)]
pub(super) struct Acc {
    /// Σ value × weight (mean) or Σ value (sum).
    sum: f64,
    /// Σ weight of the values (mean).
    w: f64,
    max: f64,
    n: u32,
}

impl Acc {
    #[inline]
    fn add(&mut self, agg: Agg, v: f64, w: f64) {
        match agg {
            Agg::Mean => {
                self.sum += v * w;
                self.w += w;
            }
            Agg::Sum => self.sum += v,
            Agg::Max => {}
        }
        self.max = if self.n == 0 { v } else { self.max.max(v) };
        self.n += 1;
    }
}

/// The rows being built.
pub(super) struct Out {
    eid: Vec<u32>,
    end: Vec<i64>,
    iv: Vec<i64>,
    samples: Vec<u32>,
    /// Per value column: values and validity.
    vals: Vec<OptCol>,
    acc: Vec<Acc>,
}

impl Out {
    pub(super) fn with_capacity(cap: usize, ncols: usize) -> Out {
        Out {
            eid: Vec::with_capacity(cap),
            end: Vec::with_capacity(cap),
            iv: Vec::with_capacity(cap),
            samples: Vec::with_capacity(cap),
            vals: (0..ncols).map(|_| OptCol::with_capacity(cap)).collect(),
            acc: vec![Acc::default(); ncols],
        }
    }

    /// Writes the row being built (null, never 0, where nothing fed a cell) and starts afresh.
    fn flush(&mut self, aggs: &[(&'static str, Agg)]) {
        for (j, a) in self.acc.iter_mut().enumerate() {
            self.vals[j].push((a.n > 0).then(|| match aggs[j].1 {
                Agg::Max => a.max,
                Agg::Sum => a.sum,
                Agg::Mean => a.sum / a.w,
            }));
            *a = Acc::default();
        }
    }

    /// The rows frame: `__eid`, `__end`, `__iv`, `__samples` and the value columns.
    pub(super) fn into_frame(self, aggs: &[(&'static str, Agg)]) -> Result<DataFrame, IngestError> {
        let h = self.eid.len();
        let mut cols = vec![
            Column::new("__eid".into(), self.eid),
            Column::new("__end".into(), self.end),
            Column::new("__iv".into(), self.iv),
            Column::new("__samples".into(), self.samples),
        ];
        for ((c, _), v) in aggs.iter().zip(self.vals) {
            cols.push(v.into_column(c));
        }
        Ok(DataFrame::new(h, cols)?)
    }
}

/// One table's observations (sorted by entity and time: `eid`, `ts`, `n` per observation) being
/// made into rows, what was found about their sampling, and one entity's scratch.
pub(super) struct Resampler<'a> {
    pub(super) spec: RowSpec,
    pub(super) aggs: &'a [(&'static str, Agg)],
    pub(super) names: &'a [String],
    pub(super) eid: &'a [u32],
    pub(super) ts: &'a [i64],
    pub(super) n: &'a [u32],
    pub(super) values: SrcView<'a>,
    pub(super) sampling: &'a mut Sampling,
    /// One entity's distinct timestamps and the raw samples at each.
    pub(super) dts: Vec<i64>,
    pub(super) dcounts: Vec<u32>,
}

impl Resampler<'_> {
    /// Every entity's rows into `out`; entities with a single distinct timestamp last, at the
    /// table's median period. Records the estimated periods in the sampling.
    pub(super) fn run(&mut self, out: &mut Out) {
        let len = self.eid.len();
        let mut periods: Vec<f64> = Vec::new();
        let mut singles: Vec<(usize, usize)> = Vec::new();
        let mut i = 0;
        while i < len {
            let mut j = i;
            while j < len && self.eid[j] == self.eid[i] {
                j += 1;
            }
            if self.ts[i] == self.ts[j - 1] {
                singles.push((i, j));
            } else {
                self.entity(i, j, self.spec.fallback_ms, &mut periods, out);
            }
            i = j;
        }
        let fallback = if periods.is_empty() {
            self.spec.fallback_ms
        } else {
            let mut p = periods.clone();
            p.sort_by(|a, b| a.total_cmp(b));
            p[p.len() / 2]
        };
        for (i, j) in singles {
            self.entity(i, j, fallback, &mut Vec::new(), out);
        }
        if !periods.is_empty() {
            periods.sort_by(|a, b| a.total_cmp(b));
            self.sampling.median_period_ms = Some(periods[periods.len() / 2]);
            self.sampling.periods = periods;
        }
    }

    /// One entity (observations `i..j`): its distinct timestamps, their period segments and
    /// rows, then its observations aggregated into those rows (contiguous: sorted by time).
    fn entity(&mut self, i: usize, j: usize, fallback: f64, periods: &mut Vec<f64>, out: &mut Out) {
        self.distinct(i, j);
        let spec = self.spec;
        let segs = period::segments(
            &self.dts,
            &self.dcounts,
            spec.grid_ms,
            spec.requested_ms.unwrap_or(0),
            fallback,
        );
        let names = self.names;
        let name = names
            .get(self.eid[i] as usize)
            .map(String::as_str)
            .unwrap_or("?");
        note_segments(&segs, &self.dts, spec, name, self.sampling, periods);
        let rows = period::assign(&self.dts, &segs);
        self.aggregate(i, j, &rows, out);
    }

    /// The distinct timestamps of observations `i..j` and the most raw samples at each.
    fn distinct(&mut self, i: usize, j: usize) {
        self.dts.clear();
        self.dcounts.clear();
        for k in i..j {
            if self.dts.last() == Some(&self.ts[k]) {
                let c = self.dcounts.last_mut().expect("pushed");
                *c = (*c).max(self.n[k].max(1));
            } else {
                self.dts.push(self.ts[k]);
                self.dcounts.push(self.n[k].max(1));
            }
        }
    }

    /// Observations `i..j` aggregated into their rows (`rows`: per distinct timestamp, the
    /// row's end and length).
    fn aggregate(&self, i: usize, j: usize, rows: &[(i64, i64)], out: &mut Out) {
        let (ts, n) = (self.ts, self.n);
        let mut d = 0;
        let mut open: Option<i64> = None;
        for k in i..j {
            let first_of_ts = k == i || ts[k] != ts[k - 1];
            if first_of_ts && k > i {
                d += 1;
            }
            let (end, iv) = rows[d];
            if open != Some(end) {
                if open.is_some() {
                    out.flush(self.aggs);
                }
                out.eid.push(self.eid[k]);
                out.end.push(end);
                out.iv.push(iv);
                out.samples.push(0);
                open = Some(end);
            }
            if first_of_ts {
                *out.samples.last_mut().expect("a row") += self.dcounts[d];
            }
            let w = f64::from(n[k].max(1));
            self.values.add(k, w, &mut out.acc, self.aggs);
        }
        if open.is_some() {
            out.flush(self.aggs);
        }
    }
}
