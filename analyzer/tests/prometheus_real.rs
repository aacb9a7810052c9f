//! The `prometheus:` source against a real Prometheus (Debian's 2.42; `/usr/bin/prometheus` and
//! `/usr/bin/promtool` are required — the test fails, not skips, without them; `scripts/test.sh`
//! installs them).
//!
//! Two days of a tiny scenario are simulated into history with 5-second samples (two per 10-s
//! row). The OpenMetrics text is written *from the history rows*: per row two samples, at
//! `ts - 5 s` and `ts`, chosen so that their mean and max are the row's (`min = 2·mean − max`,
//! exact for two samples); memory, temperature and power repeat the row's max or mean. So it is
//! a round trip history → TSDB → PromQL → frames, not an independent second measurement.
//! `promtool tsdb create-blocks-from openmetrics` builds blocks, Prometheus serves them, and the
//! frames from `prometheus:URL` and `history:DIR` for the same range must agree per GPU and ts.

use std::path::{Path, PathBuf};

use polars::prelude::*;
use tessera::ingest::prometheus::Api;
use tessera::ingest::{self, IngestOptions, Source};

use crate::support::openmetrics::{f64s, strs};
use crate::support::prometheus as prom;
use prom::serve;

const SCENARIO: &str = r#"
name = "tiny"
seed = 7
start = "2026-11-02T00:00:00Z"
utc_offset_hours = 0
driver_version = "550.54.15"
cuda_version = "12.4"

[[nodes]]
name = "gpu-node-1"
gpus = [{ model = "H100-80GB", count = 2 }]

[[workloads]]
name = "chat-api"
kind = "inference"
node = "gpu-node-1"
gpu = 0
memory_gib = 38.0
peak = 0.72
base = 0.06
namespace = "serving"
pod = "chat-api-7d9f8c-x2k4p"

[[workloads]]
name = "train"
kind = "training"
node = "gpu-node-1"
gpu = 1
memory_gib = 70.0
namespace = "research"
pod = "train-0"
"#;

const DAYS: u32 = 2;

/// Simulates the scenario into `dir/history` and returns the history gpu frame and the range.
fn simulate(dir: &Path) -> (PathBuf, DataFrame, i64, i64) {
    let scenario = tessera_core::sim::Scenario::from_toml(SCENARIO, "tiny").expect("scenario");
    let hist = dir.join("history");
    tessera_core::simulate::simulate(&scenario, DAYS, &hist, 5_000, 10_000).expect("simulate");
    let since = scenario.start.timestamp_millis();
    let until = since + i64::from(DAYS) * 86_400_000 + 1;
    let (frames, _) = ingest::ingest(
        &[Source::history(hist.to_string_lossy().into_owned())],
        &range(since, until),
    )
    .expect("ingest history");
    let gpu = frames
        .gpu
        .sort(["uuid", "ts"], SortMultipleOptions::default())
        .collect()
        .expect("collect");
    (hist, gpu, since, until)
}

fn range(since: i64, until: i64) -> IngestOptions<'static> {
    IngestOptions {
        since: Some(since),
        until: Some(until),
        ..IngestOptions::default()
    }
}

/// The Prometheus side of the round trip: two samples per 10 s history row, read back into
/// 10 s rows (an explicit interval coarser than the 5 s samples).
fn history_rows(since: i64, until: i64) -> IngestOptions<'static> {
    IngestOptions {
        interval_ms: Some(10_000),
        ..range(since, until)
    }
}

/// Per row of `gpu`: (uuid, gpu, model, ts, field → value).
struct Row {
    uuid: String,
    gpu: String,
    model: String,
    ts: i64,
    busy: Option<(f64, f64)>,
    sm: Option<(f64, f64)>,
    mem: Option<f64>,
    total: Option<f64>,
    power: Option<f64>,
    temp: Option<f64>,
    energy: Option<f64>,
    xid: Option<f64>,
    /// GPM (history version 2): tensor mean and max, DRAM, the FP64/FP32/FP16/integer pipes,
    /// NVLink transmit and receive.
    tensor: Option<(f64, f64)>,
    dram: Option<f64>,
    pipes: [Option<f64>; 4],
    nvlink: [Option<f64>; 2],
    /// The energy counter at `ts` (history: running sum of `energy_delta_joules`).
    energy_total: f64,
}

