//! What the `mig export|assert|apply` verbs share: the device backend flags (NVML or a simulated
//! node with its MIG state file) and opening the node's MIG control through `tessera_core`'s
//! device layer, reading a plan's targets, writing a file; and for `mig plan`, the same flags
//! checked and written out again as the scheduled apply's arguments. Flags and glue only.
//!
//! Test hook (environment): `TESSERA_SIM_FAIL_WRITE=N` makes the Nth write call of the simulated
//! backend fail.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use tessera_core::backend::{BackendKind, BackendSpec};
use tessera_core::mig::apply;
use tessera_core::mig::control::{MigControl, MigNodeState};

/// Where the node's MIG state comes from: the one backend spec of `tessera_core::backend`
/// (the exporter's flags), plus what only the mig verbs have.
#[derive(Debug, Args)]
pub struct BackendArgs {
    #[command(flatten)]
    pub(super) spec: BackendSpec,
    /// Node name matched against the plan's `node` entries (default: the host name). With
    /// --backend sim the node is --sim.node.
    #[arg(long, value_name = "NAME")]
    pub(super) node: Option<String>,
    /// JSON file keeping the simulated node's MIG state between calls (created from the
    /// scenario when absent). Required to apply on the simulated backend.
    #[arg(long = "sim.state", value_name = "FILE")]
    pub(super) sim_state: Option<PathBuf>,
}

impl BackendArgs {
    /// Whether the backend is the simulator.
    pub(super) fn is_sim(&self) -> bool {
        self.spec.backend == BackendKind::Sim
    }
}

impl BackendArgs {
    /// Whether any device flag was given (`--backend nvml`, the default, aside).
    pub(super) fn given(&self) -> bool {
        self.is_sim()
            || self.spec.nvml_lib_path.is_some()
            || self.spec.sim_scenario.is_some()
            || self.spec.sim_node.is_some()
            || self.sim_state.is_some()
            || self.node.is_some()
    }

    /// Checks the flags as `tessera mig apply --yes` will (the simulated node is opened, which
    /// writes nothing), so that a schedule is never written with an apply that cannot run.
    pub(super) fn check_for_apply(&self) -> Result<()> {
        if self.is_sim() && self.sim_state.is_none() {
            bail!(
                "--backend sim needs --sim.state FILE for the scheduled apply (the simulated node's MIG state must persist between runs)"
            );
        }
        if self.is_sim() {
            open(self)?;
        } else {
            let extra: &[&str] = if self.sim_state.is_some() {
                &["--sim.state"]
            } else {
                &[]
            };
            self.spec.check(extra)?;
        }
        Ok(())
    }

    /// These flags as arguments of a `tessera mig apply` run elsewhere (cron, systemd), paths
    /// absolute; flags left at their default are left out.
    pub(super) fn apply_args(&self) -> Result<Vec<String>> {
        let path = |flag: &str, p: &Path| -> Result<[String; 2]> {
            let abs = std::path::absolute(p)
                .with_context(|| format!("{flag} {}: no absolute path", p.display()))?;
            let text = abs.to_str().with_context(|| {
                format!(
                    "{flag} {}: not UTF-8, so no cron line or unit can name it",
                    abs.display()
                )
            })?;
            Ok([flag.to_string(), text.to_string()])
        };
        let mut out = Vec::new();
        if self.is_sim() {
            out.extend(["--backend".to_string(), "sim".to_string()]);
        }
        if let Some(p) = &self.spec.nvml_lib_path {
            out.extend(path("--nvml.lib-path", p)?);
        }
        if let Some(p) = &self.spec.sim_scenario {
            out.extend(path("--sim.scenario", p)?);
        }
        if let Some(n) = &self.spec.sim_node {
            out.extend(["--sim.node".to_string(), n.clone()]);
        }
        if let Some(p) = &self.sim_state {
            out.extend(path("--sim.state", p)?);
        }
        if let Some(n) = &self.node {
            out.extend(["--node".to_string(), n.clone()]);
        }
        Ok(out)
    }
}

pub(super) fn env_u64(name: &str) -> Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v.trim().parse().with_context(|| {
            format!("{name}={v:?}: expected a positive integer")
        })?)),
        Err(_) => Ok(None),
    }
}

/// The node's MIG control through the backend spec's opener.
pub(super) fn open(b: &BackendArgs) -> Result<Box<dyn MigControl>> {
    let fail_write = if b.is_sim() {
        env_u64("TESSERA_SIM_FAIL_WRITE")?
    } else {
        None
    };
    Ok(b.spec
        .control(b.node.as_deref(), b.sim_state.as_deref(), fail_write)?)
}

pub(super) fn write_out(path: &Path, text: &str) -> Result<()> {
    Ok(tessera_core::files::replace(path, text.as_bytes())?)
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
