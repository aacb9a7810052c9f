//! `tessera analyze`: flag parsing and printing for the advisor (a module of the binary). Ingests
//! the sources, narrows to the analysed range, runs every detector of the registry and prints a
//! table or the versioned findings JSON (`docs/findings.md`) on stdout; warnings on stderr.
//! `--plan-out` also writes the consolidation moves as a plan file (docs/plan.md).

use anyhow::Result;
use chrono_tz::Tz;
use clap::Args;
use tessera::advisor;

use super::source::{OutputFormat, SourceArgs, ThresholdArgs, analyze_sources, parse_tz};

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
    /// Also write the consolidation findings' moves as a tessera plan (tessera-plan v1,
    /// docs/plan.md), for `tessera replay`.
    #[arg(long = "plan-out", value_name = "FILE")]
    plan_out: Option<std::path::PathBuf>,
    /// Leave the plan actions unreplayed: by default the consolidation moves and the MIG layout
    /// the actions propose are replayed on the analysed range and each carries the verdict.
    #[arg(long = "no-replay")]
    no_replay: bool,
}

pub fn run(args: AnalyzeArgs) -> Result<()> {
    let params = args.thresholds.params(args.tz)?;
    let analysis = analyze_sources(&args.src, &params, &args.detectors, !args.no_replay)?;
    if let Some(path) = &args.plan_out {
        let plan = advisor::plan_out::consolidation_plan(&analysis)?;
        tessera_core::files::replace(path, plan.to_yaml().as_bytes())?;
        eprintln!(
            "wrote {} ({} consolidation move(s))",
            path.display(),
            plan.consolidation.len()
        );
    }
    match args.format {
        OutputFormat::Table => print!(
            "{}",
            tessera::actions::render_table(&analysis, &analysis.actions)
        ),
        OutputFormat::Json => println!("{}", tessera::text::json_pretty(&analysis)?),
    }
    Ok(())
}
