//! Ingest: reads telemetry from `--source`s (tessera history, CSV files, Prometheus) into the canonical frames
//! of `docs/frames.md` — three polars `LazyFrame`s `gpu`, `mig`, `process` with the columns of
//! `docs/history-format.md`, `ts` as `Datetime(ms, UTC)` and a `source` column — plus an
//! [`IngestReport`] (rows, time range, skipped rows with reasons, warnings).
//!
//! Readers are strict: a bad manifest, version, column, file or line is an [`IngestError`] naming
//! the file (and line or column); `skip_bad_rows` turns bad *rows* (not bad files or schemas) into
//! counted warnings. Duplicate history rows (one node's key and `ts` twice) are counted and dropped
//! where there is a sign of them (`dedupe`); a file named by two sources is read once. This
//! module does not detect, plan or report anything and does not deduplicate rows that sources of
//! different kinds share.
//!
//! Layout: `source` (`--source` specs and times, the `SourceKind` seam each reader implements;
//! `KINDS` here registers them), `error` and `report` (what an ingest says),
//! `parts` (the driver: sources into partitions of frames), the readers `history`, `csv` and
//! `prometheus` (with `remote_read` and `promeval`), and what they share: `schema`, `period`,
//! `resample`, `dedupe`, `occupancy` (per-node GPU counts into synthetic GPU rows); `summary`
//! is what `tessera ingest` prints. This file holds the options, the work items and the value
//! ranges every reader checks.

mod csv;
mod dedupe;
mod error;
mod history;
mod occupancy;
mod parts;
pub mod period;
pub mod prometheus;
mod promeval;
pub mod remote_read;
mod report;
pub mod resample;
mod source;
pub mod summary;

use std::path::{Path, PathBuf};

pub use error::IngestError;

use crate::frames::Table;
pub use parts::{Part, first_row_start, ingest, ingest_parts, name_unreadable};
pub use prometheus::PrometheusOptions;
pub use report::{IngestReport, TableStats};
pub use resample::Sampling;
use source::{Partitions, Rows, SourceKind};
pub use source::{Source, fmt_ms, parse_time};

/// Every kind of source, in the order errors name them: the one registration of a source (its
/// module declared above).
static KINDS: &[&dyn SourceKind] = &[
    &history::HistoryKind,
    &csv::CsvKind,
    &prometheus::PrometheusKind,
];

/// Progress callback: (work items done, work items in total). A work item is one file.
pub type Progress<'a> = &'a dyn Fn(usize, usize);

/// How to ingest.
#[derive(Default)]
pub struct IngestOptions<'a> {
    /// Keep rows with `ts > since` (unix ms): rows ending in `(since, until]`, the range rule of
    /// [`crate::range`].
    pub since: Option<i64>,
    /// Keep rows with `ts <= until` (unix ms).
    pub until: Option<i64>,
    /// Skip bad rows (counted in the report) instead of failing.
    pub skip_bad_rows: bool,
    /// `--interval`: the shortest row length for sources that are not already in rows (CSV,
    /// Prometheus), in ms; `None` (`auto`) for each entity's own sampling period. Rows are
    /// never finer than the data (`period`). History keeps its own rows.
    pub interval_ms: Option<i64>,
    /// Timeout, retries and auth of `prometheus:` sources.
    pub prometheus: PrometheusOptions,
    /// Called after each file.
    pub progress: Option<Progress<'a>>,
    /// A folder where a `prometheus:` source read by node group writes each group's rows as
    /// Parquet as soon as they are resampled, its partition then scanning them like history
    /// (memory holds the groups in flight, not the fleet); `None`: kept in memory. The caller
    /// removes the folder when done with the partitions.
    pub spill: Option<&'a Path>,
    /// Take row counts and time ranges of closed history files from their Parquet footers
    /// (row count, `ts` statistics) instead of scanning `ts`, when there is no time filter. For
    /// commands that read all the data afterwards anyway (a damaged data page then fails there,
    /// named by [`name_unreadable`]); `tessera ingest` scans, so it also checks the `ts` pages.
    pub footer_stats: bool,
}

