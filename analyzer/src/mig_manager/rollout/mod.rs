//! The rollout of `--via mig-manager` over the [`Cluster`] trait: choose the nodes, render the
//! ConfigMap, print the dry run, refuse when pods hold GPUs that change, write the ConfigMap
//! (adding tessera's configs, pruning none; re-read and re-merged on a 409), then node by node —
//! at most `max_unavailable` at once — cordon (`--cordon`), make sure the node's config is still
//! in the ConfigMap, set `nvidia.com/mig.config` (removing the stale
//! `nvidia.com/mig.config.state` in the same patch, so a `success` seen later is mig-manager's
//! answer to this label), and watch the state until `success`, `failed` or the per-node
//! timeout. A state counts only while the label is the one tessera set: a label another client
//! replaced stops the rollout and is left as it is. At the end, the `tessera-…` configs no node
//! names are pruned (nodes and ConfigMap re-read), so a config another run just labelled a node
//! with is never removed.
//!
//! **One rule for every way out after the first node is touched** — a failed or timed-out node,
//! a refusal, an API error, a stop signal (SIGTERM from a CronJob's deadline, SIGINT): every
//! node tessera changed and that is not at its new config gets its previous label back
//! (removed where it had none), watched until mig-manager reports `success`, and is uncordoned
//! when tessera cordoned it; what is restored is printed. What cannot be restored is printed as
//! the `kubectl` commands that do it. A failed node stops the rollout: later nodes are not
//! started.
//!
//! Output: the ConfigMap diff, the label changes and the per-node results on `out` (data);
//! notes, warnings and refusals on `err`. Returns the exit code: 0 done (or dry run); 2 refused,
//! failed or stopped, and every node tessera touched is back (or left to the client that
//! relabelled it); 3 something tessera changed could not be put back or confirmed (the
//! `kubectl` commands are printed). Errors before anything is written return `Err` (exit 2).
//!
//! What it does not do: drain or evict pods, retry a failed node, or change the ClusterPolicy.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tessera_core::mig::apply::LayoutFile;
use tessera_core::mig::parted::PartedFile;

mod waves;

use super::render::{self, Change, NodeLayout, RenderError};
use super::{CONFIG_KEY, Cluster, DEPLOY_LABEL, GpuPod, KubeError, NodeSelect, NodeView};
use crate::kubernetes::configmap::{self, MaybeConflict, retry_on_conflict};

/// The operator's generated ConfigMap, the seed of a new one (its configs are kept).
pub const DEFAULT_CONFIGMAP: &str = "default-mig-parted-config";

/// What to apply and how.
#[derive(Debug, Clone)]
pub struct Request {
    pub plan: LayoutFile,
    /// The plan's path, for messages.
    pub source: String,
    pub label: Option<String>,
    /// `--node`: only this node.
    pub node: Option<String>,
    /// `--node-selector`: the nodes a node-independent config is for.
    pub selector: Option<String>,
    pub namespace: String,
    pub configmap: String,
    pub cordon: bool,
    pub timeout: Duration,
    pub max_unavailable: usize,
    pub yes: bool,
    /// Set by a signal handler (SIGTERM, SIGINT): stop and put the nodes back.
    pub stop: Option<Arc<AtomicBool>>,
}

/// Input or API errors that stop the command before or while it acts (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Cluster(#[from] KubeError),
    #[error("{0}")]
    Input(String),
    #[error("stopped by a signal (SIGTERM or SIGINT)")]
    Interrupted,
}

pub(super) fn io(e: std::io::Error) -> RolloutError {
    RolloutError::Input(format!("cannot write output: {e}"))
}

