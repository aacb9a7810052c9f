//! The weekly report (`tessera report`, `docs/report.md`): a pure model built from the canonical
//! frames and the advisor's [`Analysis`] — fleet summary with cost, breakdowns by node, GPU model
//! and team, the idle-loaded models and consolidation plan priced, the off-peak windows and the
//! GPUs free around the clock (over-provisioning), the previous period for week-over-week change,
//! data-quality notes and the series the HTML charts draw — serialised as versioned JSON
//! ([`REPORT_VERSION`]) and rendered by [`render`] (table, markdown) and [`html`].
//!
//! This module does no I/O besides collecting the lazy frames it is given and reading the
//! `--config` file in [`ReportConfig::load`]; it does not detect anything itself (the advisor's
//! findings are re-priced, not recomputed) and it does not plan MIG layouts: the caller runs the
//! MIG planner and sets [`Report::mig`] from [`mig_section`] (`None` when it did not).

pub mod html;
pub mod pass;
pub mod render;
mod tally;

pub use tally::{AbortGuard, PartTally, build_parts, build_parts_with};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use chrono::{Datelike, TimeZone, Timelike};
use chrono_tz::Tz;
use polars::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::advisor::{AdvisorError, Analysis, Finding};
use crate::ingest::{Frames, IngestReport};

/// Version of the report JSON document (`docs/report.md`).
pub const REPORT_VERSION: u32 = 1;

const GIB: f64 = (1u64 << 30) as f64;
const HOUR_MS: f64 = 3_600_000.0;
/// A GPU holding less than this and at most [`FREE_ACTIVITY`] is free (as in the off-peak
/// detector).
const FREE_MEMORY: f64 = GIB;
const FREE_ACTIVITY: f64 = 0.05;
/// Hours in a month, for monthly savings (365.25 × 24 / 12).
const MONTH_HOURS: f64 = 730.5;

/// Errors of the report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("reading frames: {0}")]
    Frames(#[from] AdvisorError),
    #[error("reading frames: {0}")]
    Polars(#[from] PolarsError),
    #[error("{0}")]
    Ingest(#[from] crate::ingest::IngestError),
    #[error("reading config {path}: {reason}")]
    Config { path: String, reason: String },
    #[error("bad price {name} {value}: expected a finite number ≥ 0")]
    Price { name: &'static str, value: f64 },
}

/// Prices the report uses to turn hours and energy into money.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prices {
    /// Price of one GPU-hour (whole GPU).
    pub gpu_hour: f64,
    /// Price of one kWh.
    pub kwh: f64,
    /// Currency label, only printed.
    pub currency: String,
    /// Where the prices came from: `default`, `config:<file>`, `flags` (or a mix, comma-separated).
    pub source: String,
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            gpu_hour: 2.0,
            kwh: 0.15,
            currency: "USD".into(),
            source: "default".into(),
        }
    }
}

/// The `--config` file (TOML).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportConfig {
    #[serde(default)]
    pub price: PriceConfig,
}

/// `[price]` of the config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    pub gpu_hour: Option<f64>,
    pub kwh: Option<f64>,
    pub currency: Option<String>,
}

impl ReportConfig {
    /// Reads and strictly parses a config file.
    pub fn load(path: &Path) -> Result<Self, ReportError> {
        let err = |reason: String| ReportError::Config {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        toml::from_str(&text).map_err(|e| err(e.to_string().trim_end().replace('\n', " ")))
    }
}

/// Prices from the defaults, then the config file, then the flags (later wins); each checked.
pub fn prices(
    config: Option<(&Path, &ReportConfig)>,
    gpu_hour: Option<f64>,
    kwh: Option<f64>,
) -> Result<Prices, ReportError> {
    let mut p = Prices::default();
    let mut from = Vec::new();
    if let Some((path, c)) = config {
        if c.price.gpu_hour.is_some() || c.price.kwh.is_some() || c.price.currency.is_some() {
            from.push(format!("config:{}", path.display()));
        }
        p.gpu_hour = c.price.gpu_hour.unwrap_or(p.gpu_hour);
        p.kwh = c.price.kwh.unwrap_or(p.kwh);
        if let Some(cur) = &c.price.currency {
            p.currency = cur.clone();
        }
    }
    if gpu_hour.is_some() || kwh.is_some() {
        from.push("flags".into());
    }
    p.gpu_hour = gpu_hour.unwrap_or(p.gpu_hour);
    p.kwh = kwh.unwrap_or(p.kwh);
    for (name, v) in [("gpu_hour", p.gpu_hour), ("kwh", p.kwh)] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(ReportError::Price { name, value: v });
        }
    }
    if !from.is_empty() {
        p.source = from.join(",");
    }
    Ok(p)
}

