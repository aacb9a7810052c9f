//! `tessera analyze`: flag parsing and printing for the advisor (a module of the binary). Ingests
//! the sources, narrows to the analysed range, runs every detector of the registry and prints a
//! table or the versioned findings JSON (`docs/findings.md`) on stdout; warnings on stderr.

use anyhow::{Result, bail};
use chrono_tz::Tz;
use clap::Args;
use tessera::advisor::{self, Params};

use super::source::{
    OutputFormat, PartProgress, SourceArgs, ThresholdArgs, load_parts, name_file, parse_tz,
    part_files,
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
    /// busy_not_working, allocated_unused.
    #[arg(long = "detector")]
    detectors: Vec<String>,

    #[command(flatten)]
    thresholds: ThresholdArgs,
}

impl AnalyzeArgs {
    fn params(&self) -> Result<Params> {
        let known: Vec<&str> = advisor::registry().iter().map(|d| d.id()).collect();
        for d in &self.detectors {
            if !known.contains(&d.as_str()) {
                bail!(
                    "unknown --detector {d:?}; expected one of {}",
                    known.join(", ")
                );
            }
        }
        self.thresholds.params(self.tz)
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
