//! `tessera-exporter`: thin command-line glue over the library (argument parsing, logging, exit
//! codes). Samples GPUs through NVML or the simulated fleet and serves `/metrics`; `--once`
//! prints one snapshot instead.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, ValueEnum};
use std::collections::HashSet;
use std::sync::Arc;

use tessera_core::backend::{BackendKind, BackendSpec};
use tessera_core::device::DeviceError;
use tessera_core::history::{self, WriterMode, WriterOptions};
use tessera_core::mig::parted::{PartedConfig, PartedFile};
use tessera_core::sim::{SimClock, SimNode};
use tessera_core::units::{parse_bytes, parse_duration};
use tessera_exporter::attribution::ProcAttributor;
use tessera_exporter::history_thread::{self, HistoryStats};
use tessera_exporter::kubelet::{self, Refresher, RefresherConfig};
use tessera_exporter::metrics::{MetricsExposition, RenderOptions};
use tessera_exporter::once;
use tessera_exporter::sampler::{
    AllocationSource, Attributor, BackendFactory, Sampler, SamplerConfig, SamplerHooks,
    SnapshotHandle,
};
use tessera_exporter::slurm::{self, SlurmScanner};
use tessera_exporter::web::{self, LandingInfo, Server, ServerOptions, WebConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

/// `--version`: the crate's version and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TESSERA_COMMIT"),
    ")"
);

