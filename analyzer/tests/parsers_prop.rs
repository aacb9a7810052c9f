//! Property tests of the analyzer's parsers on hostile input (issue 17): the CSV source (both
//! formats, through the fast reader and the line reader) and the Prometheus source's answers;
//! and the heap `tessera scale-down` holds while it reads a large findings document.
//!
//! Invariants: no panic; a bad input is an error that names the file and the line (CSV) or the
//! source and the query (Prometheus); a good-looking one gives rows whose values obey the
//! canonical ranges; the heap held during one ingest stays under [`heap_bound`] (4 MiB + 256 ×
//! the input's size, counted by a process-wide counting allocator; the properties run one at a
//! time). Large inputs are bounded by their own tests: the CSV header is read from the first MiB
//! only and answers from a server up to `--prometheus.max-response-size` (`ingest.rs`,
//! `prometheus_http.rs`). `PROPTEST_CASES=20000 cargo test -p
//! tessera --test parsers_prop` runs them longer (docs/testing.md).

use std::io::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use polars::prelude::*;
use proptest::prelude::*;
use tessera::ingest::{self, IngestError, IngestOptions, Source};

#[path = "../../core/tests/support/counting.rs"]
mod counting;

// ---- allocation accounting: process-wide, so that polars' and the fake server's threads count --

static CURRENT: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

fn track(delta: i64) {
    let now = CURRENT.fetch_add(delta, Ordering::Relaxed) + delta;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn note_i64(delta: isize) {
    track(delta as i64);
}

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting {
    note: note_i64,
    realloc_holds_both: false,
};

/// The properties run one at a time, so that the peak is the property's own.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `f` and returns its result and the most heap held above the start while it ran (by
/// every thread: polars' readers run on its pool).
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    let peak = PEAK.load(Ordering::Relaxed);
    (out, (peak - base).max(0) as u64)
}

/// The stated bound on the heap one ingest of `len` bytes of input may hold above its start: a
/// fixed part (polars' thread pool and reader buffers, the HTTP client, first-use statics) and a
/// part proportional to the input.
fn heap_bound(len: usize) -> u64 {
    HEAP_BASE + HEAP_PER_BYTE * len as u64
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A field of a generic CSV line: numbers (good, huge, negative, odd), markers, text, quotes.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        (1_793_600_000i64..1_793_700_000).prop_map(|t| t.to_string()),
        any::<f64>().prop_map(|v| v.to_string()),
        (0.0f64..1.0).prop_map(|v| format!("{v:.3}")),
        Just("".to_string()),
        Just("N/A".to_string()),
        Just("[Not Supported]".to_string()),
        Just("NaN".to_string()),
        Just("-inf".to_string()),
        Just("99999999999999999999".to_string()),
        Just("2026-11-02T14:00:11Z".to_string()),
        "[a-z_]{1,12}",
        "\"[a-z, ]{0,8}\"",
        any::<String>(),
        prop_oneof![
            Just("gpu_busy_ratio"),
            Just("memory_used_bytes"),
            Just("sm_ratio"),
            Just("xid_count"),
            Just("power_watts"),
        ]
        .prop_map(str::to_string),
        prop_oneof![Just("gpu"), Just("mig"), Just("process"), Just("pod")]
            .prop_map(str::to_string),
    ]
}

