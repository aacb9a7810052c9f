//! The `tessera` command line: one module per command (a folder for the `mig` family, one file
//! per verb), and [`source`] for what the commands that read telemetry share. Command glue only (flags, printing, exit codes, `anyhow`); every
//! command calls the library (`tessera::ingest`, `advisor`, `report`, `mig_planner`) or
//! `tessera_core`. Commands never import each other.

pub mod analyze;
pub mod generate;
pub mod ingest;
pub mod job;
pub mod mig;
pub mod notify;
pub mod queue;
pub mod replay;
pub mod report;
pub mod scale_down;
pub mod scenario;
pub mod share;
pub mod simulate;
pub mod source;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// `--version`: the crate's version and the commit it was built from (`build.rs`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TESSERA_COMMIT"),
    ")"
);

/// `tessera --help` lists the commands by task (clap cannot group subcommands, so the list is
/// this table, rendered into the help template; a test checks that every command and `mig`
/// verb is in exactly one group).
pub const GROUPS: &[(&str, &[&str])] = &[
    ("Observe", &["ingest", "job", "mig profiles"]),
    ("Advise", &["analyze", "notify"]),
    ("Report", &["report"]),
    ("Plan", &["mig plan", "queue plan", "queue check", "replay"]),
    (
        "Apply",
        &[
            "mig export",
            "mig assert",
            "mig apply",
            "share plan",
            "share apply",
            "scale-down",
            "queue apply",
            "queue edge",
            "queue schedule",
            "queue undo",
        ],
    ),
    ("Try it without a GPU", &["simulate", "scenario"]),
    ("Package", &["generate"]),
];

/// GPU utilization advisor.
#[derive(Debug, Parser)]
#[command(name = "tessera", version = VERSION, about)]
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
    /// Send the findings to Alertmanager, one alert per finding; resolve those no longer found.
    Notify(notify::NotifyArgs),
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
    /// Queue plans for batch schedulers: team quotas from measured demand and off-peak windows
    /// for deferred training; check an edited plan.
    Queue {
        #[command(subcommand)]
        command: queue::QueueCommand,
    },
    /// Replay a plan against history: what it would have freed, where memory would have run
    /// out, how much slower the shared work would have run; a verdict (safe, tight, unsafe).
    Replay(replay::ReplayArgs),
    /// GPU sharing (time-slicing or MPS) from a plan's consolidation moves, through the device
    /// plugin: print the configs, or roll them out node by node.
    Share {
        #[command(subcommand)]
        command: share::ShareCommand,
    },
    /// Scale idle workloads (Deployments, StatefulSets, KServe InferenceServices) to zero on
    /// Kubernetes, and back with --undo; dry run unless --yes.
    #[command(mut_arg("sources", |a| a.required(false)))]
    ScaleDown(scale_down::ScaleDownArgs),
    /// Man pages and shell completions (bash, zsh, fish) for packages.
    Generate(generate::GenerateArgs),
}

/// The command tree with the grouped command list in its help.
pub fn command() -> clap::Command {
    let cmd = Cli::command();
    let mut list = String::from("Commands, by task:\n");
    for (group, paths) in GROUPS {
        list.push_str(&format!("  {group}:\n"));
        let mut t = tessera::output::Table::default();
        for path in *paths {
            let about = find(&cmd, path)
                .and_then(|c| c.get_about())
                .map(|a| a.to_string())
                .unwrap_or_default();
            t.push(vec![path.to_string(), about]);
        }
        list.push_str(&t.columns(&tessera::output::Columns {
            indent: "    ",
            cols: &[
                tessera::output::Col::left(14),
                tessera::output::Col::left(0),
            ],
            trim_end: false,
        }));
    }
    list.push_str("  tessera help COMMAND, or tessera COMMAND --help, for one command's flags.\n");
    cmd.help_template(format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{list}\nOptions:\n{{options}}{{after-help}}"
    ))
}

