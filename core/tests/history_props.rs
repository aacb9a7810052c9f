//! Property tests of the history readers of the exporter (`history::reader`): the open-segment
//! JSONL parser and the Parquet reader (and the footer summary the analyzer uses), on arbitrary
//! bytes and on truncated and mutated valid files.
//!
//! Invariants, for every input:
//! - no panic;
//! - at most [`jsonl_bound`] / [`parquet_bound`] bytes allocated at once by the call (a counting
//!   global allocator measures the peak, per thread);
//! - an error names the file and the position: `line N` for JSONL, and for Parquet `footer`,
//!   `schema`, `row group N` (with the column when one column alone fails) or `row N`;
//! - a valid segment cut anywhere reads without error, as a prefix of its rows (a torn last line
//!   is tolerated).
//!
//! In CI each property runs a few thousand cases in a few seconds (debug build). To run them
//! longer: `PROPTEST_CASES=200000 cargo test --release -p tessera-core --test history_props`
//! (docs/testing.md).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::Value;

use tessera_core::device::GpuBackend;
use tessera_core::history::reader::{
    footer_summary, parse_jsonl, read_jsonl, read_parquet, read_parquet_batches,
};
use tessera_core::history::{Aggregator, GpuRow, HistoryError, ProcessRow, Rows, Table};
use tessera_core::sim::{self, SimBackend, SimClock};

#[path = "support/counting.rs"]
mod counting;

// ---- allocation accounting -------------------------------------------------------------------

thread_local! {
    static CURRENT: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn track(delta: i64) {
    let _ = CURRENT.try_with(|c| {
        let v = c.get() + delta;
        c.set(v);
        let _ = PEAK.try_with(|p| {
            if v > p.get() {
                p.set(v);
            }
        });
    });
}

fn note_i64(delta: isize) {
    track(delta as i64);
}

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting {
    note: note_i64,
    realloc_holds_both: false,
};

/// Runs `f` and returns its result and the most bytes it held allocated at once (this thread).
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let base = CURRENT.with(|c| c.get());
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(|p| p.get());
    (out, (peak - base).max(0) as u64)
}

/// The stated bound for the JSONL reader: 64 bytes per input byte, plus 1 MiB.
fn jsonl_bound(len: usize) -> u64 {
    64 * len as u64 + (1 << 20)
}

/// The stated bound for the Parquet reader: 16 MiB plus 64 bytes per input byte (the reader
/// refuses a file whose footer places a column chunk outside the file before decoding it).
fn parquet_bound(len: usize) -> u64 {
    (16 << 20) + 64 * len as u64
}

// ---- inputs --------------------------------------------------------------------------------

struct Fixture {
    gpu: Vec<GpuRow>,
    process: Vec<ProcessRow>,
    gpu_segment: Vec<u8>,
    process_segment: Vec<u8>,
    gpu_parquet: Vec<u8>,
    dir: tempfile::TempDir,
}

fn segment<R: serde::Serialize>(table: &str, rows: &[R]) -> Vec<u8> {
    let mut text = format!("{{\"tessera_history\":1,\"table\":\"{table}\"}}\n");
    for r in rows {
        text.push_str(&serde_json::to_string(r).unwrap());
        text.push('\n');
    }
    text.into_bytes()
}

/// Two minutes of the demo's first node, as rows, segments and a Parquet file.
fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let scenario = sim::load_scenario(None).unwrap();
        let start = scenario.start.timestamp_millis();
        let mut backend = SimBackend::new(
            &scenario,
            None,
            SimClock::Stepped {
                next_ms: start + 1000,
                step_ms: 1000,
            },
        )
        .unwrap();
        let inv = Arc::new(backend.inventory().unwrap());
        let attribution = backend.node().attribution();
        let mut agg = Aggregator::new(&inv.node, 10_000);
        let mut rows = Rows::default();
        for _ in 0..120 {
            let s = backend.sample().unwrap();
            if let Some(r) = agg.push(&inv, &s, &attribution) {
                rows.gpu.extend(r.gpu);
                rows.mig.extend(r.mig);
                rows.process.extend(r.process);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let p = tessera_core::history::segments::write_parquet(dir.path(), 0, &rows.gpu).unwrap();
        let gpu_parquet = std::fs::read(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        Fixture {
            gpu_segment: segment("gpu", &rows.gpu),
            process_segment: segment("process", &rows.process),
            gpu: rows.gpu,
            process: rows.process,
            gpu_parquet,
            dir,
        }
    })
}

