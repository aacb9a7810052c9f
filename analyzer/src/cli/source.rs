//! What every command that reads telemetry shares: the source flags ([`SourceArgs`]), the range
//! (`--since`, `--until`, resolved by the one rule of `tessera::range`: [`load`]), `--tz` ([`parse_tz`]), the
//! off-peak flags ([`OffpeakArgs`]), the output format, progress on a terminal, naming the
//! history file an error comes from, the stop flag of the Kubernetes rollouts, and the teams' owners (`--owners`, the namespaces'
//! labels through a `prometheus:` source: `owners.rs`). Commands import this module, never each other.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use chrono_tz::Tz;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tessera::advisor::offpeak::{MinGpus, OffpeakParams};
use tessera::frames::Table;
use tessera::ingest::{self, IngestOptions, IngestReport, PrometheusOptions, Source};
use tessera::range::{RangeRequest, TimeRange};

mod owners;
mod work;
pub use owners::{OwnersArgs, add_namespace_labels, add_slurm_accounts, job_accounts, slurm_jobs};
pub use work::{job_work, work_rows};

/// A flag SIGTERM (a CronJob's deadline, `kubectl delete`) and SIGINT set, so a rollout
/// (`mig apply --via mig-manager`, `share apply`) stops and puts the nodes back; a second signal
/// exits at once (status 1).
pub fn stop_flag() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    use std::sync::Arc;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, Arc::clone(&stop))?;
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// Spill folders of prometheus: sources read by node (`IngestOptions::spill`), kept until the
/// command is done.
static SPILLS: std::sync::Mutex<Vec<tempfile::TempDir>> = std::sync::Mutex::new(Vec::new());

/// Removes the spill folders (the partitions that scan them must no longer be read).
pub fn remove_spills() {
    SPILLS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// Where to read from and which time range: shared by `ingest`, `analyze` and later commands.
#[derive(Debug, Args)]
pub struct SourceArgs {
    /// Telemetry source, repeatable: history:DIR (node folders, one node folder, or a glob),
    /// csv:FILE (generic long format or nvidia-smi --format=csv), prometheus:URL.
    #[arg(long = "source", required = true, value_parser = parse_source)]
    pub sources: Vec<Source>,
    /// Start of the range (rows ending after it): a duration back from now (7d, 12h), an RFC
    /// 3339 time or a date. Default: 7 days before the range's end (docs/frames.md, "Time
    /// ranges").
    #[arg(long)]
    pub since: Option<String>,
    /// End of the range (rows ending at or before it): a duration back from now, an RFC 3339
    /// time or a date. Default: the end of the data.
    #[arg(long)]
    pub until: Option<String>,
    /// Skip bad rows (counted and reported) instead of failing.
    #[arg(long)]
    pub skip_bad_rows: bool,
    /// Row length for csv: and prometheus: sources: `auto` (each entity at its own sampling
    /// period), or a duration (10s, 1m) for rows at least that long; never finer than the
    /// data. History keeps its own rows.
    #[arg(long, default_value = "auto", value_parser = parse_auto_interval)]
    pub interval: AutoInterval,
    /// Timeout of one request to a prometheus: source (retried 3 times with backoff).
    #[arg(long = "prometheus.timeout", default_value = "30s", value_parser = parse_interval)]
    pub prometheus_timeout: i64,
    /// Largest answer read from a prometheus: source (larger ones are asked again for half the
    /// range, down to one point).
    #[arg(long = "prometheus.max-response-size", value_name = "SIZE", default_value = "128MiB", value_parser = tessera_core::units::parse_bytes)]
    pub prometheus_max_response_bytes: u64,
    /// Most series in one remote-read answer from a prometheus: source (a server sending more
    /// is refused, naming this flag).
    #[arg(long = "prometheus.max-series", value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub prometheus_max_series: u64,
    /// File holding a bearer token for prometheus: sources.
    #[arg(long = "prometheus.bearer-token-file", value_name = "FILE")]
    pub prometheus_bearer_token_file: Option<PathBuf>,
    /// Basic auth for prometheus: sources: user and a file holding the password.
    #[arg(long = "prometheus.basic-auth", value_name = "USER:PASSWORD_FILE", value_parser = parse_basic_auth)]
    pub prometheus_basic_auth: Option<(String, PathBuf)>,
    /// Node groups a prometheus: source is queried for at once.
    #[arg(long = "prometheus.concurrency", value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub prometheus_concurrency: u32,
    /// Nodes per query of a prometheus: source: each group of this many nodes is read with a
    /// label matcher as its own partition; 0 reads the whole fleet at once.
    #[arg(
        long = "prometheus.nodes-per-query",
        value_name = "N",
        default_value_t = 1
    )]
    pub prometheus_nodes_per_query: u32,
    /// How a prometheus: source reads the series: `query-range` (the server reduces each row
    /// with PromQL, JSON answers), `remote-read` (raw samples as compressed chunks through
    /// /api/v1/read, reduced here with the same windows: Prometheus, Mimir), or `auto`
    /// (remote read where the server answers it, else query-range; said in the output).
    #[arg(long = "prometheus.api", value_enum, default_value_t = ingest::prometheus::Api::QueryRange)]
    pub prometheus_api: ingest::prometheus::Api,
}

