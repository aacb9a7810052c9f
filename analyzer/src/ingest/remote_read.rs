//! Prometheus' remote-read protocol (`POST /api/v1/read`), client side: the request, the two
//! answers (`STREAMED_XOR_CHUNKS` frames and the older snappy-compressed `SAMPLES` message) and
//! the XOR (Gorilla) chunk encoding, decoded into raw samples per series.
//!
//! The messages are those of `prompb/remote.proto` and `prompb/types.proto` (the fields this
//! client uses), declared by hand for `prost`. A streamed answer is read frame by frame
//! (uvarint size, big-endian CRC-32C of the message, the `ChunkedReadResponse`) and each series is
//! handed over as soon as its last frame is read, so memory is bounded by one series, not by the
//! answer. Stale markers are dropped (PromQL's range functions skip them too), and samples
//! outside the query's range (a chunk may hold some) are cut.
//!
//! This module does no HTTP, no PromQL and no evaluation: the `prometheus:` source sends the
//! request ([`encode_request`]) and evaluates the samples (`super::promeval`).

use std::collections::BTreeMap;
use std::io::Read;

use prost::Message;

/// `prompb.LabelMatcher`.
#[derive(Clone, PartialEq, Message)]
pub struct LabelMatcher {
    /// 0 EQ, 1 NEQ, 2 RE, 3 NRE.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub value: String,
}

impl LabelMatcher {
    /// `name="value"`.
    pub fn eq(name: &str, value: &str) -> Self {
        LabelMatcher {
            r#type: 0,
            name: name.into(),
            value: value.into(),
        }
    }

    /// `name=~"regex"` (RE2, anchored by the server).
    pub fn re(name: &str, value: &str) -> Self {
        LabelMatcher {
            r#type: 2,
            name: name.into(),
            value: value.into(),
        }
    }
}

/// `prompb.Query`.
#[derive(Clone, PartialEq, Message)]
pub struct Query {
    #[prost(int64, tag = "1")]
    pub start_timestamp_ms: i64,
    #[prost(int64, tag = "2")]
    pub end_timestamp_ms: i64,
    #[prost(message, repeated, tag = "3")]
    pub matchers: Vec<LabelMatcher>,
}

/// `prompb.ReadRequest`.
#[derive(Clone, PartialEq, Message)]
struct ReadRequest {
    #[prost(message, repeated, tag = "1")]
    queries: Vec<Query>,
    /// 0 SAMPLES, 1 STREAMED_XOR_CHUNKS; the server takes the first it implements.
    #[prost(int32, repeated, tag = "2")]
    accepted_response_types: Vec<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct Label {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
}

#[derive(Clone, PartialEq, Message)]
struct Sample {
    #[prost(double, tag = "1")]
    value: f64,
    #[prost(int64, tag = "2")]
    timestamp: i64,
}

#[derive(Clone, PartialEq, Message)]
struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    samples: Vec<Sample>,
}

#[derive(Clone, PartialEq, Message)]
struct QueryResult {
    #[prost(message, repeated, tag = "1")]
    timeseries: Vec<TimeSeries>,
}

#[derive(Clone, PartialEq, Message)]
struct ReadResponse {
    #[prost(message, repeated, tag = "1")]
    results: Vec<QueryResult>,
}