fn rows(gpu: &DataFrame) -> Vec<Row> {
    let uuid = strs(gpu, "uuid");
    let model = strs(gpu, "model");
    let idx = f64s(gpu, "gpu");
    let ts = f64s(gpu, "ts");
    let (bm, bx) = (f64s(gpu, "busy_mean"), f64s(gpu, "busy_max"));
    let (sm, sx) = (f64s(gpu, "sm_active_mean"), f64s(gpu, "sm_active_max"));
    let mem = f64s(gpu, "memory_used_max_bytes");
    let mem_total = f64s(gpu, "memory_total_bytes");
    let power = f64s(gpu, "power_mean_watts");
    let temp = f64s(gpu, "temperature_max_celsius");
    let energy = f64s(gpu, "energy_delta_joules");
    let xid = f64s(gpu, "xid_count");
    let (tm, tx) = (
        f64s(gpu, "tensor_active_mean"),
        f64s(gpu, "tensor_active_max"),
    );
    let dram = f64s(gpu, "dram_active_mean");
    let pipes = PIPES.map(|(_, c, _)| f64s(gpu, c));
    let nvlink = NVLINK.map(|(_, c, _)| f64s(gpu, c));
    let mut energy_total = 0.0;
    let mut last_uuid: Option<String> = None;
    (0..gpu.height())
        .map(|i| Row {
            energy_total: {
                if last_uuid != uuid[i] {
                    // Each GPU's counter starts anew (at an arbitrary offset, like NVML's).
                    energy_total = 1_000_000.0;
                    last_uuid = uuid[i].clone();
                }
                energy_total += energy[i].unwrap_or(0.0);
                energy_total
            },
            uuid: uuid[i].clone().unwrap_or_default(),
            gpu: format!("{}", idx[i].unwrap_or(0.0) as u32),
            model: model[i].clone().unwrap_or_default(),
            ts: ts[i].unwrap_or(0.0) as i64,
            busy: bm[i].zip(bx[i]),
            sm: sm[i].zip(sx[i]),
            mem: mem[i],
            total: mem_total[i],
            power: power[i],
            temp: temp[i],
            energy: energy[i],
            xid: xid[i],
            tensor: tm[i].zip(tx[i]),
            dram: dram[i],
            pipes: std::array::from_fn(|k| pipes[k][i]),
            nvlink: std::array::from_fn(|k| nvlink[k][i]),
        })
        .collect()
}

/// The non-tensor pipes: tessera's `pipe` label, the history column, dcgm-exporter's field.
const PIPES: [(&str, &str, &str); 4] = [
    ("fp64", "fp64_active_mean", "DCGM_FI_PROF_PIPE_FP64_ACTIVE"),
    ("fp32", "fp32_active_mean", "DCGM_FI_PROF_PIPE_FP32_ACTIVE"),
    ("fp16", "fp16_active_mean", "DCGM_FI_PROF_PIPE_FP16_ACTIVE"),
    (
        "integer",
        "integer_active_mean",
        "DCGM_FI_PROF_PIPE_INT_ACTIVE",
    ),
];

/// NVLink: tessera's family, the history column, dcgm-exporter's field.
const NVLINK: [(&str, &str, &str); 2] = [
    (
        "tessera_gpu_nvlink_transmit_bytes_per_second",
        "nvlink_tx_mean_bytes_per_second",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
    ),
    (
        "tessera_gpu_nvlink_receive_bytes_per_second",
        "nvlink_rx_mean_bytes_per_second",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
    ),
];

/// Appends tessera's pipe family: one `# TYPE`, then each pipe's series (label `pipe`), two
/// samples per row.
fn pipe_family(out: &mut String, rows: &[Row], labels: impl Fn(&Row) -> String) {
    use std::fmt::Write as _;
    let name = "tessera_gpu_pipe_active_ratio";
    let _ = writeln!(out, "# TYPE {name} gauge");
    for (k, (pipe, _, _)) in PIPES.iter().enumerate() {
        for r in rows {
            if let Some(v) = r.pipes[k] {
                let l = labels(r);
                for t in [r.ts - 5_000, r.ts] {
                    let _ = writeln!(
                        out,
                        "{name}{{{l},pipe=\"{pipe}\"}} {v} {:.3}",
                        t as f64 / 1000.0
                    );
                }
            }
        }
    }
}