/// A file of this thread for Parquet inputs (the readers take a path).
fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let p = fixture()
        .dir
        .path()
        .join(format!("{name}-{:?}.parquet", std::thread::current().id()));
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The parquet crate panics on some corrupt files; the readers catch it (`reader::catch_panic`).
/// The default panic hook would print a backtrace under `RUST_BACKTRACE=1`, and the first one
/// symbolises the binary's debug info (about 40 MB, cached), which the allocation bound would
/// count against the reader. This hook prints the message and place only.
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|info| eprintln!("{info}"))));
}

fn config(default_cases: u32) -> Config {
    quiet_panics();
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..Config::default()
    }
}

/// A change to a byte string.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    CopyLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::CopyLine),
    ]
}

fn mutate(bytes: &[u8], ms: &[Mutation]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for m in ms {
        let n = b.len().max(1);
        match m {
            Mutation::Flip(i, x) if !b.is_empty() => b[i % n] ^= x,
            Mutation::Set(i, x) if !b.is_empty() => b[i % n] = *x,
            Mutation::Insert(i, v) => {
                let at = i % (b.len() + 1);
                b.splice(at..at, v.iter().copied());
            }
            Mutation::Delete(i, k) if !b.is_empty() => {
                let at = i % n;
                let end = (at + k).min(b.len());
                b.drain(at..end);
            }
            Mutation::Truncate(i) => b.truncate(i % (b.len() + 1)),
            Mutation::CopyLine(i) => {
                let lines: Vec<&[u8]> = b.split(|c| *c == b'\n').collect();
                let line = lines[i % lines.len()].to_vec();
                let at = b
                    .iter()
                    .position(|c| *c == b'\n')
                    .map_or(b.len(), |p| p + 1);
                let mut ins = line;
                ins.push(b'\n');
                b.splice(at..at, ins);
            }
            _ => {}
        }
    }
    b
}

/// A JSON value of any shape that a column might be given.
fn json_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-z0-9 ]{0,8}".prop_map(Value::String),
        Just(serde_json::json!([1, 2])),
        Just(serde_json::json!({"a": 1})),
    ]
}

// ---- invariants ------------------------------------------------------------------------------

fn names_position(e: &HistoryError, path: &Path, places: &[&str]) -> Result<(), String> {
    let msg = e.to_string();
    if !msg.contains(&path.display().to_string()) {
        return Err(format!("error does not name the file: {msg}"));
    }
    if !places.iter().any(|p| msg.contains(p)) {
        return Err(format!(
            "error does not name the position {places:?}: {msg}"
        ));
    }
    Ok(())
}

fn check_jsonl<R: tessera_core::history::schema::HistoryRow>(
    bytes: &[u8],
) -> Result<Option<Vec<R>>, TestCaseError> {
    let path = Path::new("/history/gpu-node-1/t/2026-11-02T00.open.jsonl");
    let (result, peak) = peak_of(|| parse_jsonl::<R>(path, bytes));
    prop_assert!(
        peak <= jsonl_bound(bytes.len()),
        "{peak} bytes allocated for {} bytes of input",
        bytes.len()
    );
    match result {
        Ok((rows, skipped)) => {
            prop_assert!(skipped <= 1);
            Ok(Some(rows))
        }
        Err(e) => {
            names_position(&e, path, &["line "]).map_err(TestCaseError::fail)?;
            Ok(None)
        }
    }
}

fn check_parquet(bytes: &[u8]) -> Result<Option<Vec<GpuRow>>, TestCaseError> {
    let path = scratch("case", bytes);
    let places = ["footer", "schema", "row group ", "row "];
    let (result, peak) = peak_of(|| read_parquet::<GpuRow>(&path));
    prop_assert!(
        peak <= parquet_bound(bytes.len()),
        "{peak} bytes allocated for {} bytes of input",
        bytes.len()
    );
    let rows = match result {
        Ok(rows) => Some(rows),
        Err(e) => {
            names_position(&e, &path, &places).map_err(TestCaseError::fail)?;
            None
        }
    };
    let (summary, peak) = peak_of(|| footer_summary(&path));
    prop_assert!(peak <= parquet_bound(bytes.len()));
    if let Err(e) = summary {
        names_position(&e, &path, &["footer"]).map_err(TestCaseError::fail)?;
    }
    let (batches, peak) = peak_of(|| read_parquet_batches(&path, Table::Gpu));
    prop_assert!(peak <= parquet_bound(bytes.len()));
    if let Err(e) = batches {
        names_position(&e, &path, &places).map_err(TestCaseError::fail)?;
    }
    Ok(rows)
}

