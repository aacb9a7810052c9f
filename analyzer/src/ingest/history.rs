//! The `history:` source: finds node folders, checks their manifests strictly, leaves out hourly
//! files that a day file already holds (an interrupted compaction), validates each
//! closed Parquet file's schema against [`crate::frames::schema`] and scans it lazily, and reads the open
//! JSON Lines segment with a tolerant line reader (header check; a torn last line is tolerated and
//! counted; any other bad line is an error, or a counted skip with `skip_bad_rows`).
//!
//! It does not write history, convert open segments, or check that rows agree with the manifest's
//! node name or interval. A Parquet file whose footer reads but whose data pages are corrupt fails
//! later, when the frame is collected; the commands then name it with
//! [`super::name_unreadable`] (each file of the sources read whole, on that error path only).

use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde_json::Value;

use tessera_core::history::files;

use crate::frames::schema::{ColType, Column as Col, Polars as _, Table, TableSchema as _};
use tessera_core::history::schema as contract;

/// History format version the exporter writes (the newest this reader understands).
const HISTORY_VERSION: u64 = contract::HISTORY_VERSION as u64;

/// Whether this reader reads history format version `v` (every version from the oldest).
fn readable_version(v: u64) -> bool {
    (u64::from(contract::OLDEST_VERSION)..=HISTORY_VERSION).contains(&v)
}
use super::{IngestError, IngestOptions, IngestReport, SourceKind, WorkItem};

const MANIFEST: &str = "tessera-history.json";

/// The folders `spec` names: each folder its glob matches, else the one folder (which must be
/// one).
fn history_roots(spec: &str) -> Result<Vec<PathBuf>, IngestError> {
    let mut roots = Vec::new();
    if spec.contains(['*', '?', '[']) {
        let paths = glob::glob(spec).map_err(|e| IngestError::SourceSpec {
            spec: format!("history:{spec}"),
            reason: format!("bad glob: {e}"),
        })?;
        for p in paths {
            let p = p.map_err(|e| IngestError::Io {
                path: e.path().to_path_buf(),
                source: std::io::Error::new(e.error().kind(), e.error().to_string()),
            })?;
            if p.is_dir() {
                roots.push(p);
            }
        }
    } else {
        let p = PathBuf::from(spec);
        if !p.is_dir() {
            return Err(IngestError::Io {
                path: p,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            });
        }
        roots.push(p);
    }
    Ok(roots)
}

/// The node folders (those with a manifest) among `roots` and their subfolders, in order.
fn node_folders(roots: Vec<PathBuf>) -> Result<Vec<PathBuf>, IngestError> {
    let mut nodes = Vec::new();
    for root in roots {
        if root.join(MANIFEST).is_file() {
            nodes.push(root);
        } else {
            for entry in read_dir_sorted(&root)? {
                if entry.is_dir() && entry.join(MANIFEST).is_file() {
                    nodes.push(entry);
                }
            }
        }
    }
    Ok(nodes)
}

/// `history:DIR` ([`SourceKind`]): its work items are its files, which the driver checks and
/// scans lazily (partitioned by node, duplicates checked); it reads no rows itself.
pub(super) struct HistoryKind;

impl SourceKind for HistoryKind {
    fn scheme(&self) -> &'static str {
        "history"
    }

    fn items(
        &self,
        source: &super::Source,
        report: &mut IngestReport,
    ) -> Result<Vec<WorkItem>, IngestError> {
        resolve(source.location(), report)
    }
}

