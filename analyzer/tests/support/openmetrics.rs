//! Shared by the tests that backfill a real Prometheus with simulated history
//! (`prometheus_rules.rs`, `prometheus_partitions.rs`): one simulated day read back as frames,
//! and those frames written as tessera-exporter's OpenMetrics (each row as two samples whose mean
//! and max are the row's, the row's node as the scrape target).

use std::fmt::Write as _;
use std::path::Path;

use polars::prelude::*;
use tessera::ingest::{self, IngestOptions, Source};

/// One day, in ms.
pub const DAY_MS: i64 = 86_400_000;

/// One simulated day of the scenario `toml` (named `name` in errors), written as history under
/// `dir/history` and read back: the gpu, mig and process frames and the day's start (unix ms).
pub fn simulate(dir: &Path, toml: &str, name: &str) -> (DataFrame, DataFrame, DataFrame, i64) {
    simulate_days(dir, toml, name, 1)
}

/// As [`simulate`], over `days` days.
pub fn simulate_days(
    dir: &Path,
    toml: &str,
    name: &str,
    days: u32,
) -> (DataFrame, DataFrame, DataFrame, i64) {
    let scenario = tessera_core::sim::Scenario::from_toml(toml, name).expect("scenario");
    let hist = dir.join("history");
    tessera_core::simulate::simulate(&scenario, days, &hist, 5_000, 10_000).expect("simulate");
    let since = scenario.start.timestamp_millis();
    let (frames, _) = ingest::ingest(
        &[Source::history(hist.to_string_lossy().into_owned())],
        &IngestOptions {
            since: Some(since),
            until: Some(since + i64::from(days) * DAY_MS + 1),
            ..IngestOptions::default()
        },
    )
    .expect("ingest history");
    let collect = |lf: LazyFrame| lf.collect().expect("collect");
    (
        collect(frames.gpu),
        collect(frames.mig),
        collect(frames.process),
        since,
    )
}

/// The values of a column as f64 (null → None).
pub fn f64s(df: &DataFrame, c: &str) -> Vec<Option<f64>> {
    df.column(c)
        .expect("column")
        .cast(&DataType::Float64)
        .expect("cast")
        .f64()
        .expect("f64")
        .iter()
        .collect()
}

/// The values of a column as strings (cast; null → None).
pub fn strs(df: &DataFrame, c: &str) -> Vec<Option<String>> {
    df.column(c)
        .expect("column")
        .cast(&DataType::String)
        .expect("cast")
        .str()
        .expect("str")
        .iter()
        .map(|s| s.map(str::to_string))
        .collect()
}

/// Appends the gauge `name` of one table: per row two samples, at `ts − 5 s` and `ts`, whose
/// mean and max are the row's, labelled with the row's node as the scrape target.
pub fn gauge(
    out: &mut String,
    name: &str,
    df: &DataFrame,
    label_cols: &[&str],
    mean: &str,
    max: &str,
) {
    let _ = writeln!(out, "# TYPE {name} gauge");
    let labels: Vec<(&str, Vec<Option<String>>)> =
        label_cols.iter().map(|c| (*c, strs(df, c))).collect();
    let nodes = strs(df, "node");
    let (mean, max, ts) = (f64s(df, mean), f64s(df, max), f64s(df, "ts"));
    for i in 0..df.height() {
        let (Some(a), Some(b), Some(t), Some(node)) = (mean[i], max[i], ts[i], &nodes[i]) else {
            continue;
        };
        let mut l = format!("instance=\"{node}:19435\"");
        for (c, v) in &labels {
            if let Some(v) = &v[i] {
                let _ = write!(l, ",{c}=\"{v}\"");
            }
        }
        let low = (2.0 * a - b).clamp(0.0, b);
        let _ = writeln!(out, "{name}{{{l}}} {low} {:.3}", (t - 5_000.0) / 1000.0);
        let _ = writeln!(out, "{name}{{{l}}} {b} {:.3}", t / 1000.0);
    }
}

