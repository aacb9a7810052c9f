//! One Slurm job's GPU use and a verdict a user understands in one screen, in the manner of
//! Princeton's `jobstats`: the GPUs the job's processes ran on, how long, how busy (mean and
//! p95), the memory they held at peak against what the GPU (or MIG instance) has, the spans in
//! which the job held memory while it did nothing (the advisor's idle-loaded detector, run on the
//! job's rows only), and plain-language advice.
//!
//! A job is the process rows whose `slurm_job_id` is its id (attribution from the job's cgroup,
//! `docs/attribution.md`). Activity per row is the first present of the processes' own SM
//! utilisation (summed over the job's processes on that GPU), the MIG instance's SM activity, the
//! GPU's SM activity, the GPU's busy ratio — the idle detector's order.
//!
//! Energy (`energy`): the job's part of each GPU interval's energy, by share of activity.
//!
//! [`job_rows`] reads one partition's frames (call it per node partition; a multi-node job spans
//! several); [`JobRows::merge`] adds partitions up; [`summarise`] is pure. No I/O, no clock.

use std::collections::BTreeMap;

use polars::prelude::*;
use serde::Serialize;

use crate::advisor::{self, AdvisorError, Evidence, Params};
use crate::frames::FramesError;
use crate::frames::columns::{f64s, i64s, strs};

/// Why a job's rows could not be read or judged.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("reading frames: {0}")]
    Polars(#[from] PolarsError),
    #[error(transparent)]
    Frames(#[from] FramesError),
    /// The idle detector run on the job's rows failed.
    #[error(transparent)]
    Advisor(#[from] AdvisorError),
    #[error(transparent)]
    Energy(#[from] crate::energy::EnergyError),
}
use crate::frames::Frames;
use crate::stats::quantile;
use crate::times::fmt_ms;

mod energy;
mod render;
mod runs;
pub mod work;
pub use render::{render_table, render_worst};
pub use runs::{JobRun, RUN_GAP_MS};

const GIB: f64 = 1_073_741_824.0;
const HOUR_MS: f64 = 3_600_000.0;

/// Version of the `tessera job --format json` document.
pub const JOB_JSON_VERSION: u32 = 1;

/// Where a row's activity came from, most direct first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivitySource {
    ProcessSm,
    MigSmActive,
    GpuSmActive,
    GpuBusy,
}

/// A device the job used: a whole GPU, or a MIG instance of one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Device {
    pub node: String,
    pub gpu: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
}

/// One row of the job on one device: the job's processes on it summed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    pub ts: i64,
    pub interval_ms: i64,
    /// Σ of the processes' memory maxima, bytes.
    pub memory: Option<f64>,
    pub activity: Option<(f64, ActivitySource)>,
    /// The device's memory, bytes.
    pub capacity: Option<f64>,
}

/// The job's rows, by device (`ts` order), and its idle-loaded evidence.
#[derive(Debug, Clone, Default)]
pub struct JobRows {
    pub devices: BTreeMap<Device, Vec<Row>>,
    /// Devices the job held by allocation without running a process on them.
    pub held_only: std::collections::BTreeSet<Device>,
    pub idle: Vec<advisor::evidence::IdleEvidence>,
    /// The job's energy on each device, J (devices whose GPU's energy is known).
    pub energy: BTreeMap<Device, f64>,
    /// The MIG profile of each MIG instance the job used (`3g.40gb`), where the data names it.
    pub profiles: BTreeMap<Device, String>,
}

impl JobRows {
    /// Adds another partition's rows (a device lives in one partition: its node's).
    pub fn merge(&mut self, other: JobRows) {
        for (d, rows) in other.devices {
            let e = self.devices.entry(d).or_default();
            e.extend(rows);
            e.sort_by_key(|r| r.ts);
        }
        self.idle.extend(other.idle);
        self.held_only.extend(other.held_only);
        for (d, j) in other.energy {
            *self.energy.entry(d).or_default() += j;
        }
        self.profiles.extend(other.profiles);
    }
}

fn gib(b: f64) -> f64 {
    (b / GIB * 100.0).round() / 100.0
}

fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

type Triple = (Option<f64>, Option<f64>, Option<f64>);
type Pair = (Option<f64>, Option<f64>);

