//! `tessera mig export|assert|apply`: flag parsing and printing over the exporter's MIG apply
//! engine (`tessera_core::mig::apply`) and device write side (`mig_control`). A module of the
//! binary: no logic beyond choosing the backend, the plan and the config, and printing.
//!
//! Output: data (an exported plan, differences, the steps) on stdout; notes and warnings on
//! stderr. Exit codes: 0 ok (assert: the node matches), 1 (assert only) the node differs, 2 error
//! (bad input, a plan naming no GPU of this node, refused apply, rolled-back apply, lock held).
//!
//! Test hooks (environment): `TESSERA_SIM_FAIL_WRITE=N` makes the Nth write call of the simulated
//! backend fail; `TESSERA_MIG_APPLY_ABORT_AFTER=N` aborts the process right after step N is
//! journaled (a crash in the middle of an apply).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};
use tessera_core::mig::apply::{self, Applier, Journal};
use tessera_core::mig::control::{MigControl, MigNodeState};
use tessera_core::mig::plan::MigSchedule;
use tessera_core::nvml::NvmlBackend;
use tessera_core::sim::control::SimMigControl;
use tessera_core::sim::{self, SimBackend, SimClock};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// The node's GPUs through NVML (needs root to change anything).
    Nvml,
    /// A simulated node of a scenario, its MIG state kept in --sim.state.
    Sim,
}

/// Where the node's MIG state comes from.
#[derive(Debug, Args)]
pub struct BackendArgs {
    /// Device backend.
    #[arg(long, value_enum, default_value = "nvml")]
    backend: Backend,
    /// Path of libnvidia-ml.so to load instead of the system's.
    #[arg(long = "nvml.lib-path", value_name = "FILE")]
    nvml_lib_path: Option<PathBuf>,
    /// Node name matched against the plan's `node` entries (default: the host name). With
    /// --backend sim the node is --sim.node.
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// Scenario file for --backend sim (default: the embedded demo scenario).
    #[arg(long = "sim.scenario", value_name = "FILE")]
    sim_scenario: Option<PathBuf>,
    /// Node of the scenario (default: its first node).
    #[arg(long = "sim.node", value_name = "NAME")]
    sim_node: Option<String>,
    /// JSON file keeping the simulated node's MIG state between calls (created from the
    /// scenario when absent). Required to apply on the simulated backend.
    #[arg(long = "sim.state", value_name = "FILE")]
    sim_state: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// Write the tessera plan here (default: standard output).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also write the layout as an nvidia-mig-parted v1 config to FILE.
    #[arg(long = "mig-parted-config", value_name = "FILE")]
    mig_parted_config: Option<PathBuf>,
    /// Label of the exported config.
    #[arg(long, default_value = "current")]
    label: String,
}

#[derive(Debug, Args)]
pub struct AssertArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// A tessera plan (tessera-mig-plan v1) or an nvidia-mig-parted v1 config.
    plan: PathBuf,
    /// Config label in the plan (required when it has several).
    #[arg(long, value_name = "LABEL")]
    config: Option<String>,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// A tessera plan (tessera-mig-plan v1) or an nvidia-mig-parted v1 config.
    #[arg(required_unless_present = "schedule", conflicts_with = "schedule")]
    plan: Option<PathBuf>,
    /// Config label in the plan (required when it has several).
    #[arg(long, value_name = "LABEL", conflicts_with = "schedule")]
    config: Option<String>,
    /// A tessera-mig-schedule v1 file: apply the config its switches make active now.
    #[arg(long, value_name = "FILE")]
    schedule: Option<PathBuf>,
    /// Let a schedule's plan: name a file outside the schedule's folder (an absolute path or
    /// ..); by default it must be beside the schedule.
    #[arg(long, requires = "schedule")]
    allow_plan_outside: bool,
    /// The instant for --schedule, RFC 3339 (default: now).
    #[arg(long, value_name = "TIME", requires = "schedule")]
    now: Option<DateTime<Utc>>,
    /// Change the node. Without it, only print the steps.
    #[arg(long)]
    yes: bool,
    /// Lock file (default: /run/tessera/mig-apply.lock; with --backend sim, STATE.lock).
    #[arg(long, value_name = "FILE")]
    lock: Option<PathBuf>,
    /// Journal file (default: /var/lib/tessera/mig-apply.journal; with --backend sim,
    /// STATE.journal).
    #[arg(long, value_name = "FILE")]
    journal: Option<PathBuf>,
    #[command(flatten)]
    kube: super::mig_manager::KubeArgs,
}