fn parse_source(s: &str) -> Result<Source, String> {
    s.parse().map_err(|e: ingest::IngestError| e.to_string())
}

pub fn parse_basic_auth(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once(':') {
        Some((u, f)) if !u.is_empty() && !f.is_empty() => Ok((u.to_string(), PathBuf::from(f))),
        _ => Err(format!("bad basic auth {s:?}: expected USER:PASSWORD_FILE")),
    }
}

/// `--interval`: `auto` or a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoInterval(pub Option<i64>);

fn parse_auto_interval(s: &str) -> Result<AutoInterval, String> {
    if s == "auto" {
        return Ok(AutoInterval(None));
    }
    parse_interval(s)
        .map(|v| AutoInterval(Some(v)))
        .map_err(|e| format!("{e}, or auto"))
}

/// A duration flag in milliseconds, through the one duration parser
/// ([`tessera_core::units::parse_duration`]: `500ms`, `10s`, `1m`, `1h`, `7d`, `1w`).
pub fn parse_interval(s: &str) -> Result<i64, String> {
    let d = tessera_core::units::parse_duration(s)?;
    match i64::try_from(d.as_millis()) {
        Ok(ms) if ms >= 1 => Ok(ms),
        _ => Err(format!(
            "invalid duration {s:?}: must be between 1ms and {} days",
            i64::MAX / 86_400_000
        )),
    }
}