/// Resolves `history:SPEC` into files to read, checking each node's manifest.
pub(super) fn resolve(spec: &str, report: &mut IngestReport) -> Result<Vec<WorkItem>, IngestError> {
    let roots = history_roots(spec)?;
    let mut nodes = node_folders(roots)?;
    nodes.sort();
    nodes.dedup();
    if nodes.is_empty() {
        return Err(IngestError::NoHistory {
            source_spec: format!("history:{spec}"),
        });
    }
    let mut items = Vec::new();
    for node_dir in nodes {
        let (node, interval_ms) = check_manifest(&node_dir.join(MANIFEST))?;
        let smp = report
            .sampling
            .entry(format!("history:{spec}"))
            .or_default();
        smp.counted = "node folder";
        *smp.rows.entry(interval_ms).or_default() += 1;
        if node_dir.file_name().and_then(|s| s.to_str()) != Some(node.as_str()) {
            report.warnings.push(format!(
                "{}: manifest names node {node:?}, folder is named differently",
                node_dir.display()
            ));
        }
        let source = format!("history:{}", node_dir.display());
        for table in Table::ALL {
            let dir = node_dir.join(table.name());
            if !dir.is_dir() {
                continue;
            }
            // Hourly files a day file holds already (left by a crash during compaction).
            let superseded = files::superseded(&dir).map_err(|e| IngestError::Parquet {
                path: dir.clone(),
                reason: e.to_string(),
            })?;
            for path in read_dir_sorted(&dir)? {
                let Some(name) = path.file_name().and_then(|s| s.to_str()) else {
                    continue;
                };
                // Only regular files: opening a FIFO (or a device) named like a history file
                // would block forever.
                let regular = std::fs::symlink_metadata(&path)
                    .map(|m| m.file_type().is_file())
                    .unwrap_or(false);
                if !regular {
                    if name.ends_with(".parquet") || name.ends_with(".jsonl") {
                        report.warnings.push(format!(
                            "{}: not a regular file (a FIFO, socket, device, folder or link): \
                             ignored",
                            path.display()
                        ));
                    }
                    continue;
                }
                if superseded.contains(name) {
                    report.warnings.push(format!(
                        "{}: ignored, its rows are in the day file (compaction was interrupted; \
                         the exporter deletes it at its next start)",
                        path.display()
                    ));
                    continue;
                }
                if name.ends_with(".open.jsonl") {
                    items.push(WorkItem::Jsonl {
                        table,
                        path,
                        source: source.clone(),
                        node: node.clone(),
                        interval_ms,
                    });
                } else if name.ends_with(".parquet") && !name.starts_with('.') {
                    items.push(WorkItem::Parquet {
                        table,
                        path,
                        source: source.clone(),
                        node: node.clone(),
                        interval_ms,
                    });
                }
            }
        }
    }
    Ok(items)
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, IngestError> {
    let io = |e| IngestError::Io {
        path: dir.to_path_buf(),
        source: e,
    };
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        v.push(e.map_err(io)?.path());
    }
    v.sort();
    Ok(v)
}

/// Checks a manifest strictly and returns the node name and the row interval.
fn check_manifest(path: &Path) -> Result<(String, i64), IngestError> {
    let bad = |reason: String| IngestError::Manifest {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| IngestError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let v: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("expected a JSON object".into()))?;
    match obj.get("format") {
        Some(Value::String(f)) if f == "tessera-history" => {}
        other => {
            return Err(bad(format!(
                "\"format\" is {}, expected \"tessera-history\"",
                show(other)
            )));
        }
    }
    match obj.get("version") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(readable_version) => {}
        other => {
            return Err(IngestError::Version {
                path: path.to_path_buf(),
                found: show(other),
                expected: HISTORY_VERSION,
            });
        }
    }
    let interval_ms = match obj.get("interval_ms") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > 0 && n <= i64::MAX as u64) => {
            n.as_u64().unwrap_or(1) as i64
        }
        other => {
            return Err(bad(format!(
                "\"interval_ms\" is {}, expected a positive integer",
                show(other)
            )));
        }
    };
    match obj.get("node") {
        Some(Value::String(s)) if !s.is_empty() => Ok((s.clone(), interval_ms)),
        other => Err(bad(format!(
            "\"node\" is {}, expected a non-empty string",
            show(other)
        ))),
    }
}

fn show(v: Option<&Value>) -> String {
    v.map_or_else(|| "missing".to_string(), |v| v.to_string())
}

