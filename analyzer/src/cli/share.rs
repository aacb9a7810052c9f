//! `tessera share plan` and `tessera share apply` (docs/sharing.md): the flags, the plan file and
//! the sources read (the plan's window unless `--since`/`--until`), the connection, and
//! printing. A module of the binary: the choice and the rollout are `tessera::sharing`.
//!
//! Each host gets the sharing of the scheduler that holds its GPUs (`sharing::route`): the
//! device plugin where pods hold them, Slurm's gres lines (printed, never applied) where jobs do,
//! nothing across the two or where the data names no holder. `apply` writes device-plugin
//! config only for the first.
//!
//! Exit codes of `apply`: 0 done, dry run or nothing to do; 2 bad input, refused, a node that
//! did not reach its config, an API error or a signal, with every node put back; 3 something
//! could not be put back or confirmed (the `kubectl` commands are printed).

use chrono::{DateTime, Utc};
use std::path::PathBuf;
use std::time::Duration;
use tessera::evidence::{self, EvidenceArgs};
use tessera::kubernetes::Connection;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use tessera::advisor::scheduler::Scheduler;
use tessera::output::Format;
use tessera::sharing::choose::ChooseParams;
use tessera::sharing::demand::{self, GpuStats};
use tessera::sharing::kube::KubeDevicePlugin;
use tessera::sharing::rollout::{self, Request};
use tessera::sharing::route::{self, Routed};
use tessera::sharing::slurm;
use tessera::sharing::{CONFIG_LABEL, GPU_RESOURCE};
use tessera_core::mig::plan::TesseraPlan;

use super::source::{SourceArgs, load_parts, name_file, part_files, stop_flag};

#[derive(Debug, Subcommand)]
pub enum ShareCommand {
    /// Print the sharing each host node of a plan's consolidation moves would get, and why: the
    /// device plugin's config (time-slicing or MPS, replicas) where pods hold the GPUs, Slurm's
    /// gres/shard or gres/mps lines where jobs do; no cluster needed.
    Plan(PlanArgs),
    /// Roll the device plugin's configs out through the GPU Operator, node by node, with
    /// rollback (only nodes whose moves pods hold): a dry run unless --yes.
    Apply(ApplyArgs),
}

/// What both verbs read.
#[derive(Debug, Args)]
pub struct Common {
    /// The tessera plan whose consolidation moves are shared (`tessera analyze --plan-out`).
    #[arg(long, value_name = "FILE")]
    plan: PathBuf,
    #[command(flatten)]
    src: SourceArgs,
    /// Quantile of each workload's activity (SM activity, else busy ratio) checked against the
    /// 1/replicas of the SMs MPS gives a client (0-1).
    #[arg(long, default_value_t = 0.95)]
    quantile: f64,
    /// Memory headroom on each workload's peak for the MPS check (0.1 = 10%).
    #[arg(long, default_value_t = 0.1)]
    headroom: f64,
    /// Only this node (a host of the moves).
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// The scheduler of GPUs whose holders the data does not name (no pod or Slurm job in the
    /// history's holders or the processes' attribution): without it they are not shared.
    #[arg(long, value_enum, value_name = "SCHEDULER")]
    scheduler: Option<AssumedScheduler>,
}

/// `--scheduler`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AssumedScheduler {
    Kubernetes,
    Slurm,
}