impl SourceArgs {
    /// `--since`/`--until` as the user gave them (for the commands an output prints that read
    /// the same range: `tessera::commands`).
    pub fn range_flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (flag, v) in [("--since", &self.since), ("--until", &self.until)] {
            if let Some(v) = v {
                out.extend([flag.to_string(), v.clone()]);
            }
        }
        out
    }

    /// The range `--since`/`--until` ask for ([`RangeRequest`]: parsed against now, `since`
    /// before `until`).
    pub fn range_request(&self) -> Result<RangeRequest> {
        let now = chrono::Utc::now().timestamp_millis();
        Ok(RangeRequest::parse(
            self.since.as_deref(),
            self.until.as_deref(),
            now,
        )?)
    }

    /// The `--prometheus.*` flags as the `prometheus:` source's options.
    pub fn prometheus_options(&self) -> PrometheusOptions {
        PrometheusOptions {
            timeout: Duration::from_millis(self.prometheus_timeout.max(1) as u64),
            bearer_token_file: self.prometheus_bearer_token_file.clone(),
            basic_auth: self.prometheus_basic_auth.clone(),
            max_response_bytes: self.prometheus_max_response_bytes,
            max_series: self.prometheus_max_series,
            concurrency: self.prometheus_concurrency as usize,
            nodes_per_query: self.prometheus_nodes_per_query as usize,
            api: self.prometheus_api,
            ..PrometheusOptions::default()
        }
    }

    /// Ingests the sources over the flags' range (rows ending in `(since, until]`), partitioned
    /// by node: see [`SourceArgs::ingest_bounds`].
    pub fn ingest_parts(&self, footer_stats: bool) -> Result<(Vec<ingest::Part>, IngestReport)> {
        let now = chrono::Utc::now().timestamp_millis();
        self.ingest_bounds(self.range_request()?.read_bounds(false, now), footer_stats)
    }

    /// Ingests the sources with the flags' options over `bounds` (rows ending in
    /// `(since, until]`, each bound when given), partitioned by node
    /// (`ingest::ingest_parts`), showing a spinner on a terminal when it takes more than half a
    /// second; prints the report's warnings on stderr. `footer_stats`: see
    /// [`IngestOptions::footer_stats`].
    pub fn ingest_bounds(
        &self,
        (since, until): (Option<i64>, Option<i64>),
        footer_stats: bool,
    ) -> Result<(Vec<ingest::Part>, IngestReport)> {
        let start = Instant::now();
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{spinner} ingest {pos}/{len} files {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let tty = std::io::stderr().is_terminal();
        let progress = |done: usize, total: usize| {
            if tty && bar.is_hidden() && start.elapsed() > Duration::from_millis(500) {
                bar.set_draw_target(ProgressDrawTarget::stderr());
            }
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        };
        // A source read by node (prometheus:) spills each partition's rows here (removed at exit,
        // `remove_spills`).
        let spill = if self.sources.iter().any(Source::spills) {
            let dir = tempfile::Builder::new()
                .prefix("tessera-spill-")
                .tempdir()
                .map_err(|e| anyhow::anyhow!("cannot make a spill folder in the temp dir: {e}"))?;
            let path = dir.path().to_path_buf();
            SPILLS.lock().unwrap_or_else(|e| e.into_inner()).push(dir);
            Some(path)
        } else {
            None
        };
        let opts = IngestOptions {
            spill: spill.as_deref(),
            since,
            until,
            skip_bad_rows: self.skip_bad_rows,
            interval_ms: self.interval.0,
            prometheus: self.prometheus_options(),
            progress: Some(&progress),
            footer_stats,
        };
        let result = ingest::ingest_parts(&self.sources, &opts);
        bar.finish_and_clear();
        let (parts, report) = result?;
        for w in &report.warnings {
            eprintln!("tessera: warning: {w}");
        }
        Ok((parts, report))
    }
}

/// Per-partition progress of a long command on a terminal (stderr): the phase, node partitions
/// done of total, the rows read and the time elapsed, e.g. `analysing: 12/128 nodes · 61.9 M GPU
/// rows · 8s`. Drawn on a terminal (from the first update; the line is cleared at the end); on a
/// pipe or file, one plain line every [`LINE_EVERY`] once a run has taken that long (so a cron
/// job's log shows a long run moving). Safe to update from worker threads.
pub struct PartProgress {
    bar: ProgressBar,
    tty: bool,
    total: usize,
    rows: String,
    /// When not a terminal: a line every [`LINE_EVERY`], the first one that long after the
    /// start (a short run prints none).
    started: std::time::Instant,
    said: std::sync::Mutex<std::time::Instant>,
    every: Duration,
}

/// How often a long run says where it is on stderr when stderr is not a terminal (logs, CI);
/// `TESSERA_PROGRESS_EVERY` (a duration, or `0` for every update) sets another.
pub const LINE_EVERY: Duration = Duration::from_secs(10);

/// [`LINE_EVERY`], or `TESSERA_PROGRESS_EVERY` when set and valid.
fn line_every() -> Duration {
    match std::env::var("TESSERA_PROGRESS_EVERY")
        .ok()
        .as_deref()
        .map(str::trim)
    {
        Some("0" | "0s") => Duration::ZERO,
        Some(v) => tessera_core::units::parse_duration(v).unwrap_or(LINE_EVERY),
        None => LINE_EVERY,
    }
}