/// Usage of a set of GPUs over the report's range.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    /// `fleet`, a node name or a GPU model.
    pub key: String,
    pub gpus: usize,
    /// GPUs × the range's hours: what was there to use.
    pub gpu_hours_available: f64,
    /// Σ interval of the rows: what was reported.
    pub gpu_hours_observed: f64,
    /// Rows holding ≥ 1 GiB or with activity > 5%: GPUs somebody had.
    pub gpu_hours_allocated: f64,
    /// Σ activity × interval: GPU-hours of actual work.
    pub gpu_hours_busy: f64,
    /// Mean and 95th percentile of the rows' mean activity (0–1).
    pub activity_mean: Option<f64>,
    pub activity_p95: Option<f64>,
    /// Mean memory used ÷ memory total (0–1).
    pub memory_used_share: Option<f64>,
    /// Highest memory used on one GPU, GiB.
    pub memory_peak_gib: Option<f64>,
    /// Energy from the energy counter, else mean power × interval.
    pub energy_kwh: Option<f64>,
    /// `gpu_hours_available` × price per GPU-hour.
    pub cost_gpu_hours: f64,
    /// `energy_kwh` × price per kWh.
    pub cost_energy: f64,
    pub cost_total: f64,
}

/// Usage of one team (`teams.dimension`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TeamUsage {
    pub team: String,
    pub processes: usize,
    /// GPU time of the team's processes; a GPU's interval is split evenly between the processes
    /// on it.
    pub gpu_hours: f64,
    /// Σ memory held × time.
    pub memory_gib_hours: f64,
    /// From the idle-loaded findings of the team's processes.
    pub idle_gib_hours: f64,
    pub idle_gpu_hours: f64,
    /// `idle_gpu_hours` × price per GPU-hour.
    pub idle_cost: f64,
    /// `gpu_hours` × price per GPU-hour.
    pub cost: f64,
}

/// The team breakdown.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Teams {
    /// What a team is in this data: `namespace`, `slurm_job`, `namespace, else slurm_job`, or
    /// `none` (no process rows with attribution).
    pub dimension: String,
    pub rows: Vec<TeamUsage>,
}

/// One idle-loaded model, priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleModel {
    pub finding_id: String,
    pub what: String,
    pub team: Option<String>,
    pub memory_max_gib: f64,
    pub idle_hours: f64,
    pub idle_share: f64,
    pub idle_gib_hours: f64,
    pub reclaimable_gpu_hours: f64,
    /// `reclaimable_gpu_hours` × price per GPU-hour.
    pub wasted_cost: f64,
    pub action: String,
}

/// One consolidation group (a GPU model), priced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConsolidationStep {
    pub finding_id: String,
    pub model: String,
    pub gpus_loaded: u64,
    pub gpus_needed: u64,
    pub gpus_freed: u64,
    pub gpu_hours_freed: f64,
    /// `gpu_hours_freed` × price per GPU-hour (over the range).
    pub savings: f64,
    /// `gpus_freed` × 730.5 h × price per GPU-hour.
    pub savings_per_month: f64,
    /// `workload (node/GPU) → node/GPU` for every workload that moves.
    pub moves: Vec<String>,
}

/// One off-peak window (a group of windows of one tier with the same start and length).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffpeakWindow {
    pub finding_id: String,
    /// `week` or `day`.
    pub period: String,
    /// Start days (`Mon` …); empty: every day.
    pub days: Vec<String>,
    pub start: String,
    pub end: String,
    pub hours: f64,
    /// GPUs free in every hour of the window, the baseline included (the tier's level).
    pub expected_free_gpus: u64,
    pub confidence: f64,
    pub cron_start: String,
    pub cron_end: String,
    /// The tier (1 = fewest GPUs free).
    pub tier: u64,
    /// `expected_free_gpus` − the GPUs free around the clock.
    pub above_baseline: u64,
    /// systemd `OnCalendar=` expressions at the start and the end.
    pub systemd_start: String,
    pub systemd_end: String,
}

/// GPUs of one model free around the clock.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineModel {
    pub model: String,
    pub gpus: u64,
}

