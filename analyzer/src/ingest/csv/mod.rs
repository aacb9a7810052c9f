//! The `csv:` source: the generic long format (`timestamp, entity, metric, value, labels…`) and
//! `nvidia-smi --query-gpu=… --format=csv` logs (detected from the header), into observations
//! that [`super::resample`] turns into rows of the canonical `gpu`, `mig` and `process` tables at
//! each entity's own sampling period (`--interval auto`), or at an explicit `--interval` when
//! that is coarser.
//!
//! Two readers, one result. A generic file is read first by polars' multi-threaded CSV reader
//! (timestamps and values parsed as numbers while reading) and checked column by column; the
//! moment anything is off — a line polars cannot parse, a bad timestamp, kind, label or ratio,
//! an entity without identity, or `--skip-bad-rows` — the file is read again, line by line, by
//! the `csv` crate, which names the file, line and what was expected (or skips and counts the
//! bad lines). nvidia-smi logs always take the line reader. Both feed the same observation
//! builder, so identity, labels and warnings do not depend on the reader.
//!
//! Identity: a row's `entity` fills the table's key column when no label does (`uuid` for gpu,
//! `mig_uuid` for mig, `pid` for process). On a process row an entity that is not a pid becomes
//! the process name (`process`) when the row has none, so distinct entities stay distinct; a
//! process row with neither a pid, a pod, a pod UID nor a usable entity is an error. A metric of
//! another kind (`gpu_busy_ratio` on a process row) is ignored with a warning that names the
//! kinds that take it and the equivalent (`sm_ratio`). Unknown metrics are counted and warned
//! about. nvidia-smi logs carry no time zone (read as UTC, with a warning) and no node (null).
//!
//! `kind=node` rows (`gpus_allocated`, `gpus_total` per node) are collected apart and become
//! synthetic GPU rows through [`crate::ingest::occupancy`]; their checks (a node without a
//! total, more allocated than total) fail the fast reader, so the line reader names the line.
//!
//! Layout: `builder` (the observations and identity), `generic` and `smi` (one format each,
//! over the builder), `lines` (the line reader over both); `read` here reads the header,
//! detects the format ([`detect`]) and resamples.

mod builder;
mod generic;
mod lines;
mod smi;

use std::path::Path;

use polars::prelude::*;

use builder::short;
use generic::read_fast;
use lines::read_lines;
use smi::{SmiCol, smi_col};

use super::occupancy::NodeCounts;
use super::resample::{self, RowSpec, Sampling};
use super::{IngestError, IngestOptions, IngestReport, Rows, SourceKind};
use crate::frames::schema::Table;

/// The longest header line read (1 MiB).
const MAX_HEADER_BYTES: usize = 1 << 20;

/// `csv:FILE` ([`SourceKind`]): one file read whole into partition `*`.
pub(super) struct CsvKind;

impl SourceKind for CsvKind {
    fn scheme(&self) -> &'static str {
        "csv"
    }

    fn read(
        &self,
        location: &str,
        opts: &IngestOptions,
        report: &mut IngestReport,
    ) -> Result<Rows, IngestError> {
        let (tables, sampling) = read(Path::new(location), opts, report)?;
        let tables = tables.into_iter().map(|(t, df)| (t, df.lazy())).collect();
        Ok(Rows {
            parts: vec![("*".to_string(), tables, Vec::new())],
            sampling: Some((sampling, "samples")),
        })
    }
}