/// The job `job`'s rows in one partition (empty when the job has none there).
pub fn job_rows(frames: &Frames, job: &str, params: &Params) -> Result<JobRows, JobError> {
    Ok(rows_by_job(frames, Some(job), params)?
        .remove(job)
        .unwrap_or_default())
}

/// The Slurm jobs of one partition: their processes' `slurm_job_id` and the jobs holding its
/// devices (`holder_slurm_job_id`), each once (the owners' `sacct` asks about these).
pub fn ids(frames: &Frames) -> Result<std::collections::BTreeSet<String>, JobError> {
    let p = frames
        .process
        .clone()
        .filter(col("slurm_job_id").is_not_null())
        .select([col("slurm_job_id")])
        .unique(None, UniqueKeepStrategy::Any)
        .collect()?;
    let mut out = std::collections::BTreeSet::new();
    let jobs = strs(&p, "slurm_job_id")?;
    out.extend((0..p.height()).filter_map(|i| jobs.get(i).map(str::to_string)));
    let held = held_rows(frames, None)?;
    if held.height() > 0 {
        let jobs = strs(&held, "job")?;
        out.extend((0..held.height()).filter_map(|i| jobs.get(i).map(str::to_string)));
    }
    Ok(out)
}

/// Every job's rows in one partition (`only`: one job's), by job id.
pub fn rows_by_job(
    frames: &Frames,
    only: Option<&str>,
    params: &Params,
) -> Result<BTreeMap<String, JobRows>, JobError> {
    let process = frames.process.clone().filter(match only {
        Some(job) => col("slurm_job_id").eq(lit(job)),
        None => col("slurm_job_id").is_not_null(),
    });
    let p = process
        .clone()
        .select([
            col("slurm_job_id"),
            col("node"),
            col("gpu").cast(DataType::Int64),
            col("uuid"),
            col("gpu_instance").cast(DataType::Int64),
            crate::frames::columns::ts_ms(),
            col("interval_ms").cast(DataType::Int64),
            col("memory_used_max_bytes").cast(DataType::Float64),
            col("sm_mean"),
        ])
        .collect()?;
    let n = p.height();
    let held = held_rows(frames, only)?;
    let jobs = strs(&p, "slurm_job_id")?;
    let (node, gpu, uuid, gi, ts, iv, mem, sm) = (
        strs(&p, "node")?,
        i64s(&p, "gpu")?,
        strs(&p, "uuid")?,
        i64s(&p, "gpu_instance")?,
        i64s(&p, "ts")?,
        i64s(&p, "interval_ms")?,
        f64s(&p, "memory_used_max_bytes")?,
        f64s(&p, "sm_mean")?,
    );
    // The job's processes summed per device and row.
    struct Acc {
        interval: i64,
        memory: Option<f64>,
        sm: Option<f64>,
    }
    let mut acc: BTreeMap<(&str, Device, i64), Acc> = BTreeMap::new();
    let (mut from, mut until) = (i64::MAX, i64::MIN);
    for i in 0..n {
        let (Some(job), Some(node), Some(g), Some(t)) =
            (jobs.get(i), node.get(i), gpu.get(i), ts.get(i))
        else {
            continue;
        };
        let d = Device {
            node: node.to_string(),
            gpu: g as u32,
            uuid: uuid.get(i).map(str::to_string),
            gpu_instance: gi.get(i).map(|v| v as u32),
        };
        let interval = iv.get(i).unwrap_or(0);
        from = from.min(t - interval);
        until = until.max(t);
        let a = acc.entry((job, d, t)).or_insert(Acc {
            interval,
            memory: None,
            sm: None,
        });
        a.interval = a.interval.max(interval);
        if let Some(m) = mem.get(i) {
            a.memory = Some(a.memory.unwrap_or(0.0) + m);
        }
        if let Some(s) = sm.get(i) {
            a.sm = Some((a.sm.unwrap_or(0.0) + s).min(1.0));
        }
    }
    // Devices the job held by allocation (Slurm's gres) where none of its processes ran: rows
    // with no memory of the job's and the device's own activity.
    let mut held_only: std::collections::BTreeSet<(String, Device)> = Default::default();
    let ran: std::collections::BTreeSet<(&str, Device)> =
        acc.keys().map(|(j, d, _)| (*j, d.clone())).collect();
    let (hj, hn, hg, hu, hgi, ht, hiv) = (
        strs(&held, "job")?,
        strs(&held, "node")?,
        i64s(&held, "gpu")?,
        strs(&held, "uuid")?,
        i64s(&held, "gpu_instance")?,
        i64s(&held, "ts")?,
        i64s(&held, "interval_ms")?,
    );
    for i in 0..held.height() {
        let (Some(job), Some(node), Some(g), Some(t)) =
            (hj.get(i), hn.get(i), hg.get(i), ht.get(i))
        else {
            continue;
        };
        let d = Device {
            node: node.to_string(),
            gpu: g as u32,
            uuid: hu.get(i).map(str::to_string),
            gpu_instance: hgi.get(i).map(|v| v as u32),
        };
        let interval = hiv.get(i).unwrap_or(0);
        if ran.contains(&(job, d.clone())) {
            continue;
        }
        held_only.insert((job.to_string(), d.clone()));
        from = from.min(t - interval);
        until = until.max(t);
        acc.entry((job, d, t)).or_insert(Acc {
            interval,
            memory: Some(0.0),
            sm: None,
        });
    }
    if acc.is_empty() {
        return Ok(BTreeMap::new());
    }
    // The devices' own rows over the job's range: activity and capacity.
    let nodes: std::collections::BTreeSet<&str> =
        acc.keys().map(|(_, d, _)| d.node.as_str()).collect();
    let on_nodes = nodes
        .iter()
        .fold(lit(false), |e, n| e.or(col("node").eq(lit(*n))));
    let in_range = on_nodes
        .and(crate::frames::columns::ts_ms().gt(lit(from)))
        .and(crate::frames::columns::ts_ms().lt_eq(lit(until)));
    let g = frames
        .gpu
        .clone()
        .filter(in_range.clone())
        .select([
            col("node"),
            col("gpu").cast(DataType::Int64),
            crate::frames::columns::ts_ms(),
            col("sm_active_mean"),
            col("busy_mean"),
            col("memory_total_bytes").cast(DataType::Float64),
        ])
        .collect()?;
    // (node, gpu, ts) → (SM activity, busy, memory).
    let mut gpu_at: BTreeMap<(&str, i64, i64), Triple> = BTreeMap::new();
    let (gn, gg, gt, gsm, gbusy, gcap) = (
        strs(&g, "node")?,
        i64s(&g, "gpu")?,
        i64s(&g, "ts")?,
        f64s(&g, "sm_active_mean")?,
        f64s(&g, "busy_mean")?,
        f64s(&g, "memory_total_bytes")?,
    );
    for i in 0..g.height() {
        if let (Some(n), Some(x), Some(t)) = (gn.get(i), gg.get(i), gt.get(i)) {
            gpu_at.insert((n, x, t), (gsm.get(i), gbusy.get(i), gcap.get(i)));
        }
    }
    let mut m = frames.mig.clone().filter(in_range.clone());
    let profile = match m.collect_schema()?.get("profile") {
        Some(_) => col("profile").cast(DataType::String),
        None => lit(NULL).cast(DataType::String).alias("profile"),
    };
    let m = m
        .select([
            col("node"),
            col("gpu").cast(DataType::Int64),
            col("gpu_instance").cast(DataType::Int64),
            crate::frames::columns::ts_ms(),
            col("sm_active_mean"),
            col("memory_total_bytes").cast(DataType::Float64),
            profile,
        ])
        .collect()?;
    let mut profiles: BTreeMap<(&str, i64, i64), &str> = BTreeMap::new();
    // (node, gpu, GPU instance, ts) → (SM activity, memory).
    let mut mig_at: BTreeMap<(&str, i64, i64, i64), Pair> = BTreeMap::new();
    let (mn, mg, mgi, mt, msm, mcap) = (
        strs(&m, "node")?,
        i64s(&m, "gpu")?,
        i64s(&m, "gpu_instance")?,
        i64s(&m, "ts")?,
        f64s(&m, "sm_active_mean")?,
        f64s(&m, "memory_total_bytes")?,
    );
    let mprofile = strs(&m, "profile")?;
    for i in 0..m.height() {
        if let (Some(n), Some(x), Some(y), Some(t)) = (mn.get(i), mg.get(i), mgi.get(i), mt.get(i))
        {
            if let Some(p) = mprofile.get(i) {
                profiles.insert((n, x, y), p);
            }
            mig_at.insert((n, x, y, t), (msm.get(i), mcap.get(i)));
        }
    }
    let mut out: BTreeMap<String, JobRows> = BTreeMap::new();
    for ((job, d, t), a) in acc {
        let gk = (d.node.as_str(), i64::from(d.gpu), t);
        let (g_sm, g_busy, g_cap) = gpu_at.get(&gk).copied().unwrap_or((None, None, None));
        let (m_sm, m_cap) = d
            .gpu_instance
            .and_then(|gi| mig_at.get(&(d.node.as_str(), i64::from(d.gpu), i64::from(gi), t)))
            .copied()
            .unwrap_or((None, None));
        let whole = d.gpu_instance.is_none();
        let activity =
            a.sm.map(|v| (v, ActivitySource::ProcessSm))
                .or(m_sm.map(|v| (v, ActivitySource::MigSmActive)))
                .or(g_sm
                    .filter(|_| whole)
                    .map(|v| (v, ActivitySource::GpuSmActive)))
                .or(g_busy
                    .filter(|_| whole)
                    .map(|v| (v, ActivitySource::GpuBusy)));
        let row = Row {
            ts: t,
            interval_ms: a.interval,
            memory: a.memory,
            activity,
            capacity: if whole { g_cap } else { m_cap },
        };
        let rows = out.entry(job.to_string()).or_default();
        if held_only.contains(&(job.to_string(), d.clone())) {
            rows.held_only.insert(d.clone());
        }
        if let Some(name) = d
            .gpu_instance
            .and_then(|gi| profiles.get(&(gk.0, gk.1, i64::from(gi))))
        {
            rows.profiles.insert(d.clone(), name.to_string());
        }
        rows.devices.entry(d).or_default().push(row);
    }
    for (job, by_device) in energy::job_energy(frames, only, (from, until))? {
        if let Some(rows) = out.get_mut(&job) {
            rows.energy = by_device;
        }
    }
    // Idle-loaded spans: the advisor's detector on the job's rows and its devices' rows.
    let job_frames = Frames {
        gpu: frames.gpu.clone().filter(in_range.clone()),
        mig: frames.mig.clone().filter(in_range),
        process,
    };
    let analysis = advisor::analyze(
        &job_frames,
        params,
        Some((from, until)),
        Vec::new(),
        &[advisor::evidence::IdleEvidence::DETECTOR.to_string()],
    )?;
    for f in analysis.findings {
        if let Evidence::IdleLoaded(e) = f.evidence
            && let Some(job) = f.entity.slurm_job
            && let Some(rows) = out.get_mut(&job)
        {
            rows.idle.push(e);
        }
    }
    Ok(out)
}

