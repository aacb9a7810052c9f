//! The advisor: detectors over the canonical frames (`docs/frames.md`) that find waste and
//! opportunity, each returning [`Finding`]s with evidence and a suggested action
//! (`docs/findings.md`).
//!
//! Every detector is a pure function of the frames and its [`Params`]: it reads, never writes,
//! and does no I/O besides collecting the lazy frames it is given. Detectors are listed in one
//! registry ([`registry`]); [`analyze`] runs them all and assembles a versioned [`Analysis`].
//!
//! Detectors (one module each):
//! - [`idle`] — idle-loaded models (memory held, no activity, for an hour or more);
//! - [`consolidation`] — whole-GPU workloads whose time-aligned combined demand fits on fewer
//!   GPUs;
//! - [`offpeak`] — hour-of-week windows where GPUs are reliably free (for training);
//! - [`busy`] — GPUs busy by `utilization.gpu` while their SMs are mostly idle;
//! - [`allocated`] — GPUs and MIG instances held by a pod or Slurm job with nothing running.
//!
//! [`plan_out`] turns the consolidation findings into a plan file's moves (docs/plan.md);
//! [`actions`] resolves the findings into one recommendation per workload.
//!
//! This module does not read sources (that is `ingest`), plan MIG layouts, or render reports.

pub mod actions;
pub mod allocated;
pub mod busy;
pub mod consolidation;
pub mod evidence;
pub mod idle;
pub mod offpeak;
pub mod plan_out;
pub mod scheduler;

use std::fmt::Write as _;

use chrono_tz::Tz;
use polars::prelude::*;
use serde::Serialize;
use serde_json::Value;

pub use evidence::Evidence;

use crate::frames::{Frames, Table};
use crate::times::fmt_ms;

/// Version of the findings JSON document (`docs/findings.md`).
pub const FINDINGS_VERSION: u32 = 1;