/// Appends one metric family: `# TYPE`, then two samples per row from `pick`.
fn family(
    out: &mut String,
    name: &str,
    rows: &[Row],
    labels: impl Fn(&Row) -> String,
    pick: impl Fn(&Row) -> Option<(f64, f64)>,
) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "# TYPE {name} gauge");
    for r in rows {
        if let Some((a, b)) = pick(r) {
            let l = labels(r);
            let _ = writeln!(
                out,
                "{name}{{{l}}} {a} {:.3}",
                (r.ts - 5_000) as f64 / 1000.0
            );
            let _ = writeln!(out, "{name}{{{l}}} {b} {:.3}", r.ts as f64 / 1000.0);
        }
    }
}

/// Appends one counter: with `suffix` as OpenMetrics has it (`# TYPE name counter`, samples
/// `name_total`), else under its bare name as Prometheus stores a 0.0.4-format counter without
/// `_total` (dcgm-exporter's). Per row, `value` is (the counter at `ts`, the row's increase); the
/// sample at `ts − 5 s` lies half way from the previous row's value, or the increase below it for
/// a GPU's first row (the history counts the first interval from its first sample).
fn counter(
    out: &mut String,
    (name, suffix): (&str, bool),
    rows: &[Row],
    labels: impl Fn(&Row) -> String,
    value: impl Fn(&Row) -> (f64, f64),
) {
    use std::fmt::Write as _;
    let series = if suffix {
        let _ = writeln!(out, "# TYPE {name} counter");
        format!("{name}_total")
    } else {
        let _ = writeln!(out, "# TYPE {name} gauge");
        name.to_string()
    };
    let mut prev: Option<(&str, f64)> = None;
    for r in rows {
        let l = labels(r);
        let (v, delta) = value(r);
        let before = match prev {
            Some((u, p)) if u == r.uuid => (p + v) / 2.0,
            _ => v - delta,
        };
        let _ = writeln!(
            out,
            "{series}{{{l}}} {before} {:.3}",
            (r.ts - 5_000) as f64 / 1000.0
        );
        let _ = writeln!(out, "{series}{{{l}}} {v} {:.3}", r.ts as f64 / 1000.0);
        prev = Some((&r.uuid, v));
    }
}

/// Two samples with this mean and max: (2·mean − max, max).
fn two(mean_max: Option<(f64, f64)>) -> Option<(f64, f64)> {
    mean_max.map(|(m, x)| (2.0 * m - x, x))
}

fn same(v: Option<f64>) -> Option<(f64, f64)> {
    v.map(|v| (v, v))
}

/// tessera-exporter's series of `rows`, scraped from `node`.
fn tessera_openmetrics(rows: &[Row], node: &str) -> String {
    let mut s = String::new();
    let l = |r: &Row| {
        format!(
            "instance=\"{node}:9835\",gpu=\"{}\",uuid=\"{}\"",
            r.gpu, r.uuid
        )
    };
    family(&mut s, "tessera_gpu_busy_ratio", rows, l, |r| two(r.busy));
    family(
        &mut s,
        "tessera_gpu_sm_active_ratio",
        rows,
        l,
        |r| two(r.sm),
    );
    family(&mut s, "tessera_gpu_memory_used_bytes", rows, l, |r| {
        same(r.mem)
    });
    family(&mut s, "tessera_gpu_memory_total_bytes", rows, l, |r| {
        same(r.total)
    });
    family(&mut s, "tessera_gpu_power_watts", rows, l, |r| {
        same(r.power)
    });
    family(&mut s, "tessera_gpu_temperature_celsius", rows, l, |r| {
        same(r.temp)
    });
    family(&mut s, "tessera_gpu_tensor_active_ratio", rows, l, |r| {
        two(r.tensor)
    });
    family(&mut s, "tessera_gpu_dram_active_ratio", rows, l, |r| {
        same(r.dram)
    });
    pipe_family(&mut s, rows, l);
    for (k, (name, _, _)) in NVLINK.iter().enumerate() {
        family(&mut s, name, rows, l, |r| same(r.nvlink[k]));
    }
    let info = |r: &Row| format!("{},name=\"{}\"", l(r), r.model);
    family(&mut s, "tessera_gpu_info", rows, info, |_| Some((1.0, 1.0)));
    counter(&mut s, ("tessera_gpu_energy_joules", true), rows, l, |r| {
        (r.energy_total, r.energy.unwrap_or(0.0))
    });
    // The critical XID codes' counters exist at 0 from the start (docs/metrics.md).
    let xid79 = |r: &Row| format!("{},xid=\"79\"", l(r));
    counter(
        &mut s,
        ("tessera_gpu_xid_errors", true),
        rows,
        xid79,
        |_| (0.0, 0.0),
    );
    s.push_str("# EOF\n");
    s
}