fn env_u64(name: &str) -> Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v.trim().parse().with_context(|| {
            format!("{name}={v:?}: expected a positive integer")
        })?)),
        Err(_) => Ok(None),
    }
}

fn open(b: &BackendArgs) -> Result<Box<dyn MigControl>> {
    match b.backend {
        Backend::Sim => {
            if b.node.is_some() {
                bail!("--node is for --backend nvml; the simulated node is chosen with --sim.node");
            }
            let scenario = sim::load_scenario(b.sim_scenario.as_deref())?;
            let backend = SimBackend::new(
                &scenario,
                b.sim_node.as_deref(),
                SimClock::Stepped {
                    next_ms: 0,
                    step_ms: 1000,
                },
            )?;
            let mut ctrl = SimMigControl::open(backend.node(), b.sim_state.as_deref())?;
            ctrl.fail_write_call(env_u64("TESSERA_SIM_FAIL_WRITE")?);
            Ok(Box::new(ctrl))
        }
        Backend::Nvml => {
            if b.sim_state.is_some() || b.sim_scenario.is_some() || b.sim_node.is_some() {
                bail!("--sim.* flags need --backend sim");
            }
            let mut nvml = NvmlBackend::new(b.nvml_lib_path.as_deref())?;
            if let Some(n) = &b.node {
                nvml.set_node_name(n);
            }
            Ok(Box::new(nvml))
        }
    }
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn write_out(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

pub fn export(args: ExportArgs) -> Result<u8> {
    let mut ctrl = open(&args.backend)?;
    let state = ctrl.read_state()?;
    let (plan, warnings) = apply::export_plan(&state, &args.label);
    for w in warnings {
        eprintln!("tessera: warning: {w}");
    }
    plan.validate("the exported plan")?;
    match &args.output {
        Some(p) => write_out(p, &plan.to_yaml())?,
        None => print!("{}", plan.to_yaml()),
    }
    if let Some(p) = &args.mig_parted_config {
        write_out(p, &apply::export_mig_parted(&state, &args.label))?;
    }
    Ok(0)
}

fn load(
    ctrl: &mut dyn MigControl,
    plan: &apply::LayoutFile,
    plan_path: &Path,
    label: Option<&str>,
) -> Result<(MigNodeState, String, Vec<apply::GpuTarget>)> {
    let state = ctrl.read_state()?;
    let source = plan_path.display().to_string();
    // A config naming no GPU of this node is an error (exit 2), never "0 GPUs checked".
    let (label, targets) = apply::targets(plan, label, &source, &state)?;
    Ok((state, label, targets))
}

pub fn assert(args: AssertArgs) -> Result<u8> {
    let mut ctrl = open(&args.backend)?;
    let plan = apply::read_plan(&args.plan)?;
    let (state, label, targets) = load(ctrl.as_mut(), &plan, &args.plan, args.config.as_deref())?;
    let d = apply::diff(&state, &targets)?;
    if d.matches() {
        println!(
            "node {} matches {} config {label} ({} GPUs checked)",
            state.node,
            args.plan.display(),
            targets.len()
        );
        return Ok(0);
    }
    println!(
        "node {} differs from {} config {label}:",
        state.node,
        args.plan.display()
    );
    print!("{}", d.render());
    for p in d.pending() {
        eprintln!("tessera: pending: {p}");
    }
    Ok(1)
}

pub fn apply(args: ApplyArgs) -> Result<u8> {
    let (plan_path, label, plan) = match &args.schedule {
        Some(s) => {
            let schedule = MigSchedule::from_file(s)?;
            let now = args.now.unwrap_or_else(Utc::now);
            let active = schedule.active_at(now).with_context(|| {
                format!("schedule {}: no switch at or before {now}", s.display())
            })?;
            eprintln!(
                "tessera: schedule {}: config {} is active since {} (at {now})",
                s.display(),
                active.config,
                active.since
            );
            let path = schedule.plan_path(s, args.allow_plan_outside)?;
            // Named by another file: its errors never quote it.
            let plan = apply::read_plan_named(&path, s)?;
            (path, Some(active.config), plan)
        }
        None => {
            let path = args
                .plan
                .clone()
                .expect("clap requires PLAN without --schedule");
            let plan = apply::read_plan(&path)?;
            (path, args.config.clone(), plan)
        }
    };
    if args.kube.via == super::mig_manager::Via::MigManager {
        let b = &args.backend;
        super::mig_manager::check_flags(&[
            ("--backend sim", b.backend == Backend::Sim),
            ("--nvml.lib-path", b.nvml_lib_path.is_some()),
            (
                "--sim.*",
                b.sim_scenario.is_some() || b.sim_node.is_some() || b.sim_state.is_some(),
            ),
            ("--lock", args.lock.is_some()),
            ("--journal", args.journal.is_some()),
        ])?;
        return super::mig_manager::apply(
            &args.kube,
            plan,
            &plan_path,
            label,
            b.node.clone(),
            args.yes,
        );
    }
    let mut ctrl = open(&args.backend)?;
    let sim_state = args.backend.sim_state.as_deref();
    let lock = args.lock.clone().unwrap_or_else(|| match sim_state {
        Some(s) if args.backend.backend == Backend::Sim => with_suffix(s, ".lock"),
        _ => PathBuf::from("/run/tessera/mig-apply.lock"),
    });
    let journal = args.journal.clone().unwrap_or_else(|| match sim_state {
        Some(s) if args.backend.backend == Backend::Sim => with_suffix(s, ".journal"),
        _ => PathBuf::from("/var/lib/tessera/mig-apply.journal"),
    });

    if !args.yes {
        if let Ok(Some(i)) = Journal::new(&journal).interrupted() {
            eprintln!(
                "tessera: warning: the journal {} records an interrupted apply ({} at {}); apply --yes first restores its checkpoint",
                journal.display(),
                i.run,
                i.started
            );
        }
        let (state, label, targets) = load(ctrl.as_mut(), &plan, &plan_path, label.as_deref())?;
        let d = apply::diff(&state, &targets)?;
        print_plan(&d, &state.node, &plan_path, &label);
        for p in d.pending() {
            eprintln!("tessera: pending: {p}");
        }
        let busy = d.busy();
        if !busy.is_empty() {
            eprintln!(
                "tessera: apply --yes would refuse: processes run where the layout changes:\n{}",
                busy.join("\n")
            );
        }
        if !d.steps().is_empty() {
            eprintln!("tessera: dry run: nothing was changed; add --yes to apply these steps");
        }
        return Ok(0);
    }

    if args.backend.backend == Backend::Sim && sim_state.is_none() {
        bail!(
            "--sim.state FILE is required to apply on the simulated backend (the simulated node's MIG state must persist between calls)"
        );
    }
    let mut applier = Applier::open(&lock, &journal)?;
    applier.abort_after_step = env_u64("TESSERA_MIG_APPLY_ABORT_AFTER")?;
    if let Some(t) = &applier.torn_tail {
        eprintln!("tessera: warning: {t}");
    }
    if let Some(r) = applier.recover(ctrl.as_mut())? {
        eprintln!(
            "tessera: recovered the interrupted apply {} (started {}, plan {}): restored its checkpoint in {} steps",
            r.run,
            r.started,
            r.plan.as_deref().unwrap_or("?"),
            r.steps
        );
    }
    let (state, label, targets) = load(ctrl.as_mut(), &plan, &plan_path, label.as_deref())?;
    let d = apply::diff(&state, &targets)?;
    print_plan(&d, &state.node, &plan_path, &label);
    let done = applier.execute(
        ctrl.as_mut(),
        &state,
        &targets,
        &d,
        &format!("{} config {label}", plan_path.display()),
    )?;
    for (i, s) in done.steps.iter().enumerate() {
        println!(
            "{:>3}. GPU {}: {}: {}",
            i + 1,
            s.step.gpu(),
            s.step,
            s.result
        );
    }
    for p in &done.pending {
        eprintln!("tessera: pending: {p}");
    }
    if !done.steps.is_empty() {
        println!(
            "applied {} steps; node {} now matches {} config {label}{}",
            done.steps.len(),
            state.node,
            plan_path.display(),
            if done.pending.is_empty() {
                ""
            } else {
                " except MIG mode changes pending a GPU reset"
            }
        );
    }
    Ok(0)
}

fn print_plan(d: &apply::Diff, node: &str, plan: &Path, label: &str) {
    let steps = d.render_steps();
    if d.matches() {
        println!(
            "node {node} matches {} config {label}: nothing to do",
            plan.display()
        );
    } else if steps.is_empty() {
        println!(
            "node {node} differs from {} config {label}, but nothing can be done before a GPU reset:",
            plan.display()
        );
        print!("{}", d.render());
    } else {
        println!(
            "node {node}: {} steps to match {} config {label}:",
            d.steps().len(),
            plan.display()
        );
        print!("{steps}");
    }
}
