//! The history folder's files: their names (hourly `<hour>` and daily `<day>` Parquet files, open
//! and closing JSONL segments), the manifest, the error type every history module returns, the
//! day files' `tessera.compacted_from` list and which hourly files it supersedes, and how every
//! history Parquet file is written. Shared by the writer, the reader, compaction and the lock;
//! this module imports none of them.
//!
//! It writes only single small files (`write_atomic`); rows, segments and compaction are the
//! other modules'.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde::{Deserialize, Serialize};

const DAY_MS: i64 = 86_400_000;
pub(super) const HOURS_PER_DAY: i64 = 24;

pub(super) const HOUR_MS: i64 = 3_600_000;

/// Suffix of an open segment (`<hour>.open.jsonl`).
pub const OPEN_SUFFIX: &str = ".open.jsonl";

/// Suffix of a segment being closed into Parquet (`<hour>.closing.jsonl`); readers ignore it.
pub const CLOSING_SUFFIX: &str = ".closing.jsonl";

/// Suffix given to a segment that cannot be parsed, so that it stops blocking recovery.
pub const UNREADABLE_SUFFIX: &str = ".unreadable";

/// Parquet key-value metadata of an hourly file made from an open segment: the segment's name,
/// length and FNV-1a 64 hash, so that recovery recognises a segment already converted.
pub const SEGMENT_KEY: &str = "tessera.segment";

/// What went wrong reading or writing history files. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: parquet: {message}")]
    Parquet { path: PathBuf, message: String },
    #[error("{path}: line {line}: {message}")]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: column {column:?}, {place}: {message}")]
    Column {
        path: PathBuf,
        column: String,
        /// `line N` (JSONL), `row N` or `row group N` (Parquet), or `schema`.
        place: String,
        message: String,
    },
    #[error("{path}: history format version {found}; this build reads versions 1 to {expected}")]
    Version {
        path: PathBuf,
        found: u64,
        expected: u32,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error(
        "{dir}: history folder already in use by {} (lock {lock}): another tessera-exporter or \
         tessera simulate writes this node's history; stop it, or give this one another --history.dir",
        holder_text(.holder)
    )]
    Locked {
        /// The node folder.
        dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
        /// The holder's pid, as its lock file says.
        holder: Option<u32>,
    },
}