/// Rows of the devices a Slurm job holds by allocation (`holder_slurm_job_id`, `holders` ≥ 1;
/// whole GPUs outside MIG mode, MIG instances): columns job, node, gpu, uuid, gpu_instance
/// (null for a whole GPU), ts, interval_ms. Empty when the frames have no holders.
fn held_rows(frames: &Frames, only: Option<&str>) -> Result<DataFrame, JobError> {
    let by_job = |lf: LazyFrame| {
        let holder = col("holder_slurm_job_id");
        lf.filter(
            col("holders")
                .gt(lit(0u32))
                .fill_null(lit(false))
                .and(match only {
                    Some(job) => holder.eq(lit(job)),
                    None => holder.is_not_null(),
                }),
        )
    };
    let mut gpu = frames.gpu.clone();
    if gpu.collect_schema()?.get("holders").is_none() {
        return Ok(DataFrame::empty());
    }
    let cols = |gi: Expr| {
        [
            col("holder_slurm_job_id").alias("job"),
            col("node"),
            col("gpu").cast(DataType::Int64),
            col("uuid"),
            gi.cast(DataType::Int64).alias("gpu_instance"),
            crate::frames::columns::ts_ms(),
            col("interval_ms").cast(DataType::Int64),
        ]
    };
    let g = by_job(gpu)
        .filter(col("mig_enabled").fill_null(lit(false)).not())
        .select(cols(lit(NULL)));
    let m = by_job(frames.mig.clone()).select(cols(col("gpu_instance")));
    Ok(concat([g, m], UnionArgs::default())?.collect()?)
}

