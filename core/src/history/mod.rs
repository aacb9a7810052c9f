//! The history: interval rows of GPU, MIG and process activity written to disk by the exporter
//! and read by the analyzer, in the versioned format of `docs/history-format.md`.
//!
//! - [`schema`]: the tables and columns (the single source of truth), typed-row ↔ arrow glue.
//! - [`aggregate`]: 1-second samples → interval rows (pure).
//! - [`writer`]: one node folder: manifest, open JSONL segments, hourly Parquet, idempotent crash
//!   recovery, no second row for an interval, retention.
//! - [`files`]: file names, the manifest, the error type, the day files' list of the hourly files
//!   they supersede, how Parquet files are written (shared by the modules below).
//! - [`segments`]: one table's open segment closed into an hourly Parquet file, and the
//!   idempotent recovery of what a crash left.
//! - [`lock`]: one writer per node folder (`flock`, released by the kernel when the holder dies).
//! - [`compact`]: merges the hourly files of a finished UTC day into one day file.
//! - [`reader`]: the strict reader (arrow/parquet, never polars).
//! - [`pages`]: page headers checked before a row group is decoded (no allocation a corrupt
//!   header claims).
//!
//! This module is the format and its files only: it never samples a GPU, runs no thread and never
//! links polars. The exporter's history thread (`tessera_exporter::history_thread`) and the
//! simulated fleet's history ([`crate::simulate`]) drive the writer from above.

pub mod aggregate;
pub mod compact;
pub mod files;
pub mod lock;
pub mod pages;
pub mod reader;
pub mod schema;
pub mod segments;
pub mod writer;

pub use aggregate::{Aggregator, GpuRow, MigRow, ProcessRow, Rows};
pub use files::{HistoryError, Manifest};
pub use reader::{NodeHistory, read_node_dir};
pub use schema::{HISTORY_VERSION, OLDEST_VERSION, Table};
pub use writer::{HistoryWriter, WriteReport, WriterMode, WriterOptions};

/// Default `--history.dir` (used when it can be written).
pub const DEFAULT_DIR: &str = "/var/lib/tessera/history";
