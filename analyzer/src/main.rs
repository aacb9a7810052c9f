//! `tessera`: thin command-line glue over the analyzer library (argument parsing, exit codes).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tessera::scenario;
use tessera_exporter::sim;

mod analyze_cmd;
mod ingest_cmd;
mod mig_plan_cmd;
mod simulate;

/// GPU utilization advisor.
#[derive(Debug, Parser)]
#[command(name = "tessera", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with simulator scenario files.
    Scenario {
        #[command(subcommand)]
        command: ScenarioCommand,
    },
    /// Read telemetry sources into the canonical frames and summarise them.
    Ingest(ingest_cmd::IngestArgs),
    /// Find idle-loaded models, consolidation candidates, off-peak windows and busy-but-idle GPUs.
    Analyze(analyze_cmd::AnalyzeArgs),
    /// Write N days of history for every node of a scenario, with its ground truth.
    Simulate(simulate::SimulateArgs),
    /// Plan MIG layouts (and, later, export, assert and apply them).
    Mig {
        #[command(subcommand)]
        command: MigCommand,
    },
}

#[derive(Debug, Subcommand)]
enum MigCommand {
    /// Plan MIG layouts from history: a tessera plan, optionally a mig-parted config and a
    /// day/night schedule.
    Plan(mig_plan_cmd::PlanArgs),
}

#[derive(Debug, Subcommand)]
enum ScenarioCommand {
    /// Validate a scenario and print a summary.
    Check {
        /// Scenario file (default: the embedded demo scenario).
        file: Option<PathBuf>,
    },
    /// Write the ground truth (planted conditions) of a scenario as JSON.
    Truth {
        /// Scenario file (default: the embedded demo scenario).
        file: Option<PathBuf>,
        /// Days from the scenario's start.
        #[arg(long, default_value_t = 7)]
        days: u32,
        /// Output file (default: standard output).
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Scenario { command } => match command {
            ScenarioCommand::Check { file } => {
                let s = sim::load_scenario(file.as_deref())?;
                print!("{}", scenario::summary(&s));
            }
            ScenarioCommand::Truth { file, days, out } => {
                let s = sim::load_scenario(file.as_deref())?;
                let truth = scenario::truth(&s, days)?;
                match out {
                    Some(path) => scenario::write_truth(&truth, &path)?,
                    None => println!("{}", serde_json::to_string_pretty(&truth)?),
                }
            }
        },
        Command::Ingest(args) => ingest_cmd::run(args)?,
        Command::Analyze(args) => analyze_cmd::run(args)?,
        Command::Simulate(args) => simulate::run(args)?,
        Command::Mig { command } => match command {
            MigCommand::Plan(args) => mig_plan_cmd::run(args)?,
        },
    }
    Ok(())
}