/// The nodes the request is for, checked: they exist and run mig-manager.
fn choose_nodes(c: &mut dyn Cluster, r: &Request) -> Result<Vec<NodeView>, RolloutError> {
    let label = r.label.as_deref();
    let named = render::named_nodes(&r.plan, label, &r.source)?;
    let select = match (&named, &r.node, &r.selector) {
        (Some(names), Some(n), _) if !names.contains(n) => {
            return Err(RolloutError::Input(format!(
                "{}: the config names no GPU of node {n} (its nodes: {})",
                r.source,
                names.iter().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        (_, Some(n), _) => NodeSelect::Names(vec![n.clone()]),
        (Some(_), None, Some(s)) | (None, None, Some(s)) => NodeSelect::Selector(s.clone()),
        (Some(names), None, None) => NodeSelect::Names(names.iter().cloned().collect()),
        (None, None, None) => {
            return Err(RolloutError::Input(format!(
                "{}: the config applies to any node; choose the nodes with --node NAME or --node-selector SELECTOR (e.g. {DEPLOY_LABEL}=true)",
                r.source
            )));
        }
    };
    let mut nodes = c.nodes(&select)?;
    if let Some(names) = &named {
        nodes.retain(|n| names.contains(&n.name));
    }
    if let NodeSelect::Names(want) = &select {
        for w in want {
            if !nodes.iter().any(|n| &n.name == w) {
                return Err(RolloutError::Input(format!(
                    "node {w} is not in the cluster"
                )));
            }
        }
    }
    if nodes.is_empty() {
        return Err(RolloutError::Input(format!(
            "no node matches {select:?} and the plan {}",
            r.source
        )));
    }
    let off: Vec<&str> = nodes
        .iter()
        .filter(|n| n.labels.get(DEPLOY_LABEL).map(String::as_str) != Some("true"))
        .map(|n| n.name.as_str())
        .collect();
    if !off.is_empty() {
        return Err(RolloutError::Input(format!(
            "mig-manager does not run on {} (label {DEPLOY_LABEL} is not \"true\"): nothing would apply the label there",
            off.join(", ")
        )));
    }
    Ok(nodes)
}

/// Write the ConfigMap with tessera's configs added, re-reading and re-merging it on a conflict
/// (another writer).
pub(super) fn write_config(
    c: &mut dyn Cluster,
    r: &Request,
    layouts: &[NodeLayout],
    mut stored: Option<super::StoredConfig>,
    seed: Option<&str>,
    err: &mut dyn Write,
) -> Result<render::Merged, RolloutError> {
    let what = format!("ConfigMap {}/{}", r.namespace, r.configmap);
    retry_on_conflict(&what, configmap::ATTEMPTS, err, |again| {
        if again {
            stored = c.read_config(&r.namespace, &r.configmap)?;
        }
        let text = stored.as_ref().and_then(|s| s.text.as_deref());
        // Nothing is pruned before the labels are set (`prune_unused` does it after).
        let merged = render::merge(text, seed, layouts, None)?;
        match &stored {
            None => c.create_config(&r.namespace, &r.configmap, &merged.after)?,
            Some(_) if !merged.changed() => {}
            Some(s) => c.replace_config(
                &r.namespace,
                &r.configmap,
                &merged.after,
                &s.resource_version,
            )?,
        }
        Ok(merged)
    })
}

impl MaybeConflict for RolloutError {
    fn conflict(&self) -> Option<&str> {
        match self {
            RolloutError::Cluster(e) => e.conflict(),
            _ => None,
        }
    }
}

/// YAML from the cluster (`stored`: the ConfigMap's config, `seed`: the default ConfigMap's)
/// is held to the limits of YAML files, once, before any parse.
fn check_cluster_yaml(
    r: &Request,
    stored: Option<&str>,
    seed: Option<&str>,
) -> Result<(), RolloutError> {
    for (name, text) in [(r.configmap.as_str(), stored), (DEFAULT_CONFIGMAP, seed)] {
        if let Some(t) = text {
            tessera_core::input_limits::check_yaml(t).map_err(|e| {
                RolloutError::Input(format!(
                    "ConfigMap {}/{name}, {CONFIG_KEY}: {e}; fix or remove it, tessera does not read or overwrite it",
                    r.namespace
                ))
            })?;
        }
    }
    Ok(())
}

/// The stored configs, parsed to compare per GPU; a warning (and `None`) when they cannot be.
fn parse_stored(
    stored_text: Option<&str>,
    err: &mut dyn Write,
) -> Result<Option<PartedFile>, RolloutError> {
    let file = match stored_text.map(|t| PartedFile::parse(t, "the stored config.yaml")) {
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            writeln!(
                err,
                "tessera: warning: the stored configs cannot be compared per GPU: {e}"
            )
            .map_err(io)?;
            None
        }
        None => None,
    };
    Ok(file)
}

/// Each layout with its node and the change it makes there (against the stored configs, when
/// they parse).
fn node_changes(
    nodes: &[NodeView],
    layouts: &[NodeLayout],
    stored_file: Option<&PartedFile>,
) -> Vec<(NodeView, NodeLayout, Change)> {
    let by_name: BTreeMap<&str, &NodeView> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    layouts
        .iter()
        .map(|l| {
            let n = by_name[l.node.as_str()];
            (n.clone(), l.clone(), render::change(n, l, stored_file))
        })
        .collect()
}

/// Prints what will change: the ConfigMap `cm` (created when `created`, else updated, or
/// already holding the configs) and each node's label change for config `label`.
fn describe_changes(
    merged: &render::Merged,
    created: bool,
    (cm, label): (&str, &str),
    r: &Request,
    changes: &[(NodeView, NodeLayout, Change)],
    out: &mut dyn Write,
) -> Result<(), RolloutError> {
    if merged.changed() {
        let verb = if created { "created" } else { "updated" };
        writeln!(out, "ConfigMap {cm} ({CONFIG_KEY}) will be {verb}:").map_err(io)?;
        write!(out, "{}", merged.diff(CONFIG_KEY)).map_err(io)?;
    } else {
        writeln!(
            out,
            "ConfigMap {cm} ({CONFIG_KEY}) already holds these configs"
        )
        .map_err(io)?;
    }
    writeln!(out, "label changes ({label} of {}):", r.source).map_err(io)?;
    for (n, l, ch) in changes {
        writeln!(out, "  {}", render::describe_label(n, l, ch)).map_err(io)?;
    }
    Ok(())
}

/// The nodes whose layout change disturbs GPU pods, with those pods.
fn busy_nodes(
    c: &mut dyn Cluster,
    changes: &[(NodeView, NodeLayout, Change)],
) -> Result<Vec<(String, Vec<GpuPod>)>, RolloutError> {
    let mut busy: Vec<(String, Vec<GpuPod>)> = Vec::new();
    for (n, _, ch) in changes {
        if ch.disturbs() {
            let pods = c.gpu_pods(&n.name)?;
            if !pods.is_empty() {
                busy.push((n.name.clone(), pods));
            }
        }
    }
    Ok(busy)
}

/// Run the request; see the module docs.
pub fn run(
    c: &mut dyn Cluster,
    r: &Request,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, RolloutError> {
    let nodes = choose_nodes(c, r)?;
    let (label, layouts) = render::layouts(&r.plan, r.label.as_deref(), &r.source, &nodes)?;
    if layouts.is_empty() {
        return Err(RolloutError::Input(format!(
            "{}, config {label}, names no GPU of the chosen nodes",
            r.source
        )));
    }
    let stored = c.read_config(&r.namespace, &r.configmap)?;
    let seed = match stored.as_ref().and_then(|s| s.text.clone()) {
        Some(_) => None,
        None => c
            .read_config(&r.namespace, DEFAULT_CONFIGMAP)?
            .and_then(|s| s.text),
    };
    check_cluster_yaml(
        r,
        stored.as_ref().and_then(|s| s.text.as_deref()),
        seed.as_deref(),
    )?;
    let stored_text = stored
        .as_ref()
        .and_then(|s| s.text.as_deref())
        .or(seed.as_deref());
    let stored_file = parse_stored(stored_text, err)?;
    let in_use = waves::configs_in_use(c)?;
    // What the ConfigMap will hold once the rollout is done (unused configs pruned).
    let merged = render::merge(
        stored.as_ref().and_then(|s| s.text.as_deref()),
        seed.as_deref(),
        &layouts,
        Some(&in_use),
    )?;
    let changes = node_changes(&nodes, &layouts, stored_file.as_ref());

    // What will change.
    let cm = format!("{}/{}", r.namespace, r.configmap);
    describe_changes(&merged, stored.is_none(), (&cm, &label), r, &changes, out)?;
    let policy_ok = check_policy(c, r, err)?;
    let busy = busy_nodes(c, &changes)?;
    let busy_text = || {
        busy.iter()
            .flat_map(|(n, pods)| pods.iter().map(move |p| format!("  node {n}: {p}")))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if !r.yes {
        if !busy.is_empty() {
            writeln!(err, "tessera: --yes would refuse: pods hold GPU resources on nodes whose layout changes (the API does not say which GPU a pod holds, so any GPU pod on such a node counts):\n{}", busy_text()).map_err(io)?;
        }
        writeln!(err, "tessera: dry run: nothing was changed; add --yes to write the ConfigMap and set the labels").map_err(io)?;
        return Ok(0);
    }
    if !busy.is_empty() {
        writeln!(err, "tessera: refused, nothing was changed: pods hold GPU resources on nodes whose layout changes (mig-manager recreates every MIG instance of a changed GPU):\n{}\nwait for them to finish or move them; --cordon keeps new GPU pods off each node while it changes", busy_text()).map_err(io)?;
        return Ok(2);
    }
    if !policy_ok {
        writeln!(
            err,
            "tessera: refused, nothing was changed: mig-manager does not read {cm} (see above)"
        )
        .map_err(io)?;
        return Ok(2);
    }
    let merged = write_config(c, r, &layouts, stored.clone(), seed.as_deref(), err)?;
    if merged.changed() {
        writeln!(
            out,
            "ConfigMap {cm}: {}",
            if merged.added.is_empty() {
                "updated".to_string()
            } else {
                format!("added {}", merged.added.join(", "))
            },
        )
        .map_err(io)?;
    }
    // What this run may prune afterwards: the tessera configs there when it started, and its own.
    let prunable: BTreeSet<String> = stored_file
        .iter()
        .flat_map(|f| f.configs.keys())
        .filter(|k| k.starts_with(super::CONFIG_PREFIX))
        .cloned()
        .chain(layouts.iter().map(|l| l.config.clone()))
        .collect();
    waves::rollout(c, r, changes, &prunable, out, err)
}

/// Whether the ClusterPolicy points mig-manager at the ConfigMap (`true` when it cannot be read:
/// then a warning says what to check).
fn check_policy(
    c: &mut dyn Cluster,
    r: &Request,
    err: &mut dyn Write,
) -> Result<bool, RolloutError> {
    let patch = |name: &str| {
        format!(
            "kubectl patch clusterpolicies.nvidia.com/{name} --type merge -p '{{\"spec\":{{\"migManager\":{{\"config\":{{\"name\":\"{}\"}}}}}}}}'",
            r.configmap
        )
    };
    match c.policy() {
        Ok(Some(p)) if p.config_name.as_deref() == Some(r.configmap.as_str()) => Ok(true),
        Ok(Some(p)) => {
            writeln!(
                err,
                "tessera: ClusterPolicy {}: spec.migManager.config.name is {}, so mig-manager does not read ConfigMap {}; point it there (the ConfigMap must be in the operator's namespace, {} here):\n  {}",
                p.name,
                p.config_name.as_deref().map_or("unset (the operator's generated default)".to_string(), |n| format!("{n:?}")),
                r.configmap,
                r.namespace,
                patch(&p.name)
            )
            .map_err(io)?;
            Ok(false)
        }
        Ok(None) | Err(_) => {
            writeln!(
                err,
                "tessera: warning: no ClusterPolicy could be read; make sure spec.migManager.config.name is {:?}, e.g.\n  {}",
                r.configmap,
                patch("cluster-policy")
            )
            .map_err(io)?;
            Ok(true)
        }
    }
}
