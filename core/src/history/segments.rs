//! One table's segments on disk: an open JSONL segment closed into an hourly Parquet file, and the
//! idempotent recovery of whatever a crash left (`recover_table`): stale temporary files deleted,
//! closing segments finished, open segments of past hours closed. Closing writes the Parquet file
//! under a temporary name with the segment's identity ([`SEGMENT_KEY`]) in its metadata, renames
//! the segment to `.closing.jsonl`, renames the Parquet file into place and deletes the segment;
//! a closing segment whose Parquet file exists is only deleted. So a `kill -9` at any step loses
//! and doubles nothing, whatever order the directory lists the files in.
//!
//! Used by the writer ([`super::writer`]), which decides when to rotate; this module appends no
//! rows and keeps no state.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;

use super::files::{
    CLOSING_SUFFIX, HistoryError, OPEN_SUFFIX, SEGMENT_KEY, UNREADABLE_SUFFIX, catch_panic,
    compacted_from, day_name, hour_name, io, list_names, parquet_properties, parse_hour,
    parse_hour_file, remove_if_exists,
};
use super::reader;
use super::schema::HistoryRow;

#[cfg(test)]
thread_local! {
    /// A crash-test hook: in unit tests, fails the step named (1: Parquet staged, 2: segment
    /// renamed to closing, 3: Parquet renamed into place), leaving the files as a `kill -9` would.
    pub(crate) static CRASH_AT: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
    /// The table folder's files (name, bytes) when the injected crash came.
    pub(crate) static CRASH_SEEN: std::cell::RefCell<Vec<(String, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

pub(super) fn crash_point(step: u8, dir: &Path) -> Result<(), HistoryError> {
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
pub(super) fn stage_parquet<R: HistoryRow>(
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
    let day_file = dir.join(format!("{}.parquet", day_name(hour.div_euclid(24))));
    let taken = if day_file.exists() {
        compacted_from(&day_file)?
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

pub(super) fn write_parquet_file<R: HistoryRow>(
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
pub(super) fn parquet_key_value(path: &Path, key: &str) -> Result<Option<String>, HistoryError> {
    catch_panic(path, "footer", || parquet_key_value_of(path, key))
}

pub(super) fn parquet_key_value_of(path: &Path, key: &str) -> Result<Option<String>, HistoryError> {
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

pub(super) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The identity of a segment's contents ([`SEGMENT_KEY`]).
pub(super) fn segment_marker(hour: i64, bytes: &[u8]) -> String {
    format!(
        "{{\"file\":\"{}{OPEN_SUFFIX}\",\"bytes\":{},\"fnv1a64\":\"{:016x}\"}}",
        hour_name(hour),
        bytes.len(),
        fnv1a64(bytes)
    )
}

pub(super) fn open_path(dir: &Path, hour: i64) -> PathBuf {
    dir.join(format!("{}{OPEN_SUFFIX}", hour_name(hour)))
}

pub(super) fn closing_path(dir: &Path, hour: i64) -> PathBuf {
    dir.join(format!("{}{CLOSING_SUFFIX}", hour_name(hour)))
}

/// Whether an hourly Parquet file of `hour` in `dir` was made from the segment `marker` names.
pub(super) fn converted(dir: &Path, hour: i64, marker: &str) -> Result<bool, HistoryError> {
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if parse_hour_file(name) != Some(hour) {
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
pub(super) fn set_aside(path: &Path, e: &HistoryError) -> Result<(), HistoryError> {
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
pub(super) fn close_segment<R: HistoryRow>(dir: &Path, hour: i64) -> Result<(), HistoryError> {
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
pub(super) fn finish_closing<R: HistoryRow>(dir: &Path, hour: i64) -> Result<(), HistoryError> {
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

/// Crash recovery and rotation of one table folder, given its file names (in any order: the
/// result does not depend on it, and running it again changes nothing): delete temporary files,
/// finish closing segments, close open segments of hours before `current_hour`. Every file is
/// tried; the first error is returned.
pub(super) fn recover_table<R: HistoryRow>(
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
pub(super) fn newest_ts<R: HistoryRow>(dir: &Path) -> Option<i64> {
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

/// Cut a torn last line (no trailing newline) off an open segment before appending to it.
pub(super) fn repair_torn_tail(path: &Path) -> Result<(), HistoryError> {
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