/// GPU telemetry exporter: samples NVIDIA GPUs through NVML (or a simulated fleet).
#[derive(Debug, Parser)]
#[command(name = "tessera-exporter", version = VERSION, about)]
struct Args {
    /// Where samples come from (`tessera_core::backend`: the same flags as `tessera mig`).
    #[command(flatten)]
    device: BackendSpec,
    /// Virtual time of the (first) sample, RFC 3339 (default: the scenario's start, or now with --sim.speed).
    #[arg(long = "sim.time", value_name = "TIME")]
    sim_time: Option<chrono::DateTime<chrono::Utc>>,
    /// Virtual seconds per real second when sampling continuously (default 1).
    #[arg(long = "sim.speed", value_name = "X", default_value_t = 1.0)]
    sim_speed: f64,
    /// Time between samples.
    #[arg(long = "sample.interval", value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    sample_interval: Duration,
    /// Print one snapshot and exit (no HTTP server).
    #[arg(long)]
    once: bool,
    /// While serving, also print every sample to stdout (JSON lines with --format json).
    #[arg(long)]
    watch: bool,
    /// Addresses to listen on (repeatable), e.g. :19435, 127.0.0.1:19435, [::1]:19435.
    #[arg(long = "web.listen-address", value_name = "ADDRESS", default_values_t = [format!(":{}", web::DEFAULT_PORT)])]
    web_listen_address: Vec<String>,
    /// Path under which metrics are served.
    #[arg(
        long = "web.telemetry-path",
        value_name = "PATH",
        default_value = "/metrics"
    )]
    web_telemetry_path: String,
    /// Maximum number of concurrent scrapes; more get 503 (0 = no limit).
    #[arg(long = "web.max-requests", value_name = "N", default_value_t = 40)]
    web_max_requests: usize,
    /// exporter-toolkit web configuration file (TLS, basic auth); see docs/web.md.
    #[arg(long = "web.config.file", value_name = "FILE")]
    web_config_file: Option<PathBuf>,
    /// Longest time a client may take (TLS handshake, headers, idle connection).
    #[arg(long = "web.request-timeout", value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    web_request_timeout: Duration,
    /// Do not export per-process metrics (they are on by default).
    #[arg(long = "no-collector.processes")]
    no_collector_processes: bool,
    /// At most this many processes per node in the per-process metrics (the largest by memory).
    #[arg(
        long = "collector.processes.max",
        value_name = "N",
        default_value_t = 256
    )]
    collector_processes_max: usize,
    /// procfs mount point, for process attribution (the host's /proc when containerised).
    #[arg(long = "path.procfs", value_name = "PATH", default_value = "/proc")]
    path_procfs: PathBuf,
    /// Folder of the history files (one sub-folder per node; docs/history-format.md). Default:
    /// /var/lib/tessera/history when writable, otherwise history is off. "" disables it.
    #[arg(long = "history.dir", value_name = "DIR", value_parser = clap::builder::OsStringValueParser::new())]
    history_dir: Option<std::ffi::OsString>,
    /// Length of one history row (aggregation interval). With history on, the energy counter
    /// and per-process utilisation are read once per history interval.
    #[arg(long = "history.interval", value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    history_interval: Duration,
    /// With history off: read the energy counter and per-process utilisation (the two slow NVML
    /// calls, docs/performance.md) once per this interval, on its last sample; the exported
    /// energy counter may be up to this old. "0s" reads them every sample.
    #[arg(long = "energy.interval", value_name = "DURATION", default_value = "10s", value_parser = parse_duration_or_zero)]
    energy_interval: Duration,
    /// Delete closed history files older than this.
    #[arg(long = "history.retention", value_name = "DURATION", default_value = "30d", value_parser = parse_duration)]
    history_retention: Duration,
    /// Delete the oldest closed history files beyond this size per node (e.g. 512MiB, 2GB).
    #[arg(long = "history.max-bytes", value_name = "SIZE", default_value = "1GiB", value_parser = parse_bytes)]
    history_max_bytes: u64,
    /// The node's planned MIG layout: an nvidia-mig-parted config file (version v1); with
    /// --mig.config-label, exports tessera_mig_layout_drift per GPU (docs/metrics.md).
    #[arg(
        long = "mig.config",
        value_name = "FILE",
        requires = "mig_config_label"
    )]
    mig_config: Option<PathBuf>,
    /// Which config of --mig.config is this node's plan (as nvidia-mig-parted apply -c LABEL).
    #[arg(
        long = "mig.config-label",
        value_name = "LABEL",
        requires = "mig_config"
    )]
    mig_config_label: Option<String>,
    /// The kubelet's pod-resources socket: label GPU, MIG and process series with the pod,
    /// namespace and container holding the device (docs/attribution.md). Default:
    /// /var/lib/kubelet/pod-resources/kubelet.sock when it exists, otherwise off. "" disables it.
    #[arg(long = "kubelet.pod-resources-socket", value_name = "PATH", value_parser = clap::builder::OsStringValueParser::new())]
    kubelet_socket: Option<std::ffi::OsString>,
    /// Record which Slurm job holds each GPU, from Slurm's job cgroups and the environment of
    /// the jobs' processes (reads other users' /proc/<pid>/environ: docs/attribution.md).
    #[arg(long = "collector.slurm")]
    collector_slurm: bool,
    /// Where the cgroup filesystem is mounted, for --collector.slurm (the host's when
    /// containerised).
    #[arg(long = "slurm.cgroup-root", value_name = "PATH", default_value = slurm::DEFAULT_CGROUP_ROOT)]
    slurm_cgroup_root: PathBuf,
    /// Longest time one call to the kubelet's pod-resources API may take.
    #[arg(long = "kubelet.timeout", value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    kubelet_timeout: Duration,
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

/// A duration, or `0`/`0s` for none.
fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    match s.trim() {
        "0" | "0s" => Ok(Duration::ZERO),
        other => parse_duration(other),
    }
}

fn factory(args: &Args, continuous: bool) -> Result<BackendFactory> {
    if args.sim_speed <= 0.0 || !args.sim_speed.is_finite() {
        bail!(
            "--sim.speed must be a positive number, got {}",
            args.sim_speed
        );
    }
    let opener = args.device.reader()?;
    let step_ms = args.sample_interval.as_millis() as i64;
    let start_ms = match (args.sim_time, opener.scenario(), continuous) {
        (Some(t), _, _) => t.timestamp_millis(),
        (None, Some(scenario), false) => scenario.start.timestamp_millis(),
        (None, _, _) => chrono::Utc::now().timestamp_millis(),
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
            SimClock::stepped(start_ms - step_ms, step_ms)
        };
        opener.open(clock)
    }))
}

