//! [`HistoryWriter`]: writes the rows of one node into its folder, as `docs/history-format.md`
//! says: the manifest, one open JSONL segment per table (header line, then one row per line,
//! flushed after every interval), hourly rotation into Parquet + zstd (by the rows' `ts` hour,
//! written to a temporary name and renamed), recovery of open segments of past hours left by a
//! crash, daily compaction of finished days ([`super::compact`], at open and at each new hour),
//! and retention by age and by total size.
//!
//! [`WriterMode::Direct`] skips the JSONL (the hour is kept in memory and written as Parquet at
//! rotation): for `tessera simulate`, where there is no crash to survive. Everything else is the
//! same code.
//!
//! Errors are returned ([`HistoryError`]), never panics; the exporter counts and logs them and
//! keeps serving. This module does not aggregate (see [`super::aggregate`]) and does not decide
//! where the folder is.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use serde::{Deserialize, Serialize};

use super::aggregate::{GpuRow, MigRow, ProcessRow, Rows};
use super::compact;
use super::reader;
use super::schema::{FORMAT_NAME, HISTORY_VERSION, HistoryRow, MANIFEST_FILE, Table};

const HOUR_MS: i64 = 3_600_000;

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
        /// `line N` (JSONL) or `row N` (Parquet), or `schema`.
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
    /// Open JSONL segments flushed every interval, Parquet at rotation (the exporter).
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

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), HistoryError> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, bytes).map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

/// How every history Parquet file is written (hourly and day files): zstd, and the default
/// column statistics, whose `ts` min/max readers use for time ranges without reading data
/// (`reader::footer_summary`).
pub(super) fn parquet_properties() -> WriterPropertiesBuilder {
    WriterProperties::builder().set_compression(Compression::ZSTD(ZstdLevel::default()))
}

/// Write `rows` as one Parquet + zstd file `<dir>/<hour>.parquet` (or `<hour>-N.parquet` when
/// taken), through a temporary name. Returns the path.
pub fn write_parquet<R: HistoryRow>(
    dir: &Path,
    hour: i64,
    rows: &[R],
) -> Result<PathBuf, HistoryError> {
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
    let pq = |e: parquet::errors::ParquetError| HistoryError::Parquet {
        path: tmp.clone(),
        message: e.to_string(),
    };
    let schema = R::TABLE.arrow_schema();
    let file = File::create(&tmp).map_err(io(&tmp))?;
    let props = parquet_properties().build();
    let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(pq)?;
    for chunk in rows.chunks(65_536) {
        let batch = RecordBatch::try_new(schema.clone(), R::to_columns(chunk)).map_err(|e| {
            HistoryError::Parquet {
                path: tmp.clone(),
                message: e.to_string(),
            }
        })?;
        w.write(&batch).map_err(pq)?;
    }
    w.close().map_err(pq)?;
    fs::rename(&tmp, &path).map_err(io(&path))?;
    Ok(path)
}

struct Segment<R> {
    hour: i64,
    file: Option<BufWriter<File>>,
    buffer: Vec<R>,
}

struct TableWriter<R> {
    dir: PathBuf,
    mode: WriterMode,
    seg: Option<Segment<R>>,
}

fn open_path(dir: &Path, hour: i64) -> PathBuf {
    dir.join(format!("{}.open.jsonl", hour_name(hour)))
}

impl<R: HistoryRow> TableWriter<R> {
    fn new(node_dir: &Path, mode: WriterMode) -> Self {
        TableWriter {
            dir: node_dir.join(R::TABLE.name()),
            mode,
            seg: None,
        }
    }

    fn open_path(&self, hour: i64) -> PathBuf {
        open_path(&self.dir, hour)
    }

    /// Append rows; returns whether a rotation happened.
    fn write(&mut self, rows: &[R]) -> Result<bool, HistoryError> {
        let mut rotated = false;
        let mut line = Vec::with_capacity(512);
        for row in rows {
            let hour = row.ts().div_euclid(HOUR_MS);
            if self.seg.as_ref().is_some_and(|s| hour > s.hour) {
                self.rotate()?;
                rotated = true;
            }
            if self.seg.is_none() {
                self.start(hour)?;
            }
            let Some(seg) = self.seg.as_mut() else {
                continue;
            };
            match seg.file.as_mut() {
                Some(f) => {
                    line.clear();
                    serde_json::to_writer(&mut line, row).map_err(|e| HistoryError::Invalid {
                        path: self.dir.clone(),
                        message: e.to_string(),
                    })?;
                    line.push(b'\n');
                    if let Err(e) = f.write_all(&line) {
                        let path = open_path(&self.dir, seg.hour);
                        seg.file = None;
                        self.seg = None;
                        return Err(HistoryError::Io { path, source: e });
                    }
                }
                None => seg.buffer.push(row.clone()),
            }
        }
        self.flush()?;
        Ok(rotated)
    }