/// One file to read, resolved from a source.
enum WorkItem {
    Parquet {
        table: Table,
        path: PathBuf,
        source: String,
        /// The node its manifest names (the partition key).
        node: String,
        /// The manifest's row interval.
        interval_ms: i64,
    },
    Jsonl {
        table: Table,
        path: PathBuf,
        source: String,
        node: String,
        interval_ms: i64,
    },
    /// A source read whole by its kind ([`source::SourceKind::read`]): CSV, Prometheus.
    Read(Source),
}

/// The most power one GPU row may show, W (100 kW: no GPU comes near; a value beyond it is a
/// broken counter or unit). Energy per row is bounded by it over a day.
pub(crate) const MAX_POWER_WATTS: f64 = 1e5;

/// The range a canonical column's value must lie in (after scaling), for every source that is
/// not history (docs/frames.md). Infinite values and ratios outside 0–1 are impossible, as is negative
/// memory, power, energy or a count; memory beyond 2^60 bytes (an exbibyte) is not a GPU's.
pub(crate) fn check_value(column: &str, v: f64) -> Result<(), &'static str> {
    value_range(column).check(v)
}

/// The range [`check_value`] holds a column's values to, looked up once for many values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ValueRange {
    lo: f64,
    hi: f64,
    why: &'static str,
}

impl ValueRange {
    /// Whether `v` is finite and in the range; else why not.
    pub(crate) fn check(self, v: f64) -> Result<(), &'static str> {
        if !v.is_finite() {
            Err("infinite")
        } else if v < self.lo || v > self.hi {
            Err(self.why)
        } else {
            Ok(())
        }
    }
}

/// The [`ValueRange`] of a canonical column.
pub(crate) fn value_range(column: &str) -> ValueRange {
    let r = |lo: f64, hi: f64, why: &'static str| ValueRange { lo, hi, why };
    if matches!(
        column,
        "busy_mean"
            | "busy_max"
            | "sm_active_mean"
            | "sm_active_max"
            | "sm_occupancy_mean"
            | "memory_controller_mean"
            | "sm_mean"
            | "sm_max"
            | "tensor_active_mean"
            | "tensor_active_max"
            | "dram_active_mean"
            | "fp64_active_mean"
            | "fp32_active_mean"
            | "fp16_active_mean"
            | "integer_active_mean"
    ) {
        r(0.0, 1.0, "ratio outside 0–1")
    } else if column.ends_with("_bytes_per_second") {
        r(
            0.0,
            (1u64 << 60) as f64,
            "throughput outside 0–2^60 bytes/s",
        )
    } else if column.contains("bytes") {
        r(0.0, (1u64 << 60) as f64, "memory outside 0–2^60 bytes")
    } else if column == "power_mean_watts" {
        // No GPU draws 100 kW; a value beyond it is a broken counter or unit, and sums of such
        // values would reach infinity in the report.
        r(0.0, MAX_POWER_WATTS, "power outside 0–100 kW")
    } else if column == "energy_delta_joules" {
        r(
            0.0,
            MAX_POWER_WATTS * 86_400.0,
            "energy outside 0–8.64 GJ in one row (100 kW for a day)",
        )
    } else if matches!(column, "xid_count" | "samples" | "mig_enabled") {
        r(0.0, f64::INFINITY, "negative power, energy or count")
    } else if column == "holders" {
        // A device plugin's time-slicing shares one GPU among at most a few dozen pods.
        r(0.0, 1024.0, "holders outside 0–1024")
    } else if column == "temperature_max_celsius" {
        r(-100.0, 300.0, "temperature outside −100–300 °C")
    } else {
        r(f64::NEG_INFINITY, f64::INFINITY, "")
    }
}