const MIB: f64 = 1_048_576.0;

/// The scenario's pod on each GPU index: (namespace, pod).
fn pod_of(gpu: &str) -> (&'static str, &'static str) {
    if gpu == "0" {
        ("serving", "chat-api-7d9f8c-x2k4p")
    } else {
        ("research", "train-0")
    }
}

/// dcgm-exporter's series of `rows` on `node`.
fn dcgm_openmetrics(rows: &[Row], node: &str) -> String {
    let mut s = String::new();
    // With Kubernetes mapping: the pod each GPU is given to (the scenario's workloads).
    let l = |r: &Row| {
        let (ns, pod) = pod_of(&r.gpu);
        format!(
            "gpu=\"{}\",UUID=\"{}\",Hostname=\"{node}\",modelName=\"{}\",instance=\"10.0.0.1:9400\",namespace=\"{ns}\",pod=\"{pod}\",container=\"main\"",
            r.gpu, r.uuid, r.model
        )
    };
    let pct = |v: Option<(f64, f64)>| two(v).map(|(a, b)| (a * 100.0, b * 100.0));
    family(&mut s, "DCGM_FI_DEV_GPU_UTIL", rows, l, |r| pct(r.busy));
    family(&mut s, "DCGM_FI_PROF_SM_ACTIVE", rows, l, |r| two(r.sm));
    family(&mut s, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", rows, l, |r| {
        two(r.tensor)
    });
    family(&mut s, "DCGM_FI_PROF_DRAM_ACTIVE", rows, l, |r| {
        same(r.dram)
    });
    for (k, (_, _, field)) in PIPES.iter().enumerate() {
        family(&mut s, field, rows, l, |r| same(r.pipes[k]));
    }
    for (k, (_, _, field)) in NVLINK.iter().enumerate() {
        family(&mut s, field, rows, l, |r| same(r.nvlink[k]));
    }
    // dcgm-exporter reports whole MiB.
    family(&mut s, "DCGM_FI_DEV_FB_USED", rows, l, |r| {
        same(r.mem.map(|m| (m / MIB).round()))
    });
    family(&mut s, "DCGM_FI_DEV_FB_FREE", rows, l, |r| {
        same(
            r.mem
                .zip(r.total)
                .map(|(m, t)| (t / MIB).round() - (m / MIB).round()),
        )
    });
    family(&mut s, "DCGM_FI_DEV_POWER_USAGE", rows, l, |r| {
        same(r.power)
    });
    family(&mut s, "DCGM_FI_DEV_GPU_TEMP", rows, l, |r| same(r.temp));
    // Whole millijoules, as DCGM counts them.
    counter(
        &mut s,
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", false),
        rows,
        l,
        |r| {
            let mj = (r.energy_total * 1000.0).round();
            let before = ((r.energy_total - r.energy.unwrap_or(0.0)) * 1000.0).round();
            (mj, mj - before)
        },
    );
    // Last XID seen: none.
    family(&mut s, "DCGM_FI_DEV_XID_ERRORS", rows, l, |_| {
        Some((0.0, 0.0))
    });
    s.push_str("# EOF\n");
    s
}

