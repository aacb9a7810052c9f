//! [`HistoryWriter`]: writes the rows of one node into its folder, as `docs/history-format.md`
//! says: the lock ([`super::lock`]: one writer per folder), the manifest, one open JSONL segment
//! per table (header line, then one row per line; each table's rows of one write are appended
//! whole or not at all), hourly rotation into Parquet + zstd (by the rows' `ts` hour), recovery
//! of what a crash left, daily compaction of finished days ([`super::compact`], at open and at
//! each new hour), and retention by age and by total size.
//!
//! Rotation and crash recovery are one idempotent procedure (`recover_table`): stale temporary
//! files are deleted, then every segment being closed (`<hour>.closing.jsonl`) is finished, then
//! every open segment of a past hour is closed. Closing a segment writes its Parquet file to a
//! temporary name (with the segment's identity, [`SEGMENT_KEY`], in its metadata), renames the
//! segment to `.closing.jsonl`, renames the Parquet file into place and deletes the segment; a
//! closing segment whose Parquet file exists is only deleted. So a `kill -9` at any step loses
//! and doubles nothing, whatever order the directory lists the files in.
//!
//! A table never gets a row whose `ts` is not after every row it already holds (its newest `ts`
//! is read from the files at open): a clock that went back or restarted would write a second row
//! for the same entity and interval. Such rows are dropped and counted ([`WriteReport`]).
//!
//! [`WriterMode::Direct`] skips the JSONL (the hour is kept in memory and written as Parquet at
//! rotation): for `tessera simulate`, where there is no crash to survive. Everything else is the
//! same code.
//!
//! Errors are returned ([`HistoryError`], or in a [`WriteReport`] with the rows they cost), never
//! panics; the exporter counts and logs them and keeps serving. This module does not aggregate
//! (see [`super::aggregate`]) and does not decide where the folder is.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use serde::{Deserialize, Serialize};

use super::aggregate::{GpuRow, MigRow, ProcessRow, Rows};
use super::compact;
use super::lock::HistoryLock;
use super::reader;
use super::schema::{FORMAT_NAME, HISTORY_VERSION, HistoryRow, MANIFEST_FILE, Table};

const HOUR_MS: i64 = 3_600_000;

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
    #[error("{path}: history format version {found}; this build reads version {expected}")]
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

/// How rows reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterMode {
    /// Open JSONL segments appended every interval, Parquet at rotation (the exporter).
    Jsonl,
    /// The hour in memory, Parquet at rotation, no JSONL (`tessera simulate`).
    Direct,
}

/// Writer settings.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// `--history.interval` in ms (recorded in the manifest).
    pub interval_ms: i64,
    /// `--history.retention`: closed files whose hour ended longer ago are deleted.
    pub retention_ms: i64,
    /// `--history.max-bytes`: the oldest closed files are deleted beyond this size.
    pub max_bytes: u64,
    pub mode: WriterMode,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            interval_ms: 10_000,
            retention_ms: 30 * 24 * HOUR_MS,
            max_bytes: 1 << 30,
            mode: WriterMode::Jsonl,
        }
    }
}

/// What one [`HistoryWriter::write`] did, by table in [`Table::ALL`] order.
#[derive(Debug, Default)]
pub struct WriteReport {
    /// Rows appended.
    pub written: [u64; 3],
    /// Rows dropped because their table already holds rows at or after their `ts` (a clock that
    /// went back or restarted): writing them would give an entity two rows for one interval.
    pub duplicates: [u64; 3],
    /// Rows that could not be written (see `errors`).
    pub lost: [u64; 3],
    /// What went wrong: rows lost, or a rotation, compaction or retention that failed (those
    /// cost no rows; they are retried at the next hour).
    pub errors: Vec<HistoryError>,
}

impl WriteReport {
    /// Rows written, in all tables.
    pub fn written_rows(&self) -> u64 {
        self.written.iter().sum()
    }

    /// Rows lost, in all tables.
    pub fn lost_rows(&self) -> u64 {
        self.lost.iter().sum()
    }

    /// Rows dropped as duplicates, in all tables.
    pub fn duplicate_rows(&self) -> u64 {
        self.duplicates.iter().sum()
    }

