//! The strict history reader (arrow/parquet; never polars): a node folder's manifest, closed
//! Parquet files and open JSONL segments, as typed rows or arrow `RecordBatch`es.
//!
//! Strict as `docs/history-format.md` requires: a format version outside
//! `OLDEST_VERSION..=HISTORY_VERSION`, an unknown, missing (but for a column added after the
//! oldest version, read as null) or mistyped column, a null in a non-nullable column, or a bad JSONL line other than the last is
//! an error naming the file, the line or row, and the column. A torn last line of an open segment
//! (no trailing newline, or not valid JSON) is skipped and counted exactly. Only `*.parquet` and
//! `*.open.jsonl` are read: a segment being closed (`.closing.jsonl`), one set aside
//! (`.unreadable`), temporary files (`.tmp`) and the lock file are not history. A corrupt Parquet
//! file is an error naming it and the place (`footer`, `schema`, `row group N`, the column),
//! also where the parquet crate would panic.
//!
//! This module writes nothing and takes no lock (it may read while a writer writes).

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use arrow_array::{ArrayRef, RecordBatch};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use serde_json::{Map, Value};

use super::aggregate::{GpuRow, MigRow, ProcessRow};
use super::files::{HistoryError, Manifest, PANIC_NOTE, catch_panic, io, superseded};
use super::schema::{
    ColType, FORMAT_NAME, HISTORY_VERSION, HistoryRow, MANIFEST_FILE, OLDEST_VERSION, Table,
};

/// Everything in one node folder.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeHistory {
    pub manifest: Manifest,
    pub gpu: Vec<GpuRow>,
    pub mig: Vec<MigRow>,
    pub process: Vec<ProcessRow>,
    /// Torn last lines of open segments that were skipped.
    pub skipped_lines: u64,
}

/// Read and check the manifest of a node folder.
pub fn read_manifest(dir: &Path) -> Result<Manifest, HistoryError> {
    let path = dir.join(MANIFEST_FILE);
    let text = fs::read_to_string(&path).map_err(io(&path))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| HistoryError::Invalid {
        path: path.clone(),
        message: format!("not a manifest: {e}"),
    })?;
    if v.get("format").and_then(Value::as_str) != Some(FORMAT_NAME) {
        return Err(HistoryError::Invalid {
            path,
            message: format!("\"format\" is not {FORMAT_NAME:?}"),
        });
    }
    match v.get("version").and_then(Value::as_u64) {
        Some(found)
            if (u64::from(OLDEST_VERSION)..=u64::from(HISTORY_VERSION)).contains(&found) => {}
        Some(found) => {
            return Err(HistoryError::Version {
                path,
                found,
                expected: HISTORY_VERSION,
            });
        }
        None => {
            return Err(HistoryError::Invalid {
                path,
                message: "no integer \"version\"".into(),
            });
        }
    }
    serde_json::from_value(v).map_err(|e| HistoryError::Invalid {
        path,
        message: e.to_string(),
    })
}

/// Read every row of a node folder (closed files in hour order, then open segments).
pub fn read_node_dir(dir: &Path) -> Result<NodeHistory, HistoryError> {
    let manifest = read_manifest(dir)?;
    let (gpu, a) = read_table::<GpuRow>(dir)?;
    let (mig, b) = read_table::<MigRow>(dir)?;
    let (process, c) = read_table::<ProcessRow>(dir)?;
    Ok(NodeHistory {
        manifest,
        gpu,
        mig,
        process,
        skipped_lines: a + b + c,
    })
}

/// The data files of one table in a node folder, sorted by name (so by time: a day file
/// `YYYY-MM-DD` sorts before that day's hourly files), Parquet first; hourly files that a day file
/// holds already ([`super::files::superseded`]) are left out.
pub fn table_files(dir: &Path, table: Table) -> Result<Vec<PathBuf>, HistoryError> {
    let d = dir.join(table.name());
    let mut files = Vec::new();
    if !d.exists() {
        return Ok(files);
    }
    let superseded = superseded(&d)?;
    for entry in fs::read_dir(&d).map_err(io(&d))? {
        let path = entry.map_err(io(&d))?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if superseded.contains(name) {
            continue;
        }
        if name.ends_with(".parquet") || name.ends_with(".open.jsonl") {
            files.push(path);
        }
    }
    files.sort_by_key(|p| {
        let open = p.to_string_lossy().ends_with(".open.jsonl");
        (open, p.clone())
    });
    Ok(files)
}

