//! `tessera ingest`: flag parsing and printing for the ingest summary (a module of the binary,
//! not of the library). Table or JSON on stdout; warnings and progress on stderr.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tessera::ingest::{
    self, Frames, IngestOptions, IngestReport, PrometheusOptions, Source, summary,
};

/// Spill folders of prometheus: sources read by node (`IngestOptions::spill`), kept until the
/// command is done.
static SPILLS: std::sync::Mutex<Vec<tempfile::TempDir>> = std::sync::Mutex::new(Vec::new());

/// Removes the spill folders (the partitions that scan them must no longer be read).
pub fn remove_spills() {
    SPILLS.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// Where to read from and which time range: shared by `ingest`, `analyze` and later commands.
#[derive(Debug, Args)]
pub struct SourceArgs {
    /// Telemetry source, repeatable: history:DIR (node folders, one node folder, or a glob),
    /// csv:FILE (generic long format or nvidia-smi --format=csv), prometheus:URL.
    #[arg(long = "source", required = true, value_parser = parse_source)]
    pub sources: Vec<Source>,
    /// Keep rows from this time on: a duration back from now (7d, 12h) or an RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// Keep rows before this time: a duration back from now or an RFC 3339 time.
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
    #[arg(long = "prometheus.max-response-size", value_name = "SIZE", default_value = "128MiB", value_parser = tessera_exporter::history::parse_bytes)]
    pub prometheus_max_response_bytes: u64,
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

#[derive(Debug, Args)]
pub struct IngestArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

fn parse_source(s: &str) -> Result<Source, String> {
    s.parse().map_err(|e: ingest::IngestError| e.to_string())
}

fn parse_basic_auth(s: &str) -> Result<(String, PathBuf), String> {
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

pub fn parse_interval(s: &str) -> Result<i64, String> {
    // A duration back from 0 is minus the duration.
    match ingest::parse_time(s, 0) {
        Ok(v) if v < 0 && s.ends_with(|c: char| c.is_ascii_alphabetic()) => Ok(-v),
        _ => Err(format!(
            "bad interval {s:?}: expected a duration like 10s, 1m or 1h"
        )),
    }
}

impl SourceArgs {
    /// Ingests the sources with the flags' options, partitioned by node
    /// (`ingest::ingest_parts`), showing a spinner on a terminal when it takes more than half a
    /// second; prints the report's warnings on stderr. `footer_stats`: see
    /// [`IngestOptions::footer_stats`].
    pub fn ingest_parts(&self, footer_stats: bool) -> Result<(Vec<ingest::Part>, IngestReport)> {
        let now = chrono::Utc::now().timestamp_millis();
        let since = self
            .since
            .as_deref()
            .map(|s| ingest::parse_time(s, now))
            .transpose()?;
        let until = self
            .until
            .as_deref()
            .map(|s| ingest::parse_time(s, now))
            .transpose()?;
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
        // A prometheus: source read by node spills each partition's rows here (removed at exit,
        // `remove_spills`).
        let spill = if self
            .sources
            .iter()
            .any(|s| matches!(s, Source::Prometheus(_)))
        {
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
            prometheus: PrometheusOptions {
                timeout: Duration::from_millis(self.prometheus_timeout.max(1) as u64),
                bearer_token_file: self.prometheus_bearer_token_file.clone(),
                basic_auth: self.prometheus_basic_auth.clone(),
                max_response_bytes: self.prometheus_max_response_bytes,
                concurrency: self.prometheus_concurrency as usize,
                nodes_per_query: self.prometheus_nodes_per_query as usize,
                api: self.prometheus_api,
                ..PrometheusOptions::default()
            },
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

pub fn run(args: IngestArgs) -> Result<()> {
    // Scans `ts` (not footer statistics): `tessera ingest` is also how a user checks the data.
    let (parts, report) = args.src.ingest_parts(false)?;
    let files = crate::analyze_cmd::part_files(&parts);
    let frames: Vec<Frames> = parts.into_iter().map(|p| p.frames).collect();
    let summaries = summary::describe_parts(&frames, &report)
        .map_err(|e| crate::analyze_cmd::name_file(e.into(), &files))?;
    match args.format {
        OutputFormat::Table => print!("{}", summary::render_table(&summaries, &report)),
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&summary::to_json(&summaries, &report))?
        ),
    }
    Ok(())
}

/// Per-partition progress of a long command on a terminal (stderr): the phase, node partitions
/// done of total, the rows read and the time elapsed, e.g. `analysing: 12/128 nodes · 61.9 M GPU
/// rows · 8s`. Drawn only when stderr is a terminal (from the first update; the line is cleared
/// at the end), never on a pipe or file. Safe to update from worker threads.
pub struct PartProgress {
    bar: ProgressBar,
    tty: bool,
    total: usize,
    rows: String,
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
        PartProgress {
            bar,
            tty: std::io::stderr().is_terminal(),
            total,
            rows,
        }
    }

    /// `phase` (e.g. `analysing`) has `done` partitions done.
    pub fn set(&self, phase: &str, done: usize) {
        if self.tty && self.bar.is_hidden() {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(120));
        }
        self.bar.set_message(format!(
            "{phase}: {done}/{} node partition(s) · {} ·",
            self.total, self.rows
        ));
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