impl From<AssumedScheduler> for Scheduler {
    fn from(s: AssumedScheduler) -> Scheduler {
        match s {
            AssumedScheduler::Kubernetes => Scheduler::Kubernetes,
            AssumedScheduler::Slurm => Scheduler::Slurm,
        }
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    common: Common,
    /// Output format: text, or JSON naming the scheduler of every node, host and workload.
    #[arg(long, value_parser = tessera::output::TEXT_JSON, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    kube: Connection,
    /// The GPU Operator's namespace, where the device plugin's ConfigMap is.
    #[arg(long, value_name = "NS", default_value = "gpu-operator")]
    namespace: String,
    /// The device plugin's ConfigMap when the ClusterPolicy cannot be read or names none (it
    /// must agree with spec.devicePlugin.config.name when that is set).
    #[arg(long, value_name = "NAME")]
    configmap: Option<String>,
    /// How long one node may take to advertise its new config (and, rolled back, its old one).
    #[arg(long = "node-timeout", value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    node_timeout: Duration,
    /// How often a changing node is read.
    #[arg(long = "poll-interval", value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    poll_interval: Duration,
    /// Act (default: a dry run that prints the configs, the ConfigMap diff, the label changes
    /// and the pods that would be disrupted).
    #[arg(long)]
    yes: bool,
    /// `--evidence.max-age` (default 1d: the measured data must end at most this long before
    /// now, or --yes refuses) and `--allow-stale-evidence`.
    #[command(flatten)]
    evidence: EvidenceArgs,
    /// The time to judge the evidence's age against, RFC 3339 (default: the clock).
    #[arg(long, value_name = "TIME")]
    now: Option<DateTime<Utc>>,
}

/// The default of `share apply --evidence.max-age`: a day.
pub const MAX_EVIDENCE_AGE_MS: i64 = 86_400_000;

fn parse_duration(s: &str) -> Result<Duration, String> {
    tessera_core::units::parse_duration(s)
}

/// The plan's moves measured on the sources, by host node and whose sharing applies.
fn node_plans(c: &mut Common) -> Result<(String, Routed, ChooseParams, i64)> {
    if !(0.0..=1.0).contains(&c.quantile) {
        bail!("bad --quantile {}: expected a ratio in 0–1", c.quantile);
    }
    if !(c.headroom.is_finite() && c.headroom >= 0.0) {
        bail!(
            "bad --headroom {}: expected a share ≥ 0 such as 0.1",
            c.headroom
        );
    }
    let source = c.plan.display().to_string();
    let plan = TesseraPlan::from_file(&c.plan)?;
    if plan.consolidation.is_empty() {
        bail!(
            "{source}: the plan has no consolidation moves (tessera analyze --plan-out writes them)"
        );
    }
    // The window the moves were planned from, unless the range is given.
    if let Some(w) = &plan.window
        && c.src.since.is_none()
        && c.src.until.is_none()
    {
        c.src.since = Some(w.from.clone());
        c.src.until = Some(w.until.clone());
    }
    let (parts, range, _) = load_parts(&c.src)?;
    let Some(range) = range else {
        bail!("no rows in the sources for the plan's window: nothing to measure the moves by");
    };
    let files = part_files(&parts);
    let mut stats: Vec<GpuStats> = Vec::new();
    for p in &parts {
        stats.extend(
            demand::gpu_stats(&p.frames, c.quantile).map_err(|e| name_file(e.into(), &files))?,
        );
    }
    let demands = demand::host_demands(&plan.consolidation, &stats);
    let assume = c.scheduler.map(Scheduler::from);
    let plans = route::route(demands, &stats, assume, c.node.as_deref());
    if plans.kubernetes.is_empty() && plans.slurm.is_empty() && plans.not_shared.is_empty() {
        bail!(
            "{source}: no move has its host on node {}",
            c.node.as_deref().unwrap_or("?")
        );
    }
    Ok((
        source,
        plans,
        ChooseParams {
            headroom: c.headroom,
        },
        range.until,
    ))
}

fn plan(mut args: PlanArgs) -> Result<u8> {
    let (_, routed, params, _) = node_plans(&mut args.common)?;
    let assume = args.common.scheduler.map(Scheduler::from);
    // The apply of these configs, runnable as printed (a dry run without --yes).
    let sources: Vec<String> = args
        .common
        .src
        .sources
        .iter()
        .map(|s| s.to_string())
        .collect();
    let apply_cmd =
        tessera::commands::share("apply", &args.common.plan.display().to_string(), &sources);
    let chosen: Vec<_> = routed
        .kubernetes
        .iter()
        .map(|p| {
            let mut s = rollout::offline(p, params);
            let held: Vec<String> = p
                .hosts
                .iter()
                .flat_map(|h| &h.workloads)
                .filter_map(|w| w.stats.as_ref().map(|s| s.holders.clone()))
                .filter(|h| !h.is_empty())
                .collect();
            s.reasons.push(if held.is_empty() {
                "kubernetes: the holders are not in the data; --scheduler kubernetes says pods hold these GPUs".into()
            } else {
                format!("kubernetes: pods hold these GPUs ({})", held.join(", "))
            });
            s
        })
        .collect();
    if let Format::Json = args.format {
        // JSON escapes the names itself (the text's escapes would make it invalid JSON).
        let json = route::plan_json(&chosen, &routed, assume);
        print!("{}", tessera::output::json::document(&json)?);
        return Ok(0);
    }
    let stdout = std::io::stdout();
    // Names from the data (pods, processes) reach this output: escaped at its boundary.
    let mut out = tessera::output::escape::Escaping::new(stdout.lock());
    use std::io::Write;
    for s in &chosen {
        rollout::describe(s, &mut out)?;
    }
    for s in &routed.slurm {
        slurm::describe(s, &mut out)?;
    }
    for n in &routed.not_shared {
        writeln!(out, "node {}: no sharing config", n.node)?;
        for why in &n.reasons {
            writeln!(out, "  {why}")?;
        }
    }
    if chosen.is_empty() {
        writeln!(out, "\nno device-plugin config for any node (why: above)")?;
        return Ok(0);
    }
    writeln!(
        out,
        "\nconfigs (keys of the ConfigMap the ClusterPolicy's spec.devicePlugin.config.name names; other keys stay):"
    )?;
    let mut seen = std::collections::BTreeSet::new();
    for s in &chosen {
        if seen.insert(&s.name) {
            writeln!(out, "{}: |", s.name)?;
            for line in s.text.lines() {
                writeln!(out, "  {line}")?;
            }
        }
    }
    writeln!(
        out,
        "\nlabels (the node is done when allocatable {GPU_RESOURCE} = its GPUs × replicas and nvidia.com/gpu.replicas agrees; `{apply_cmd}` does this with rollback, a dry run without --yes):"
    )?;
    for s in &chosen {
        writeln!(
            out,
            "  kubectl label node {} {CONFIG_LABEL}={} --overwrite",
            s.node, s.name
        )?;
    }
    eprintln!(
        "tessera: MIG mode here is from the frames only; share apply also reads the nodes' labels"
    );
    Ok(0)
}

fn apply(mut args: ApplyArgs) -> Result<u8> {
    let (source, routed, params, data_end) = node_plans(&mut args.common)?;
    // Only nodes whose moves pods hold get device-plugin config; the rest is said, not applied.
    for s in &routed.slurm {
        eprintln!(
            "tessera: node {}: Slurm jobs hold its hosts: no device-plugin config (tessera share plan prints the gres/shard lines for Slurm)",
            s.node
        );
    }
    for n in &routed.not_shared {
        for why in &n.reasons {
            eprintln!(
                "tessera: node {}: {}",
                n.node,
                tessera::output::escape::printable(why)
            );
        }
    }
    if routed.kubernetes.is_empty() {
        bail!(
            "{source}: no node gets a device-plugin config (why: above): nothing to apply (tessera share plan says what applies instead)"
        );
    }
    // The moves are measured on data that must be fresh to act on (a dry run warns).
    if let Some(max) = args.evidence.max_age(MAX_EVIDENCE_AGE_MS) {
        let now = args
            .now
            .map_or_else(evidence::now_ms, |t| t.timestamp_millis());
        match evidence::check(data_end, now, max) {
            Ok(()) => {}
            Err(e) if args.yes => bail!("{source}: {e}; nothing was changed"),
            Err(e) => eprintln!("tessera: warning: {source}: apply --yes would refuse: {e}"),
        }
    }
    let request = Request {
        source,
        nodes: routed.kubernetes,
        params,
        namespace: args.namespace.clone(),
        configmap: args.configmap.clone(),
        timeout: args.node_timeout,
        poll: args.poll_interval,
        yes: args.yes,
        stop: Some(stop_flag()?),
    };
    let mut cluster =
        KubeDevicePlugin::connect(&args.kube).context("connecting to the Kubernetes API")?;
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    Ok(rollout::run(
        &mut cluster,
        &request,
        &mut tessera::output::escape::Escaping::new(stdout.lock()),
        &mut tessera::output::escape::Escaping::new(stderr.lock()),
    )?)
}

/// Run one `share` verb; returns the exit code.
pub fn run(command: ShareCommand) -> Result<u8> {
    match command {
        ShareCommand::Plan(a) => plan(a),
        ShareCommand::Apply(a) => apply(a),
    }
}
