//! The `tessera` command line: one module per command (a folder for the `mig` family, one file
//! per verb), and [`source`] for what the commands that read telemetry share. Command glue only (flags, printing, exit codes, `anyhow`); every
//! command calls the library (`tessera::ingest`, `advisor`, `report`, `mig_planner`) or
//! `tessera_core`. Commands never import each other.

pub mod analyze;
pub mod ingest;
pub mod job;
pub mod mig;
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
        command: mig::MigCommand,
    },
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
            let code = mig::run(command)?;
            if code != 0 {
                std::process::exit(code.into());
            }
        }
    }
    Ok(())
}