/// Compares the prometheus frame against the history frame row by row (both sorted by uuid, ts);
/// `energy_tol` in joules.
fn assert_agree(hist: &DataFrame, prom: &DataFrame, mem_tol: f64, energy_tol: f64) {
    let h = rows(hist);
    let p = rows(prom);
    let diff = (h.len() as i64 - p.len() as i64).abs();
    // Edges may differ by one interval per GPU.
    assert!(
        diff <= 2,
        "rows: history {} prometheus {}",
        h.len(),
        p.len()
    );
    let pm: std::collections::HashMap<(String, i64), &Row> =
        p.iter().map(|r| ((r.uuid.clone(), r.ts), r)).collect();
    let close = |a: Option<f64>, b: Option<f64>, tol: f64, what: &str, r: &Row| match (a, b) {
        (Some(a), Some(b)) => assert!(
            (a - b).abs() <= tol,
            "{what} of {} at {}: history {a} prometheus {b}",
            r.uuid,
            r.ts
        ),
        (None, None) => {}
        (a, b) => panic!(
            "{what} of {} at {}: history {a:?} prometheus {b:?}",
            r.uuid, r.ts
        ),
    };
    let (mut matched, mut gpm) = (0, 0);
    for r in &h {
        let Some(q) = pm.get(&(r.uuid.clone(), r.ts)) else {
            continue;
        };
        matched += 1;
        assert_eq!(q.gpu, r.gpu);
        assert_eq!(q.model, r.model);
        close(
            r.busy.map(|b| b.0),
            q.busy.map(|b| b.0),
            1e-9,
            "busy_mean",
            r,
        );
        close(
            r.busy.map(|b| b.1),
            q.busy.map(|b| b.1),
            1e-9,
            "busy_max",
            r,
        );
        close(
            r.sm.map(|b| b.0),
            q.sm.map(|b| b.0),
            1e-9,
            "sm_active_mean",
            r,
        );
        close(
            r.sm.map(|b| b.1),
            q.sm.map(|b| b.1),
            1e-9,
            "sm_active_max",
            r,
        );
        close(r.mem, q.mem, mem_tol, "memory_used_max_bytes", r);
        close(r.total, q.total, 2.0 * mem_tol, "memory_total_bytes", r);
        close(r.power, q.power, 1e-6, "power_mean_watts", r);
        close(r.temp, q.temp, 1e-9, "temperature_max_celsius", r);
        close(r.energy, q.energy, energy_tol, "energy_delta_joules", r);
        close(r.xid, q.xid, 0.0, "xid_count", r);
        close(
            r.tensor.map(|t| t.0),
            q.tensor.map(|t| t.0),
            1e-9,
            "tensor_active_mean",
            r,
        );
        close(
            r.tensor.map(|t| t.1),
            q.tensor.map(|t| t.1),
            1e-9,
            "tensor_active_max",
            r,
        );
        close(r.dram, q.dram, 1e-9, "dram_active_mean", r);
        for (k, (_, c, _)) in PIPES.iter().enumerate() {
            close(r.pipes[k], q.pipes[k], 1e-9, c, r);
        }
        for (k, (_, c, _)) in NVLINK.iter().enumerate() {
            close(r.nvlink[k], q.nvlink[k], 1e-6, c, r);
        }
        gpm += usize::from(r.tensor.is_some() && r.dram.is_some());
    }
    // The simulated H100s have GPM: the pipes made the round trip (not only nulls).
    assert!(
        gpm * 2 >= h.len(),
        "GPM columns in {gpm} of {} rows",
        h.len()
    );
    assert!(matched + 2 >= h.len(), "matched {matched} of {}", h.len());
}

fn ingest_prometheus(url: &str, since: i64, until: i64) -> (DataFrame, ingest::IngestReport) {
    ingest_prometheus_via(url, since, until, Api::QueryRange)
}

fn ingest_prometheus_via(
    url: &str,
    since: i64,
    until: i64,
    api: Api,
) -> (DataFrame, ingest::IngestReport) {
    let mut o = history_rows(since, until);
    o.prometheus.api = api;
    let (frames, report) =
        ingest::ingest(&[Source::prometheus(url.to_string())], &o).expect("ingest prometheus");
    let gpu = frames
        .gpu
        .sort(["uuid", "ts"], SortMultipleOptions::default())
        .collect()
        .expect("collect");
    (gpu, report)
}