/// Errors of the advisor.
#[derive(Debug, thiserror::Error)]
pub enum AdvisorError {
    #[error("reading frames: {0}")]
    Polars(#[from] PolarsError),
    #[error(transparent)]
    Frames(#[from] crate::frames::FramesError),
    #[error("bad parameter {name}: {reason}")]
    Param { name: &'static str, reason: String },
    /// A worker thread of [`analyze_parts`] panicked.
    #[error("internal error: an advisor worker thread failed")]
    Worker,
    /// A detector was handed another detector's partial result (a bug in [`analyze_parts`]).
    #[error("internal error: detector {0} got a partial result of the wrong type")]
    PartialType(&'static str),
}

/// What a finding is about.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Entity {
    /// `process`, `mig`, `gpu`, `gpu_model` or `fleet`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_uuid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm_job: Option<String>,
}

impl Entity {
    /// A short human label: `gpu-node-1/GPU1 pid 1234 (python3, research/embed-0)`.
    pub fn label(&self) -> String {
        let mut s = String::new();
        if let Some(n) = &self.node {
            s.push_str(n);
        }
        match (self.gpu, &self.uuid) {
            (Some(g), _) => {
                let _ = write!(s, "/GPU{g}");
            }
            (None, Some(u)) => {
                let _ = write!(s, "/{u}");
            }
            _ => {}
        }
        if let Some(gi) = self.gpu_instance {
            let _ = write!(s, "/GI{gi}");
        }
        if let Some(m) = &self.model
            && self.node.is_none()
        {
            s.push_str(m);
        }
        if let Some(p) = self.pid {
            let _ = write!(s, " pid {p}");
        }
        let mut who = Vec::new();
        if let Some(p) = &self.process {
            who.push(p.clone());
        }
        match (&self.namespace, &self.pod) {
            (Some(ns), Some(p)) => who.push(format!("{ns}/{p}")),
            (None, Some(p)) => who.push(p.clone()),
            _ => {}
        }
        if let Some(j) = &self.slurm_job {
            who.push(format!("slurm job {j}"));
        }
        if !who.is_empty() {
            let _ = write!(s, " ({})", who.join(", "));
        }
        if s.is_empty() {
            s.push_str(&self.kind);
        }
        s
    }
}

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

/// One finding: a stable id, what it is about, one line saying what was found, a suggested
/// action, and detector-specific evidence (`docs/findings.md`), typed ([`Evidence`]: the JSON
/// document is its serde form). Built by [`Finding::new`].
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Stable across runs for the same detector and entity (`idle_loaded-3f9a0c1d2b4e5f60`).
    pub id: String,
    /// The detector of `Finding::details`.
    pub detector: &'static str,
    pub severity: Severity,
    pub entity: Entity,
    pub summary: String,
    pub action: String,
    /// What the detector measured, typed; serialised as the document's `evidence` object.
    #[serde(serialize_with = "evidence_json")]
    pub evidence: Evidence,
}

/// Serialises evidence through [`Evidence::to_json`]: objects with their keys in alphabetical
/// order (off-peak's `type` tag among them), as `docs/findings.md` shows them.
fn evidence_json<S: serde::Serializer>(e: &Evidence, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(e)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

impl Finding {
    /// A finding of the detector whose evidence `details` is.
    pub fn new(
        id: String,
        severity: Severity,
        entity: Entity,
        summary: String,
        action: String,
        details: impl Into<Evidence>,
    ) -> Finding {
        let details = details.into();
        Finding {
            id,
            detector: details.detector(),
            severity,
            entity,
            summary,
            action,
            evidence: details,
        }
    }
}

/// A stable finding id: the detector and a 64-bit FNV-1a hash of the identity parts (stable
/// across runs, platforms and releases — unlike `std`'s hasher).
pub fn finding_id(detector: &str, parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in std::iter::once(detector).chain(parts.iter().copied()) {
        for b in p.bytes().chain(std::iter::once(0x1f)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{detector}-{h:016x}")
}

/// Thresholds of every detector (each a `tessera analyze` flag).
#[derive(Debug, Clone)]
pub struct Params {
    pub idle: idle::IdleParams,
    pub consolidation: consolidation::ConsolidationParams,
    pub offpeak: offpeak::OffpeakParams,
    pub busy: busy::BusyParams,
    /// Time zone of schedules and hour-of-week profiles.
    pub tz: Tz,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            idle: idle::IdleParams::default(),
            consolidation: consolidation::ConsolidationParams::default(),
            offpeak: offpeak::OffpeakParams::default(),
            busy: busy::BusyParams::default(),
            tz: Tz::UTC,
        }
    }
}

/// A detector's result over one partition of the frames, combined by [`Detector::finish`].
pub type Partial = Box<dyn std::any::Any + Send>;

/// One detector of the registry (after tokio-console's lints: check, then format, then
/// summarise).
///
/// Detectors run in two phases so that a fleet can be analysed one node at a time in bounded
/// memory: [`partial`](Detector::partial) over each partition of the frames (every entity —
/// process, MIG instance, GPU — lives in exactly one partition), then
/// [`finish`](Detector::finish) over the partials. A detector's result must not depend on how
/// the rows were partitioned (a test compares the two).
pub trait Detector: Sync {
    /// Stable id, used in finding ids and JSON (`idle_loaded`).
    fn id(&self) -> &'static str;
    /// Human title.
    fn title(&self) -> &'static str;
    /// Checks the parameters before any data is read.
    fn validate(&self, _params: &Params) -> Result<(), AdvisorError> {
        Ok(())
    }
    /// The detector's work over one partition.
    fn partial(&self, frames: &Frames, params: &Params) -> Result<Partial, AdvisorError>;
    /// Combines every partition's partial into the output.
    fn finish(&self, parts: Vec<Partial>, params: &Params) -> Result<DetectorOutput, AdvisorError>;
    /// Runs over unpartitioned frames.
    fn check(&self, frames: &Frames, params: &Params) -> Result<DetectorOutput, AdvisorError> {
        self.validate(params)?;
        let p = self.partial(frames, params)?;
        self.finish(vec![p], params)
    }
}

/// Unboxes the partials of detector `id` (all of type `T`).
pub(crate) fn unbox<T: 'static>(
    id: &'static str,
    parts: Vec<Partial>,
) -> Result<Vec<T>, AdvisorError> {
    parts
        .into_iter()
        .map(|p| {
            p.downcast::<T>()
                .map(|b| *b)
                .map_err(|_| AdvisorError::PartialType(id))
        })
        .collect()
}

/// What one detector returns: its findings, one summary line and notes on the data it used
/// (which activity signal, what it could not judge).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DetectorOutput {
    pub findings: Vec<Finding>,
    pub summary: String,
    pub notes: Vec<String>,
    /// Detector-level result that is not a finding (e.g. the free-capacity profile).
    #[serde(skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

/// Every detector, in report order.
pub fn registry() -> Vec<Box<dyn Detector>> {
    vec![
        Box::new(idle::IdleLoaded),
        Box::new(consolidation::Consolidation),
        Box::new(offpeak::OffPeak),
        Box::new(busy::BusyNotWorking),
        Box::new(allocated::AllocatedUnused),
    ]
}

/// One detector's part of an [`Analysis`].
#[derive(Debug, Clone, Serialize)]
pub struct DetectorReport {
    pub id: &'static str,
    pub title: &'static str,
    pub findings: usize,
    pub summary: String,
    pub notes: Vec<String>,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

/// The versioned result of `tessera analyze` (`docs/findings.md`).
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    pub version: u32,
    /// Analysed range, RFC 3339 (first and last row end).
    pub from: Option<String>,
    pub until: Option<String>,
    pub sources: Vec<String>,
    pub tz: String,
    /// One recommendation per workload, ranked ([`actions`]; docs/findings.md "Actions"):
    /// without MIG layouts (the report plans them) and unpriced.
    pub actions: Vec<actions::Action>,
    pub detectors: Vec<DetectorReport>,
    pub findings: Vec<Finding>,
}

/// Columns the detectors read, per table.
pub const USED: [(Table, &[&str]); 3] = [
    (
        Table::Gpu,
        &[
            "node",
            "uuid",
            "gpu",
            "model",
            "ts",
            "interval_ms",
            "busy_mean",
            "busy_max",
            "sm_active_mean",
            "sm_active_max",
            "memory_used_max_bytes",
            "memory_total_bytes",
            "mig_enabled",
            "tensor_active_mean",
            "dram_active_mean",
            "fp64_active_mean",
            "fp32_active_mean",
            "fp16_active_mean",
            "holders",
            "holder_namespace",
            "holder_pod",
            "holder_slurm_job_id",
        ],
    ),
    (
        Table::Mig,
        &[
            "node",
            "uuid",
            "gpu",
            "gpu_instance",
            "ts",
            "interval_ms",
            "sm_active_max",
            "memory_used_max_bytes",
            "mig_uuid",
            "profile",
            "holders",
            "holder_namespace",
            "holder_pod",
            "holder_slurm_job_id",
        ],
    ),
    (
        Table::Process,
        &[
            "node",
            "uuid",
            "gpu",
            "pid",
            "process",
            "gpu_instance",
            "namespace",
            "pod",
            "pod_uid",
            "slurm_job_id",
            "ts",
            "interval_ms",
            "memory_used_max_bytes",
            "sm_max",
        ],
    ),
];

/// Reads each table once, with only the columns detectors use, into memory; detectors then
/// run over in-memory frames instead of rescanning every source file per query.
pub fn prepare(frames: &Frames) -> Result<Frames, AdvisorError> {
    let get = |t: Table| -> Result<LazyFrame, AdvisorError> {
        let cols = USED
            .iter()
            .find(|(u, _)| *u == t)
            .map(|(_, c)| *c)
            .unwrap_or(&[]);
        let df = frames
            .table(t)
            .clone()
            .select(cols.iter().map(|c| col(*c)).collect::<Vec<_>>())
            .collect()?;
        Ok(df.lazy())
    };
    Ok(Frames {
        gpu: get(Table::Gpu)?,
        mig: get(Table::Mig)?,
        process: get(Table::Process)?,
    })
}

/// Runs every detector of the registry (or only those in `only`, by id) over the frames
/// ([`prepare`]d first).
pub fn analyze(
    frames: &Frames,
    params: &Params,
    range: Option<(i64, i64)>,
    sources: Vec<String>,
    only: &[String],
) -> Result<Analysis, AdvisorError> {
    analyze_parts(
        std::iter::once(Ok::<_, AdvisorError>(frames.clone())),
        params,
        range,
        sources,
        only,
    )
}

/// Like [`analyze`], over partitions of the frames (`ingest::ingest_parts`), one at a time:
/// each partition is [`prepare`]d, every detector's [`partial`](Detector::partial) runs on it,
/// and it is dropped before the next; peak memory is one partition plus the partials.
pub fn analyze_parts<I, E>(
    parts: I,
    params: &Params,
    range: Option<(i64, i64)>,
    sources: Vec<String>,
    only: &[String],
) -> Result<Analysis, AdvisorError>
where
    I: IntoIterator<Item = Result<Frames, E>>,
    I::IntoIter: Send,
    E: Send,
    AdvisorError: From<E>,
{
    analyze_parts_with(parts, params, range, sources, only, &|_| {})
}

/// [`analyze_parts`], calling `on_done(n)` (from a worker thread) each time a partition is done,
/// `n` partitions in all so far (progress on a terminal).
pub fn analyze_parts_with<I, E>(
    parts: I,
    params: &Params,
    range: Option<(i64, i64)>,
    sources: Vec<String>,
    only: &[String],
    on_done: &(dyn Fn(usize) + Sync),
) -> Result<Analysis, AdvisorError>
where
    I: IntoIterator<Item = Result<Frames, E>>,
    I::IntoIter: Send,
    E: Send,
    AdvisorError: From<E>,
{
    analyze_parts_each(parts, params, range, sources, only, on_done, &|_, f| Ok(f))
}

/// A step run on each partition before the detectors, on the worker that holds it: given the
/// partition's number (from 0, in order) and frames, it returns the frames the detectors read
/// (so that a caller can read a partition once for more than the advisor).
pub type PartStep<'a> = dyn Fn(usize, Frames) -> Result<Frames, AdvisorError> + Sync + 'a;

/// One partition's results: its index, each detector's partial and the time each step took
/// (preparing the frames, then each detector).
type Done = (usize, Vec<Partial>, Vec<std::time::Duration>);

/// The workers' results put back in partition order: per detector its partials; the time spent
/// preparing and in each detector, summed, is reported.
fn in_partition_order(
    results: Vec<Result<Vec<Done>, AdvisorError>>,
    dets: &[Box<dyn Detector>],
    workers: usize,
) -> Result<Vec<Vec<Partial>>, AdvisorError> {
    let mut all: Vec<Done> = Vec::new();
    for r in results {
        all.extend(r?);
    }
    all.sort_by_key(|d| d.0);
    let mut partials: Vec<Vec<Partial>> = dets.iter().map(|_| Vec::new()).collect();
    let mut spent = vec![std::time::Duration::ZERO; dets.len() + 1];
    for (_, outs, times) in all {
        for (acc, p) in partials.iter_mut().zip(outs) {
            acc.push(p);
        }
        for (s, t) in spent.iter_mut().zip(times) {
            *s += t;
        }
    }
    let what = format!("advisor ({workers} workers, summed)");
    crate::timing::report(&what, "prepare", spent[0]);
    for (d, t) in dets.iter().zip(&spent[1..]) {
        crate::timing::report(&what, d.id(), *t);
    }
    Ok(partials)
}

/// Each detector's findings from its partials, with its report.
fn finish_detectors(
    dets: &[Box<dyn Detector>],
    partials: Vec<Vec<Partial>>,
    params: &Params,
) -> Result<(Vec<DetectorReport>, Vec<Finding>), AdvisorError> {
    let mut detectors = Vec::new();
    let mut findings = Vec::new();
    for (d, parts) in dets.iter().zip(partials) {
        let out = d.finish(parts, params)?;
        detectors.push(DetectorReport {
            id: d.id(),
            title: d.title(),
            findings: out.findings.len(),
            summary: out.summary,
            notes: out.notes,
            data: out.data,
        });
        findings.extend(out.findings);
    }
    Ok((detectors, findings))
}

/// [`analyze_parts_with`], running `step` on each partition before the detectors.
pub fn analyze_parts_each<I, E>(
    parts: I,
    params: &Params,
    range: Option<(i64, i64)>,
    sources: Vec<String>,
    only: &[String],
    on_done: &(dyn Fn(usize) + Sync),
    step: &PartStep,
) -> Result<Analysis, AdvisorError>
where
    I: IntoIterator<Item = Result<Frames, E>>,
    I::IntoIter: Send,
    E: Send,
    AdvisorError: From<E>,
{
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let dets: Vec<Box<dyn Detector>> = registry()
        .into_iter()
        .filter(|d| only.is_empty() || only.iter().any(|o| o == d.id()))
        .collect();
    for d in &dets {
        d.validate(params)?;
    }
    // Partitions run on a few worker threads (each collects its own partition; polars
    // parallelises within it); results are put back in partition order so that the output
    // does not depend on scheduling.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4);
    let queue = std::sync::Mutex::new(parts.into_iter().enumerate());
    let results: Vec<Result<Vec<Done>, AdvisorError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| -> Result<Vec<Done>, AdvisorError> {
                    let mut done = Vec::new();
                    loop {
                        let next = queue.lock().map_err(|_| AdvisorError::Worker)?.next();
                        let Some((i, part)) = next else { break };
                        let mut spent = Vec::with_capacity(dets.len() + 1);
                        let t = std::time::Instant::now();
                        let frames = prepare(&step(i, part?)?)?;
                        spent.push(t.elapsed());
                        let mut out = Vec::with_capacity(dets.len());
                        for d in &dets {
                            let t = std::time::Instant::now();
                            out.push(d.partial(&frames, params)?);
                            spent.push(t.elapsed());
                        }
                        done.push((i, out, spent));
                        on_done(finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
                    }
                    Ok(done)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(AdvisorError::Worker)))
            .collect()
    });
    let partials = in_partition_order(results, &dets, workers)?;
    let (detectors, findings) = finish_detectors(&dets, partials, params)?;
    let actions = actions::recommend(
        &findings,
        None,
        &actions::ActionContext {
            sources: &sources,
            period_hours: range.map_or(0.0, |r| (r.1 - r.0).max(0) as f64 / 3.6e6),
            prices: None,
            range: &[],
        },
    );
    Ok(Analysis {
        version: FINDINGS_VERSION,
        from: range.map(|r| fmt_ms(r.0)),
        until: range.map(|r| fmt_ms(r.1)),
        sources,
        tz: params.tz.name().to_string(),
        actions,
        detectors,
        findings,
    })
}

