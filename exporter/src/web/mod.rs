//! The exporter's HTTP layer, in the style of the Prometheus exporter-toolkit.
//!
//! What it does:
//! - serves the telemetry path (default `/metrics`) from an [`Exposition`], a landing page at `/`,
//!   `/-/healthy` and `/-/ready` (503 until [`Exposition::ready`]);
//! - reads exporter-toolkit's `web-config.yml` ([`WebConfig`]): TLS through rustls (ring provider)
//!   with the five client certificate modes, basic auth with bcrypt hashes, extra response headers,
//!   HTTP/2 on or off;
//! - limits concurrent scrapes (`--web.max-requests`: excess get 503 at once) and bounds what a
//!   slow or hostile client can hold (see [`server`]: header read timeout, idle connection
//!   watchdog, TLS handshake timeout, handler timeout).
//!
//! What it does not do: render metrics (that is the [`Exposition`]'s job, which must never block on
//! a GPU), read flags (`main.rs` maps `--web.*` flags onto [`ServerOptions`]), gzip, systemd socket
//! activation, `--web.route-prefix`, or reloading the web config file while running.
//!
//! Shape: [`Server::bind`] validates everything and binds the sockets synchronously (so callers get
//! the real addresses, port 0 included); then either [`Server::spawn`] runs it on its own thread
//! and tokio runtime (for a sync `main` and for tests) and returns a [`RunningServer`] to
//! [`RunningServer::shutdown`] gracefully, or [`Server::run_until`] runs it inside a caller's tokio
//! runtime until a future completes.

mod auth;
mod burst;
pub mod config;
mod gate;
mod handler;
pub mod landing;
pub mod server;

use std::path::PathBuf;
use std::time::Duration;

pub use bytes::Bytes;
pub use config::{ClientAuth, TlsVersion, WebConfig};
pub use landing::{LandingInfo, LandingLink};
pub use server::{RunningServer, Server, shutdown_signal};

/// Default TCP port of `--web.listen-address` (`:19435`).
///
/// Not 9435 (Cloudflare's ebpf_exporter on the Prometheus port allocation list), nor the GPU
/// exporters' 9400, 9445, 9454, 9835 or all-smi's 9090; the list's 9100–9999 range is full, so
/// the port is outside it. See `docs/web.md`.
pub const DEFAULT_PORT: u16 = 19435;

/// Content type of the landing page.
pub const HTML_CONTENT_TYPE: &str = "text/html; charset=utf-8";
/// Content type of plain-text answers (`/-/healthy`, errors).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// What the telemetry path serves: one rendered exposition.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The `Content-Type` of the body, e.g.
    /// `application/openmetrics-text; version=1.0.0; charset=utf-8`.
    pub content_type: &'static str,
    pub body: bytes::Bytes,
}

/// The source of the telemetry path's body and of readiness.
///
/// Called from the server's threads: [`render`](Exposition::render) runs on a blocking thread,
/// once per scrape, and must never wait on a GPU (render the latest snapshot).
pub trait Exposition: Send + Sync + 'static {
    /// The body and content type for the telemetry path, given the request's `Accept` header
    /// (for content negotiation). Called per scrape; must be cheap and never block on a GPU.
    fn render(&self, accept: Option<&str>) -> Rendered;
    /// Whether the first snapshot exists (for `/-/ready`).
    fn ready(&self) -> bool;
}

/// Everything the server needs besides the [`Exposition`].
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// `--web.listen-address`, repeatable: `:19435` (all interfaces), `127.0.0.1:0`, `[::1]:9435`,
    /// `localhost:9435`.
    pub listen: Vec<String>,
    /// `--web.telemetry-path`, default `/metrics`.
    pub telemetry_path: String,
    /// `--web.max-requests`: concurrent scrapes of the telemetry path; more get 503 at once.
    /// 0 = unlimited; default 40.
    pub max_requests: usize,
    /// `--web.config.file`, already read with [`WebConfig::from_file`].
    pub web_config: Option<WebConfig>,
    /// Bounds a client's time: TLS handshake, request headers, the handler, and how long a
    /// connection may stay idle (no request in progress). Default 30 s.
    pub request_timeout: Duration,
    /// What the landing page at `/` says.
    pub landing: LandingInfo,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            listen: vec![format!(":{DEFAULT_PORT}")],
            telemetry_path: "/metrics".to_string(),
            max_requests: 40,
            web_config: None,
            request_timeout: Duration::from_secs(30),
            landing: LandingInfo::default(),
        }
    }
}

/// Errors of the HTTP layer: bad options, bad web config, sockets that cannot be bound.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// The web config file as a whole: unreadable, not YAML, unknown key, invalid value.
    #[error("web config {}: {message}", path.display())]
    Config { path: PathBuf, message: String },
    /// A file named by the web config: missing, unreadable, bad PEM, mismatched key.
    #[error("web config {}: {key} {}: {message}", config.display(), file.display())]
    ConfigFile {
        config: PathBuf,
        /// The YAML key that names the file, e.g. `tls_server_config.cert_file`.
        key: String,
        file: PathBuf,
        message: String,
    },
    /// A `--web.listen-address` that is not `host:port`.
    #[error("--web.listen-address {address:?}: {message}")]
    ListenAddress { address: String, message: String },
    /// A listen address that could not be bound.
    #[error("--web.listen-address {address:?}: cannot listen: {source}")]
    Bind {
        address: String,
        #[source]
        source: std::io::Error,
    },
    /// Other invalid [`ServerOptions`].
    #[error("web server options: {0}")]
    Options(String),
    /// Starting the runtime or thread, or a listener failing.
    #[error("web server: {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The server thread panicked.
    #[error("web server thread panicked")]
    Panicked,
}