/// The frames as tessera-exporter's OpenMetrics exposition, for `promtool tsdb
/// create-blocks-from openmetrics`.
pub fn openmetrics(gpu: &DataFrame, mig: &DataFrame, process: &DataFrame) -> String {
    openmetrics_labelled(gpu, mig, process, &[])
}

/// [`openmetrics`] with more of the process rows' columns as labels of the process series
/// (`slurm_job_id`, as tessera-exporter labels a Slurm job's processes).
pub fn openmetrics_labelled(
    gpu: &DataFrame,
    mig: &DataFrame,
    process: &DataFrame,
    process_labels: &[&str],
) -> String {
    let mut s = String::new();
    let g = &["gpu", "uuid"];
    gauge(
        &mut s,
        "tessera_gpu_busy_ratio",
        gpu,
        g,
        "busy_mean",
        "busy_max",
    );
    gauge(
        &mut s,
        "tessera_gpu_sm_active_ratio",
        gpu,
        g,
        "sm_active_mean",
        "sm_active_max",
    );
    for (name, col) in [
        ("tessera_gpu_memory_used_bytes", "memory_used_max_bytes"),
        ("tessera_gpu_memory_total_bytes", "memory_total_bytes"),
        ("tessera_gpu_power_watts", "power_mean_watts"),
    ] {
        gauge(&mut s, name, gpu, g, col, col);
    }
    let m = &["gpu", "uuid", "gpu_instance", "compute_instance", "profile"];
    gauge(
        &mut s,
        "tessera_mig_sm_active_ratio",
        mig,
        m,
        "sm_active_mean",
        "sm_active_max",
    );
    for (name, col) in [
        ("tessera_mig_memory_used_bytes", "memory_used_max_bytes"),
        ("tessera_mig_memory_total_bytes", "memory_total_bytes"),
    ] {
        gauge(&mut s, name, mig, m, col, col);
    }
    let mut p = vec![
        "gpu",
        "uuid",
        "gpu_instance",
        "compute_instance",
        "pid",
        "process",
        "namespace",
        "pod",
    ];
    p.extend_from_slice(process_labels);
    let p = &p;
    gauge(
        &mut s,
        "tessera_process_sm_utilization_ratio",
        process,
        p,
        "sm_mean",
        "sm_max",
    );
    gauge(
        &mut s,
        "tessera_process_memory_used_bytes",
        process,
        p,
        "memory_used_max_bytes",
        "memory_used_max_bytes",
    );
    s.push_str("# EOF\n");
    s
}

