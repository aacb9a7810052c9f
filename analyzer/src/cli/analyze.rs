//! `tessera analyze`: flag parsing and printing for the advisor (a module of the binary). Ingests
//! the sources, narrows to the analysed range, runs every detector of the registry and prints a
//! table or the versioned findings JSON (`docs/findings.md`) on stdout; warnings on stderr.
//! `--plan-out` also writes the consolidation moves as a plan file (docs/plan.md). The actions
//! carry their teams' owners as the report's do (`--owners`, the Kubernetes API, the
//! namespaces' labels of `prometheus:` sources, `sacct`: docs/report.md, "Owners").

use anyhow::Result;
use chrono_tz::Tz;
use clap::Args;
use tessera::advisor;

use tessera::output::{Format, TABLE_JSON};

use super::source::{
    OwnersArgs, SourceArgs, ThresholdArgs, add_namespace_labels, add_slurm_accounts,
    analyze_sources, parse_tz,
};

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub src: SourceArgs,
    /// Time zone of schedules and hour-of-week profiles (IANA name, e.g. Europe/Berlin).
    #[arg(long, default_value = "UTC", value_parser = parse_tz)]
    tz: Tz,
    /// Output format.
    #[arg(long, value_parser = TABLE_JSON, default_value_t = Format::Table)]
    format: Format,
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
    /// The teams' contacts (docs/report.md, "Owners").
    #[command(flatten)]
    owners: OwnersArgs,
}

pub fn run(args: AnalyzeArgs) -> Result<()> {
    let params = args.thresholds.params(args.tz)?;
    let mut owners = args.owners.file()?;
    let mut analysis = analyze_sources(&args.src, &params, &args.detectors, !args.no_replay)?;
    let until = analysis
        .until
        .as_deref()
        .and_then(|u| chrono::DateTime::parse_from_rfc3339(u).ok())
        .map_or_else(
            || chrono::Utc::now().timestamp_millis(),
            |t| t.timestamp_millis(),
        );
    add_namespace_labels(&mut owners, &args.src, until);
    let jobs = analysis
        .findings
        .iter()
        .filter_map(|f| f.entity.slurm_job.clone());
    add_slurm_accounts(&mut owners, jobs);
    for n in &owners.notes {
        eprintln!("tessera: warning: {n}");
    }
    tessera::actions::set_owners(&mut analysis.actions, &analysis.findings, &owners);
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
        Format::Json => print!("{}", tessera::output::json::document(&analysis)?),
        _ => print!(
            "{}",
            tessera::actions::render_table(&analysis, &analysis.actions)
        ),
    }
    Ok(())
}