#[test]
fn tessera_metrics_in_prometheus_match_the_history() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (_, hist, since, until) = simulate(tmp.path());
    assert!(
        hist.height() >= 2 * 8640 * DAYS as usize - 4,
        "{}",
        hist.height()
    );
    let server = serve(tmp.path(), &tessera_openmetrics(&rows(&hist), "gpu-node-1"));
    let (prom, report) = ingest_prometheus(&server.url, since, until);
    let w = report.warnings.join("\n");
    assert!(w.contains("read tessera-exporter metrics"), "{w}");
    // Two days of 10-s steps need two chunks of ≤ 11,000 points.
    assert!(w.contains("2 chunk(s)"), "{w}");
    assert!(!w.contains("partial data"), "{w}");
    assert_agree(&hist, &prom, 0.0, 1e-6);
    same_through_remote_read(&server.url, since, until, &prom, &hist, 0.0, 1e-6);
}

/// The remote-read API gives the frame the query-range path gives (the source's PromQL
/// evaluated here over raw samples), and so agrees with the history too.
fn same_through_remote_read(
    url: &str,
    since: i64,
    until: i64,
    prom: &DataFrame,
    hist: &DataFrame,
    mem_tol: f64,
    energy_tol: f64,
) {
    let (rr, report) = ingest_prometheus_via(url, since, until, Api::RemoteRead);
    let w = report.warnings.join("\n");
    assert!(
        w.contains("read raw samples through the remote-read API"),
        "{w}"
    );
    assert_eq!(rr.height(), prom.height(), "{w}");
    for c in prom.get_column_names() {
        let c = c.as_str();
        if c == "source" {
            continue;
        }
        match prom.column(c).expect("column").dtype() {
            DataType::String => assert_eq!(strs(prom, c), strs(&rr, c), "column {c}"),
            _ => {
                for (i, (a, b)) in f64s(prom, c).into_iter().zip(f64s(&rr, c)).enumerate() {
                    let ok = match (a, b) {
                        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(1.0),
                        (a, b) => a == b,
                    };
                    assert!(
                        ok,
                        "column {c} row {i}: query_range {a:?}, remote read {b:?}"
                    );
                }
            }
        }
    }
    assert_agree(hist, &rr, mem_tol, energy_tol);
}

/// A mixed fleet (one node on tessera-exporter, one on dcgm-exporter) is read whole, each GPU
/// once; a node with both exporters is read from tessera-exporter's series alone.
#[test]
fn a_mixed_fleet_is_read_whole_and_a_node_with_two_exporters_once() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (_, hist, since, until) = simulate(tmp.path());
    let (gpu0, gpu1): (Vec<Row>, Vec<Row>) = rows(&hist).into_iter().partition(|r| r.gpu == "0");
    let without_eof = |t: String| t.strip_suffix("# EOF\n").expect("EOF").to_string();
    let mixed = without_eof(tessera_openmetrics(&gpu0, "gpu-node-1"))
        + &dcgm_openmetrics(&gpu1, "gpu-node-2");
    let dir = tmp.path().join("mixed");
    std::fs::create_dir(&dir).expect("dir");
    let server = serve(&dir, &mixed);
    let (prom, report) = ingest_prometheus(&server.url, since, until);
    let w = report.warnings.join("\n");
    assert!(w.contains("read tessera-exporter metrics"), "{w}");
    assert!(
        w.contains("also read dcgm-exporter metrics on the 1 node(s) without tessera-exporter metrics (gpu-node-2)"),
        "{w}"
    );
    // Every GPU's rows, each once (dcgm-exporter's whole MiB and mJ for the second).
    assert_agree(&hist, &prom, MIB / 2.0 + 1.0, 0.0011);
    let second = gpu1[0].uuid.as_str();
    let node_of = |u: &Option<String>| {
        let on = if u.as_deref() == Some(second) {
            "gpu-node-2"
        } else {
            "gpu-node-1"
        };
        Some(on.to_string())
    };
    let (pu, pn) = (strs(&prom, "uuid"), strs(&prom, "node"));
    for (u, n) in pu.iter().zip(&pn) {
        assert_eq!(n, &node_of(u), "{u:?}");
    }
    let mut keys: Vec<(Option<String>, Option<f64>)> =
        pu.into_iter().zip(f64s(&prom, "ts")).collect();
    let n = keys.len();
    keys.sort_by(|a, b| a.partial_cmp(b).expect("no NaN ts"));
    keys.dedup();
    assert_eq!(keys.len(), n, "a GPU and ts given twice");

    // Both exporters on one node: dcgm-exporter's series are not read there.
    let both = without_eof(tessera_openmetrics(&rows(&hist), "gpu-node-1"))
        + &dcgm_openmetrics(&gpu1, "gpu-node-1");
    let dir = tmp.path().join("both");
    std::fs::create_dir(&dir).expect("dir");
    let server = serve(&dir, &both);
    let (prom, report) = ingest_prometheus(&server.url, since, until);
    let w = report.warnings.join("\n");
    assert!(
        w.contains("also found dcgm-exporter metrics; not read: every node they name is read from the metrics above"),
        "{w}"
    );
    // tessera-exporter's exact values, not dcgm-exporter's rounded ones, and no row twice.
    assert_agree(&hist, &prom, 0.0, 1e-6);
    assert!(prom.height() <= hist.height() + 2, "{} rows", prom.height());
}