/// The off-peak detector's baseline: GPUs free at every hour of the profile (over-provisioning).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffpeakBaseline {
    pub finding_id: String,
    /// `week` or `day`.
    pub period: String,
    pub gpus: u64,
    pub gpus_observed: u64,
    pub by_model: Vec<BaselineModel>,
    /// Baseline GPUs no single model accounts for (which GPUs are free varies).
    pub unattributed_gpus: u64,
    pub min_share: f64,
}

/// One data-quality note.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QualityNote {
    /// `source_missing`, `stopped`, `status`, `gap`, `signal`, `no_rows`, `ingest`, `advisor`.
    pub kind: String,
    pub message: String,
}

/// Per-GPU activity distribution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuActivity {
    /// `node/GPUn`.
    pub gpu: String,
    pub model: String,
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    /// Share of observed time in each tenth of activity (0–10%, …, 90–100%).
    pub histogram: Vec<f64>,
}

/// One hour of the free-capacity timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FreeHour {
    /// Start of the hour, RFC 3339 UTC.
    pub hour: String,
    pub gpus: u32,
    pub free_gpus: u32,
    /// Inside an off-peak window.
    pub offpeak: bool,
    /// The most GPUs an off-peak window covering this hour expects free (its tier's level).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offpeak_free_gpus: Option<u64>,
}

/// What the HTML charts draw (also in the JSON, for other front ends).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Charts {
    /// Mean activity per local hour of week: 7 rows (Mon … Sun) × 24 hours; null = no data.
    pub hour_of_week: Vec<Vec<Option<f64>>>,
    pub gpu_activity: Vec<GpuActivity>,
    pub free_timeline: Vec<FreeHour>,
}

/// The report (`docs/report.md`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub version: u32,
    /// Reported range: rows ending after `from` and at or before `until`, RFC 3339 UTC.
    pub from: String,
    pub until: String,
    pub hours: f64,
    pub tz: String,
    pub sources: Vec<String>,
    pub prices: Prices,
    /// Which activity the numbers use: `sm_active`, `busy`, `sm_active, else busy`, `none`.
    pub activity_signal: String,
    pub fleet: Usage,
    /// The same-length period before `from`, when the data covers it (week-over-week).
    pub previous_period: Option<Usage>,
    pub by_node: Vec<Usage>,
    pub by_model: Vec<Usage>,
    pub teams: Teams,
    pub idle_models: Vec<IdleModel>,
    pub consolidation: Vec<ConsolidationStep>,
    pub offpeak_windows: Vec<OffpeakWindow>,
    /// GPUs free around the clock (over-provisioning), when there are any.
    pub offpeak_baseline: Option<OffpeakBaseline>,
    /// The MIG planner's recommendation ([`mig_section`]); `null` when none was computed.
    pub mig: Option<Value>,
    pub data_quality: Vec<QualityNote>,
    pub charts: Charts,
}

/// What [`build`] needs besides the frames.
pub struct ReportInput<'a> {
    /// The advisor's analysis over `range`.
    pub analysis: &'a Analysis,
    /// Reported range, unix ms: rows with `start < ts <= end`.
    pub range: (i64, i64),
    pub ingest: &'a IngestReport,
    pub sources: Vec<String>,
    pub prices: Prices,
    pub tz: Tz,
    /// How many top idle-loaded models to list.
    pub top: usize,
}

fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn ev_f64(f: &Finding, k: &str) -> f64 {
    f.evidence[k].as_f64().unwrap_or(0.0)
}
fn ev_u64(f: &Finding, k: &str) -> u64 {
    f.evidence[k].as_u64().unwrap_or(0)
}
fn ev_str(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or("").to_string()
}

fn team_of(namespace: Option<&str>, slurm: Option<&str>) -> Option<String> {
    match (namespace, slurm) {
        (Some(ns), _) => Some(ns.to_string()),
        (None, Some(j)) => Some(format!("slurm job {j}")),
        _ => None,
    }
}

