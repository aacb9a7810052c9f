//! The `prometheus:URL` source: any server with the Prometheus HTTP API (Prometheus, Thanos,
//! Mimir, VictoriaMetrics) read through `/api/v1/query_range` into the canonical frames.
//!
//! One range query per canonical column (`avg_over_time(m[R])`, `max_over_time(m[R])`, … with `R`
//! one step minus 1 ms, so each point aggregates the half-open interval `(ts - step, ts]` exactly
//! like a history row, on Prometheus 2 (closed ranges) and 3 (left-open) alike), evaluated at
//! multiples of the step (`IngestOptions::interval_ms`). Queries that several columns share (e.g.
//! dcgm-exporter's `FB_USED` for GPU, MIG and pod rows) are sent once. Long ranges are split into
//! chunks of at most [`PrometheusOptions::max_points`] points per series. The metric family —
//! tessera's own, dcgm-exporter's or nvidia_gpu_exporter's — is detected first through
//! `/api/v1/label/__name__/values` and named in the report.
//!
//! Counters: `energy_delta_joules` is the counter's last value in the interval minus its last
//! value before the interval (within [`LOOKBACK_MS`]), clamped at 0 (a reset counts nothing, like
//! the history writer), and its rise inside the interval for a series' first one; `xid_count`
//! sums the same increase over tessera's and nvidia_gpu_exporter's per-code XID counters, and
//! counts value changes of dcgm-exporter's last-XID gauge (a lower bound). Where a family has no
//! such series the column stays null. dcgm-exporter's `pod`/`namespace` labels (or the old `pod_name`/`pod_namespace`)
//! become `process` rows without a pid: the GPU's (or MIG instance's) memory while the pod held
//! it, so the advisor attributes the GPU to the pod (docs/frames.md).
//!
//! Recorded maxima: where the server has the advisor's recording rules' series
//! (`rules/tessera-advisor.rules.yml`, `gpu:tessera_gpu_sm_active_ratio:max1m`, …) and they cover
//! the range wherever the raw series do, the activity and memory maxima are read from them, at
//! their own period (the rule interval, at least their minute) instead of the scrape interval;
//! each row takes the recorded minute that overlaps it most, given the rule group's evaluation
//! offset. The report says which series the maxima came from (docs/recording-rules.md).
//!
//! Remote read (`--prometheus.api remote-read`, or `auto` where the server answers it): one
//! `POST /api/v1/read` per node group returns the raw samples as compressed chunks
//! ([`super::remote_read`]), and the same PromQL texts are evaluated over them here at the same
//! times ([`super::promeval`]), into the same cells: no PromQL on the server, ~1 byte per sample
//! on the wire instead of JSON.
//!
//! Transport: a blocking `ureq` client (rustls) with a per-request timeout, retries with
//! exponential backoff on 5xx, timeouts and connection errors, none on 4xx (an error naming the
//! query, the status and Prometheus' message); bearer token or basic auth. Partial data
//! (`warnings` in a response, series missing from chunks in the middle of their life) becomes
//! counted report warnings. This module does not deduplicate HA pairs and does not map
//! dcgm-exporter's `container` label (the canonical schema has no container-name column).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use polars::prelude::*;
use serde::Deserialize;

use super::promeval::{Buckets, Eval, Grid, Labels, Points, TextEval};
use super::remote_read::{self, LabelMatcher, RemoteReadError};
use super::resample::{self, Agg, Observations, RowSpec, Sampling, Values};
use super::schema::{ColType, Table};
use super::{IngestError, IngestOptions, IngestReport, period};

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
            concurrency: 4,
            nodes_per_query: 1,
            api: Api::QueryRange,
        }
    }
}

/// Default range when `--since` is not given: the last 7 days.
const DEFAULT_RANGE_MS: i64 = 7 * 86_400_000;

/// The exporter family found on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Tessera,
    Dcgm,
    NvidiaSmi,
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Tessera => "tessera-exporter",
            Family::Dcgm => "dcgm-exporter",
            Family::NvidiaSmi => "nvidia_gpu_exporter",
        }
    }

    /// Metric names whose presence identifies the family (MIG-mode GPUs have no busy series,
    /// hence the memory metric too).
    fn markers(self) -> &'static [&'static str] {
        match self {
            Family::Tessera => &["tessera_gpu_busy_ratio", "tessera_gpu_memory_used_bytes"],
            Family::Dcgm => &["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"],
            Family::NvidiaSmi => &[
                "nvidia_smi_utilization_gpu_ratio",
                "nvidia_smi_memory_used_bytes",
            ],
        }
    }

    /// The advisor's recording rules (`rules/tessera-advisor.rules.yml`): (raw metric, recorded
    /// 1-minute maximum). A query `max_over_time(raw[{R}])` reads the recorded series instead
    /// when the source uses them.
    fn recorded(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Family::Tessera => &[
                ("tessera_gpu_busy_ratio", "gpu:tessera_gpu_busy_ratio:max1m"),
                (
                    "tessera_gpu_sm_active_ratio",
                    "gpu:tessera_gpu_sm_active_ratio:max1m",
                ),
                (
                    "tessera_gpu_memory_used_bytes",
                    "gpu:tessera_gpu_memory_used_bytes:max1m",
                ),
                (
                    "tessera_mig_sm_active_ratio",
                    "mig:tessera_mig_sm_active_ratio:max1m",
                ),
                (
                    "tessera_mig_memory_used_bytes",
                    "mig:tessera_mig_memory_used_bytes:max1m",
                ),
                (
                    "tessera_process_sm_utilization_ratio",
                    "process:tessera_process_sm_utilization_ratio:max1m",
                ),
                (
                    "tessera_process_memory_used_bytes",
                    "process:tessera_process_memory_used_bytes:max1m",
                ),
            ],
            Family::Dcgm => &[
                ("DCGM_FI_DEV_GPU_UTIL", "gpu:DCGM_FI_DEV_GPU_UTIL:max1m"),
                (
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                    "gpu:DCGM_FI_PROF_GR_ENGINE_ACTIVE:max1m",
                ),
                ("DCGM_FI_PROF_SM_ACTIVE", "gpu:DCGM_FI_PROF_SM_ACTIVE:max1m"),
                ("DCGM_FI_DEV_FB_USED", "gpu:DCGM_FI_DEV_FB_USED:max1m"),
            ],
            Family::NvidiaSmi => &[],
        }
    }

    /// The recorded version of each of [`sample_metrics`] (the memory maxima): present on every
    /// recorded series' entity, so their `count_over_time` gives the recorded series' period.
    fn recorded_samples(self) -> Vec<&'static str> {
        sample_metrics(self)
            .iter()
            .filter_map(|m| self.recorded().iter().find(|(raw, _)| raw == m))
            .map(|(_, rec)| *rec)
            .collect()
    }
}

/// The window of the advisor's recorded maxima: each recorded sample at `t` is the maximum of
/// the raw samples in `(t − 1 min, t]`, recorded every minute (`interval: 1m`).
pub const RECORDED_WINDOW_MS: i64 = 60_000;

/// Whether the source read the advisor's recorded maxima, and why (for the report).
#[derive(Debug, Clone)]
struct Recorded {
    /// Recorded series used for the maxima (their names), empty when the raw series are read.
    names: Vec<&'static str>,
    /// Their period (the rule group's evaluation interval, as found), ms.
    period_ms: f64,
    /// The evaluations' offset within the minute, ms, and the shift applied to the recorded
    /// queries' evaluation times so that each row takes the recorded minute nearest to it.
    offset_ms: i64,
    shift_ms: i64,
}

/// How a query's values become a column: the PromQL template, the scale applied to values, and
/// which table's rows it feeds.
struct Query {
    table: Table,
    column: &'static str,
    /// PromQL with `{R}` for the range (step − 1 ms), `{S}` for the step, `{L}` for
    /// [`LOOKBACK_MS`] and `{SL}` for step + lookback; alternatives (a later query for the same
    /// table and column) fill only cells still null.
    promql: String,
    scale: f64,
}

fn q(table: Table, column: &'static str, promql: impl Into<String>, scale: f64) -> Query {
    Query {
        table,
        column,
        promql: promql.into(),
        scale,
    }
}

/// MiB → bytes.
const MIB: f64 = 1_048_576.0;
/// Percent → ratio (a negative scale divides: `45 / 100` is exactly 0.45, `45 × 0.01` is not).
const PCT: f64 = -100.0;
/// Millijoules → joules (divides).
const MJ: f64 = -1000.0;

/// How far back a counter's previous value is looked for (Prometheus' default lookback), ms;
/// four query steps when that is longer.
pub const LOOKBACK_MS: i64 = 300_000;

/// The increase of counter `m` over each step: its last value in `(ts − step, ts]` minus its last
/// value at or before `ts − step` (within the lookback), clamped at 0 (a reset counts nothing);
/// for a series' first interval, its rise inside the interval (max − min). Unlike `increase()` it
/// does not extrapolate, so the steps add up to the counter's whole increase, landing in the
/// interval of the sample that shows it — as the history writer counts it.
pub(super) fn counter_delta(m: &str) -> String {
    format!(
        "clamp_min(last_over_time({m}[{{R}}]) - last_over_time({m}[{{L}}] offset {{S}}), 0) \
         or (max_over_time({m}[{{R}}]) - min_over_time({m}[{{R}}]))"
    )
}

/// Events of a per-code counter family `m` (label `code_label`) per step: the counter increase
/// summed over codes; a code's series seen for the first time counts its value (its first event).
pub(super) fn event_count(m: &str, code_label: &str) -> String {
    format!(
        "sum without ({code_label}) (clamp_min(last_over_time({m}[{{R}}]) - \
         last_over_time({m}[{{L}}] offset {{S}}), 0) or last_over_time({m}[{{R}}]))"
    )
}

/// Value changes of gauge `m` whose later sample lies in `(ts − step, ts]`: changes over
/// step + lookback minus changes over the lookback before the step (both windows start at the
/// same time, so pairs before the step cancel); a series with nothing before the step counts
/// its changes inside it.
pub(super) fn value_changes(m: &str) -> String {
    format!("(changes({m}[{{SL}}]) - changes({m}[{{L}}] offset {{S}})) or changes({m}[{{R}}])")
}

