//! Listening, connections, TLS, timeouts and graceful shutdown.
//!
//! Two ways to run:
//! - from sync code (the exporter's `main`, tests): `Server::bind(opts, exposition)?.spawn()?`
//!   starts a thread with its own small tokio runtime and returns a [`RunningServer`]; call
//!   [`RunningServer::shutdown`] (or drop it) to stop gracefully, or
//!   [`RunningServer::wait_for_signal`] to block until SIGINT/SIGTERM and then stop;
//! - from async code already on a tokio runtime: `Server::bind(..)?.run_until(fut).await`.
//!
//! [`Server::bind`] does all validation and binds every listen address before returning, so a
//! bad option or a busy port is an error there, and [`Server::local_addrs`] gives the real ports
//! (useful with port 0).
//!
//! Bounds on what one client can hold, all equal to [`ServerOptions::request_timeout`] (`T`):
//! - TLS: a plain-HTTP request to a TLS port gets Go's `400 Client sent an HTTP request to an HTTPS
//!   server` and is closed; the TLS handshake must finish within `T`;
//! - HTTP/1: the request head must arrive within `T` of the server starting to wait for it
//!   (hyper's `header_read_timeout`), so trickling header bytes does not help;
//! - every connection: with no request in flight for `T` (from accept, or from the end of the last
//!   response) it is closed, which covers idle keep-alive connections, clients that send nothing
//!   and HTTP/2 clients that trickle frames; with requests in flight for `2T` without any request
//!   starting or finishing it is closed too (a client that does not read its response);
//! - the handler: a response within `T`, else 503.
//!
//! An HTTP/1 client that shuts down its sending side after its request (a half-close) is still
//! answered.
//!
//! The number of connections is not capped (the idle watchdog frees them); HTTP/2 streams per
//! connection are (32). Malformed requests get hyper's 4xx and only that connection is closed.
//!
//! Shutdown stops accepting, asks every connection to finish (HTTP/1 closes after the current
//! response, HTTP/2 sends GOAWAY) and waits for them at most `T` before dropping the rest.
//!
//! It does not route or authenticate requests (see `handler` and `auth`), parse the web config
//! ([`super::config`]), or serve HTTP/2 without TLS (plain-text connections are HTTP/1.1, as with
//! Go's `net/http`; on TLS, HTTP/2 is chosen through ALPN when `http2` is on).

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::auth::BasicAuth;
use super::handler::{self, ActiveGuard, App, BurstLogs, ConnState, GuardedBody};
use super::{Exposition, ServerOptions, WebError, landing};

/// HTTP/2 streams one connection may have open at once.
const MAX_CONCURRENT_STREAMS: u32 = 32;
/// Threads for renders and bcrypt checks (more wait in a queue; the handler timeout bounds the
/// wait; bcrypt takes at most a few, see `gate`).
const MAX_BLOCKING_THREADS: usize = 16;
/// Pause after a failed accept (e.g. out of file descriptors) before trying again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Go's answer to plain HTTP on a TLS port.
const PLAIN_HTTP_TO_TLS: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; \
charset=utf-8\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

struct Ctx {
    app: App,
    tls: Option<TlsAcceptor>,
    http2: bool,
    timeout: Duration,
}

/// Bound sockets with their addresses, on tokio.
type Listeners = Vec<(SocketAddr, TcpListener)>;

/// A validated, bound server that is not running yet.
pub struct Server {
    listeners: Vec<(String, std::net::TcpListener)>,
    addrs: Vec<SocketAddr>,
    ctx: Arc<Ctx>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addrs", &self.addrs)
            .field("tls", &self.ctx.tls.is_some())
            .finish()
    }
}