/// One device's share of the job.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceUse {
    #[serde(flatten)]
    pub device: Device,
    pub hours: f64,
    pub activity_mean: Option<f64>,
    pub activity_p95: Option<f64>,
    pub memory_peak_gib: Option<f64>,
    pub memory_total_gib: Option<f64>,
    /// The job held the device by allocation and never ran a process on it.
    pub held_only: bool,
    /// The job's part of the device's energy (by share of activity); null when unknown.
    pub energy_kwh: Option<f64>,
}

/// A span in which the job held memory and did nothing.
#[derive(Debug, Clone, Serialize)]
pub struct IdleSpan {
    pub start: String,
    pub end: String,
    pub minutes: f64,
    pub memory_max_gib: f64,
}

/// How well the job used what it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rating {
    /// Mean activity at least [`GOOD`].
    Good,
    /// Some use, below [`GOOD`].
    Underused,
    /// Mean activity below [`IDLE`], or held memory idle most of the time.
    Idle,
    /// No activity signal for the job's GPUs: neither good nor bad, and never ranked among
    /// the worst.
    Unknown,
}

impl Rating {
    /// The rating's JSON word (`good`, `underused`, `idle`, `unknown`).
    pub fn as_str(self) -> &'static str {
        match self {
            Rating::Good => "good",
            Rating::Underused => "underused",
            Rating::Idle => "idle",
            Rating::Unknown => "unknown",
        }
    }
}