impl PartProgress {
    /// For `total` partitions holding `gpu_rows` GPU rows in all.
    pub fn new(total: usize, gpu_rows: u64) -> PartProgress {
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        let rows = match gpu_rows {
            r if r >= 1_000_000 => format!("{:.1} M GPU rows", r as f64 / 1e6),
            r if r >= 10_000 => format!("{:.0} k GPU rows", r as f64 / 1e3),
            r => format!("{r} GPU rows"),
        };
        let now = std::time::Instant::now();
        PartProgress {
            bar,
            tty: std::io::stderr().is_terminal(),
            total,
            rows,
            started: now,
            said: std::sync::Mutex::new(now),
            every: line_every(),
        }
    }

    /// `phase` (e.g. `analysing`) has `done` partitions done.
    pub fn set(&self, phase: &str, done: usize) {
        self.say(format!(
            "{phase}: {done}/{} node partition(s) · {} ·",
            self.total, self.rows
        ));
    }

    /// Shows `msg`: the spinner's message on a terminal; elsewhere a line on stderr at most
    /// every [`LINE_EVERY`] (`tessera: MSG 42s`).
    pub fn say(&self, msg: String) {
        if self.tty {
            if self.bar.is_hidden() {
                self.bar.set_draw_target(ProgressDrawTarget::stderr());
                self.bar.enable_steady_tick(Duration::from_millis(120));
            }
            self.bar.set_message(msg);
            return;
        }
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        if said.elapsed() >= self.every {
            *said = std::time::Instant::now();
            eprintln!("tessera: {msg} {}s", self.started.elapsed().as_secs());
        }
    }