impl Server {
    /// Validate the options, build TLS and auth, render the landing page and bind every listen
    /// address (synchronously). Nothing is served until [`spawn`](Server::spawn) or
    /// [`run_until`](Server::run_until).
    pub fn bind(opts: ServerOptions, exposition: Arc<dyn Exposition>) -> Result<Server, WebError> {
        if opts.listen.is_empty() {
            return Err(WebError::Options(
                "no --web.listen-address given".to_string(),
            ));
        }
        let path = &opts.telemetry_path;
        if !path.starts_with('/') {
            return Err(WebError::Options(format!(
                "--web.telemetry-path {path:?} must start with '/'"
            )));
        }
        if path == handler::HEALTHY_PATH || path == handler::READY_PATH {
            return Err(WebError::Options(format!(
                "--web.telemetry-path {path:?} is reserved"
            )));
        }
        if opts.request_timeout.is_zero() {
            return Err(WebError::Options(
                "the request timeout must be above zero".to_string(),
            ));
        }
        let (tls, http2, headers, auth) = match &opts.web_config {
            None => (None, true, Vec::new(), None),
            Some(c) => (
                c.tls_config().map(TlsAcceptor::from),
                c.http2(),
                c.headers().to_vec(),
                BasicAuth::new(c.users())?,
            ),
        };
        let landing_page = (path != "/")
            .then(|| Bytes::from(landing::render(&opts.landing, &opts.telemetry_path)));

        let mut listeners = Vec::new();
        let mut addrs = Vec::new();
        for address in &opts.listen {
            let listener = bind_one(address)?;
            let local = listener.local_addr().map_err(|e| WebError::Bind {
                address: address.clone(),
                source: e,
            })?;
            listener.set_nonblocking(true).map_err(|e| WebError::Bind {
                address: address.clone(),
                source: e,
            })?;
            addrs.push(local);
            listeners.push((address.clone(), listener));
        }
        let app = App {
            exposition,
            telemetry_path: opts.telemetry_path.clone(),
            landing: landing_page,
            max_requests: opts.max_requests,
            limit: (opts.max_requests > 0).then(|| Arc::new(Semaphore::new(opts.max_requests))),
            auth,
            headers,
            request_timeout: opts.request_timeout,
            logs: BurstLogs::new(
                &opts.telemetry_path,
                opts.max_requests,
                opts.request_timeout,
            ),
        };
        Ok(Server {
            listeners,
            addrs,
            ctx: Arc::new(Ctx {
                app,
                tls,
                http2,
                timeout: opts.request_timeout,
            }),
        })
    }

    /// The bound addresses, in `--web.listen-address` order (real ports, also for port 0).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.addrs.clone()
    }

    /// Serve on a new thread with its own tokio runtime (two workers plus a blocking pool for
    /// rendering and bcrypt). Returns once the server is accepting.
    pub fn spawn(self) -> Result<RunningServer, WebError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(MAX_BLOCKING_THREADS)
            .thread_name("tessera-web")
            .enable_all()
            .build()
            .map_err(|e| WebError::Io {
                context: "cannot start the tokio runtime".into(),
                source: e,
            })?;
        let addrs = self.addrs.clone();
        let checks = self.ctx.app.auth.as_ref().map(|a| a.checks());
        let (listeners, ctx) = {
            let _enter = runtime.enter();
            self.into_tokio()?
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("tessera-web".into())
            .spawn(move || {
                runtime.block_on(serve(listeners, ctx, async {
                    // A dropped sender (RunningServer dropped) also means stop.
                    let _ = stop_rx.await;
                }));
            })
            .map_err(|e| WebError::Io {
                context: "cannot start the web server thread".into(),
                source: e,
            })?;
        Ok(RunningServer {
            addrs,
            checks,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Serve on the current tokio runtime until `shutdown` completes, then shut down gracefully.
    /// Must be awaited inside a tokio runtime with IO and time enabled.
    pub async fn run_until<F>(self, shutdown: F) -> Result<(), WebError>
    where
        F: Future<Output = ()>,
    {
        let (listeners, ctx) = self.into_tokio()?;
        serve(listeners, ctx, shutdown).await;
        Ok(())
    }

    /// Hand the sockets to tokio (no duplicate file descriptors: when the accept loops drop
    /// them, nothing listens any more).
    fn into_tokio(self) -> Result<(Listeners, Arc<Ctx>), WebError> {
        let mut out = Vec::new();
        for ((address, l), local) in self.listeners.into_iter().zip(self.addrs) {
            let listener = TcpListener::from_std(l).map_err(|e| WebError::Bind {
                address: address.clone(),
                source: e,
            })?;
            out.push((local, listener));
        }
        Ok((out, self.ctx))
    }
}

/// A server running on its own thread. Dropping it shuts the server down too.
#[derive(Debug)]
pub struct RunningServer {
    addrs: Vec<SocketAddr>,
    /// bcrypt checks run (`None` without basic auth).
    checks: Option<Arc<std::sync::atomic::AtomicU64>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RunningServer {
    /// The bound addresses, in `--web.listen-address` order.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// How many passwords this server has checked with bcrypt (`None` without basic auth): the
    /// expensive work that the cache, the failure memory and the gate exist to avoid.
    pub fn password_checks(&self) -> Option<u64> {
        self.checks
            .as_ref()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Stop accepting, let open requests finish (at most the request timeout), and join the
    /// server thread.
    pub fn shutdown(mut self) -> Result<(), WebError> {
        self.stop_and_join()
    }

    /// Block until SIGINT or SIGTERM, then [`shutdown`](RunningServer::shutdown).
    pub fn wait_for_signal(self) -> Result<(), WebError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| WebError::Io {
                context: "cannot start the signal runtime".into(),
                source: e,
            })?;
        runtime.block_on(shutdown_signal())?;
        self.shutdown()
    }

    fn stop_and_join(&mut self) -> Result<(), WebError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| WebError::Panicked),
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        if let Err(e) = self.stop_and_join() {
            log::error!("{e}");
        }
    }
}