#[derive(Clone, PartialEq, Message)]
struct Chunk {
    #[prost(int64, tag = "1")]
    min_time_ms: i64,
    #[prost(int64, tag = "2")]
    max_time_ms: i64,
    /// 1 XOR, 2 HISTOGRAM, 3 FLOAT_HISTOGRAM.
    #[prost(int32, tag = "3")]
    r#type: i32,
    #[prost(bytes = "vec", tag = "4")]
    data: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct ChunkedSeries {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    chunks: Vec<Chunk>,
}

#[derive(Clone, PartialEq, Message)]
struct ChunkedReadResponse {
    #[prost(message, repeated, tag = "1")]
    chunked_series: Vec<ChunkedSeries>,
    #[prost(int64, tag = "2")]
    query_index: i64,
}

/// What went wrong reading a remote-read answer.
#[derive(Debug, thiserror::Error)]
pub enum RemoteReadError {
    #[error("reading the answer: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame {frame} (at byte {offset}): {what}")]
    Frame {
        frame: u64,
        offset: u64,
        what: String,
    },
    #[error("bad protobuf message: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("bad snappy block: {0}")]
    Snappy(#[from] snap::Error),
    #[error("series {series}: bad XOR chunk: {what}")]
    Chunk { series: String, what: String },
    #[error("answer to query {index}, but {queries} were sent")]
    QueryIndex { index: i64, queries: usize },
    /// Over one of [`Limits`]: what, and the flag that raises it.
    #[error("{what} (raise it with {flag})")]
    Limit { what: String, flag: &'static str },
}

/// Bounds of one answer, applied as it is read and decoded, before what they bound is
/// allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes (`--prometheus.max-response-size`): of the whole streamed answer as sent (and so
    /// of each frame), of a samples answer once decompressed (snappy states the length first),
    /// and of one series' decoded samples at 16 bytes a sample (counted from each chunk's
    /// header before the chunk is decoded).
    pub max_bytes: u64,
    /// Series in one answer (`--prometheus.max-series`).
    pub max_series: u64,
}

impl Limits {
    fn bytes(what: String) -> RemoteReadError {
        RemoteReadError::Limit {
            what,
            flag: "--prometheus.max-response-size",
        }
    }

    /// Refuses series number `n` (from 1) when there are too many.
    fn series(&self, n: u64) -> Result<(), RemoteReadError> {
        if n > self.max_series {
            return Err(RemoteReadError::Limit {
                what: format!("more than {} series in one answer", self.max_series),
                flag: "--prometheus.max-series",
            });
        }
        Ok(())
    }
}

/// The sample count an XOR chunk's header states (0 when it has none).
fn chunk_samples(data: &[u8]) -> u64 {
    match data {
        [a, b, ..] => u64::from(u16::from_be_bytes([*a, *b])),
        _ => 0,
    }
}

/// The answer types a request accepts, best first.
pub const STREAMED_XOR_CHUNKS: i32 = 1;
/// Samples in one snappy-compressed `ReadResponse`.
pub const SAMPLES: i32 = 0;

/// The request body (snappy-compressed `ReadRequest`), accepting streamed chunks first, samples
/// second.
pub fn encode_request(queries: Vec<Query>) -> Vec<u8> {
    let req = ReadRequest {
        queries,
        accepted_response_types: vec![STREAMED_XOR_CHUNKS, SAMPLES],
    };
    snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .expect("snappy compresses any input")
}

/// One series of an answer: its query's index, labels (with `__name__`) and samples in time
/// order (chunks that overlap — a store that does not merge its blocks — are merged, one sample
/// per timestamp, the first kept), stale markers dropped.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub query: usize,
    pub labels: BTreeMap<String, String>,
    pub ts: Vec<i64>,
    pub vals: Vec<f64>,
}

/// Prometheus' staleness marker (a NaN with this bit pattern).
const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// Counts of what reading an answer found, for the report.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadStats {
    pub frames: u64,
    pub series: u64,
    pub samples: u64,
    /// Chunks of another encoding (native histograms), skipped.
    pub skipped_chunks: u64,
}

/// Decodes a series' XOR chunks of one frame into it, within `start`..`end`: chunks of
/// another encoding are skipped (counted), and the samples held are bounded by `max_frame` at
/// 16 bytes a sample, before each chunk is decoded and once all are.
fn decode_chunks(
    series: &mut Series,
    chunks: &[Chunk],
    (start, end): (i64, i64),
    max_frame: u64,
    stats: &mut ReadStats,
) -> Result<(), RemoteReadError> {
    for c in chunks {
        if c.r#type != 1 {
            stats.skipped_chunks += 1;
            continue;
        }
        // The chunk's own count bounds what it decodes to: checked before decoding.
        let would = 16 * (series.ts.len() as u64 + chunk_samples(&c.data));
        if would > max_frame {
            return Err(RemoteReadError::Chunk {
                series: fmt_labels(&series.labels),
                what: format!(
                    "{} samples and a chunk of {} more ({would} bytes), more than the \
                     {max_frame} bytes allowed (--prometheus.max-response-size)",
                    series.ts.len(),
                    chunk_samples(&c.data)
                ),
            });
        }
        decode_xor(&c.data, start, end, &mut series.ts, &mut series.vals).map_err(|what| {
            RemoteReadError::Chunk {
                series: fmt_labels(&series.labels),
                what,
            }
        })?;
    }
    // One series is held whole (its frames joined): bounded like one frame, at 16 bytes
    // a sample.
    let held = 16 * series.ts.len() as u64;
    if held > max_frame {
        return Err(RemoteReadError::Chunk {
            series: fmt_labels(&series.labels),
            what: format!(
                "{} samples ({held} bytes), more than the {max_frame} bytes allowed \
                 (--prometheus.max-response-size)",
                series.ts.len()
            ),
        });
    }
    Ok(())
}

