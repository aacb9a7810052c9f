//! The `tessera` command line: one module per command, and [`source`] for what the commands
//! that read telemetry share. Command glue only (flags, printing, exit codes, `anyhow`); every
//! command calls the library (`tessera::ingest`, `advisor`, `report`, `mig_planner`) or
//! `tessera_core`. Commands never import each other.

pub mod analyze;
pub mod ingest;
pub mod job;
pub mod mig;
pub mod mig_manager;
pub mod mig_plan;
pub mod mig_profiles;
pub mod report;
pub mod scenario;
pub mod simulate;
pub mod source;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// GPU utilization advisor.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Work with simulator scenario files.
    Scenario {
        #[command(subcommand)]
        command: scenario::ScenarioCommand,
    },
    /// Read telemetry sources into the canonical frames and summarise them.
    Ingest(ingest::IngestArgs),
    /// Find idle-loaded models, consolidation candidates, off-peak windows and busy-but-idle GPUs.
    Analyze(analyze::AnalyzeArgs),
    /// The weekly report: usage, cost, teams, waste, plans and data quality (table, Markdown,
    /// HTML or JSON).
    Report(report::ReportArgs),
    /// One Slurm job's GPUs, activity, memory peak, idle spans and a verdict (like jobstats).
    Job(job::JobArgs),
    /// Write N days of history for every node of a scenario, with its ground truth.
    Simulate(simulate::SimulateArgs),
    /// MIG layouts: plan them from history, export the node's, assert it matches a plan, apply
    /// a plan safely.
    Mig {
        #[command(subcommand)]
        command: MigCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum MigCommand {
    /// Plan MIG layouts from history: a tessera plan, optionally a mig-parted config and a
    /// day/night schedule.
    Plan(mig_plan::PlanArgs),
    /// Write the node's current MIG layout as a tessera plan (and as a mig-parted config).
    Export(mig::ExportArgs),
    /// Check the node against a plan: exit 0 when it matches, 1 with the differences.
    Assert(mig::AssertArgs),
    /// Change the node to match a plan: prints the steps; changes nothing without --yes.
    Apply(mig::ApplyArgs),
    /// Read the MIG profile tables of the node's GPUs from NVML and compare them with the
    /// built-in ones: exit 0 when they match, 1 with the differences. Changes nothing.
    Profiles(mig_profiles::ProfilesArgs),
}

/// Runs one command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Scenario { command } => scenario::run(command)?,
        Command::Ingest(args) => ingest::run(args)?,
        Command::Analyze(args) => analyze::run(args)?,
        Command::Report(args) => report::run(args)?,
        Command::Job(args) => job::run(args)?,
        Command::Simulate(args) => simulate::run(args)?,
        Command::Mig { command } => {
            let code = match command {
                MigCommand::Plan(args) => {
                    mig_plan::run(args)?;
                    0
                }
                MigCommand::Export(args) => mig::export(args)?,
                MigCommand::Assert(args) => mig::assert(args)?,
                MigCommand::Apply(args) => mig::apply(args)?,
                MigCommand::Profiles(args) => mig_profiles::run(args)?,
            };
            if code != 0 {
                std::process::exit(code.into());
            }
        }
    }
    Ok(())
}
