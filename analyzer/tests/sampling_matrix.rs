//! One planted truth, every sampling rate, every source (issue 14; docs/performance.md says how
//! long it takes).
//!
//! A small fleet (one node, six H100s) plants, over six hours (12:00–18:00 UTC of a Monday):
//! - two idle-loaded models: GPU 0 holds 20 GiB idle all the time, GPU 5 holds 8 GiB idle from
//!   13:00 to 16:00;
//! - consolidation candidates: GPUs 0, 1, 2 and 5 (two light inference services, 20 and 16 GiB at
//!   ≤ 30%, and the two idle models) fit on one GPU; GPU 3 (70 GiB training, 12:00–14:00) fits
//!   with nothing; GPU 4 is empty;
//! - off-peak capacity: GPU 4 is free all the time (the over-provisioned baseline), GPU 3 from
//!   14:00 and GPU 5 outside its idle model, so at least two GPUs are free 14:00–18:00.
//!
//! It is observed at 1 s, 10 s, 15 s, 30 s, 60 s and 5 min through every source — local history
//! written at that interval, the generic CSV, an nvidia-smi CSV log, and a real Prometheus
//! (Debian's, backfilled with `promtool tsdb create-blocks-from openmetrics`) with tessera's and
//! with dcgm-exporter's metric names, each read through `query_range` and through the
//! remote-read API — once as scraped, once perturbed: ±20% jitter on every
//! scrape, 5% of scrapes missing at random, GPU 1's energy counter reset at 14:30 (Prometheus),
//! and GPU 5's series changing period halfway (to twice the rate, from 15:00). The CSV and
//! Prometheus files are written here from samples of the simulator taken at the scrape instants,
//! independently of the history writer.
//!
//! Every cell is analysed with the defaults (no tuning flag, `--interval auto`) and must find
//! the planted conditions with precision and recall ≥ 0.95: idle-loaded GPUs and their minutes
//! (span edges may differ by one period of the cell's data), the consolidation candidates, the
//! over-provisioned baseline and the off-peak window. A sample exactly on a row boundary ends the
//! row before it, in every source. Prometheus cells live in one TSDB, a day apart (the scenario
//! repeats every day at noon), and are read with `--since`/`--until`.

use crate::support::prometheus as prom;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde_json::Value;
use tessera::advisor::{self, Analysis, Params};
use tessera::frames::Frames;
use tessera::ingest::prometheus::Api;
use tessera::ingest::{self, IngestOptions, Source};
use tessera_core::sim::{Scenario, SimNode, truth::GroundTruth};

const RATES_MS: [i64; 6] = [1_000, 10_000, 15_000, 30_000, 60_000, 300_000];
const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// 2026-11-02T12:00:00Z, a Monday noon: the first cell's start.
const START: i64 = 1_793_620_800_000;
const RANGE: i64 = 6 * HOUR;
const NODE: &str = "node-1";

/// The scenario starting at `start` (unix ms, 12:00 UTC of a Monday).
fn scenario(start: i64) -> Scenario {
    let at = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .expect("time")
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let text = format!(
        r#"
name = "sampling-matrix"
seed = 11
start = "{start}"
utc_offset_hours = 0

[[nodes]]
name = "{NODE}"
gpus = [{{ model = "H100-80GB", count = 6 }}]

[[workloads]]
name = "idle-llm"
kind = "idle"
node = "{NODE}"
gpu = 0
memory_gib = 20.0
namespace = "serving"
pod = "llm-0"

[[workloads]]
name = "chat-a"
kind = "inference"
node = "{NODE}"
gpu = 1
memory_gib = 20.0
peak = 0.3
base = 0.05
efficiency = 1.0
noise = 0.02
namespace = "serving"
pod = "chat-a-0"

[[workloads]]
name = "chat-b"
kind = "inference"
node = "{NODE}"
gpu = 2
memory_gib = 16.0
peak = 0.3
base = 0.05
efficiency = 1.0
noise = 0.02
namespace = "serving"
pod = "chat-b-0"

[[workloads]]
name = "train"
kind = "training"
node = "{NODE}"
gpu = 3
memory_gib = 70.0
peak = 0.9
efficiency = 1.0
start_hour = 12.0
duration_hours = 2.0
namespace = "research"
pod = "train-0"

[[workloads]]
name = "eval-idle"
kind = "idle"
node = "{NODE}"
gpu = 5
memory_gib = 8.0
from = "{from}"
until = "{until}"
namespace = "research"
pod = "eval-0"
"#,
        start = at(start),
        from = at(start + HOUR),
        until = at(start + 4 * HOUR),
    );
    Scenario::from_toml(&text, "sampling-matrix").expect("scenario")
}

/// The planted consolidation candidates (GPU indices).
const CONSOLIDATE: [u32; 4] = [0, 1, 2, 5];
/// GPU whose series change period halfway in perturbed cells.
const CHANGING_GPU: u32 = 5;
/// GPU whose energy counter resets in perturbed cells.
const RESET_GPU: u32 = 1;

// ------------------------------------------------------------------ deterministic randomness

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A uniform number in [0, 1) from the seed parts.
fn unit(a: u64, b: u64) -> f64 {
    (mix(mix(a) ^ b) >> 11) as f64 / (1u64 << 53) as f64
}

// ------------------------------------------------------------------ samples at scrape instants

#[derive(Clone)]
struct GpuObs {
    index: u32,
    uuid: String,
    busy: f64,
    sm: f64,
    mem: u64,
    total: u64,
    /// The energy counter, J (after a reset, counting from the reset).
    energy: f64,
}