/// Hands a whole series to `each`, its samples in time order, and counts it.
fn hand_over(
    mut p: Series,
    stats: &mut ReadStats,
    each: &mut impl FnMut(Series) -> Result<(), RemoteReadError>,
) -> Result<(), RemoteReadError> {
    in_order(&mut p);
    stats.series += 1;
    stats.samples += p.ts.len() as u64;
    each(p)
}

/// Reads a `STREAMED_XOR_CHUNKS` answer from `body` and hands each series to `each`, once its
/// last frame is read (a series split over consecutive frames is joined). `ranges` are the
/// queries' (start, end) in ms. An answer over `limits` — more bytes than `max_bytes` in all,
/// a series whose samples would take more than `max_bytes` (16 bytes each, counted from the
/// chunks' headers before they are decoded), more series than `max_series` — is an error (a
/// hostile or broken server), as is a bad checksum. Memory: one frame, one series' samples and
/// what `each` keeps.
pub fn read_streamed(
    body: &mut dyn Read,
    ranges: &[(i64, i64)],
    limits: Limits,
    mut each: impl FnMut(Series) -> Result<(), RemoteReadError>,
) -> Result<ReadStats, RemoteReadError> {
    let max_frame = limits.max_bytes;
    let mut started = 0u64;
    let mut stats = ReadStats::default();
    let mut pending: Option<Series> = None;
    let mut offset = 0u64;
    let mut buf = Vec::new();
    loop {
        let frame_at = offset;
        let bad = |what: String| RemoteReadError::Frame {
            frame: stats.frames,
            offset: frame_at,
            what,
        };
        let Some((size, n)) =
            read_uvarint(body).map_err(|e| bad(format!("the frame size: {e}")))?
        else {
            break;
        };
        offset += n;
        if size > max_frame {
            return Err(bad(format!(
                "a frame of {size} bytes, more than the {max_frame} allowed \
                 (--prometheus.max-response-size)"
            )));
        }
        if offset.saturating_add(4).saturating_add(size) > max_frame {
            return Err(Limits::bytes(format!(
                "the answer is larger than {max_frame} bytes (frame {} ends at byte {})",
                stats.frames,
                offset.saturating_add(4).saturating_add(size)
            )));
        }
        let mut crc = [0u8; 4];
        read_exact(body, &mut crc).map_err(|e| bad(format!("the checksum: {e}")))?;
        buf.resize(size as usize, 0);
        read_exact(body, &mut buf).map_err(|e| bad(format!("{size} bytes of message: {e}")))?;
        offset += 4 + size;
        let want = u32::from_be_bytes(crc);
        let got = crc32c::crc32c(&buf);
        if want != got {
            return Err(bad(format!(
                "checksum mismatch (frame says {want:08x}, message has {got:08x})"
            )));
        }
        let msg = ChunkedReadResponse::decode(buf.as_slice())?;
        stats.frames += 1;
        let index = msg.query_index;
        let query = usize::try_from(index)
            .ok()
            .filter(|i| *i < ranges.len())
            .ok_or(RemoteReadError::QueryIndex {
                index,
                queries: ranges.len(),
            })?;
        let (start, end) = ranges[query];
        for cs in msg.chunked_series {
            let labels = labels_of(cs.labels);
            let mut series = match pending.take() {
                Some(p) if p.query == query && p.labels == labels => p,
                done => {
                    if let Some(p) = done {
                        hand_over(p, &mut stats, &mut each)?;
                    }
                    started += 1;
                    limits.series(started)?;
                    Series {
                        query,
                        labels,
                        ts: Vec::new(),
                        vals: Vec::new(),
                    }
                }
            };
            decode_chunks(&mut series, &cs.chunks, (start, end), max_frame, &mut stats)?;
            pending = Some(series);
        }
    }
    if let Some(p) = pending {
        hand_over(p, &mut stats, &mut each)?;
    }
    Ok(stats)
}