/// Write one sample to stdout. A closed stdout (e.g. `| head`) is an `Err`, never a panic.
fn print_sample(
    format: Format,
    once: bool,
    backend: &str,
    snap: &tessera_exporter::sampler::Snapshot,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let (Some(inv), Some(sample)) = (&snap.inventory, &snap.sample) else {
        return Ok(());
    };
    let text = match format {
        Format::Json if once => once::json(backend, inv, sample),
        Format::Json => format!("{}\n", serde_json::to_string(sample).unwrap_or_default()),
        Format::Table => once::table_text(backend, inv, sample),
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// The planned MIG layout of `--mig.config`/`--mig.config-label`, parsed, selected and checked
/// against this node's GPUs when they can be read now (a bad file or a plan the GPUs cannot hold
/// fails here, with exit status 2).
fn mig_plan(args: &Args) -> Result<Option<Arc<PartedConfig>>> {
    let (Some(file), Some(label)) = (&args.mig_config, &args.mig_config_label) else {
        return Ok(None);
    };
    let plan = PartedFile::from_file(file)?.select(label)?;
    let inventory = factory(args, false).and_then(|mut make| {
        let mut backend = make()?;
        Ok(backend.inventory()?)
    });
    match inventory {
        Ok(inv) => {
            for warning in plan.validate(&inv)? {
                log::warn!("{warning}");
            }
            log::info!(
                "MIG plan: config {:?} of {} ({} GPU(s) checked)",
                plan.label,
                plan.source,
                inv.gpus.len()
            );
        }
        Err(e) => log::warn!(
            "cannot check --mig.config against the GPUs now ({e:#}); drift is exported once they can be read"
        ),
    }
    Ok(Some(Arc::new(plan)))
}

fn run(args: Args) -> Result<()> {
    let mig_plan = mig_plan(&args)?;
    if args.once {
        return run_once(&args);
    }
    if args.device.backend == BackendKind::Nvml {
        // Fail fast with the clear message when there is no driver at all.
        if let Err(e @ DeviceError::LibraryNotFound { .. }) =
            args.device.reader()?.open(SimClock::stepped(0, 0))
        {
            return Err(e.into());
        }
    }
    let web_config = args
        .web_config_file
        .as_deref()
        .map(WebConfig::from_file)
        .transpose()?;
    let history_stats = Arc::new(HistoryStats::default());
    let (history_sender, history_thread) = start_history(&args, &history_stats)?;
    let history_enabled = history_sender.is_some();
    // The kubelet is asked on a thread of its own; the sampler copies its latest answer.
    let kubelet = match kubelet_socket(&args) {
        Some(socket) => Some(Refresher::spawn(RefresherConfig {
            socket,
            every: args
                .sample_interval
                .clamp(Duration::from_secs(1), Duration::from_secs(60)),
            timeout: args.kubelet_timeout,
        })?),
        None => None,
    };
    let sampler = start_sampler(&args, history_enabled, history_sender, kubelet.as_ref())?;
    // Another exporter writing this node's history folder is a configuration error: fail now.
    if let Some(history_thread::FirstOpen::Failed(e @ history::HistoryError::Locked { .. })) =
        history_thread
            .as_ref()
            .and_then(|t| t.first_open(Duration::from_secs(10)))
    {
        sampler.stop();
        return Err(e.into());
    }
    let handle = sampler.handle();
    let exposition = Arc::new(MetricsExposition::new(
        handle.clone(),
        RenderOptions {
            processes: !args.no_collector_processes,
            processes_max: args.collector_processes_max,
            history: history_enabled.then(|| history_stats.clone()),
            mig_plan,
            kubelet: kubelet.as_ref().map(Refresher::stats),
            ..RenderOptions::default()
        },
    ));
    let server = Server::bind(
        ServerOptions {
            listen: args.web_listen_address.clone(),
            telemetry_path: args.web_telemetry_path.clone(),
            max_requests: args.web_max_requests,
            web_config,
            request_timeout: args.web_request_timeout,
            landing: LandingInfo {
                name: "tessera-exporter".into(),
                description: "GPU telemetry exporter: NVIDIA GPUs, MIG instances and processes"
                    .into(),
                version: env!("CARGO_PKG_VERSION").into(),
                links: Vec::new(),
            },
        },
        exposition,
    )?;
    log::info!(
        "serving {} (sampling every {:?})",
        args.web_telemetry_path,
        args.sample_interval
    );
    let running = server.spawn()?;
    if args.watch {
        spawn_watch(args.format, handle)?;
    }
    running.wait_for_signal()?;
    log::info!("shutting down");
    sampler.stop();
    // The history thread writes the interval in progress once the sampler is gone.
    if let Some(t) = history_thread
        && !t.join_within(Duration::from_secs(10))
    {
        log::warn!("history: the interval in progress was not written within 10 s");
    }
    Ok(())
}

/// `--once`: one backend, a priming sample and the sample printed.
fn run_once(args: &Args) -> Result<()> {
    // One backend, two samples: the first primes counters (GPM, process utilisation, XID),
    // the second is printed.
    let mut make = factory(args, false)?;
    let mut backend = make()?;
    let inventory = backend.inventory().context("reading the GPU inventory")?;
    backend.sample().context("taking the priming sample")?;
    if args.device.backend == BackendKind::Nvml {
        std::thread::sleep(Duration::from_millis(200).min(args.sample_interval));
    }
    let sample = backend.sample().context("sampling")?;
    let snap =
        tessera_exporter::sampler::Snapshot::of_sample(backend.name(), 1, inventory.into(), sample);
    if let Err(e) = print_sample(args.format, true, backend.name(), &snap)
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(e.into());
    }
    Ok(())
}

/// The history writer's thread when history is on ([`history_root`]), with the sender the
/// sampler offers it each snapshot through.
fn start_history(
    args: &Args,
    history_stats: &Arc<HistoryStats>,
) -> Result<(
    Option<history_thread::HistorySender>,
    Option<history_thread::HistoryThread>,
)> {
    Ok(match history_root(args) {
        Some(root) => {
            log::info!(
                "writing history to {} (every {:?}, keeping {:?} and at most {} bytes per node)",
                root.display(),
                args.history_interval,
                args.history_retention,
                args.history_max_bytes
            );
            let (sender, thread) = history_thread::spawn(
                root,
                WriterOptions {
                    interval_ms: args.history_interval.as_millis().max(1) as i64,
                    retention_ms: args.history_retention.as_millis() as i64,
                    max_bytes: args.history_max_bytes,
                    mode: WriterMode::Jsonl,
                },
                history_stats.clone(),
                64,
            )?;
            (Some(sender), Some(thread))
        }
        None => (None, None),
    })
}

/// The sampler thread with its hooks: attribution, the history writer, the kubelet's device map
/// and Slurm's allocation.
fn start_sampler(
    args: &Args,
    history_enabled: bool,
    history_sender: Option<history_thread::HistorySender>,
    kubelet: Option<&Refresher>,
) -> Result<Sampler> {
    Ok(Sampler::spawn_with(
        factory(args, true)?,
        SamplerConfig {
            interval: args.sample_interval,
            slow_interval: if history_enabled {
                Some(args.history_interval)
            } else {
                Some(args.energy_interval).filter(|i| !i.is_zero())
            },
            ..SamplerConfig::default()
        },
        SamplerHooks {
            attributor: Some(attributor(args)?),
            on_sample: history_sender.map(|h| {
                Box::new(move |snap: &Arc<tessera_exporter::sampler::Snapshot>| h.offer(snap))
                    as tessera_exporter::sampler::OnSample
            }),
            pod_resources: kubelet.map(Refresher::handle),
            slurm: args.collector_slurm.then(|| {
                let mut scanner = SlurmScanner::new(&args.slurm_cgroup_root, &args.path_procfs);
                Box::new(move |inventory: &tessera_core::model::Inventory| {
                    scanner.allocation(inventory)
                }) as AllocationSource
            }),
        },
    )?)
}

/// `--watch`: a thread that prints each new snapshot until stdout closes.
fn spawn_watch(format: Format, handle: SnapshotHandle) -> Result<()> {
    std::thread::Builder::new()
        .name("tessera-watch".into())
        .spawn(move || {
            let mut seq = 0;
            loop {
                if let Some(snap) = handle.wait_newer(seq, Duration::from_secs(3600)) {
                    seq = snap.sequence;
                    if let Err(e) = print_sample(format, false, snap.state.backend, &snap) {
                        log::warn!("--watch stopped: cannot write to stdout: {e}");
                        return;
                    }
                }
            }
        })?;
    Ok(())
}

/// Where history goes: `--history.dir` as given ("" = off), or the default folder when it can
/// be created and written (checked with a probe file), else off with one INFO line saying why.
fn history_root(args: &Args) -> Option<PathBuf> {
    match &args.history_dir {
        Some(dir) if dir.is_empty() => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            let dir = PathBuf::from(history::DEFAULT_DIR);
            let probe = dir.join(format!(".tessera-probe-{}", std::process::id()));
            let ok = std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&probe, b""))
                .and_then(|()| std::fs::remove_file(&probe));
            match ok {
                Ok(()) => Some(dir),
                Err(e) => {
                    log::info!(
                        "history is off: {} is not writable ({e}); enable it with --history.dir=DIR",
                        dir.display()
                    );
                    None
                }
            }
        }
    }
}