/// Reads one CSV file into per-table rows (history file schema, `ts` as int64 ms) and what was
/// found about its sampling.
pub(super) fn read(
    path: &Path,
    opts: &IngestOptions,
    report: &mut IngestReport,
) -> Result<(Vec<(Table, DataFrame)>, Sampling), IngestError> {
    if opts.interval_ms.is_some_and(|i| i <= 0) {
        return Err(IngestError::File {
            path: path.to_path_buf(),
            reason: "the bucket interval must be positive".into(),
        });
    }
    let header = read_header(path)?;
    refuse_repeated_columns(path, &header)?;
    let format = detect(&header).ok_or_else(|| IngestError::Line {
        path: path.to_path_buf(),
        line: 1,
        reason: format!(
            "unrecognised header {:?}; expected the generic long format (timestamp, entity, metric, \
             value, labels…) or an nvidia-smi --query-gpu … --format=csv header",
            short(&header.join(","))
        ),
    })?;
    if matches!(format, Format::NvidiaSmi(_)) {
        report.warnings.push(format!(
            "{}: nvidia-smi timestamps carry no time zone; read as UTC; node unknown (null)",
            path.display()
        ));
    }
    let watch = crate::timing::Stopwatch::start("csv");
    // The fast reader works on a copy of the report: a file it gives up on leaves no trace.
    let parsed = match &format {
        Format::Generic(idx) if !opts.skip_bad_rows => {
            let mut scratch = report.clone();
            match read_fast(path, &header, *idx, &mut scratch)? {
                Some(obs) => {
                    *report = scratch;
                    obs
                }
                None => read_lines(path, &header, &format, opts, report)?,
            }
        }
        _ => read_lines(path, &header, &format, opts, report)?,
    };
    let spec = RowSpec {
        grid_ms: 1,
        requested_ms: opts.interval_ms,
        fallback_ms: opts.interval_ms.unwrap_or(10_000) as f64,
    };
    watch.lap("read");
    let mut out = Vec::new();
    let mut sampling = Sampling::default();
    let mut nodes = parsed.nodes;
    if !nodes.is_empty() {
        drop_counted_nodes(path, &parsed.obs, &mut nodes, report);
    }
    if !nodes.is_empty() {
        let (df, s) = nodes
            .into_rows(spec, &format!("{}: node", path.display()))
            .map_err(|e| IngestError::File {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        sampling.merge(s);
        if df.height() > 0 {
            out.push((Table::Gpu, df));
        }
    }
    for o in parsed.obs {
        let table = o.table;
        let t = crate::timing::Stopwatch::start("csv");
        let (df, s) = resample::resample(o, spec)?;
        t.lap(&format!("resample {}", table.name()));
        sampling.merge(s);
        if df.height() > 0 {
            out.push((table, df));
        }
    }
    Ok((out, sampling))
}

/// The file's header fields (a byte-order mark dropped), read from its first MiB only: a file
/// whose first line is longer is not a CSV with a header (and is not copied whole into memory
/// and an error message).
fn read_header(path: &Path) -> Result<Vec<String>, IngestError> {
    let io = |e: std::io::Error| IngestError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    use std::io::Read as _;
    let mut first = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_HEADER_BYTES as u64 + 1)
        .read_to_end(&mut first)
        .map_err(io)?;
    if first.len() > MAX_HEADER_BYTES && !first.contains(&b'\n') {
        return Err(IngestError::Line {
            path: path.to_path_buf(),
            line: 1,
            reason: format!(
                "the first line is longer than {} KiB: expected a CSV header (timestamp, \
                 entity, metric, value, labels… or nvidia-smi's)",
                MAX_HEADER_BYTES / 1024
            ),
        });
    }
    let mut rdr = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(::csv::Trim::All)
        .from_reader(first.as_slice());
    match rdr.byte_records().next() {
        Some(Ok(h)) => Ok(h
            .iter()
            .map(|f| {
                String::from_utf8_lossy(f)
                    .trim_start_matches('\u{feff}')
                    .to_string()
            })
            .collect::<Vec<String>>()),
        Some(Err(e)) => Err(IngestError::Line {
            path: path.to_path_buf(),
            line: 1,
            reason: e.to_string(),
        }),
        None => Err(IngestError::File {
            path: path.to_path_buf(),
            reason: "empty file; expected a CSV header".into(),
        }),
    }
}

/// One rule for a column named twice: refused, naming it and both positions (a second `node`
/// would otherwise silently win over the first, a second `value` silently lose).
fn refuse_repeated_columns(path: &Path, header: &[String]) -> Result<(), IngestError> {
    for (j, h) in header.iter().enumerate() {
        if h.is_empty() {
            continue;
        }
        if let Some(i) = header[..j].iter().position(|x| x == h) {
            return Err(IngestError::Line {
                path: path.to_path_buf(),
                line: 1,
                reason: format!(
                    "column {:?} appears twice (columns {} and {}); each column may appear once",
                    short(h),
                    i + 1,
                    j + 1
                ),
            });
        }
    }
    Ok(())
}

/// Drops the `kind=node` counts of the nodes whose GPUs the file also gives one by one (kind
/// gpu, in `obs`), with a warning: those rows are read instead.
fn drop_counted_nodes(
    path: &Path,
    obs: &[resample::Observations],
    nodes: &mut NodeCounts,
    report: &mut IngestReport,
) {
    // A node whose GPUs the file also gives one by one keeps those rows only.
    let per_gpu: std::collections::BTreeSet<&str> = obs
        .iter()
        .filter(|o| o.table == Table::Gpu)
        .flat_map(|o| o.labels.iter().flatten())
        .filter(|(k, _)| *k == "node")
        .map(|(_, v)| v.as_str())
        .collect();
    let dropped = nodes.drop_nodes(&per_gpu);
    if !dropped.is_empty() {
        report.warnings.push(format!(
            "{}: kind=node counts of {} node(s) ignored ({}): the file gives their GPUs one \
             by one (kind gpu), which are read instead",
            path.display(),
            dropped.len(),
            dropped.join(", ")
        ));
    }
}

enum Format {
    /// Indexes of timestamp, entity, metric, value.
    Generic([usize; 4]),
    /// Per column: what it feeds.
    NvidiaSmi(Vec<SmiCol>),
}

fn detect(header: &[String]) -> Option<Format> {
    let find = |n: &str| header.iter().position(|h| h == n);
    if let (Some(t), Some(e), Some(m), Some(v)) = (
        find("timestamp"),
        find("entity"),
        find("metric"),
        find("value"),
    ) {
        return Some(Format::Generic([t, e, m, v]));
    }
    let smi = header.first().is_some_and(|h| h == "timestamp")
        && header
            .iter()
            .any(|h| h.contains('.') || h == "index" || h == "uuid");
    smi.then(|| Format::NvidiaSmi(header.iter().map(|h| smi_col(h)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::resample::Observations;

    fn rows(obs: builder::Parsed) -> Vec<(Table, DataFrame)> {
        let obs: Vec<Observations> = obs.obs;
        let spec = RowSpec {
            grid_ms: 1,
            requested_ms: None,
            fallback_ms: 10_000.0,
        };
        obs.into_iter()
            .map(|o| {
                let t = o.table;
                let (df, _) = resample::resample(o, spec).expect("resample");
                (t, df)
            })
            .collect()
    }

    fn header(path: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).expect("read");
        text.lines()
            .next()
            .expect("header")
            .split(',')
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn fast_reader_takes_clean_files_and_agrees_with_the_line_reader() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("clean.csv");
        // Quoted fields with commas, empty labels and values, null markers, several kinds and
        // labels first seen on a later row.
        let mut text = String::from("timestamp,entity,metric,value,kind,node,uuid,model,pid,pod\n");
        for i in 1..=50i64 {
            let t = 1_793_628_000 + 60 * i;
            text.push_str(&format!(
                "{t},GPU-a,gpu_busy_ratio,{},gpu,n1,,\"NVIDIA H100 80GB HBM3, SXM\",,\n",
                (i % 10) as f64 / 10.0
            ));
            text.push_str(&format!("{t},GPU-a,memory_used_bytes,,gpu,n1,,,,\n"));
            text.push_str(&format!("{t},GPU-a,power_watts,NaN,gpu,n1,,,,\n"));
            text.push_str(&format!(
                "{}.5,7,memory_used_bytes,2e9,process,n1,GPU-a,,,{}\n",
                t - 1,
                if i > 3 { "pod-7" } else { "" }
            ));
            text.push_str(&format!("{t},7,sm_ratio,0,process,n1,GPU-a,,,\n"));
            text.push_str(&format!("{t},svc,fan_ratio,1,gpu,n1,GPU-b,,,\n"));
        }
        std::fs::write(&path, text).expect("write");
        let h = header(&path);
        let Some(Format::Generic(idx)) = detect(&h) else {
            panic!("generic header")
        };
        let mut fast_report = IngestReport::default();
        let fast = read_fast(&path, &h, idx, &mut fast_report)
            .expect("read")
            .expect("the fast reader takes a clean file");
        let mut line_report = IngestReport::default();
        let lines = read_lines(
            &path,
            &h,
            &Format::Generic(idx),
            &IngestOptions::default(),
            &mut line_report,
        )
        .expect("lines");
        assert_eq!(fast_report.warnings, line_report.warnings);
        assert_eq!(fast_report.skipped, line_report.skipped);
        let (a, b) = (rows(fast), rows(lines));
        assert_eq!(a.len(), b.len());
        for ((ta, da), (tb, db)) in a.iter().zip(&b) {
            assert_eq!(ta, tb);
            assert!(da.equals_missing(db), "{ta:?}:\n{da}\n{db}");
            assert!(da.height() > 0);
        }
        // The pod first seen on a later row is the process's.
        let p = &a
            .iter()
            .find(|(t, _)| *t == Table::Process)
            .expect("process")
            .1;
        assert_eq!(
            p.column("pod").expect("pod").str().expect("s").get(0),
            Some("pod-7")
        );

        // An RFC 3339 timestamp, a null marker like N/A (or anything else polars does not parse
        // as a number) goes to the line reader.
        for (name, line) in [
            (
                "rfc3339.csv",
                "2026-11-02T14:00:11Z,GPU-a,gpu_busy_ratio,0.4",
            ),
            ("na.csv", "1793628000,GPU-a,gpu_busy_ratio,N/A"),
        ] {
            let odd = dir.path().join(name);
            std::fs::write(&odd, format!("timestamp,entity,metric,value\n{line}\n"))
                .expect("write");
            let h = header(&odd);
            let Some(Format::Generic(idx)) = detect(&h) else {
                panic!("generic header")
            };
            assert!(
                read_fast(&odd, &h, idx, &mut IngestReport::default())
                    .expect("read")
                    .is_none(),
                "{name}"
            );
        }
    }

    #[test]
    fn an_open_quoted_field_goes_to_the_line_reader_not_a_panic() {
        // Found by `csv_never_panics_and_errors_name_file_and_line`: polars 0.55's reader
        // panicked on this file.
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("in.csv");
        std::fs::write(
            &path,
            "timestamp,entity,metric,value,kind,pid,pod\n1793600000,,\"\n\",\"",
        )
        .expect("write");
        let h = header(&path);
        let Some(Format::Generic(idx)) = detect(&h) else {
            panic!("generic header")
        };
        assert!(
            read_fast(&path, &h, idx, &mut IngestReport::default())
                .expect("read")
                .is_none()
        );
        let e = crate::ingest::ingest(
            &[crate::ingest::Source::csv(&path)],
            &IngestOptions::default(),
        )
        .err()
        .expect("an error, not rows")
        .to_string();
        assert!(e.contains("in.csv"), "{e}");
        // A quoted field with a comma, closed, still takes the fast reader.
        std::fs::write(
            &path,
            "timestamp,entity,metric,value,model\n1793600000,GPU-a,gpu_busy_ratio,0.5,\"H100, SXM\"\n",
        )
        .expect("write");
        let h = header(&path);
        let Some(Format::Generic(idx)) = detect(&h) else {
            panic!("generic header")
        };
        assert!(
            read_fast(&path, &h, idx, &mut IngestReport::default())
                .expect("read")
                .is_some()
        );
    }
}
