//! What an ingest read, skipped and warned about: [`IngestReport`] with its per-table
//! [`TableStats`]. Plain data that the readers fill in and the commands print; it reads
//! nothing itself.

use std::collections::BTreeMap;

use serde::Serialize;

use super::resample::Sampling;
use crate::frames::schema::Table;

/// Rows and time range of one table after ingest (and the time filter).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableStats {
    pub rows: u64,
    /// First and last `ts`, unix ms.
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
}

/// What an ingest read, skipped and warned about.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IngestReport {
    /// Per table: rows and time range.
    pub tables: BTreeMap<Table, TableStats>,
    /// Skipped rows by reason (only with `skip_bad_rows`, plus torn last lines of open segments
    /// and duplicate history rows, which are always counted once).
    pub skipped: BTreeMap<String, u64>,
    /// Torn last lines of open segments (tolerated; also counted in `skipped`).
    pub torn_lines: u64,
    /// Files read.
    pub files: u64,
    /// Human-readable warnings, one line each.
    pub warnings: Vec<String>,
    /// Per source: the rows it gave at which length, the sampling period found, period changes
    /// (docs/frames.md, "Sampling periods").
    pub sampling: BTreeMap<String, Sampling>,
    /// Partitions whose history showed a sign of duplicate rows and was checked row by row, with
    /// the sign (`super::dedupe`); none for clean history, which costs no check.
    #[serde(skip)]
    pub duplicate_checks: BTreeMap<String, &'static str>,
}

impl IngestReport {
    /// Overall time range over all tables (unix ms).
    pub fn time_range(&self) -> Option<(i64, i64)> {
        let first = self.tables.values().filter_map(|t| t.first_ts).min()?;
        let last = self.tables.values().filter_map(|t| t.last_ts).max()?;
        Some((first, last))
    }

    /// Total skipped rows.
    pub fn skipped_rows(&self) -> u64 {
        self.skipped.values().sum()
    }

    pub(crate) fn skip(&mut self, reason: impl Into<String>) {
        *self.skipped.entry(reason.into()).or_default() += 1;
    }
}