/// The kubelet's pod-resources socket: `--kubelet.pod-resources-socket` as given ("" = off), or
/// the standard one when it exists, else off with one INFO line saying so.
fn kubelet_socket(args: &Args) -> Option<PathBuf> {
    match &args.kubelet_socket {
        Some(path) if path.is_empty() => None,
        Some(path) => Some(PathBuf::from(path)),
        None if std::path::Path::new(kubelet::DEFAULT_SOCKET).exists() => {
            Some(PathBuf::from(kubelet::DEFAULT_SOCKET))
        }
        None => {
            log::info!(
                "pod names from the kubelet are off: no {}; series carry the cgroup pod UID (pod_uid) only (set --kubelet.pod-resources-socket=PATH)",
                kubelet::DEFAULT_SOCKET
            );
            None
        }
    }
}

/// Attribution of processes to pods, containers and Slurm jobs: from procfs for NVML, from the
/// scenario for the simulator (its pids do not exist on this host).
fn attributor(args: &Args) -> Result<Attributor> {
    match args.device.scenario()? {
        None => {
            let mut procs = ProcAttributor::new(&args.path_procfs);
            Ok(Box::new(move |sample| {
                let live: HashSet<u32> = sample
                    .gpus
                    .iter()
                    .flat_map(|g| g.processes.iter().map(|p| p.pid))
                    .collect();
                procs.retain(&live);
                live.into_iter()
                    .map(|pid| (pid, procs.attribute(pid)))
                    .collect()
            }))
        }
        Some(scenario) => {
            let name = args
                .device
                .sim_node
                .clone()
                .unwrap_or_else(|| scenario.nodes[0].name.clone());
            let known = SimNode::new(&scenario, &name)
                .map(|n| n.attribution())
                .unwrap_or_default();
            Ok(Box::new(move |sample| {
                sample
                    .gpus
                    .iter()
                    .flat_map(|g| g.processes.iter())
                    .filter_map(|p| Some((p.pid, known.get(&p.pid)?.clone())))
                    .collect()
            }))
        }
    }
}
