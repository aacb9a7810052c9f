//! The HTTP side of the `prometheus:` source: a blocking `ureq` client (rustls) with a
//! per-request timeout, bearer token or basic auth (also from the URL's userinfo), retries with
//! exponential backoff on 5xx, timeouts and connection errors (none on 4xx), the response-size
//! limit (`--prometheus.max-response-size`), and the server limits told apart ([`Limit`]) so the
//! caller can ask for less. GETs of the HTTP API answer the envelope's `data` and warnings;
//! [`Client::remote_read`] POSTs a remote read and streams its series.
//!
//! It does not build queries, split ranges or node groups, or read the answers' series into
//! cells: its callers do.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::options::PrometheusOptions;
use crate::ingest::IngestError;
use crate::ingest::remote_read::{self, RemoteReadError};

/// The Prometheus API envelope.
#[derive(Deserialize)]
struct Envelope {
    status: String,
    /// Kept as the raw JSON text and parsed once into its own type by the caller ([`parse`]):
    /// going through a `serde_json::Value` tree first cost more than the typed parse.
    #[serde(default)]
    data: Option<Box<serde_json::value::RawValue>>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Deserialize)]
pub(super) struct Matrix {
    #[serde(rename = "resultType")]
    pub(super) result_type: String,
    pub(super) result: Vec<MatrixSeries>,
}

#[derive(Deserialize)]
pub(super) struct MatrixSeries {
    pub(super) metric: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) values: Vec<(f64, String)>,
}

/// The HTTP side: base URL, agent, auth header, retry policy.
#[derive(Clone)]
pub(super) struct Client {
    pub(super) spec: String,
    base: String,
    agent: ureq::Agent,
    auth: Option<String>,
    opts: PrometheusOptions,
    /// Requests sent (attempts included), for the report.
    pub(super) requests: u64,
    /// Response bytes read, for the report.
    pub(super) bytes: u64,
}

pub(super) fn err(spec: &str, reason: impl Into<String>) -> IngestError {
    IngestError::Prometheus {
        source_spec: spec.to_string(),
        reason: reason.into(),
    }
}

