//! Writes tessera history as tessera-exporter series in OpenMetrics, one file per node, for
//! `promtool tsdb create-blocks-from openmetrics` (scripts/bench-prometheus.sh). One sample per
//! history row, at the row's `ts`: the mean for activity and power, the maximum for memory; the
//! energy counter is the running sum of the rows' energy; `tessera_gpu_info` carries the model.
//! Each node's rows are read on their own (`ingest_parts`), so memory holds one node (one group
//! of nodes with `--nodes-per-file`).
//!
//! Options (scripts/bench-stores.sh; without them the output is as above):
//!
//! - `--nodes-per-file N`: N nodes per file (`nodes-FIRST.om`, FIRST the group's first node's
//!   index), each family's `# TYPE` line once with the samples of all N nodes under it, so a
//!   large fleet is backfilled as a few blocks rather than one per node.
//! - `--nodes A:B`: only the nodes with index in `[A, B)` (nodes sorted by name), so a fleet
//!   can be written and backfilled a batch at a time.
//! - `--dcgm-every K`: every K-th node (index 0, K, 2K, …) written as dcgm-exporter would
//!   expose it (Kubernetes mapping on) instead: `DCGM_FI_DEV_GPU_UTIL` (percent) and
//!   `DCGM_FI_PROF_SM_ACTIVE` (ratio), neither on MIG-enabled GPUs, `DCGM_FI_DEV_FB_USED` and
//!   `DCGM_FI_DEV_FB_FREE` (MiB), `DCGM_FI_DEV_POWER_USAGE` (W), `DCGM_FI_DEV_GPU_TEMP`,
//!   `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ, running sum), labelled `instance` (`NODE:9400`),
//!   `gpu`, `UUID`, `device`, `modelName`, `Hostname` and, while the row names a holder
//!   (`holder_namespace`, `holder_pod`), `namespace`, `pod`, `container`; each MIG instance's
//!   framebuffer and SM activity with `GPU_I_ID` and `GPU_I_PROFILE` (a MIG-enabled GPU's
//!   power, temperature, energy and framebuffer stay on series without `GPU_I_ID`). Values are
//!   the rows' own (not rounded to whole percent); no profiling (GPM) series.
//! - `--slurm-job-id`: tessera's process series labelled with `slurm_job_id` too, as
//!   tessera-exporter labels a Slurm job's processes.
//! - `--prometheus-text`: also `NAME.prom` beside each file, the same samples in the Prometheus
//!   text format with millisecond timestamps and no comments, for VictoriaMetrics'
//!   `/api/v1/import/prometheus`.
//!
//!     cargo run --release -p tessera --example history-openmetrics -- [OPTIONS] HISTORY_DIR OUT_DIR

use std::collections::HashMap;
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