/// Reads a `SAMPLES` answer (one snappy-compressed `ReadResponse`, already read into `body`)
/// and hands each series to `each`. Its decompressed length (stated first in the block) must be
/// within `limits.max_bytes`, its series within `limits.max_series`.
pub fn read_samples(
    body: &[u8],
    ranges: &[(i64, i64)],
    limits: Limits,
    mut each: impl FnMut(Series) -> Result<(), RemoteReadError>,
) -> Result<ReadStats, RemoteReadError> {
    let len = snap::raw::decompress_len(body)? as u64;
    if len > limits.max_bytes {
        return Err(Limits::bytes(format!(
            "the answer decompresses to {len} bytes, more than the {} allowed",
            limits.max_bytes
        )));
    }
    let raw = snap::raw::Decoder::new().decompress_vec(body)?;
    let resp = ReadResponse::decode(raw.as_slice())?;
    if resp.results.len() > ranges.len() {
        return Err(RemoteReadError::QueryIndex {
            index: resp.results.len() as i64 - 1,
            queries: ranges.len(),
        });
    }
    let mut stats = ReadStats {
        frames: 1,
        ..ReadStats::default()
    };
    for (query, result) in resp.results.into_iter().enumerate() {
        let (start, end) = ranges[query];
        for s in result.timeseries {
            limits.series(stats.series + 1)?;
            let mut ts = Vec::with_capacity(s.samples.len());
            let mut vals = Vec::with_capacity(s.samples.len());
            for x in &s.samples {
                if x.timestamp < start || x.timestamp > end || x.value.to_bits() == STALE_NAN {
                    continue;
                }
                ts.push(x.timestamp);
                vals.push(x.value);
            }
            let mut series = Series {
                query,
                labels: labels_of(s.labels),
                ts,
                vals,
            };
            in_order(&mut series);
            stats.series += 1;
            stats.samples += series.ts.len() as u64;
            each(series)?;
        }
    }
    Ok(stats)
}

/// Puts a series' samples in time order, one per timestamp (the first chunk's kept), where
/// overlapping chunks left them otherwise.
fn in_order(s: &mut Series) {
    if s.ts.windows(2).all(|w| w[0] < w[1]) {
        return;
    }
    let mut pairs: Vec<(i64, f64)> = s.ts.iter().copied().zip(s.vals.iter().copied()).collect();
    pairs.sort_by_key(|p| p.0);
    pairs.dedup_by_key(|p| p.0);
    (s.ts, s.vals) = pairs.into_iter().unzip();
}

fn labels_of(labels: Vec<Label>) -> BTreeMap<String, String> {
    labels.into_iter().map(|l| (l.name, l.value)).collect()
}

fn fmt_labels(labels: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", inner.join(","))
}

/// `read_exact` that names a short read.
fn read_exact(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<()> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            std::io::Error::new(e.kind(), "the answer ends inside a frame")
        } else {
            e
        }
    })
}

/// A uvarint and its length in bytes; `None` at a clean end of the stream.
fn read_uvarint(r: &mut dyn Read) -> std::io::Result<Option<(u64, u64)>> {
    let mut x = 0u64;
    for i in 0..10u32 {
        let mut b = [0u8; 1];
        let n = loop {
            match r.read(&mut b) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        if n == 0 {
            if i == 0 {
                return Ok(None);
            }
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the answer ends inside a frame",
            ));
        }
        x |= u64::from(b[0] & 0x7f) << (7 * i);
        if b[0] < 0x80 {
            return Ok(Some((x, u64::from(i) + 1)));
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "longer than 10 bytes",
    ))
}

/// Big-endian bit reader over a chunk's bytes.
struct Bits<'a> {
    b: &'a [u8],
    /// Position in bits.
    pos: usize,
}