fn idle_models(a: &Analysis, prices: &Prices) -> Vec<IdleModel> {
    let mut v: Vec<IdleModel> = a
        .findings
        .iter()
        .filter(|f| f.detector == "idle_loaded")
        .map(|f| {
            let reclaim = ev_f64(f, "reclaimable_gpu_hours");
            IdleModel {
                finding_id: f.id.clone(),
                what: f.entity.label(),
                team: team_of(f.entity.namespace.as_deref(), f.entity.slurm_job.as_deref()),
                memory_max_gib: ev_f64(f, "memory_max_gib"),
                idle_hours: ev_f64(f, "idle_hours"),
                idle_share: ev_f64(f, "idle_share"),
                idle_gib_hours: ev_f64(f, "idle_gib_hours"),
                reclaimable_gpu_hours: reclaim,
                wasted_cost: r2(reclaim * prices.gpu_hour),
                action: f.action.clone(),
            }
        })
        .collect();
    v.sort_by(|a, b| {
        b.idle_gib_hours
            .total_cmp(&a.idle_gib_hours)
            .then(a.finding_id.cmp(&b.finding_id))
    });
    v
}

fn consolidation(a: &Analysis, prices: &Prices) -> Vec<ConsolidationStep> {
    let gpu = |v: &Value| match v["gpu"].as_u64() {
        Some(g) => format!("{}/GPU{g}", ev_str(v, "node")),
        None => ev_str(v, "uuid"),
    };
    a.findings
        .iter()
        .filter(|f| f.detector == "consolidation")
        .map(|f| {
            let mut moves = Vec::new();
            for group in f.evidence["plan"].as_array().into_iter().flatten() {
                let host = &group["host"];
                for w in group["workloads"].as_array().into_iter().flatten() {
                    if w["uuid"] != host["uuid"] {
                        let label = ev_str(w, "label");
                        let what = if label.is_empty() { gpu(w) } else { label };
                        moves.push(format!("{what} → {}", gpu(host)));
                    }
                }
            }
            let freed_h = ev_f64(f, "gpu_hours_freed");
            let freed = ev_u64(f, "gpus_freed");
            ConsolidationStep {
                finding_id: f.id.clone(),
                model: ev_str(&f.evidence, "model"),
                gpus_loaded: ev_u64(f, "gpus_loaded"),
                gpus_needed: ev_u64(f, "gpus_needed"),
                gpus_freed: freed,
                gpu_hours_freed: freed_h,
                savings: r2(freed_h * prices.gpu_hour),
                savings_per_month: r2(freed as f64 * MONTH_HOURS * prices.gpu_hour),
                moves,
            }
        })
        .collect()
}

fn offpeak(a: &Analysis) -> Vec<OffpeakWindow> {
    a.findings
        .iter()
        .filter(|f| f.detector == "offpeak_window" && f.evidence["type"] != "baseline")
        .map(|f| OffpeakWindow {
            finding_id: f.id.clone(),
            period: ev_str(&f.evidence, "period"),
            days: f.evidence["days"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d.as_str().map(str::to_string))
                .collect(),
            start: ev_str(&f.evidence, "start"),
            end: ev_str(&f.evidence, "end"),
            hours: ev_f64(f, "hours"),
            expected_free_gpus: ev_u64(f, "expected_free_gpus"),
            confidence: ev_f64(f, "confidence"),
            cron_start: ev_str(&f.evidence, "cron_start"),
            cron_end: ev_str(&f.evidence, "cron_end"),
            tier: ev_u64(f, "tier"),
            above_baseline: ev_u64(f, "above_baseline"),
            systemd_start: ev_str(&f.evidence, "systemd_start"),
            systemd_end: ev_str(&f.evidence, "systemd_end"),
        })
        .collect()
}

fn offpeak_baseline(a: &Analysis) -> Option<OffpeakBaseline> {
    let f = a
        .findings
        .iter()
        .find(|f| f.detector == "offpeak_window" && f.evidence["type"] == "baseline")?;
    Some(OffpeakBaseline {
        finding_id: f.id.clone(),
        period: ev_str(&f.evidence, "period"),
        gpus: ev_u64(f, "gpus"),
        gpus_observed: ev_u64(f, "gpus_observed"),
        by_model: f.evidence["by_model"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| BaselineModel {
                model: ev_str(m, "model"),
                gpus: m["gpus"].as_u64().unwrap_or(0),
            })
            .collect(),
        unattributed_gpus: ev_u64(f, "unattributed_gpus"),
        min_share: ev_f64(f, "min_share"),
    })
}

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// Hour-of-week slots (Mon 00:00 = 0) covered by the windows, each with the most GPUs a window
/// covering it expects free (windows of higher tiers lie inside those of lower ones).
fn window_slots(windows: &[OffpeakWindow]) -> BTreeMap<usize, u64> {
    let mut slots = BTreeMap::new();
    for w in windows {
        let Some(h0) = w.start.get(..2).and_then(|h| h.parse::<usize>().ok()) else {
            continue;
        };
        let days: Vec<usize> = if w.days.is_empty() {
            (0..7).collect()
        } else {
            w.days
                .iter()
                .filter_map(|d| DAYS.iter().position(|x| x == d))
                .collect()
        };
        for d in days {
            for k in 0..(w.hours.round() as usize) {
                let e = slots.entry((d * 24 + h0 + k) % 168).or_insert(0);
                *e = (*e).max(w.expected_free_gpus);
            }
        }
    }
    slots
}

