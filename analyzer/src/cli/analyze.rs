//! `tessera analyze`: flag parsing and printing for the advisor (a module of the binary). Ingests
//! the sources, narrows to the analysed range, runs every detector of the registry and prints a
//! table or the versioned findings JSON (`docs/findings.md`) on stdout; warnings on stderr.

use anyhow::{Result, bail};
use chrono_tz::Tz;
use clap::Args;
use tessera::advisor::{self, Params};

use super::source::{
    OffpeakArgs, OutputFormat, PartProgress, SourceArgs, load_parts, name_file, parse_interval,
    parse_tz, part_files,
};

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Time zone of schedules and hour-of-week profiles (IANA name, e.g. Europe/Berlin).
    #[arg(long, default_value = "UTC", value_parser = parse_tz)]
    tz: Tz,
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

    #[command(flatten)]
    offpeak: OffpeakArgs,

    /// Busy-not-working: lowest busy ratio (0–1).
    #[arg(long = "busy.min-busy", default_value_t = 0.5)]
    min_busy: f64,
    /// Busy-not-working: SM activity at most this share of busy.
    #[arg(long = "busy.max-sm-share", default_value_t = 0.5)]
    max_sm_share: f64,
    /// Busy-not-working: least total time for a finding.
    #[arg(long = "busy.min-duration", default_value = "60m", value_parser = parse_interval)]
    busy_min_duration: i64,
    /// Busy-not-working, where GPM's tensor and DRAM activity are in the data: highest tensor
    /// activity of a busy row that did no work, whatever its SM activity (0–1).
    #[arg(long = "busy.max-tensor", default_value_t = 0.05)]
    max_tensor: f64,
    /// Busy-not-working: highest DRAM activity (share of peak bandwidth) of such a row (0–1).
    #[arg(long = "busy.max-dram", default_value_t = 0.10)]
    max_dram: f64,
    /// Busy-not-working: highest FP64, FP32 and FP16 pipe activity of such a row, where known
    /// (0–1).
    #[arg(long = "busy.max-pipe", default_value_t = 0.10)]
    max_pipe: f64,
}

impl AnalyzeArgs {
    fn params(&self) -> Result<Params> {
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
            tz: self.tz,
            offpeak: self.offpeak.params()?,
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
        p.busy.min_busy = self.min_busy;
        p.busy.max_sm_share = self.max_sm_share;
        p.busy.min_duration_ms = self.busy_min_duration;
        p.busy.max_tensor = self.max_tensor;
        p.busy.max_dram = self.max_dram;
        p.busy.max_pipe = self.max_pipe;
        Ok(p)
    }
}

pub fn run(args: AnalyzeArgs) -> Result<()> {
    let params = args.params()?;
    let (parts, range, gpu_rows) = load_parts(&args.src)?;
    if range.is_none() {
        bail!("no rows in the sources for the chosen range: nothing to analyse");
    }
    let sources = args.src.sources.iter().map(|s| s.to_string()).collect();
    let files = part_files(&parts);
    let bar = PartProgress::new(parts.len(), gpu_rows);
    bar.set("analysing", 0);
    let analysis = advisor::analyze_parts_with(
        parts
            .into_iter()
            .map(|p| Ok::<_, advisor::AdvisorError>(p.frames)),
        &params,
        range.map(|r| (r.since, r.until)),
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
