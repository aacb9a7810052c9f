//! Request handling: basic auth, routing, the max-requests limit, the handler timeout, configured
//! response headers. One [`App`] is shared by every connection.
//!
//! Routes: the telemetry path (the [`Exposition`]'s body, rendered on a blocking thread), `/` (the
//! landing page, unless the telemetry path is `/`), `/-/healthy` and `/-/ready`. GET and HEAD only
//! (405 with `Allow: GET, HEAD` otherwise); other paths 404. With basic auth on, every path needs
//! it (as in exporter-toolkit), checked before routing.
//!
//! It does not read request bodies, compress, or know about connections beyond the in-flight
//! [`ActiveGuard`] it hands back inside each response body.

use std::convert::Infallible;
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

use super::auth::BasicAuth;
use super::{Exposition, HTML_CONTENT_TYPE, TEXT_CONTENT_TYPE};

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
    /// The response to one request, with the configured headers added.
    pub(crate) async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let mut resp = match tokio::time::timeout(self.request_timeout, self.route(&req)).await {
            Ok(r) => r,
            Err(_) => {
                log::warn!(
                    "{} {}: no response within {:?}",
                    req.method(),
                    req.uri().path(),
                    self.request_timeout
                );
                text(StatusCode::SERVICE_UNAVAILABLE, "Request timed out.\n")
            }
        };
        for (name, value) in &self.headers {
            resp.headers_mut().insert(name.clone(), value.clone());
        }
        resp
    }

    async fn route(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        if let Some(auth) = &self.auth
            && !auth.check(req.headers().get(header::AUTHORIZATION)).await
        {
            let mut r = text(StatusCode::UNAUTHORIZED, "Unauthorized\n");
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
            return r;
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

    async fn telemetry(&self, accept: Option<String>) -> Response<Full<Bytes>> {
        let permit = match &self.limit {
            None => None,
            Some(sem) => match sem.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    log::warn!(
                        "{}: limit of {} concurrent scrapes reached, answering 503",
                        self.telemetry_path,
                        self.max_requests
                    );
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