/// The command at `path` (`report`, `mig plan`) in `cmd`'s tree.
pub fn find<'a>(cmd: &'a clap::Command, path: &str) -> Option<&'a clap::Command> {
    path.split(' ')
        .try_fold(cmd, |c, name| c.find_subcommand(name))
}

/// Parses the process's arguments against [`command`] (exits on a bad command line, as clap
/// does).
pub fn parse() -> Cli {
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Runs one command line; returns the exit code (0 done; the commands that act also 2 and 3,
/// docs of each). `main` exits with it after its cleanup, so no command exits the process itself.
pub fn run(cli: Cli) -> Result<u8> {
    Ok(match cli.command {
        Command::Scenario { command } => scenario::run(command).map(|()| 0)?,
        Command::Ingest(args) => ingest::run(args).map(|()| 0)?,
        Command::Analyze(args) => analyze::run(args).map(|()| 0)?,
        Command::Notify(args) => notify::run(args)?,
        Command::Report(args) => report::run(args)?,
        Command::Replay(args) => replay::run(args).map(|()| 0)?,
        Command::Job(args) => job::run(args).map(|()| 0)?,
        Command::Simulate(args) => simulate::run(args).map(|()| 0)?,
        Command::Generate(args) => generate::run(args, command()).map(|()| 0)?,
        Command::ScaleDown(args) => scale_down::run(args)?,
        Command::Share { command } => share::run(command)?,
        Command::Mig { command } => mig::run(command)?,
        Command::Queue { command } => queue::run(command).map(|()| 0)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`GROUPS`] gets wrong about `cmd`'s tree: a command (or, for a command whose verbs the
    /// groups name, a verb) in no group or in two, and a group entry naming no command.
    fn group_mismatches(cmd: &clap::Command, groups: &[(&str, &[&str])]) -> Vec<String> {
        let entries: Vec<&str> = groups.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        let mut out = Vec::new();
        for e in &entries {
            if find(cmd, e).is_none() {
                out.push(format!("{e:?} is not a command"));
            }
        }
        let count = |path: &str| entries.iter().filter(|e| **e == path).count();
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let name = sub.get_name();
            let by_verb = entries.iter().any(|e| e.starts_with(&format!("{name} ")));
            let paths: Vec<String> = if by_verb {
                sub.get_subcommands()
                    .filter(|v| v.get_name() != "help")
                    .map(|v| format!("{name} {}", v.get_name()))
                    .collect()
            } else {
                vec![name.to_string()]
            };
            for p in paths {
                match count(&p) {
                    1 => {}
                    0 => out.push(format!("{p:?} is in no group")),
                    n => out.push(format!("{p:?} is in {n} groups")),
                }
            }
            if by_verb && count(name) > 0 {
                out.push(format!("{name:?} is listed whole and by verb"));
            }
        }
        out
    }

    #[test]
    fn every_command_and_mig_verb_is_in_exactly_one_group() {
        assert_eq!(
            group_mismatches(&Cli::command(), GROUPS),
            Vec::<String>::new()
        );
    }

    #[test]
    fn the_group_check_finds_a_missing_a_twice_listed_and_an_unknown_command() {
        let planted: &[(&str, &[&str])] = &[
            ("Observe", &["ingest", "job", "mig profiles", "nope"]),
            ("Advise", &["analyze", "job", "notify"]),
            ("Report", &["report"]),
            ("Plan", &["mig plan", "queue plan", "queue check", "replay"]),
            (
                "Apply",
                &[
                    "mig export",
                    "mig apply",
                    "share",
                    "scale-down",
                    "queue apply",
                    "queue edge",
                    "queue schedule",
                    "queue undo",
                ],
            ),
            ("Try", &["simulate", "scenario", "generate"]),
        ];
        assert_eq!(
            group_mismatches(&Cli::command(), planted),
            vec![
                "\"nope\" is not a command".to_string(),
                "\"job\" is in 2 groups".to_string(),
                "\"mig assert\" is in no group".to_string(),
            ]
        );
    }
}