// ---- properties ------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn jsonl_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check_jsonl::<GpuRow>(&bytes)?;
        check_jsonl::<ProcessRow>(&bytes)?;
    }

    #[test]
    fn jsonl_arbitrary_lines_after_a_valid_header(
        lines in prop::collection::vec("[ -~]{0,40}", 0..8),
        torn in any::<bool>(),
    ) {
        let mut text = String::from("{\"tessera_history\":1,\"table\":\"gpu\"}\n");
        for l in &lines {
            text.push_str(l);
            text.push('\n');
        }
        if torn {
            text.pop();
        }
        check_jsonl::<GpuRow>(text.as_bytes())?;
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn jsonl_valid_segment_cut_anywhere_reads_as_a_prefix(cut in any::<usize>()) {
        let f = fixture();
        for (seg, n) in [(&f.gpu_segment, f.gpu.len()), (&f.process_segment, f.process.len())] {
            let at = cut % (seg.len() + 1);
            let bytes = &seg[..at];
            if std::ptr::eq(seg, &f.gpu_segment) {
                let rows = check_jsonl::<GpuRow>(bytes)?;
                prop_assert!(rows.is_some(), "a cut segment is an error");
                let rows = rows.unwrap_or_default();
                prop_assert!(rows.len() <= n);
                prop_assert_eq!(&rows[..], &f.gpu[..rows.len()]);
            } else {
                let rows = check_jsonl::<ProcessRow>(bytes)?;
                prop_assert!(rows.is_some(), "a cut segment is an error");
                let rows = rows.unwrap_or_default();
                prop_assert_eq!(&rows[..], &f.process[..rows.len()]);
            }
        }
    }

    #[test]
    fn jsonl_mutated_segment(ms in prop::collection::vec(mutation(), 1..6)) {
        let f = fixture();
        check_jsonl::<GpuRow>(&mutate(&f.gpu_segment, &ms))?;
        check_jsonl::<ProcessRow>(&mutate(&f.process_segment, &ms))?;
    }

    #[test]
    fn jsonl_a_row_with_a_column_changed(
        line in any::<usize>(),
        column in any::<usize>(),
        value in json_value(),
        op in 0u8..3,
    ) {
        // A value of any type given to, taken from or added beside a column of one row.
        let f = fixture();
        let mut rows: Vec<Value> =
            f.gpu.iter().map(|r| serde_json::to_value(r).unwrap()).collect();
        let i = line % rows.len();
        let Value::Object(map) = &mut rows[i] else { unreachable!() };
        let names: Vec<String> = map.keys().cloned().collect();
        let name = &names[column % names.len()];
        match op {
            0 => { map.insert(name.clone(), value); }
            1 => { map.remove(name); }
            _ => { map.insert(format!("{name}_x"), value); }
        }
        let bytes = segment("gpu", &rows);
        if let Some(read) = check_jsonl::<GpuRow>(&bytes)? {
            // Accepted only when the row still has the table's columns and types.
            prop_assert_eq!(read.len(), rows.len());
        }
    }
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn parquet_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        magic in any::<bool>(),
    ) {
        // With the magic at both ends half the time, so the footer parser is reached.
        let mut b = bytes;
        if magic {
            b.splice(0..0, *b"PAR1");
            b.extend_from_slice(&(b.len() as u32 / 2).to_le_bytes());
            b.extend_from_slice(b"PAR1");
        }
        check_parquet(&b)?;
    }

    #[test]
    fn parquet_truncated_is_an_error_naming_the_file(cut in any::<usize>()) {
        let f = fixture();
        let at = cut % f.gpu_parquet.len();
        prop_assert!(check_parquet(&f.gpu_parquet[..at])?.is_none());
    }

    #[test]
    fn parquet_mutated(ms in prop::collection::vec(mutation(), 1..4), tail in any::<bool>()) {
        let f = fixture();
        // Half of the cases hit the last 1 KiB (footer, schema, statistics), where a byte
        // changes the meaning of everything after it.
        let ms: Vec<Mutation> = if tail {
            let n = f.gpu_parquet.len();
            ms.into_iter()
                .map(|m| match m {
                    Mutation::Flip(i, x) => Mutation::Flip(n - 1 - i % 1024.min(n), x),
                    Mutation::Set(i, x) => Mutation::Set(n - 1 - i % 1024.min(n), x),
                    m => m,
                })
                .collect()
        } else {
            ms
        };
        let bytes = mutate(&f.gpu_parquet, &ms);
        if let Some(rows) = check_parquet(&bytes)? {
            prop_assert!(rows.len() <= 2 * f.gpu.len() + 65_536);
        }
    }
}

#[test]
fn file_based_reader_names_the_file() {
    let f = fixture();
    let p = f.dir.path().join("2026-11-02T00.open.jsonl");
    let mut bytes = f.gpu_segment.clone();
    bytes.splice(0..0, b"junk\n".iter().copied());
    std::fs::write(&p, &bytes).unwrap();
    let e = read_jsonl::<GpuRow>(&p).unwrap_err().to_string();
    assert!(
        e.contains(&p.display().to_string()) && e.contains("line 1"),
        "{e}"
    );
}