#[derive(Clone)]
struct ProcObs {
    gpu: u32,
    uuid: String,
    pid: u32,
    name: String,
    namespace: String,
    pod: String,
    mem: u64,
    sm: f64,
}

/// One scrape of the node: the instant and what the driver reported.
#[derive(Clone)]
struct Scrape {
    t: i64,
    gpus: Vec<GpuObs>,
    procs: Vec<ProcObs>,
}

/// The scrapes of one cell: every `rate` from `start + rate` to `start + RANGE`; perturbed:
/// jitter ±20% of the rate, 5% missing, GPU 1's energy counter reset at +2.5 h, and GPU 5's
/// series at twice the rate from +3 h (its other scrapes do not carry it).
fn scrapes(start: i64, rate: i64, perturbed: bool) -> Vec<Scrape> {
    let s = scenario(start);
    let mut node = SimNode::new(&s, NODE).expect("node");
    let attribution = node.attribution();
    let n = RANGE / rate;
    let salt = rate as u64 * 2 + u64::from(perturbed);
    let mut out = Vec::with_capacity(n as usize);
    let reset_at = start + 5 * HOUR / 2;
    let mut reset_base: Option<f64> = None;
    for k in 1..=n {
        let mut t = start + k * rate;
        if perturbed {
            if unit(salt, k as u64) < 0.05 {
                continue;
            }
            let j = (unit(salt ^ 0xA5, k as u64) * 2.0 - 1.0) * 0.2 * rate as f64;
            t += j.round() as i64;
            t = t.min(start + RANGE);
        }
        let reading = node.read(t);
        let mut gpus = Vec::new();
        let mut procs = Vec::new();
        for g in &reading.gpus {
            let sm = &g.sample;
            let changing = perturbed && sm.index == CHANGING_GPU && t > start + RANGE / 2;
            if changing && k % 2 == 1 {
                continue;
            }
            let mut energy = sm.energy_joules.expect("energy");
            if perturbed && sm.index == RESET_GPU && t >= reset_at {
                let base = *reset_base.get_or_insert(energy);
                energy -= base;
            }
            gpus.push(GpuObs {
                index: sm.index,
                uuid: sm.uuid.clone(),
                busy: sm.busy_ratio.expect("busy"),
                sm: sm.sm_active_ratio.expect("sm"),
                mem: sm.memory_used_bytes.expect("mem"),
                total: sm.memory_total_bytes.expect("total"),
                energy,
            });
            for p in &sm.processes {
                let a = attribution.get(&p.pid).expect("attribution");
                procs.push(ProcObs {
                    gpu: sm.index,
                    uuid: sm.uuid.clone(),
                    pid: p.pid,
                    name: p.name.clone().unwrap_or_default(),
                    namespace: a.namespace.clone().unwrap_or_default(),
                    pod: a.pod.clone().unwrap_or_default(),
                    mem: p.used_memory_bytes.expect("process memory"),
                    sm: p.sm_ratio.expect("process sm"),
                });
            }
        }
        out.push(Scrape { t, gpus, procs });
    }
    out
}

// ------------------------------------------------------------------ writers

fn secs(ms: i64) -> String {
    format!("{}.{:03}", ms.div_euclid(1000), ms.rem_euclid(1000))
}

/// The generic long CSV (energy as per-scrape deltas: the format has no counters).
fn generic_csv(scrapes: &[Scrape]) -> String {
    let mut s = String::from(
        "timestamp,entity,metric,value,kind,node,gpu,uuid,model,pid,process,namespace,pod\n",
    );
    let mut last_energy: BTreeMap<u32, f64> = BTreeMap::new();
    for sc in scrapes {
        let t = secs(sc.t);
        for g in &sc.gpus {
            let l = format!(
                ",gpu,{NODE},{},{},NVIDIA H100 80GB HBM3,,,,",
                g.index, g.uuid
            );
            let u = &g.uuid;
            let _ = writeln!(s, "{t},{u},gpu_busy_ratio,{}{l}", g.busy);
            let _ = writeln!(s, "{t},{u},sm_active_ratio,{}{l}", g.sm);
            let _ = writeln!(s, "{t},{u},memory_used_bytes,{}{l}", g.mem);
            let _ = writeln!(s, "{t},{u},memory_total_bytes,{}{l}", g.total);
            if let Some(prev) = last_energy.insert(g.index, g.energy)
                && g.energy >= prev
            {
                let _ = writeln!(s, "{t},{u},energy_delta_joules,{}{l}", g.energy - prev);
            }
        }
        for p in &sc.procs {
            let l = format!(
                ",process,{NODE},{},{},,,{},{},{}",
                p.gpu, p.uuid, p.name, p.namespace, p.pod
            );
            let _ = writeln!(s, "{t},{},memory_used_bytes,{}{l}", p.pid, p.mem);
            let _ = writeln!(s, "{t},{},sm_ratio,{}{l}", p.pid, p.sm);
        }
    }
    s
}

/// `nvidia-smi --query-gpu=timestamp,index,uuid,name,utilization.gpu,memory.used,memory.total
/// --format=csv -l N`: whole percents and MiB, local time without zone (UTC here).
fn smi_csv(scrapes: &[Scrape]) -> String {
    let mut s = String::from(
        "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n",
    );
    for sc in scrapes {
        let t = chrono::DateTime::from_timestamp_millis(sc.t)
            .expect("t")
            .format("%Y/%m/%d %H:%M:%S%.3f");
        for g in &sc.gpus {
            let _ = writeln!(
                s,
                "{t}, {}, {}, NVIDIA H100 80GB HBM3, {} %, {} MiB, {} MiB",
                g.index,
                g.uuid,
                (g.busy * 100.0).round(),
                g.mem >> 20,
                g.total >> 20
            );
        }
    }
    s
}