fn csv_text() -> impl Strategy<Value = String> {
    let header = prop_oneof![
        Just("timestamp,entity,metric,value,kind,pid,pod".to_string()),
        Just("timestamp,entity,metric,value".to_string()),
        Just("timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB]".to_string()),
        "[a-z,]{0,40}",
    ];
    let line = prop::collection::vec(field(), 0..9).prop_map(|f| f.join(","));
    (header, prop::collection::vec(line, 0..30), any::<bool>()).prop_map(|(h, lines, crlf)| {
        let eol = if crlf { "\r\n" } else { "\n" };
        let mut s = h;
        for l in lines {
            s.push_str(eol);
            s.push_str(&l);
        }
        s
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(1000), ..ProptestConfig::default() })]

    /// Any CSV text: rows or an error naming the file (and the line for a bad line); never a
    /// panic; rows obey the canonical ranges.
    #[test]
    fn csv_never_panics_and_errors_name_file_and_line(text in csv_text(), skip in any::<bool>()) {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("in.csv");
        std::fs::File::create(&path).and_then(|mut f| f.write_all(text.as_bytes())).expect("write");
        let opts = IngestOptions { skip_bad_rows: skip, ..IngestOptions::default() };
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let (result, peak) = peak_of(|| ingest::ingest(&[Source::csv(path.clone())], &opts));
        note_peak("csv", peak, text.len());
        prop_assert!(peak <= heap_bound(text.len()), "{peak} bytes of heap for {} bytes of CSV (bound {})", text.len(), heap_bound(text.len()));
        match result {
            Ok((frames, _)) => {
                let g = frames.gpu.collect().expect("gpu frame");
                for c in ["busy_mean", "busy_max"] {
                    let v = g.column(c).expect("col").f64().expect("f64").clone();
                    prop_assert!(v.iter().flatten().all(|x| (0.0..=1.0).contains(&x)), "{c}");
                }
                let ts = g.column("ts").expect("ts").cast(&DataType::Int64).expect("i64");
                prop_assert!(ts.i64().expect("i64").iter().flatten().all(|t| t >= 0));
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("in.csv"), "{msg}");
                prop_assert!(msg.len() < 2_000, "{} bytes of error", msg.len());
                if let IngestError::Line { line, .. } = e {
                    prop_assert!(line >= 1);
                }
            }
        }
    }
}

/// A JSON value of any shape, biased towards the Prometheus API's.
fn json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<f64>().prop_map(|v| serde_json::json!(v)),
        any::<i64>().prop_map(|v| serde_json::json!(v)),
        "[a-zA-Z0-9_.+-]{0,10}".prop_map(serde_json::Value::String),
        Just(serde_json::json!("NaN")),
        Just(serde_json::json!("+Inf")),
        Just(serde_json::json!("1e308")),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("metric".to_string()),
                    Just("values".to_string()),
                    Just("gpu".to_string()),
                    Just("uuid".to_string()),
                    Just("instance".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(2000), ..ProptestConfig::default() })]

    /// Any answer from a server (a matrix of arbitrary series, or any JSON at all): rows or an
    /// error naming the source; never a panic.
    #[test]
    fn prometheus_answers_never_panic(result in prop::collection::vec(json(), 0..4), raw in json()) {
        let fake = Fake::new(result, raw);
        let opts = IngestOptions {
            since: Some(1_793_577_600_000),
            until: Some(1_793_577_660_000),
            interval_ms: Some(10_000),
            prometheus: ingest::PrometheusOptions {
                timeout: std::time::Duration::from_secs(2),
                attempts: 1,
                ..ingest::PrometheusOptions::default()
            },
            ..IngestOptions::default()
        };
        let src: Source = format!("prometheus:{}", fake.url).parse().expect("source");
        let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let (result, peak) = peak_of(|| ingest::ingest(&[src], &opts));
        let len = fake.bytes;
        note_peak("prometheus", peak, len);
        prop_assert!(peak <= heap_bound(len), "{peak} bytes of heap for {len} bytes of answers (bound {})", heap_bound(len));
        match result {
            Ok((frames, _)) => {
                let g = frames.gpu.collect().expect("gpu frame");
                let v = g.column("busy_max").expect("col").f64().expect("f64").clone();
                prop_assert!(v.iter().flatten().all(|x| (0.0..=1.0).contains(&x)));
            }
            Err(e) => prop_assert!(e.to_string().contains("prometheus:http://127.0.0.1"), "{e}"),
        }
    }
}

/// A one-shot fake Prometheus: `/values` lists tessera's busy metric; range queries answer a
/// matrix of `result` (the first request) and then `raw` as the whole body's `data`.
struct Fake {
    url: String,
    /// The size of the answers' JSON (both of them).
    bytes: usize,
}