/// Completes on SIGINT or SIGTERM. For [`Server::run_until`] in an async `main`.
pub async fn shutdown_signal() -> Result<(), WebError> {
    let io_err = |e| WebError::Io {
        context: "cannot install a signal handler".into(),
        source: e,
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(io_err)?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.map_err(io_err)?,
        _ = term.recv() => {}
    }
    log::info!("signal received, shutting down the web server");
    Ok(())
}

/// Parse one `--web.listen-address` and bind it. `:port` is every interface (IPv6 dual-stack, or
/// IPv4 where IPv6 is unavailable); a host name binds the first of its addresses that works.
fn bind_one(address: &str) -> Result<std::net::TcpListener, WebError> {
    let bad = |message: String| WebError::ListenAddress {
        address: address.to_string(),
        message,
    };
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(bad(
            "expected host:port, e.g. \":19435\" or \"127.0.0.1:19435\"".into(),
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| bad(format!("{port:?} is not a port number")))?;
    let candidates: Vec<SocketAddr> = if host.is_empty() {
        vec![
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
        ]
    } else if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let ip: Ipv6Addr = v6
            .parse()
            .map_err(|_| bad(format!("{v6:?} is not an IPv6 address")))?;
        vec![SocketAddr::new(IpAddr::V6(ip), port)]
    } else if let Ok(ip) = host.parse::<IpAddr>() {
        if ip.is_ipv6() {
            return Err(bad("write IPv6 addresses in brackets: [::1]:19435".into()));
        }
        vec![SocketAddr::new(ip, port)]
    } else {
        (host, port)
            .to_socket_addrs()
            .map_err(|e| bad(format!("cannot resolve {host:?}: {e}")))?
            .collect()
    };
    let mut last_err = None;
    for candidate in &candidates {
        match std::net::TcpListener::bind(candidate) {
            Ok(l) => return Ok(l),
            Err(e) => last_err = Some(e),
        }
    }
    Err(WebError::Bind {
        address: address.to_string(),
        source: last_err.unwrap_or_else(|| std::io::Error::other("no address to bind")),
    })
}

async fn serve<F: Future<Output = ()>>(listeners: Listeners, ctx: Arc<Ctx>, shutdown: F) {
    let (stop_tx, stop_rx) = watch::channel(false);
    // Every task holds a sender; recv() returns None once all of them are gone.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    for (addr, listener) in listeners {
        log::info!(
            "listening on {addr} ({}{})",
            if ctx.tls.is_some() { "https" } else { "http" },
            if ctx.app.auth.is_some() {
                ", basic auth"
            } else {
                ""
            }
        );
        tokio::spawn(accept_loop(
            addr,
            listener,
            ctx.clone(),
            stop_rx.clone(),
            done_tx.clone(),
        ));
    }
    drop(done_tx);
    shutdown.await;
    log::info!("web server shutting down");
    let _ = stop_tx.send(true);
    // Connections close themselves within the timeout; this is a safety net.
    let limit = ctx.timeout + Duration::from_secs(1);
    if tokio::time::timeout(limit, done_rx.recv()).await.is_err() {
        log::warn!("web server: connections still open after {limit:?}, dropping them");
    }
}