/// OpenMetrics samples by metric family (families must be contiguous in the file).
#[derive(Default)]
struct Om {
    families: BTreeMap<String, (&'static str, String)>,
}

impl Om {
    fn add(&mut self, family: &str, ty: &'static str, series: &str, labels: &str, v: f64, t: i64) {
        let e = self
            .families
            .entry(family.to_string())
            .or_insert((ty, String::new()));
        // Whole numbers as integers, ratios to 4 decimals: what exporters print, and a third
        // of the text.
        if v.fract() == 0.0 && v.abs() < 1e15 {
            let _ = writeln!(e.1, "{series}{{{labels}}} {} {}", v as i64, secs(t));
        } else {
            let _ = writeln!(e.1, "{series}{{{labels}}} {v:.4} {}", secs(t));
        }
    }

    fn write(&self, path: &Path) {
        use std::io::Write as _;
        let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("om"));
        for (name, (ty, body)) in &self.families {
            writeln!(f, "# TYPE {name} {ty}").expect("w");
            f.write_all(body.as_bytes()).expect("w");
        }
        writeln!(f, "# EOF").expect("w");
    }
}

/// tessera-exporter's metrics of one cell, scraped from target `host:19435`.
fn tessera_om(om: &mut Om, scrapes: &[Scrape], host: &str) {
    // Samples must be in time order per series: write series by series.
    let inst = format!("instance=\"{host}:19435\"");
    let gpus: BTreeSet<(u32, String)> = scrapes
        .iter()
        .flat_map(|s| s.gpus.iter().map(|g| (g.index, g.uuid.clone())))
        .collect();
    for (i, u) in &gpus {
        let l = format!("{inst},gpu=\"{i}\",uuid=\"{u}\"");
        let each = |f: &dyn Fn(&GpuObs) -> f64| -> Vec<(i64, f64)> {
            scrapes
                .iter()
                .filter_map(|s| s.gpus.iter().find(|g| g.index == *i).map(|g| (s.t, f(g))))
                .collect()
        };
        for (name, v) in [
            ("tessera_gpu_busy_ratio", each(&|g| g.busy)),
            ("tessera_gpu_sm_active_ratio", each(&|g| g.sm)),
            ("tessera_gpu_memory_used_bytes", each(&|g| g.mem as f64)),
            ("tessera_gpu_memory_total_bytes", each(&|g| g.total as f64)),
        ] {
            for (t, x) in v {
                om.add(name, "gauge", name, &l, x, t);
            }
        }
        for (t, x) in each(&|g| g.energy) {
            om.add(
                "tessera_gpu_energy_joules",
                "counter",
                "tessera_gpu_energy_joules_total",
                &l,
                x,
                t,
            );
        }
        for (t, _) in each(&|_| 1.0) {
            om.add(
                "tessera_gpu_info",
                "gauge",
                "tessera_gpu_info",
                &format!("{l},name=\"NVIDIA H100 80GB HBM3\""),
                1.0,
                t,
            );
        }
    }
    let procs: BTreeSet<(u32, String, u32, String, String, String)> = scrapes
        .iter()
        .flat_map(|s| {
            s.procs.iter().map(|p| {
                (
                    p.gpu,
                    p.uuid.clone(),
                    p.pid,
                    p.name.clone(),
                    p.namespace.clone(),
                    p.pod.clone(),
                )
            })
        })
        .collect();
    for (g, u, pid, name, ns, pod) in &procs {
        let l = format!(
            "{inst},gpu=\"{g}\",uuid=\"{u}\",pid=\"{pid}\",process=\"{name}\",namespace=\"{ns}\",pod=\"{pod}\""
        );
        for s in scrapes {
            if let Some(p) = s.procs.iter().find(|p| p.pid == *pid) {
                om.add(
                    "tessera_process_memory_used_bytes",
                    "gauge",
                    "tessera_process_memory_used_bytes",
                    &l,
                    p.mem as f64,
                    s.t,
                );
                om.add(
                    "tessera_process_sm_utilization_ratio",
                    "gauge",
                    "tessera_process_sm_utilization_ratio",
                    &l,
                    p.sm,
                    s.t,
                );
            }
        }
    }
}

/// dcgm-exporter's metrics of one cell: whole percents, MiB, mJ; a GPU given to a pod carries
/// its labels (kubelet pod-resources mapping) while the pod holds it — in the simulator, while
/// its workload is loaded — so a GPU's series change labels when a pod comes or goes, as
/// dcgm-exporter's do.
fn dcgm_om(om: &mut Om, scrapes: &[Scrape]) {
    let gpus: BTreeSet<(u32, String)> = scrapes
        .iter()
        .flat_map(|s| s.gpus.iter().map(|g| (g.index, g.uuid.clone())))
        .collect();
    for (i, u) in &gpus {
        for s in scrapes {
            let Some(g) = s.gpus.iter().find(|g| g.index == *i) else {
                continue;
            };
            let pod = s
                .procs
                .iter()
                .find(|p| p.gpu == *i)
                .map(|p| format!(",pod=\"{}\",namespace=\"{}\"", p.pod, p.namespace))
                .unwrap_or_default();
            let l = format!(
                "gpu=\"{i}\",UUID=\"{u}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"{NODE}\"{pod}"
            );
            let used = (g.mem >> 20) as f64;
            for (name, v) in [
                ("DCGM_FI_DEV_GPU_UTIL", (g.busy * 100.0).round()),
                ("DCGM_FI_PROF_SM_ACTIVE", g.sm),
                ("DCGM_FI_DEV_FB_USED", used),
                ("DCGM_FI_DEV_FB_FREE", (g.total >> 20) as f64 - used),
                (
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                    (g.energy * 1000.0).round(),
                ),
            ] {
                om.add(name, "gauge", name, &l, v, s.t);
            }
        }
    }
}