/// The text table `tessera analyze` prints.
pub fn render_table(a: &Analysis) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "analysed {} .. {} ({})",
        a.from.as_deref().unwrap_or("-"),
        a.until.as_deref().unwrap_or("-"),
        a.tz
    );
    for d in &a.detectors {
        let _ = writeln!(s, "\n== {} — {}", d.title, d.summary);
        for n in &d.notes {
            let _ = writeln!(s, "   note: {n}");
        }
        for f in a.findings.iter().filter(|f| f.detector == d.id) {
            let _ = writeln!(s, "  [{:?}] {}  {}", f.severity, f.id, f.summary);
            let _ = writeln!(s, "      -> {}", f.action);
        }
    }
    // Names from data (processes, pods) may hold control characters: shown escaped.
    crate::output::escape::printable_lines(&s).into_owned()
}

/// A gap in an entity's rows shorter than this never breaks a span, whatever the rows' length:
/// Prometheus' lookback (a series is not stale for 5 minutes), and short enough that nothing
/// the detectors look for (an hour idle, an hour busy) could hide in it.
pub const MIN_GAP_MS: i64 = 300_000;

/// Whether the time from one row's end to the next one's (`gap_ms`) breaks a span: more than
/// `max_gap_intervals` rows of `interval_ms` and more than [`MIN_GAP_MS`]. Judged against the
/// data's own rows: one missed scrape with jitter spans up to three 60 s rows, and misses at
/// random on 1 s data come in runs of several seconds (docs/findings.md).
pub fn breaks_span(gap_ms: i64, interval_ms: i64, max_gap_intervals: f64) -> bool {
    gap_ms as f64 > (max_gap_intervals * interval_ms.max(1) as f64).max(MIN_GAP_MS as f64)
}

/// Milliseconds as hours.
pub(crate) fn hours(ms: i64) -> f64 {
    ms as f64 / 3_600_000.0
}

/// Rounds to 3 decimals for evidence (keeps JSON readable and snapshot-stable).
pub(crate) fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
