//! The settings of the `prometheus:` source (`--prometheus.*`): [`PrometheusOptions`] and the
//! [`Api`] that reads the series. Plain data with their defaults; nothing here talks to a
//! server.

use std::path::PathBuf;
use std::time::Duration;

/// Settings of the Prometheus source (`--prometheus.*`).
#[derive(Debug, Clone)]
pub struct PrometheusOptions {
    /// Timeout of one HTTP request (connect to last byte).
    pub timeout: Duration,
    /// Attempts per request (1 = no retry).
    pub attempts: u32,
    /// Wait before the first retry; doubled for each further one.
    pub backoff: Duration,
    /// A file holding a bearer token (`--prometheus.bearer-token-file`).
    pub bearer_token_file: Option<PathBuf>,
    /// Basic auth: user and a file holding the password (`--prometheus.basic-auth USER:FILE`).
    pub basic_auth: Option<(String, PathBuf)>,
    /// Most points per series in one request (Prometheus refuses more than 11,000).
    pub max_points: i64,
    /// Largest response body read (`--prometheus.max-response-size`); a larger answer to a
    /// range query is asked again for half the range.
    pub max_response_bytes: u64,
    /// Most series in one remote-read answer (`--prometheus.max-series`): a bound on what a
    /// server can make tessera hold.
    pub max_series: u64,
    /// Node groups queried at once (`--prometheus.concurrency`), at least 1.
    pub concurrency: usize,
    /// Nodes per partition (`--prometheus.nodes-per-query`): each group of this many nodes is
    /// queried with a label matcher and becomes one partition; 0 = the whole fleet at once.
    pub nodes_per_query: usize,
    /// Which API reads the series (`--prometheus.api`).
    pub api: Api,
}

/// How the series are read (`--prometheus.api`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Api {
    /// The remote-read API where the server answers it, else `query-range` (said in the
    /// output).
    Auto,
    /// `/api/v1/query_range`: the server reduces each interval (PromQL), JSON answers.
    QueryRange,
    /// `/api/v1/read`: raw samples as compressed chunks (protobuf), reduced here with the same
    /// windows; much less for the server to do and to send. Prometheus and Mimir serve it;
    /// Thanos Query and VictoriaMetrics do not.
    RemoteRead,
}

impl Default for PrometheusOptions {
    fn default() -> Self {
        PrometheusOptions {
            timeout: Duration::from_secs(30),
            attempts: 3,
            backoff: Duration::from_millis(500),
            bearer_token_file: None,
            basic_auth: None,
            max_points: 11_000,
            max_response_bytes: 128 << 20,
            max_series: 100_000,
            concurrency: 4,
            nodes_per_query: 1,
            api: Api::QueryRange,
        }
    }
}

/// Default range when `--since` is not given: the last 7 days.
pub(super) const DEFAULT_RANGE_MS: i64 = 7 * 86_400_000;