fn holder_text(holder: &Option<u32>) -> String {
    holder.map_or("another process (pid unknown)".to_string(), |p| {
        format!("pid {p}")
    })
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HistoryError + '_ {
    move |source| HistoryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The manifest of a node folder (`tessera-history.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub version: u64,
    pub node: String,
    pub interval_ms: i64,
}

/// `2026-11-02T14` for the hour containing `hour × 1 h`.
pub fn hour_name(hour: i64) -> String {
    chrono::DateTime::from_timestamp_millis(hour * HOUR_MS)
        .map(|t| t.format("%Y-%m-%dT%H").to_string())
        .unwrap_or_else(|| format!("hour{hour}"))
}

/// The hour index (`ts / 1 h`) a file name starts with, if it starts with one.
pub fn parse_hour(file_name: &str) -> Option<i64> {
    let prefix = file_name.get(..13)?;
    let t = chrono::NaiveDateTime::parse_from_str(&format!("{prefix}:00:00"), "%Y-%m-%dT%H:%M:%S")
        .ok()?;
    Some(t.and_utc().timestamp_millis().div_euclid(HOUR_MS))
}

/// Write `bytes` to `path` through `<path stem>.tmp` and a rename; the temporary file is removed
/// when writing it fails (a full disk must not leave an empty one behind).
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), HistoryError> {
    let tmp = path.with_extension("tmp");
    let result = fs::write(&tmp, bytes)
        .map_err(io(&tmp))
        .and_then(|()| fs::rename(&tmp, path).map_err(io(path)));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

pub(super) fn remove_if_exists(path: &Path) -> Result<(), HistoryError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path)(e)),
        _ => Ok(()),
    }
}

/// How every history Parquet file is written (hourly and day files): zstd, and the default
/// column statistics, whose `ts` min/max readers use for time ranges without reading data
/// (`reader::footer_summary`).
pub(super) fn parquet_properties() -> WriterPropertiesBuilder {
    WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default()))
}

/// `2026-11-02T14:00:10Z` for unix ms (for messages).
pub(crate) fn format_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| format!("{ms} ms"))
}

/// The file names of `dir`, sorted.
pub(super) fn list_names(dir: &Path) -> Result<Vec<String>, HistoryError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        names.push(
            entry
                .map_err(io(dir))?
                .file_name()
                .to_string_lossy()
                .into_owned(),
        );
    }
    names.sort();
    Ok(names)
}

/// Parquet key-value metadata key of a day file: a JSON array of the hourly file names it holds.
pub const COMPACTED_FROM_KEY: &str = "tessera.compacted_from";

/// `2026-11-02` for day `day` (unix ms / 1 day).
pub fn day_name(day: i64) -> String {
    chrono::DateTime::from_timestamp_millis(day * DAY_MS)
        .map(|t| t.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| format!("day{day}"))
}

/// The day (unix ms / 1 day) of a day file name `YYYY-MM-DD.parquet`; `None` for anything else
/// (hourly files included).
pub fn parse_day_file(file_name: &str) -> Option<i64> {
    let stem = file_name.strip_suffix(".parquet")?;
    if stem.len() != 10 {
        return None;
    }
    let d = chrono::NaiveDate::parse_from_str(stem, "%Y-%m-%d").ok()?;
    Some(
        d.and_hms_opt(0, 0, 0)?
            .and_utc()
            .timestamp_millis()
            .div_euclid(DAY_MS),
    )
}

/// The hour of an hourly closed file name (`YYYY-MM-DDTHH.parquet` or `…THH-N.parquet`).
pub fn parse_hour_file(file_name: &str) -> Option<i64> {
    let stem = file_name.strip_suffix(".parquet")?;
    let rest = stem.get(13..)?;
    if !(rest.is_empty() || rest.strip_prefix('-').is_some_and(is_number)) {
        return None;
    }
    parse_hour(stem)
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The span of hours a closed file (hourly or daily) covers: `(first hour, last hour)`.
pub fn file_hours(file_name: &str) -> Option<(i64, i64)> {
    if let Some(h) = parse_hour_file(file_name) {
        return Some((h, h));
    }
    let d = parse_day_file(file_name)?;
    Some((d * HOURS_PER_DAY, d * HOURS_PER_DAY + HOURS_PER_DAY - 1))
}

/// The hourly file names a day file lists as compacted into it (empty for a file without the key).
pub fn compacted_from(path: &Path) -> Result<Vec<String>, HistoryError> {
    catch_panic(path, "footer", || compacted_from_of(path))
}

fn compacted_from_of(path: &Path) -> Result<Vec<String>, HistoryError> {
    let pq = |e: &dyn std::fmt::Display| HistoryError::Parquet {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let file = File::open(path).map_err(io(path))?;
    let reader = SerializedFileReader::new(file).map_err(|e| pq(&e))?;
    let Some(kvs) = reader.metadata().file_metadata().key_value_metadata() else {
        return Ok(Vec::new());
    };
    for kv in kvs {
        if kv.key == COMPACTED_FROM_KEY {
            let text = kv.value.as_deref().unwrap_or("[]");
            return serde_json::from_str(text).map_err(|e| HistoryError::Invalid {
                path: path.to_path_buf(),
                message: format!(
                    "metadata {COMPACTED_FROM_KEY:?} is not a JSON list of names: {e}"
                ),
            });
        }
    }
    Ok(Vec::new())
}

/// The hourly file names of a table folder that its day files hold already (readers skip them).
pub fn superseded(table_dir: &Path) -> Result<BTreeSet<String>, HistoryError> {
    let mut out = BTreeSet::new();
    if !table_dir.is_dir() {
        return Ok(out);
    }
    for entry in fs::read_dir(table_dir).map_err(io(table_dir))? {
        let path = entry.map_err(io(table_dir))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if parse_day_file(name).is_some() {
            out.extend(compacted_from(&path)?);
        }
    }
    Ok(out)
}

pub(super) const PANIC_NOTE: &str = "the Parquet decoder failed";

/// Runs `f`, turning a panic into an error at `place` of `path`: the parquet crate panics on
/// some corrupt files (a dictionary-encoded page without a dictionary, …), and a bad file must
/// be an error that names it, never a crash of the exporter or the analyzer. (The panic message
/// is still printed by the panic hook.)
pub(crate) fn catch_panic<T>(
    path: &Path,
    place: &str,
    f: impl FnOnce() -> Result<T, HistoryError>,
) -> Result<T, HistoryError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let text = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(HistoryError::Parquet {
            path: path.to_path_buf(),
            message: format!("{place}: {PANIC_NOTE} ({text})"),
        })
    })
}
