//! `tessera mig apply --via mig-manager`: the Kubernetes flags and the glue from the apply
//! command's plan (or schedule) to `tessera::mig_manager`'s rollout over kube-rs. A module of the
//! binary: no logic beyond checking flags, connecting and printing.

use std::path::Path;
use std::time::Duration;
use tessera::kubernetes::Connection;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use tessera::mig_manager::kube::KubeCluster;
use tessera::mig_manager::rollout::{self, Request};
use tessera_core::mig::apply;

/// Who changes the GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Via {
    /// This node's GPUs, directly (NVML or the simulated node).
    Node,
    /// The GPU Operator's mig-manager on Kubernetes: a ConfigMap and node labels.
    MigManager,
}

/// Flags of `--via mig-manager` (docs/mig-apply.md, "On Kubernetes").
#[derive(Debug, Args)]
pub struct KubeArgs {
    /// Who applies the layout: this node directly, or the GPU Operator's mig-manager.
    #[arg(long, value_enum, default_value = "node")]
    pub via: Via,
    #[command(flatten)]
    pub kube: Connection,
    /// The ConfigMap mig-manager reads (ClusterPolicy spec.migManager.config.name).
    #[arg(long, value_name = "NAME", default_value = "custom-mig-config")]
    pub configmap: String,
    /// The GPU Operator's namespace, where that ConfigMap is.
    #[arg(long, value_name = "NS", default_value = "gpu-operator")]
    pub namespace: String,
    /// Nodes a node-independent config (or a mig-parted file) is for, as a label selector.
    #[arg(long = "node-selector", value_name = "SELECTOR")]
    pub node_selector: Option<String>,
    /// Cordon each node while mig-manager changes it (uncordoned after success).
    #[arg(long)]
    pub cordon: bool,
    /// How long one node may take to reach success before it is rolled back (e.g. 10m).
    #[arg(long = "node-timeout", value_name = "DURATION", default_value = "10m", value_parser = parse_timeout)]
    pub node_timeout: Duration,
    /// How many nodes change at once.
    #[arg(long = "max-unavailable", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_unavailable: u32,
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    tessera_core::units::parse_duration(s)
}

/// Whether the node-local flags were given where they mean nothing.
pub fn check_flags(node_local_flags: &[(&str, bool)]) -> Result<()> {
    let given: Vec<&str> = node_local_flags
        .iter()
        .filter(|(_, g)| *g)
        .map(|(n, _)| *n)
        .collect();
    if !given.is_empty() {
        bail!(
            "{} {} for the node-local apply; --via mig-manager changes nodes through the Kubernetes API",
            given.join(", "),
            if given.len() == 1 { "is" } else { "are" }
        );
    }
    Ok(())
}

/// Run the rollout of config `label` of `plan_path` through mig-manager.
pub fn apply(
    k: &KubeArgs,
    plan: apply::LayoutFile,
    plan_path: &Path,
    label: Option<String>,
    node: Option<String>,
    yes: bool,
) -> Result<u8> {
    let request = Request {
        plan,
        source: plan_path.display().to_string(),
        label,
        node,
        selector: k.node_selector.clone(),
        namespace: k.namespace.clone(),
        configmap: k.configmap.clone(),
        cordon: k.cordon,
        timeout: k.node_timeout,
        max_unavailable: k.max_unavailable as usize,
        yes,
        stop: Some(crate::cli::source::stop_flag()?),
    };
    let mut cluster = KubeCluster::connect(&k.kube)?;
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    Ok(rollout::run(
        &mut cluster,
        &request,
        &mut stdout.lock(),
        &mut stderr.lock(),
    )?)
}