fn slot_of(ts_ms: i64, tz: &Tz) -> Option<(usize, usize)> {
    let t = tz.timestamp_millis_opt(ts_ms).single()?;
    Some((
        t.weekday().num_days_from_monday() as usize,
        t.hour() as usize,
    ))
}

/// Whether a row's `source` column (`history:<node folder>`, `csv:<file>`,
/// `prometheus:<url>`) came from the `--source` spec `spec` (a history spec may be a folder of node
/// folders, one node folder, or a glob of either).
pub fn source_matches(spec: &str, row_source: &str) -> bool {
    match (
        spec.strip_prefix("history:"),
        row_source.strip_prefix("history:"),
    ) {
        (Some(loc), Some(node)) => {
            let node = Path::new(node);
            if loc.contains(['*', '?', '[']) {
                glob::Pattern::new(loc).is_ok_and(|p| {
                    p.matches_path(node) || node.parent().is_some_and(|d| p.matches_path(d))
                })
            } else {
                node.starts_with(Path::new(loc))
            }
        }
        (None, None) => spec == row_source,
        _ => false,
    }
}

/// The data-quality notes: sources without GPU rows, the per-GPU notes and gaps the tally
/// gathered ([`tally`]), then the activity signal, teams, ingest warnings and skips, and the
/// advisor's notes.
fn data_quality(
    gpu_sources: &BTreeSet<String>,
    gpu_notes: Vec<QualityNote>,
    mut gaps: Vec<(String, usize, f64)>,
    input: &ReportInput,
    signal: &str,
    teams: &Teams,
) -> Vec<QualityNote> {
    let mut notes = Vec::new();
    let mut note = |kind: &str, message: String| {
        notes.push(QualityNote {
            kind: kind.into(),
            message,
        })
    };
    // Sources that contributed no GPU rows (or whose rows all repeated another source's: the
    // first copy of a duplicate row is kept).
    let duplicates = input
        .ingest
        .skipped
        .keys()
        .any(|k| k.starts_with("duplicate "));
    for s in &input.sources {
        if !gpu_sources.iter().any(|g| source_matches(s, g)) {
            let why = if duplicates {
                " (or only rows that another source holds too, counted once there)"
            } else {
                ""
            };
            note(
                "source_missing",
                format!("source {s} has no GPU rows in the reported range{why}"),
            );
        }
    }
    // Per-GPU status notes and GPUs that stopped reporting, in GPU order; then gaps, longest
    // first.
    for n in gpu_notes {
        note(&n.kind, n.message);
    }
    gaps.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    for (label, n, h) in &gaps {
        note(
            "gap",
            format!("{label}: {n} gap(s) in its rows, {h:.1} h missing"),
        );
    }
    match signal {
        "busy" => note(
            "signal",
            "activity is NVML's busy ratio (utilization.gpu: share of time a kernel ran), which overstates use; SM activity needs Hopper+ or DCGM profiling".into(),
        ),
        "none" => note("signal", "no activity signal in the data".into()),
        "sm_active, else busy" => note(
            "signal",
            "activity is SM activity where the GPU reports it, else the busy ratio (which overstates use)".into(),
        ),
        _ => {}
    }
    if teams.dimension == "none" {
        note(
            "no_rows",
            "no process rows with a namespace or Slurm job: no team breakdown".into(),
        );
    }
    for w in &input.ingest.warnings {
        note("ingest", w.clone());
    }
    let skipped = input.ingest.skipped_rows();
    if skipped > 0 {
        note(
            "ingest",
            format!(
                "{skipped} row(s) skipped at ingest (bad or duplicate; by reason in the ingest summary)"
            ),
        );
    }
    for d in &input.analysis.detectors {
        for n in &d.notes {
            note("advisor", format!("{}: {n}", d.title));
        }
    }
    notes
}