// ------------------------------------------------------------------ history cells

/// Rewrites every table of `node` into one Parquet file, through `f`, keeping the rows whose
/// `ts` passes `keep`.
fn rewrite(
    node: &Path,
    f: &dyn Fn(polars::prelude::LazyFrame, &str) -> LazyFrame,
    keep: &dyn Fn(i64) -> bool,
) {
    for table in ["gpu", "mig", "process"] {
        let dir = node.join(table);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let files: Vec<PathBuf> = entries
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
            .collect();
        if files.is_empty() {
            continue;
        }
        let frames: Vec<LazyFrame> = files
            .iter()
            .map(|p| {
                ParquetReader::new(std::fs::File::open(p).expect("open"))
                    .finish()
                    .expect("read")
                    .lazy()
            })
            .collect();
        let all = concat(frames, UnionArgs::default()).expect("concat");
        let df = f(all, table).collect().expect("rewrite");
        let mask: BooleanChunked = df
            .column("ts")
            .expect("ts")
            .i64()
            .expect("i64")
            .iter()
            .map(|t| t.is_some_and(keep))
            .collect();
        let mut df = df.filter(&mask).expect("filter");
        for p in &files {
            std::fs::remove_file(p).expect("remove");
        }
        ParquetWriter::new(std::fs::File::create(dir.join("2026-11-02T12.parquet")).expect("w"))
            .finish(&mut df)
            .expect("write");
    }
}

