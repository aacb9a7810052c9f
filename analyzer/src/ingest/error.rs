//! [`IngestError`]: every way an ingest fails — what, where (file, line, column, source) and
//! what was expected. It decides nothing about which errors a reader may skip.

use std::path::PathBuf;

use polars::prelude::PolarsError;

/// Ingest errors: what, where, and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("bad --source {spec:?}: {reason}")]
    SourceSpec { spec: String, reason: String },
    #[error("{source_spec}: {reason}")]
    Prometheus { source_spec: String, reason: String },
    #[error("bad time {value:?}: {reason}")]
    Time { value: String, reason: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{source_spec}: no tessera history found (expected a folder with tessera-history.json or folders of them)"
    )]
    NoHistory { source_spec: String },
    #[error("{path}: bad manifest: {reason}")]
    Manifest { path: PathBuf, reason: String },
    #[error("{path}: history version {found}, this reader knows versions 1 to {expected}")]
    Version {
        path: PathBuf,
        found: String,
        expected: u64,
    },
    #[error("{path}: column {column:?}: {reason}")]
    Column {
        path: PathBuf,
        column: String,
        reason: String,
    },
    #[error("{path}: not a readable Parquet file (truncated or corrupt?): {reason}")]
    Parquet { path: PathBuf, reason: String },
    #[error("{path}:{line}: {reason}")]
    Line {
        path: PathBuf,
        line: u64,
        reason: String,
    },
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("polars: {0}")]
    Polars(#[from] PolarsError),
}

impl From<crate::frames::FramesError> for IngestError {
    /// Polars' error as ingest has always said it (`polars: …`).
    fn from(e: crate::frames::FramesError) -> Self {
        match e {
            crate::frames::FramesError::Polars(p) => IngestError::Polars(p),
        }
    }
}