/// Every row of one table of a node folder, and the number of torn lines skipped.
pub fn read_table<R: HistoryRow>(dir: &Path) -> Result<(Vec<R>, u64), HistoryError> {
    let mut rows = Vec::new();
    let mut skipped = 0;
    for path in table_files(dir, R::TABLE)? {
        if path.to_string_lossy().ends_with(".parquet") {
            rows.extend(read_parquet::<R>(&path)?);
        } else {
            let (r, s) = read_jsonl::<R>(&path)?;
            rows.extend(r);
            skipped += s;
        }
    }
    Ok((rows, skipped))
}

/// One table of a node folder as arrow batches (Parquet and open segments alike), with the
/// number of torn lines skipped.
pub fn read_table_batches(
    dir: &Path,
    table: Table,
) -> Result<(Vec<RecordBatch>, u64), HistoryError> {
    fn go<R: HistoryRow>(dir: &Path) -> Result<(Vec<RecordBatch>, u64), HistoryError> {
        let (rows, skipped) = read_table::<R>(dir)?;
        let batch =
            RecordBatch::try_new(R::TABLE.arrow_schema(), R::to_columns(&rows)).map_err(|e| {
                HistoryError::Invalid {
                    path: dir.to_path_buf(),
                    message: e.to_string(),
                }
            })?;
        Ok((vec![batch], skipped))
    }
    match table {
        Table::Gpu => go::<GpuRow>(dir),
        Table::Mig => go::<MigRow>(dir),
        Table::Process => go::<ProcessRow>(dir),
    }
}