/// [`strs`], all null when the frame has no such column.
fn strs_or_null(df: &DataFrame, c: &str) -> Vec<Option<String>> {
    if df.get_column_names().iter().any(|n| n.as_str() == c) {
        strs(df, c)
    } else {
        vec![None; df.height()]
    }
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

/// The samples of one file, family by family in the order the families were first named: the
/// OpenMetrics text, and the Prometheus text (ms timestamps) when asked for.
struct Families {
    names: Vec<(String, &'static str)>,
    index: HashMap<String, usize>,
    om: Vec<String>,
    prom: Option<Vec<String>>,
}

impl Families {
    fn new(prom: bool) -> Self {
        Families {
            names: Vec::new(),
            index: HashMap::new(),
            om: Vec::new(),
            prom: prom.then(Vec::new),
        }
    }

    /// The family `name` of type `kind`, named (with its `# TYPE` line) on first use.
    fn family(&mut self, name: &str, kind: &'static str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.names.push((name.to_string(), kind));
        self.om.push(String::new());
        if let Some(p) = &mut self.prom {
            p.push(String::new());
        }
        self.index.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }

    /// One sample of family `f`: `series` (name and labels), value, time in ms.
    fn sample(&mut self, f: usize, series: &str, v: f64, t_ms: f64) {
        let _ = writeln!(self.om[f], "{series} {v} {:.3}", t_ms / 1000.0);
        if let Some(p) = &mut self.prom {
            let _ = writeln!(p[f], "{series} {v} {}", t_ms.round() as i64);
        }
    }

    /// The OpenMetrics text (with `# EOF`) and the Prometheus text, if asked for.
    fn finish(self) -> (String, Option<String>) {
        let mut s = String::with_capacity(self.om.iter().map(String::len).sum::<usize>() + 4096);
        for ((name, kind), body) in self.names.iter().zip(&self.om) {
            let _ = writeln!(s, "# TYPE {name} {kind}");
            s.push_str(body);
        }
        s.push_str("# EOF\n");
        (s, self.prom.map(|p| p.concat()))
    }
}

/// One gauge family: `name{labels} value ts` for each row with a value.
fn gauge(out: &mut Families, name: &str, df: &DataFrame, labels: &[String], col: &str) {
    let f = out.family(name, "gauge");
    let (v, ts) = (f64s(df, col), f64s(df, "ts"));
    for i in 0..df.height() {
        if let (Some(v), Some(t)) = (v[i], ts[i]) {
            out.sample(f, &format!("{name}{{{}}}", labels[i]), v, t);
        }
    }
}

/// One node as tessera-exporter's series.
fn tessera(out: &mut Families, gpu: &DataFrame, mig: &DataFrame, process: &DataFrame, slurm: bool) {
    let g = labels(gpu, &["gpu", "uuid"]);
    for (name, col) in [
        ("tessera_gpu_busy_ratio", "busy_mean"),
        ("tessera_gpu_sm_active_ratio", "sm_active_mean"),
        ("tessera_gpu_memory_used_bytes", "memory_used_max_bytes"),
        ("tessera_gpu_memory_total_bytes", "memory_total_bytes"),
        ("tessera_gpu_power_watts", "power_mean_watts"),
        ("tessera_gpu_temperature_celsius", "temperature_max_celsius"),
        ("tessera_gpu_mig_enabled", "mig_enabled"),
    ] {
        gauge(out, name, gpu, &g, col);
    }
    // The energy counter: the running sum of each GPU's rows (sorted by GPU, then time).
    let f = out.family("tessera_gpu_energy_joules", "counter");
    let (e, ts, gi) = (
        f64s(gpu, "energy_delta_joules"),
        f64s(gpu, "ts"),
        strs(gpu, "gpu"),
    );
    let mut total = 0.0;
    for i in 0..gpu.height() {
        if i == 0 || gi[i] != gi[i - 1] {
            total = 0.0;
        }
        if let (Some(d), Some(t)) = (e[i], ts[i]) {
            total += d;
            out.sample(
                f,
                &format!("tessera_gpu_energy_joules_total{{{}}}", g[i]),
                total,
                t,
            );
        }
    }
    // The model, as the exporter's info series (`name`).
    let f = out.family("tessera_gpu_info", "gauge");
    let (models, ts) = (strs(gpu, "model"), f64s(gpu, "ts"));
    for i in 0..gpu.height() {
        if let (Some(m), Some(t)) = (&models[i], ts[i]) {
            out.sample(
                f,
                &format!("tessera_gpu_info{{{},name=\"{m}\"}}", g[i]),
                1.0,
                t,
            );
        }
    }
    let m = labels(
        mig,
        &["gpu", "uuid", "gpu_instance", "compute_instance", "profile"],
    );
    for (name, col) in [
        ("tessera_mig_sm_active_ratio", "sm_active_mean"),
        ("tessera_mig_memory_used_bytes", "memory_used_max_bytes"),
        ("tessera_mig_memory_total_bytes", "memory_total_bytes"),
    ] {
        gauge(out, name, mig, &m, col);
    }
    let mut cols = vec![
        "gpu",
        "uuid",
        "gpu_instance",
        "compute_instance",
        "pid",
        "process",
        "namespace",
        "pod",
    ];
    if slurm {
        cols.push("slurm_job_id");
    }
    let p = labels(process, &cols);
    for (name, col) in [
        ("tessera_process_sm_utilization_ratio", "sm_mean"),
        ("tessera_process_memory_used_bytes", "memory_used_max_bytes"),
    ] {
        gauge(out, name, process, &p, col);
    }
}

const MIB: f64 = 1_048_576.0;

/// One node as dcgm-exporter's series (see the module's doc).
fn dcgm(out: &mut Families, gpu: &DataFrame, mig: &DataFrame) {
    let (node, g, uuid, model) = (
        strs(gpu, "node"),
        strs(gpu, "gpu"),
        strs(gpu, "uuid"),
        strs(gpu, "model"),
    );
    let (hns, hpod) = (
        strs_or_null(gpu, "holder_namespace"),
        strs_or_null(gpu, "holder_pod"),
    );
    let ts = f64s(gpu, "ts");
    let (busy, sm, used, total, power, temp, mig_on, joules) = (
        f64s(gpu, "busy_mean"),
        f64s(gpu, "sm_active_mean"),
        f64s(gpu, "memory_used_max_bytes"),
        f64s(gpu, "memory_total_bytes"),
        f64s(gpu, "power_mean_watts"),
        f64s(gpu, "temperature_max_celsius"),
        f64s(gpu, "mig_enabled"),
        f64s(gpu, "energy_delta_joules"),
    );
    // The model of each GPU (node, index), for its MIG instances' series.
    let mut models: HashMap<(String, String), String> = HashMap::new();
    let base = |i: usize,
                node: &[Option<String>],
                g: &[Option<String>],
                uuid: &[Option<String>]| {
        let (n, gi) = (
            node[i].as_deref().unwrap_or("unknown"),
            g[i].as_deref().unwrap_or(""),
        );
        format!(
            "instance=\"{n}:9400\",gpu=\"{gi}\",UUID=\"{}\",device=\"nvidia{gi}\",Hostname=\"{n}\"",
            uuid[i].as_deref().unwrap_or("")
        )
    };
    let pod = |ns: &Option<String>, pod: &Option<String>| match (ns, pod) {
        (ns, Some(p)) => format!(
            ",container=\"main\",namespace=\"{}\",pod=\"{p}\"",
            ns.as_deref().unwrap_or("default")
        ),
        _ => String::new(),
    };
    let fams: Vec<usize> = [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
    ]
    .iter()
    .map(|n| out.family(n, "gauge"))
    .collect();
    // dcgm-exporter declares it a counter; a name without `_total` is not an OpenMetrics
    // counter, and the store keeps no type.
    let fe = out.family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "gauge");
    let mut running = 0.0;
    for i in 0..gpu.height() {
        let Some(t) = ts[i] else { continue };
        if i == 0 || g[i] != g[i - 1] || node[i] != node[i - 1] {
            running = 0.0;
        }
        let m = model[i].as_deref().unwrap_or("");
        if let (Some(n), Some(gi)) = (&node[i], &g[i]) {
            models.insert((n.clone(), gi.clone()), m.to_string());
        }
        let l = format!(
            "{},modelName=\"{m}\"{}",
            base(i, &node, &g, &uuid),
            pod(&hns[i], &hpod[i])
        );
        let on = mig_on[i].is_some_and(|v| v >= 1.0);
        let free = match (total[i], used[i]) {
            (Some(a), Some(b)) => Some((a - b) / MIB),
            _ => None,
        };
        for (k, v) in [
            (0, if on { None } else { busy[i].map(|b| b * 100.0) }),
            (1, if on { None } else { sm[i] }),
            (2, used[i].map(|b| b / MIB)),
            (3, free),
            (4, power[i]),
            (5, temp[i]),
        ] {
            if let Some(v) = v {
                let name = out.names[fams[k]].0.clone();
                out.sample(fams[k], &format!("{name}{{{l}}}"), v, t);
            }
        }
        if let Some(j) = joules[i] {
            running += j * 1000.0;
            out.sample(
                fe,
                &format!("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{l}}}"),
                running,
                t,
            );
        }
    }
    // MIG instances: framebuffer and SM activity per GPU instance.
    let (mnode, mg, muuid) = (strs(mig, "node"), strs(mig, "gpu"), strs(mig, "uuid"));
    let (gi, prof, mts) = (
        strs(mig, "gpu_instance"),
        strs(mig, "profile"),
        f64s(mig, "ts"),
    );
    let (mns, mpod) = (
        strs_or_null(mig, "holder_namespace"),
        strs_or_null(mig, "holder_pod"),
    );
    let (mused, mtotal, msm) = (
        f64s(mig, "memory_used_max_bytes"),
        f64s(mig, "memory_total_bytes"),
        f64s(mig, "sm_active_mean"),
    );
    for i in 0..mig.height() {
        let Some(t) = mts[i] else { continue };
        let key = (
            mnode[i].clone().unwrap_or_default(),
            mg[i].clone().unwrap_or_default(),
        );
        let m = models.get(&key).map(String::as_str).unwrap_or("");
        let l = format!(
            "{},modelName=\"{m}\",GPU_I_PROFILE=\"{}\",GPU_I_ID=\"{}\"{}",
            base(i, &mnode, &mg, &muuid),
            prof[i].as_deref().unwrap_or(""),
            gi[i].as_deref().unwrap_or(""),
            pod(&mns[i], &mpod[i])
        );
        let free = match (mtotal[i], mused[i]) {
            (Some(a), Some(b)) => Some((a - b) / MIB),
            _ => None,
        };
        for (k, v) in [(1, msm[i]), (2, mused[i].map(|b| b / MIB)), (3, free)] {
            if let Some(v) = v {
                let name = out.names[fams[k]].0.clone();
                out.sample(fams[k], &format!("{name}{{{l}}}"), v, t);
            }
        }
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: history-openmetrics [--nodes-per-file N] [--nodes A:B] [--dcgm-every K] \
         [--slurm-job-id] [--prometheus-text] HISTORY_DIR OUT_DIR"
    );
    std::process::exit(2);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut per_file, mut range, mut dcgm_every, mut slurm, mut prom) =
        (0usize, (0usize, usize::MAX), 0usize, false, false);
    let mut pos = Vec::new();
    while let Some(a) = args.next() {
        let num = |args: &mut dyn Iterator<Item = String>| -> usize {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match a.as_str() {
            "--nodes-per-file" => per_file = num(&mut args).max(1),
            "--dcgm-every" => dcgm_every = num(&mut args),
            "--slurm-job-id" => slurm = true,
            "--prometheus-text" => prom = true,
            "--nodes" => {
                let v = args.next().unwrap_or_else(|| usage());
                let (a, b) = v.split_once(':').unwrap_or_else(|| usage());
                range = (
                    a.parse().unwrap_or_else(|_| usage()),
                    b.parse().unwrap_or_else(|_| usage()),
                );
            }
            _ if a.starts_with("--") => usage(),
            _ => pos.push(a),
        }
    }
    let [history, out_dir] = pos.as_slice() else {
        usage()
    };
    std::fs::create_dir_all(out_dir).expect("out dir");
    let (mut parts, _) = ingest::ingest_parts(
        &[Source::history(history.clone())],
        &IngestOptions::default(),
    )
    .expect("ingest history");
    if per_file > 0 || dcgm_every > 0 || range != (0, usize::MAX) {
        parts.sort_by(|a, b| a.key.cmp(&b.key));
    }
    let group = per_file.max(1);
    let mut out: Option<(String, Families)> = None;
    let write = |name: &str, fams: Families| {
        let (s, p) = fams.finish();
        let path = std::path::Path::new(out_dir).join(format!("{name}.om"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("create"));
        f.write_all(s.as_bytes()).expect("write");
        if let Some(p) = p {
            let path = std::path::Path::new(out_dir).join(format!("{name}.prom"));
            std::fs::write(&path, p.as_bytes()).expect("write");
        }
        eprintln!("{}: {} bytes", path.display(), s.len());
    };
    for (index, part) in parts.into_iter().enumerate() {
        if index < range.0 || index >= range.1 {
            continue;
        }
        // A new group: the last one's file is written.
        if per_file > 0
            && (index - range.0) % group == 0
            && let Some((name, fams)) = out.take()
        {
            write(&name, fams);
        }
        let name = if per_file > 0 {
            format!("nodes-{index:05}")
        } else {
            part.key.clone()
        };
        let (_, fams) = out.get_or_insert_with(|| (name, Families::new(prom)));
        let sort = |lf: LazyFrame, by: &[&str]| {
            lf.sort(by.to_vec(), SortMultipleOptions::default())
                .collect()
                .expect("collect")
        };
        let gpu = sort(part.frames.gpu.clone(), &["gpu", "ts"]);
        let mig = sort(part.frames.mig.clone(), &["gpu", "gpu_instance", "ts"]);
        if dcgm_every > 0 && index % dcgm_every == 0 {
            dcgm(fams, &gpu, &mig);
        } else {
            let process = sort(part.frames.process.clone(), &["gpu", "pid", "ts"]);
            tessera(fams, &gpu, &mig, &process, slurm);
        }
        if per_file == 0 {
            let (name, fams) = out.take().expect("open");
            write(&name, fams);
        }
    }
    if let Some((name, fams)) = out.take() {
        write(&name, fams);
    }
}
