//! What the `prometheus:` source asks for: the exporter [`Family`] found on the server (its
//! marker metrics and the advisor's recorded series for it), the PromQL template and scale of
//! every canonical column per family ([`queries`]), the metric that counts each table's raw
//! samples, and the evaluation chunks of a range ([`chunks`]).
//!
//! The counter, event and value-change templates come from [`crate::ingest::promeval`], which
//! evaluates the same forms over raw samples. This module sends nothing and decides nothing
//! about which series a server has (that is `discovery` and `recorded`).

use crate::frames::schema::Table::{self, Gpu, Mig, Process};
use crate::ingest::promeval::{counter_delta, event_count, value_changes};

/// The exporter family found on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Tessera,
    Dcgm,
    NvidiaSmi,
}

impl Family {
    pub(super) fn name(self) -> &'static str {
        match self {
            Family::Tessera => "tessera-exporter",
            Family::Dcgm => "dcgm-exporter",
            Family::NvidiaSmi => "nvidia_gpu_exporter",
        }
    }

    /// Metric names whose presence identifies the family (MIG-mode GPUs have no busy series,
    /// hence the memory metric too).
    pub(super) fn markers(self) -> &'static [&'static str] {
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
    pub(super) fn recorded(self) -> &'static [(&'static str, &'static str)] {
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
    pub(super) fn recorded_samples(self) -> Vec<&'static str> {
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

/// How a query's values become a column: the PromQL template, the scale applied to values, and
/// which table's rows it feeds.
pub(super) struct Query {
    pub(super) table: Table,
    pub(super) column: &'static str,
    /// PromQL with `{R}` for the range (step − 1 ms), `{S}` for the step, `{L}` for
    /// [`LOOKBACK_MS`] and `{SL}` for step + lookback; alternatives (a later query for the same
    /// table and column) fill only cells still null.
    pub(super) promql: String,
    pub(super) scale: f64,
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
pub(super) const MIB: f64 = 1_048_576.0;

/// Percent → ratio (a negative scale divides: `45 / 100` is exactly 0.45, `45 × 0.01` is not).
const PCT: f64 = -100.0;

/// Millijoules → joules (divides).
const MJ: f64 = -1000.0;

/// How far back a counter's previous value is looked for (Prometheus' default lookback), ms;
/// four query steps when that is longer.
pub const LOOKBACK_MS: i64 = 300_000;

pub(super) fn queries(family: Family) -> Vec<Query> {
    let mut v = base_queries(family);
    v.extend(profiling(family));
    v
}

/// GPM's profiling columns (history format version 2: Hopper and later; dcgm-exporter's
/// `DCGM_FI_PROF_*` fields), each read like SM activity: the mean by `avg_over_time`, the
/// maximum by `max_over_time` where the column exists; tessera's non-tensor pipes are one family
/// with a `pipe` label. A source without the series leaves the column null (nvidia_gpu_exporter
/// has none).
fn profiling(family: Family) -> Vec<Query> {
    let specs: &[Spec] = match family {
        Family::Tessera => TESSERA_PROFILING,
        Family::Dcgm => DCGM_PROFILING,
        Family::NvidiaSmi => &[],
    };
    specs.iter().map(Spec::query).collect()
}

/// Every column's queries but the profiling ones, in order (a later query for the same table
/// and column is an alternative).
fn base_queries(family: Family) -> Vec<Query> {
    let specs: &[Spec] = match family {
        Family::Tessera => TESSERA,
        Family::Dcgm => DCGM,
        Family::NvidiaSmi => NVIDIA_SMI,
    };
    specs.iter().map(Spec::query).collect()
}

/// How a [`Spec`]'s PromQL is made.
#[derive(Clone, Copy)]
enum Form {
    /// The template as written.
    Template(&'static str),
    /// [`counter_delta`] of a counter.
    CounterDelta(&'static str),
    /// [`event_count`] of a counter, summed without a label.
    EventCount(&'static str, &'static str),
    /// [`value_changes`] of a gauge.
    ValueChanges(&'static str),
}

/// A declared [`Query`]: its table, column, PromQL form and scale.
struct Spec {
    table: Table,
    column: &'static str,
    form: Form,
    scale: f64,
}

impl Spec {
    fn query(&self) -> Query {
        let promql = match self.form {
            Form::Template(t) => t.to_string(),
            Form::CounterDelta(m) => counter_delta(m),
            Form::EventCount(m, label) => event_count(m, label),
            Form::ValueChanges(m) => value_changes(m),
        };
        q(self.table, self.column, promql, self.scale)
    }
}

/// A gauge's template, values as they are.
const fn gauge(table: Table, column: &'static str, promql: &'static str) -> Spec {
    scaled(table, column, promql, 1.0)
}

/// A gauge's template, values scaled.
const fn scaled(table: Table, column: &'static str, promql: &'static str, scale: f64) -> Spec {
    Spec {
        table,
        column,
        form: Form::Template(promql),
        scale,
    }
}

/// Any other form.
const fn form(table: Table, column: &'static str, form: Form, scale: f64) -> Spec {
    Spec {
        table,
        column,
        form,
        scale,
    }
}

/// tessera-exporter's queries (without profiling), in order; a table of one line per query.
#[rustfmt::skip]
const TESSERA: &[Spec] = &[
    gauge(Gpu, "busy_mean", "avg_over_time(tessera_gpu_busy_ratio[{R}])"),
    gauge(Gpu, "busy_max", "max_over_time(tessera_gpu_busy_ratio[{R}])"),
    gauge(Gpu, "sm_active_mean", "avg_over_time(tessera_gpu_sm_active_ratio[{R}])"),
    gauge(Gpu, "sm_active_max", "max_over_time(tessera_gpu_sm_active_ratio[{R}])"),
    gauge(Gpu, "sm_occupancy_mean", "avg_over_time(tessera_gpu_sm_occupancy_ratio[{R}])"),
    gauge(Gpu, "memory_controller_mean", "avg_over_time(tessera_gpu_memory_controller_busy_ratio[{R}])"),
    gauge(Gpu, "memory_used_max_bytes", "max_over_time(tessera_gpu_memory_used_bytes[{R}])"),
    gauge(Gpu, "memory_total_bytes", "max_over_time(tessera_gpu_memory_total_bytes[{R}])"),
    gauge(Gpu, "power_mean_watts", "avg_over_time(tessera_gpu_power_watts[{R}])"),
    gauge(Gpu, "temperature_max_celsius", "max_over_time(tessera_gpu_temperature_celsius[{R}])"),
    gauge(Gpu, "mig_enabled", "max_over_time(tessera_gpu_mig_enabled[{R}])"),
    gauge(Gpu, "samples", "count_over_time(tessera_gpu_memory_used_bytes[{R}])"),
    gauge(Gpu, "status", "max_over_time(tessera_gpu_status[{R}])"),
    gauge(Gpu, "model", "max_over_time(tessera_gpu_info[{R}])"),
    form(Gpu, "energy_delta_joules", Form::CounterDelta("tessera_gpu_energy_joules_total"), 1.0),
    form(Gpu, "xid_count", Form::EventCount("tessera_gpu_xid_errors_total", "xid"), 1.0),
    // Holders by allocation (`holders` module): GPU and MIG rows alike.
    gauge(Gpu, "holders", "max_over_time(tessera_gpu_pod_info[{R}])"),
    gauge(Gpu, "kubelet_up", "max_over_time(tessera_exporter_kubelet_up[{R}])"),
    gauge(Mig, "memory_used_max_bytes", "max_over_time(tessera_mig_memory_used_bytes[{R}])"),
    gauge(Mig, "memory_total_bytes", "max_over_time(tessera_mig_memory_total_bytes[{R}])"),
    gauge(Mig, "sm_active_mean", "avg_over_time(tessera_mig_sm_active_ratio[{R}])"),
    gauge(Mig, "sm_active_max", "max_over_time(tessera_mig_sm_active_ratio[{R}])"),
    gauge(Mig, "samples", "count_over_time(tessera_mig_memory_used_bytes[{R}])"),
    gauge(Mig, "mig_info", "max_over_time(tessera_mig_info[{R}])"),
    gauge(Process, "memory_used_max_bytes", "max_over_time(tessera_process_memory_used_bytes[{R}])"),
    gauge(Process, "sm_mean", "avg_over_time(tessera_process_sm_utilization_ratio[{R}])"),
    gauge(Process, "sm_max", "max_over_time(tessera_process_sm_utilization_ratio[{R}])"),
    gauge(Process, "samples", "count_over_time(tessera_process_memory_used_bytes[{R}])"),
];

/// dcgm-exporter's framebuffer queries, shared by the GPU, MIG and pod rows.
const DCGM_FB_USED: &str = "max_over_time(DCGM_FI_DEV_FB_USED[{R}])";
const DCGM_FB_TOTAL: &str =
    "avg_over_time(DCGM_FI_DEV_FB_USED[{R}]) + avg_over_time(DCGM_FI_DEV_FB_FREE[{R}])";
const DCGM_FB_COUNT: &str = "count_over_time(DCGM_FI_DEV_FB_USED[{R}])";

/// dcgm-exporter's queries (without profiling), in order.
#[rustfmt::skip]
const DCGM: &[Spec] = &[
    scaled(Gpu, "busy_mean", "avg_over_time(DCGM_FI_DEV_GPU_UTIL[{R}])", PCT),
    gauge(Gpu, "busy_mean", "avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[{R}])"),
    scaled(Gpu, "busy_max", "max_over_time(DCGM_FI_DEV_GPU_UTIL[{R}])", PCT),
    gauge(Gpu, "busy_max", "max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[{R}])"),
    gauge(Gpu, "sm_active_mean", "avg_over_time(DCGM_FI_PROF_SM_ACTIVE[{R}])"),
    gauge(Gpu, "sm_active_max", "max_over_time(DCGM_FI_PROF_SM_ACTIVE[{R}])"),
    gauge(Gpu, "sm_occupancy_mean", "avg_over_time(DCGM_FI_PROF_SM_OCCUPANCY[{R}])"),
    scaled(Gpu, "memory_controller_mean", "avg_over_time(DCGM_FI_DEV_MEM_COPY_UTIL[{R}])", PCT),
    scaled(Gpu, "memory_used_max_bytes", DCGM_FB_USED, MIB),
    scaled(Gpu, "memory_total_bytes", DCGM_FB_TOTAL, MIB),
    scaled(Gpu, "memory_total_bytes", "max_over_time(DCGM_FI_DEV_FB_TOTAL[{R}])", MIB),
    gauge(Gpu, "power_mean_watts", "avg_over_time(DCGM_FI_DEV_POWER_USAGE[{R}])"),
    gauge(Gpu, "temperature_max_celsius", "max_over_time(DCGM_FI_DEV_GPU_TEMP[{R}])"),
    gauge(Gpu, "samples", DCGM_FB_COUNT),
    form(Gpu, "energy_delta_joules", Form::CounterDelta("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), MJ),
    form(Gpu, "xid_count", Form::ValueChanges("DCGM_FI_DEV_XID_ERRORS"), 1.0),
    scaled(Mig, "memory_used_max_bytes", DCGM_FB_USED, MIB),
    scaled(Mig, "memory_total_bytes", DCGM_FB_TOTAL, MIB),
    gauge(Mig, "sm_active_mean", "avg_over_time(DCGM_FI_PROF_SM_ACTIVE[{R}])"),
    gauge(Mig, "sm_active_max", "max_over_time(DCGM_FI_PROF_SM_ACTIVE[{R}])"),
    gauge(Mig, "samples", DCGM_FB_COUNT),
    // Pods: the memory of the GPU or MIG instance the pod was given (same queries).
    scaled(Process, "memory_used_max_bytes", DCGM_FB_USED, MIB),
    gauge(Process, "samples", DCGM_FB_COUNT),
    // Holders: the pod labels of the same series (`holders` module).
    gauge(Gpu, "dcgm_pods", DCGM_FB_COUNT),
];

/// nvidia_gpu_exporter's queries, in order.
#[rustfmt::skip]
const NVIDIA_SMI: &[Spec] = &[
    gauge(Gpu, "busy_mean", "avg_over_time(nvidia_smi_utilization_gpu_ratio[{R}])"),
    gauge(Gpu, "busy_max", "max_over_time(nvidia_smi_utilization_gpu_ratio[{R}])"),
    gauge(Gpu, "memory_controller_mean", "avg_over_time(nvidia_smi_utilization_memory_ratio[{R}])"),
    gauge(Gpu, "memory_used_max_bytes", "max_over_time(nvidia_smi_memory_used_bytes[{R}])"),
    gauge(Gpu, "memory_total_bytes", "max_over_time(nvidia_smi_memory_total_bytes[{R}])"),
    gauge(Gpu, "power_mean_watts", "avg_over_time(nvidia_smi_power_draw_watts[{R}])"),
    gauge(Gpu, "temperature_max_celsius", "max_over_time(nvidia_smi_temperature_gpu[{R}])"),
    gauge(Gpu, "samples", "count_over_time(nvidia_smi_memory_used_bytes[{R}])"),
    gauge(Gpu, "model", "max_over_time(nvidia_smi_gpu_info[{R}])"),
    gauge(Gpu, "mig_enabled", "max_over_time(nvidia_smi_mig_mode_current[{R}])"),
    form(Gpu, "energy_delta_joules", Form::CounterDelta("nvidia_smi_energy_joules_total"), 1.0),
    form(Gpu, "xid_count", Form::EventCount("nvidia_smi_xid_errors_total", "xid"), 1.0),
    // MIG instances (NVML backend, per GPU instance; its docs/METRICS.md).
    gauge(Mig, "memory_used_max_bytes", "max_over_time(nvidia_smi_mig_memory_used_bytes[{R}])"),
    gauge(Mig, "memory_total_bytes", "max_over_time(nvidia_smi_mig_memory_total_bytes[{R}])"),
    gauge(Mig, "sm_active_mean", "avg_over_time(nvidia_smi_mig_sm_activity_ratio[{R}])"),
    gauge(Mig, "sm_active_max", "max_over_time(nvidia_smi_mig_sm_activity_ratio[{R}])"),
    gauge(Mig, "samples", "count_over_time(nvidia_smi_mig_memory_used_bytes[{R}])"),
    gauge(Mig, "mig_info", "max_over_time(nvidia_smi_mig_info[{R}])"),
    gauge(Process, "memory_used_max_bytes", "max_over_time(nvidia_smi_compute_app_used_memory_bytes[{R}])"),
    gauge(Process, "samples", "count_over_time(nvidia_smi_compute_app_used_memory_bytes[{R}])"),
];

/// tessera-exporter's profiling queries.
#[rustfmt::skip]
const TESSERA_PROFILING: &[Spec] = &[
    gauge(Gpu, "tensor_active_mean", "avg_over_time(tessera_gpu_tensor_active_ratio[{R}])"),
    gauge(Gpu, "tensor_active_max", "max_over_time(tessera_gpu_tensor_active_ratio[{R}])"),
    gauge(Gpu, "dram_active_mean", "avg_over_time(tessera_gpu_dram_active_ratio[{R}])"),
    gauge(Gpu, "fp64_active_mean", "avg_over_time(tessera_gpu_pipe_active_ratio{pipe=\"fp64\"}[{R}])"),
    gauge(Gpu, "fp32_active_mean", "avg_over_time(tessera_gpu_pipe_active_ratio{pipe=\"fp32\"}[{R}])"),
    gauge(Gpu, "fp16_active_mean", "avg_over_time(tessera_gpu_pipe_active_ratio{pipe=\"fp16\"}[{R}])"),
    gauge(Gpu, "integer_active_mean", "avg_over_time(tessera_gpu_pipe_active_ratio{pipe=\"integer\"}[{R}])"),
    gauge(Gpu, "nvlink_tx_mean_bytes_per_second", "avg_over_time(tessera_gpu_nvlink_transmit_bytes_per_second[{R}])"),
    gauge(Gpu, "nvlink_rx_mean_bytes_per_second", "avg_over_time(tessera_gpu_nvlink_receive_bytes_per_second[{R}])"),
    gauge(Mig, "tensor_active_mean", "avg_over_time(tessera_mig_tensor_active_ratio[{R}])"),
    gauge(Mig, "dram_active_mean", "avg_over_time(tessera_mig_dram_active_ratio[{R}])"),
];

/// The GPU's and the MIG instances' series share names (`GPU_I_ID` tells them apart), so one
/// query feeds both tables.
#[rustfmt::skip]
const DCGM_PROFILING: &[Spec] = &[
    gauge(Gpu, "tensor_active_mean", "avg_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE[{R}])"),
    gauge(Gpu, "tensor_active_max", "max_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE[{R}])"),
    gauge(Gpu, "dram_active_mean", "avg_over_time(DCGM_FI_PROF_DRAM_ACTIVE[{R}])"),
    gauge(Gpu, "fp64_active_mean", "avg_over_time(DCGM_FI_PROF_PIPE_FP64_ACTIVE[{R}])"),
    gauge(Gpu, "fp32_active_mean", "avg_over_time(DCGM_FI_PROF_PIPE_FP32_ACTIVE[{R}])"),
    gauge(Gpu, "fp16_active_mean", "avg_over_time(DCGM_FI_PROF_PIPE_FP16_ACTIVE[{R}])"),
    gauge(Gpu, "integer_active_mean", "avg_over_time(DCGM_FI_PROF_PIPE_INT_ACTIVE[{R}])"),
    gauge(Gpu, "nvlink_tx_mean_bytes_per_second", "avg_over_time(DCGM_FI_PROF_NVLINK_TX_BYTES[{R}])"),
    gauge(Gpu, "nvlink_rx_mean_bytes_per_second", "avg_over_time(DCGM_FI_PROF_NVLINK_RX_BYTES[{R}])"),
    gauge(Mig, "tensor_active_mean", "avg_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE[{R}])"),
    gauge(Mig, "dram_active_mean", "avg_over_time(DCGM_FI_PROF_DRAM_ACTIVE[{R}])"),
];

/// The metric whose `count_over_time` gives each table's raw samples (present on every series
/// of the table, MIG mode included).
pub(super) fn sample_metrics(family: Family) -> &'static [&'static str] {
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
