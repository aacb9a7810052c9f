//! The generic long format (`timestamp, entity, metric, value, labels…`): the fast reader
//! through polars' multi-threaded CSV reader ([`read_fast`], which gives up on anything off so
//! the line reader can name it) and one line of the line reader ([`generic_line`]), with their
//! timestamp and number parsing.
//!
//! It does not read nvidia-smi logs (`smi`) or decide which reader runs (the parent's `read`).

use std::collections::BTreeSet;
use std::path::Path;

use polars::prelude::*;

use super::builder::{Bad, Builder, Parsed, short};
use crate::frames::schema::Table;
use crate::ingest::{IngestError, IngestReport};

/// Values that read as null (nvidia-smi's `[N/A]`, `[Not Supported]`, … too).
fn is_null_marker(t: &str) -> bool {
    t.is_empty()
        || t == "N/A"
        || t == "NaN"
        || t == "nan"
        || (t.starts_with('[') && t.ends_with(']'))
}

/// Whether the file at `path` has an even number of `"` bytes (read in blocks: memory does not
/// grow with the file).
fn quotes_paired(path: &Path) -> Result<bool, IngestError> {
    use std::io::Read;
    let io = |source| IngestError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut block = vec![0u8; 1 << 16];
    let mut odd = false;
    loop {
        let n = match file.read(&mut block) {
            Ok(0) => return Ok(!odd),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        odd ^= block[..n].iter().filter(|&&b| b == b'"').count() % 2 == 1;
    }
}

/// The generic format through polars' CSV reader. `Ok(None)` when the file needs the line
/// reader (anything polars cannot parse or any row that does not check out).
pub(super) fn read_fast(
    path: &Path,
    header: &[String],
    [ti, ei, mi, vi]: [usize; 4],
    report: &mut IngestReport,
) -> Result<Option<Parsed>, IngestError> {
    // Duplicate column names are refused before this (`csv::read`); unnamed ones go to the line
    // reader.
    let distinct: BTreeSet<&String> = header.iter().collect();
    if distinct.len() != header.len() {
        return Ok(None);
    }
    let schema: Schema = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let dt = if i == ti || i == vi {
                DataType::Float64
            } else {
                DataType::String
            };
            Field::new(h.as_str().into(), dt)
        })
        .collect();
    // No null-value list (checking every field against it cost a tenth of the read): empty
    // fields are null, `NaN` parses (and is taken as null below), and any other marker (`N/A`,
    // `[Not Supported]`) sends the file to the line reader, which knows them.
    // A quoted field left open (an odd number of `"`: doubled quotes inside a field come in
    // pairs) makes polars' reader panic (0.55: a slice index in its number parser); the line
    // reader names the line instead.
    if !quotes_paired(path)? {
        return Ok(None);
    }
    let reader = CsvReadOptions::default()
        .with_has_header(true)
        .with_schema(Some(Arc::new(schema)))
        .try_into_reader_with_file_path(Some(path.to_path_buf()));
    let watch = crate::timing::Stopwatch::start("csv");
    // Any other input polars panics on goes to the line reader too, rather than down the caller.
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        reader.and_then(|r| r.finish())
    }));
    let df = match read {
        Ok(Ok(df)) => df,
        Ok(Err(_)) | Err(_) => return Ok(None),
    };
    watch.lap("polars csv reader");
    if df.width() != header.len() {
        return Ok(None);
    }
    // The reader's chunks are walked in place (a rechunk would copy every string view); when
    // the columns' chunks do not line up, they are rechunked first.
    let mut df = df;
    let lengths: Vec<Vec<usize>> = df
        .columns()
        .iter()
        .map(|c| {
            c.as_materialized_series()
                .chunk_lengths()
                .collect::<Vec<_>>()
        })
        .collect();
    if lengths.windows(2).any(|w| w[0] != w[1]) {
        df.rechunk_mut();
    }
    let cols = df.columns();
    let f64_chunks =
        |i: usize| -> Result<Vec<&polars_arrow::array::PrimitiveArray<f64>>, IngestError> {
            Ok(cols[i].f64()?.downcast_iter().collect())
        };
    let str_chunks = |i: usize| -> Result<Vec<&Utf8ViewArray>, IngestError> {
        Ok(cols[i].str()?.downcast_iter().collect())
    };
    let ts = f64_chunks(ti)?;
    let val = f64_chunks(vi)?;
    let ent = str_chunks(ei)?;
    let met = str_chunks(mi)?;
    let kind_i = header.iter().position(|h| h == "kind");
    let kind = kind_i.map(str_chunks).transpose()?;
    let labels: Vec<(usize, Vec<&Utf8ViewArray>)> = (0..header.len())
        .filter(|i| ![ti, ei, mi, vi].contains(i))
        .map(|i| Ok((i, str_chunks(i)?)))
        .collect::<Result<_, IngestError>>()?;
    // Rows are split into one contiguous range per thread; each builds its observations, and
    // the builders are merged in order (entity ids, first-seen labels and counts come out as
    // one pass over the file would give them).
    let total = df.height();
    // (Unit tests always split, so the merge is tested on any machine.)
    let threads = if cfg!(test) {
        3.min(total.max(1))
    } else {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4)
            .min(total.div_ceil(100_000).max(1))
    };
    let starts: Vec<usize> = {
        let mut at = 0;
        ts.iter()
            .map(|c| {
                let s = at;
                at += c.len();
                s
            })
            .collect()
    };
    let run = |from: usize, to: usize| -> Option<Builder> {
        let mut b = Builder::new(header.to_vec());
        b.rows_hint = to - from;
        for c in 0..ts.len() {
            let (c0, c1) = (starts[c], starts[c] + ts[c].len());
            let (lo, hi) = (from.max(c0), to.min(c1));
            if lo >= hi {
                continue;
            }
            let (tsa, val, ent, met) = (ts[c], val[c], ent[c], met[c]);
            let kind = kind.as_ref().map(|k| k[c]);
            let labels: Vec<(usize, &Utf8ViewArray)> =
                labels.iter().map(|(i, a)| (*i, a[c])).collect();
            let (ts_values, ts_valid) = (tsa.values(), tsa.validity());
            for row in lo - c0..hi - c0 {
                if ts_valid.is_some_and(|v| !v.get_bit(row)) {
                    return None;
                }
                let t = ts_values[row];
                let (Some(e), Some(m)) = (opt(ent, row), opt(met, row)) else {
                    return None;
                };
                let ms = (t * 1000.0).round();
                if !(t.is_finite() && ms.abs() < 9.0e18 && TS_RANGE_MS.contains(&(ms as i64))) {
                    return None;
                }
                let v = val.get(row).filter(|v| v.is_finite());
                let table = match kind.and_then(|k| opt(k, row)) {
                    None | Some("gpu") => Table::Gpu,
                    Some("mig") => Table::Mig,
                    Some("process") => Table::Process,
                    Some("node") => {
                        b.add_node(e, (t * 1000.0).round() as i64, m, v, 0).ok()?;
                        continue;
                    }
                    Some(_) => return None,
                };
                let row_labels = labels
                    .iter()
                    .filter_map(|(i, a)| opt(a, row).map(|v| (*i, v)));
                b.add(table, e, row_labels, (t * 1000.0).round() as i64, m, v, 0)
                    .ok()?;
            }
        }
        Some(b)
    };
    let parts: Vec<Option<Builder>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let (from, to) = (total * k / threads, total * (k + 1) / threads);
                scope.spawn(move || run(from, to))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    });
    let mut parts = parts.into_iter();
    let Some(Some(mut b)) = parts.next() else {
        return Ok(None);
    };
    for p in parts {
        match p {
            Some(p) => b.merge(p),
            None => return Ok(None),
        }
    }
    Ok(b.finish(report, path).ok())
}

