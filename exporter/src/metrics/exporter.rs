//! The exporter's own metrics: build info, backend health and re-initialisations, per-GPU
//! collection success, sample duration and timestamp, NVML errors by kind, missed sampler ticks
//! and truncated process series; the history writer's rows, errors and dropped samples; the
//! kubelet client's state and failed calls.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::{Collector, Context, counter_family, family, process, single, single_counter};
use crate::history_thread::HistoryStats;
use crate::kubelet::KubeletStats;
use tessera_core::model::GpuStatus;

/// Self-metrics.
pub struct ExporterCollector;

impl Collector for ExporterCollector {
    fn name(&self) -> &'static str {
        "exporter"
    }

    fn collect(&self, ctx: &Context<'_>, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        backend(ctx, enc)?;
        gpus(ctx, enc)?;
        if let Some(history) = ctx.options.history.as_deref() {
            history_writer(history, enc)?;
        }
        if let Some(kubelet) = ctx.options.kubelet.as_deref() {
            kubelet_client(kubelet, enc)?;
        }
        let snap = ctx.snapshot;
        if let Some(sample) = &snap.sample
            && ctx.options.processes
        {
            let (_, truncated) = process::selected(sample, ctx.options.processes_max);
            single(
                enc,
                "tessera_exporter_processes_truncated",
                "Processes left out of the per-process metrics by --collector.processes.max in the last sample.",
                None,
                truncated as i64,
            )?;
        }
        Ok(())
    }
}

/// Build info, the backend's health, (re)initialisations and errors, missed sampler ticks, and the
/// last sample's duration and timestamp.
fn backend(ctx: &Context<'_>, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let snap = ctx.snapshot;
    family(
        enc,
        "tessera_exporter_build_info",
        "Version of tessera-exporter and the backend in use (value is always 1).",
        None,
        vec![(
            [
                ("version", ctx.options.version.as_str()),
                ("backend", snap.state.backend),
            ],
            1i64,
        )],
    )?;
    single(
        enc,
        "tessera_exporter_backend_up",
        "1 when the last attempt to sample the backend (NVML or simulator) succeeded.",
        None,
        snap.state.healthy as i64,
    )?;
    single_counter(
        enc,
        "tessera_exporter_backend_initializations",
        "Successful (re)initialisations of the backend; more than 1 means NVML was re-initialised after a driver-level error.",
        None,
        snap.state.initialisations,
    )?;
    single_counter(
        enc,
        "tessera_exporter_backend_errors",
        "Node-level backend errors (NVML unavailable or failing for every GPU).",
        None,
        snap.state.errors_total,
    )?;
    single_counter(
        enc,
        "tessera_exporter_sampler_missed_ticks",
        "Sampling ticks skipped because a sample took longer than --sample.interval.",
        None,
        snap.missed_ticks,
    )?;
    single(
        enc,
        "tessera_exporter_sample_duration",
        "Time the last sample took.",
        Some(Unit::Seconds),
        snap.duration.as_secs_f64(),
    )?;
    if let Some(sample) = &snap.sample {
        single(
            enc,
            "tessera_exporter_last_sample_timestamp",
            "When the last sample was taken (unix time; virtual time on the simulator).",
            Some(Unit::Seconds),
            sample.timestamp_ms as f64 / 1000.0,
        )?;
    }
    Ok(())
}

/// Each GPU's collection success in the last sample, and the failed NVML reads since start.
fn gpus(ctx: &Context<'_>, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
    let snap = ctx.snapshot;
    if let Some(inventory) = snap.inventory.as_deref() {
        let idx: Vec<String> = inventory.gpus.iter().map(|g| g.index.to_string()).collect();
        family(
            enc,
            "tessera_exporter_gpu_collection_success",
            "1 when every read of the GPU in the last sample succeeded or was not supported.",
            None,
            inventory
                .gpus
                .iter()
                .zip(&idx)
                .map(|(g, i)| {
                    let ok = snap.sample.as_ref().is_some_and(|s| {
                        s.gpus
                            .iter()
                            .any(|x| x.index == g.index && x.status == GpuStatus::Ok)
                    });
                    ([("gpu", i.as_str()), ("uuid", g.uuid.as_str())], ok as i64)
                })
                .collect(),
        )?;
    }
    let errors: Vec<_> = snap
        .totals
        .field_errors
        .iter()
        .map(|(((gpu, uuid), field, kind), n)| {
            (
                [
                    ("gpu", gpu.to_string()),
                    ("uuid", uuid.clone()),
                    ("field", field.clone()),
                    ("kind", kind.clone()),
                ],
                *n,
            )
        })
        .collect();
    counter_family(
        enc,
        "tessera_exporter_nvml_errors",
        "Failed NVML reads since start, by GPU, field and error kind (NotSupported is not an error).",
        None,
        errors,
    )?;
    Ok(())
}

/// The history writer's rows by table, write errors, dropped samples, lost and duplicate rows.
fn history_writer(history: &HistoryStats, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
    use std::sync::atomic::Ordering::Relaxed;
    use tessera_core::history::Table;
    counter_family(
        enc,
        "tessera_exporter_history_rows_written",
        "Rows written to the history files (--history.dir), by table.",
        None,
        Table::ALL
            .iter()
            .map(|t| ([("table", t.name().to_string())], history.rows(*t)))
            .collect(),
    )?;
    single_counter(
        enc,
        "tessera_exporter_history_write_errors",
        "Failed history writes (read-only or full disk, ...); the exporter keeps serving.",
        None,
        history.write_errors.load(Relaxed),
    )?;
    single_counter(
        enc,
        "tessera_exporter_history_dropped_samples",
        "Samples the history writer dropped because it was behind (its queue was full).",
        None,
        history.dropped_samples.load(Relaxed),
    )?;
    single_counter(
        enc,
        "tessera_exporter_history_lost_rows",
        "History rows that could not be written (full disk, folder not open), all tables; every lost batch is also logged.",
        None,
        history.lost_rows.load(Relaxed),
    )?;
    single_counter(
        enc,
        "tessera_exporter_history_duplicate_rows",
        "History rows dropped because their table already held rows at or after their interval (a clock that went back or restarted).",
        None,
        history.duplicate_rows.load(Relaxed),
    )?;
    Ok(())
}

/// The kubelet client's state and failed calls.
fn kubelet_client(kubelet: &KubeletStats, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
    use std::sync::atomic::Ordering::Relaxed;
    single(
        enc,
        "tessera_exporter_kubelet_up",
        "1 when the last List call to the kubelet's pod-resources API (--kubelet.pod-resources-socket) succeeded.",
        None,
        kubelet.up.load(Relaxed) as i64,
    )?;
    single_counter(
        enc,
        "tessera_exporter_kubelet_errors",
        "Failed List calls to the kubelet's pod-resources API (no socket, refused, error status, timeout, answer over 16 MiB); series carry no pod names until one succeeds.",
        None,
        kubelet.errors.load(Relaxed),
    )?;
    Ok(())
}
