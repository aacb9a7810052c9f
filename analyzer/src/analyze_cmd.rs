//! `tessera analyze`: flag parsing and printing for the advisor (a module of the binary). Ingests
//! the sources, narrows to the analysed range, runs every detector of the registry and prints a
//! table or the versioned findings JSON (`docs/findings.md`) on stdout; warnings on stderr.

use anyhow::{Result, bail};
use chrono_tz::Tz;
use clap::Args;
use tessera::advisor::{self, Params, offpeak::MinGpus};
use tessera::ingest::Table;

use crate::ingest_cmd::{OutputFormat, SourceArgs, parse_interval};

const WEEK_MS: i64 = 7 * 86_400_000;

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Time zone of schedules and hour-of-week profiles (IANA name, e.g. Europe/Berlin).
    #[arg(long, default_value = "UTC")]
    tz: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
    /// Run only these detectors (repeatable): idle_loaded, consolidation, offpeak_window,
    /// busy_not_working.
    #[arg(long = "detector")]
    detectors: Vec<String>,

    /// Idle: least memory held, GiB.
    #[arg(long = "idle.min-memory-gib", default_value_t = 1.0)]
    idle_min_memory_gib: f64,
    /// Idle: highest activity that counts as idle (0–1, on the interval max).
    #[arg(long = "idle.max-activity", default_value_t = 0.01)]
    idle_max_activity: f64,
    /// Idle: shortest span.
    #[arg(long = "idle.min-duration", default_value = "60m", value_parser = parse_interval)]
    idle_min_duration: i64,
    /// Idle and busy: a gap longer than this many of the entity's own rows (and 5 minutes)
    /// breaks a span.
    #[arg(long = "span.max-gap-intervals", default_value_t = 3.0)]
    max_gap_intervals: f64,

    /// Consolidation: memory headroom on the combined peak (0.1 = 10%).
    #[arg(long = "consolidation.headroom", default_value_t = 0.10)]
    headroom: f64,
    /// Consolidation: quantile of the combined activity that must stay under the target.
    #[arg(long = "consolidation.quantile", default_value_t = 0.95)]
    quantile: f64,
    /// Consolidation: activity target for that quantile (0–1).
    #[arg(long = "consolidation.compute-target", default_value_t = 0.8)]
    compute_target: f64,
    /// Consolidation: bucket of the aligned series.
    #[arg(long = "consolidation.step", default_value = "1m", value_parser = parse_interval)]
    step: i64,

    /// Off-peak: GPUs a window needs free beyond those free around the clock: a count (4) or a
    /// share of the fleet (10%).
    #[arg(long = "offpeak.min-gpus", default_value = "10%")]
    min_gpus: MinGpus,
    /// Off-peak: share of observed weeks (days) in which they must be free (0–1).
    #[arg(long = "offpeak.min-share", default_value_t = 0.9)]
    min_share: f64,
    /// Off-peak: shortest window in hours.
    #[arg(long = "offpeak.min-hours", default_value_t = 4)]
    min_hours: u32,

    /// Busy-not-working: lowest busy ratio (0–1).
    #[arg(long = "busy.min-busy", default_value_t = 0.5)]
    min_busy: f64,
    /// Busy-not-working: SM activity at most this share of busy.
    #[arg(long = "busy.max-sm-share", default_value_t = 0.5)]
    max_sm_share: f64,
    /// Busy-not-working: least total time for a finding.
    #[arg(long = "busy.min-duration", default_value = "60m", value_parser = parse_interval)]
    busy_min_duration: i64,
}

impl AnalyzeArgs {
    fn params(&self) -> Result<Params> {
        let tz: Tz = self.tz.parse().map_err(|_| {
            anyhow::anyhow!(
                "bad --tz {:?}: expected an IANA time zone such as UTC or Europe/Berlin",
                self.tz
            )
        })?;
        for (name, v) in [
            ("--idle.max-activity", self.idle_max_activity),
            ("--consolidation.quantile", self.quantile),
            ("--consolidation.compute-target", self.compute_target),
            ("--offpeak.min-share", self.min_share),
            ("--busy.min-busy", self.min_busy),
            ("--busy.max-sm-share", self.max_sm_share),
        ] {
            if !(0.0..=1.0).contains(&v) {
                bail!("bad {name} {v}: expected a ratio in 0–1");
            }
        }
        if !(self.headroom >= 0.0 && self.idle_min_memory_gib >= 0.0) {
            bail!("--consolidation.headroom and --idle.min-memory-gib must not be negative");
        }
        let known: Vec<&str> = advisor::registry().iter().map(|d| d.id()).collect();
        for d in &self.detectors {
            if !known.contains(&d.as_str()) {
                bail!(
                    "unknown --detector {d:?}; expected one of {}",
                    known.join(", ")
                );
            }
        }
        let mut p = Params {
            tz,
            ..Params::default()
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
        p.offpeak.min_gpus = self.min_gpus;
        p.offpeak.min_share = self.min_share;
        p.offpeak.min_hours = self.min_hours;
        p.busy.min_busy = self.min_busy;
        p.busy.max_sm_share = self.max_sm_share;
        p.busy.min_duration_ms = self.busy_min_duration;
        Ok(p)
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

/// A time range, unix ms (first, last).
pub type Range = (i64, i64);

/// Ingests partitioned by node (the advisor then runs one node at a time) and, without
/// `--since`, narrows to the last 7 days of the data.
/// Also returns the GPU rows ingested (before the narrowing), for progress.
pub fn load_parts(src: &SourceArgs) -> Result<(Vec<tessera::ingest::Part>, Option<Range>, u64)> {
    let (parts, report) = src.ingest_parts(true)?;
    let gpu_rows = report.tables.get(&Table::Gpu).map_or(0, |t| t.rows);
    let mut range = report.time_range();
    let parts = match range {
        Some((first, last)) if src.since.is_none() && last - first > WEEK_MS => {
            let from = last - WEEK_MS;
            eprintln!(
                "tessera: analysing the last 7 days of the data ({} .. {}); use --since for another range",
                tessera::ingest::fmt_ms(from),
                tessera::ingest::fmt_ms(last)
            );
            range = Some((from, last));
            parts
                .into_iter()
                .map(|p| tessera::ingest::Part {
                    key: p.key,
                    frames: p.frames.since(from),
                    files: p.files,
                })
                .collect()
        }
        _ => parts,
    };
    Ok((parts, range, gpu_rows))
}

pub fn run(args: AnalyzeArgs) -> Result<()> {
    let params = args.params()?;
    let (parts, range, gpu_rows) = load_parts(&args.src)?;
    if range.is_none() {
        bail!("no rows in the sources for the chosen range: nothing to analyse");
    }
    let sources = args.src.sources.iter().map(|s| s.to_string()).collect();
    let files = part_files(&parts);
    let bar = crate::ingest_cmd::PartProgress::new(parts.len(), gpu_rows);
    bar.set("analysing", 0);
    let analysis = advisor::analyze_parts_with(
        parts
            .into_iter()
            .map(|p| Ok::<_, advisor::AdvisorError>(p.frames)),
        &params,
        range,
        sources,
        &args.detectors,
        &|n| bar.set("analysing", n),
    )
    .map_err(|e| name_file(e.into(), &files))?;
    bar.finish();
    match args.format {
        OutputFormat::Table => print!("{}", advisor::render_table(&analysis)),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&analysis)?),
    }
    Ok(())
}