type Utf8ViewArray = polars_arrow::array::Utf8ViewArray;

/// Row `i` of a string array (`None` when null or empty, as the line reader takes it).
fn opt(a: &Utf8ViewArray, i: usize) -> Option<&str> {
    use polars_arrow::array::Array as _;
    a.is_valid(i).then(|| a.value(i)).filter(|s| !s.is_empty())
}

pub(super) fn generic_line(
    idx: &[usize; 4],
    header: &[String],
    fields: &[&str],
    b: &mut Builder,
    line: u64,
) -> Result<(), Bad> {
    let [ti, ei, mi, vi] = *idx;
    let ts = parse_generic_ts(fields[ti]).ok_or_else(|| {
        Bad(
            "bad timestamp",
            format!(
                "timestamp {:?}: expected unix seconds or an RFC 3339 time, between 1970 and 9999",
                short(fields[ti])
            ),
        )
    })?;
    let entity = fields[ei];
    if entity.is_empty() {
        return Err(Bad("missing entity", "entity is empty".into()));
    }
    let value = parse_number(fields[vi]).map_err(|e| Bad("bad value", format!("value: {e}")))?;
    let labels = fields
        .iter()
        .enumerate()
        .filter(|(i, f)| ![ti, ei, mi, vi].contains(i) && !is_null_marker(f))
        .map(|(i, f)| (i, *f));
    let kind = header
        .iter()
        .position(|h| h == "kind")
        .map(|k| fields[k])
        .filter(|f| !is_null_marker(f));
    let table = match kind {
        None | Some("gpu") => Table::Gpu,
        Some("mig") => Table::Mig,
        Some("process") => Table::Process,
        Some("node") => return b.add_node(entity, ts, fields[mi], value, line),
        Some(other) => {
            return Err(Bad(
                "bad kind",
                format!("kind {other:?}: expected gpu, mig, process or node"),
            ));
        }
    };
    b.add(table, entity, labels, ts, fields[mi], value, line)
}

/// Timestamps outside 1970-01-01 … 9999-12-31 are not telemetry (a number like
/// 99999999999999999999 would otherwise wrap to the year −292 million).
const TS_RANGE_MS: std::ops::RangeInclusive<i64> = 0..=253_402_300_799_999;

fn parse_generic_ts(s: &str) -> Option<i64> {
    let ms = if let Ok(secs) = s.parse::<f64>() {
        let ms = (secs * 1000.0).round();
        (secs.is_finite() && ms.abs() < 9.0e18).then_some(ms as i64)
    } else {
        chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp_millis())
    }?;
    TS_RANGE_MS.contains(&ms).then_some(ms)
}

/// Parses a number; empty, `NaN` and bracketed nvidia-smi markers (`[N/A]`) are null.
fn parse_number(s: &str) -> Result<Option<f64>, String> {
    let t = s.trim();
    if is_null_marker(t) {
        return Ok(None);
    }
    let v: f64 = t
        .parse()
        .map_err(|_| format!("{:?} is not a number", short(t)))?;
    Ok(v.is_finite().then_some(v))
}