/// Checks one closed Parquet file's schema and returns what its footer says (row count, `ts`
/// range) — reads only the footer.
pub(super) fn check_parquet(
    table: Table,
    path: &Path,
) -> Result<tessera_core::history::reader::FooterSummary, IngestError> {
    let parquet_err = |e: PolarsError| IngestError::Parquet {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    // Reading the metadata eagerly catches truncated files and broken footers here, with the name.
    let file = std::fs::File::open(path).map_err(|e| IngestError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let arrow_schema = ParquetReader::new(file).schema().map_err(parquet_err)?;
    let found: Vec<(String, DataType)> = arrow_schema
        .iter_values()
        .map(|f| (f.name.to_string(), DataType::from_arrow_field(f)))
        .collect();
    check_schema(table, path, &found)?;
    tessera_core::history::reader::footer_summary(path).map_err(|e| IngestError::Parquet {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The number of GPUs a Parquet file of the `gpu` table can hold rows of: its largest `gpu` index
/// (from the footer's statistics) plus one; `None` when the statistics do not say. A sign of
/// duplicate rows ([`super::dedupe`]) when the file holds more rows than that many GPUs can.
pub(super) fn gpu_count(path: &Path) -> Option<u64> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::statistics::Statistics;
    // The footer was read whole by `check_parquet` already; a panic here would only mean that
    // the statistics are odd, which leaves the count unknown.
    std::panic::catch_unwind(|| {
        let reader = SerializedFileReader::new(std::fs::File::open(path).ok()?).ok()?;
        let meta = reader.metadata();
        let c = meta
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| c.name() == "gpu")?;
        let mut max: Option<u64> = None;
        for rg in meta.row_groups() {
            if rg.num_rows() == 0 {
                continue;
            }
            match rg.column(c).statistics() {
                // `gpu` is UInt32: INT32 bits, unsigned order.
                Some(Statistics::Int32(s)) => {
                    let hi = u64::from(*s.max_opt()? as u32);
                    max = Some(max.map_or(hi, |m| m.max(hi)));
                }
                _ => return None,
            }
        }
        max.map(|m| m + 1)
    })
    .ok()
    .flatten()
}

/// One lazy multi-file scan over Parquet files that all passed [`check_parquet`] for the same
/// table (one scan per node and table: polars runs each scan separately, so one scan per file
/// made ingest superlinear in the number of files — docs/performance.md).
///
/// With `table` (history files), the scan is given the table's whole file schema, and a file of
/// an older version that lacks a column added since reads it as null (`allow_missing_columns`;
/// [`check_parquet`] has allowed only such columns to be missing). Without, the files' own
/// schema is used (files this process wrote).
pub(super) fn scan_parquet_files(
    table: Option<Table>,
    paths: &[PathBuf],
) -> Result<LazyFrame, IngestError> {
    let buf = paths
        .iter()
        .map(|p| PlRefPath::new(p.to_string_lossy().into_owned()))
        .collect();
    let args = match table {
        Some(t) => ScanArgsParquet {
            schema: Some(std::sync::Arc::new(t.file_schema())),
            allow_missing_columns: true,
            ..ScanArgsParquet::default()
        },
        None => ScanArgsParquet::default(),
    };
    LazyFrame::scan_parquet_files(buf, args).map_err(|e| IngestError::Parquet {
        path: paths.first().cloned().unwrap_or_default(),
        reason: format!(
            "scanning it and {} more file(s) together: {e}",
            paths.len().saturating_sub(1)
        ),
    })
}

/// Missing, unknown and mistyped columns are errors naming the file and the column.
fn check_schema(
    table: Table,
    path: &Path,
    found: &[(String, DataType)],
) -> Result<(), IngestError> {
    let err = |column: &str, reason: String| IngestError::Column {
        path: path.to_path_buf(),
        column: column.to_string(),
        reason,
    };
    for (name, dt) in found {
        let Some(col) = table.column(name) else {
            return Err(err(
                name,
                format!(
                    "unknown column in table {} (history version {HISTORY_VERSION})",
                    table.name()
                ),
            ));
        };
        if *dt != col.ty.polars() {
            return Err(err(
                name,
                format!(
                    "type {dt}, expected {} ({})",
                    col.ty.doc_name(),
                    col.ty.polars()
                ),
            ));
        }
    }
    for col in table.columns() {
        if !col.may_be_missing() && !found.iter().any(|(n, _)| n == col.name) {
            return Err(err(
                col.name,
                format!("missing (table {} needs it)", table.name()),
            ));
        }
    }
    Ok(())
}

/// One column being built from JSON values.
enum Buf {
    I64(Vec<Option<i64>>),
    U32(Vec<Option<u32>>),
    U64(Vec<Option<u64>>),
    F64(Vec<Option<f64>>),
    Str(Vec<Option<String>>),
    Bool(Vec<Option<bool>>),
}

impl Buf {
    fn new(ty: ColType) -> Buf {
        match ty {
            ColType::Int64 => Buf::I64(Vec::new()),
            ColType::UInt32 => Buf::U32(Vec::new()),
            ColType::UInt64 => Buf::U64(Vec::new()),
            ColType::Float64 => Buf::F64(Vec::new()),
            ColType::Utf8 => Buf::Str(Vec::new()),
            ColType::Bool => Buf::Bool(Vec::new()),
        }
    }

    fn into_column(self, name: &str) -> Column {
        let name: PlSmallStr = name.into();
        match self {
            Buf::I64(v) => Column::new(name, v),
            Buf::U32(v) => Column::new(name, v),
            Buf::U64(v) => Column::new(name, v),
            Buf::F64(v) => Column::new(name, v),
            Buf::Str(v) => Column::new(name, v),
            Buf::Bool(v) => Column::new(name, v),
        }
    }
}

/// A value typed for one column, or why it does not fit.
enum Typed {
    I64(Option<i64>),
    U32(Option<u32>),
    U64(Option<u64>),
    F64(Option<f64>),
    Str(Option<String>),
    Bool(Option<bool>),
}

fn typed(col: Col, v: &Value) -> Result<Typed, String> {
    if v.is_null() {
        if !col.nullable {
            return Err(format!("column {:?} is null but not nullable", col.name));
        }
        return Ok(match col.ty {
            ColType::Int64 => Typed::I64(None),
            ColType::UInt32 => Typed::U32(None),
            ColType::UInt64 => Typed::U64(None),
            ColType::Float64 => Typed::F64(None),
            ColType::Utf8 => Typed::Str(None),
            ColType::Bool => Typed::Bool(None),
        });
    }
    let bad = || format!("column {:?}: {v} is not {}", col.name, col.ty.doc_name());
    Ok(match col.ty {
        ColType::Int64 => Typed::I64(Some(v.as_i64().ok_or_else(bad)?)),
        ColType::UInt32 => Typed::U32(Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(bad)?,
        )),
        ColType::UInt64 => Typed::U64(Some(v.as_u64().ok_or_else(bad)?)),
        ColType::Float64 => Typed::F64(Some(v.as_f64().ok_or_else(bad)?)),
        ColType::Utf8 => Typed::Str(Some(v.as_str().ok_or_else(bad)?.to_string())),
        ColType::Bool => Typed::Bool(Some(v.as_bool().ok_or_else(bad)?)),
    })
}

fn push(buf: &mut Buf, t: Typed) {
    match (buf, t) {
        (Buf::I64(b), Typed::I64(v)) => b.push(v),
        (Buf::U32(b), Typed::U32(v)) => b.push(v),
        (Buf::U64(b), Typed::U64(v)) => b.push(v),
        (Buf::F64(b), Typed::F64(v)) => b.push(v),
        (Buf::Str(b), Typed::Str(v)) => b.push(v),
        (Buf::Bool(b), Typed::Bool(v)) => b.push(v),
        // `typed` and `Buf::new` are driven by the same ColType, so kinds always match.
        _ => {}
    }
}

/// Parses one row line into typed values in column order.
fn parse_row(table: Table, line: &str) -> Result<Vec<Typed>, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or_else(|| "expected a JSON object (one row)".to_string())?;
    for k in obj.keys() {
        if table.column(k).is_none() {
            return Err(format!("unknown column {k:?} in table {}", table.name()));
        }
    }
    table
        .columns()
        .iter()
        .copied()
        .map(|c| match obj.get(c.name) {
            None if c.may_be_missing() => typed(c, &Value::Null),
            None => Err(format!("missing column {:?}", c.name)),
            Some(v) => typed(c, v),
        })
        .collect()
}

/// Reads an open segment (`<hour>.open.jsonl`) into a DataFrame with the file schema.
pub(super) fn read_open_segment(
    table: Table,
    path: &Path,
    opts: &IngestOptions,
    report: &mut IngestReport,
) -> Result<DataFrame, IngestError> {
    let bytes = std::fs::read(path).map_err(|e| IngestError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let line_err = |line: u64, reason: String| IngestError::Line {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let cols: Vec<Col> = table.columns().to_vec();
    let mut bufs: Vec<Buf> = cols.iter().map(|c| Buf::new(c.ty)).collect();
    let ends_with_newline = bytes.last() == Some(&b'\n');
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if ends_with_newline || bytes.is_empty() {
        lines.pop(); // the empty piece after the final newline
    }
    let n = lines.len();
    let mut skipped = 0u64;
    let mut first_bad: Option<(u64, String)> = None;
    let mut torn = false;
    for (i, raw) in lines.into_iter().enumerate() {
        let lineno = i as u64 + 1;
        let last = i + 1 == n;
        let unterminated = last && !ends_with_newline;
        let text = std::str::from_utf8(raw).map_err(|_| "not UTF-8".to_string());
        if i == 0 {
            if unterminated {
                // The header itself is torn: nothing was written after it.
                torn = true;
                break;
            }
            let text = text.map_err(|e| line_err(1, e))?;
            check_header(table, path, text)?;
            continue;
        }
        if unterminated {
            torn = true;
            break;
        }
        let parsed = text.and_then(|t| parse_row(table, t));
        match parsed {
            Ok(values) => {
                for (b, v) in bufs.iter_mut().zip(values) {
                    push(b, v);
                }
            }
            Err(reason) if last && reason.starts_with("not valid JSON") => torn = true,
            Err(reason) if opts.skip_bad_rows => {
                skipped += 1;
                report.skip("bad line in an open segment");
                first_bad.get_or_insert((lineno, reason));
            }
            Err(reason) => return Err(line_err(lineno, reason)),
        }
    }
    if torn {
        report.torn_lines += 1;
        report.skip("torn last line of an open segment");
        report.warnings.push(format!(
            "{}: torn last line tolerated (1 line ignored)",
            path.display()
        ));
    }
    if let Some((line, reason)) = first_bad {
        report.warnings.push(format!(
            "{}: skipped {skipped} bad line(s) (--skip-bad-rows); first at line {line}: {reason}",
            path.display()
        ));
    }
    let columns: Vec<Column> = bufs
        .into_iter()
        .zip(&cols)
        .map(|(b, c)| b.into_column(c.name))
        .collect();
    Ok(DataFrame::new_infer_height(columns)?)
}

fn check_header(table: Table, path: &Path, text: &str) -> Result<(), IngestError> {
    let bad = |reason: String| IngestError::Line {
        path: path.to_path_buf(),
        line: 1,
        reason,
    };
    let expected = format!(
        "expected the header {{\"tessera_history\": {HISTORY_VERSION}, \"table\": \"{}\"}}",
        table.name()
    );
    let v: Value = serde_json::from_str(text).map_err(|_| bad(expected.clone()))?;
    let version = v.get("tessera_history");
    match version {
        Some(Value::Number(n)) if n.as_u64().is_some_and(readable_version) => {}
        None => return Err(bad(expected)),
        other => {
            return Err(IngestError::Version {
                path: path.to_path_buf(),
                found: show(other),
                expected: HISTORY_VERSION,
            });
        }
    }
    match v.get("table") {
        Some(Value::String(t)) if t == table.name() => Ok(()),
        other => Err(bad(format!(
            "header names table {}, {expected}",
            show(other)
        ))),
    }
}