/// History written at `rate` (the exporter samples every second, or every `rate` when coarser).
/// Perturbed: 5% of the rows' intervals missing (all entities: the exporter was down), and GPU
/// 5's rows from +3 h written at twice the rate (the exporter restarted with another
/// `--history.interval`): its rows there come from a second history at that interval.
fn history_cell(dir: &Path, start: i64, rate: i64, perturbed: bool) -> PathBuf {
    let s = scenario(start);
    let out = dir.join("history");
    let sample = rate.min(1_000);
    tessera_core::simulate::simulate_for(&s, RANGE, &out, sample, rate).expect("simulate");
    if perturbed {
        let coarse = dir.join("history-2x");
        tessera_core::simulate::simulate_for(&s, RANGE, &coarse, sample, 2 * rate)
            .expect("simulate 2x");
        let half = start + RANGE / 2;
        let salt = rate as u64 * 7 + 3;
        let node = out.join(NODE);
        let coarse_node = coarse.join(NODE);
        rewrite(
            &node,
            &|lf, table| {
                let read_coarse = || -> LazyFrame {
                    let files: Vec<LazyFrame> = std::fs::read_dir(coarse_node.join(table))
                        .map(|d| {
                            d.map(|e| e.expect("e").path())
                                .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
                                .map(|p| {
                                    ParquetReader::new(std::fs::File::open(p).expect("o"))
                                        .finish()
                                        .expect("r")
                                        .lazy()
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    concat(files, UnionArgs::default()).expect("concat")
                };
                let changing = col("gpu")
                    .eq(lit(CHANGING_GPU))
                    .and(col("ts").gt(lit(half)));
                let kept = lf.filter(changing.clone().not());
                let swapped = read_coarse().filter(changing);
                concat([kept, swapped], UnionArgs::default()).expect("concat")
            },
            &|ts| {
                // 5% of intervals missing, chosen by their end (the same in every table).
                let k = (ts - start).div_euclid(rate);
                (ts - start).rem_euclid(rate) != 0 || unit(salt, k as u64) >= 0.05
            },
        );
    }
    out
}

// ------------------------------------------------------------------ cells

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Src {
    History,
    Csv,
    Smi,
    PromTessera,
    PromDcgm,
    /// The same TSDB cells read through the remote-read API.
    PromTesseraRr,
    PromDcgmRr,
}

impl Src {
    fn name(self) -> &'static str {
        match self {
            Src::History => "history",
            Src::Csv => "generic csv",
            Src::Smi => "nvidia-smi csv",
            Src::PromTessera => "prometheus (tessera)",
            Src::PromDcgm => "prometheus (dcgm)",
            Src::PromTesseraRr => "prom remote read (tess)",
            Src::PromDcgmRr => "prom remote read (dcgm)",
        }
    }

    fn prometheus(self) -> bool {
        matches!(
            self,
            Src::PromTessera | Src::PromDcgm | Src::PromTesseraRr | Src::PromDcgmRr
        )
    }

    /// How a Prometheus cell is read.
    fn api(self) -> Api {
        match self {
            Src::PromTesseraRr | Src::PromDcgmRr => Api::RemoteRead,
            _ => Api::QueryRange,
        }
    }
}

/// One cell's result.
struct Outcome {
    src: Src,
    rate: i64,
    perturbed: bool,
    scores: Vec<(&'static str, f64)>,
    failures: Vec<String>,
    seconds: f64,
}

fn analyze(
    sources: &[Source],
    since: i64,
    until: i64,
    api: Api,
) -> (Frames, Analysis, ingest::IngestReport) {
    let mut opts = IngestOptions {
        since: Some(since),
        until: Some(until + 1),
        ..IngestOptions::default()
    };
    opts.prometheus.api = api;
    let (frames, report) = ingest::ingest(sources, &opts).expect("ingest");
    let analysis = advisor::analyze(
        &frames,
        &Params::default(),
        report.time_range(),
        vec![],
        &[],
    )
    .expect("analyze");
    (frames, analysis, report)
}

fn secs_of(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().expect("time"))
        .expect("rfc3339")
        .timestamp_millis()
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 1.0 } else { a as f64 / b as f64 }
}

/// Scores one cell's analysis against the truth of its range.
fn score(
    analysis: &Analysis,
    frames: &Frames,
    truth: &GroundTruth,
    start: i64,
    tolerance_ms: i64,
) -> (Vec<(&'static str, f64)>, Vec<String>) {
    let mut scores = Vec::new();
    let mut notes = Vec::new();
    // Idle-loaded: by GPU (the nvidia-smi log has no processes and dcgm-exporter names pods).
    let mut truth_gpus: BTreeMap<u32, Vec<(i64, i64)>> = BTreeMap::new();
    for s in &truth.idle_loaded {
        truth_gpus
            .entry(s.gpu)
            .or_default()
            .push((s.start.timestamp_millis(), s.end.timestamp_millis()));
    }
    let idle: Vec<&advisor::Finding> = analysis
        .findings
        .iter()
        .filter(|f| f.detector == "idle_loaded")
        .collect();
    let mut found: BTreeMap<u32, Vec<(i64, i64)>> = BTreeMap::new();
    let mut wrong = 0;
    for f in &idle {
        let Some(g) = f.entity.gpu.filter(|g| truth_gpus.contains_key(g)) else {
            wrong += 1;
            notes.push(format!("unplanted idle finding: {}", f.summary));
            continue;
        };
        for s in f.evidence.to_json()["spans"].as_array().expect("spans") {
            found
                .entry(g)
                .or_default()
                .push((secs_of(&s["start"]), secs_of(&s["end"])));
        }
    }
    scores.push(("idle precision", ratio(idle.len() - wrong, idle.len())));
    let hit = truth_gpus.keys().filter(|g| found.contains_key(g)).count();
    scores.push(("idle recall", ratio(hit, truth_gpus.len())));
    // Minutes, leaving out those within the tolerance of a truth span's edge.
    let near_edge = |g: u32, m: i64| {
        truth_gpus.get(&g).is_some_and(|v| {
            v.iter().any(|(a, b)| {
                (m - a).abs() < tolerance_ms
                    || (m + 60_000 - a).abs() < tolerance_ms
                    || (m - b).abs() < tolerance_ms
                    || (m + 60_000 - b).abs() < tolerance_ms
            })
        })
    };
    let within = |v: Option<&Vec<(i64, i64)>>, m: i64| {
        v.is_some_and(|v| v.iter().any(|(a, b)| m + 30_000 > *a && m + 30_000 < *b))
    };
    let (mut tp, mut fp, mut fn_) = (0usize, 0usize, 0usize);
    for g in truth_gpus
        .keys()
        .chain(found.keys())
        .collect::<BTreeSet<_>>()
    {
        let mut m = start;
        while m < start + RANGE {
            if !near_edge(*g, m) {
                match (within(truth_gpus.get(g), m), within(found.get(g), m)) {
                    (true, true) => tp += 1,
                    (false, true) => fp += 1,
                    (true, false) => fn_ += 1,
                    _ => {}
                }
            }
            m += 60_000;
        }
    }
    scores.push(("idle minutes precision", ratio(tp, tp + fp)));
    scores.push(("idle minutes recall", ratio(tp, tp + fn_)));

    // Consolidation candidates.
    let mut planned: BTreeSet<u32> = BTreeSet::new();
    for f in analysis
        .findings
        .iter()
        .filter(|f| f.detector == "consolidation")
    {
        for bin in f.evidence.to_json()["plan"].as_array().expect("plan") {
            if bin["workloads"].as_array().is_some_and(|w| w.len() > 1) {
                for w in bin["workloads"].as_array().expect("workloads") {
                    if let Some(g) = w["gpu"].as_u64() {
                        planned.insert(g as u32);
                    } else if let Some(u) = w["uuid"].as_str() {
                        planned.extend(gpu_of_uuid(frames, u));
                    }
                }
            }
        }
    }
    let want: BTreeSet<u32> = CONSOLIDATE.into_iter().collect();
    let both = planned.intersection(&want).count();
    if planned != want {
        notes.push(format!(
            "consolidation: planned {planned:?}, planted {want:?}"
        ));
    }
    scores.push(("consolidation precision", ratio(both, planned.len())));
    scores.push(("consolidation recall", ratio(both, want.len())));

    // Off-peak: the over-provisioned GPU and the window of ≥ 2 free GPUs, 14:00–18:00.
    let offpeak: Vec<Value> = analysis
        .findings
        .iter()
        .filter(|f| f.detector == "offpeak_window")
        .map(|f| f.evidence.to_json())
        .collect();
    let baseline = offpeak
        .iter()
        .find(|e| e["type"] == "baseline")
        .and_then(|e| e["gpus"].as_u64());
    let windows: Vec<(String, String)> = offpeak
        .iter()
        .filter(|e| e["type"] != "baseline")
        .map(|e| {
            (
                e["start"].as_str().unwrap_or("").to_string(),
                e["end"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let planted_window = ("14:00".to_string(), "18:00".to_string());
    let found_window = windows.contains(&planted_window);
    if baseline != Some(1) || !found_window || windows.len() != 1 {
        notes.push(format!(
            "off-peak: baseline {baseline:?}, windows {windows:?}: {}",
            serde_json::to_string(&offpeak).unwrap_or_default()
        ));
    }
    let items_found = usize::from(baseline == Some(1)) + usize::from(found_window);
    let items_reported = usize::from(baseline.is_some()) + windows.len();
    scores.push(("off-peak precision", ratio(items_found, items_reported)));
    scores.push(("off-peak recall", ratio(items_found, 2)));
    (scores, notes)
}

fn gpu_of_uuid(frames: &Frames, uuid: &str) -> Option<u32> {
    let df = frames
        .gpu
        .clone()
        .filter(col("uuid").eq(lit(uuid.to_string())))
        .select([col("gpu")])
        .limit(1)
        .collect()
        .ok()?;
    df.column("gpu").ok()?.u32().ok()?.get(0)
}

/// A sample exactly on a boundary ends the row before it: with unperturbed scrapes on the
/// rate's grid, every row of GPU 0 ends at a scrape.
fn check_boundaries(frames: &Frames, rate: i64, start: i64) -> Option<String> {
    let df = frames
        .gpu
        .clone()
        .filter(col("gpu").eq(lit(0u32)))
        .select([
            col("ts").cast(DataType::Int64).alias("ts"),
            col("interval_ms"),
        ])
        .sort(["ts"], SortMultipleOptions::default())
        .collect()
        .ok()?;
    let ts: Vec<i64> = df
        .column("ts")
        .ok()?
        .i64()
        .ok()?
        .into_no_null_iter()
        .collect();
    let iv: Vec<i64> = df
        .column("interval_ms")
        .ok()?
        .i64()
        .ok()?
        .into_no_null_iter()
        .collect();
    let want: Vec<i64> = (1..=RANGE / rate).map(|k| start + k * rate).collect();
    if ts != want || iv.iter().any(|&i| i != rate) {
        return Some(format!(
            "rows of GPU 0 are not the {rate} ms scrapes: {} rows, first {:?}, intervals {:?}",
            ts.len(),
            ts.first(),
            iv.iter().collect::<BTreeSet<_>>()
        ));
    }
    None
}

#[test]
fn one_planted_truth_every_rate_every_source() {
    let t0 = std::time::Instant::now();
    let dir = tempfile::tempdir().expect("tmp");
    // Cell starts: a day apart, so that one TSDB holds every Prometheus cell.
    let mut day = 0;
    let mut cells: Vec<(Src, i64, bool, i64)> = Vec::new();
    // To look at a few cells while working on them: TESSERA_MATRIX_RATES=60000,300000 and
    // TESSERA_MATRIX_SOURCES=csv,history (CI runs every cell).
    let only = |var: &str| -> Option<Vec<String>> {
        std::env::var(var)
            .ok()
            .map(|v| v.split(',').map(str::to_string).collect())
    };
    let (rates, sources) = (only("TESSERA_MATRIX_RATES"), only("TESSERA_MATRIX_SOURCES"));
    for &rate in &RATES_MS {
        if rates
            .as_ref()
            .is_some_and(|r| !r.contains(&rate.to_string()))
        {
            continue;
        }
        for perturbed in [false, true] {
            for src in [
                Src::History,
                Src::Csv,
                Src::Smi,
                Src::PromTessera,
                Src::PromDcgm,
            ] {
                let key = format!("{src:?}").to_lowercase();
                if sources.as_ref().is_some_and(|s| !s.contains(&key)) {
                    continue;
                }
                let start = match src {
                    Src::PromTessera | Src::PromDcgm => {
                        day += 1;
                        START + day * DAY
                    }
                    _ => START,
                };
                cells.push((src, rate, perturbed, start));
                // The same day of the TSDB through the remote-read API.
                match src {
                    Src::PromTessera => cells.push((Src::PromTesseraRr, rate, perturbed, start)),
                    Src::PromDcgm => cells.push((Src::PromDcgmRr, rate, perturbed, start)),
                    _ => {}
                }
            }
        }
    }
    // The Prometheus cells' data, in one TSDB.
    let mut om = Om::default();
    let mut samples: BTreeMap<(i64, bool, i64), Vec<Scrape>> = BTreeMap::new();
    for &(src, rate, perturbed, start) in &cells {
        let key = (rate, perturbed, start);
        let s = samples
            .entry(key)
            .or_insert_with(|| scrapes(start, rate, perturbed));
        match src {
            Src::PromTessera => tessera_om(&mut om, s, NODE),
            Src::PromDcgm => dcgm_om(&mut om, s),
            _ => {}
        }
    }
    eprintln!(
        "scrapes and openmetrics: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let om_path = dir.path().join("cells.om");
    om.write(&om_path);
    drop(om);
    eprintln!("written: {:.1} s", t0.elapsed().as_secs_f64());
    let server = prom::serve_file(dir.path(), &om_path, "24h");
    eprintln!("served: {:.1} s", t0.elapsed().as_secs_f64());
    let prepared = t0.elapsed().as_secs_f64();

    let mut outcomes: Vec<Outcome> = Vec::new();
    for &(src, rate, perturbed, start) in &cells {
        let t = std::time::Instant::now();
        let cell_dir = dir.path().join(format!(
            "{}-{rate}-{perturbed}",
            src.name().replace(' ', "_")
        ));
        std::fs::create_dir_all(&cell_dir).expect("cell dir");
        let source = match src {
            Src::History => Source::history(
                history_cell(&cell_dir, start, rate, perturbed)
                    .display()
                    .to_string(),
            ),
            Src::Csv => {
                let p = cell_dir.join("generic.csv");
                std::fs::write(&p, generic_csv(&samples[&(rate, perturbed, start)])).expect("csv");
                Source::csv(p)
            }
            Src::Smi => {
                let p = cell_dir.join("nvidia-smi.csv");
                std::fs::write(&p, smi_csv(&samples[&(rate, perturbed, start)])).expect("csv");
                Source::csv(p)
            }
            _ => Source::prometheus(server.url.clone()),
        };
        let (frames, analysis, report) = analyze(&[source], start, start + RANGE, src.api());
        let truth = GroundTruth::compute(
            &scenario(start),
            chrono::DateTime::from_timestamp_millis(start).expect("start"),
            chrono::DateTime::from_timestamp_millis(start + RANGE).expect("end"),
        );
        // Edges may differ by one period of the cell's data (twice the rate where it changes).
        let tolerance = if perturbed { 2 * rate } else { rate }.max(60_000);
        let (scores, mut failures) = score(&analysis, &frames, &truth, start, tolerance);
        for (what, v) in &scores {
            if *v < 0.95 {
                failures.push(format!("{what} {v:.3} < 0.95"));
            }
        }
        if !perturbed && let Some(e) = check_boundaries(&frames, rate, start) {
            failures.push(e);
        }
        if perturbed && src.prometheus() {
            // The counter reset neither goes negative nor loses more than the reset's interval.
            let e = frames
                .gpu
                .clone()
                .filter(col("gpu").eq(lit(RESET_GPU)))
                .select([
                    col("energy_delta_joules").sum().alias("sum"),
                    col("energy_delta_joules").min().alias("min"),
                ])
                .collect()
                .expect("energy");
            let sum = e
                .column("sum")
                .expect("s")
                .f64()
                .expect("f")
                .get(0)
                .unwrap_or(0.0);
            let min = e
                .column("min")
                .expect("m")
                .f64()
                .expect("f")
                .get(0)
                .unwrap_or(0.0);
            let full: f64 = {
                let s = &samples[&(rate, perturbed, start)];
                let g = |sc: &Scrape| {
                    sc.gpus
                        .iter()
                        .find(|g| g.index == RESET_GPU)
                        .map(|g| g.energy)
                };
                // Increase before the reset plus after it.
                let mut total = 0.0;
                let mut prev: Option<f64> = None;
                for sc in s {
                    if let Some(v) = g(sc) {
                        if let Some(p) = prev
                            && v >= p
                        {
                            total += v - p;
                        }
                        prev = Some(v);
                    }
                }
                total
            };
            if min < 0.0 || (sum - full).abs() > 0.02 * full {
                failures.push(format!(
                    "energy across the counter reset: sum {sum:.0} J, min {min}, scraped increase {full:.0} J"
                ));
            }
        }
        if failures.iter().any(|f| f.contains("< 0.95")) {
            failures.push(format!("ingest warnings: {}", report.warnings.join(" | ")));
        }
        outcomes.push(Outcome {
            src,
            rate,
            perturbed,
            scores,
            failures,
            seconds: t.elapsed().as_secs_f64(),
        });
    }
    // The matrix, then the verdict.
    let mut table = String::new();
    let _ = writeln!(
        table,
        "sampling matrix ({prepared:.1} s to prepare the TSDB, {:.1} s in all)",
        t0.elapsed().as_secs_f64()
    );
    for o in &outcomes {
        let min = o.scores.iter().map(|s| s.1).fold(1.0f64, f64::min);
        let _ = writeln!(
            table,
            "  {:<24} {:>6} ms {:<9} min score {:.3}  {:.1} s{}",
            o.src.name(),
            o.rate,
            if o.perturbed { "perturbed" } else { "clean" },
            min,
            o.seconds,
            if o.failures.is_empty() {
                String::new()
            } else {
                format!("\n      {}", o.failures.join("\n      "))
            }
        );
    }
    println!("{table}");
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.failures.is_empty()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} cells failed:\n{table}",
        failed.len(),
        outcomes.len()
    );
}

/// Two scrape targets at 15 s and 60 s in one Prometheus: each entity's rows at its own
/// interval, the query step at the finer one, the planted idle models found with their spans;
/// and an explicit `--interval` finer than a 60 s Prometheus says, with numbers, what it does.
#[test]
fn mixed_scrape_intervals_and_a_finer_interval_in_one_prometheus() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mixed, coarse) = (START, START + DAY);
    let keep = |mut s: Vec<Scrape>, gpus: std::ops::RangeInclusive<u32>| -> Vec<Scrape> {
        for sc in &mut s {
            sc.gpus.retain(|g| gpus.contains(&g.index));
            sc.procs.retain(|p| gpus.contains(&p.gpu));
        }
        s
    };
    let mut om = Om::default();
    tessera_om(
        &mut om,
        &keep(scrapes(mixed, 15_000, false), 0..=2),
        "node-a",
    );
    tessera_om(
        &mut om,
        &keep(scrapes(mixed, 60_000, false), 3..=5),
        "node-b",
    );
    tessera_om(&mut om, &scrapes(coarse, 60_000, false), NODE);
    let om_path = dir.path().join("mixed.om");
    om.write(&om_path);
    let server = prom::serve_file(dir.path(), &om_path, "720h");
    let source = Source::prometheus(server.url.clone());

    let (frames, analysis, report) = analyze(
        std::slice::from_ref(&source),
        mixed,
        mixed + RANGE,
        Api::QueryRange,
    );
    let w = report.warnings.join("\n");
    assert!(w.contains("query step 15 s"), "{w}");
    // GPUs and their processes: 3 + 3 at 15 s, 3 + 2 at 60 s.
    assert!(
        w.contains("15 s rows (6 entities), 60 s rows (5 entities)"),
        "{w}"
    );
    // Through the remote-read API: the same rows per entity and the same findings.
    let (_, rr, rr_report) = analyze(
        std::slice::from_ref(&source),
        mixed,
        mixed + RANGE,
        Api::RemoteRead,
    );
    let rw = rr_report.warnings.join("\n");
    assert!(
        rw.contains("15 s rows (6 entities), 60 s rows (5 entities)")
            && rw.contains("read raw samples through the remote-read API"),
        "{rw}"
    );
    assert_eq!(
        serde_json::to_value(&analysis.findings).expect("json"),
        serde_json::to_value(&rr.findings).expect("json"),
    );
    let rows = frames
        .gpu
        .clone()
        .group_by([col("gpu")])
        .agg([
            col("interval_ms").min().alias("lo"),
            col("interval_ms").max().alias("hi"),
        ])
        .sort(["gpu"], SortMultipleOptions::default())
        .collect()
        .expect("rows");
    let lo: Vec<i64> = rows
        .column("lo")
        .expect("lo")
        .i64()
        .expect("i64")
        .into_no_null_iter()
        .collect();
    let hi: Vec<i64> = rows
        .column("hi")
        .expect("hi")
        .i64()
        .expect("i64")
        .into_no_null_iter()
        .collect();
    assert_eq!(lo, [15_000, 15_000, 15_000, 60_000, 60_000, 60_000]);
    assert_eq!(lo, hi);
    let truth = GroundTruth::compute(
        &scenario(mixed),
        chrono::DateTime::from_timestamp_millis(mixed).expect("start"),
        chrono::DateTime::from_timestamp_millis(mixed + RANGE).expect("end"),
    );
    let (scores, _) = score(&analysis, &frames, &truth, mixed, 60_000);
    for (what, v) in &scores {
        // Off-peak and consolidation span two nodes here; the idle models are the point.
        if what.starts_with("idle") {
            assert!(*v >= 0.95, "{what} {v:.3}: {scores:?}");
        }
    }

    // An explicit 10 s interval on a 60 s Prometheus.
    let opts = IngestOptions {
        since: Some(coarse),
        until: Some(coarse + RANGE + 1),
        interval_ms: Some(10_000),
        ..IngestOptions::default()
    };
    let (frames, report) = ingest::ingest(&[source], &opts).expect("ingest");
    let w = report.warnings.join("\n");
    assert!(
        w.contains("83% of 10 s steps hold no sample: this source scrapes every 60 s; using 60 s"),
        "{w}"
    );
    let iv = frames
        .gpu
        .select([
            col("interval_ms").min().alias("lo"),
            col("interval_ms").max().alias("hi"),
        ])
        .collect()
        .expect("iv");
    assert_eq!(
        iv.column("lo").expect("lo").i64().expect("i").get(0),
        Some(60_000)
    );
    assert_eq!(
        iv.column("hi").expect("hi").i64().expect("i").get(0),
        Some(60_000)
    );
}

/// A per-pod trace sampled every 57 s (a public trace's rate), jittered, in the generic CSV:
/// the idle-loaded pods are found with no flag, and only they.
#[test]
fn a_57_second_pod_trace_needs_no_flag() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("pods.csv");
    let mut text = String::from("timestamp,entity,metric,value,kind,pod\n");
    let start = START / 1000;
    let mut idle = BTreeSet::new();
    for p in 0..12u64 {
        let pod = format!("pod-{p:02}");
        // Every third pod holds 12 GiB doing nothing for 3 h in the middle of 6 h; the others
        // work at least every few minutes.
        let is_idle = p % 3 == 0;
        if is_idle {
            idle.insert(pod.clone());
        }
        for k in 1..=(6 * 3600 / 57) {
            let t = start + 57 * k + ((unit(p, k as u64) - 0.5) * 10.0) as i64;
            let quiet = is_idle && (start + 5400..start + 16_200).contains(&t);
            let sm = if quiet || unit(p + 99, k as u64) < 0.5 {
                0.0
            } else {
                0.4
            };
            let _ = writeln!(text, "{t},{pod},sm_ratio,{sm},process,{pod}");
            let _ = writeln!(
                text,
                "{t},{pod},memory_used_bytes,12884901888,process,{pod}"
            );
        }
    }
    std::fs::write(&path, text).expect("csv");
    let (_, analysis, report) =
        analyze(&[Source::csv(path)], START, START + RANGE, Api::QueryRange);
    let found: BTreeSet<String> = analysis
        .findings
        .iter()
        .filter(|f| f.detector == "idle_loaded")
        .filter_map(|f| f.entity.pod.clone())
        .collect();
    assert_eq!(found, idle, "{:?}", report.warnings);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("60 s rows (12 entities)")),
        "{:?}",
        report.warnings
    );
}