impl Client {
    pub(super) fn new(
        spec: &str,
        url: &str,
        opts: &PrometheusOptions,
    ) -> Result<Client, IngestError> {
        let (base, url_auth) = split_userinfo(url);
        let read = |p: &PathBuf, what: &str| -> Result<String, IngestError> {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .map_err(|e| err(spec, format!("cannot read the {what} {}: {e}", p.display())))
        };
        let auth = if let Some(p) = &opts.bearer_token_file {
            Some(format!("Bearer {}", read(p, "bearer token file")?))
        } else if let Some((user, p)) = &opts.basic_auth {
            let pass = read(p, "basic auth password file")?;
            Some(format!("Basic {}", BASE64.encode(format!("{user}:{pass}"))))
        } else {
            url_auth.map(|(u, p)| format!("Basic {}", BASE64.encode(format!("{u}:{p}"))))
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(opts.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(Client {
            spec: spec.to_string(),
            base: base.trim_end_matches('/').to_string(),
            agent,
            auth,
            opts: opts.clone(),
            requests: 0,
            bytes: 0,
        })
    }

    /// Before attempt `attempt` (from 0): the backoff wait after a failed one; counts the
    /// request.
    fn begin_attempt(&mut self, attempt: u32) {
        if attempt > 0 {
            std::thread::sleep(self.opts.backoff * 2u32.saturating_pow(attempt - 1));
        }
        self.requests += 1;
    }

    /// A request that got no answer: an error for a URL that can never work, else the message
    /// to retry with.
    fn transport_error(&self, url: &str, e: ureq::Error) -> Result<String, IngestError> {
        match e {
            ureq::Error::BadUri(_) | ureq::Error::RequireHttpsOnly(_) => {
                Err(err(&self.spec, format!("{url}: {e}")))
            }
            e => Ok(format!("{e}")),
        }
    }

    /// GET `path` with `params`; retries 5xx and transport errors; returns the `data` and the
    /// response's warnings. `what` names the request in errors (the PromQL for queries).
    pub(super) fn get(
        &mut self,
        path: &str,
        params: &[(&str, String)],
        what: &str,
    ) -> Result<(Data, Vec<String>), IngestError> {
        match self.get_bounded(path, params, what)? {
            Answer::Data(d, w) => Ok((d, w)),
            Answer::TooLarge => Err(err(
                &self.spec,
                format!(
                    "{what}: the answer is larger than {} (--prometheus.max-response-size)",
                    fmt_size(self.opts.max_response_bytes)
                ),
            )),
            Answer::Limit(_, message) => Err(err(&self.spec, format!("{what}: {message}"))),
        }
    }

    /// Like [`Client::get`], but answers [`Answer::TooLarge`] when the body is larger than
    /// [`PrometheusOptions::max_response_bytes`] and [`Answer::Limit`] when the server refuses
    /// the query for one of its limits ([`server_limit`]): the caller may ask for less.
    pub(super) fn get_bounded(
        &mut self,
        path: &str,
        params: &[(&str, String)],
        what: &str,
    ) -> Result<Answer, IngestError> {
        let url = format!("{}{}", self.base, path);
        let attempts = self.opts.attempts.max(1);
        let mut last = String::new();
        for attempt in 0..attempts {
            self.begin_attempt(attempt);
            let mut req = self.agent.get(&url);
            for (k, v) in params {
                req = req.query(k, v);
            }
            if let Some(a) = &self.auth {
                req = req.header("Authorization", a);
            }
            let mut resp = match req.call() {
                Ok(r) => r,
                Err(e) => {
                    last = self.transport_error(&url, e)?;
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let limit = self.opts.max_response_bytes.max(1);
            let body = match resp.body_mut().with_config().limit(limit).read_to_vec() {
                Ok(b) => {
                    self.bytes += b.len() as u64;
                    b
                }
                Err(ureq::Error::BodyExceedsLimit(_)) => return Ok(Answer::TooLarge),
                Err(e) => {
                    last = format!("HTTP {status}, reading the body: {e}");
                    continue;
                }
            };
            let env: Option<Envelope> = serde_json::from_slice(&body).ok();
            let message = env
                .as_ref()
                .and_then(|e| {
                    e.error
                        .as_ref()
                        .map(|m| format!("{}: {m}", e.error_type.as_deref().unwrap_or("error")))
                })
                .unwrap_or_else(|| snippet(&body));
            if (500..600).contains(&status) {
                last = format!("HTTP {status}: {message}");
                continue;
            }
            if status != 200
                && let Some(limit) = server_limit(status, &message)
            {
                return Ok(Answer::Limit(
                    limit,
                    format!("HTTP {status} from {url}: {message}"),
                ));
            }
            if status != 200 {
                return Err(err(
                    &self.spec,
                    format!("{what}: HTTP {status} from {url}: {message}"),
                ));
            }
            let env = env.ok_or_else(|| {
                err(
                    &self.spec,
                    format!("{what}: {url} did not answer Prometheus API JSON: {message}"),
                )
            })?;
            if env.status != "success" {
                return Err(err(
                    &self.spec,
                    format!("{what}: status {}: {message}", env.status),
                ));
            }
            return Ok(Answer::Data(env.data.unwrap_or_else(null), env.warnings));
        }
        Err(err(
            &self.spec,
            format!("{what}: {url} failed after {attempts} attempt(s); last: {last}"),
        ))
    }
}

/// A server's answer to [`Client::remote_read`].
pub(super) enum RemoteAnswer {
    /// Read to the end: what was found.
    Done(remote_read::ReadStats),
    /// The server does not answer the remote-read API (404, 405, 501, another content type):
    /// why.
    Unsupported(String),
    /// The server refused the read for one of its limits (status, URL and message).
    Limit(String),
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    n: u64,
}

impl<R: std::io::Read> std::io::Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n as u64;
        Ok(n)
    }
}

impl Client {
    /// POSTs a remote-read request (`/api/v1/read`) and hands each series of the answer to
    /// `each` as it is read (streamed chunks, or a samples answer read whole within
    /// `--prometheus.max-response-size`). Retries 5xx and transport errors before the answer's
    /// body is read; an error inside the body is fatal (series were already handed over).
    pub(super) fn remote_read(
        &mut self,
        queries: Vec<remote_read::Query>,
        what: &str,
        mut each: impl FnMut(remote_read::Series) -> Result<(), RemoteReadError>,
    ) -> Result<RemoteAnswer, IngestError> {
        let url = format!("{}/api/v1/read", self.base);
        let ranges: Vec<(i64, i64)> = queries
            .iter()
            .map(|q| (q.start_timestamp_ms, q.end_timestamp_ms))
            .collect();
        let body = remote_read::encode_request(queries);
        let attempts = self.opts.attempts.max(1);
        let max = self.opts.max_response_bytes.max(1);
        let mut last = String::new();
        for attempt in 0..attempts {
            self.begin_attempt(attempt);
            let mut req = self
                .agent
                .post(&url)
                .header("Content-Type", "application/x-protobuf")
                .header("Content-Encoding", "snappy")
                .header("X-Prometheus-Remote-Read-Version", "0.1.0");
            if let Some(a) = &self.auth {
                req = req.header("Authorization", a);
            }
            let mut resp = match req.send(&body[..]) {
                Ok(r) => r,
                Err(e) => {
                    last = self.transport_error(&url, e)?;
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let ctype = content_type(&resp);
            if status != 200 {
                match self.refused_read(&mut resp, status, &url, what)? {
                    Ok(answer) => return Ok(answer),
                    Err(said) => {
                        last = said;
                        continue;
                    }
                }
            }
            let fail = |e: RemoteReadError| err(&self.spec, format!("{what}: {url}: {e}"));
            if ctype.starts_with("application/x-streamed-protobuf") {
                let limits = remote_read::Limits {
                    max_bytes: max,
                    max_series: self.opts.max_series,
                };
                let r = read_streamed(&mut resp, &ranges, limits, &mut self.bytes, &mut each);
                return r.map(RemoteAnswer::Done).map_err(fail);
            }
            if ctype.starts_with("application/x-protobuf") {
                let data = match resp.body_mut().with_config().limit(max).read_to_vec() {
                    Ok(b) => b,
                    Err(ureq::Error::BodyExceedsLimit(_)) => {
                        return Err(err(
                            &self.spec,
                            format!(
                                "{what}: the answer from {url} is larger than {} \
                                 (--prometheus.max-response-size)",
                                fmt_size(max)
                            ),
                        ));
                    }
                    Err(e) => {
                        last = format!("HTTP {status}, reading the body: {e}");
                        continue;
                    }
                };
                self.bytes += data.len() as u64;
                let limits = remote_read::Limits {
                    max_bytes: max,
                    max_series: self.opts.max_series,
                };
                return remote_read::read_samples(&data, &ranges, limits, &mut each)
                    .map(RemoteAnswer::Done)
                    .map_err(fail);
            }
            return Ok(not_remote_read(&mut resp, &url, &ctype));
        }
        Err(err(
            &self.spec,
            format!("{what}: {url} failed after {attempts} attempt(s); last: {last}"),
        ))
    }

    /// A remote read answered with `status`, not 200: the API unsupported or a server limit
    /// (`Ok(Ok(answer))`), a server error to retry (`Ok(Err(what it said))`), else fatal.
    fn refused_read(
        &mut self,
        resp: &mut ureq::http::Response<ureq::Body>,
        status: u16,
        url: &str,
        what: &str,
    ) -> Result<Result<RemoteAnswer, String>, IngestError> {
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 << 10)
            .read_to_vec()
            .unwrap_or_default();
        self.bytes += text.len() as u64;
        let message = snippet(&text);
        let said = format!("HTTP {status} from {url}: {message}");
        if matches!(status, 404 | 405 | 406 | 415 | 501) {
            return Ok(Ok(RemoteAnswer::Unsupported(said)));
        }
        if server_limit(status, &message).is_some() {
            return Ok(Ok(RemoteAnswer::Limit(said)));
        }
        if (500..600).contains(&status) {
            return Ok(Err(said));
        }
        Err(err(&self.spec, format!("{what}: {said}")))
    }
}

/// An answer's `data`, as JSON text.
pub(super) type Data = Box<serde_json::value::RawValue>;

/// JSON `null`, the `data` of an answer without one.
fn null() -> Data {
    serde_json::value::RawValue::from_string("null".into()).expect("null is JSON")
}

/// An answer's `data` parsed as `T`.
pub(super) fn parse<T: serde::de::DeserializeOwned>(data: &Data) -> serde_json::Result<T> {
    serde_json::from_str(data.get())
}

/// A server's answer to [`Client::get_bounded`].
pub(super) enum Answer {
    /// The `data` and the response's warnings.
    Data(Data, Vec<String>),
    /// The body is larger than `--prometheus.max-response-size`.
    TooLarge,
    /// The server refused the query for one of its limits: which, and the status, URL and
    /// message.
    Limit(Limit, String),
}

/// Which server limit a refused query hit, from its status and message: Prometheus' points per
/// series (400 `exceeded maximum resolution`) and samples (422 `too many samples`), Mimir's,
/// Thanos' and Cortex's series and chunk limits (422), VictoriaMetrics' `-search.max*` limits
/// (422), and a 422 that speaks of a limit. `None` for other refusals (a bad query, a
/// many-to-many match, authentication). [`Limit::Series`] is eased by
/// fewer nodes per query, the others by a shorter range.
pub(super) fn server_limit(status: u16, message: &str) -> Option<Limit> {
    let m = message.to_ascii_lowercase();
    let series = [
        "max number of series",
        "maximum number of series",
        "series limit",
        "too many series",
        "maxuniquetimeseries",
        "max_fetched_series",
        "max-fetched-series",
        "maxseries",
    ];
    let samples = [
        "too many samples",
        "exceeded maximum resolution",
        "too many points",
        "maxsamplesperquery",
        "maxpointspertimeseries",
        "maxsamplesperseries",
        "max number of chunks",
        "chunks limit",
        "bytes limit",
        "max_fetched_chunk",
        "estimated data to fetch",
        "query processing would load",
        "exceeds the limit",
        "limit exceeded",
        "exceeded the limit",
    ];
    // Other 422s (a many-to-many match, say) are errors of the query, not of its size.
    let generic = status == 422
        && ["limit", "too many", "exceed"]
            .iter()
            .any(|p| m.contains(p));
    if series.iter().any(|p| m.contains(p)) {
        Some(Limit::Series)
    } else if samples.iter().any(|p| m.contains(p)) || generic {
        Some(Limit::Samples)
    } else {
        None
    }
}

/// What eases a [`server_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Limit {
    /// Fewer series per query: fewer nodes.
    Series,
    /// Fewer samples or points: a shorter range.
    Samples,
}

/// A size as a message shows it: `128 MiB`, `4000 bytes`.
pub(super) fn fmt_size(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else {
        format!("{b} bytes")
    }
}

/// Reads a streamed remote-read answer (chunks of series, frame by frame) through a buffer,
/// handing each series to `each`; adds the bytes read to `bytes`.
fn read_streamed(
    resp: &mut ureq::http::Response<ureq::Body>,
    ranges: &[(i64, i64)],
    limits: remote_read::Limits,
    bytes: &mut u64,
    each: &mut dyn FnMut(remote_read::Series) -> Result<(), RemoteReadError>,
) -> Result<remote_read::ReadStats, RemoteReadError> {
    // Buffered: frames are read a few bytes at a time (size, checksum).
    let mut reader = std::io::BufReader::with_capacity(
        256 << 10,
        Counting {
            inner: resp.body_mut().with_config().reader(),
            n: 0,
        },
    );
    let r = remote_read::read_streamed(&mut reader, ranges, limits, each);
    *bytes += reader.get_ref().n;
    r
}

/// The answer of a server that sent another content type than remote-read protobuf: the API
/// unsupported, with the type and the start of the body.
fn not_remote_read(
    resp: &mut ureq::http::Response<ureq::Body>,
    url: &str,
    ctype: &str,
) -> RemoteAnswer {
    let text = resp
        .body_mut()
        .with_config()
        .limit(64 << 10)
        .read_to_vec()
        .unwrap_or_default();
    RemoteAnswer::Unsupported(format!(
        "{url} answered {:?}, not remote-read protobuf: {}",
        if ctype.is_empty() {
            "no content type"
        } else {
            ctype
        },
        snippet(&text)
    ))
}

/// An answer's content type, in lower case (empty when it has none).
fn content_type(resp: &ureq::http::Response<ureq::Body>) -> String {
    resp.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// The start of a body, for error messages.
fn snippet(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    let s = s.trim();
    if s.chars().count() > 200 {
        format!("{}…", s.chars().take(200).collect::<String>())
    } else if s.is_empty() {
        "(empty body)".to_string()
    } else {
        s.to_string()
    }
}

/// Splits `http://user:pass@host/…` into the URL without userinfo and (user, pass), decoded.
pub(super) fn split_userinfo(url: &str) -> (String, Option<(String, String)>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), None);
    };
    let auth_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    let Some((info, host)) = authority.rsplit_once('@') else {
        return (url.to_string(), None);
    };
    let (u, p) = info.split_once(':').unwrap_or((info, ""));
    (
        format!("{scheme}://{host}{}", &rest[auth_end..]),
        Some((percent_decode(u), percent_decode(p))),
    )
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(h) = s.get(i + 1..i + 3)
            && let Ok(v) = u8::from_str_radix(h, 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