    /// Clears the line.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for PartProgress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// Every Parquet file the partitions scan.
pub fn part_files(parts: &[tessera::ingest::Part]) -> Vec<std::path::PathBuf> {
    parts.iter().flat_map(|p| p.files.iter().cloned()).collect()
}

/// On an error while reading frames, names the history file whose data does not decode, when
/// one does not (`ingest::name_unreadable`); other errors pass unchanged.
pub fn name_file(e: anyhow::Error, files: &[std::path::PathBuf]) -> anyhow::Error {
    match tessera::ingest::name_unreadable(files) {
        Some(named) => anyhow::Error::new(named),
        None => e,
    }
}

/// What a command that reads telemetry works on: the node partitions, what ingest said, and
/// the range ([`tessera::range`]; `None` when the sources hold no row in the read bounds).
pub struct Loaded {
    pub parts: Vec<ingest::Part>,
    pub report: IngestReport,
    pub range: Option<TimeRange>,
}

impl Loaded {
    /// GPU rows ingested (before any narrowing), for progress.
    pub fn gpu_rows(&self) -> u64 {
        self.report.tables.get(&Table::Gpu).map_or(0, |t| t.rows)
    }
}

/// Ingests partitioned by node and resolves the range by the one rule of [`tessera::range`]
/// (`--until` the end of the data, `--since` 7 days before it, narrowed to the data), printing
/// its lines on stderr (`verb`: `analysing`, `reporting`). With `previous`, ingest reaches one
/// range further back (the report's week over week) and the frames are left whole; otherwise
/// they are narrowed to the range.
pub fn load(src: &SourceArgs, previous: bool, verb: &str) -> Result<Loaded> {
    load_with(src, previous.then_some(0), verb, false)
}

/// [`load`] with `previous`, ingest reaching at least `back_ms` before the end (the report's
/// trend weeks).
pub fn load_reaching(src: &SourceArgs, back_ms: i64, verb: &str) -> Result<Loaded> {
    load_with(src, Some(back_ms), verb, false)
}

/// [`load`] for a command whose range is a search window (`tessera job`: the job somewhere in
/// the last 30 days): a window reaching past the data is not said.
pub fn load_search(src: &SourceArgs) -> Result<(Vec<ingest::Part>, Option<TimeRange>, u64)> {
    let l = load_with(src, None, "searching", true)?;
    let rows = l.gpu_rows();
    Ok((l.parts, l.range, rows))
}

/// `back`: `None` reads the range only; `Some(ms)` reaches one range further back and at least
/// `ms` before the end, leaving the frames whole.
fn load_with(src: &SourceArgs, back: Option<i64>, verb: &str, search: bool) -> Result<Loaded> {
    let now = chrono::Utc::now().timestamp_millis();
    let req = src.range_request()?;
    let previous = back.is_some();
    let bounds = match back {
        Some(ms) => req.read_bounds_back(ms, now),
        None => req.read_bounds(false, now),
    };
    let (parts, report) = src.ingest_bounds(bounds, true)?;
    let Some((first, last)) = report.time_range() else {
        return Ok(Loaded {
            parts,
            report,
            range: None,
        });
    };
    // Rows read only for the period before (`previous`): none ends in the range itself, which
    // starts at or after the data's end. No range, as when nothing was read.
    if req.since.is_some_and(|s| last <= s) {
        return Ok(Loaded {
            parts,
            report,
            range: None,
        });
    }
    let resolved = req.resolve(
        first,
        last,
        || -> Result<i64> {
            Ok(ingest::first_row_start(&parts)
                .map_err(|e| name_file(e.into(), &part_files(&parts)))?
                .unwrap_or(first))
        },
        verb,
    )?;
    let past = resolved.past_data.iter().filter(|_| !search);
    for m in resolved.messages.iter().chain(past) {
        eprintln!("tessera: {m}");
    }
    let range = resolved.range;
    let parts = if previous {
        parts
    } else {
        parts
            .into_iter()
            .map(|p| ingest::Part {
                key: p.key,
                frames: p.frames.within(range.since, range.until),
                files: p.files,
            })
            .collect()
    };
    Ok(Loaded {
        parts,
        report,
        range: Some(range),
    })
}

/// [`load`] narrowed to the range: the partitions, the range and the GPU rows ingested.
pub fn load_parts(src: &SourceArgs) -> Result<(Vec<ingest::Part>, Option<TimeRange>, u64)> {
    let l = load(src, false, "analysing")?;
    let rows = l.gpu_rows();
    Ok((l.parts, l.range, rows))
}

/// `--tz`: an IANA time zone name.
pub fn parse_tz(s: &str) -> Result<Tz, String> {
    s.parse().map_err(|_| {
        format!("bad --tz {s:?}: expected an IANA time zone such as UTC or Europe/Berlin")
    })
}

/// The advisor over the sources of `src` with `params`, only `detectors` (every detector when
/// empty; ids checked against the registry before anything is read), with a progress bar on
/// stderr: the workflow `analyze` and `notify` share. With `replay`, the plans the plan actions
/// propose are replayed on the analysed range and the actions carry the verdicts (`analyze`;
/// `notify` does not replay).
pub fn analyze_sources(
    src: &SourceArgs,
    params: &tessera::advisor::Params,
    detectors: &[String],
    replay: bool,
) -> Result<tessera::advisor::Analysis> {
    use tessera::advisor;
    let known: Vec<&str> = advisor::registry().iter().map(|d| d.id()).collect();
    for d in detectors {
        if !known.contains(&d.as_str()) {
            anyhow::bail!(
                "unknown --detector {d:?}; expected one of {}",
                known.join(", ")
            );
        }
    }
    let (parts, range, gpu_rows) = load_parts(src)?;
    if range.is_none() {
        anyhow::bail!("no rows in the sources for the chosen range: nothing to analyse");
    }
    let sources = src.sources.iter().map(|s| s.to_string()).collect();
    let files = part_files(&parts);
    // The partitions again for the MIG layouts the actions weigh (lazy frames: no copy).
    let frames: Vec<_> = parts.iter().map(|p| p.frames.clone()).collect();
    let bar = PartProgress::new(parts.len(), gpu_rows);
    bar.set("analysing", 0);
    let mut analysis = advisor::analyze_parts_with(
        parts
            .into_iter()
            .map(|p| Ok::<_, advisor::AdvisorError>(p.frames)),
        params,
        range.map(|r| (r.since, r.until)),
        sources,
        detectors,
        &|n| bar.set("analysing", n),
    )
    .map_err(|e| name_file(e.into(), &files))?;
    bar.finish();
    // One recommendation per workload, MIG layouts weighed as the report weighs them (only when
    // every detector ran: a chosen few answer a narrower question).
    if detectors.is_empty()
        && let Some(r) = range
    {
        let refs: Vec<_> = frames.iter().collect();
        let plans =
            tessera::actions::add_mig(&mut analysis, &refs, (r.since, r.until), &src.range_flags())
                .map_err(|e| name_file(anyhow::Error::new(e), &files))?;
        if replay && !plans.is_empty() {
            let checks = tessera::replay::train::in_sample(
                &refs,
                r,
                &plans,
                &analysis.sources,
                &tessera::prices::Prices::default(),
            );
            tessera::report::verdicts_from_replays(&mut analysis.actions, &checks);
        }
    }
    Ok(analysis)
}

/// Every detector's threshold flags (`--idle.*`, `--span.*`, `--consolidation.*`, the off-peak
/// flags, `--busy.*`), shared by `analyze` and `notify` so that both find the same findings.
#[derive(Debug, Args)]
pub struct ThresholdArgs {
    /// Idle: least memory held, GiB.
    #[arg(long = "idle.min-memory-gib", default_value_t = 1.0)]
    pub idle_min_memory_gib: f64,
    /// Idle: highest activity that counts as idle (0-1, on the interval max).
    #[arg(long = "idle.max-activity", default_value_t = 0.01)]
    pub idle_max_activity: f64,
    /// Idle: shortest span.
    #[arg(long = "idle.min-duration", default_value = "60m", value_parser = parse_interval)]
    pub idle_min_duration: i64,
    /// Idle and busy: a gap longer than this many of the entity's own rows (and 5 minutes)
    /// breaks a span.
    #[arg(long = "span.max-gap-intervals", default_value_t = 3.0)]
    pub max_gap_intervals: f64,

