//! `tessera-exporter`: thin command-line glue over the library (argument parsing, logging, exit
//! codes). Samples GPUs through NVML or the simulated fleet; `--once` prints one snapshot.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use tessera_exporter::device::{DeviceError, GpuBackend};
use tessera_exporter::nvml::NvmlBackend;
use tessera_exporter::render;
use tessera_exporter::sampler::{BackendFactory, Sampler, SamplerConfig, parse_duration};
use tessera_exporter::sim::{self, SimBackend, SimClock};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// The NVIDIA driver through NVML.
    Nvml,
    /// A simulated node of a scenario (no GPU needed).
    Sim,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

/// GPU telemetry exporter: samples NVIDIA GPUs through NVML (or a simulated fleet).
#[derive(Debug, Parser)]
#[command(name = "tessera-exporter", version, about)]
struct Args {
    /// Where samples come from.
    #[arg(long, value_enum, default_value = "nvml")]
    backend: Backend,
    /// Path of libnvidia-ml.so to load instead of the system's.
    #[arg(long = "nvml.lib-path", value_name = "FILE")]
    nvml_lib_path: Option<PathBuf>,
    /// Scenario file for --backend sim (default: the embedded demo scenario).
    #[arg(long = "sim.scenario", value_name = "FILE")]
    sim_scenario: Option<PathBuf>,
    /// Node of the scenario to simulate (default: its first node).
    #[arg(long = "sim.node", value_name = "NAME")]
    sim_node: Option<String>,
    /// Virtual time of the (first) sample, RFC 3339 (default: the scenario's start, or now with --sim.speed).
    #[arg(long = "sim.time", value_name = "TIME")]
    sim_time: Option<chrono::DateTime<chrono::Utc>>,
    /// Virtual seconds per real second when sampling continuously (default 1).
    #[arg(long = "sim.speed", value_name = "X", default_value_t = 1.0)]
    sim_speed: f64,
    /// Time between samples.
    #[arg(long = "sample.interval", value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    sample_interval: Duration,
    /// Print one snapshot and exit.
    #[arg(long)]
    once: bool,
    /// Output format of snapshots.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Log level (error, warn, info, debug, trace); logs go to stderr.
    #[arg(long = "log.level", default_value = "info")]
    log_level: log::LevelFilter,
}

fn main() -> ExitCode {
    let args = Args::parse();
    env_logger::Builder::new()
        .filter_level(args.log_level)
        .target(env_logger::Target::Stderr)
        .init();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera-exporter: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn factory(args: &Args, continuous: bool) -> Result<BackendFactory> {
    if args.sim_speed <= 0.0 || !args.sim_speed.is_finite() {
        bail!(
            "--sim.speed must be a positive number, got {}",
            args.sim_speed
        );
    }
    match args.backend {
        Backend::Nvml => {
            let path = args.nvml_lib_path.clone();
            Ok(Box::new(move || {
                NvmlBackend::new(path.as_deref()).map(|b| Box::new(b) as Box<dyn GpuBackend>)
            }))
        }
        Backend::Sim => {
            let scenario = sim::load_scenario(args.sim_scenario.as_deref())?;
            let node = args.sim_node.clone();
            // Validate the node name now, so a typo fails at start rather than in the loop.
            SimBackend::new(
                &scenario,
                node.as_deref(),
                SimClock::Stepped {
                    next_ms: 0,
                    step_ms: 0,
                },
            )?;
            let step_ms = args.sample_interval.as_millis() as i64;
            let start_ms = match (args.sim_time, continuous) {
                (Some(t), _) => t.timestamp_millis(),
                (None, false) => scenario.start.timestamp_millis(),
                (None, true) => chrono::Utc::now().timestamp_millis(),
            };
            let speed = args.sim_speed;
            Ok(Box::new(move || {
                let clock = if continuous {
                    SimClock::Wall {
                        start_ms,
                        origin: std::time::Instant::now(),
                        speed,
                    }
                } else {
                    // `--once` primes counters with one sample a step before the reported one.
                    SimClock::Stepped {
                        next_ms: start_ms - step_ms,
                        step_ms,
                    }
                };
                SimBackend::new(&scenario, node.as_deref(), clock)
                    .map(|b| Box::new(b) as Box<dyn GpuBackend>)
                    .map_err(DeviceError::from)
            }))
        }
    }
}

fn print(args: &Args, backend: &str, snap: &tessera_exporter::sampler::Snapshot) {
    let (Some(inv), Some(sample)) = (&snap.inventory, &snap.sample) else {
        return;
    };
    match args.format {
        Format::Json if args.once => print!("{}", render::json(backend, inv, sample)),
        Format::Json => println!("{}", serde_json::to_string(sample).unwrap_or_default()),
        Format::Table => print!("{}", render::table_text(backend, inv, sample)),
    }
}

fn run(args: Args) -> Result<()> {
    if args.once {
        // One backend, two samples: the first primes counters (GPM, process utilisation, XID),
        // the second is printed.
        let mut make = factory(&args, false)?;
        let mut backend = make()?;
        let inventory = backend.inventory().context("reading the GPU inventory")?;
        backend.sample().context("taking the priming sample")?;
        if args.backend == Backend::Nvml {
            std::thread::sleep(Duration::from_millis(200).min(args.sample_interval));
        }
        let sample = backend.sample().context("sampling")?;
        let snap = tessera_exporter::sampler::Snapshot {
            sequence: 1,
            inventory: Some(inventory.into()),
            sample: Some(sample),
            state: tessera_exporter::sampler::BackendState {
                backend: backend.name(),
                healthy: true,
                last_error: None,
                initialisations: 1,
                errors_total: 0,
            },
            duration: Duration::ZERO,
            missed_ticks: 0,
            totals: Default::default(),
            attribution: Default::default(),
        };
        print(&args, backend.name(), &snap);
        return Ok(());
    }
    if args.backend == Backend::Nvml {
        // Fail fast with the clear message when there is no driver at all.
        if let Err(e @ DeviceError::LibraryNotFound { .. }) =
            NvmlBackend::new(args.nvml_lib_path.as_deref())
        {
            return Err(e.into());
        }
    }
    let sampler = Sampler::spawn(
        factory(&args, true)?,
        SamplerConfig {
            interval: args.sample_interval,
            ..SamplerConfig::default()
        },
    )?;
    log::info!(
        "sampling every {:?}; the HTTP server is not part of this build yet",
        args.sample_interval
    );
    let handle = sampler.handle();
    let mut seq = 0;
    loop {
        if let Some(snap) = handle.wait_newer(seq, Duration::from_secs(3600)) {
            seq = snap.sequence;
            print(&args, snap.state.backend, &snap);
        }
    }
}
