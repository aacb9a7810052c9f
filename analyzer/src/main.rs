//! `tessera`: thin command-line glue over the analyzer library (argument parsing, exit codes).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tessera::scenario;
use tessera_exporter::sim;

/// mimalloc instead of glibc's allocator: the advisor allocates and frees large column buffers
/// per node; with glibc that churn cost a quarter of the run in page faults and `munmap`
/// (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (index 15 in both its v2 and v3 option enums).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// mimalloc's `mi_option_arena_eager_commit` (index 4 in both its v2 and v3 option enums).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

mod analyze_cmd;
mod ingest_cmd;
mod mig_cmd;
mod mig_plan_cmd;
mod mig_profiles_cmd;
mod report_cmd;
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
    /// The weekly report: usage, cost, teams, waste, plans and data quality (table, Markdown,
    /// HTML or JSON).
    Report(report_cmd::ReportArgs),
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
enum MigCommand {
    /// Plan MIG layouts from history: a tessera plan, optionally a mig-parted config and a
    /// day/night schedule.
    Plan(mig_plan_cmd::PlanArgs),
    /// Write the node's current MIG layout as a tessera plan (and as a mig-parted config).
    Export(mig_cmd::ExportArgs),
    /// Check the node against a plan: exit 0 when it matches, 1 with the differences.
    Assert(mig_cmd::AssertArgs),
    /// Change the node to match a plan: prints the steps; changes nothing without --yes.
    Apply(mig_cmd::ApplyArgs),
    /// Read the MIG profile tables of the node's GPUs from NVML and compare them with the
    /// built-in ones: exit 0 when they match, 1 with the differences. Changes nothing.
    Profiles(mig_profiles_cmd::ProfilesArgs),
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
    // Keep freed memory instead of returning it to the OS after 10 ms: the advisor frees and
    // re-allocates the same amount per node, and re-faulting fresh pages (the kernel zeroing
    // them) cost ~20% of its CPU time (docs/performance.md). Peak RSS is unchanged.
    // SAFETY: sets a process-wide allocator option before any thread is started.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    // Commit arena memory when it is reserved rather than page by page as it is first used: the
    // report's per-node buffers (tens of MiB each) otherwise fault in fresh pages one at a time;
    // with this, the system time of `tessera report` at 256 GPUs fell from 1.9 s to 0.4 s and
    // its wall time by ~8%, peak RSS unchanged (docs/performance.md).
    // SAFETY: as above.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 1) };
    // Output piped into a reader that stops early (`tessera … | head -1`) ends the process the
    // way every Unix filter ends, by SIGPIPE, instead of Rust's default of ignoring the signal
    // and panicking in `println!` with "failed printing to stdout" (exit 101).
    // SAFETY: called once at start-up, before any thread is spawned.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let result = run(Cli::parse());
    ingest_cmd::remove_spills();
    match result {
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
        Command::Report(args) => report_cmd::run(args)?,
        Command::Simulate(args) => simulate::run(args)?,
        Command::Mig { command } => {
            let code = match command {
                MigCommand::Plan(args) => {
                    mig_plan_cmd::run(args)?;
                    0
                }
                MigCommand::Export(args) => mig_cmd::export(args)?,
                MigCommand::Assert(args) => mig_cmd::assert(args)?,
                MigCommand::Apply(args) => mig_cmd::apply(args)?,
                MigCommand::Profiles(args) => mig_profiles_cmd::run(args)?,
            };
            if code != 0 {
                std::process::exit(code.into());
            }
        }
    }
    Ok(())
}