    /// Consolidation: memory headroom on the combined peak (0.1 = 10%).
    #[arg(long = "consolidation.headroom", default_value_t = 0.10)]
    pub headroom: f64,
    /// Consolidation: quantile of the combined activity that must stay under the target.
    #[arg(long = "consolidation.quantile", default_value_t = 0.95)]
    pub quantile: f64,
    /// Consolidation: activity target for that quantile (0-1).
    #[arg(long = "consolidation.compute-target", default_value_t = 0.8)]
    pub compute_target: f64,
    /// Consolidation: bucket of the aligned series.
    #[arg(long = "consolidation.step", default_value = "1m", value_parser = parse_interval)]
    pub step: i64,

    #[command(flatten)]
    pub offpeak: OffpeakArgs,

    /// Busy-not-working: lowest busy ratio (0-1).
    #[arg(long = "busy.min-busy", default_value_t = 0.5)]
    pub min_busy: f64,
    /// Busy-not-working: SM activity at most this share of busy.
    #[arg(long = "busy.max-sm-share", default_value_t = 0.5)]
    pub max_sm_share: f64,
    /// Busy-not-working: least total time for a finding.
    #[arg(long = "busy.min-duration", default_value = "60m", value_parser = parse_interval)]
    pub busy_min_duration: i64,
    /// Busy-not-working, where GPM's tensor and DRAM activity are in the data: highest tensor
    /// activity of a busy row that did no work, whatever its SM activity (0-1).
    #[arg(long = "busy.max-tensor", default_value_t = 0.05)]
    pub max_tensor: f64,
    /// Busy-not-working: highest DRAM activity (share of peak bandwidth) of such a row (0-1).
    #[arg(long = "busy.max-dram", default_value_t = 0.10)]
    pub max_dram: f64,
    /// Busy-not-working: highest FP64, FP32 and FP16 pipe activity of such a row, where known
    /// (0-1).
    #[arg(long = "busy.max-pipe", default_value_t = 0.10)]
    pub max_pipe: f64,
}

impl ThresholdArgs {
    /// The advisor's parameters of the flags, in time zone `tz`; refuses a ratio outside 0-1 or
    /// a negative headroom or memory.
    pub fn params(&self, tz: chrono_tz::Tz) -> Result<tessera::advisor::Params> {
        for (name, v) in [
            ("--idle.max-activity", self.idle_max_activity),
            ("--consolidation.quantile", self.quantile),
            ("--consolidation.compute-target", self.compute_target),
            ("--busy.min-busy", self.min_busy),
            ("--busy.max-sm-share", self.max_sm_share),
            ("--busy.max-tensor", self.max_tensor),
            ("--busy.max-dram", self.max_dram),
            ("--busy.max-pipe", self.max_pipe),
        ] {
            if !(0.0..=1.0).contains(&v) {
                anyhow::bail!("bad {name} {v}: expected a ratio in 0–1");
            }
        }
        if !(self.headroom >= 0.0 && self.idle_min_memory_gib >= 0.0) {
            anyhow::bail!(
                "--consolidation.headroom and --idle.min-memory-gib must not be negative"
            );
        }
        let mut p = tessera::advisor::Params {
            tz,
            offpeak: self.offpeak.params()?,
            ..tessera::advisor::Params::default()
        };
        p.idle.min_memory_bytes = self.idle_min_memory_gib * (1u64 << 30) as f64;
        p.idle.max_activity = self.idle_max_activity;
        p.idle.min_duration_ms = self.idle_min_duration;
        p.idle.max_gap_intervals = self.max_gap_intervals;
        p.busy.max_gap_intervals = self.max_gap_intervals;
        p.consolidation.headroom = self.headroom;
        p.consolidation.quantile = self.quantile;
        p.consolidation.compute_target = self.compute_target;
        p.consolidation.step_ms = self.step;
        p.busy.min_busy = self.min_busy;
        p.busy.max_sm_share = self.max_sm_share;
        p.busy.min_duration_ms = self.busy_min_duration;
        p.busy.max_tensor = self.max_tensor;
        p.busy.max_dram = self.max_dram;
        p.busy.max_pipe = self.max_pipe;
        Ok(p)
    }
}

/// The off-peak window flags, shared by `analyze` and `mig plan`.
#[derive(Debug, Args)]
pub struct OffpeakArgs {
    /// Off-peak: GPUs a window needs free beyond those free around the clock: a count (4) or a
    /// share of the fleet (10%).
    #[arg(long = "offpeak.min-gpus", default_value = "10%")]
    pub min_gpus: MinGpus,
    /// Off-peak: share of observed weeks (days) in which they must be free (0-1).
    #[arg(long = "offpeak.min-share", default_value_t = 0.9)]
    pub min_share: f64,
    /// Off-peak: shortest window in hours.
    #[arg(long = "offpeak.min-hours", default_value_t = 4)]
    pub min_hours: u32,
}

impl OffpeakArgs {
    /// The off-peak parameters of the flags (the rest default); refuses a share outside 0-1.
    pub fn params(&self) -> Result<OffpeakParams> {
        if !(0.0..=1.0).contains(&self.min_share) {
            anyhow::bail!(
                "bad --offpeak.min-share {}: expected a ratio in 0–1",
                self.min_share
            );
        }
        Ok(OffpeakParams {
            min_gpus: self.min_gpus,
            min_share: self.min_share,
            min_hours: self.min_hours,
            ..OffpeakParams::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_interval;

    #[test]
    fn every_duration_flag_accepts_the_same_units() {
        // One parser (`tessera_core::units`): `--interval 500ms` works like the exporter's.
        assert_eq!(parse_interval("500ms"), Ok(500));
        assert_eq!(parse_interval("1.5m"), Ok(90_000));
        assert_eq!(parse_interval("1w"), Ok(604_800_000));
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("10").is_err());
        assert!(parse_interval("0.1ms").unwrap_err().contains("1ms"));
    }
}