/// The batches of one Parquet file, checked against `table` and with columns in its order.
/// Errors name the file and where: `footer`, `schema`, or the row group (and the column, when
/// one column alone fails to decode).
pub fn read_parquet_batches(path: &Path, table: Table) -> Result<Vec<RecordBatch>, HistoryError> {
    let at = |place: &str, e: &dyn std::fmt::Display| HistoryError::Parquet {
        path: path.to_path_buf(),
        message: format!("{place}: {e}"),
    };
    let col_err = |column: &str, message: String| HistoryError::Column {
        path: path.to_path_buf(),
        column: column.to_string(),
        place: "schema".into(),
        message,
    };
    let file = File::open(path).map_err(io(path))?;
    let meta = catch_panic(path, "footer", || {
        ArrowReaderMetadata::load(&file, ArrowReaderOptions::default())
            .map_err(|e| at("footer", &e))
    })?;
    let schema = meta.schema().clone();
    for f in schema.fields() {
        match table.column(f.name()) {
            None => {
                return Err(col_err(
                    f.name(),
                    format!("unknown column in table {}", table.name()),
                ));
            }
            Some(c) if c.ty.data_type() != *f.data_type() => {
                return Err(col_err(
                    f.name(),
                    format!(
                        "type {} where {} is expected",
                        f.data_type(),
                        c.ty.data_type()
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    // Each table column's index in the file; `None` for a column added after the file's
    // version (read as null).
    let mut order = Vec::new();
    for c in table.columns() {
        match schema.index_of(c.name) {
            Ok(i) => order.push(Some(i)),
            Err(_) if c.may_be_missing() => order.push(None),
            Err(_) => return Err(col_err(c.name, "missing column".into())),
        }
    }
    check_chunks(path, &meta, file.metadata().map_err(io(path))?.len())?;
    let mut out = Vec::new();
    for group in 0..meta.metadata().num_row_groups() {
        let place = format!("row group {group}");
        super::pages::check_pages(&file, meta.metadata(), group).map_err(|(column, message)| {
            HistoryError::Column {
                path: path.to_path_buf(),
                column,
                place: place.clone(),
                message,
            }
        })?;
        let decoded = catch_panic(path, &place, || {
            let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(
                file.try_clone().map_err(io(path))?,
                meta.clone(),
            )
            .with_row_groups(vec![group])
            .build()
            .map_err(|e| at(&place, &e))?;
            let mut batches = Vec::new();
            for batch in reader {
                let batch = batch.map_err(|e| locate(path, &file, &meta, group, &e))?;
                let columns: Vec<ArrayRef> = order
                    .iter()
                    .zip(table.columns())
                    .map(|(&i, c)| match i {
                        Some(i) => batch.column(i).clone(),
                        None => c.ty.null_array(batch.num_rows()),
                    })
                    .collect();
                batches.push(
                    RecordBatch::try_new(table.arrow_schema(), columns)
                        .map_err(|e| at(&place, &e))?,
                );
            }
            Ok(batches)
        });
        match decoded {
            Ok(b) => out.extend(b),
            // A panic of the decoder: find the column that fails alone.
            Err(HistoryError::Parquet { message, .. }) if message.contains(PANIC_NOTE) => {
                return Err(locate(path, &file, &meta, group, &message));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Checks what the footer says of each column chunk against the file before anything is
/// decoded: where it is (inside the file) and its sizes (not negative; the parquet crate panics
/// on a negative offset or size).
fn check_chunks(
    path: &Path,
    meta: &ArrowReaderMetadata,
    file_len: u64,
) -> Result<(), HistoryError> {
    for (g, rg) in meta.metadata().row_groups().iter().enumerate() {
        if rg.num_rows() < 0 {
            return Err(HistoryError::Parquet {
                path: path.to_path_buf(),
                message: format!("row group {g}: {} rows", rg.num_rows()),
            });
        }
        for c in rg.columns() {
            let start = c
                .dictionary_page_offset()
                .unwrap_or_else(|| c.data_page_offset());
            let len = c.compressed_size();
            let inside = start >= 0
                && len >= 0
                && c.uncompressed_size() >= 0
                && (start as u64)
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= file_len);
            if !inside {
                return Err(HistoryError::Column {
                    path: path.to_path_buf(),
                    column: c.column_path().string(),
                    place: format!("row group {g}"),
                    message: format!(
                        "column chunk at byte {start}, {len} bytes ({} uncompressed), in a file of {file_len} bytes",
                        c.uncompressed_size()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The error of a row group that does not decode, naming the first column that does not decode
/// alone (error path only: each column of the row group is read again).
fn locate(
    path: &Path,
    file: &File,
    meta: &ArrowReaderMetadata,
    group: usize,
    e: &dyn std::fmt::Display,
) -> HistoryError {
    let descr = meta.metadata().file_metadata().schema_descr_ptr();
    for c in 0..descr.num_columns() {
        let reader = file.try_clone().ok().and_then(|f| {
            ParquetRecordBatchReaderBuilder::new_with_metadata(f, meta.clone())
                .with_row_groups(vec![group])
                .with_projection(ProjectionMask::leaves(&descr, [c]))
                .build()
                .ok()
        });
        let fails = match reader {
            Some(mut r) => catch_panic(path, "", || Ok(r.any(|b| b.is_err()))).unwrap_or(true),
            None => true,
        };
        if fails {
            return HistoryError::Column {
                path: path.to_path_buf(),
                column: descr.column(c).name().to_string(),
                place: format!("row group {group}"),
                message: e.to_string(),
            };
        }
    }
    HistoryError::Parquet {
        path: path.to_path_buf(),
        message: format!("row group {group}: {e}"),
    }
}

/// The rows of one Parquet file.
pub fn read_parquet<R: HistoryRow>(path: &Path) -> Result<Vec<R>, HistoryError> {
    let mut rows = Vec::new();
    for batch in read_parquet_batches(path, R::TABLE)? {
        let offset = rows.len();
        let r = R::from_columns(batch.columns()).map_err(|(column, row, message)| {
            HistoryError::Column {
                path: path.to_path_buf(),
                column: column.into(),
                place: format!("row {}", offset + row),
                message,
            }
        })?;
        rows.extend(r);
    }
    Ok(rows)
}

fn type_ok(ty: ColType, v: &Value) -> bool {
    match ty {
        ColType::Int64 => v.as_i64().is_some(),
        ColType::UInt32 => v.as_u64().is_some_and(|n| n <= u64::from(u32::MAX)),
        ColType::UInt64 => v.as_u64().is_some(),
        ColType::Float64 => v.is_number(),
        ColType::Utf8 => v.is_string(),
        ColType::Bool => v.is_boolean(),
    }
}

/// The rows of an open JSONL segment and the number of torn last lines skipped (0 or 1).
pub fn read_jsonl<R: HistoryRow>(path: &Path) -> Result<(Vec<R>, u64), HistoryError> {
    let bytes = fs::read(path).map_err(io(path))?;
    parse_jsonl(path, &bytes)
}

/// [`read_jsonl`] of a segment's bytes (`path` names them in errors). A bad line other than the
/// last (not UTF-8, not JSON, not an object of the table's columns and types) is an error naming
/// the line; a torn last line (no newline, or not JSON) is skipped and counted.
pub fn parse_jsonl<R: HistoryRow>(
    path: &Path,
    bytes: &[u8],
) -> Result<(Vec<R>, u64), HistoryError> {
    let table = R::TABLE;
    let mut rows = Vec::new();
    let mut skipped = 0;
    if bytes.is_empty() {
        return Ok((rows, skipped));
    }
    let complete = bytes.last() == Some(&b'\n');
    let body = if complete {
        &bytes[..bytes.len() - 1]
    } else {
        bytes
    };
    let line_err = |line: usize, message: String| HistoryError::Line {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut lines = body.split(|b| *b == b'\n').enumerate().peekable();
    while let Some((i, raw)) = lines.next() {
        let number = i + 1;
        let last = lines.peek().is_none();
        if last && !complete {
            skipped += 1;
            continue;
        }
        let line = match std::str::from_utf8(raw) {
            Ok(l) => l,
            Err(_) if last => {
                skipped += 1;
                continue;
            }
            Err(e) => {
                return Err(line_err(
                    number,
                    format!("not valid UTF-8 (byte {} of the line)", e.valid_up_to() + 1),
                ));
            }
        };
        let value: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(_) if last => {
                skipped += 1;
                continue;
            }
            Err(e) => return Err(line_err(number, format!("not valid JSON: {e}"))),
        };
        let Value::Object(map) = value else {
            return Err(line_err(number, "not a JSON object".into()));
        };
        if i == 0 {
            check_header(table, &map).map_err(|message| line_err(1, message))?;
            continue;
        }
        check_columns(path, table, number, &map)?;
        let row: R = serde_json::from_value(Value::Object(map))
            .map_err(|e| line_err(number, e.to_string()))?;
        rows.push(row);
    }
    Ok((rows, skipped))
}

/// The first line's header: a history format version this build reads, naming `table`. Returns
/// the message of the first problem (it is line 1's).
fn check_header(table: Table, map: &Map<String, Value>) -> Result<(), String> {
    match map.get("tessera_history").and_then(Value::as_u64) {
        Some(v) if (u64::from(OLDEST_VERSION)..=u64::from(HISTORY_VERSION)).contains(&v) => {}
        Some(found) => {
            return Err(format!(
                "history format version {found}; this build reads versions {OLDEST_VERSION} to {HISTORY_VERSION}"
            ));
        }
        None => return Err("no \"tessera_history\" header".into()),
    }
    if map.get("table").and_then(Value::as_str) != Some(table.name()) {
        return Err(format!("header does not name table {:?}", table.name()));
    }
    Ok(())
}

/// A data line's (`number`) columns: every one of `table`, present unless it may be missing,
/// null only where nullable, of its type; no other column.
fn check_columns(
    path: &Path,
    table: Table,
    number: usize,
    map: &Map<String, Value>,
) -> Result<(), HistoryError> {
    let col_err = |column: &str, message: String| HistoryError::Column {
        path: path.to_path_buf(),
        column: column.to_string(),
        place: format!("line {number}"),
        message,
    };
    if let Some(k) = map.keys().find(|k| table.column(k).is_none()) {
        return Err(col_err(
            k,
            format!("unknown column in table {}", table.name()),
        ));
    }
    for c in table.columns() {
        match map.get(c.name) {
            None if c.may_be_missing() => {}
            None => return Err(col_err(c.name, "missing column".into())),
            Some(Value::Null) if c.nullable => {}
            Some(Value::Null) => {
                return Err(col_err(c.name, "null in a non-nullable column".into()));
            }
            Some(v) if !type_ok(c.ty, v) => {
                return Err(col_err(c.name, format!("{v} is not of type {:?}", c.ty)));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// What a closed file's footer says without reading any data: its row count and, when every row
/// group carries `ts` statistics, the first and last `ts` (unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FooterSummary {
    pub rows: u64,
    /// `None` when a row group lacks `ts` min/max statistics (the reader must then scan `ts`);
    /// also `None` for a file without rows.
    pub ts_range: Option<(i64, i64)>,
}

/// Reads a Parquet file's footer (only) for [`FooterSummary`]. The writer records chunk
/// statistics, so for tessera's own files row counts and time ranges cost no data reads.
pub fn footer_summary(path: &Path) -> Result<FooterSummary, HistoryError> {
    catch_panic(path, "footer", || footer_summary_of(path))
}

fn footer_summary_of(path: &Path) -> Result<FooterSummary, HistoryError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::statistics::Statistics;
    let file = File::open(path).map_err(io(path))?;
    let reader = SerializedFileReader::new(file).map_err(|e| HistoryError::Parquet {
        path: path.to_path_buf(),
        message: format!("footer: {e}"),
    })?;
    let meta = reader.metadata();
    let rows = u64::try_from(meta.file_metadata().num_rows()).unwrap_or(0);
    let ts_col = meta
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.name() == "ts");
    let mut range: Option<(i64, i64)> = None;
    let mut complete = ts_col.is_some() && rows > 0;
    if let Some(c) = ts_col {
        for rg in meta.row_groups() {
            if rg.num_rows() == 0 {
                continue;
            }
            match rg.column(c).statistics() {
                Some(Statistics::Int64(s)) => match (s.min_opt(), s.max_opt()) {
                    (Some(&lo), Some(&hi)) => {
                        range = Some(match range {
                            Some((a, b)) => (a.min(lo), b.max(hi)),
                            None => (lo, hi),
                        });
                    }
                    _ => complete = false,
                },
                _ => complete = false,
            }
        }
    }
    Ok(FooterSummary {
        rows,
        ts_range: if complete { range } else { None },
    })
}
