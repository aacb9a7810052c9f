//! The canonical frames and the toolkit every analysis module reads them with: [`Frames`] (one
//! lazy frame per history table, `docs/frames.md`), [`schema`] (the tables' polars schemas on
//! core's vocabulary), [`columns`] (typed column readers, row grouping, `ts` as unix ms),
//! [`shared`] (a partition's string columns interned once for all its readers) and their own
//! error, [`FramesError`]. Ingest produces frames; the advisor, the MIG planner, the
//! report and jobs read them; none of them borrows another's error type for it.
//!
//! What it does not do: read sources (ingest does), decide anything, or resolve ranges
//! (`crate::range` does; [`Frames::within`] only filters by the bounds it is given).

pub mod columns;
pub mod schema;
pub mod shared;

use polars::prelude::*;

pub use schema::Table;
use schema::TableSchema as _;

/// Reading frames failed.
#[derive(Debug, thiserror::Error)]
pub enum FramesError {
    #[error("reading frames: {0}")]
    Polars(#[from] PolarsError),
}

/// The canonical frames: one lazy frame per table, all sources concatenated.
#[derive(Clone)]
pub struct Frames {
    pub gpu: LazyFrame,
    pub mig: LazyFrame,
    pub process: LazyFrame,
}

impl Frames {
    /// The frame of one table.
    pub fn table(&self, t: Table) -> &LazyFrame {
        match t {
            Table::Gpu => &self.gpu,
            Table::Mig => &self.mig,
            Table::Process => &self.process,
        }
    }
}

impl Frames {
    /// Empty frames with the canonical schemas.
    pub fn empty() -> Frames {
        let e = |t: Table| DataFrame::empty_with_schema(&t.frame_schema()).lazy();
        Frames {
            gpu: e(Table::Gpu),
            mig: e(Table::Mig),
            process: e(Table::Process),
        }
    }

    /// The rows of every table whose interval ends in `(since, until]` (unix ms; the range rule
    /// of `crate::range`, which this module does not import), lazily.
    pub fn within(&self, since: i64, until: i64) -> Frames {
        let f = |t: Table| {
            let ts = col("ts").cast(DataType::Int64);
            self.table(t)
                .clone()
                .filter(ts.clone().gt(lit(since)).and(ts.lt_eq(lit(until))))
        };
        Frames {
            gpu: f(Table::Gpu),
            mig: f(Table::Mig),
            process: f(Table::Process),
        }
    }

    /// The union (concatenation) of several frames, table by table.
    pub fn union(parts: impl IntoIterator<Item = Frames>) -> Result<Frames, FramesError> {
        let mut g = Vec::new();
        let mut m = Vec::new();
        let mut p = Vec::new();
        for f in parts {
            g.push(f.gpu);
            m.push(f.mig);
            p.push(f.process);
        }
        if g.is_empty() {
            return Ok(Frames::empty());
        }
        let cat = |v: Vec<LazyFrame>| -> Result<LazyFrame, FramesError> {
            Ok(if v.len() == 1 {
                v.into_iter().next().expect("one")
            } else {
                concat(v, UnionArgs::default())?
            })
        };
        Ok(Frames {
            gpu: cat(g)?,
            mig: cat(m)?,
            process: cat(p)?,
        })
    }
}

/// A MIG instance's share of its GPU's compute, from the `profile` column's name: its compute
/// slices of 7 (`3g.40gb` → 3/7); 1 for a whole GPU or a name without slices. The idle and
/// allocated detectors and work per GPU-hour weigh an instance's hours by it.
pub fn mig_profile_share(profile: Option<&str>) -> f64 {
    profile
        .and_then(|p| p.split('g').next())
        .and_then(|n| n.parse::<f64>().ok())
        .map_or(1.0, |n| (n / 7.0).min(1.0))
}