impl Bits<'_> {
    fn bit(&mut self) -> Result<bool, String> {
        let byte = *self.b.get(self.pos / 8).ok_or("ends early")?;
        let v = (byte >> (7 - (self.pos % 8))) & 1 == 1;
        self.pos += 1;
        Ok(v)
    }

    fn bits(&mut self, n: u32) -> Result<u64, String> {
        if self.pos + n as usize > self.b.len() * 8 {
            return Err("ends early".into());
        }
        let mut v = 0u64;
        let mut left = n;
        while left > 0 {
            let byte = self.b[self.pos / 8];
            let off = (self.pos % 8) as u32;
            let take = (8 - off).min(left);
            let chunk = (u64::from(byte) >> (8 - off - take)) & ((1u64 << take) - 1);
            v = (v << take) | chunk;
            self.pos += take as usize;
            left -= take;
        }
        Ok(v)
    }

    fn uvarint(&mut self) -> Result<u64, String> {
        let mut x = 0u64;
        for i in 0..10 {
            let b = self.bits(8)? as u8;
            x |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(x);
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn varint(&mut self) -> Result<i64, String> {
        let u = self.uvarint()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
}

/// Decodes one XOR chunk (Prometheus' `tsdb/chunkenc/xor.go`: a big-endian sample count, then
/// the first timestamp as a varint and value as 64 bits, the second timestamp's delta as a
/// uvarint, then delta-of-delta timestamps and XOR-ed values) and appends the samples in
/// `[start, end]`, stale markers dropped, to `ts` and `vals`.
pub fn decode_xor(
    data: &[u8],
    start: i64,
    end: i64,
    ts: &mut Vec<i64>,
    vals: &mut Vec<f64>,
) -> Result<(), String> {
    if data.len() < 2 {
        return Err("shorter than its sample count".into());
    }
    let n = u16::from_be_bytes([data[0], data[1]]) as usize;
    ts.reserve(n);
    vals.reserve(n);
    let mut r = Bits {
        b: &data[2..],
        pos: 0,
    };
    let (mut t, mut delta, mut v) = (0i64, 0i64, 0u64);
    let (mut leading, mut trailing) = (0u32, 0u32);
    for i in 0..n {
        match i {
            0 => {
                t = r.varint()?;
                v = r.bits(64)?;
            }
            1 => {
                delta = i64::try_from(r.uvarint()?).map_err(|_| "a timestamp delta overflows")?;
                t = t.checked_add(delta).ok_or("a timestamp overflows")?;
            }
            _ => {
                let mut d = 0u8;
                for _ in 0..4 {
                    d <<= 1;
                    if !r.bit()? {
                        break;
                    }
                    d |= 1;
                }
                let dod: i64 = match d {
                    0b0 => 0,
                    0b10 | 0b110 | 0b1110 => {
                        let sz = match d {
                            0b10 => 14,
                            0b110 => 17,
                            _ => 20,
                        };
                        let mut bits = r.bits(sz)? as i64;
                        if bits > (1 << (sz - 1)) {
                            bits -= 1 << sz;
                        }
                        bits
                    }
                    _ => r.bits(64)? as i64,
                };
                delta = delta
                    .checked_add(dod)
                    .ok_or("a timestamp delta overflows")?;
                t = t.checked_add(delta).ok_or("a timestamp overflows")?;
            }
        }
        if i > 0 && r.bit()? {
            if r.bit()? {
                leading = r.bits(5)? as u32;
                let mut sig = r.bits(6)? as u32;
                if sig == 0 {
                    sig = 64;
                }
                if leading + sig > 64 {
                    return Err("a value's bit counts exceed 64".into());
                }
                trailing = 64 - leading - sig;
            }
            let sig = 64 - leading - trailing;
            let x = r.bits(sig)?;
            v ^= if trailing >= 64 { 0 } else { x << trailing };
        }
        if t >= start && t <= end && v != STALE_NAN {
            ts.push(t);
            vals.push(f64::from_bits(v));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(max_bytes: u64) -> Limits {
        Limits {
            max_bytes,
            max_series: 1000,
        }
    }

    /// An XOR chunk encoder after `xor.go`, to test the decoder against.
    struct Enc {
        out: Vec<u8>,
        bit: u32,
        n: u16,
        t: i64,
        delta: i64,
        v: u64,
        leading: u32,
        trailing: u32,
    }

    impl Enc {
        fn new() -> Self {
            Enc {
                out: Vec::new(),
                bit: 0,
                n: 0,
                t: 0,
                delta: 0,
                v: 0,
                leading: 0xff,
                trailing: 0,
            }
        }
        fn put(&mut self, b: bool) {
            if self.bit == 0 {
                self.out.push(0);
            }
            if b {
                *self.out.last_mut().unwrap() |= 1 << (7 - self.bit);
            }
            self.bit = (self.bit + 1) % 8;
        }
        fn puts(&mut self, v: u64, n: u32) {
            for i in (0..n).rev() {
                self.put((v >> i) & 1 == 1);
            }
        }
        fn uvarint(&mut self, mut x: u64) {
            loop {
                let b = (x & 0x7f) as u8;
                x >>= 7;
                if x == 0 {
                    self.puts(u64::from(b), 8);
                    return;
                }
                self.puts(u64::from(b | 0x80), 8);
            }
        }
        fn append(&mut self, t: i64, v: f64) {
            let v = v.to_bits();
            match self.n {
                0 => {
                    self.uvarint(((t << 1) ^ (t >> 63)) as u64);
                    self.puts(v, 64);
                }
                1 => {
                    self.delta = t - self.t;
                    self.uvarint(self.delta as u64);
                    self.xor(v);
                }
                _ => {
                    let d = t - self.t;
                    let dod = d - self.delta;
                    let fits = |n: u32| -((1i64 << (n - 1)) - 1) <= dod && dod <= 1 << (n - 1);
                    if dod == 0 {
                        self.put(false);
                    } else if fits(14) {
                        self.puts(0b10, 2);
                        self.puts(dod as u64 & ((1 << 14) - 1), 14);
                    } else if fits(17) {
                        self.puts(0b110, 3);
                        self.puts(dod as u64 & ((1 << 17) - 1), 17);
                    } else if fits(20) {
                        self.puts(0b1110, 4);
                        self.puts(dod as u64 & ((1 << 20) - 1), 20);
                    } else {
                        self.puts(0b1111, 4);
                        self.puts(dod as u64, 64);
                    }
                    self.delta = d;
                    self.xor(v);
                }
            }
            self.t = t;
            self.v = v;
            self.n += 1;
        }
        fn xor(&mut self, v: u64) {
            let delta = v ^ self.v;
            if delta == 0 {
                self.put(false);
                return;
            }
            self.put(true);
            let lead = delta.leading_zeros().min(31);
            let trail = delta.trailing_zeros();
            if self.leading != 0xff && lead >= self.leading && trail >= self.trailing {
                self.put(false);
                self.puts(delta >> self.trailing, 64 - self.leading - self.trailing);
                return;
            }
            self.leading = lead;
            self.trailing = trail;
            self.put(true);
            self.puts(u64::from(lead), 5);
            let sig = 64 - lead - trail;
            self.puts(u64::from(sig) & 63, 6);
            self.puts(delta >> trail, sig);
        }
        fn bytes(&self) -> Vec<u8> {
            let mut b = self.n.to_be_bytes().to_vec();
            b.extend(&self.out);
            b
        }
    }

    fn sample_data() -> Vec<(i64, f64)> {
        let mut out = Vec::new();
        let mut t = 1_700_000_000_000i64;
        for i in 0..300i64 {
            // Jitter of every size class, repeated values, zeros, negatives, huge values.
            t += match i % 7 {
                0 => 30_000,
                1 => 30_000 + 3,
                2 => 29_000,
                3 => 300_000,
                4 => 1,
                5 => 5_000_000,
                _ => 30_000,
            };
            let v = match i % 5 {
                0 => 0.5,
                1 => 0.5,
                2 => -1e300,
                3 => i as f64 * 0.37,
                _ => 80e9,
            };
            out.push((t, v));
        }
        out
    }

    #[test]
    fn xor_chunks_decode_what_was_encoded() {
        let data = sample_data();
        let mut e = Enc::new();
        for (t, v) in &data {
            e.append(*t, *v);
        }
        let (mut ts, mut vals) = (Vec::new(), Vec::new());
        decode_xor(&e.bytes(), i64::MIN, i64::MAX, &mut ts, &mut vals).unwrap();
        let got: Vec<(i64, f64)> = ts.into_iter().zip(vals).collect();
        assert_eq!(got, data);
        // A range cuts samples outside it.
        let (mut ts, mut vals) = (Vec::new(), Vec::new());
        let (a, b) = (data[10].0, data[20].0);
        decode_xor(&e.bytes(), a, b, &mut ts, &mut vals).unwrap();
        assert_eq!(ts.len(), 11);
        assert_eq!(ts[0], a);
    }

    #[test]
    fn stale_markers_are_dropped_and_truncated_chunks_refused() {
        let mut e = Enc::new();
        e.append(1000, 1.0);
        e.append(2000, f64::from_bits(STALE_NAN));
        e.append(3000, 2.0);
        let (mut ts, mut vals) = (Vec::new(), Vec::new());
        decode_xor(&e.bytes(), 0, 10_000, &mut ts, &mut vals).unwrap();
        assert_eq!(ts, vec![1000, 3000]);
        assert_eq!(vals, vec![1.0, 2.0]);
        let b = e.bytes();
        let err = decode_xor(
            &b[..b.len() - 3],
            0,
            10_000,
            &mut Vec::new(),
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(err.contains("ends early"), "{err}");
    }

    fn frame(msg: &ChunkedReadResponse) -> Vec<u8> {
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

    fn chunked(name: &str, samples: &[(i64, f64)]) -> ChunkedSeries {
        let mut e = Enc::new();
        for (t, v) in samples {
            e.append(*t, *v);
        }
        ChunkedSeries {
            labels: vec![Label {
                name: "__name__".into(),
                value: name.into(),
            }],
            chunks: vec![Chunk {
                min_time_ms: samples[0].0,
                max_time_ms: samples.last().unwrap().0,
                r#type: 1,
                data: e.bytes(),
            }],
        }
    }

    #[test]
    fn streamed_frames_join_a_series_split_over_frames() {
        let a1 = chunked("a", &[(1, 1.0), (2, 2.0)]);
        let a2 = chunked("a", &[(3, 3.0)]);
        let b = chunked("b", &[(1, 9.0)]);
        let mut body = frame(&ChunkedReadResponse {
            chunked_series: vec![a1],
            query_index: 0,
        });
        body.extend(frame(&ChunkedReadResponse {
            chunked_series: vec![a2, b],
            query_index: 0,
        }));
        let mut got = Vec::new();
        let stats = read_streamed(&mut body.as_slice(), &[(0, 100)], lim(1 << 20), |s| {
            got.push((s.labels["__name__"].clone(), s.ts, s.vals));
            Ok(())
        })
        .unwrap();
        assert_eq!(stats.frames, 2);
        assert_eq!(
            got,
            vec![
                ("a".to_string(), vec![1, 2, 3], vec![1.0, 2.0, 3.0]),
                ("b".to_string(), vec![1], vec![9.0]),
            ]
        );
    }

    #[test]
    fn overlapping_chunks_are_merged_one_sample_per_timestamp() {
        // Two chunks of one series that overlap (two stores' blocks): 1..=3 and 2..=4.
        let mut a = chunked("a", &[(1, 1.0), (2, 2.0), (3, 3.0)]);
        a.chunks
            .extend(chunked("a", &[(2, 20.0), (3, 30.0), (4, 4.0)]).chunks);
        let body = frame(&ChunkedReadResponse {
            chunked_series: vec![a],
            query_index: 0,
        });
        let mut got = Vec::new();
        read_streamed(&mut body.as_slice(), &[(0, 100)], lim(1 << 20), |s| {
            got.push((s.ts, s.vals));
            Ok(())
        })
        .unwrap();
        assert_eq!(got, vec![(vec![1, 2, 3, 4], vec![1.0, 2.0, 3.0, 4.0])]);
    }

    #[test]
    fn streamed_faults_are_named() {
        let body = frame(&ChunkedReadResponse {
            chunked_series: vec![chunked("a", &[(1, 1.0), (2, 2.0)])],
            query_index: 0,
        });
        let run = |b: &[u8], max: u64| {
            read_streamed(&mut &b[..], &[(0, 100)], lim(max), |_| Ok(()))
                .unwrap_err()
                .to_string()
        };
        // A flipped byte in the message: the checksum says so.
        let mut bad = body.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x40;
        assert!(run(&bad, 1 << 20).contains("checksum mismatch"));
        // Cut short.
        assert!(run(&body[..body.len() - 2], 1 << 20).contains("ends inside a frame"));
        // Larger than allowed.
        assert!(run(&body, 4).contains("more than the 4 allowed"));
        // A chunk whose header states more samples than allowed is refused before it is
        // decoded: 100 samples at 2 bits each are a few bytes on the wire, 1,600 decoded.
        let many: Vec<(i64, f64)> = (0..100).map(|t| (t, 1.0)).collect();
        let bomb = frame(&ChunkedReadResponse {
            chunked_series: vec![chunked("a", &many)],
            query_index: 0,
        });
        assert!((bomb.len() as u64) < 100, "{} bytes", bomb.len());
        let e = run(&bomb, 1000);
        assert!(
            e.contains("0 samples and a chunk of 100 more (1600 bytes)")
                && e.contains("--prometheus.max-response-size"),
            "{e}"
        );
        // A series split over frames that together hold more samples than allowed.
        let part = |t: i64| {
            let s: Vec<(i64, f64)> = (t..t + 10).map(|t| (t, 1.0)).collect();
            frame(&ChunkedReadResponse {
                chunked_series: vec![chunked("a", &s)],
                query_index: 0,
            })
        };
        let mut long = part(1);
        long.extend(part(20));
        // Room for one frame (10 samples, 160 bytes held) but not for the joined 20 (320).
        let max = 200;
        assert!(long.len() as u64 <= max);
        assert!(
            read_streamed(&mut &part(1)[..], &[(0, 100)], lim(max), |_| Ok(())).is_ok(),
            "one part fits"
        );
        let e = run(&long, max);
        assert!(
            e.contains("10 samples and a chunk of 10 more (320 bytes)"),
            "{e}"
        );
        // The whole answer: many small frames, each within the limit, together over it.
        let mut stream = Vec::new();
        for i in 0..50 {
            stream.extend(frame(&ChunkedReadResponse {
                chunked_series: vec![chunked(&format!("s{i}"), &[(1, 1.0)])],
                query_index: 0,
            }));
        }
        let e = run(&stream, 1000);
        assert!(
            e.contains("the answer is larger than 1000 bytes")
                && e.contains("(raise it with --prometheus.max-response-size)"),
            "{e}"
        );
        // Series: a bound of its own.
        let e = read_streamed(
            &mut &stream[..],
            &[(0, 100)],
            Limits {
                max_bytes: 1 << 20,
                max_series: 7,
            },
            |_| Ok(()),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "more than 7 series in one answer (raise it with --prometheus.max-series)"
        );
        // An index past the queries sent.
        let other = frame(&ChunkedReadResponse {
            chunked_series: vec![],
            query_index: 3,
        });
        assert!(run(&other, 1 << 20).contains("answer to query 3, but 1 were sent"));
    }

    #[test]
    fn samples_answers_are_read() {
        let resp = ReadResponse {
            results: vec![QueryResult {
                timeseries: vec![TimeSeries {
                    labels: vec![Label {
                        name: "__name__".into(),
                        value: "m".into(),
                    }],
                    samples: vec![
                        Sample {
                            value: 1.0,
                            timestamp: 5,
                        },
                        Sample {
                            value: f64::from_bits(STALE_NAN),
                            timestamp: 6,
                        },
                        Sample {
                            value: 2.0,
                            timestamp: 500,
                        },
                    ],
                }],
            }],
        };
        let body = snap::raw::Encoder::new()
            .compress_vec(&resp.encode_to_vec())
            .unwrap();
        let mut got = Vec::new();
        read_samples(&body, &[(0, 100)], lim(1 << 20), |s| {
            got.push((s.ts, s.vals));
            Ok(())
        })
        .unwrap();
        assert_eq!(got, vec![(vec![5], vec![1.0])]);
        assert!(read_samples(b"not snappy", &[(0, 100)], lim(1 << 20), |_| Ok(())).is_err());
        // Bounded before decompression: snappy states the length first.
        let e = read_samples(&body, &[(0, 100)], lim(8), |_| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("decompresses to") && e.contains("--prometheus.max-response-size"),
            "{e}"
        );
    }

    #[test]
    fn the_request_is_snappy_protobuf() {
        let body = encode_request(vec![Query {
            start_timestamp_ms: 1,
            end_timestamp_ms: 2,
            matchers: vec![LabelMatcher::eq("__name__", "m")],
        }]);
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        let req = ReadRequest::decode(raw.as_slice()).unwrap();
        assert_eq!(req.accepted_response_types, vec![1, 0]);
        assert_eq!(req.queries[0].matchers[0].value, "m");
    }
}