async fn accept_loop(
    addr: SocketAddr,
    listener: TcpListener,
    ctx: Arc<Ctx>,
    mut stop: watch::Receiver<bool>,
    done: mpsc::Sender<()>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(connection(stream, peer, ctx.clone(), stop.clone(), done.clone()));
                }
                Err(e) => {
                    log::warn!("accept on {addr}: {e}");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                }
            },
        }
    }
    // Close the socket before saying this task is done, so that once `serve` returns nothing
    // listens any more.
    drop(listener);
    drop(done);
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    stop: watch::Receiver<bool>,
    _done: mpsc::Sender<()>,
) {
    let state = ConnState::new();
    let Some(acceptor) = ctx.tls.clone() else {
        serve_http(TokioIo::new(stream), false, peer, &ctx, state, stop).await;
        return;
    };
    // Plain HTTP to a TLS port: say so, as Go does, instead of a handshake error.
    let mut first = [0u8; 1];
    match tokio::time::timeout(ctx.timeout, stream.peek(&mut first)).await {
        Ok(Ok(0)) | Ok(Err(_)) => return,
        Err(_) => {
            log::debug!("{peer}: nothing sent within {:?}", ctx.timeout);
            return;
        }
        Ok(Ok(_)) => {}
    }
    if first[0].is_ascii_uppercase() {
        log::debug!("{peer}: plain HTTP request to a TLS port");
        let mut stream = stream;
        let _ = tokio::time::timeout(ctx.timeout, async {
            let _ = stream.write_all(PLAIN_HTTP_TO_TLS).await;
            let _ = stream.shutdown().await;
        })
        .await;
        return;
    }
    let tls = match tokio::time::timeout(ctx.timeout, acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            log::debug!("{peer}: TLS handshake failed: {e}");
            return;
        }
        Err(_) => {
            log::debug!("{peer}: TLS handshake not done within {:?}", ctx.timeout);
            return;
        }
    };
    let h2 = ctx.http2 && tls.get_ref().1.alpn_protocol() == Some(b"h2");
    serve_http(TokioIo::new(tls), h2, peer, &ctx, state, stop).await;
}

/// Both hyper connection types, for the watchdog.
trait GracefulConn: Future<Output = Result<(), hyper::Error>> {
    fn start_graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S> GracefulConn for hyper::server::conn::http1::Connection<I, S>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = GuardedBody>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn start_graceful_shutdown(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S> GracefulConn for hyper::server::conn::http2::Connection<I, S, TokioExecutor>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = GuardedBody>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    TokioExecutor: hyper::rt::bounds::Http2ServerConnExec<S::Future, GuardedBody>,
{
    fn start_graceful_shutdown(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

async fn serve_http<IO>(
    io: TokioIo<IO>,
    h2: bool,
    peer: SocketAddr,
    ctx: &Arc<Ctx>,
    state: Arc<ConnState>,
    stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc_ctx = ctx.clone();
    let svc_state = state.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let ctx = svc_ctx.clone();
        let guard = ActiveGuard::new(svc_state.clone());
        async move {
            let resp = ctx.app.handle(req, peer).await;
            Ok::<Response<GuardedBody>, std::convert::Infallible>(
                resp.map(|body| GuardedBody::new(body, guard)),
            )
        }
    });
    if h2 {
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
        let conn = builder.serve_connection(io, service);
        watch_connection(conn, peer, ctx.timeout, state, stop).await;
    } else {
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(ctx.timeout)
            // A client may shut down its sending side once its request is out and wait for the
            // answer; without this, hyper drops the connection unanswered when it sees that EOF
            // while the response is still being made (a render on the blocking pool, bcrypt).
            .half_close(true)
            .keep_alive(true);
        let conn = builder.serve_connection(io, service);
        watch_connection(conn, peer, ctx.timeout, state, stop).await;
    }
}

/// Drive a connection, closing it when idle too long, stuck too long, or after the grace period
/// of a shutdown.
async fn watch_connection<C: GracefulConn>(
    conn: C,
    peer: SocketAddr,
    timeout: Duration,
    state: Arc<ConnState>,
    mut stop: watch::Receiver<bool>,
) {
    tokio::pin!(conn);
    let mut grace_until: Option<Instant> = None;
    loop {
        let limit = if state.active() > 0 {
            timeout * 2
        } else {
            timeout
        };
        let deadline = Instant::from_std(state.last_event()) + limit;
        let grace = grace_until.unwrap_or_else(|| Instant::now() + timeout * 4);
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    log::debug!("{peer}: connection error: {e}");
                }
                return;
            }
            _ = tokio::time::sleep_until(deadline) => {
                let limit = if state.active() > 0 { timeout * 2 } else { timeout };
                if Instant::from_std(state.last_event()) + limit <= Instant::now() {
                    log::debug!(
                        "{peer}: closing connection ({} requests in flight, nothing new for {limit:?})",
                        state.active()
                    );
                    return;
                }
            }
            changed = stop.changed(), if grace_until.is_none() => {
                let _ = changed;
                conn.as_mut().start_graceful_shutdown();
                grace_until = Some(Instant::now() + timeout);
            }
            _ = tokio::time::sleep_until(grace), if grace_until.is_some() => {
                log::debug!("{peer}: closing connection at the end of the shutdown grace period");
                return;
            }
        }
    }
}
