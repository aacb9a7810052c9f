//! A property test of the remote-read decoder on hostile answers (issue 27): frames of XOR
//! chunks that claim and hold up to 65,535 samples at 2 bits each, series joined across frames,
//! many series. Invariant: the heap one answer holds stays under 1 MiB + 8 × the bound
//! (`--prometheus.max-response-size`), counted by a process-wide counting allocator, whatever
//! the answer says; an answer over a bound is refused naming the flag that raises it. A binary
//! of its own: it owns the global allocator and its one property runs alone.
//! `PROPTEST_CASES=2000 cargo test -p tessera --test remote_read_props` runs it longer.

use std::sync::atomic::{AtomicI64, Ordering};

use proptest::prelude::*;
use tessera::ingest;

#[path = "../../core/tests/support/counting.rs"]
mod counting;

static CURRENT: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);

fn note(delta: isize) {
    let now = CURRENT.fetch_add(delta as i64, Ordering::Relaxed) + delta as i64;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting {
    note,
    realloc_holds_both: true,
};

/// Runs `f` and returns its result and the most heap held above the start while it ran.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    let peak = PEAK.load(Ordering::Relaxed);
    (out, (peak - base).max(0) as u64)
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The messages of `prompb/remote.proto` the streamed answer holds, declared here as the server
/// sends them (the same field numbers as the reader's own declarations).
mod prompb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Chunk {
        #[prost(int64, tag = "1")]
        pub min_time_ms: i64,
        #[prost(int64, tag = "2")]
        pub max_time_ms: i64,
        #[prost(int32, tag = "3")]
        pub r#type: i32,
        #[prost(bytes = "vec", tag = "4")]
        pub data: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ChunkedSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        #[prost(message, repeated, tag = "2")]
        pub chunks: Vec<Chunk>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ChunkedReadResponse {
        #[prost(message, repeated, tag = "1")]
        pub chunked_series: Vec<ChunkedSeries>,
        #[prost(int64, tag = "2")]
        pub query_index: i64,
    }
}

/// An XOR chunk of `n` samples (2 ≤ n ≤ 65,535) one millisecond apart, all 0.0: 2 bits a sample
/// after the first two, so 65,535 samples (1 MiB decoded) take 16 KiB.
fn xor_bomb(n: u16) -> Vec<u8> {
    let n = n.max(2);
    let mut out = n.to_be_bytes().to_vec();
    out.push(0); // first timestamp 0 (zig-zag varint)
    out.extend([0u8; 8]); // first value 0.0
    out.push(1); // second timestamp: delta 1
    // The second value's bit, then 2 zero bits a sample (same delta, same value).
    out.extend(vec![0u8; (1 + 2 * (usize::from(n) - 2)).div_ceil(8)]);
    out
}

/// One streamed frame: uvarint size, big-endian CRC-32C, the message.
fn stream_frame(msg: &prompb::ChunkedReadResponse) -> Vec<u8> {
    use prost::Message as _;
    let body = msg.encode_to_vec();
    let mut out = Vec::new();
    let mut n = body.len() as u64;
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend(crc32c::crc32c(&body).to_be_bytes());
    out.extend(body);
    out
}

/// A hostile streamed answer's shape: frames of series (a name out of 4, so that series are
/// joined across frames), each of chunks of up to 65,535 samples; and a bound.
type Shape = Vec<Vec<(u8, Vec<u16>)>>;

fn shape() -> impl Strategy<Value = (Shape, u64)> {
    let series = (0u8..4, prop::collection::vec(2u16..=65_535, 1..40));
    let frame = prop::collection::vec(series, 1..6);
    (prop::collection::vec(frame, 1..6), 16u64..(1 << 20))
}

/// The answer of that shape: chunks that claim (and hold) their samples at 2 bits each.
fn answer(frames: Shape) -> Vec<u8> {
    {
        let mut body = Vec::new();
        for f in frames {
            let msg = prompb::ChunkedReadResponse {
                chunked_series: f
                    .into_iter()
                    .map(|(name, chunks)| prompb::ChunkedSeries {
                        labels: vec![prompb::Label {
                            name: "__name__".into(),
                            value: format!("m{name}"),
                        }],
                        chunks: chunks
                            .into_iter()
                            .map(|n| prompb::Chunk {
                                min_time_ms: 0,
                                max_time_ms: i64::from(n),
                                r#type: 1,
                                data: xor_bomb(n),
                            })
                            .collect(),
                    })
                    .collect(),
                query_index: 0,
            };
            body.extend(stream_frame(&msg));
        }
        body
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(300), ..ProptestConfig::default() })]

    /// Issue 27: chunks were decoded at 16 bytes a sample before the per-series bound was
    /// checked, so a 33 MB frame of 2-bit samples took 3.7 GB. The heap one answer holds stays
    /// under 1 MiB + 8 × the bound, whatever the answer says.
    #[test]
    fn remote_read_decodes_within_its_bound((frames, max) in shape()) {
        let body = answer(frames);
        let limits = ingest::remote_read::Limits { max_bytes: max, max_series: 100 };
        let (result, peak) = peak_of(|| {
            ingest::remote_read::read_streamed(
                &mut std::io::BufReader::new(body.as_slice()),
                &[(0, i64::MAX)],
                limits,
                |s| {
                    // What a series may hold: within the bound.
                    assert!(16 * s.ts.len() as u64 <= max);
                    Ok(())
                },
            )
        });
        let bound = (1u64 << 20) + 8 * max;
        prop_assert!(
            peak <= bound,
            "held {peak} bytes for a {}-byte answer with a {max}-byte bound ({result:?})",
            body.len()
        );
        if let Err(e) = result {
            let e = e.to_string();
            prop_assert!(
                e.contains("--prometheus.max-response-size") || e.contains("--prometheus.max-series"),
                "{e}"
            );
        }
    }
}
