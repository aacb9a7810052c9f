//! Daily compaction of a table folder: the hourly Parquet files of a UTC day that is over are
//! merged into one day file `<YYYY-MM-DD>.parquet` (same schema, Parquet + zstd), and then
//! deleted. Readers pay a fixed cost per file (open, footer, a decoder per column chunk), so a
//! week of one table is 7 files instead of 168 (docs/performance.md).
//!
//! Crash safety: the day file is written to a temporary name and renamed; its key-value metadata
//! [`COMPACTED_FROM_KEY`] lists the hourly files it holds, and only then are those deleted. An
//! hourly file listed by a day file of its table folder is *superseded*: readers skip it
//! ([`superseded`](super::files::superseded)) and the next compaction deletes it, so a crash between the rename and the
//! deletes neither loses nor doubles a row. An hourly file of a compacted day that is not listed
//! (written later, e.g. after the clock went back) is read, and merged into the day file by the
//! next compaction.
//!
//! A day that still has an open or closing segment (`.open.jsonl`, `.closing.jsonl`) is left
//! for a later compaction: the Parquet file of that segment may be about to appear, and crash
//! recovery must find it beside its segment.
//!
//! This module does not decide when to compact (the writer does, at each new hour and at open),
//! never touches segments and does not apply retention.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;

use super::files::{
    CLOSING_SUFFIX, COMPACTED_FROM_KEY, HistoryError, OPEN_SUFFIX, compacted_from, day_name, io,
    parquet_properties, parse_hour, parse_hour_file,
};
use super::reader::read_parquet_batches;
use super::schema::Table;

use super::files::HOURS_PER_DAY;

/// Compacts every day before `current_day` (unix ms / 1 day) that still has hourly files in
/// `table_dir` and no segment still open or being closed. Returns the day files written. A day
/// that cannot be compacted (an hourly file that does not read, a full disk) keeps its hourly
/// files as they are, the other days are still compacted, and the first such error is returned
/// at the end.
pub fn compact_table(
    table_dir: &Path,
    table: Table,
    current_day: i64,
) -> Result<Vec<PathBuf>, HistoryError> {
    let mut hourly: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
    // Days with a segment not yet closed into Parquet are not over for this folder: its
    // Parquet file (which may exist already, after a crash) must stay where recovery finds it.
    let mut pending = BTreeSet::new();
    for entry in fs::read_dir(table_dir).map_err(io(table_dir))? {
        let path = entry.map_err(io(table_dir))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(stem) = name
            .strip_suffix(OPEN_SUFFIX)
            .or_else(|| name.strip_suffix(CLOSING_SUFFIX))
            && let Some(h) = parse_hour(stem)
        {
            pending.insert(h.div_euclid(HOURS_PER_DAY));
        }
        if let Some(h) = parse_hour_file(name) {
            let day = h.div_euclid(HOURS_PER_DAY);
            if day < current_day {
                hourly.entry(day).or_default().push(name.to_string());
            }
        }
    }
    let mut written = Vec::new();
    let mut first_err = None;
    for (day, mut names) in hourly {
        if pending.contains(&day) {
            continue;
        }
        names.sort();
        match compact_day(table_dir, table, day, &names) {
            Ok(p) => written.push(p),
            Err(e) => {
                // Leave no temporary file behind; the hourly files are untouched.
                let _ = fs::remove_file(table_dir.join(format!("{}.parquet.tmp", day_name(day))));
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(written),
    }
}

/// Merges `hourly` (file names in `table_dir`, all of `day`) and the existing day file, if any,
/// into the day file, then deletes the hourly files.
fn compact_day(
    table_dir: &Path,
    table: Table,
    day: i64,
    hourly: &[String],
) -> Result<PathBuf, HistoryError> {
    let path = table_dir.join(format!("{}.parquet", day_name(day)));
    let mut listed: BTreeSet<String> = BTreeSet::new();
    let mut inputs: Vec<PathBuf> = Vec::new();
    if path.exists() {
        listed.extend(compacted_from(&path)?);
        inputs.push(path.clone());
    }
    let fresh: Vec<&String> = hourly.iter().filter(|n| !listed.contains(*n)).collect();
    if !fresh.is_empty() {
        inputs.extend(fresh.iter().map(|n| table_dir.join(n)));
        listed.extend(fresh.iter().map(|n| n.to_string()));
        write_merged(&path, table, &inputs, &listed)?;
    }
    for name in hourly {
        let p = table_dir.join(name);
        fs::remove_file(&p).map_err(io(&p))?;
    }
    Ok(path)
}

fn write_merged(
    path: &Path,
    table: Table,
    inputs: &[PathBuf],
    listed: &BTreeSet<String>,
) -> Result<(), HistoryError> {
    let tmp = path.with_extension("parquet.tmp");
    let pq = |e: parquet::errors::ParquetError| HistoryError::Parquet {
        path: tmp.clone(),
        message: e.to_string(),
    };
    let names: Vec<&String> = listed.iter().collect();
    let list = serde_json::to_string(&names).map_err(|e| HistoryError::Invalid {
        path: tmp.clone(),
        message: e.to_string(),
    })?;
    let props = parquet_properties()
        .set_key_value_metadata(Some(vec![KeyValue::new(COMPACTED_FROM_KEY.into(), list)]))
        .build();
    let file = File::create(&tmp).map_err(io(&tmp))?;
    let mut w = ArrowWriter::try_new(file, table.arrow_schema(), Some(props)).map_err(pq)?;
    for input in inputs {
        for batch in read_parquet_batches(input, table)? {
            w.write(&batch).map_err(pq)?;
        }
    }
    let file = w.into_inner().map_err(pq)?;
    file.sync_all().map_err(io(&tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(io(path))
}