/// Builds the report over rows with `ts` in `input.range` = `(start, end]`. `frames` may reach
/// back before `start`: the period of the same length before it is reported when it has rows.
/// The same as [`tally::build_parts`] over one partition.
pub fn build(frames: &Frames, input: &ReportInput) -> Result<Report, ReportError> {
    tally::build_parts(&[frames], input)
}

/// Relative change `(now − before) / before`, when `before` is not 0.
pub fn change(now: f64, before: f64) -> Option<f64> {
    (before.abs() > 1e-9).then(|| (now - before) / before)
}

/// The report's MIG recommendation (`Report::mig`) from the MIG planner's result over the same
/// range: GPUs before and after, the lower bound and gap, unplaceable workloads and up to
/// `top` planned GPUs with their instances. Pure: planning happens in the caller.
pub fn mig_section(
    d: &crate::mig_planner::demand::Demand,
    plan: &crate::mig_planner::Plan,
    top: usize,
) -> Value {
    let before: std::collections::BTreeSet<&str> = d
        .workloads
        .iter()
        .filter_map(|w| w.current_gpu.as_deref())
        .collect();
    // GPUs that workloads the plan cannot place keep.
    let kept: std::collections::BTreeSet<&str> = plan
        .unplaceable
        .iter()
        .filter_map(|u| d.workloads.get(u.workload)?.current_gpu.as_deref())
        .collect();
    let freed = before
        .len()
        .saturating_sub(plan.gpus_used as usize + kept.len());
    let summary = format!(
        "MIG layouts would run {} workload(s) on {} GPU(s){}; {} of the {} GPU(s) in use now would be freed (lower bound {}, gap {:.1}%).{} Write the plan with `tessera mig plan -o plan.yaml` and apply it with `tessera mig apply`.",
        d.workloads.len() - plan.unplaceable.len(),
        plan.gpus_used,
        if plan.unplaceable.is_empty() {
            String::new()
        } else {
            format!(
                " ({} more fit no MIG instance and keep {} GPU(s))",
                plan.unplaceable.len(),
                kept.len()
            )
        },
        freed,
        before.len(),
        plan.lower_bound,
        plan.gap() * 100.0,
        crate::mig_planner::whole_gpu_sentence(plan).map_or(String::new(), |s| format!(" {s}")),
    );
    let mut lines = Vec::new();
    for g in plan.gpus.iter().take(top) {
        let insts: Vec<String> = g
            .instances
            .iter()
            .map(|i| {
                let names: Vec<&str> = i
                    .workloads
                    .iter()
                    .filter_map(|&w| d.workloads.get(w).map(|w| w.id.as_str()))
                    .collect();
                if g.mig_enabled {
                    format!("{}@{} [{}]", i.profile, i.placement.start, names.join(", "))
                } else {
                    format!("whole GPU, MIG off [{}]", names.join(", "))
                }
            })
            .collect();
        lines.push(format!(
            "{}/GPU{} ({}): {}",
            g.gpu.node,
            g.gpu.index,
            g.model,
            insts.join("; ")
        ));
    }
    if plan.gpus.len() > top {
        lines.push(format!("… and {} more GPU(s)", plan.gpus.len() - top));
    }
    for u in plan.unplaceable.iter().take(top) {
        lines.push(format!("not placed: {} ({})", u.id, u.reason));
    }
    serde_json::json!({
        "summary": summary,
        "workloads": d.workloads.len(),
        "gpus_before": before.len(),
        "gpus_after": plan.gpus_used,
        "gpus_freed": freed,
        "lower_bound": plan.lower_bound,
        "gap": (plan.gap() * 1000.0).round() / 1000.0,
        "unplaceable": plan.unplaceable.len(),
        "gpus_mig_off": plan.gpus.iter().filter(|g| !g.mig_enabled).count(),
        "lines": lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_layer_default_config_flags() {
        let c: ReportConfig =
            toml::from_str("[price]\ngpu_hour = 3.5\ncurrency = \"EUR\"\n").unwrap();
        let p = prices(Some((Path::new("r.toml"), &c)), None, Some(0.4)).unwrap();
        assert_eq!(p.gpu_hour, 3.5);
        assert_eq!(p.kwh, 0.4);
        assert_eq!(p.currency, "EUR");
        assert_eq!(p.source, "config:r.toml,flags");
        assert_eq!(prices(None, None, None).unwrap(), Prices::default());
        assert!(matches!(
            prices(None, Some(-1.0), None),
            Err(ReportError::Price {
                name: "gpu_hour",
                ..
            })
        ));
    }

    #[test]
    fn config_rejects_unknown_keys() {
        let e = toml::from_str::<ReportConfig>("[price]\ngpu_hours = 3\n").unwrap_err();
        assert!(e.to_string().contains("gpu_hours"), "{e}");
    }

    #[test]
    fn offpeak_findings_become_the_baseline_and_windows() {
        use crate::advisor::offpeak::{FreeGpus, OffPeak};
        use crate::advisor::{Detector, Params};
        // 10 days, 4 GPUs: one H100 free all the time, two more free 20:00–06:00.
        let mon = 1_793_577_600 / 3600;
        let free = FreeGpus {
            per_hour: (0..240)
                .map(|h| {
                    let night = !(6..20).contains(&(h % 24));
                    (
                        mon + h,
                        BTreeMap::from([("H100".to_string(), if night { 3 } else { 1 })]),
                    )
                })
                .collect(),
            gpus: BTreeMap::from([("H100".to_string(), 4)]),
        };
        let out = OffPeak
            .finish(vec![Box::new(free)], &Params::default())
            .unwrap();
        let a = Analysis {
            version: 1,
            from: None,
            until: None,
            sources: Vec::new(),
            tz: "UTC".into(),
            detectors: Vec::new(),
            findings: out.findings,
        };
        let b = offpeak_baseline(&a).expect("a baseline");
        assert_eq!((b.period.as_str(), b.gpus, b.gpus_observed), ("day", 1, 4));
        assert_eq!(
            b.by_model,
            vec![BaselineModel {
                model: "H100".into(),
                gpus: 1
            }]
        );
        assert_eq!(b.min_share, 0.9);
        let w = offpeak(&a);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            (
                w[0].start.as_str(),
                w[0].end.as_str(),
                w[0].expected_free_gpus,
                w[0].above_baseline,
                w[0].tier
            ),
            ("20:00", "06:00", 3, 2, 1)
        );
        assert_eq!(w[0].cron_end, "CRON_TZ=UTC 0 6 * * *");
        assert_eq!(w[0].systemd_start, "OnCalendar=*-*-* 20:00:00 UTC");
        assert_eq!(w[0].systemd_end, "OnCalendar=*-*-* 06:00:00 UTC");
    }

    #[test]
    fn window_slots_wrap_the_week() {
        let w = OffpeakWindow {
            finding_id: String::new(),
            period: "week".into(),
            days: vec!["Sun".into()],
            start: "22:00".into(),
            end: "02:00".into(),
            hours: 4.0,
            expected_free_gpus: 1,
            confidence: 1.0,
            cron_start: String::new(),
            cron_end: String::new(),
            tier: 1,
            above_baseline: 1,
            systemd_start: String::new(),
            systemd_end: String::new(),
        };
        // A higher tier inside it: Mon 00:00–01:00 with 3 free.
        let inner = OffpeakWindow {
            days: vec!["Mon".into()],
            start: "00:00".into(),
            hours: 1.0,
            expected_free_gpus: 3,
            tier: 2,
            ..w.clone()
        };
        let s = window_slots(&[w, inner]);
        assert_eq!(
            s.into_iter().collect::<Vec<_>>(),
            vec![(0, 3), (1, 1), (166, 1), (167, 1)]
        );
    }

    #[test]
    fn sources_match_their_rows() {
        let row = "history:/data/hist/gpu-node-1";
        assert!(source_matches("history:/data/hist", row));
        assert!(source_matches("history:/data/hist/", row));
        assert!(source_matches("history:/data/hist/gpu-node-1", row));
        assert!(source_matches("history:/data/*/gpu-node-*", row));
        assert!(source_matches("history:/data/h*", row));
        assert!(!source_matches("history:/data/other", row));
        assert!(!source_matches(
            "history:/data/hist-2",
            "history:/data/hist/x"
        ));
        assert!(source_matches("csv:a.csv", "csv:a.csv"));
        assert!(!source_matches("csv:a.csv", "csv:b.csv"));
        assert!(!source_matches("csv:a.csv", row));
        assert!(source_matches(
            "prometheus:http://p:9090",
            "prometheus:http://p:9090"
        ));
    }
}