    /// `Err` with the first error, if there was any.
    pub fn into_result(mut self) -> Result<WriteReport, HistoryError> {
        if self.errors.is_empty() {
            Ok(self)
        } else {
            Err(self.errors.swap_remove(0))
        }
    }
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
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), HistoryError> {
    let tmp = path.with_extension("tmp");
    let result = fs::write(&tmp, bytes)
        .map_err(io(&tmp))
        .and_then(|()| fs::rename(&tmp, path).map_err(io(path)));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn remove_if_exists(path: &Path) -> Result<(), HistoryError> {
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

#[cfg(test)]
thread_local! {
    /// A crash-test hook: in unit tests, fails the step named (1: Parquet staged, 2: segment
    /// renamed to closing, 3: Parquet renamed into place), leaving the files as a `kill -9` would.
    pub(crate) static CRASH_AT: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
    /// The table folder's files (name, bytes) when the injected crash came.
    pub(crate) static CRASH_SEEN: std::cell::RefCell<Vec<(String, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn crash_point(step: u8, dir: &Path) -> Result<(), HistoryError> {
    #[cfg(test)]
    if CRASH_AT.with(|c| c.get()) == step {
        let seen = list_names(dir)
            .unwrap_or_default()
            .into_iter()
            .map(|n| {
                let len = fs::metadata(dir.join(&n)).map_or(0, |m| m.len());
                (n, len)
            })
            .collect();
        CRASH_SEEN.with(|c| *c.borrow_mut() = seen);
        return Err(HistoryError::Invalid {
            path: PathBuf::new(),
            message: format!("injected crash at step {step}"),
        });
    }
    let _ = (step, dir);
    Ok(())
}

/// Write `rows` as one Parquet + zstd file `<dir>/<hour>.parquet` (or `<hour>-N.parquet` when
/// taken), through a temporary name. Returns the path.
pub fn write_parquet<R: HistoryRow>(
    dir: &Path,
    hour: i64,
    rows: &[R],
) -> Result<PathBuf, HistoryError> {
    let (tmp, path) = stage_parquet(dir, hour, rows, None)?;
    fs::rename(&tmp, &path).map_err(io(&path))?;
    Ok(path)
}

/// Writes `rows` to the temporary name of a free hourly file name of `hour` (flushed to disk),
/// with `segment` as [`SEGMENT_KEY`] metadata; returns (temporary path, final path). Nothing is
/// left behind on failure.
fn stage_parquet<R: HistoryRow>(
    dir: &Path,
    hour: i64,
    rows: &[R],
    segment: Option<&str>,
) -> Result<(PathBuf, PathBuf), HistoryError> {
    let name = hour_name(hour);
    let mut path = dir.join(format!("{name}.parquet"));
    // Names a day file lists as compacted into it are taken too: a new file under such a name
    // would be skipped by readers as already compacted (only when rows of a compacted day come
    // late, e.g. after the clock went back).
    let day_file = dir.join(format!(
        "{}.parquet",
        compact::day_name(hour.div_euclid(24))
    ));
    let taken = if day_file.exists() {
        compact::compacted_from(&day_file)?
    } else {
        Vec::new()
    };
    let mut n = 1;
    while path.exists()
        || path
            .file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| taken.iter().any(|t| t == f))
    {
        path = dir.join(format!("{name}-{n}.parquet"));
        n += 1;
    }
    let tmp = path.with_extension("parquet.tmp");
    let result = write_parquet_file(&tmp, rows, segment);
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| (tmp, path))
}

fn write_parquet_file<R: HistoryRow>(
    tmp: &Path,
    rows: &[R],
    segment: Option<&str>,
) -> Result<(), HistoryError> {
    let pq = |e: &dyn std::fmt::Display| HistoryError::Parquet {
        path: tmp.to_path_buf(),
        message: e.to_string(),
    };
    let schema = R::TABLE.arrow_schema();
    let file = File::create(tmp).map_err(io(tmp))?;
    let props = parquet_properties()
        .set_key_value_metadata(
            segment.map(|s| vec![KeyValue::new(SEGMENT_KEY.into(), s.to_string())]),
        )
        .build();
    let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(|e| pq(&e))?;
    for chunk in rows.chunks(65_536) {
        let batch =
            RecordBatch::try_new(schema.clone(), R::to_columns(chunk)).map_err(|e| pq(&e))?;
        w.write(&batch).map_err(|e| pq(&e))?;
    }
    let file = w.into_inner().map_err(|e| pq(&e))?;
    file.sync_all().map_err(io(tmp))
}

/// The value of key `key` in a Parquet file's key-value metadata.
fn parquet_key_value(path: &Path, key: &str) -> Result<Option<String>, HistoryError> {
    reader::catch_panic(path, "footer", || parquet_key_value_of(path, key))
}

fn parquet_key_value_of(path: &Path, key: &str) -> Result<Option<String>, HistoryError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file = File::open(path).map_err(io(path))?;
    let reader = SerializedFileReader::new(file).map_err(|e| HistoryError::Parquet {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kvs| kvs.iter().find(|kv| kv.key == key))
        .and_then(|kv| kv.value.clone()))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The identity of a segment's contents ([`SEGMENT_KEY`]).
fn segment_marker(hour: i64, bytes: &[u8]) -> String {
    format!(
        "{{\"file\":\"{}{OPEN_SUFFIX}\",\"bytes\":{},\"fnv1a64\":\"{:016x}\"}}",
        hour_name(hour),
        bytes.len(),
        fnv1a64(bytes)
    )
}

fn open_path(dir: &Path, hour: i64) -> PathBuf {
    dir.join(format!("{}{OPEN_SUFFIX}", hour_name(hour)))
}

fn closing_path(dir: &Path, hour: i64) -> PathBuf {
    dir.join(format!("{}{CLOSING_SUFFIX}", hour_name(hour)))
}

/// Whether an hourly Parquet file of `hour` in `dir` was made from the segment `marker` names.
fn converted(dir: &Path, hour: i64, marker: &str) -> Result<bool, HistoryError> {
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if compact::parse_hour_file(name) != Some(hour) {
            continue;
        }
        match parquet_key_value(&path, SEGMENT_KEY) {
            Ok(Some(v)) if v == marker => return Ok(true),
            Ok(_) => {}
            // Not a file this writer made whole (it syncs before the rename): not this segment's.
            Err(e) => log::debug!("history: {e}"),
        }
    }
    Ok(false)
}

/// A segment that does not parse (not a torn last line: that is tolerated) stops blocking
/// recovery: it is renamed `<name>.unreadable`, which readers ignore, and the error is logged.
fn set_aside(path: &Path, e: &HistoryError) -> Result<(), HistoryError> {
    let mut target = PathBuf::from(format!("{}{UNREADABLE_SUFFIX}", path.display()));
    let mut n = 1;
    while target.exists() {
        target = PathBuf::from(format!("{}-{n}{UNREADABLE_SUFFIX}", path.display()));
        n += 1;
    }
    log::warn!(
        "history: {e}; the segment cannot be converted and is kept as {}, which readers skip",
        target.display()
    );
    fs::rename(path, &target).map_err(io(path))
}

/// Closes the open segment of `hour` in `dir` into Parquet (see the module documentation for
/// the steps); a missing segment is not an error.
fn close_segment<R: HistoryRow>(dir: &Path, hour: i64) -> Result<(), HistoryError> {
    let open = open_path(dir, hour);
    let closing = closing_path(dir, hour);
    if closing.exists() {
        finish_closing::<R>(dir, hour)?;
    }
    let bytes = match fs::read(&open) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(&open)(e)),
    };
    let rows = match reader::parse_jsonl::<R>(&open, &bytes) {
        Ok((rows, _torn)) => rows,
        Err(e) => return set_aside(&open, &e),
    };
    let marker = segment_marker(hour, &bytes);
    let staged = match rows.is_empty() {
        true => None,
        false => Some(stage_parquet(dir, hour, &rows, Some(&marker))?),
    };
    crash_point(1, dir)?;
    fs::rename(&open, &closing).map_err(io(&open))?;
    crash_point(2, dir)?;
    if let Some((tmp, path)) = &staged {
        fs::rename(tmp, path).map_err(io(path))?;
    }
    crash_point(3, dir)?;
    remove_if_exists(&closing)
}