#[test]
fn dcgm_metrics_in_prometheus_match_the_history() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (_, hist, since, until) = simulate(tmp.path());
    let server = serve(tmp.path(), &dcgm_openmetrics(&rows(&hist), "gpu-node-1"));
    let (prom, report) = ingest_prometheus(&server.url, since, until);
    let w = report.warnings.join("\n");
    assert!(w.contains("read dcgm-exporter metrics"), "{w}");
    let nodes: Vec<Option<String>> = strs(&prom, "node");
    assert!(nodes.iter().all(|n| n.as_deref() == Some("gpu-node-1")));
    // FB_USED/FB_FREE are whole MiB; energy whole mJ (each end rounded: ≤ 1 mJ off).
    assert_agree(&hist, &prom, MIB / 2.0 + 1.0, 0.0011);
    same_through_remote_read(
        &server.url,
        since,
        until,
        &prom,
        &hist,
        MIB / 2.0 + 1.0,
        0.0011,
    );
    let energy = f64s(&prom, "energy_delta_joules");
    assert!(
        energy.iter().filter(|e| e.is_some_and(|e| e > 0.0)).count() > prom.height() / 2,
        "energy mostly missing or 0"
    );

    // The pod labels: one process row per GPU row, named by the pod, holding the GPU's memory.
    let (frames, _) = ingest::ingest(
        &[Source::prometheus(server.url.clone())],
        &history_rows(since, until),
    )
    .expect("ingest prometheus");
    let procs = frames
        .process
        .sort(["uuid", "ts"], SortMultipleOptions::default())
        .collect()
        .expect("process");
    assert_eq!(procs.height(), prom.height());
    let (pu, pg, pns, ppod) = (
        strs(&procs, "uuid"),
        f64s(&procs, "gpu"),
        strs(&procs, "namespace"),
        strs(&procs, "pod"),
    );
    let (pmem, gmem) = (
        f64s(&procs, "memory_used_max_bytes"),
        f64s(&prom, "memory_used_max_bytes"),
    );
    let guuid = strs(&prom, "uuid");
    for i in 0..procs.height() {
        let gpu = format!("{}", pg[i].unwrap_or(-1.0) as i64);
        let (ns, pod) = pod_of(&gpu);
        assert_eq!(pns[i].as_deref(), Some(ns), "row {i}");
        assert_eq!(ppod[i].as_deref(), Some(pod), "row {i}");
        assert_eq!(pu[i], guuid[i], "row {i}");
        assert_eq!(pmem[i], gmem[i], "row {i}");
    }
    assert!(f64s(&procs, "pid").iter().all(Option::is_none));
}
