//! What the `mig export|assert|apply` verbs share: the device backend flags (NVML or a simulated
//! node with its MIG state file) and opening the node's MIG control through `tessera_core`'s
//! device layer, reading a plan's targets, writing a file. Flags and glue only.
//!
//! Test hook (environment): `TESSERA_SIM_FAIL_WRITE=N` makes the Nth write call of the simulated
//! backend fail.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use tessera_core::mig::apply;
use tessera_core::mig::control::{MigControl, MigNodeState};
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
    pub(super) backend: Backend,
    /// Path of libnvidia-ml.so to load instead of the system's.
    #[arg(long = "nvml.lib-path", value_name = "FILE")]
    pub(super) nvml_lib_path: Option<PathBuf>,
    /// Node name matched against the plan's `node` entries (default: the host name). With
    /// --backend sim the node is --sim.node.
    #[arg(long, value_name = "NAME")]
    pub(super) node: Option<String>,
    /// Scenario file for --backend sim (default: the embedded demo scenario).
    #[arg(long = "sim.scenario", value_name = "FILE")]
    pub(super) sim_scenario: Option<PathBuf>,
    /// Node of the scenario (default: its first node).
    #[arg(long = "sim.node", value_name = "NAME")]
    pub(super) sim_node: Option<String>,
    /// JSON file keeping the simulated node's MIG state between calls (created from the
    /// scenario when absent). Required to apply on the simulated backend.
    #[arg(long = "sim.state", value_name = "FILE")]
    pub(super) sim_state: Option<PathBuf>,
}

pub(super) fn env_u64(name: &str) -> Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v.trim().parse().with_context(|| {
            format!("{name}={v:?}: expected a positive integer")
        })?)),
        Err(_) => Ok(None),
    }
}

pub(super) fn open(b: &BackendArgs) -> Result<Box<dyn MigControl>> {
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

pub(super) fn write_out(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

pub(super) fn load(
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