/// Mean activity from which a job uses its GPUs well.
pub const GOOD: f64 = 0.5;
/// Mean activity below which a job's GPUs were mostly idle.
pub const IDLE: f64 = 0.1;

/// The job's summary: `tessera job`'s document.
#[derive(Debug, Clone, Serialize)]
pub struct JobSummary {
    pub version: u32,
    pub job: String,
    /// The job's owner: its team's contact (`slurm job N` in `--owners`, `crate::owners`);
    /// `null`: unknown (the history has no user or account).
    pub owner: Option<String>,
    pub start: String,
    pub end: String,
    /// Hours the job ran: the sum of its runs' (not `end − start`: an id can be reused).
    pub duration_hours: f64,
    /// The id's runs in time order (one unless the id was reused: `runs`).
    pub runs: Vec<JobRun>,
    pub gpu_hours: f64,
    pub devices: Vec<DeviceUse>,
    pub activity_mean: Option<f64>,
    pub activity_p95: Option<f64>,
    /// The most used source of the activity values.
    pub activity_source: Option<ActivitySource>,
    pub memory_peak_gib: Option<f64>,
    /// Σ of the devices' `energy_kwh`; null when no device's is known.
    pub energy_kwh: Option<f64>,
    pub idle_hours: f64,
    pub idle_spans: Vec<IdleSpan>,
    /// `gpu_hours` × (1 − mean activity): what the job held and did not use; `null` when the job
    /// has no activity signal (unknown, not all unused).
    pub unused_gpu_hours: Option<f64>,
    /// The work the job counted, per unit, and per GPU-hour it held ([`work`]; `tessera job`
    /// with a `prometheus:` source); `null` when unknown or when no counter carries the job's
    /// label, `work_note` saying which.
    pub work: Option<Vec<work::JobWork>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_note: Option<String>,
    pub rating: Rating,
    /// The advice, one sentence a line.
    pub verdict: Vec<String>,
}

/// Adds a partition's jobs to `into` (a job may run on several nodes).
pub fn merge_jobs(into: &mut BTreeMap<String, JobRows>, part: BTreeMap<String, JobRows>) {
    for (job, rows) in part {
        into.entry(job).or_default().merge(rows);
    }
}

/// Every job's summary, worst first (most unused GPU-hours, then most idle hours, then id; a
/// job rated `unknown` — no activity signal — after every judged one), at most `top` of them.
pub fn worst(jobs: &BTreeMap<String, JobRows>, top: usize) -> Vec<JobSummary> {
    let mut all: Vec<JobSummary> = jobs
        .iter()
        .filter_map(|(id, rows)| summarise(id, rows))
        .collect();
    all.sort_by(|a, b| {
        (a.rating == Rating::Unknown)
            .cmp(&(b.rating == Rating::Unknown))
            .then(
                b.unused_gpu_hours
                    .unwrap_or(0.0)
                    .total_cmp(&a.unused_gpu_hours.unwrap_or(0.0)),
            )
            .then(b.idle_hours.total_cmp(&a.idle_hours))
            .then(a.job.cmp(&b.job))
    });
    all.truncate(top);
    all
}

