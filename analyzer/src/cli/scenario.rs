//! `tessera scenario check|truth`: validate a simulator scenario and print a summary, or write
//! the ground truth of the conditions it plants.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;
use tessera::scenario;
use tessera_core::sim;

#[derive(Debug, Subcommand)]
pub enum ScenarioCommand {
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

/// Runs `tessera scenario …`.
pub fn run(command: ScenarioCommand) -> Result<()> {
    match command {
        ScenarioCommand::Check { file } => {
            let s = sim::load_scenario(file.as_deref())?;
            print!("{}", scenario::summary(&s));
        }
        ScenarioCommand::Truth { file, days, out } => {
            let s = sim::load_scenario(file.as_deref())?;
            let truth = scenario::truth(&s, days)?;
            match out {
                Some(path) => scenario::write_truth(&truth, &path)?,
                None => print!("{}", tessera::output::json::document(&truth)?),
            }
        }
    }
    Ok(())
}