impl Fake {
    fn new(result: Vec<serde_json::Value>, raw: serde_json::Value) -> Fake {
        use std::io::{BufRead, BufReader, Read};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let bytes = serde_json::to_string(&result).map_or(0, |s| s.len())
            + serde_json::to_string(&raw).map_or(0, |s| s.len());
        std::thread::spawn(move || {
            for (i, stream) in listener.incoming().enumerate() {
                let Ok(mut stream) = stream else { return };
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                        break;
                    }
                }
                let body = if line.contains("/values") {
                    serde_json::json!({"status": "success", "data": ["tessera_gpu_busy_ratio"]})
                } else if i % 2 == 1 {
                    serde_json::json!({"status": "success",
                        "data": {"resultType": "matrix", "result": result}})
                } else {
                    serde_json::json!({"status": "success", "data": raw})
                }
                .to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
                let mut rest = Vec::new();
                let _ = reader.read_to_end(&mut rest);
                if i > 200 {
                    return;
                }
            }
        });
        Fake { url, bytes }
    }
}

/// Measured (debug build, 2026-11-24): at most ~1.2 MB for any CSV input of up to 2.6 KB and
/// ~0.9 MB for any answer, nearly all of it fixed (polars' reader setup, the HTTP client); the
/// bound leaves room for other allocators' rounding, not for a copy per byte.
const HEAP_BASE: u64 = 4 << 20;
const HEAP_PER_BYTE: u64 = 256;

fn note_peak(what: &str, peak: u64, len: usize) {
    if std::env::var_os("TESSERA_PEAKS").is_some() {
        eprintln!("PEAK {what} {peak} {len}");
    }
}

/// `tessera scale-down --findings` reads the findings document as a stream (issue 49): the heap
/// held while a document of 19.8 MB is read is bounded by the findings that count (here 40 of
/// 8,000), not by the document. Measured (debug build, 2026-11-29): 25 KB; the same document
/// read whole into a `serde_json::Value`: 54 MB.
#[test]
fn a_findings_document_is_read_in_heap_bounded_by_the_findings_that_count() {
    use tessera::scale_down::findings::FindingsDoc;
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let filler = "not read by scale-down; ".repeat(30);
    let mut text = String::from(
        r#"{"version":1,"until":"2026-11-30T00:00:00Z","detectors":[{"id":"offpeak_window","data":{"profile":["#,
    );
    text.push_str(&vec![r#"{"hour":1,"p95":0.5}"#; 20_000].join(","));
    text.push_str(r#"]}}],"findings":["#);
    for i in 0..8000 {
        let detector = if i % 200 == 7 {
            "idle_loaded"
        } else {
            "busy_not_working"
        };
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!(
            r#"{{"id":"{detector}-{i:016x}","detector":"{detector}","entity":{{"namespace":"ml","pod":"p{i}"}},"summary":"{filler}","action":"{filler}","evidence":{{"kind":"x","spans":[{{"start":"2026-11-29T00:00:00Z","end":"2026-11-30T00:00:00Z","minutes":1440}}],"note":"{filler}"}}}}"#
        ));
    }
    text.push_str("]}");
    assert!(text.len() > 16 << 20, "{}", text.len());
    let (doc, peak) = peak_of(|| {
        serde_json::from_reader::<_, FindingsDoc>(std::io::BufReader::new(text.as_bytes())).unwrap()
    });
    let counted = doc.findings.unwrap();
    assert_eq!((counted.total, counted.kept.len()), (8000, 40));
    note_peak("findings", peak, text.len());
    assert!(
        peak < 1 << 20,
        "reading {} bytes of findings held {peak} bytes of heap",
        text.len()
    );
    // The bound tells the two apart: the whole document as a `Value` holds more than itself.
    let (_, whole) = peak_of(|| serde_json::from_str::<serde_json::Value>(&text).unwrap());
    assert!(whole > text.len() as u64, "{whole}");
    note_peak("findings as a Value", whole, text.len());
}