/// The summary of a job's rows; `None` when it has none.
pub fn summarise(job: &str, rows: &JobRows) -> Option<JobSummary> {
    let all: Vec<&Row> = rows.devices.values().flatten().collect();
    if all.is_empty() {
        return None;
    }
    let start = all.iter().map(|r| r.ts - r.interval_ms).min()?;
    let end = all.iter().map(|r| r.ts).max()?;
    let mut devices = Vec::new();
    let mut sources: BTreeMap<ActivitySource, usize> = BTreeMap::new();
    let (mut w_act, mut w) = (0.0, 0.0);
    let mut acts_all = Vec::new();
    let mut peak: Option<f64> = None;
    for (d, rs) in &rows.devices {
        let hours: f64 = rs.iter().map(|r| r.interval_ms as f64).sum::<f64>() / HOUR_MS;
        let (mut dw_act, mut dw) = (0.0, 0.0);
        let mut acts = Vec::new();
        for r in rs {
            if let Some((a, s)) = r.activity {
                dw_act += a * r.interval_ms as f64;
                dw += r.interval_ms as f64;
                acts.push(a);
                *sources.entry(s).or_default() += 1;
            }
        }
        w_act += dw_act;
        w += dw;
        acts_all.extend(acts.iter().copied());
        let mem = rs.iter().filter_map(|r| r.memory).reduce(f64::max);
        peak = match (peak, mem) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        devices.push(DeviceUse {
            device: d.clone(),
            hours: r3(hours),
            activity_mean: (dw > 0.0).then(|| r3(dw_act / dw)),
            activity_p95: quantile(&mut acts, 0.95).map(r3),
            memory_peak_gib: mem.map(gib),
            memory_total_gib: rs
                .iter()
                .filter_map(|r| r.capacity)
                .reduce(f64::max)
                .map(gib),
            held_only: rows.held_only.contains(d),
            energy_kwh: rows.energy.get(d).map(|j| r3(j / 3.6e6)),
        });
    }
    let gpu_hours = r3(devices.iter().map(|d| d.hours).sum());
    let mean = (w > 0.0).then(|| r3(w_act / w));
    let p95 = quantile(&mut acts_all, 0.95).map(r3);
    let source = sources
        .iter()
        .max_by_key(|(s, n)| (**n, std::cmp::Reverse(**s)))
        .map(|(s, _)| *s);
    let mut idle_spans: Vec<IdleSpan> = rows
        .idle
        .iter()
        .flat_map(|e| {
            e.spans.iter().map(|s| IdleSpan {
                start: s.start.clone(),
                end: s.end.clone(),
                minutes: s.minutes,
                memory_max_gib: s.memory_max_gib,
            })
        })
        .collect();
    idle_spans.sort_by(|a, b| a.start.cmp(&b.start));
    let idle_hours = r3(rows.idle.iter().map(|e| e.idle_hours).sum::<f64>() + 0.0);
    let spans = runs::runs(all.iter().copied());
    let duration_hours = r3(spans.iter().map(|(s, e)| (e - s) as f64).sum::<f64>() / HOUR_MS);
    let idle_share = if gpu_hours > 0.0 {
        idle_hours / gpu_hours
    } else {
        0.0
    };
    let rating = match mean {
        Some(m) if m >= GOOD && idle_share < 0.5 => Rating::Good,
        Some(m) if m < IDLE || idle_share >= 0.5 => Rating::Idle,
        Some(_) => Rating::Underused,
        // Without activity the job's use cannot be judged (idle spans need activity too).
        None => Rating::Unknown,
    };
    let mut summary = JobSummary {
        version: JOB_JSON_VERSION,
        job: job.to_string(),
        owner: None,
        start: fmt_ms(start),
        end: fmt_ms(end),
        duration_hours,
        runs: runs::describe(&spans),
        gpu_hours,
        devices,
        activity_mean: mean,
        activity_p95: p95,
        activity_source: source,
        memory_peak_gib: peak.map(gib),
        energy_kwh: (!rows.energy.is_empty())
            .then(|| r3(rows.energy.values().sum::<f64>() / 3.6e6)),
        idle_hours,
        idle_spans,
        unused_gpu_hours: mean.map(|m| r3(gpu_hours * (1.0 - m.clamp(0.0, 1.0)) + 0.0)),
        work: None,
        work_note: None,
        rating,
        verdict: Vec::new(),
    };
    summary.verdict = render::verdict(&summary);
    Some(summary)
}

pub(crate) fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}
