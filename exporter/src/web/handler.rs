//! Request handling: basic auth, routing, the max-requests limit, the handler timeout, configured
//! response headers. One [`App`] is shared by every connection.
//!
//! Routes: the telemetry path (the [`Exposition`]'s body, rendered on a blocking thread), `/` (the
//! landing page, unless the telemetry path is `/`), `/-/healthy` and `/-/ready`. GET and HEAD only
//! (405 with `Allow: GET, HEAD` otherwise); other paths 404. With basic auth on, every path needs
//! it (as in exporter-toolkit), checked before routing: 401 for missing or wrong credentials, 429
//! or 503 (with `Retry-After`) when the password check is refused by the bcrypt queue. Those
//! refusals are answered after [`REFUSAL_DELAY`], so that a client retrying in a tight loop sends
//! one request a second, not thousands: the refusal costs the server a timer, not CPU.
//!
//! Refused scrapes, handler timeouts and refused password checks are logged at `warn` through a
//! [`BurstLog`] each: the first at once, then a count per interval.
//!
//! It does not read request bodies, compress, or know about connections beyond the in-flight
//! [`ActiveGuard`] it hands back inside each response body.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::Semaphore;

use super::auth::{BasicAuth, Verdict};
use super::burst::{BURST_LOG_INTERVAL, BurstLog};
use super::gate::Refusal;
use super::{Exposition, HTML_CONTENT_TYPE, TEXT_CONTENT_TYPE};

/// How long a password check refused by the bcrypt queue waits for its 429 or 503.
pub(crate) const REFUSAL_DELAY: Duration = Duration::from_secs(1);

pub(crate) const HEALTHY_PATH: &str = "/-/healthy";
pub(crate) const READY_PATH: &str = "/-/ready";

pub(crate) struct App {
    pub(crate) exposition: Arc<dyn Exposition>,
    pub(crate) telemetry_path: String,
    /// `None` when the telemetry path is `/`.
    pub(crate) landing: Option<Bytes>,
    pub(crate) max_requests: usize,
    pub(crate) limit: Option<Arc<Semaphore>>,
    pub(crate) auth: Option<BasicAuth>,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) request_timeout: Duration,
    pub(crate) logs: BurstLogs,
}

/// The warnings that come in bursts.
pub(crate) struct BurstLogs {
    limit: Arc<BurstLog>,
    timeout: Arc<BurstLog>,
    auth: Arc<BurstLog>,
}

impl BurstLogs {
    pub(crate) fn new(telemetry_path: &str, max_requests: usize, timeout: Duration) -> BurstLogs {
        let path = telemetry_path.to_string();
        BurstLogs {
            limit: BurstLog::new(BURST_LOG_INTERVAL, move |n, over| {
                format!(
                    "{path}: answered 503 to {n} more scrapes over the limit of {max_requests} \
                     concurrent scrapes in the last {over:?}"
                )
            }),
            timeout: BurstLog::new(BURST_LOG_INTERVAL, move |n, over| {
                format!(
                    "answered 503 to {n} more requests with no response within {timeout:?} in \
                     the last {over:?}"
                )
            }),
            auth: BurstLog::new(BURST_LOG_INTERVAL, |n, over| {
                format!(
                    "basic auth: refused {n} more password checks (429: too many from one \
                     address, 503: too many in all) in the last {over:?}"
                )
            }),
        }
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(TEXT_CONTENT_TYPE),
    );
    r
}

impl App {
    /// The response to one request from `peer`, with the configured headers added.
    pub(crate) async fn handle(
        &self,
        req: Request<Incoming>,
        peer: SocketAddr,
    ) -> Response<Full<Bytes>> {
        let mut resp =
            match tokio::time::timeout(self.request_timeout, self.route(&req, peer)).await {
                Ok(r) => r,
                Err(_) => {
                    self.logs.timeout.warn(|| {
                        format!(
                            "{} {}: no response within {:?}, answering 503 (more are counted)",
                            req.method(),
                            req.uri().path(),
                            self.request_timeout
                        )
                    });
                    text(StatusCode::SERVICE_UNAVAILABLE, "Request timed out.\n")
                }
            };
        for (name, value) in &self.headers {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
        resp
    }

    async fn route(&self, req: &Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
        if let Some(auth) = &self.auth {
            match auth
                .check(req.headers().get(header::AUTHORIZATION), peer.ip())
                .await
            {
                Verdict::Allowed => {}
                Verdict::Denied => {
                    let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
                    r.headers_mut()
                        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
                    return r;
                }
                Verdict::Refused(refusal) => return self.refused(refusal, peer).await,
            }
        }
        let path = req.uri().path();
        let landing = self.landing.as_ref().filter(|_| path == "/");
        let known = path == self.telemetry_path
            || landing.is_some()
            || path == HEALTHY_PATH
            || path == READY_PATH;
        if !known {
            return text(StatusCode::NOT_FOUND, "Not Found\n");
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        if path == self.telemetry_path {
            let accept = req
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            return self.telemetry(accept).await;
        }
        if let Some(page) = landing {
            let mut r = Response::new(Full::new(page.clone()));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(HTML_CONTENT_TYPE),
            );
            return r;
        }
        if path == HEALTHY_PATH {
            return text(StatusCode::OK, "OK\n");
        }
        if self.exposition.ready() {
            text(StatusCode::OK, "OK\n")
        } else {
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "Not ready: no snapshot yet.\n",
            )
        }
    }

