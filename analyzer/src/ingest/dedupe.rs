//! Duplicate history rows: two rows of one node's table with the same key (the entity and `ts`),
//! which two exporters writing one folder, a clock that went back, or a copy of a node's folder
//! next to the original leave behind. Counting them twice doubles energy, idle hours and cost.
//!
//! Finding them exactly means hashing every key, which would cost the advisor a large part of its
//! time budget on history that has none (the exporter's writer no longer writes them: a lock per
//! folder, and no row that is not after its table's newest). So this module first looks for *signs* of duplicates in what is already known
//! cheaply — per file, its row count and `ts` range from the Parquet footer, the largest GPU index
//! from its statistics, and the manifest's interval — and only where there is a sign counts and
//! drops them exactly ([`dedupe`]):
//!
//! - two files (or an open segment) of one node and table whose `ts` ranges overlap (files of
//!   consecutive hours or days never do);
//! - a `gpu` file holding more rows than its GPUs and `ts` range allow (one row per GPU per
//!   interval);
//! - an open segment (read whole anyway) holding a key twice;
//! - a file without `ts` statistics (nothing is known: checked exactly).
//!
//! A sign in one table of a node checks all three tables of that node (one writer wrote them).
//! Duplicates inside one Parquet file of the `mig` or `process` table, with no sign in the node's
//! `gpu` table and no overlap, are not looked for. The first row of each key is kept (files in
//! name order, rows in file order). The same file named by two sources is read once
//! ([`super::ingest_parts`]). This module does not compare rows of different kinds of
//! source (history against CSV or Prometheus).

use polars::prelude::*;

use super::IngestError;
use crate::frames::schema::Table;

/// What is known cheaply about one history file of one table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Extent {
    pub rows: u64,
    /// First and last `ts` (unix ms), `None` when unknown (no statistics).
    pub ts: Option<(i64, i64)>,
    /// The number of GPUs the file can hold rows of (largest `gpu` index + 1), for `gpu` files.
    pub gpus: Option<u64>,
    /// The node's row interval (manifest).
    pub interval_ms: i64,
    /// The file itself was checked and holds a key twice (open segments).
    pub holds_duplicates: bool,
}

/// Why the files of one table of one node may hold a key twice, or `None`.
pub(super) fn sign(extents: &[Extent]) -> Option<&'static str> {
    let mut ranges = Vec::with_capacity(extents.len());
    for e in extents.iter().filter(|e| e.rows > 0) {
        if e.holds_duplicates {
            return Some("an open segment holds a key twice");
        }
        let Some((lo, hi)) = e.ts else {
            return Some("a file has no ts statistics");
        };
        if let Some(gpus) = e.gpus {
            let intervals = (hi.saturating_sub(lo) / e.interval_ms.max(1)) as u64 + 1;
            if e.rows > gpus.saturating_mul(intervals) {
                return Some("a file holds more rows than its GPUs and time range allow");
            }
        }
        ranges.push((lo, hi));
    }
    ranges.sort_unstable();
    let mut end = None;
    for (lo, hi) in ranges {
        if end.is_some_and(|e| lo <= e) {
            return Some("files overlap in time");
        }
        end = Some(end.map_or(hi, |e: i64| e.max(hi)));
    }
    None
}

/// The key columns of a table: one row per key and `ts`.
pub(super) fn key_columns(table: Table) -> &'static [&'static str] {
    match table {
        Table::Gpu => &["node", "gpu", "ts"],
        Table::Mig => &["node", "gpu", "gpu_instance", "compute_instance", "ts"],
        Table::Process => &[
            "node",
            "gpu",
            "pid",
            "gpu_instance",
            "compute_instance",
            "ts",
        ],
    }
}

fn keys(table: Table) -> Vec<Expr> {
    key_columns(table).iter().map(|c| col(*c)).collect()
}

/// Whether a (small, in-memory) frame of `table` holds a key twice.
pub(super) fn holds_duplicates(df: &DataFrame, table: Table) -> Result<bool, IngestError> {
    if df.height() < 2 {
        return Ok(false);
    }
    let unique = df
        .clone()
        .lazy()
        .select(keys(table))
        .unique(None, UniqueKeepStrategy::Any)
        .select([len()])
        .collect()?;
    Ok((count(&unique)?) < df.height() as u64)
}

fn count(df: &DataFrame) -> Result<u64, IngestError> {
    let c = df.column("len")?.cast(&DataType::UInt64)?;
    Ok(c.u64()?.get(0).unwrap_or(0))
}

/// Drops the rows of `lf` (which holds `rows` rows) whose key an earlier row has: returns the
/// frame to use and the number of rows dropped (the frame is `lf` itself when there were none).
pub(super) fn dedupe(
    lf: LazyFrame,
    table: Table,
    rows: u64,
) -> Result<(LazyFrame, u64), IngestError> {
    let unique = lf
        .clone()
        .unique_stable_generic(Some(keys(table)), UniqueKeepStrategy::First);
    let kept = count(&unique.clone().select([len()]).collect()?)?;
    if kept >= rows {
        return Ok((lf, 0));
    }
    Ok((unique, rows - kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(rows: u64, lo: i64, hi: i64) -> Extent {
        Extent {
            rows,
            ts: Some((lo, hi)),
            gpus: None,
            interval_ms: 10_000,
            holds_duplicates: false,
        }
    }

    #[test]
    fn consecutive_files_show_no_sign() {
        assert_eq!(
            sign(&[e(360, 10_000, 3_600_000), e(360, 3_610_000, 7_200_000)]),
            None
        );
        assert_eq!(sign(&[]), None);
    }

    #[test]
    fn overlapping_files_are_a_sign_whatever_their_order() {
        let a = e(360, 10_000, 3_600_000);
        let b = e(100, 3_600_000, 4_000_000);
        assert!(sign(&[a, b]).is_some());
        assert!(sign(&[b, a]).is_some());
        // One file inside another (a late hourly file next to its day file).
        assert!(sign(&[e(8640, 0, 86_400_000), e(10, 50_000, 60_000)]).is_some());
    }

    #[test]
    fn a_gpu_file_with_too_many_rows_is_a_sign() {
        let mut f = e(2 * 360, 10_000, 3_600_000);
        f.gpus = Some(2);
        assert_eq!(sign(&[f]), None);
        f.rows = 2 * 360 + 1;
        assert!(sign(&[f]).is_some());
    }

    #[test]
    fn unknown_ranges_and_checked_segments_are_signs() {
        let mut f = e(10, 0, 0);
        f.ts = None;
        assert!(sign(&[f]).is_some());
        let mut g = e(10, 0, 100);
        g.holds_duplicates = true;
        assert!(sign(&[g]).is_some());
        // Empty files say nothing.
        f.rows = 0;
        assert_eq!(sign(&[f]), None);
    }
}