    fn flush(&mut self) -> Result<(), HistoryError> {
        if let Some(seg) = self.seg.as_mut()
            && let Some(f) = seg.file.as_mut()
            && let Err(e) = f.flush()
        {
            let path = open_path(&self.dir, seg.hour);
            self.seg = None;
            return Err(HistoryError::Io { path, source: e });
        }
        Ok(())
    }

    fn start(&mut self, hour: i64) -> Result<(), HistoryError> {
        let file = match self.mode {
            WriterMode::Direct => None,
            WriterMode::Jsonl => {
                let path = self.open_path(hour);
                let existed = path.exists();
                if existed {
                    repair_torn_tail(&path)?;
                }
                let f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(io(&path))?;
                let mut f = BufWriter::new(f);
                if !existed || fs::metadata(&path).map(|m| m.len() == 0).unwrap_or(true) {
                    writeln!(
                        f,
                        "{{\"tessera_history\":{HISTORY_VERSION},\"table\":\"{}\"}}",
                        R::TABLE.name()
                    )
                    .map_err(io(&path))?;
                }
                Some(f)
            }
        };
        self.seg = Some(Segment {
            hour,
            file,
            buffer: Vec::new(),
        });
        Ok(())
    }

    /// Close the open segment into Parquet.
    fn rotate(&mut self) -> Result<(), HistoryError> {
        let Some(seg) = self.seg.take() else {
            return Ok(());
        };
        match seg.file {
            Some(mut f) => {
                let path = self.open_path(seg.hour);
                f.flush().map_err(io(&path))?;
                drop(f);
                convert_segment::<R>(&self.dir, &path, seg.hour)
            }
            None => {
                if !seg.buffer.is_empty() {
                    write_parquet(&self.dir, seg.hour, &seg.buffer)?;
                }
                Ok(())
            }
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

/// Convert an open JSONL segment into Parquet (torn last line dropped) and delete it.
fn convert_segment<R: HistoryRow>(dir: &Path, path: &Path, hour: i64) -> Result<(), HistoryError> {
    let (rows, _torn) = reader::read_jsonl::<R>(path)?;
    if !rows.is_empty() {
        write_parquet(dir, hour, &rows)?;
    }
    fs::remove_file(path).map_err(io(path))
}

/// Writes one node's history folder.
pub struct HistoryWriter {
    dir: PathBuf,
    options: WriterOptions,
    gpu: TableWriter<GpuRow>,
    mig: TableWriter<MigRow>,
    process: TableWriter<ProcessRow>,
    latest_ts: i64,
}

impl HistoryWriter {
    /// Open (creating if needed) `root/<node>`: check or write the manifest, remove stale
    /// temporary files, convert open segments of hours before `now_ms`'s, apply retention.
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
        for t in Table::ALL {
            let d = dir.join(t.name());
            fs::create_dir_all(&d).map_err(io(&d))?;
        }
        let manifest_path = dir.join(MANIFEST_FILE);
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
        };
        w.recover(now_ms.div_euclid(HOUR_MS))?;
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

    fn recover(&mut self, current_hour: i64) -> Result<(), HistoryError> {
        for t in Table::ALL {
            let d = self.dir.join(t.name());
            for entry in fs::read_dir(&d).map_err(io(&d))? {
                let path = entry.map_err(io(&d))?.path();
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_string();
                if name.ends_with(".tmp") {
                    fs::remove_file(&path).map_err(io(&path))?;
                } else if let Some(stem) = name.strip_suffix(".open.jsonl")
                    && let Some(hour) = parse_hour(stem)
                    && hour < current_hour
                {
                    log::info!(
                        "history: converting {} left by an earlier run",
                        path.display()
                    );
                    match t {
                        Table::Gpu => convert_segment::<GpuRow>(&d, &path, hour)?,
                        Table::Mig => convert_segment::<MigRow>(&d, &path, hour)?,
                        Table::Process => convert_segment::<ProcessRow>(&d, &path, hour)?,
                    }
                }
            }
        }
        Ok(())
    }

    /// Append the rows of closed intervals (flushed before returning); rotates and applies
    /// retention when a new hour starts.
    pub fn write(&mut self, rows: &Rows) -> Result<(), HistoryError> {
        let mut rotated = self.gpu.write(&rows.gpu)?;
        rotated |= self.mig.write(&rows.mig)?;
        rotated |= self.process.write(&rows.process)?;
        if let Some(ts) = rows.gpu.iter().map(|r| r.ts).max() {
            self.latest_ts = self.latest_ts.max(ts);
        }
        if rotated {
            // Retention runs even when compaction fails (a full disk must not stay full).
            let compacted = self.compact(self.latest_ts);
            self.enforce_retention()?;
            compacted?;
        }
        Ok(())
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
        self.gpu.rotate()?;
        self.mig.rotate()?;
        self.process.rotate()?;
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
                    Some((_, last)) if last < cutoff_hour => {
                        fs::remove_file(&path).map_err(io(&path))?;
                    }
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
            fs::remove_file(&path).map_err(io(&path))?;
            total = total.saturating_sub(size);
        }
        Ok(())
    }
}