    /// A password check the bcrypt queue did not admit: 429 (this source has enough checks
    /// pending) or 503 (the queue is full), with `Retry-After`, after [`REFUSAL_DELAY`].
    async fn refused(&self, refusal: Refusal, peer: SocketAddr) -> Response<Full<Bytes>> {
        let (status, body, why) = match refusal {
            Refusal::SourceBusy => (
                StatusCode::TOO_MANY_REQUESTS,
                "Too many password checks from this address at once, try again later.\n",
                "too many password checks at once from this address, answering 429",
            ),
            Refusal::Full => (
                StatusCode::SERVICE_UNAVAILABLE,
                "Too many password checks at once, try again later.\n",
                "too many password checks at once, answering 503",
            ),
        };
        self.logs
            .auth
            .warn(|| format!("basic auth: {}: {why} (more are counted)", peer.ip()));
        tokio::time::sleep(REFUSAL_DELAY).await;
        let mut r = text(status, body);
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        r
    }

    async fn telemetry(&self, accept: Option<String>) -> Response<Full<Bytes>> {
        let permit = match &self.limit {
            None => None,
            Some(sem) => match sem.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    self.logs.limit.warn(|| {
                        format!(
                            "{}: limit of {} concurrent scrapes reached, answering 503 (more are \
                             counted)",
                            self.telemetry_path, self.max_requests
                        )
                    });
                    let mut r = Response::new(Full::new(Bytes::from(format!(
                        "Limit of concurrent requests reached ({}), try again later.\n",
                        self.max_requests
                    ))));
                    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static(TEXT_CONTENT_TYPE),
                    );
                    return r;
                }
            },
        };
        let exposition = self.exposition.clone();
        // The permit lives as long as the render, even if this request times out first, so a
        // stuck render keeps counting against the limit.
        let rendered = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            exposition.render(accept.as_deref())
        })
        .await;
        match rendered {
            Ok(r) => {
                let mut resp = Response::new(Full::new(r.body));
                match HeaderValue::from_str(r.content_type) {
                    Ok(ct) => {
                        resp.headers_mut().insert(header::CONTENT_TYPE, ct);
                    }
                    Err(_) => log::error!("invalid content type from the exposition"),
                }
                resp
            }
            Err(e) => {
                log::error!("rendering {} failed: {e}", self.telemetry_path);
                text(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error\n")
            }
        }
    }
}

/// Per-connection bookkeeping for the idle watchdog: requests in flight and the time of the last
/// request start or end.
pub(crate) struct ConnState {
    start: Instant,
    active: AtomicUsize,
    /// Milliseconds since `start` of the last request start or end.
    last_event_ms: AtomicU64,
}

impl ConnState {
    pub(crate) fn new() -> Arc<ConnState> {
        Arc::new(ConnState {
            start: Instant::now(),
            active: AtomicUsize::new(0),
            last_event_ms: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_event_ms.fetch_max(ms, Ordering::AcqRel);
    }

    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    pub(crate) fn last_event(&self) -> Instant {
        self.start + Duration::from_millis(self.last_event_ms.load(Ordering::Acquire))
    }
}

/// Held by a request from the moment hyper hands it over until its response body is dropped.
pub(crate) struct ActiveGuard(Arc<ConnState>);

impl ActiveGuard {
    pub(crate) fn new(state: Arc<ConnState>) -> ActiveGuard {
        state.touch();
        state.active.fetch_add(1, Ordering::AcqRel);
        ActiveGuard(state)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted as in flight until hyper drops it.
pub(crate) struct GuardedBody {
    inner: Full<Bytes>,
    _guard: ActiveGuard,
}

impl GuardedBody {
    pub(crate) fn new(inner: Full<Bytes>, guard: ActiveGuard) -> GuardedBody {
        GuardedBody {
            inner,
            _guard: guard,
        }
    }
}

impl Body for GuardedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