/// [`openmetrics`] with the frames' holders as tessera-exporter's kubelet series: per row of a
/// device that names a pod holder (`holder_pod`), `tessera_gpu_pod_info` at the row's two sample
/// times (GPU rows of GPUs without MIG rows, with empty `gpu_instance`/`compute_instance`; MIG
/// rows with theirs), and `tessera_exporter_kubelet_up` 1 on each node of `kubelet_nodes` at its
/// GPU 0's row times; and `tessera_mig_info` per MIG row (profile id, placement, MIG UUID).
/// Slurm jobs' holders have no such series.
pub fn openmetrics_with_holders(
    gpu: &DataFrame,
    mig: &DataFrame,
    process: &DataFrame,
    kubelet_nodes: &[&str],
) -> String {
    let mut s = openmetrics(gpu, mig, process);
    s.truncate(s.len() - "# EOF\n".len());
    let _ = writeln!(s, "# TYPE tessera_gpu_pod_info gauge");
    let mig_uuids: std::collections::BTreeSet<Option<String>> =
        strs(mig, "uuid").into_iter().collect();
    for (df, is_mig) in [(gpu, false), (mig, true)] {
        let (node, g, uuid, ts) = (
            strs(df, "node"),
            strs(df, "gpu"),
            strs(df, "uuid"),
            f64s(df, "ts"),
        );
        let (ns, pod) = (strs(df, "holder_namespace"), strs(df, "holder_pod"));
        let (gi, ci) = if is_mig {
            (strs(df, "gpu_instance"), strs(df, "compute_instance"))
        } else {
            (vec![None; df.height()], vec![None; df.height()])
        };
        for i in 0..df.height() {
            let (Some(n), Some(p), Some(t)) = (&node[i], &pod[i], ts[i]) else {
                continue;
            };
            if !is_mig && mig_uuids.contains(&uuid[i]) {
                continue;
            }
            let v = |o: &Option<String>| o.clone().unwrap_or_default();
            let l = format!(
                "instance=\"{n}:19435\",gpu=\"{}\",uuid=\"{}\",gpu_instance=\"{}\",\
                 compute_instance=\"{}\",device=\"{}\",resource=\"nvidia.com/gpu\",\
                 namespace=\"{}\",pod=\"{p}\",container=\"main\"",
                v(&g[i]),
                v(&uuid[i]),
                v(&gi[i]),
                v(&ci[i]),
                v(&uuid[i]),
                v(&ns[i]),
            );
            for at in [t - 5_000.0, t] {
                let _ = writeln!(s, "tessera_gpu_pod_info{{{l}}} 1 {:.3}", at / 1000.0);
            }
        }
    }
    // The MIG instances' identity (the allocated detector tells instances apart by mig_uuid).
    let labels = [
        "gpu",
        "uuid",
        "gpu_instance",
        "compute_instance",
        "profile",
        "profile_id",
        "placement_start",
        "placement_size",
        "mig_uuid",
    ];
    let one = Column::new("one".into(), vec![1.0f64; mig.height()]);
    let mut info = mig.clone();
    info.with_column(one).expect("column");
    gauge(&mut s, "tessera_mig_info", &info, &labels, "one", "one");
    let _ = writeln!(s, "# TYPE tessera_exporter_kubelet_up gauge");
    let (node, g, ts) = (strs(gpu, "node"), strs(gpu, "gpu"), f64s(gpu, "ts"));
    for i in 0..gpu.height() {
        let (Some(n), Some(t)) = (&node[i], ts[i]) else {
            continue;
        };
        if g[i].as_deref() == Some("0") && kubelet_nodes.contains(&n.as_str()) {
            for at in [t - 5_000.0, t] {
                let _ = writeln!(
                    s,
                    "tessera_exporter_kubelet_up{{instance=\"{n}:19435\"}} 1 {:.3}",
                    at / 1000.0
                );
            }
        }
    }
    s.push_str("# EOF\n");
    s
}

pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A counter series written into `s` as OpenMetrics (an OpenMetrics counter family for a
/// `_total` name, else an untyped family), over `[0, len_ms]` after `since` (unix ms): sampled every
/// `every_ms`, each sample's time moved by `jitter(k)` ms (k: the sample's number), no sample
/// inside any of `gaps` (`[from, to)` ms after `since`: missed scrapes), each value
/// `count(t)` (the planted cumulative count at `t` ms after `since`). Returns the samples
/// written, `(t, value)`, so a test can compute its truth from them.
pub fn sampled_counter(
    s: &mut String,
    (name, labels): (&str, &str),
    (since, len_ms, every_ms): (i64, i64, i64),
    jitter: &dyn Fn(i64) -> i64,
    gaps: &[(i64, i64)],
    count: &dyn Fn(i64) -> f64,
) -> Vec<(i64, f64)> {
    match name.strip_suffix("_total") {
        Some(family) => writeln!(s, "# TYPE {family} counter"),
        None => writeln!(s, "# TYPE {name} unknown"),
    }
    .unwrap();
    let mut out = Vec::new();
    let mut last = i64::MIN;
    for k in 0..=(len_ms / every_ms) {
        let t = (k * every_ms + jitter(k)).clamp(0, len_ms);
        if t <= last || gaps.iter().any(|(a, b)| t >= *a && t < *b) {
            continue;
        }
        last = t;
        let v = count(t);
        let _ = writeln!(
            s,
            "{name}{{{labels}}} {v} {:.3}",
            (since + t) as f64 / 1000.0
        );
        out.push((t, v));
    }
    out
}
