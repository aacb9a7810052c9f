//! Writes tessera history as tessera-exporter series in OpenMetrics, one file per node, for
//! `promtool tsdb create-blocks-from openmetrics` (scripts/bench-prometheus.sh). One sample per
//! history row, at the row's `ts`: the mean for activity and power, the maximum for memory; the
//! energy counter is the running sum of the rows' energy; `tessera_gpu_info` carries the model.
//! Each node's rows are read on their own (`ingest_parts`), so memory holds one node.
//!
//!     cargo run --release -p tessera --example history-openmetrics -- HISTORY_DIR OUT_DIR

use std::fmt::Write as _;
use std::io::Write as _;

use polars::prelude::*;
use tessera::ingest::{self, IngestOptions, Source};

fn f64s(df: &DataFrame, c: &str) -> Vec<Option<f64>> {
    df.column(c)
        .expect("column")
        .cast(&DataType::Float64)
        .expect("cast")
        .f64()
        .expect("f64")
        .iter()
        .collect()
}

fn strs(df: &DataFrame, c: &str) -> Vec<Option<String>> {
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

/// The label set of each row: the scrape target of its node and `cols`.
fn labels(df: &DataFrame, cols: &[&str]) -> Vec<String> {
    let nodes = strs(df, "node");
    let vals: Vec<(&str, Vec<Option<String>>)> = cols.iter().map(|c| (*c, strs(df, c))).collect();
    (0..df.height())
        .map(|i| {
            let mut l = format!(
                "instance=\"{}:9835\"",
                nodes[i].as_deref().unwrap_or("unknown")
            );
            for (c, v) in &vals {
                if let Some(v) = &v[i] {
                    let _ = write!(l, ",{c}=\"{}\"", v.replace('"', "'"));
                }
            }
            l
        })
        .collect()
}

/// One gauge family: `name{labels} value ts` for each row with a value.
fn gauge(out: &mut String, name: &str, df: &DataFrame, labels: &[String], col: &str) {
    let _ = writeln!(out, "# TYPE {name} gauge");
    let (v, ts) = (f64s(df, col), f64s(df, "ts"));
    for i in 0..df.height() {
        if let (Some(v), Some(t)) = (v[i], ts[i]) {
            let _ = writeln!(out, "{name}{{{}}} {v} {:.3}", labels[i], t / 1000.0);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, history, out_dir] = args.as_slice() else {
        eprintln!("usage: history-openmetrics HISTORY_DIR OUT_DIR");
        std::process::exit(2);
    };
    std::fs::create_dir_all(out_dir).expect("out dir");
    let (parts, _) = ingest::ingest_parts(
        &[Source::history(history.clone())],
        &IngestOptions::default(),
    )
    .expect("ingest history");
    for part in parts {
        let sort = |lf: LazyFrame, by: &[&str]| {
            lf.sort(by.to_vec(), SortMultipleOptions::default())
                .collect()
                .expect("collect")
        };
        let gpu = sort(part.frames.gpu.clone(), &["gpu", "ts"]);
        let mig = sort(part.frames.mig.clone(), &["gpu", "gpu_instance", "ts"]);
        let process = sort(part.frames.process.clone(), &["gpu", "pid", "ts"]);
        let mut s = String::new();
        let g = labels(&gpu, &["gpu", "uuid"]);
        for (name, col) in [
            ("tessera_gpu_busy_ratio", "busy_mean"),
            ("tessera_gpu_sm_active_ratio", "sm_active_mean"),
            ("tessera_gpu_memory_used_bytes", "memory_used_max_bytes"),
            ("tessera_gpu_memory_total_bytes", "memory_total_bytes"),
            ("tessera_gpu_power_watts", "power_mean_watts"),
            ("tessera_gpu_temperature_celsius", "temperature_max_celsius"),
            ("tessera_gpu_mig_enabled", "mig_enabled"),
        ] {
            gauge(&mut s, name, &gpu, &g, col);
        }
        // The energy counter: the running sum of each GPU's rows (sorted by GPU, then time).
        let _ = writeln!(s, "# TYPE tessera_gpu_energy_joules counter");
        let (e, ts, gi) = (
            f64s(&gpu, "energy_delta_joules"),
            f64s(&gpu, "ts"),
            strs(&gpu, "gpu"),
        );
        let mut total = 0.0;
        for i in 0..gpu.height() {
            if i == 0 || gi[i] != gi[i - 1] {
                total = 0.0;
            }
            if let (Some(d), Some(t)) = (e[i], ts[i]) {
                total += d;
                let _ = writeln!(
                    s,
                    "tessera_gpu_energy_joules_total{{{}}} {total} {:.3}",
                    g[i],
                    t / 1000.0
                );
            }
        }
        // The model, as the exporter's info series (`name`).
        let _ = writeln!(s, "# TYPE tessera_gpu_info gauge");
        let (models, ts) = (strs(&gpu, "model"), f64s(&gpu, "ts"));
        for i in 0..gpu.height() {
            if let (Some(m), Some(t)) = (&models[i], ts[i]) {
                let _ = writeln!(
                    s,
                    "tessera_gpu_info{{{},name=\"{m}\"}} 1 {:.3}",
                    g[i],
                    t / 1000.0
                );
            }
        }
        let m = labels(
            &mig,
            &["gpu", "uuid", "gpu_instance", "compute_instance", "profile"],
        );
        for (name, col) in [
            ("tessera_mig_sm_active_ratio", "sm_active_mean"),
            ("tessera_mig_memory_used_bytes", "memory_used_max_bytes"),
            ("tessera_mig_memory_total_bytes", "memory_total_bytes"),
        ] {
            gauge(&mut s, name, &mig, &m, col);
        }
        let p = labels(
            &process,
            &[
                "gpu",
                "uuid",
                "gpu_instance",
                "compute_instance",
                "pid",
                "process",
                "namespace",
                "pod",
            ],
        );
        for (name, col) in [
            ("tessera_process_sm_utilization_ratio", "sm_mean"),
            ("tessera_process_memory_used_bytes", "memory_used_max_bytes"),
        ] {
            gauge(&mut s, name, &process, &p, col);
        }
        s.push_str("# EOF\n");
        let path = std::path::Path::new(out_dir).join(format!("{}.om", part.key));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
        f.write_all(s.as_bytes()).expect("write");
        eprintln!("{}: {} bytes", path.display(), s.len());
    }
}