/// Finishes a segment whose closing was interrupted: converts it unless a Parquet file made from
/// it exists, then deletes it.
fn finish_closing<R: HistoryRow>(dir: &Path, hour: i64) -> Result<(), HistoryError> {
    let closing = closing_path(dir, hour);
    let bytes = match fs::read(&closing) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(&closing)(e)),
    };
    let marker = segment_marker(hour, &bytes);
    if !converted(dir, hour, &marker)? {
        let rows = match reader::parse_jsonl::<R>(&closing, &bytes) {
            Ok((rows, _torn)) => rows,
            Err(e) => return set_aside(&closing, &e),
        };
        if !rows.is_empty() {
            let (tmp, path) = stage_parquet(dir, hour, &rows, Some(&marker))?;
            fs::rename(&tmp, &path).map_err(io(&path))?;
        }
    }
    remove_if_exists(&closing)
}

/// The file names of `dir`, sorted.
fn list_names(dir: &Path) -> Result<Vec<String>, HistoryError> {
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

/// Crash recovery and rotation of one table folder, given its file names (in any order: the
/// result does not depend on it, and running it again changes nothing): delete temporary files,
/// finish closing segments, close open segments of hours before `current_hour`. Every file is
/// tried; the first error is returned.
pub(crate) fn recover_table<R: HistoryRow>(
    dir: &Path,
    names: &[String],
    current_hour: i64,
) -> Result<(), HistoryError> {
    let mut first_err = None;
    let mut note = |r: Result<(), HistoryError>| {
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    };
    for name in names.iter().filter(|n| n.ends_with(".tmp")) {
        note(remove_if_exists(&dir.join(name)));
    }
    let hours = |suffix: &str| {
        let mut v: Vec<i64> = names
            .iter()
            .filter_map(|n| parse_hour(n.strip_suffix(suffix)?))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    for hour in hours(CLOSING_SUFFIX) {
        note(finish_closing::<R>(dir, hour));
    }
    for hour in hours(OPEN_SUFFIX) {
        if hour < current_hour {
            log::info!(
                "history: closing {} into Parquet",
                open_path(dir, hour).display()
            );
            note(close_segment::<R>(dir, hour));
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// The newest `ts` of a table folder's files, `None` when it has no rows. A file that does not
/// read is skipped (and logged): it must not stop recording.
fn newest_ts<R: HistoryRow>(dir: &Path) -> Option<i64> {
    let names = list_names(dir).ok()?;
    let mut newest: Option<i64> = None;
    for name in names {
        let path = dir.join(&name);
        let found = if name.ends_with(".parquet") {
            reader::footer_summary(&path).and_then(|s| match s.ts_range {
                Some((_, hi)) => Ok(Some(hi)),
                None if s.rows == 0 => Ok(None),
                None => reader::read_parquet::<R>(&path).map(|r| r.iter().map(|r| r.ts()).max()),
            })
        } else if name.ends_with(OPEN_SUFFIX) {
            reader::read_jsonl::<R>(&path).map(|(r, _)| r.iter().map(|r| r.ts()).max())
        } else {
            Ok(None)
        };
        match found {
            Ok(t) => newest = newest.max(t),
            Err(e) => log::warn!("history: {e}; left out of the newest time of the table"),
        }
    }
    newest
}

struct Segment<R> {
    hour: i64,
    /// The open segment and its length (JSONL mode).
    file: Option<(File, u64)>,
    /// The hour's rows (direct mode).
    buffer: Vec<R>,
}

struct TableWriter<R> {
    dir: PathBuf,
    mode: WriterMode,
    seg: Option<Segment<R>>,
    /// The newest `ts` this table holds: rows at or before it are duplicates.
    newest: Option<i64>,
}

impl<R: HistoryRow> TableWriter<R> {
    fn new(node_dir: &Path, mode: WriterMode) -> Self {
        TableWriter {
            dir: node_dir.join(R::TABLE.name()),
            mode,
            seg: None,
            newest: None,
        }
    }

    /// Append rows (dropping duplicates) into `report` at index `i`; returns whether an hour was
    /// rotated.
    fn write(&mut self, rows: &[R], report: &mut WriteReport, i: usize) -> bool {
        // Rows must come after everything written; within the batch, rows of one interval share
        // their ts and intervals follow each other.
        let mut accepted: Vec<&R> = Vec::with_capacity(rows.len());
        let mut running = self.newest;
        for r in rows {
            let ts = r.ts();
            if self.newest.is_some_and(|n| ts <= n) || running.is_some_and(|n| ts < n) {
                report.duplicates[i] += 1;
            } else {
                running = Some(ts);
                accepted.push(r);
            }
        }
        let mut rotated = false;
        for chunk in
            accepted.chunk_by(|a, b| a.ts().div_euclid(HOUR_MS) == b.ts().div_euclid(HOUR_MS))
        {
            let hour = chunk[0].ts().div_euclid(HOUR_MS);
            // The new hour's rows reach its segment first, and only then is the old hour
            // closed: a kill during the (slower) conversion must not take them with it.
            let old = match self.seg.as_ref().is_some_and(|s| hour > s.hour) {
                true => self.seg.take(),
                false => None,
            };
            match self.append(hour, chunk) {
                Ok(()) => {
                    report.written[i] += chunk.len() as u64;
                    self.newest = self.newest.max(chunk.last().map(|r| r.ts()));
                }
                Err(e) => {
                    report.lost[i] += chunk.len() as u64;
                    report.errors.push(e);
                }
            }
            if old.is_some() {
                rotated = true;
                // A failed rotation costs no rows: the old segment stays on disk and is closed
                // by the next rotation or start.
                if let Err(e) = self.close(old, hour) {
                    report.errors.push(e);
                }
            }
        }
        rotated
    }

    /// Appends the rows of one hour, all or none.
    fn append(&mut self, hour: i64, rows: &[&R]) -> Result<(), HistoryError> {
        if self.seg.is_none() {
            self.start(hour)?;
        }
        let Some(seg) = self.seg.as_mut() else {
            return Ok(());
        };
        let Some((file, len)) = seg.file.as_mut() else {
            seg.buffer.extend(rows.iter().map(|r| (*r).clone()));
            return Ok(());
        };
        let path = open_path(&self.dir, seg.hour);
        let mut buf = Vec::with_capacity(rows.len() * 512);
        for row in rows {
            serde_json::to_writer(&mut buf, row).map_err(|e| HistoryError::Invalid {
                path: path.clone(),
                message: e.to_string(),
            })?;
            buf.push(b'\n');
        }
        if let Err(e) = file.write_all(&buf) {
            // Cut what part of the batch reached the file; failing that, the next start of the
            // segment cuts the torn line.
            if file.set_len(*len).is_err() {
                self.seg = None;
            }
            return Err(io(&path)(e));
        }
        *len += buf.len() as u64;
        Ok(())
    }

    fn start(&mut self, hour: i64) -> Result<(), HistoryError> {
        let file = match self.mode {
            WriterMode::Direct => None,
            WriterMode::Jsonl => {
                let path = open_path(&self.dir, hour);
                if path.exists() {
                    repair_torn_tail(&path)?;
                }
                let mut f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(io(&path))?;
                let mut len = f.metadata().map_err(io(&path))?.len();
                if len == 0 {
                    let header = format!(
                        "{{\"tessera_history\":{HISTORY_VERSION},\"table\":\"{}\"}}\n",
                        R::TABLE.name()
                    );
                    if let Err(e) = f.write_all(header.as_bytes()) {
                        let _ = f.set_len(0);
                        return Err(io(&path)(e));
                    }
                    len = header.len() as u64;
                }
                Some((f, len))
            }
        };
        self.seg = Some(Segment {
            hour,
            file,
            buffer: Vec::new(),
        });
        Ok(())
    }

    /// Closes the current segment (and any other of an hour before `current_hour`) into Parquet.
    fn rotate(&mut self, current_hour: i64) -> Result<(), HistoryError> {
        let seg = self.seg.take();
        self.close(seg, current_hour)
    }

    /// Closes `seg` (no longer the current segment), and any other open segment of an hour
    /// before `current_hour`, into Parquet.
    fn close(&self, seg: Option<Segment<R>>, current_hour: i64) -> Result<(), HistoryError> {
        let Some(seg) = seg else {
            return Ok(());
        };
        match seg.file {
            Some((file, _)) => {
                drop(file);
                recover_table::<R>(&self.dir, &list_names(&self.dir)?, current_hour)
            }
            None if seg.buffer.is_empty() => Ok(()),
            None => write_parquet(&self.dir, seg.hour, &seg.buffer).map(|_| ()),
        }
    }
}

/// Cut a torn last line (no trailing newline) off an open segment before appending to it.
fn repair_torn_tail(path: &Path) -> Result<(), HistoryError> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io(path))?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(io(path))?;
    if bytes.last().is_some_and(|b| *b != b'\n') {
        let keep = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        f.set_len(keep as u64).map_err(io(path))?;
        f.seek(SeekFrom::End(0)).map_err(io(path))?;
    }
    Ok(())
}

/// Writes one node's history folder. Holds the folder's lock while it lives.
pub struct HistoryWriter {
    dir: PathBuf,
    options: WriterOptions,
    gpu: TableWriter<GpuRow>,
    mig: TableWriter<MigRow>,
    process: TableWriter<ProcessRow>,
    latest_ts: i64,
    // Last: released after the segments are closed.
    _lock: HistoryLock,
}

impl HistoryWriter {
    /// Open (creating if needed) `root/<node>`: take its lock ([`HistoryError::Locked`] when
    /// another writer holds it), check or write the manifest, recover what a crash left (stale
    /// temporary files, segments of hours before `now_ms`'s), read each table's newest `ts`,
    /// compact finished days and apply retention. Recovery and compaction errors are logged and
    /// retried at the next hour; they do not stop recording.
    pub fn open(
        root: &Path,
        node: &str,
        options: WriterOptions,
        now_ms: i64,
    ) -> Result<HistoryWriter, HistoryError> {
        if node.is_empty() || node.contains(['/', '\\']) || node == "." || node == ".." {
            return Err(HistoryError::Invalid {
                path: root.to_path_buf(),
                message: format!("node name {node:?} cannot be a folder name"),
            });
        }
        let dir = root.join(node);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let lock = HistoryLock::acquire(&dir)?;
        for t in Table::ALL {
            let d = dir.join(t.name());
            fs::create_dir_all(&d).map_err(io(&d))?;
        }
        let manifest_path = dir.join(MANIFEST_FILE);
        // Left by a crash (or a full disk) between writing the manifest and renaming it.
        remove_if_exists(&manifest_path.with_extension("tmp"))?;
        if manifest_path.exists() {
            let m = reader::read_manifest(&dir)?;
            if m.node != node {
                return Err(HistoryError::Invalid {
                    path: manifest_path,
                    message: format!("belongs to node {:?}, not {node:?}", m.node),
                });
            }
        }
        let manifest = Manifest {
            format: FORMAT_NAME.into(),
            version: HISTORY_VERSION.into(),
            node: node.into(),
            interval_ms: options.interval_ms,
        };
        let text = serde_json::to_vec_pretty(&manifest).map_err(|e| HistoryError::Invalid {
            path: manifest_path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&manifest_path, &text)?;
        let mut w = HistoryWriter {
            gpu: TableWriter::new(&dir, options.mode),
            mig: TableWriter::new(&dir, options.mode),
            process: TableWriter::new(&dir, options.mode),
            dir,
            options,
            latest_ts: now_ms,
            _lock: lock,
        };
        if let Err(e) = w.recover(now_ms.div_euclid(HOUR_MS)) {
            log::warn!("history: recovery: {e} (retried at the next hour)");
        }
        w.gpu.newest = newest_ts::<GpuRow>(&w.gpu.dir);
        w.mig.newest = newest_ts::<MigRow>(&w.mig.dir);
        w.process.newest = newest_ts::<ProcessRow>(&w.process.dir);
        if let Some(t) = w.newest_ts().filter(|t| *t > now_ms) {
            log::warn!(
                "history: {} holds rows up to {}, after the time now ({}): rows until then are \
                 dropped as duplicates (the clock went back, or a simulated clock restarted)",
                w.dir.display(),
                format_ms(t),
                format_ms(now_ms)
            );
        }
        // A day that cannot be compacted stays hourly (readers read it as it is); it must not
        // stop recording, and the next rotation retries it (and reports the error).
        if let Err(e) = w.compact(now_ms) {
            log::warn!("history: daily compaction: {e}");
        }
        w.enforce_retention()?;
        Ok(w)
    }

    /// The node folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The newest `ts` of any table (files read at open, and rows written since).
    pub fn newest_ts(&self) -> Option<i64> {
        self.gpu
            .newest
            .max(self.mig.newest)
            .max(self.process.newest)
    }

    fn recover(&mut self, current_hour: i64) -> Result<(), HistoryError> {
        let mut first_err = None;
        for t in Table::ALL {
            let d = self.dir.join(t.name());
            let r = list_names(&d).and_then(|names| match t {
                Table::Gpu => recover_table::<GpuRow>(&d, &names, current_hour),
                Table::Mig => recover_table::<MigRow>(&d, &names, current_hour),
                Table::Process => recover_table::<ProcessRow>(&d, &names, current_hour),
            });
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Append the rows of closed intervals (each table's rows all or none); rotates, compacts
    /// and applies retention when a new hour starts. Rows whose table already holds their
    /// interval are dropped; see [`WriteReport`].
    #[must_use = "rows may have been lost or dropped: see the report"]
    pub fn write(&mut self, rows: &Rows) -> WriteReport {
        let mut report = WriteReport::default();
        let mut rotated = self.gpu.write(&rows.gpu, &mut report, 0);
        rotated |= self.mig.write(&rows.mig, &mut report, 1);
        rotated |= self.process.write(&rows.process, &mut report, 2);
        if let Some(ts) = rows.gpu.iter().map(|r| r.ts).max() {
            self.latest_ts = self.latest_ts.max(ts);
        }
        if rotated {
            // Retention runs even when compaction fails (a full disk must not stay full).
            if let Err(e) = self.compact(self.latest_ts) {
                report.errors.push(e);
            }
            if let Err(e) = self.enforce_retention() {
                report.errors.push(e);
            }
        }
        report
    }

    /// Merge the hourly files of every UTC day before the one of `now_ms` into day files
    /// ([`compact`]).
    fn compact(&mut self, now_ms: i64) -> Result<(), HistoryError> {
        let day = now_ms.div_euclid(HOUR_MS).div_euclid(24);
        let mut first_err = None;
        for t in Table::ALL {
            if let Err(e) = compact::compact_table(&self.dir.join(t.name()), t, day) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Close every open segment into Parquet and apply retention (end of `tessera simulate`).
    pub fn finish(mut self) -> Result<(), HistoryError> {
        let next = self.latest_ts.div_euclid(HOUR_MS) + 1;
        self.gpu.rotate(next)?;
        self.mig.rotate(next)?;
        self.process.rotate(next)?;
        let compacted = self.compact(self.latest_ts);
        self.enforce_retention()?;
        compacted
    }

    /// Delete closed files older than the retention, then the oldest until under `max_bytes`.
    pub fn enforce_retention(&mut self) -> Result<(), HistoryError> {
        let cutoff_hour = (self.latest_ts - self.options.retention_ms).div_euclid(HOUR_MS);
        let mut closed = Vec::new();
        let mut total = 0u64;
        for t in Table::ALL {
            let d = self.dir.join(t.name());
            for entry in fs::read_dir(&d).map_err(io(&d))? {
                let entry = entry.map_err(io(&d))?;
                let path = entry.path();
                let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
                let name = entry.file_name().to_string_lossy().into_owned();
                // Hourly and day files alike: a file goes when its last hour is past the
                // cutoff; by size, the oldest first.
                match compact::file_hours(&name) {
                    Some((_, last)) if last < cutoff_hour => remove_if_exists(&path)?,
                    Some((first, _)) => {
                        total += size;
                        closed.push((first, size, path));
                    }
                    None => total += size,
                }
            }
        }
        closed.sort();
        for (_, size, path) in closed {
            if total <= self.options.max_bytes {
                break;
            }
            remove_if_exists(&path)?;
            total = total.saturating_sub(size);
        }
        Ok(())
    }
}

/// `2026-11-02T14:00:10Z` for unix ms (for messages).
pub(crate) fn format_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| format!("{ms} ms"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::reader::read_node_dir;

    /// Rows of `gpus` GPUs for the intervals ending at `ts`, one interval each.
    fn gpu_rows(ts: &[i64], gpus: u32) -> Vec<GpuRow> {
        let mut out = Vec::new();
        for &t in ts {
            for g in 0..gpus {
                out.push(GpuRow {
                    ts: t,
                    interval_ms: 10_000,
                    node: "n1".into(),
                    gpu: g,
                    uuid: format!("GPU-{g}"),
                    samples: 10,
                    model: "NVIDIA H100 80GB HBM3".into(),
                    status: "ok".into(),
                    busy_mean: Some(0.5),
                    busy_max: Some(1.0),
                    sm_active_mean: None,
                    sm_active_max: None,
                    sm_occupancy_mean: None,
                    memory_controller_mean: None,
                    memory_used_max_bytes: Some(1 << 30),
                    memory_total_bytes: Some(80 << 30),
                    power_mean_watts: Some(300.0),
                    energy_delta_joules: Some(3000.0),
                    temperature_max_celsius: Some(50.0),
                    xid_count: 0,
                    mig_enabled: Some(false),
                });
            }
        }
        out
    }

    const H0: i64 = 498_216 * HOUR_MS; // 2026-11-02T00

    fn open(root: &Path, now: i64) -> HistoryWriter {
        HistoryWriter::open(root, "n1", WriterOptions::default(), now).unwrap()
    }

    fn write(w: &mut HistoryWriter, gpu: Vec<GpuRow>) -> WriteReport {
        w.write(&Rows {
            gpu,
            ..Rows::default()
        })
    }

    /// Hour 0 in an open segment, then the first row of hour 1 rotates it.
    fn rotate_with_crash_at(step: u8) -> (tempfile::TempDir, Vec<GpuRow>) {
        let tmp = tempfile::tempdir().unwrap();
        let first: Vec<i64> = (1..=6).map(|i| H0 + i * 10_000).collect();
        let mut expected = gpu_rows(&first, 2);
        let mut w = open(tmp.path(), H0);
        let r = write(&mut w, expected.clone());
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        CRASH_AT.with(|c| c.set(step));
        let next = gpu_rows(&[H0 + HOUR_MS + 10_000], 2);
        let r = write(&mut w, next.clone());
        CRASH_AT.with(|c| c.set(0));
        assert_eq!(r.errors.is_empty(), step == 0, "{:?}", r.errors);
        // The rows of the new hour are written whatever happened to the old one, and before
        // it is converted: a kill during the conversion does not take them.
        assert_eq!(r.written[0], 2);
        if step > 0 {
            let seen = CRASH_SEEN.with(|c| c.take());
            let header = 36; // {"tessera_history":1,"table":"gpu"}\n
            assert!(
                seen.iter()
                    .any(|(n, len)| n == "2026-11-02T01.open.jsonl" && *len > header),
                "step {step}: {seen:?}"
            );
        }
        expected.extend(next);
        drop(w); // kill -9: nothing more runs
        (tmp, expected)
    }

    #[test]
    fn a_crash_at_any_step_of_a_rotation_neither_loses_nor_doubles_rows() {
        for step in 0..=3 {
            let (tmp, expected) = rotate_with_crash_at(step);
            let dir = tmp.path().join("n1/gpu");
            // Readers see every row once at every step (a closing segment is not read).
            let h = read_node_dir(&tmp.path().join("n1")).unwrap();
            let mut got = h.gpu.clone();
            got.sort_by_key(|r| (r.ts, r.gpu));
            if step == 2 {
                // Between the segment's rename and the Parquet file's: the hour is hidden
                // until the next start finishes it.
                assert_eq!(got.len(), 2, "step {step}");
            } else {
                assert_eq!(got, expected, "step {step}");
            }
            // Restart (twice: the second finds nothing to do).
            for _ in 0..2 {
                drop(open(tmp.path(), H0 + HOUR_MS + 20_000));
                let names = list_names(&dir).unwrap();
                assert_eq!(
                    names,
                    ["2026-11-02T00.parquet", "2026-11-02T01.open.jsonl"],
                    "step {step}"
                );
                let mut got = read_node_dir(&tmp.path().join("n1")).unwrap().gpu;
                got.sort_by_key(|r| (r.ts, r.gpu));
                assert_eq!(got, expected, "step {step}");
            }
        }
    }

    #[test]
    fn recovery_is_the_same_in_every_listing_order() {
        // Every crash state of hour 0, recovered with its names in both orders.
        for step in 1..=3 {
            for reverse in [false, true] {
                let (tmp, expected) = rotate_with_crash_at(step);
                let dir = tmp.path().join("n1/gpu");
                let mut names = list_names(&dir).unwrap();
                assert!(names.len() >= 3, "{names:?}");
                if reverse {
                    names.reverse();
                }
                recover_table::<GpuRow>(&dir, &names, H0 / HOUR_MS + 1)
                    .unwrap_or_else(|e| panic!("step {step}, reverse {reverse}, {names:?}: {e}"));
                // A stale listing (files already gone) is no error either.
                recover_table::<GpuRow>(&dir, &names, H0 / HOUR_MS + 1).unwrap();
                let mut got = read_node_dir(&tmp.path().join("n1")).unwrap().gpu;
                got.sort_by_key(|r| (r.ts, r.gpu));
                assert_eq!(got, expected, "step {step}, reverse {reverse}");
            }
        }
    }

    #[test]
    fn the_same_segment_name_twice_is_converted_twice() {
        // Hour 0 closed, then rows of hour 0 again in a new segment (a new table folder's
        // newest ts is reset here by hand, as another writer's rows would): the second
        // segment has the same name but other bytes, so it is not taken for converted.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("n1/gpu");
        let mut w = open(tmp.path(), H0);
        let _ = write(&mut w, gpu_rows(&[H0 + 10_000], 1));
        let _ = write(&mut w, gpu_rows(&[H0 + HOUR_MS + 10_000], 1));
        drop(w);
        let mut other = gpu_rows(&[H0 + 20_000], 1);
        other[0].busy_mean = Some(0.25);
        let text = format!(
            "{{\"tessera_history\":1,\"table\":\"gpu\"}}\n{}\n",
            serde_json::to_string(&other[0]).unwrap()
        );
        fs::write(dir.join("2026-11-02T00.closing.jsonl"), text).unwrap();
        drop(open(tmp.path(), H0 + 2 * HOUR_MS));
        let h = read_node_dir(&tmp.path().join("n1")).unwrap();
        assert_eq!(h.gpu.len(), 3);
        assert!(dir.join("2026-11-02T00-1.parquet").exists());
    }

    #[test]
    fn an_unparsable_segment_is_set_aside_and_recording_goes_on() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("n1/gpu");
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("2026-11-02T00.open.jsonl"),
            "{\"tessera_history\":1,\"table\":\"gpu\"}\nnot json\n{}\n",
        )
        .unwrap();
        let mut w = open(tmp.path(), H0 + 2 * HOUR_MS);
        assert!(dir.join("2026-11-02T00.open.jsonl.unreadable").exists());
        let r = write(&mut w, gpu_rows(&[H0 + 2 * HOUR_MS + 10_000], 1));
        assert_eq!(r.written[0], 1);
    }

    #[test]
    fn duplicates_are_dropped_within_a_batch_across_batches_and_restarts() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = open(tmp.path(), H0);
        let t: Vec<i64> = (1..=3).map(|i| H0 + i * 10_000).collect();
        let r = write(&mut w, gpu_rows(&t, 2));
        assert_eq!((r.written[0], r.duplicates[0]), (6, 0));
        // Same intervals again, and one that goes back inside a batch.
        let mut batch = gpu_rows(&[t[2], H0 + 40_000, H0 + 30_000], 2);
        batch.extend(gpu_rows(&[H0 + 50_000], 2));
        let r = write(&mut w, batch);
        assert_eq!((r.written[0], r.duplicates[0]), (4, 4));
        drop(w);
        // After a restart the files say where the table ends.
        let mut w = open(tmp.path(), H0);
        assert_eq!(w.newest_ts(), Some(H0 + 50_000));
        let r = write(&mut w, gpu_rows(&[H0 + 50_000, H0 + 60_000], 2));
        assert_eq!((r.written[0], r.duplicates[0]), (2, 2));
        let h = read_node_dir(&tmp.path().join("n1")).unwrap();
        let ts: Vec<i64> = h.gpu.iter().filter(|r| r.gpu == 0).map(|r| r.ts).collect();
        assert_eq!(ts, (1..=6).map(|i| H0 + i * 10_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_append_leaves_no_part_of_its_batch() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = open(tmp.path(), H0);
        let _ = write(&mut w, gpu_rows(&[H0 + 10_000], 2));
        let path = w.gpu.dir.join("2026-11-02T00.open.jsonl");
        let before = fs::read(&path).unwrap();
        // Swap the segment's file for one opened read-only: the append fails.
        if let Some(seg) = w.gpu.seg.as_mut()
            && let Some((f, _)) = seg.file.as_mut()
        {
            *f = File::open(&path).unwrap();
        }
        let r = write(&mut w, gpu_rows(&[H0 + 20_000], 2));
        assert_eq!((r.written[0], r.lost[0], r.errors.len()), (0, 2, 1));
        assert_eq!(fs::read(&path).unwrap(), before);
    }

    #[test]
    fn the_manifest_write_cleans_up_after_itself() {
        let tmp = tempfile::tempdir().unwrap();
        // The target is a folder: writing succeeds, the rename fails.
        let target = tmp.path().join("m.json");
        fs::create_dir(&target).unwrap();
        fs::create_dir(target.join("x")).unwrap();
        assert!(write_atomic(&target, b"{}").is_err());
        assert!(!tmp.path().join("m.tmp").exists());
    }
}
