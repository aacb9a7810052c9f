//! `tessera simulate`: write the history of every node of a scenario for N days (through the
//! exporter's aggregator and history writer, `tessera_core::simulate`) and its
//! ground truth beside it (`DIR/ground-truth.json`). Command-line glue only.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tessera::scenario;
use tessera_core::sim;
use tessera_core::simulate::simulate_with;
use tessera_core::units::parse_duration;

/// Arguments of `tessera simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (default: the embedded demo scenario).
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Days from the scenario's start.
    #[arg(long, default_value_t = 7)]
    days: u32,
    /// Output folder (one sub-folder per node, plus ground-truth.json).
    #[arg(long)]
    out: PathBuf,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Time between samples (the exporter's default is 1s; coarser is faster and less faithful).
    #[arg(long = "sample-interval", default_value = "1s", value_parser = parse_duration)]
    sample_interval: Duration,
    /// Length of one history row.
    #[arg(long = "history.interval", default_value = "10s", value_parser = parse_duration)]
    interval: Duration,
}

/// Run `tessera simulate`.
pub fn run(args: SimulateArgs) -> Result<()> {
    let mut s = sim::load_scenario(args.scenario.as_deref())?;
    if let Some(seed) = args.seed {
        s.seed = seed;
    }
    let truth = scenario::truth(&s, args.days)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let began = Instant::now();
    // Where it is: a spinner on a terminal, else a line every 10 s on stderr.
    let bar = super::source::PartProgress::new(s.nodes.len(), 0);
    let summary = simulate_with(
        &s,
        args.days,
        &args.out,
        args.sample_interval.as_millis() as i64,
        args.interval.as_millis() as i64,
        &|share| {
            bar.say(format!(
                "simulating: {:.0}% of {} node(s) × {} day(s) ·",
                share * 100.0,
                s.nodes.len(),
                args.days
            ))
        },
    )?;
    bar.finish();
    scenario::write_truth(&truth, &args.out.join("ground-truth.json"))?;
    println!(
        "simulated {} day(s) of {} node(s), {} GPU(s): {} samples -> {} gpu, {} mig, {} process rows in {} ({:.1} s)",
        args.days,
        summary.nodes,
        summary.gpus,
        summary.samples,
        summary.rows[0],
        summary.rows[1],
        summary.rows[2],
        args.out.display(),
        began.elapsed().as_secs_f64()
    );
    Ok(())
}