fn queries(family: Family) -> Vec<Query> {
    use Table::*;
    let gauges = |table: Table, spec: &[(&'static str, &str, f64)]| -> Vec<Query> {
        spec.iter()
            .map(|(col, promql, scale)| q(table, col, *promql, *scale))
            .collect()
    };
    match family {
        Family::Tessera => {
            let mut v = gauges(
                Gpu,
                &[
                    (
                        "busy_mean",
                        "avg_over_time(tessera_gpu_busy_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "busy_max",
                        "max_over_time(tessera_gpu_busy_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "sm_active_mean",
                        "avg_over_time(tessera_gpu_sm_active_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "sm_active_max",
                        "max_over_time(tessera_gpu_sm_active_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "sm_occupancy_mean",
                        "avg_over_time(tessera_gpu_sm_occupancy_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "memory_controller_mean",
                        "avg_over_time(tessera_gpu_memory_controller_busy_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "memory_used_max_bytes",
                        "max_over_time(tessera_gpu_memory_used_bytes[{R}])",
                        1.0,
                    ),
                    (
                        "memory_total_bytes",
                        "max_over_time(tessera_gpu_memory_total_bytes[{R}])",
                        1.0,
                    ),
                    (
                        "power_mean_watts",
                        "avg_over_time(tessera_gpu_power_watts[{R}])",
                        1.0,
                    ),
                    (
                        "temperature_max_celsius",
                        "max_over_time(tessera_gpu_temperature_celsius[{R}])",
                        1.0,
                    ),
                    (
                        "mig_enabled",
                        "max_over_time(tessera_gpu_mig_enabled[{R}])",
                        1.0,
                    ),
                    (
                        "samples",
                        "count_over_time(tessera_gpu_memory_used_bytes[{R}])",
                        1.0,
                    ),
                    ("status", "max_over_time(tessera_gpu_status[{R}])", 1.0),
                    ("model", "max_over_time(tessera_gpu_info[{R}])", 1.0),
                ],
            );
            v.push(q(
                Gpu,
                "energy_delta_joules",
                counter_delta("tessera_gpu_energy_joules_total"),
                1.0,
            ));
            v.push(q(
                Gpu,
                "xid_count",
                event_count("tessera_gpu_xid_errors_total", "xid"),
                1.0,
            ));
            v.extend(gauges(
                Mig,
                &[
                    (
                        "memory_used_max_bytes",
                        "max_over_time(tessera_mig_memory_used_bytes[{R}])",
                        1.0,
                    ),
                    (
                        "memory_total_bytes",
                        "max_over_time(tessera_mig_memory_total_bytes[{R}])",
                        1.0,
                    ),
                    (
                        "sm_active_mean",
                        "avg_over_time(tessera_mig_sm_active_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "sm_active_max",
                        "max_over_time(tessera_mig_sm_active_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "samples",
                        "count_over_time(tessera_mig_memory_used_bytes[{R}])",
                        1.0,
                    ),
                    ("mig_info", "max_over_time(tessera_mig_info[{R}])", 1.0),
                ],
            ));
            v.extend(gauges(
                Process,
                &[
                    (
                        "memory_used_max_bytes",
                        "max_over_time(tessera_process_memory_used_bytes[{R}])",
                        1.0,
                    ),
                    (
                        "sm_mean",
                        "avg_over_time(tessera_process_sm_utilization_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "sm_max",
                        "max_over_time(tessera_process_sm_utilization_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "samples",
                        "count_over_time(tessera_process_memory_used_bytes[{R}])",
                        1.0,
                    ),
                ],
            ));
            v
        }
        Family::Dcgm => {
            const FB_USED: &str = "max_over_time(DCGM_FI_DEV_FB_USED[{R}])";
            const FB_TOTAL: &str =
                "avg_over_time(DCGM_FI_DEV_FB_USED[{R}]) + avg_over_time(DCGM_FI_DEV_FB_FREE[{R}])";
            const FB_COUNT: &str = "count_over_time(DCGM_FI_DEV_FB_USED[{R}])";
            let mut v = gauges(
                Gpu,
                &[
                    ("busy_mean", "avg_over_time(DCGM_FI_DEV_GPU_UTIL[{R}])", PCT),
                    (
                        "busy_mean",
                        "avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[{R}])",
                        1.0,
                    ),
                    ("busy_max", "max_over_time(DCGM_FI_DEV_GPU_UTIL[{R}])", PCT),
                    (
                        "busy_max",
                        "max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[{R}])",
                        1.0,
                    ),
                    (
                        "sm_active_mean",
                        "avg_over_time(DCGM_FI_PROF_SM_ACTIVE[{R}])",
                        1.0,
                    ),
                    (
                        "sm_active_max",
                        "max_over_time(DCGM_FI_PROF_SM_ACTIVE[{R}])",
                        1.0,
                    ),
                    (
                        "sm_occupancy_mean",
                        "avg_over_time(DCGM_FI_PROF_SM_OCCUPANCY[{R}])",
                        1.0,
                    ),
                    (
                        "memory_controller_mean",
                        "avg_over_time(DCGM_FI_DEV_MEM_COPY_UTIL[{R}])",
                        PCT,
                    ),
                    ("memory_used_max_bytes", FB_USED, MIB),
                    ("memory_total_bytes", FB_TOTAL, MIB),
                    (
                        "memory_total_bytes",
                        "max_over_time(DCGM_FI_DEV_FB_TOTAL[{R}])",
                        MIB,
                    ),
                    (
                        "power_mean_watts",
                        "avg_over_time(DCGM_FI_DEV_POWER_USAGE[{R}])",
                        1.0,
                    ),
                    (
                        "temperature_max_celsius",
                        "max_over_time(DCGM_FI_DEV_GPU_TEMP[{R}])",
                        1.0,
                    ),
                    ("samples", FB_COUNT, 1.0),
                ],
            );
            v.push(q(
                Gpu,
                "energy_delta_joules",
                counter_delta("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
                MJ,
            ));
            v.push(q(
                Gpu,
                "xid_count",
                value_changes("DCGM_FI_DEV_XID_ERRORS"),
                1.0,
            ));
            v.extend(gauges(
                Mig,
                &[
                    ("memory_used_max_bytes", FB_USED, MIB),
                    ("memory_total_bytes", FB_TOTAL, MIB),
                    (
                        "sm_active_mean",
                        "avg_over_time(DCGM_FI_PROF_SM_ACTIVE[{R}])",
                        1.0,
                    ),
                    (
                        "sm_active_max",
                        "max_over_time(DCGM_FI_PROF_SM_ACTIVE[{R}])",
                        1.0,
                    ),
                    ("samples", FB_COUNT, 1.0),
                ],
            ));
            // Pods: the memory of the GPU or MIG instance the pod was given (same queries).
            v.extend(gauges(
                Process,
                &[
                    ("memory_used_max_bytes", FB_USED, MIB),
                    ("samples", FB_COUNT, 1.0),
                ],
            ));
            v
        }
        Family::NvidiaSmi => {
            let mut v = gauges(
                Gpu,
                &[
                    (
                        "busy_mean",
                        "avg_over_time(nvidia_smi_utilization_gpu_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "busy_max",
                        "max_over_time(nvidia_smi_utilization_gpu_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "memory_controller_mean",
                        "avg_over_time(nvidia_smi_utilization_memory_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "memory_used_max_bytes",
                        "max_over_time(nvidia_smi_memory_used_bytes[{R}])",
                        1.0,
                    ),
                    (
                        "memory_total_bytes",
                        "max_over_time(nvidia_smi_memory_total_bytes[{R}])",
                        1.0,
                    ),
                    (
                        "power_mean_watts",
                        "avg_over_time(nvidia_smi_power_draw_watts[{R}])",
                        1.0,
                    ),
                    (
                        "temperature_max_celsius",
                        "max_over_time(nvidia_smi_temperature_gpu[{R}])",
                        1.0,
                    ),
                    (
                        "samples",
                        "count_over_time(nvidia_smi_memory_used_bytes[{R}])",
                        1.0,
                    ),
                    ("model", "max_over_time(nvidia_smi_gpu_info[{R}])", 1.0),
                    (
                        "mig_enabled",
                        "max_over_time(nvidia_smi_mig_mode_current[{R}])",
                        1.0,
                    ),
                ],
            );
            v.push(q(
                Gpu,
                "energy_delta_joules",
                counter_delta("nvidia_smi_energy_joules_total"),
                1.0,
            ));
            v.push(q(
                Gpu,
                "xid_count",
                event_count("nvidia_smi_xid_errors_total", "xid"),
                1.0,
            ));
            // MIG instances (NVML backend, per GPU instance; its docs/METRICS.md).
            v.extend(gauges(
                Mig,
                &[
                    (
                        "memory_used_max_bytes",
                        "max_over_time(nvidia_smi_mig_memory_used_bytes[{R}])",
                        1.0,
                    ),
                    (
                        "memory_total_bytes",
                        "max_over_time(nvidia_smi_mig_memory_total_bytes[{R}])",
                        1.0,
                    ),
                    (
                        "sm_active_mean",
                        "avg_over_time(nvidia_smi_mig_sm_activity_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "sm_active_max",
                        "max_over_time(nvidia_smi_mig_sm_activity_ratio[{R}])",
                        1.0,
                    ),
                    (
                        "samples",
                        "count_over_time(nvidia_smi_mig_memory_used_bytes[{R}])",
                        1.0,
                    ),
                    ("mig_info", "max_over_time(nvidia_smi_mig_info[{R}])", 1.0),
                ],
            ));
            v.extend(gauges(
                Process,
                &[
                    (
                        "memory_used_max_bytes",
                        "max_over_time(nvidia_smi_compute_app_used_memory_bytes[{R}])",
                        1.0,
                    ),
                    (
                        "samples",
                        "count_over_time(nvidia_smi_compute_app_used_memory_bytes[{R}])",
                        1.0,
                    ),
                ],
            ));
            v
        }
    }
}

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
struct Matrix {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<MatrixSeries>,
}

#[derive(Deserialize)]
struct MatrixSeries {
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
}

/// The HTTP side: base URL, agent, auth header, retry policy.
#[derive(Clone)]
struct Client {
    spec: String,
    base: String,
    agent: ureq::Agent,
    auth: Option<String>,
    opts: PrometheusOptions,
    /// Requests sent (attempts included), for the report.
    requests: u64,
    /// Response bytes read, for the report.
    bytes: u64,
}

fn err(spec: &str, reason: impl Into<String>) -> IngestError {
    IngestError::Prometheus {
        source_spec: spec.to_string(),
        reason: reason.into(),
    }
}

impl Client {
    fn new(spec: &str, url: &str, opts: &PrometheusOptions) -> Result<Client, IngestError> {
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
    fn get(
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
    fn get_bounded(
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
enum RemoteAnswer {
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
    fn remote_read(
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
            let ctype = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase();
            if status != 200 {
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
                    return Ok(RemoteAnswer::Unsupported(said));
                }
                if server_limit(status, &message).is_some() {
                    return Ok(RemoteAnswer::Limit(said));
                }
                if (500..600).contains(&status) {
                    last = said;
                    continue;
                }
                return Err(err(&self.spec, format!("{what}: {said}")));
            }
            let fail = |e: RemoteReadError| err(&self.spec, format!("{what}: {url}: {e}"));
            if ctype.starts_with("application/x-streamed-protobuf") {
                // Buffered: frames are read a few bytes at a time (size, checksum).
                let mut reader = std::io::BufReader::with_capacity(
                    256 << 10,
                    Counting {
                        inner: resp.body_mut().with_config().reader(),
                        n: 0,
                    },
                );
                let r = remote_read::read_streamed(&mut reader, &ranges, max, &mut each);
                self.bytes += reader.get_ref().n;
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
                return remote_read::read_samples(&data, &ranges, &mut each)
                    .map(RemoteAnswer::Done)
                    .map_err(fail);
            }
            let text = resp
                .body_mut()
                .with_config()
                .limit(64 << 10)
                .read_to_vec()
                .unwrap_or_default();
            return Ok(RemoteAnswer::Unsupported(format!(
                "{url} answered {:?}, not remote-read protobuf: {}",
                if ctype.is_empty() {
                    "no content type"
                } else {
                    ctype.as_str()
                },
                snippet(&text)
            )));
        }
        Err(err(
            &self.spec,
            format!("{what}: {url} failed after {attempts} attempt(s); last: {last}"),
        ))
    }
}

/// An answer's `data`, as JSON text.
type Data = Box<serde_json::value::RawValue>;

/// JSON `null`, the `data` of an answer without one.
fn null() -> Data {
    serde_json::value::RawValue::from_string("null".into()).expect("null is JSON")
}

/// An answer's `data` parsed as `T`.
fn parse<T: serde::de::DeserializeOwned>(data: &Data) -> serde_json::Result<T> {
    serde_json::from_str(data.get())
}

/// A server's answer to [`Client::get_bounded`].
enum Answer {
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
fn server_limit(status: u16, message: &str) -> Option<Limit> {
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
enum Limit {
    /// Fewer series per query: fewer nodes.
    Series,
    /// Fewer samples or points: a shorter range.
    Samples,
}

/// A size as a message shows it: `128 MiB`, `4000 bytes`.
fn fmt_size(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else {
        format!("{b} bytes")
    }
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
fn split_userinfo(url: &str) -> (String, Option<(String, String)>) {
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

/// The evaluation timestamps: multiples of `step` in `[since, until)`, split into chunks of at
/// most `max_points` points. Returns (start, end) pairs, both evaluated, unix ms.
pub fn chunks(since: i64, until: i64, step: i64, max_points: i64) -> Vec<(i64, i64)> {
    let step = step.max(1);
    let first = since.div_euclid(step) * step + if since.rem_euclid(step) != 0 { step } else { 0 };
    let last = (until - 1).div_euclid(step) * step;
    let per = max_points.max(1);
    let mut out = Vec::new();
    let mut s = first;
    while s <= last {
        let e = (s + (per - 1) * step).min(last);
        out.push((s, e));
        s = e + step;
    }
    out
}

/// A canonical entity: its table and label-derived columns.
type Key = (Table, Vec<(&'static str, String)>);

#[derive(Default)]
struct Entity {
    /// Row times, ascending.
    ts: Vec<i64>,
    /// Per row, the value of each of the table's [`cells`] (row-major, `width` per row), NaN
    /// where none (values are never NaN: refused).
    cells: Vec<f64>,
    width: usize,
    /// Per ts: the worst status seen ([`status_rank`]) and its position in
    /// [`resample::STATUS_RANKS`] (none for a state it does not know).
    status: BTreeMap<i64, (u8, Option<u8>)>,
}

impl Entity {
    fn new(width: usize) -> Self {
        Entity {
            width,
            ..Entity::default()
        }
    }

    /// The row at `i`.
    fn row(&self, i: usize) -> &[f64] {
        &self.cells[i * self.width..(i + 1) * self.width]
    }

    /// Puts one column's points (cell `ci`) into the rows, adding rows for new times; a cell
    /// that has a value keeps it (the first query for a column wins). Points in time order are
    /// merged in one pass; others are sorted first.
    fn put(&mut self, ci: usize, mut points: Vec<(i64, f64)>) {
        if !points.is_sorted_by_key(|p| p.0) {
            points.sort_by_key(|p| p.0);
        }
        points.dedup_by_key(|p| p.0);
        let w = self.width;
        let mut missing = 0usize;
        let mut i = 0;
        for &(t, _) in &points {
            while i < self.ts.len() && self.ts[i] < t {
                i += 1;
            }
            if i == self.ts.len() || self.ts[i] != t {
                missing += 1;
            }
        }
        if missing > 0 {
            let n = self.ts.len() + missing;
            let mut ts = Vec::with_capacity(n);
            let mut cells = Vec::with_capacity(n * w);
            let mut i = 0;
            for &(t, _) in &points {
                while i < self.ts.len() && self.ts[i] < t {
                    ts.push(self.ts[i]);
                    cells.extend_from_slice(&self.cells[i * w..(i + 1) * w]);
                    i += 1;
                }
                if i < self.ts.len() && self.ts[i] == t {
                    continue;
                }
                ts.push(t);
                cells.extend(std::iter::repeat_n(f64::NAN, w));
            }
            ts.extend_from_slice(&self.ts[i..]);
            cells.extend_from_slice(&self.cells[i * w..]);
            self.ts = ts;
            self.cells = cells;
        }
        let mut i = 0;
        for (t, v) in points {
            while self.ts[i] < t {
                i += 1;
            }
            let c = &mut self.cells[i * w + ci];
            if c.is_nan() {
                *c = v;
            }
        }
    }
}

/// The numeric cells of a table's rows, in column order: its columns that aggregate
/// ([`agg_of`]) but `status` (kept as text), and `samples`.
fn cells(table: Table) -> &'static [&'static str] {
    static CELLS: std::sync::OnceLock<[Vec<&'static str>; 3]> = std::sync::OnceLock::new();
    &CELLS.get_or_init(|| {
        Table::ALL.map(|t| {
            t.columns()
                .map(|c| c.name)
                .filter(|n| *n == "samples" || (*n != "status" && agg_of(n).is_some()))
                .collect()
        })
    })[table as usize]
}

/// Index of `column` in [`cells`] of `table`.
fn cell(table: Table, column: &str) -> Option<usize> {
    cells(table).iter().position(|c| *c == column)
}

/// Label-derived identity of a series in `table`, from the family's labels. `None` when the
/// series lacks what identifies it (e.g. a dcgm GPU series that is a MIG instance).
fn identity(
    table: Table,
    family: Family,
    m: &BTreeMap<String, String>,
) -> Option<Vec<(&'static str, String)>> {
    let get = |names: &[&str]| -> Option<String> {
        names
            .iter()
            .filter_map(|n| m.get(*n))
            .find(|v| !v.is_empty())
            .cloned()
    };
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut put = |col: &'static str, v: Option<String>| {
        if let Some(v) = v {
            out.push((col, v));
        }
    };
    put("node", node_name(m));
    match family {
        Family::Tessera => {
            put("gpu", get(&["gpu"]));
            put("uuid", get(&["uuid"]));
            match table {
                Table::Gpu => {}
                Table::Mig => {
                    for c in ["gpu_instance", "compute_instance", "profile"] {
                        put(c, get(&[c]));
                    }
                }
                Table::Process => {
                    for c in [
                        "pid",
                        "process",
                        "gpu_instance",
                        "compute_instance",
                        "pod_uid",
                        "container_id",
                        "slurm_job_id",
                        "namespace",
                        "pod",
                    ] {
                        put(c, get(&[c]));
                    }
                }
            }
        }
        Family::Dcgm => {
            let mig = get(&["GPU_I_ID"]);
            put("gpu", get(&["gpu"]));
            put("uuid", get(&["UUID"]));
            match table {
                Table::Gpu if mig.is_some() => return None,
                Table::Gpu => {}
                Table::Mig => {
                    mig.as_ref()?;
                    put("gpu_instance", mig);
                    put("profile", get(&["GPU_I_PROFILE"]));
                }
                Table::Process => {
                    // Only series of a GPU (or MIG instance) given to a pod.
                    let pod = get(&["pod", "pod_name"])?;
                    put("gpu_instance", mig);
                    put("namespace", get(&["namespace", "pod_namespace"]));
                    put("pod", Some(pod));
                }
            }
        }
        Family::NvidiaSmi => {
            put("gpu", get(&["gpu"]));
            put("uuid", get(&["uuid"]).map(|u| canonical_uuid(&u)));
            match table {
                Table::Gpu => {}
                // Per GPU instance; compute instance and profile come from `nvidia_smi_mig_info`.
                Table::Mig => put("gpu_instance", Some(get(&["gpu_instance_id"])?)),
                Table::Process => {
                    put("pid", Some(get(&["pid"])?));
                    put("process", get(&["process_name"]));
                    put("gpu_instance", get(&["gpu_instance_id"]));
                    put("compute_instance", get(&["compute_instance_id"]));
                }
            }
        }
    }
    Some(out)
}

/// nvidia_gpu_exporter writes GPU UUIDs lower-cased without NVML's `GPU-` prefix; restores it so
/// they join with other sources (the hex digits are lower case in NVML's form too).
fn canonical_uuid(u: &str) -> String {
    let lower = u.to_ascii_lowercase();
    if lower.starts_with("gpu-") || lower.starts_with("mig-") {
        format!("{}{}", &u[..4].to_ascii_uppercase(), &u[4..])
    } else {
        format!("GPU-{u}")
    }
}

/// A series' node ([`node_name`]), the label that names it and that label's value.
fn node_label(m: &BTreeMap<String, String>) -> Option<(String, &'static str, String)> {
    let node = node_name(m)?;
    let label = ["node", "Hostname", "instance"]
        .into_iter()
        .find(|l| m.get(*l).is_some_and(|v| !v.is_empty()))?;
    Some((node, label, m[label].clone()))
}

/// `node`: a `node` label, else dcgm-exporter's `Hostname`, else `instance` without its port.
fn node_name(m: &BTreeMap<String, String>) -> Option<String> {
    for l in ["node", "Hostname"] {
        if let Some(v) = m.get(l).filter(|v| !v.is_empty()) {
            return Some(v.clone());
        }
    }
    let inst = m.get("instance").filter(|v| !v.is_empty())?;
    match inst.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => Some(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        ),
        _ => Some(inst.clone()),
    }
}

/// Worse status first wins: `ok` < `degraded` < `error` < `lost`.
fn status_rank(s: &str) -> u8 {
    match s {
        "ok" => 1,
        "degraded" => 2,
        "error" => 3,
        "lost" => 4,
        _ => 0,
    }
}

/// Reads `prometheus:URL` for the options' time range into rows per table (each entity at its
/// own scrape interval, or an explicit coarser `--interval`) and what was found about the
/// sampling.
/// The rows come in partitions of nodes (`--prometheus.nodes-per-query`), each with its key
/// (the node; `*` when the fleet is read at once), in node order.
/// With [`IngestOptions::spill`] and more than one partition, each partition's rows are written
/// there as Parquet as soon as they are resampled and scanned from there (the files are
/// returned with them); else they stay in memory.
#[allow(clippy::type_complexity)]
pub(super) fn read(
    url: &str,
    opts: &IngestOptions,
    report: &mut IngestReport,
) -> Result<
    (
        Vec<(String, Vec<(Table, LazyFrame)>, Vec<PathBuf>)>,
        Sampling,
    ),
    IngestError,
> {
    let spec = format!("prometheus:{url}");
    let t0 = std::time::Instant::now();
    let timing = std::env::var_os("TESSERA_TIMINGS").is_some();
    let popts = &opts.prometheus;
    let mut client = Client::new(&spec, url, popts)?;
    let until = opts
        .until
        .unwrap_or_else(|| chrono::Utc::now().timestamp_millis());
    let since = opts.since.unwrap_or(until - DEFAULT_RANGE_MS);
    if opts.since.is_none() {
        report.warnings.push(format!(
            "{spec}: no --since given; read the last 7 days before {}",
            super::fmt_ms(until)
        ));
    }
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);

    // Which family is there?
    let all = [Family::Tessera, Family::Dcgm, Family::NvidiaSmi];
    let pattern = all
        .iter()
        .flat_map(|f| f.markers().iter().copied())
        .collect::<Vec<_>>()
        .join("|");
    // The advisor's recorded maxima are looked for too: a store may keep them longer than the
    // raw series.
    let rec_pattern = all
        .iter()
        .flat_map(|f| f.recorded().iter().map(|(_, rec)| *rec))
        .collect::<Vec<_>>()
        .join("|");
    let name_pattern = format!("{pattern}|{rec_pattern}");
    let (data, _) = client.get(
        "/api/v1/label/__name__/values",
        &[
            ("match[]", format!("{{__name__=~\"{name_pattern}\"}}")),
            ("start", secs(since - LOOKBACK_MS)),
            ("end", secs(until)),
        ],
        "metric family detection",
    )?;
    let names: BTreeSet<String> = parse(&data)
        .map_err(|e| err(&spec, format!("metric family detection: bad answer: {e}")))?;
    let mut found: Vec<Family> = all
        .into_iter()
        .filter(|f| {
            f.markers().iter().any(|m| names.contains(*m))
                || f.recorded_samples().iter().any(|m| names.contains(*m))
        })
        .collect();
    // The names API answers per TSDB block (two hours, or days after compaction), so a family
    // seen only beside the range can be listed: with several, keep those with samples in it.
    if found.len() > 1 {
        let mut present = Vec::new();
        for f in &found {
            let mut markers: Vec<&str> = f.markers().to_vec();
            markers.extend(f.recorded_samples());
            if has_samples(&mut client, &markers, since, until)? {
                present.push(*f);
            }
        }
        if !present.is_empty() {
            found = present;
        }
    }
    let Some(&family) = found.first() else {
        report.warnings.push(format!(
            "{spec}: none of the known GPU metrics ({pattern}) between {} and {}; no rows",
            super::fmt_ms(since),
            super::fmt_ms(until)
        ));
        return Ok((Vec::new(), Sampling::default()));
    };
    // The query step: the finest scrape interval of any series (each entity is then resampled
    // to its own), or an explicit coarser --interval.
    let mut prom_warnings: BTreeMap<String, u64> = BTreeMap::new();
    let raw = scrape_interval(
        &mut client,
        sample_metrics(family),
        (since, until),
        popts.max_points,
        &mut prom_warnings,
    )?;
    let (recorded, why_raw) = choose_recorded(
        &mut client,
        family,
        &names,
        &raw,
        opts.interval_ms,
        (since, until),
        &mut prom_warnings,
    )?;
    // Recorded maxima: the query step is their period, never finer than their minute (each
    // point then holds whole recorded minutes; `samples` still counts the raw samples).
    let finest = match &recorded {
        Some(r) => Some(r.period_ms.max(RECORDED_WINDOW_MS as f64)),
        None => raw.finest,
    };
    let data_step = finest.map(|p| period::bucket_for(p, 1, 0));
    let step = match (opts.interval_ms, data_step) {
        (Some(req), Some(d)) => req.max(d),
        (Some(req), None) => req,
        (None, Some(d)) => d,
        (None, None) => 60_000,
    }
    .max(1);
    report.warnings.push(format!(
        "{spec}: read {} metrics (query step {}{})",
        family.name(),
        period::fmt_period(step as f64),
        match (&recorded, raw.finest) {
            (Some(r), Some(p)) => format!(
                "; the recorded series come every {}, the finest scrape interval found is {}",
                period::fmt_period(r.period_ms),
                period::fmt_period(p)
            ),
            (Some(r), None) => format!(
                "; the recorded series come every {}, no raw series",
                period::fmt_period(r.period_ms)
            ),
            (None, Some(p)) => format!(
                "; the finest scrape interval found is {}",
                period::fmt_period(p)
            ),
            (None, None) => String::new(),
        }
    ));
    report.warnings.push(match &recorded {
        Some(r) => format!(
            "{spec}: activity and memory maxima from the advisor's recorded series \
             (rules/tessera-advisor.rules.yml: {}), recorded every {} at {} s past the minute{}; \
             other columns from the raw series",
            r.names.join(", "),
            period::fmt_period(r.period_ms),
            r.offset_ms as f64 / 1000.0,
            if r.shift_ms != 0 {
                format!(
                    "; each row takes the recorded minute ending {} s after it",
                    r.shift_ms as f64 / 1000.0
                )
            } else {
                String::new()
            }
        ),
        None => format!("{spec}: activity and memory maxima from the raw series ({why_raw})"),
    });
    if found.len() > 1 {
        let others: Vec<&str> = found[1..].iter().map(|f| f.name()).collect();
        report.warnings.push(format!(
            "{spec}: also found {} metrics; only {} were read",
            others.join(", "),
            family.name()
        ));
    }

    let range = format!("{}ms", (step - 1).max(1));
    // A counter's previous value is looked for over Prometheus' lookback, or four scrape
    // intervals when they are longer (a missed 5-minute scrape with jitter leaves more than
    // 5 minutes between two samples).
    let lookback = LOOKBACK_MS.max(4 * step);
    let windows = chunks(since, until, step, popts.max_points);
    let dur = |ms: i64| format!("{ms}ms");
    // Queries sharing a PromQL text are sent once and feed every column that uses them.
    let mut texts: Vec<(String, Vec<Query>, Option<Eval>)> = Vec::new();
    for mut query in queries(family) {
        if let Some(r) = &recorded {
            for (raw, rec) in family.recorded() {
                if query.promql == format!("max_over_time({raw}[{{R}}])") && r.names.contains(rec) {
                    query.promql = format!("max_over_time({rec}[{{R}}])");
                }
            }
        }
        let promql = query
            .promql
            .replace("{R}", &range)
            .replace("{SL}", &dur(step + lookback))
            .replace("{S}", &dur(step))
            .replace("{L}", &dur(lookback));
        match texts.iter_mut().find(|(p, _, _)| *p == promql) {
            Some((_, g, _)) => g.push(query),
            None => {
                let eval = Eval::parse(&query.promql);
                texts.push((promql, vec![query], eval))
            }
        }
    }
    // Recorded maxima are evaluated `shift` later and their answers moved back by as much
    // ([`recorded_shift`]).
    let texts: Vec<Text> = texts
        .into_iter()
        .map(|(promql, columns, eval)| {
            let shift = match &recorded {
                Some(r) if r.names.iter().any(|n| promql.contains(&format!("({n}["))) => r.shift_ms,
                _ => 0,
            };
            Text {
                promql,
                shift,
                columns,
                eval,
            }
        })
        .collect();
    // Remote read where asked for, or where the server answers it (`auto`).
    let remote = match popts.api {
        Api::QueryRange => false,
        Api::RemoteRead => {
            if let Err(why) = probe_remote_read(&mut client, family, until) {
                return Err(err(
                    &spec,
                    format!(
                        "--prometheus.api remote-read: the server does not answer the \
                         remote-read API: {why}"
                    ),
                ));
            }
            true
        }
        Api::Auto => match probe_remote_read(&mut client, family, until) {
            Ok(()) => true,
            Err(why) => {
                report.warnings.push(format!(
                    "{spec}: read through /api/v1/query_range: the server does not answer the \
                     remote-read API ({why})"
                ));
                false
            }
        },
    };
    if remote {
        if let Some(t) = texts.iter().find(|t| t.eval.is_none()) {
            return Err(err(
                &spec,
                format!("remote read cannot evaluate {:?} (a bug)", t.promql),
            ));
        }
        report.warnings.push(format!(
            "{spec}: read raw samples through the remote-read API (/api/v1/read), \
             reduced per row here"
        ));
    }
    let plan = Plan {
        spec: &spec,
        family,
        step,
        lookback,
        remote,
        windows: &windows,
        texts: &texts,
        row_spec: RowSpec {
            grid_ms: step,
            requested_ms: opts.interval_ms,
            fallback_ms: step as f64,
        },
        max_response_bytes: popts.max_response_bytes,
    };
    // Partitions: groups of nodes, each queried with a label matcher.
    let (groups, why_one) = node_groups(&raw, popts.nodes_per_query);
    let spill = opts.spill.filter(|_| why_one.is_none());
    if timing {
        eprintln!("timings: prometheus: discovery {:?}", t0.elapsed());
    }
    let (parts, mut tallies) = fetch_all(&plan, &client, groups, popts.concurrency, spill)?;
    if timing {
        eprintln!("timings: prometheus: fetched {:?}", t0.elapsed());
    }
    for (w, n) in prom_warnings {
        *tallies.prom_warnings.entry(w).or_default() += n;
    }
    let requests = client.requests + tallies.requests;
    let bytes = client.bytes + tallies.bytes;
    report.warnings.push(if remote {
        format!("{spec}: {requests} request(s); one remote read per node group")
    } else {
        format!(
            "{spec}: {} request(s) for {} chunk(s) of at most {} points",
            requests,
            windows.len(),
            popts.max_points
        )
    });
    report.warnings.push(match &why_one {
        None => format!(
            "{spec}: queried by node: {} partition(s) of at most {} node(s), {} at once{}; {}",
            parts.len(),
            popts.nodes_per_query,
            popts.concurrency.max(1),
            if spill.is_some() {
                ", each partition's rows spilled to Parquet in the temp folder"
            } else {
                ""
            },
            fmt_bytes_received(bytes)
        ),
        Some(why) => format!(
            "{spec}: queried as one partition ({why}); {}",
            fmt_bytes_received(bytes)
        ),
    });
    for (w, n) in &tallies.prom_warnings {
        report.warnings.push(format!(
            "{spec}: partial data: the server warned in {n} response(s): {w}"
        ));
        *report
            .skipped
            .entry("prometheus: responses with warnings".into())
            .or_default() += n;
    }
    for (promql, n) in &tallies.splits {
        report.warnings.push(format!(
            "{spec}: {n} answer(s) to {promql:?} were larger than {} \
             (--prometheus.max-response-size) and were asked again for half the range",
            fmt_size(popts.max_response_bytes)
        ));
    }
    for (promql, (n, first)) in &tallies.limits {
        report.warnings.push(format!(
            "{spec}: server limit: {n} quer(ies) {promql:?} were refused and asked again for \
             half the range (first: {first})"
        ));
    }
    if let Some((n, first)) = &tallies.node_splits {
        report.warnings.push(format!(
            "{spec}: server limit: {n} node group(s) were refused and queried again as two \
             smaller groups (first: {first})"
        ));
    }
    for (why, (n, example)) in &tallies.refused.0 {
        report.warnings.push(format!(
            "{spec}: refused {n} value(s): {why} (first: {example})"
        ));
        *report
            .skipped
            .entry(format!("prometheus: refused values ({why})"))
            .or_default() += n;
    }
    for (promql, n) in &tallies.gaps {
        report.warnings.push(format!(
            "{spec}: partial data: {n} series of {promql:?} missing from chunks inside their time range"
        ));
        *report
            .skipped
            .entry("prometheus: series with missing chunks".into())
            .or_default() += n;
    }
    // Sampling: each table's over every partition (their periods pooled, so the median is the
    // fleet's), then the tables together.
    let mut by_table: BTreeMap<Table, Sampling> = BTreeMap::new();
    let mut out = Vec::with_capacity(parts.len());
    for (key, tables) in parts {
        let mut lfs = Vec::new();
        let mut files = Vec::new();
        for (table, rows, s) in tables {
            match by_table.get_mut(&table) {
                Some(acc) => merge_table(acc, s),
                None => {
                    by_table.insert(table, s);
                }
            }
            if let Some((lf, file)) = rows {
                lfs.push((table, lf));
                files.extend(file);
            }
        }
        out.push((key, lfs, files));
    }
    let mut sampling = Sampling::default();
    for table in Table::ALL {
        if let Some(mut s) = by_table.remove(&table) {
            s.periods = Vec::new();
            sampling.merge(s);
        }
    }
    sampling.maxima = Some(match &recorded {
        Some(r) => format!(
            "recorded 1-minute series ({})",
            r.names
                .iter()
                .map(|n| n.split(':').nth(1).unwrap_or(n))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "raw series".to_string(),
    });
    Ok((out, sampling))
}

/// Rows of one partition: per table, its frame (none when empty) and what resampling found.
type PartTables = Vec<(Table, Option<DataFrame>, Sampling)>;

/// [`PartTables`] once kept: per table, its frame (in memory, or scanning the Parquet file it
/// was spilled to) and what resampling found.
type Settled = Vec<(Table, Option<(LazyFrame, Option<PathBuf>)>, Sampling)>;

/// Keeps a partition's rows: in memory, or written to `spill` as Parquet and scanned from there
/// (file names from `n`, unique per read).
fn settle(tables: PartTables, spill: Option<&Path>, n: usize) -> Result<Settled, IngestError> {
    let mut out = Vec::with_capacity(tables.len());
    for (table, df, s) in tables {
        let rows = match (df, spill) {
            (None, _) => None,
            (Some(df), None) => Some((df.lazy(), None)),
            (Some(mut df), Some(dir)) => {
                let path = dir.join(format!("prometheus-{n:06}-{}.parquet", table.name()));
                let io = |e: std::io::Error| IngestError::Io {
                    path: path.clone(),
                    source: e,
                };
                let file = std::fs::File::create(&path).map_err(io)?;
                // LZ4: the file lives for one run; zstd cost more CPU than the disk it saved.
                ParquetWriter::new(file)
                    .with_compression(ParquetCompression::Lz4Raw)
                    .finish(&mut df)
                    .map_err(|e| IngestError::Parquet {
                        path: path.clone(),
                        reason: format!("writing the spilled rows: {e}"),
                    })?;
                drop(df);
                let lf = super::history::scan_parquet_files(std::slice::from_ref(&path))?;
                Some((lf, Some(path)))
            }
        };
        out.push((table, rows, s));
    }
    Ok(out)
}

/// What every partition's queries share.
struct Plan<'a> {
    spec: &'a str,
    family: Family,
    step: i64,
    /// The evaluation chunks (start, end), unix ms.
    windows: &'a [(i64, i64)],
    /// `{L}`, ms.
    lookback: i64,
    /// Read through the remote-read API ([`fetch_group_remote`]).
    remote: bool,
    /// The PromQL texts without a node matcher, the shift of their evaluation times, and the
    /// columns they feed.
    texts: &'a [Text],
    row_spec: RowSpec,
    max_response_bytes: u64,
}

/// One PromQL text the source evaluates (sent once, feeding every column that uses it).
struct Text {
    /// Without a node matcher.
    promql: String,
    /// The shift of its evaluation times (recorded maxima: [`recorded_shift`]).
    shift: i64,
    columns: Vec<Query>,
    /// The same, evaluated over raw samples (remote read); `None` for a form
    /// [`Eval::parse`] does not know.
    eval: Option<Eval>,
}

/// A group of nodes queried together: their names and the series' label matcher (none: the
/// whole fleet).
#[derive(Clone)]
struct Group {
    nodes: Vec<String>,
    /// The label naming the nodes and each node's values of it.
    label: Option<(&'static str, BTreeMap<String, BTreeSet<String>>)>,
}

impl Group {
    /// The partition's key: the node, the first node and how many more, or `*` for all.
    fn key(&self) -> String {
        match (&self.label, self.nodes.as_slice()) {
            (None, _) | (_, []) => "*".to_string(),
            (Some(_), [one]) => one.clone(),
            (Some(_), [first, rest @ ..]) => format!("{first}+{}", rest.len()),
        }
    }

    /// The label matchers selecting exactly the group's series (a node named by a lower label
    /// must not have the higher ones: [`node_name`]'s order).
    fn matcher(&self) -> Option<String> {
        let (label, values) = self.label.as_ref()?;
        let vals: BTreeSet<&String> = self
            .nodes
            .iter()
            .filter_map(|n| values.get(n))
            .flatten()
            .collect();
        let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        let sel = if vals.len() == 1 {
            format!("{label}=\"{}\"", quote(vals.iter().next().expect("one")))
        } else {
            let re: Vec<String> = vals.iter().map(|v| regex_escape(v)).collect();
            format!("{label}=~\"{}\"", quote(&re.join("|")))
        };
        Some(match *label {
            "node" => sel,
            "Hostname" => format!("node=\"\",{sel}"),
            _ => format!("node=\"\",Hostname=\"\",{sel}"),
        })
    }

    /// [`Group::matcher`] as remote-read label matchers.
    fn label_matchers(&self) -> Vec<LabelMatcher> {
        let Some((label, values)) = self.label.as_ref() else {
            return Vec::new();
        };
        let vals: BTreeSet<&String> = self
            .nodes
            .iter()
            .filter_map(|n| values.get(n))
            .flatten()
            .collect();
        let mut out: Vec<LabelMatcher> = match *label {
            "node" => Vec::new(),
            "Hostname" => vec![LabelMatcher::eq("node", "")],
            _ => vec![
                LabelMatcher::eq("node", ""),
                LabelMatcher::eq("Hostname", ""),
            ],
        };
        out.push(if vals.len() == 1 {
            LabelMatcher::eq(label, vals.iter().next().expect("one"))
        } else {
            let re: Vec<String> = vals.iter().map(|v| regex_escape(v)).collect();
            LabelMatcher::re(label, &re.join("|"))
        });
        out
    }

    /// The group in two halves (for a server's series limit).
    fn halves(&self) -> (Group, Group) {
        let mid = self.nodes.len() / 2;
        let half = |nodes: &[String]| Group {
            nodes: nodes.to_vec(),
            label: self.label.clone(),
        };
        (half(&self.nodes[..mid]), half(&self.nodes[mid..]))
    }
}

/// RE2 metacharacters escaped.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `promql` with `matcher` added to every selector (`m[…]` → `m{matcher}[…]`; the source's
/// queries select by name only).
fn with_matcher(promql: &str, matcher: &str) -> String {
    let b = promql.as_bytes();
    let mut out = String::with_capacity(promql.len() + 4 * matcher.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' || c == b':' || c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            out.push_str(&promql[start..i]);
            if !c.is_ascii_digit() && b.get(i) == Some(&b'[') {
                out.push('{');
                out.push_str(matcher);
                out.push('}');
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

/// The node groups of the fleet found by the scrape interval scan, `per` nodes each, and why
/// the fleet is one partition when it is (`None` when it is partitioned).
fn node_groups(scan: &Scan, per: usize) -> (Vec<Group>, Option<String>) {
    let all = Group {
        nodes: scan.nodes.keys().cloned().collect(),
        label: None,
    };
    let labels: BTreeSet<&'static str> = scan
        .nodes
        .values()
        .flat_map(|v| v.keys())
        .copied()
        .collect();
    let why = if per == 0 {
        Some("--prometheus.nodes-per-query 0".to_string())
    } else if scan.unnamed > 0 {
        Some(format!(
            "{} series have no node, Hostname or instance label",
            scan.unnamed
        ))
    } else if labels.len() > 1 {
        Some(format!(
            "the nodes are named by different labels: {}",
            labels.iter().copied().collect::<Vec<_>>().join(", ")
        ))
    } else if scan.nodes.len() <= per {
        Some(format!("{} node(s)", scan.nodes.len()))
    } else {
        None
    };
    if why.is_some() {
        return (vec![all], why);
    }
    let label = *labels.iter().next().expect("one label");
    let values: BTreeMap<String, BTreeSet<String>> = scan
        .nodes
        .iter()
        .map(|(n, v)| (n.clone(), v.get(label).cloned().unwrap_or_default()))
        .collect();
    let groups = all
        .nodes
        .chunks(per)
        .map(|nodes| Group {
            nodes: nodes.to_vec(),
            label: Some((label, values.clone())),
        })
        .collect();
    (groups, None)
}

/// Counts of one or more partitions' queries, for the report.
#[derive(Default)]
struct Tallies {
    requests: u64,
    bytes: u64,
    prom_warnings: BTreeMap<String, u64>,
    splits: BTreeMap<String, u64>,
    /// Queries refused for a server limit and asked again for half the range: how many, and
    /// the first refusal.
    limits: BTreeMap<String, (u64, String)>,
    /// Node groups refused for a server limit and split.
    node_splits: Option<(u64, String)>,
    refused: Refused,
    gaps: BTreeMap<String, u64>,
}

impl Tallies {
    fn merge(&mut self, o: Tallies) {
        self.requests += o.requests;
        self.bytes += o.bytes;
        for (k, v) in o.prom_warnings {
            *self.prom_warnings.entry(k).or_default() += v;
        }
        for (k, v) in o.splits {
            *self.splits.entry(k).or_default() += v;
        }
        for (k, (n, first)) in o.limits {
            self.limits.entry(k).or_insert((0, first)).0 += n;
        }
        if let Some((n, first)) = o.node_splits {
            self.node_splits.get_or_insert((0, first)).0 += n;
        }
        for (why, (n, ex)) in o.refused.0 {
            self.refused.0.entry(why).or_insert((0, ex)).0 += n;
        }
        for (k, v) in o.gaps {
            *self.gaps.entry(k).or_default() += v;
        }
    }
}

fn fmt_bytes_received(b: u64) -> String {
    format!("{:.1} MiB received", b as f64 / MIB)
}

/// Pools a table's resampling findings over partitions: the median period is the median of
/// every partition's periods.
fn merge_table(acc: &mut Sampling, s: Sampling) {
    let mut periods = std::mem::take(&mut acc.periods);
    periods.extend(s.periods.iter().copied());
    acc.merge(s);
    if !periods.is_empty() {
        periods.sort_by(|a, b| a.total_cmp(b));
        acc.median_period_ms = Some(periods[periods.len() / 2]);
    }
    acc.periods = periods;
}

/// A partition's failure: fatal, or a server's limit that fewer nodes may ease.
enum FetchErr {
    Fatal(IngestError),
    Nodes(String),
}

impl From<IngestError> for FetchErr {
    fn from(e: IngestError) -> Self {
        FetchErr::Fatal(e)
    }
}

impl From<PolarsError> for FetchErr {
    fn from(e: PolarsError) -> Self {
        FetchErr::Fatal(e.into())
    }
}

/// Fetches every group, `concurrency` at once, each on its own thread with its own client;
/// returns the partitions in node order and the counts. The first error stops the others
/// (after their current group) and is returned.
fn fetch_all(
    plan: &Plan,
    client: &Client,
    groups: Vec<Group>,
    concurrency: usize,
    spill: Option<&Path>,
) -> Result<(Vec<(String, Settled)>, Tallies), IngestError> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let written = AtomicUsize::new(0);
    type Done = Result<Vec<(String, Settled)>, IngestError>;
    let results: Mutex<Vec<Option<Done>>> = Mutex::new((0..groups.len()).map(|_| None).collect());
    let tallies: Mutex<Tallies> = Mutex::new(Tallies::default());
    let workers = concurrency.max(1).min(groups.len().max(1));
    std::thread::scope(|sc| {
        for _ in 0..workers {
            sc.spawn(|| {
                let mut client = client.clone();
                client.requests = 0;
                client.bytes = 0;
                let mut t = Tallies::default();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= groups.len() || failed.load(Ordering::SeqCst) {
                        break;
                    }
                    let r = fetch_split(plan, &mut client, &groups[i], &mut t).and_then(|parts| {
                        parts
                            .into_iter()
                            .map(|(key, tables)| {
                                let n = written.fetch_add(1, Ordering::SeqCst);
                                Ok((key, settle(tables, spill, n)?))
                            })
                            .collect()
                    });
                    if r.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    results.lock().expect("results")[i] = Some(r);
                }
                t.requests += client.requests;
                t.bytes += client.bytes;
                tallies.lock().expect("tallies").merge(t);
            });
        }
    });
    let mut out = Vec::new();
    for r in results.into_inner().expect("results").into_iter().flatten() {
        out.extend(r?);
    }
    Ok((out, tallies.into_inner().expect("tallies")))
}

/// Fetches one group; where the server refuses it for a limit that fewer nodes may ease, the
/// two halves of the group instead (each its own partition), named in a warning.
fn fetch_split(
    plan: &Plan,
    client: &mut Client,
    group: &Group,
    t: &mut Tallies,
) -> Result<Vec<(String, PartTables)>, IngestError> {
    let fetched = if plan.remote {
        fetch_group_remote(plan, client, group, t)
    } else {
        fetch_group(plan, client, group, t)
    };
    match fetched {
        Ok(tables) => Ok(vec![(group.key(), tables)]),
        Err(FetchErr::Fatal(e)) => Err(e),
        Err(FetchErr::Nodes(message)) => {
            t.node_splits.get_or_insert((0, message)).0 += 1;
            let (a, b) = group.halves();
            let mut out = fetch_split(plan, client, &a, t)?;
            out.extend(fetch_split(plan, client, &b, t)?);
            Ok(out)
        }
    }
}

/// Reads one group of nodes: every query over every chunk, then its rows per table.
fn fetch_group(
    plan: &Plan,
    client: &mut Client,
    group: &Group,
    tallies: &mut Tallies,
) -> Result<PartTables, FetchErr> {
    // Counted once the group is read (a group split for a limit counts its halves only).
    let mut t = Tallies::default();
    let spec = plan.spec;
    let step = plan.step;
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    let matcher = group.matcher();
    let several = group.label.is_some() && group.nodes.len() > 1;
    let mut entities: BTreeMap<Key, Entity> = BTreeMap::new();
    let mut attrs: BTreeMap<Key, BTreeMap<&'static str, String>> = BTreeMap::new();
    let mut gaps: BTreeMap<String, u64> = BTreeMap::new();
    for Text {
        promql: text,
        shift,
        columns,
        ..
    } in plan.texts
    {
        let shift = *shift;
        let promql = match &matcher {
            Some(m) => with_matcher(text, m),
            None => text.clone(),
        };
        // Per series fingerprint: chunks it appeared in.
        let mut seen: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
        // A chunk whose answer is too large, or that the server refuses for a limit, is asked
        // again in halves, down to one point.
        let mut todo: std::collections::VecDeque<(usize, i64, i64)> = plan
            .windows
            .iter()
            .enumerate()
            .map(|(ci, (s, e))| (ci, *s, *e))
            .collect();
        while let Some((ci, s, e)) = todo.pop_front() {
            let answer = client.get_bounded(
                "/api/v1/query_range",
                &[
                    ("query", promql.clone()),
                    ("start", secs(s + shift)),
                    ("end", secs(e + shift)),
                    ("step", format!("{:.3}", step as f64 / 1000.0)),
                ],
                &format!("query {promql:?}"),
            )?;
            let (data, warns) = match answer {
                Answer::Data(d, w) => (d, w),
                Answer::TooLarge if e > s => {
                    let mid = s + ((e - s) / step / 2) * step;
                    todo.push_front((ci, mid + step, e));
                    todo.push_front((ci, s, mid));
                    *t.splits.entry(text.clone()).or_default() += 1;
                    continue;
                }
                Answer::TooLarge => {
                    return Err(FetchErr::Fatal(err(
                        spec,
                        format!(
                            "query {promql:?}: the answer for one point at {} is larger than {} \
                             (--prometheus.max-response-size)",
                            super::fmt_ms(s),
                            fmt_size(plan.max_response_bytes)
                        ),
                    )));
                }
                Answer::Limit(kind, message) => {
                    if several && (kind == Limit::Series || e <= s) {
                        return Err(FetchErr::Nodes(message));
                    }
                    if e <= s {
                        return Err(FetchErr::Fatal(err(
                            spec,
                            format!(
                                "query {promql:?}: the server refuses even one point at {}: \
                                 {message}",
                                super::fmt_ms(s)
                            ),
                        )));
                    }
                    let mid = s + ((e - s) / step / 2) * step;
                    todo.push_front((ci, mid + step, e));
                    todo.push_front((ci, s, mid));
                    t.limits.entry(text.clone()).or_insert((0, message)).0 += 1;
                    continue;
                }
            };
            for w in warns {
                *t.prom_warnings.entry(w).or_default() += 1;
            }
            let m: Matrix = parse(&data)
                .map_err(|e| err(spec, format!("query {promql:?}: bad answer: {e}")))?;
            if m.result_type != "matrix" {
                return Err(FetchErr::Fatal(err(
                    spec,
                    format!("query {promql:?}: expected a matrix, got {}", m.result_type),
                )));
            }
            for mut series in m.result {
                if shift != 0 {
                    for (t, _) in &mut series.values {
                        *t -= shift as f64 / 1000.0;
                    }
                }
                let fp = format!("{:?}", series.metric);
                seen.entry(fp).or_default().insert(ci);
                let values = || {
                    series.values.iter().map(|(t, v)| {
                        let ts = (t * 1000.0).round() as i64;
                        (ts, v.parse::<f64>().map_err(|_| v.as_str()))
                    })
                };
                absorb(
                    plan,
                    columns,
                    &promql,
                    &series.metric,
                    values,
                    &mut entities,
                    &mut attrs,
                    &mut t.refused,
                );
            }
        }
        let gapped = seen
            .values()
            .filter(|c| match (c.first(), c.last()) {
                (Some(a), Some(b)) => b - a + 1 != c.len(),
                _ => false,
            })
            .count() as u64;
        if gapped > 0 {
            *gaps.entry(text.clone()).or_default() += gapped;
        }
    }
    t.gaps = gaps;
    let mut out = Vec::new();
    for o in observations(entities, attrs, spec)? {
        let table = o.table;
        let (df, s) = resample::resample(o, plan.row_spec)?;
        out.push((table, (df.height() > 0).then_some(df), s));
    }
    tallies.merge(t);
    Ok(out)
}

/// One answer's series into the cells of every column its query feeds.
#[allow(clippy::too_many_arguments)]
fn absorb<'v, I: Iterator<Item = (i64, Result<f64, &'v str>)>>(
    plan: &Plan,
    columns: &[Query],
    promql: &str,
    metric: &BTreeMap<String, String>,
    values: impl Fn() -> I,
    entities: &mut BTreeMap<Key, Entity>,
    attrs: &mut BTreeMap<Key, BTreeMap<&'static str, String>>,
    refused: &mut Refused,
) {
    for query in columns {
        let Some(id) = identity(query.table, plan.family, metric) else {
            continue;
        };
        let key = (query.table, id);
        if let Some(bad) = bad_label(&key) {
            let why = "an identity label that is not a number where one is expected";
            refused.add(why, promql, &bad);
            continue;
        }
        collect(
            query,
            promql,
            metric,
            values(),
            &key,
            entities,
            attrs,
            refused,
        );
    }
}

/// The rows of one group of nodes read through the remote-read API: one request with a query
/// per metric name the texts select (the group's label matcher added), each series evaluated
/// as it arrives ([`TextEval`]) at the evaluation times of the query-range path, into the same
/// cells; then its rows per table, as [`fetch_group`].
fn fetch_group_remote(
    plan: &Plan,
    client: &mut Client,
    group: &Group,
    tallies: &mut Tallies,
) -> Result<PartTables, FetchErr> {
    let mut t = Tallies::default();
    let spec = plan.spec;
    let step = plan.step;
    let mut entities: BTreeMap<Key, Entity> = BTreeMap::new();
    let mut attrs: BTreeMap<Key, BTreeMap<&'static str, String>> = BTreeMap::new();
    let (Some(&(first, _)), Some(&(_, last))) = (plan.windows.first(), plan.windows.last()) else {
        return Ok(Vec::new());
    };
    let grid = Grid {
        first,
        step,
        n: (last - first) / step + 1,
        lookback: plan.lookback,
    };
    let mut evals: Vec<TextEval> = plan
        .texts
        .iter()
        .map(|x| TextEval::new(x.eval.clone().expect("checked by read"), x.shift))
        .collect();
    let mut names: Vec<String> = Vec::new();
    for e in &evals {
        for m in e.eval.metrics() {
            if !names.iter().any(|n| n == m) {
                names.push(m.to_string());
            }
        }
    }
    // Readers of each name: (text index).
    let readers: Vec<Vec<usize>> = names
        .iter()
        .map(|n| {
            (0..evals.len())
                .filter(|&i| evals[i].eval.metrics().contains(&n.as_str()))
                .collect()
        })
        .collect();
    let shifts = plan.texts.iter().map(|x| x.shift);
    let start = first - step - plan.lookback + shifts.clone().min().unwrap_or(0).min(0);
    let end = last + shifts.max().unwrap_or(0).max(0);
    let matchers = group.label_matchers();
    let queries: Vec<remote_read::Query> = names
        .iter()
        .map(|n| {
            let mut m = vec![LabelMatcher::eq("__name__", n)];
            m.extend(matchers.iter().cloned());
            remote_read::Query {
                start_timestamp_ms: start,
                end_timestamp_ms: end,
                matchers: m,
            }
        })
        .collect();
    let what = format!(
        "remote read of {} metric(s) for {}",
        names.len(),
        match &group.label {
            Some(_) => format!("node(s) {}", group.key()),
            None => "the fleet".to_string(),
        }
    );
    let mut out = Vec::new();
    // Evaluated series of text `i` into the cells.
    let mut absorb_out = |i: usize, out: &mut Vec<(Labels, Points)>| {
        let text = &plan.texts[i];
        for (metric, points) in out.drain(..) {
            absorb(
                plan,
                &text.columns,
                &text.promql,
                &metric,
                || points.iter().map(|&(t, v)| (t, Ok(v))),
                &mut entities,
                &mut attrs,
                &mut t.refused,
            );
        }
    };
    // A series' buckets, shared by the templates that read it.
    let mut bk = Buckets::default();
    let answer = client.remote_read(queries, &what, |series| {
        let name = &names[series.query];
        bk.clear();
        for &i in &readers[series.query] {
            evals[i].feed(
                name,
                &series.labels,
                &series.ts,
                &series.vals,
                &grid,
                &mut bk,
                &mut out,
            );
            absorb_out(i, &mut out);
        }
        Ok(())
    })?;
    match answer {
        RemoteAnswer::Done(stats) => {
            if stats.skipped_chunks > 0 {
                *t.prom_warnings
                    .entry("remote read: chunks of a histogram encoding skipped".into())
                    .or_default() += stats.skipped_chunks;
            }
        }
        RemoteAnswer::Limit(message) => {
            if group.label.is_some() && group.nodes.len() > 1 {
                return Err(FetchErr::Nodes(message));
            }
            return Err(FetchErr::Fatal(err(
                spec,
                format!(
                    "{what}: the server refuses it for a limit: {message} \
                     (--prometheus.api query-range reads the range in chunks)"
                ),
            )));
        }
        RemoteAnswer::Unsupported(why) => {
            return Err(FetchErr::Fatal(err(spec, format!("{what}: {why}"))));
        }
    }
    for (i, e) in evals.iter_mut().enumerate() {
        e.finish(&mut out);
        absorb_out(i, &mut out);
    }
    let mut tables = Vec::new();
    for o in observations(entities, attrs, spec)? {
        let table = o.table;
        let (df, s) = resample::resample(o, plan.row_spec)?;
        tables.push((table, (df.height() > 0).then_some(df), s));
    }
    tallies.merge(t);
    Ok(tables)
}

/// Whether the server answers the remote-read API: one small read (the family's first marker
/// over the last millisecond of the range); why not when it does not.
fn probe_remote_read(client: &mut Client, family: Family, until: i64) -> Result<(), String> {
    let q = remote_read::Query {
        start_timestamp_ms: until - 1,
        end_timestamp_ms: until,
        matchers: vec![LabelMatcher::eq("__name__", family.markers()[0])],
    };
    match client.remote_read(vec![q], "remote-read probe", |_| Ok(())) {
        Ok(RemoteAnswer::Done(_)) => Ok(()),
        Ok(RemoteAnswer::Unsupported(why)) | Ok(RemoteAnswer::Limit(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether to read the activity and memory maxima from the advisor's recorded series
/// (`rules/tessera-advisor.rules.yml`) rather than the raw ones, and if not, why. They are used
/// when the server has them and they cover the range wherever the raw series do (every window
/// of [`scrape_interval`] with a raw sample has a recorded one: rules loaded after `--since`,
/// or a ruler that was down for an hour, leave windows without), they come at least once a
/// minute or as often as the raw samples (a longer rule interval leaves raw samples in no
/// window), and no `--interval` finer than their minute was asked for.
fn choose_recorded(
    client: &mut Client,
    family: Family,
    names: &BTreeSet<String>,
    raw: &Scan,
    requested_ms: Option<i64>,
    range: (i64, i64),
    warnings: &mut BTreeMap<String, u64>,
) -> Result<(Option<Recorded>, String), IngestError> {
    let listed: Vec<&'static str> = family
        .recorded()
        .iter()
        .map(|(_, rec)| *rec)
        .filter(|rec| names.contains(*rec))
        .collect();
    let samples: Vec<&str> = family
        .recorded_samples()
        .into_iter()
        .filter(|m| names.contains(*m))
        .collect();
    if family.recorded().is_empty() {
        return Ok((None, format!("no recording rules for {}", family.name())));
    }
    if samples.is_empty() {
        return Ok((
            None,
            "no recorded series of rules/tessera-advisor.rules.yml on the server".into(),
        ));
    }
    if let Some(req) = requested_ms
        && req < RECORDED_WINDOW_MS
    {
        return Ok((
            None,
            format!(
                "--interval {} is finer than the recorded series' minute",
                period::fmt_period(req as f64)
            ),
        ));
    }
    let rec = scrape_interval(client, &samples, range, 11_000, warnings)?;
    let Some(last) = rec.windows.last().copied() else {
        return Ok((None, "no recorded series in the range".into()));
    };
    let missing: Vec<i64> = raw.windows.difference(&rec.windows).copied().collect();
    if let Some(first) = missing.first() {
        return Ok((
            None,
            format!(
                "the recorded series are missing in {} of the {} hour(s) that have raw samples, \
                 the first ending {}",
                missing.len(),
                raw.windows.len(),
                super::fmt_ms(*first)
            ),
        ));
    }
    let period_ms = rec.finest.unwrap_or(RECORDED_WINDOW_MS as f64);
    let limit = 1.5 * (RECORDED_WINDOW_MS as f64).max(raw.finest.unwrap_or(0.0));
    if period_ms > limit {
        return Ok((
            None,
            format!(
                "the recorded series come every {}: a rule interval longer than their minute \
                 leaves raw samples in no window (set `interval: 1m` on the group)",
                period::fmt_period(period_ms)
            ),
        ));
    }
    let offset_ms = recorded_offset(client, samples[0], last, range)?.unwrap_or(0);
    Ok((
        Some(Recorded {
            names: listed,
            period_ms,
            offset_ms,
            shift_ms: recorded_shift(offset_ms),
        }),
        String::new(),
    ))
}

/// Whether any of `metrics` has a sample in `[since, until)`: `count(count_over_time(m[W]))`
/// evaluated every W (an hour, or the whole range when shorter).
fn has_samples(
    client: &mut Client,
    metrics: &[&str],
    since: i64,
    until: i64,
) -> Result<bool, IngestError> {
    let window = ((until - since).clamp(1_000, 3_600_000)) / 1_000 * 1_000;
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    for m in metrics {
        let promql = format!("count(count_over_time({m}[{}ms]))", window - 1);
        for (s, e) in chunks(since + 1, until + window, window, 11_000) {
            let (data, _) = client.get(
                "/api/v1/query_range",
                &[
                    ("query", promql.clone()),
                    ("start", secs(s)),
                    ("end", secs(e)),
                    ("step", secs(window)),
                ],
                &format!("metric family detection: query {promql:?}"),
            )?;
            let mx: Matrix = parse(&data).map_err(|e| {
                err(
                    &client.spec,
                    format!("metric family detection: query {promql:?}: bad answer: {e}"),
                )
            })?;
            if mx.result.iter().any(|s| !s.values.is_empty()) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The metric whose `count_over_time` gives each table's raw samples (present on every series
/// of the table, MIG mode included).
fn sample_metrics(family: Family) -> &'static [&'static str] {
    match family {
        Family::Tessera => &[
            "tessera_gpu_memory_used_bytes",
            "tessera_mig_memory_used_bytes",
            "tessera_process_memory_used_bytes",
        ],
        Family::Dcgm => &["DCGM_FI_DEV_FB_USED"],
        Family::NvidiaSmi => &[
            "nvidia_smi_memory_used_bytes",
            "nvidia_smi_mig_memory_used_bytes",
            "nvidia_smi_compute_app_used_memory_bytes",
        ],
    }
}

/// The finest scrape interval of any series of the family in `[since, until)`, ms: per series,
/// the most samples it has in any window of an hour (`count_over_time(m[1h])` evaluated hourly;
/// the whole range when shorter), divided into the window. The fullest window is the one with
/// the fewest missed scrapes; jitter moves a count by one at most. `None` when no series has
/// two samples in a window.
fn scrape_interval(
    client: &mut Client,
    metrics: &[&str],
    (since, until): (i64, i64),
    max_points: i64,
    warnings: &mut BTreeMap<String, u64>,
) -> Result<Scan, IngestError> {
    let range = (until - since).max(1_000);
    let window = range.min(3_600_000) / 1_000 * 1_000;
    let window = window.max(1_000);
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    let mut finest: Option<f64> = None;
    let mut windows = BTreeSet::new();
    let mut nodes: BTreeMap<String, BTreeMap<&'static str, BTreeSet<String>>> = BTreeMap::new();
    let mut unnamed = 0u64;
    for m in metrics {
        let promql = format!("count_over_time({m}[{window}ms])");
        for (s, e) in chunks(since + 1, until + window, window, max_points) {
            let (data, warns) = client.get(
                "/api/v1/query_range",
                &[
                    ("query", promql.clone()),
                    ("start", secs(s)),
                    ("end", secs(e)),
                    ("step", secs(window)),
                ],
                &format!("scrape interval: query {promql:?}"),
            )?;
            for w in warns {
                *warnings.entry(w).or_default() += 1;
            }
            let mx: Matrix = parse(&data).map_err(|e| {
                err(
                    &client.spec,
                    format!("scrape interval: query {promql:?}: bad answer: {e}"),
                )
            })?;
            for series in mx.result {
                match node_label(&series.metric) {
                    Some((node, label, value)) => {
                        nodes
                            .entry(node)
                            .or_default()
                            .entry(label)
                            .or_default()
                            .insert(value);
                    }
                    None => unnamed += 1,
                }
                for (t, v) in &series.values {
                    if v.parse::<f64>().is_ok_and(|v| v >= 1.0) {
                        windows.insert((t * 1000.0).round() as i64);
                    }
                }
                let most = series
                    .values
                    .iter()
                    .filter_map(|(_, v)| v.parse::<f64>().ok())
                    .fold(0.0, f64::max);
                if most >= 2.0 {
                    let p = window as f64 / most;
                    finest = Some(finest.map_or(p, |f: f64| f.min(p)));
                }
            }
        }
    }
    Ok(Scan {
        finest,
        windows,
        nodes,
        unnamed,
    })
}

/// What [`scrape_interval`] found: the finest period, and the windows (their end, unix ms) in
/// which any series had a sample.
struct Scan {
    finest: Option<f64>,
    windows: BTreeSet<i64>,
    /// Per node ([`node_name`]): the label that names it and that label's values.
    nodes: BTreeMap<String, BTreeMap<&'static str, BTreeSet<String>>>,
    /// Series with no node name.
    unnamed: u64,
}

/// The evaluations' offset within the recorded series' minute, ms: the time of their latest
/// sample (`timestamp()` of a selector is the sample's own time) at a few points of the last
/// window that has them, modulo a minute. `None` when the server answers none.
fn recorded_offset(
    client: &mut Client,
    metric: &str,
    last_window_end: i64,
    (since, until): (i64, i64),
) -> Result<Option<i64>, IngestError> {
    let end = last_window_end.min(until - 1).max(since + 1);
    let start = (end - 3_600_000).max(since + 1);
    let promql = format!("max(timestamp({metric}))");
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    let (data, _) = client.get(
        "/api/v1/query_range",
        &[
            ("query", promql.clone()),
            ("start", secs(start)),
            ("end", secs(end)),
            ("step", secs(600_000)),
        ],
        &format!("recorded series: query {promql:?}"),
    )?;
    let mx: Matrix = parse(&data).map_err(|e| {
        err(
            &client.spec,
            format!("recorded series: query {promql:?}: bad answer: {e}"),
        )
    })?;
    // The most common offset (a sample from a moment the rules were reloaded can differ).
    let mut counts: BTreeMap<i64, u32> = BTreeMap::new();
    for series in &mx.result {
        for (_, v) in &series.values {
            if let Ok(t) = v.parse::<f64>() {
                let ms = (t * 1000.0).round() as i64;
                *counts.entry(ms.rem_euclid(RECORDED_WINDOW_MS)).or_default() += 1;
            }
        }
    }
    Ok(counts
        .into_iter()
        .max_by_key(|(o, n)| (*n, -o))
        .map(|(o, _)| o))
}

/// The shift of the recorded queries' evaluation times for evaluations `offset` ms into each
/// minute: a row ending at `ts` covers `(ts − step, ts]`; the recorded sample at `ts + offset`
/// covers `(ts − 1 min + offset, ts + offset]`, the one before it `(ts − 2 min + offset,
/// ts − 1 min + offset]`. The row takes the one that overlaps it more: evaluated `offset` later
/// when that is at most half a minute (the answers' times are moved back by as much), else at
/// `ts` itself.
fn recorded_shift(offset_ms: i64) -> i64 {
    if offset_ms <= RECORDED_WINDOW_MS / 2 {
        offset_ms
    } else {
        0
    }
}

/// Adds one series' points into its entity (or label-derived attributes for info/status).
/// The points of one answer's series (its labels `m`; time in ms and value, or the text that
/// is not a number) into the entity `key`'s cells for `query`'s column.
#[allow(clippy::too_many_arguments)]
fn collect<'v>(
    query: &Query,
    promql: &str,
    m: &BTreeMap<String, String>,
    values: impl Iterator<Item = (i64, Result<f64, &'v str>)>,
    key: &Key,
    entities: &mut BTreeMap<Key, Entity>,
    attrs: &mut BTreeMap<Key, BTreeMap<&'static str, String>>,
    refused: &mut Refused,
) {
    // Attributes carried as labels on data series (dcgm-exporter's `modelName`; older
    // nvidia_gpu_exporter versions put `name` on every series).
    if let Some(model) = ["modelName", "name"]
        .iter()
        .find_map(|l| m.get(*l).filter(|v| !v.is_empty()))
        && key.0 == Table::Gpu
    {
        attrs
            .entry(key.clone())
            .or_default()
            .insert("model", model.clone());
    }
    match query.column {
        "model" => {
            let a = attrs.entry(key.clone()).or_default();
            if let Some(name) = m.get("name").filter(|v| !v.is_empty()) {
                a.insert("model", name.clone());
            }
            // nvidia_gpu_exporter has the GPU index only as a label of its info series.
            if let Some(index) = m.get("index").filter(|v| !v.is_empty()) {
                a.insert("gpu", index.clone());
            }
            return;
        }
        "mig_info" => {
            let a = attrs.entry(key.clone()).or_default();
            for c in [
                "profile_id",
                "placement_start",
                "placement_size",
                "mig_uuid",
            ] {
                if let Some(v) = m.get(c).filter(|v| !v.is_empty()) {
                    a.insert(c, v.clone());
                }
            }
            // nvidia_gpu_exporter: the profile and the (first) compute instance of the GPU
            // instance (tessera has them in the identity already, which wins).
            for (col, label) in [
                ("profile", "profile"),
                ("compute_instance", "compute_instance_id"),
            ] {
                if let Some(v) = m.get(label).filter(|v| !v.is_empty()) {
                    a.entry(col).or_insert_with(|| v.clone());
                }
            }
            return;
        }
        _ => {}
    }
    let ent = entities
        .entry(key.clone())
        .or_insert_with(|| Entity::new(cells(key.0).len()));
    let ci = cell(key.0, query.column);
    let mut points = Vec::with_capacity(values.size_hint().0);
    let range = super::value_range(query.column);
    // A status series' state (the series' label, the same for all its points).
    let state = {
        let s = m.get("state").map(String::as_str).unwrap_or_default();
        let pos = resample::STATUS_RANKS.iter().position(|r| *r == s);
        (status_rank(s), pos.map(|p| p as u8))
    };
    for (ts, x) in values {
        let x = match x {
            Ok(x) => x,
            Err(v) => {
                refused.add("not a number", promql, v);
                continue;
            }
        };
        if query.column == "status" {
            if x >= 1.0 {
                let (rank, pos) = state;
                ent.status
                    .entry(ts)
                    .and_modify(|cur| {
                        if rank > cur.0 {
                            *cur = (rank, pos);
                        }
                    })
                    .or_insert((rank, pos));
            }
            continue;
        }
        if x.is_nan() {
            refused.add("NaN", promql, "NaN");
            continue;
        }
        let v = if query.scale < 0.0 {
            x / -query.scale
        } else {
            x * query.scale
        };
        if let Err(why) = range.check(v) {
            refused.add(why, promql, &x.to_string());
            continue;
        }
        points.push((ts, v));
    }
    if let Some(ci) = ci
        && !points.is_empty()
    {
        ent.put(ci, points);
    }
}

/// Values refused from the server's answers, by reason: how many, and the first query and value.
#[derive(Default)]
struct Refused(BTreeMap<&'static str, (u64, String)>);

impl Refused {
    fn add(&mut self, why: &'static str, promql: &str, value: &str) {
        let e = self.0.entry(why).or_insert_with(|| {
            let v: String = value.chars().take(40).collect();
            (0, format!("{v} from {promql:?}"))
        });
        e.0 += 1;
    }
}

/// Whether a series' identity labels fit their columns' types (a `gpu` or `pid` label must be an
/// integer): the first that does not, as "label=value".
fn bad_label(key: &Key) -> Option<String> {
    let table = key.0;
    key.1.iter().find_map(|(name, v)| {
        let ty = table.column(name)?.ty;
        let ok = match ty {
            ColType::UInt32 => v.parse::<u32>().is_ok(),
            ColType::UInt64 => v.parse::<u64>().is_ok(),
            ColType::Int64 => v.parse::<i64>().is_ok(),
            ColType::Float64 => v.parse::<f64>().is_ok_and(f64::is_finite),
            ColType::Bool | ColType::Utf8 => true,
        };
        (!ok).then(|| format!("{name}={v:?}"))
    })
}

/// The observations of every table: one per entity and evaluation time that has a gauge's
/// value (not only a status, a count or a counter's increase — counters have points between the
/// gauges' samples), weighted by the raw samples the point holds (`count_over_time` of the
/// table's memory metric; 1 where it has none).
fn observations(
    entities: BTreeMap<Key, Entity>,
    attrs: BTreeMap<Key, BTreeMap<&'static str, String>>,
    spec: &str,
) -> Result<Vec<Observations>, IngestError> {
    let mut out = Vec::new();
    for table in Table::ALL {
        let value_cols: Vec<(&'static str, Agg)> = table
            .columns()
            .filter(|c| !matches!(c.name, "ts" | "interval_ms" | "samples"))
            .filter_map(|c| agg_of(c.name).map(|a| (c.name, a)))
            .collect();
        // Per value column: its cell (none for status).
        let value_cells: Vec<Option<usize>> =
            value_cols.iter().map(|(c, _)| cell(table, c)).collect();
        let samples_cell = cell(table, "samples");
        // Cells that make a row an observation: not the count, not a counter's increase.
        let gauge: Vec<bool> = cells(table)
            .iter()
            .map(|c| !matches!(*c, "samples" | "energy_delta_joules" | "xid_count"))
            .collect();
        let rows: usize = entities
            .iter()
            .filter(|(k, _)| k.0 == table)
            .map(|(_, e)| e.ts.len())
            .sum();
        let (mut eid, mut ts, mut n) = (
            Vec::with_capacity(rows),
            Vec::with_capacity(rows),
            Vec::with_capacity(rows),
        );
        let mut vals: Vec<resample::OptCol> = (0..value_cols.len())
            .map(|_| resample::OptCol::with_capacity(rows))
            .collect();
        let mut labels: Vec<Vec<(&'static str, String)>> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        for (key, ent) in &entities {
            if key.0 != table {
                continue;
            }
            let e = labels.len() as u32;
            let mut l: Vec<(&'static str, String)> = key.1.clone();
            if let Some(a) = attrs.get(key) {
                for (k, v) in a {
                    if !l.iter().any(|(n, _)| n == k) {
                        l.push((k, v.clone()));
                    }
                }
            }
            names.push(format!(
                "{spec}: {} {}",
                table.name(),
                key.1
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ));
            labels.push(l);
            for (r, t) in ent.ts.iter().enumerate() {
                let row = ent.row(r);
                let has_value = row.iter().zip(&gauge).any(|(v, g)| *g && !v.is_nan());
                if !has_value {
                    continue;
                }
                eid.push(e);
                ts.push(*t);
                let got = |ci: Option<usize>| ci.map(|i| row[i]).filter(|v| !v.is_nan());
                n.push(
                    got(samples_cell).map_or(1, |c| c.round().clamp(1.0, u32::MAX as f64) as u32),
                );
                let status = ent.status.get(t).and_then(|s| s.1);
                for (((c, _), ci), v) in value_cols.iter().zip(&value_cells).zip(vals.iter_mut()) {
                    v.push(if *c == "status" {
                        status.map(f64::from)
                    } else {
                        got(*ci)
                    });
                }
            }
        }
        if ts.is_empty() {
            continue;
        }
        let df = resample::frame(
            eid,
            ts,
            n,
            value_cols
                .iter()
                .zip(vals)
                .map(|((c, _), v)| (*c, v))
                .collect(),
        )?;
        out.push(Observations {
            table,
            df,
            values: Values::Wide(value_cols.clone()),
            labels,
            names,
        });
    }
    Ok(out)
}

/// How a canonical column of the Prometheus source aggregates when points are combined into a
/// coarser row; `None` for identity and attribute columns.
fn agg_of(column: &str) -> Option<Agg> {
    Some(match column {
        "energy_delta_joules" | "xid_count" => Agg::Sum,
        c if c.ends_with("_mean") || c == "power_mean_watts" => Agg::Mean,
        c if c.ends_with("_max")
            || c.ends_with("_max_bytes")
            || c.ends_with("_max_celsius")
            || c == "memory_total_bytes"
            || c == "mig_enabled"
            || c == "status" =>
        {
            Agg::Max
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_template_is_evaluated_by_remote_read() {
        for family in [Family::Tessera, Family::Dcgm, Family::NvidiaSmi] {
            let mut templates: Vec<String> =
                queries(family).into_iter().map(|q| q.promql).collect();
            // The recorded maxima's form too.
            templates.extend(
                family
                    .recorded()
                    .iter()
                    .map(|(_, rec)| format!("max_over_time({rec}[{{R}}])")),
            );
            for t in templates {
                let e = Eval::parse(&t).unwrap_or_else(|| panic!("{family:?}: {t:?}"));
                // Every metric the template selects is one the evaluation reads.
                for m in e.metrics() {
                    assert!(t.contains(&format!("{m}[")), "{t:?} reads {m}");
                }
            }
        }
        assert_eq!(
            Eval::parse("avg_over_time(a[{R}]) + avg_over_time(b[{R}])"),
            Some(Eval::Sum(
                super::super::promeval::Func::Avg,
                "a".into(),
                super::super::promeval::Func::Avg,
                "b".into()
            ))
        );
        assert_eq!(Eval::parse("rate(a[{R}])"), None);
        assert_eq!(Eval::parse("max_over_time(a[5m])"), None);
    }

    #[test]
    fn chunks_cover_the_range_within_the_point_limit() {
        let c = chunks(5, 100_001, 10, 1000);
        assert_eq!(c.first().map(|c| c.0), Some(10));
        assert_eq!(c.last().map(|c| c.1), Some(100_000));
        for (s, e) in &c {
            assert!((e - s) / 10 < 1000);
        }
        for w in c.windows(2) {
            assert_eq!(w[0].1 + 10, w[1].0);
        }
        assert!(chunks(10, 10, 10, 5).is_empty());
    }

    #[test]
    fn userinfo_and_node() {
        let (u, a) = split_userinfo("http://al%40x:p%3Aw@host:9090/prom");
        assert_eq!(u, "http://host:9090/prom");
        assert_eq!(a, Some(("al@x".into(), "p:w".into())));
        let m: BTreeMap<String, String> = [("instance".to_string(), "n1:9400".to_string())]
            .into_iter()
            .collect();
        assert_eq!(node_name(&m).as_deref(), Some("n1"));
    }

    #[test]
    fn node_matchers_go_into_every_selector() {
        let q = counter_delta("tessera_gpu_energy_joules_total")
            .replace("{R}", "9999ms")
            .replace("{L}", "300000ms")
            .replace("{S}", "10000ms");
        let m = with_matcher(&q, "node=\"a\"");
        assert_eq!(
            m.matches("tessera_gpu_energy_joules_total{node=\"a\"}[")
                .count(),
            4
        );
        assert!(!m.contains("ms{"), "{m}");
        let x = with_matcher(
            "sum without (xid) (last_over_time(gpu:m:max1m[9999ms]) or x)",
            "n=\"1\"",
        );
        assert_eq!(
            x,
            "sum without (xid) (last_over_time(gpu:m:max1m{n=\"1\"}[9999ms]) or x)"
        );
        let values: BTreeMap<String, BTreeSet<String>> = [
            ("10.0.0.1".to_string(), ["10.0.0.1:9400".to_string()].into()),
            ("b".to_string(), ["b:9400".to_string()].into()),
        ]
        .into_iter()
        .collect();
        let g = Group {
            nodes: vec!["10.0.0.1".into(), "b".into()],
            label: Some(("instance", values)),
        };
        assert_eq!(
            g.matcher().as_deref(),
            Some(r#"node="",Hostname="",instance=~"10\\.0\\.0\\.1:9400|b:9400""#)
        );
        assert_eq!(g.key(), "10.0.0.1+1");
        let (a, b) = g.halves();
        assert_eq!(
            a.matcher().as_deref(),
            Some(r#"node="",Hostname="",instance="10.0.0.1:9400""#)
        );
        assert_eq!(b.key(), "b");
    }

    #[test]
    fn server_limits_are_told_apart() {
        let l = |s, m| server_limit(s, m);
        assert_eq!(
            l(
                422,
                "query processing would load too many samples into memory in query execution"
            ),
            Some(Limit::Samples)
        );
        assert_eq!(
            l(
                400,
                "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"
            ),
            Some(Limit::Samples)
        );
        assert_eq!(
            l(
                422,
                "expanding series: the query hit the max number of series limit (limit: 100000 series)"
            ),
            Some(Limit::Series)
        );
        assert_eq!(
            l(
                422,
                "cannot select more than -search.maxUniqueTimeseries=300000 time series"
            ),
            Some(Limit::Series)
        );
        assert_eq!(l(400, "parse error: unexpected character"), None);
        assert_eq!(l(401, "unauthorized"), None);
        assert_eq!(
            l(
                422,
                "found duplicate series for the match group {gpu=\"0\"} on the right hand-side"
            ),
            None
        );
        assert_eq!(
            l(422, "the query exceeded the per-query fetch limit"),
            Some(Limit::Samples)
        );
    }
}
