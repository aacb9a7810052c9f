//! What the `prometheus:` source asks for: the exporter [`Family`] found on the server (its
//! marker metrics and the advisor's recorded series for it), the PromQL template and scale of
//! every canonical column per family ([`queries`]), the metric that counts each table's raw
//! samples, and the evaluation chunks of a range ([`chunks`]).
//!
//! The counter, event and value-change templates come from [`crate::ingest::promeval`], which
//! evaluates the same forms over raw samples. This module sends nothing and decides nothing
//! about which series a server has (that is `discovery` and `recorded`).

use crate::ingest::promeval::{counter_delta, event_count, value_changes};
use crate::ingest::schema::Table;

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
    use Table::*;
    let spec: &[(Table, &'static str, &str)] = match family {
        Family::Tessera => &[
            (
                Gpu,
                "tensor_active_mean",
                "avg_over_time(tessera_gpu_tensor_active_ratio[{R}])",
            ),
            (
                Gpu,
                "tensor_active_max",
                "max_over_time(tessera_gpu_tensor_active_ratio[{R}])",
            ),
            (
                Gpu,
                "dram_active_mean",
                "avg_over_time(tessera_gpu_dram_active_ratio[{R}])",
            ),
            (
                Gpu,
                "fp64_active_mean",
                "avg_over_time(tessera_gpu_pipe_active_ratio{pipe=\"fp64\"}[{R}])",
            ),
            (
                Gpu,
                "fp32_active_mean",
                "avg_over_time(tessera_gpu_pipe_active_ratio{pipe=\"fp32\"}[{R}])",
            ),
            (
                Gpu,
                "fp16_active_mean",
                "avg_over_time(tessera_gpu_pipe_active_ratio{pipe=\"fp16\"}[{R}])",
            ),
            (
                Gpu,
                "integer_active_mean",
                "avg_over_time(tessera_gpu_pipe_active_ratio{pipe=\"integer\"}[{R}])",
            ),
            (
                Gpu,
                "nvlink_tx_mean_bytes_per_second",
                "avg_over_time(tessera_gpu_nvlink_transmit_bytes_per_second[{R}])",
            ),
            (
                Gpu,
                "nvlink_rx_mean_bytes_per_second",
                "avg_over_time(tessera_gpu_nvlink_receive_bytes_per_second[{R}])",
            ),
            (
                Mig,
                "tensor_active_mean",
                "avg_over_time(tessera_mig_tensor_active_ratio[{R}])",
            ),
            (
                Mig,
                "dram_active_mean",
                "avg_over_time(tessera_mig_dram_active_ratio[{R}])",
            ),
        ],
        // The GPU's and the MIG instances' series share names (`GPU_I_ID` tells them apart), so
        // one query feeds both tables.
        Family::Dcgm => &[
            (
                Gpu,
                "tensor_active_mean",
                "avg_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE[{R}])",
            ),
            (
                Gpu,
                "tensor_active_max",
                "max_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE[{R}])",
            ),
            (
                Gpu,
                "dram_active_mean",
                "avg_over_time(DCGM_FI_PROF_DRAM_ACTIVE[{R}])",
            ),
            (
                Gpu,
                "fp64_active_mean",
                "avg_over_time(DCGM_FI_PROF_PIPE_FP64_ACTIVE[{R}])",
            ),
            (
                Gpu,
                "fp32_active_mean",
                "avg_over_time(DCGM_FI_PROF_PIPE_FP32_ACTIVE[{R}])",
            ),
            (
                Gpu,
                "fp16_active_mean",
                "avg_over_time(DCGM_FI_PROF_PIPE_FP16_ACTIVE[{R}])",
            ),
            (
                Gpu,
                "integer_active_mean",
                "avg_over_time(DCGM_FI_PROF_PIPE_INT_ACTIVE[{R}])",
            ),
            (
                Gpu,
                "nvlink_tx_mean_bytes_per_second",
                "avg_over_time(DCGM_FI_PROF_NVLINK_TX_BYTES[{R}])",
            ),
            (
                Gpu,
                "nvlink_rx_mean_bytes_per_second",
                "avg_over_time(DCGM_FI_PROF_NVLINK_RX_BYTES[{R}])",
            ),
            (
                Mig,
                "tensor_active_mean",
                "avg_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE[{R}])",
            ),
            (
                Mig,
                "dram_active_mean",
                "avg_over_time(DCGM_FI_PROF_DRAM_ACTIVE[{R}])",
            ),
        ],
        Family::NvidiaSmi => &[],
    };
    spec.iter().map(|&(t, c, p)| q(t, c, p, 1.0)).collect()
}

fn base_queries(family: Family) -> Vec<Query> {
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
