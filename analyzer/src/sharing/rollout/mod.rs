//! The rollout of `tessera share apply` over [`DevicePluginCluster`]: where the device plugin
//! reads its config (the ClusterPolicy), the nodes of the plan's hosts (each must run the device
//! plugin and report its GPU count), the config of each ([`choose`], with the node's MIG mode
//! from the frames and its labels), the ConfigMap merged ([`configmap`]), then the dry run:
//! the reasons, the ConfigMap's diff, each node's label change with the allocatable it should
//! reach, and the pods holding GPUs on the nodes that change (the device plugin restarts under
//! them). Nothing is written without `yes`. With it: refusal when the ClusterPolicy does not
//! point the device plugin at the ConfigMap or has no default config; the ConfigMap written
//! (409: re-read, re-merged, retried), then node by node (`nodes`).
//!
//! Output: the plan and the per-node results on `out`; notes, warnings and refusals on `err`.
//! Returns the exit code: 0 done, dry run or nothing to do; 2 refused, failed, timed out,
//! relabelled by another client, an API error or a signal, with every node tessera touched put
//! back; 3 something could not be put back or confirmed (the `kubectl` commands are printed).
//! Errors before anything is written return `Err` (exit 2).
//!
//! What it does not do: drain or move pods, cordon, edit the ClusterPolicy, or change several
//! nodes at once.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

mod nodes;

use super::choose::{self, ChooseParams, NodeSharing};
use super::configmap::{self, Merged};
use super::demand::HostDemand;
use super::{CONFIG_LABEL, DEPLOY_LABEL, DevicePluginCluster, GPU_RESOURCE, KubeError, NodeView};
use crate::kubernetes::configmap::{self as kconfigmap, MaybeConflict, retry_on_conflict};

/// The ConfigMap named when the ClusterPolicy names none (and `--configmap` is not given).
pub const DEFAULT_CONFIGMAP: &str = "tessera-device-plugin-config";
/// The default key of a created ConfigMap when the ClusterPolicy names none.
pub const DEFAULT_KEY: &str = "default";

/// One node of the plan: the hosts of the moves on it.
#[derive(Debug, Clone)]
pub struct NodePlan {
    pub node: String,
    pub hosts: Vec<HostDemand>,
    /// The frames saw a GPU of the node in MIG mode.
    pub frames_mig: bool,
}

/// The config of one node without a cluster (`tessera share plan`): MIG mode from the frames.
pub fn offline(p: &NodePlan, params: ChooseParams) -> NodeSharing {
    let why = p
        .frames_mig
        .then_some("a GPU of the node was in MIG mode in the window");
    choose::choose(&p.node, p.hosts.clone(), why, params)
}

/// What to apply and how.
#[derive(Debug, Clone)]
pub struct Request {
    /// The plan's path, for messages.
    pub source: String,
    pub nodes: Vec<NodePlan>,
    pub params: ChooseParams,
    /// The operator's namespace, where the ConfigMap is.
    pub namespace: String,
    /// `--configmap`: the ConfigMap when the ClusterPolicy cannot be read or names none.
    pub configmap: Option<String>,
    /// How long one node may take to reach its config (and, rolled back, its previous one).
    pub timeout: Duration,
    /// How often a node is read while it changes.
    pub poll: Duration,
    pub yes: bool,
    /// Set by a signal handler (SIGTERM, SIGINT): stop and put the nodes back.
    pub stop: Option<Arc<AtomicBool>>,
}

/// Input or API errors that stop the command (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(transparent)]
    Api(#[from] KubeError),
    #[error("{0}")]
    Input(String),
    #[error("stopped by a signal (SIGTERM or SIGINT)")]
    Interrupted,
}

pub(super) fn io(e: std::io::Error) -> RolloutError {
    RolloutError::Input(format!("cannot write output: {e}"))
}

/// One node of the rollout: as read, its config, and its GPU count.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub(super) before: NodeView,
    pub(super) sharing: NodeSharing,
    pub(super) gpus: u64,
}

impl Target {
    /// The allocatable `nvidia.com/gpu` the node reaches: GPUs × replicas.
    pub(super) fn want(&self) -> u64 {
        self.gpus * u64::from(self.sharing.replicas)
    }

    /// Whether the node is labelled with its config and the device plugin applied it.
    fn applied(&self, n: &NodeView) -> bool {
        n.config() == Some(self.sharing.name.as_str())
            && n.allocatable == Some(self.want())
            && n.replicas() == Some(u64::from(self.sharing.replicas))
    }
}

/// Where the device plugin's configs are, and what is wrong with the ClusterPolicy (each a
/// refusal for `--yes`, with the command that fixes it).
pub(super) struct Where {
    pub(super) namespace: String,
    pub(super) configmap: String,
    pub(super) default_key: Option<String>,
    problems: Vec<String>,
}

fn locate(
    c: &mut dyn DevicePluginCluster,
    r: &Request,
    err: &mut dyn Write,
) -> Result<Where, RolloutError> {
    let policy = c.policy()?;
    let patch = |policy: &str, cm: &str, default: &str| {
        format!(
            "kubectl patch clusterpolicies.nvidia.com/{policy} --type merge -p '{{\"spec\":{{\"devicePlugin\":{{\"config\":{{\"name\":\"{cm}\",\"default\":\"{default}\"}}}}}}}}'"
        )
    };
    let mut problems = Vec::new();
    let Some(p) = policy else {
        let Some(cm) = r.configmap.clone() else {
            return Err(RolloutError::Input(
                "no ClusterPolicy could be read (none, or no permission): give --configmap NAME, the ConfigMap its spec.devicePlugin.config.name names".into(),
            ));
        };
        writeln!(err, "tessera: warning: no ClusterPolicy could be read; make sure spec.devicePlugin.config.name is {cm:?} and spec.devicePlugin.config.default names a config without sharing").map_err(io)?;
        return Ok(Where {
            namespace: r.namespace.clone(),
            configmap: cm,
            default_key: None,
            problems,
        });
    };
    let configmap = match (&p.config_name, &r.configmap) {
        (Some(n), Some(want)) if n != want => {
            problems.push(format!(
                "ClusterPolicy {}: spec.devicePlugin.config.name is {n:?}, not --configmap {want:?}; the device plugin reads {n:?} (drop --configmap, or point the ClusterPolicy at {want:?}):\n  {}",
                p.name,
                patch(&p.name, want, p.default.as_deref().unwrap_or(DEFAULT_KEY))
            ));
            n.clone()
        }
        (Some(n), _) => n.clone(),
        (None, want) => {
            let cm = want
                .clone()
                .unwrap_or_else(|| DEFAULT_CONFIGMAP.to_string());
            problems.push(format!(
                "ClusterPolicy {}: spec.devicePlugin.config.name is unset, so the device plugin reads no config; create the ConfigMap, then point the ClusterPolicy at it (the device plugin's pods fail while it names a ConfigMap that does not exist):\n  kubectl -n {ns} create configmap {cm} --from-literal={DEFAULT_KEY}='version: v1'\n  {}",
                p.name,
                patch(&p.name, &cm, DEFAULT_KEY),
                ns = r.namespace
            ));
            cm
        }
    };
    if p.config_name.is_some() && p.default.is_none() {
        problems.push(format!(
            "ClusterPolicy {}: spec.devicePlugin.config.default is unset: with more than one config in the ConfigMap, the device plugin on a node without {CONFIG_LABEL} has no config to choose; name a config without sharing:\n  {}",
            p.name,
            patch(&p.name, &configmap, DEFAULT_KEY)
        ));
    }
    Ok(Where {
        namespace: r.namespace.clone(),
        configmap,
        default_key: p.default.clone(),
        problems,
    })
}

/// The nodes of the plan, read and checked, with their configs.
fn targets(c: &mut dyn DevicePluginCluster, r: &Request) -> Result<Vec<Target>, RolloutError> {
    let mut out = Vec::new();
    for p in &r.nodes {
        let Some(n) = c.node(&p.node)? else {
            return Err(RolloutError::Input(format!(
                "node {} (a host of {}'s moves) is not in the cluster",
                p.node, r.source
            )));
        };
        if n.labels.get(DEPLOY_LABEL).map(String::as_str) != Some("true") {
            return Err(RolloutError::Input(format!(
                "the device plugin does not run on {} (label {DEPLOY_LABEL} is not \"true\"): nothing would apply the config there",
                n.name
            )));
        }
        let Some(gpus) = n.gpu_count().filter(|g| *g > 0) else {
            return Err(RolloutError::Input(format!(
                "node {}: no GPU count (label {} or capacity {GPU_RESOURCE}): success could not be checked",
                n.name,
                super::COUNT_LABEL
            )));
        };
        let mig = n.mig_mode().or_else(|| {
            p.frames_mig
                .then(|| "a GPU of the node was in MIG mode in the window".to_string())
        });
        let sharing = choose::choose(&p.node, p.hosts.clone(), mig.as_deref(), r.params);
        out.push(Target {
            before: n,
            sharing,
            gpus,
        });
    }
    Ok(out)
}

/// Print one node's config and why (shared with `share plan`).
pub fn describe(s: &NodeSharing, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "node {}: {} × {} (config {})",
        s.node,
        s.method.as_str(),
        s.replicas,
        s.name
    )?;
    for why in &s.reasons {
        writeln!(out, "  {why}")?;
    }
    for h in &s.hosts {
        writeln!(out, "  {}", would_run(h))?;
    }
    Ok(())
}

/// `GPU 0 would run: a (peak 5.0 GiB, active 10%), b (…)`: a host and its workloads.
pub fn would_run(h: &HostDemand) -> String {
    let names: Vec<String> = h
        .workloads
        .iter()
        .map(|w| match &w.stats {
            Some(st) => format!(
                "{} (peak {}, active {})",
                w.name(),
                st.peak_memory_bytes.map_or("?".into(), |b| format!(
                    "{:.1} GiB",
                    b / (1u64 << 30) as f64
                )),
                st.activity
                    .map_or("?".into(), |a| format!("{:.0}%", a * 100.0))
            ),
            None => format!("{} (no rows)", w.name()),
        })
        .collect();
    format!("GPU {} would run: {}", h.host.gpu, names.join(", "))
}

/// Write the ConfigMap with `configs` set, re-reading and re-merging it on a conflict.
pub(super) fn write_configmap(
    c: &mut dyn DevicePluginCluster,
    w: &Where,
    configs: &[(String, String)],
    mut stored: Option<super::StoredMap>,
    err: &mut dyn Write,
) -> Result<Merged, RolloutError> {
    let default = w.default_key.as_deref().or(Some(DEFAULT_KEY));
    let what = format!("ConfigMap {}/{}", w.namespace, w.configmap);
    retry_on_conflict(&what, kconfigmap::ATTEMPTS, err, |again| {
        if again {
            stored = c.read_configmap(&w.namespace, &w.configmap)?;
        }
        let merged = configmap::merge(stored.as_ref().map(|s| &s.data), default, configs);
        match &stored {
            None => c.create_configmap(&w.namespace, &w.configmap, &merged.after)?,
            Some(_) if !merged.changed() => {}
            Some(s) => c.replace_configmap(
                &w.namespace,
                &w.configmap,
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
            RolloutError::Api(e) => e.conflict(),
            _ => None,
        }
    }
}

/// Prints each target node's label change (or why it has none) and returns the nodes whose
/// label must change, in the targets' order.
fn label_changes(
    targets: &[Target],
    w: &Where,
    out: &mut dyn Write,
) -> Result<Vec<Target>, RolloutError> {
    let mut todo = Vec::new();
    for t in targets {
        let n = &t.before;
        let now = n.config().unwrap_or("(none)");
        let alloc = n.allocatable.map_or("?".into(), |a| a.to_string());
        if t.applied(n) {
            writeln!(
                out,
                "  node {}: {CONFIG_LABEL}={now} already, {GPU_RESOURCE} {alloc}: nothing to do",
                n.name
            )
            .map_err(io)?;
        } else if n.config() == Some(t.sharing.name.as_str()) {
            writeln!(out, "  node {}: {CONFIG_LABEL}={now} already, but {GPU_RESOURCE} is {alloc} and nvidia.com/gpu.replicas {}, not {} and {}: the device plugin did not apply it (kubectl -n {} get pods -o wide | grep device-plugin)", n.name, n.replicas().map_or("unset".into(), |r| r.to_string()), t.want(), t.sharing.replicas, w.namespace).map_err(io)?;
        } else {
            writeln!(
                out,
                "  node {}: {CONFIG_LABEL} {now} -> {}; {GPU_RESOURCE} {alloc} -> {} ({} GPUs × {}, {})",
                n.name,
                t.sharing.name,
                t.want(),
                t.gpus,
                t.sharing.replicas,
                t.sharing.method.as_str()
            )
            .map_err(io)?;
            todo.push(t.clone());
        }
    }
    Ok(todo)
}

/// Run the request; see the module docs.
pub fn run(
    c: &mut dyn DevicePluginCluster,
    r: &Request,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, RolloutError> {
    if r.nodes.is_empty() {
        return Err(RolloutError::Input(format!(
            "{}: no consolidation move names a host on the chosen nodes",
            r.source
        )));
    }
    let w = locate(c, r, err)?;
    let targets = targets(c, r)?;
    let stored = c.read_configmap(&w.namespace, &w.configmap)?;
    let configs: Vec<(String, String)> = targets
        .iter()
        .map(|t| (t.sharing.name.clone(), t.sharing.text.clone()))
        .collect();
    let default = w.default_key.as_deref().or(Some(DEFAULT_KEY));
    let merged = configmap::merge(stored.as_ref().map(|s| &s.data), default, &configs);

    for t in &targets {
        describe(&t.sharing, out).map_err(io)?;
    }
    let cm = format!("{}/{}", w.namespace, w.configmap);
    if merged.changed() {
        let verb = if stored.is_none() {
            "created"
        } else {
            "updated"
        };
        writeln!(out, "ConfigMap {cm} will be {verb} (other keys kept):").map_err(io)?;
        write!(out, "{}", merged.diff()).map_err(io)?;
    } else {
        writeln!(out, "ConfigMap {cm} already holds these configs").map_err(io)?;
    }
    writeln!(out, "label changes (node by node, each until allocatable {GPU_RESOURCE} and nvidia.com/gpu.replicas agree):").map_err(io)?;
    let todo = label_changes(&targets, &w, out)?;
    let mut busy = Vec::new();
    for t in &todo {
        for p in c.gpu_pods(&t.before.name)? {
            busy.push(format!("  node {}: {p}", t.before.name));
        }
    }
    if !busy.is_empty() {
        writeln!(out, "pods that would be disrupted (the device plugin restarts on their node with the new config; a switch to or from MPS changes their GPUs' compute mode):\n{}", busy.join("\n")).map_err(io)?;
    }
    for p in &w.problems {
        writeln!(err, "tessera: {p}").map_err(io)?;
    }
    if !r.yes {
        if !busy.is_empty() {
            writeln!(err, "tessera: refused without --yes: pods hold GPUs on nodes whose config changes (listed above)").map_err(io)?;
        }
        writeln!(err, "tessera: dry run: nothing was changed; add --yes to write the ConfigMap and set the labels").map_err(io)?;
        return Ok(0);
    }
    if !w.problems.is_empty() {
        writeln!(
            err,
            "tessera: refused, nothing was changed: the ClusterPolicy does not let the device plugin read these configs (see above)"
        )
        .map_err(io)?;
        return Ok(2);
    }
    if todo.is_empty() && !merged.changed() {
        writeln!(out, "every node is already at its config: nothing to do").map_err(io)?;
        return Ok(0);
    }
    // What this run may prune afterwards: the tessera keys there when it started, and its own.
    let mut prunable: BTreeSet<String> = stored
        .iter()
        .flat_map(|s| s.data.keys())
        .filter(|k| k.starts_with(super::CONFIG_PREFIX))
        .cloned()
        .collect();
    let written = write_configmap(c, &w, &configs, stored, err)?;
    if written.changed() {
        writeln!(
            out,
            "ConfigMap {cm}: {}",
            if written.added.is_empty() {
                "updated".to_string()
            } else {
                format!("added {}", written.added.join(", "))
            }
        )
        .map_err(io)?;
    }
    prunable.extend(configs.iter().map(|(k, _)| k.clone()));
    nodes::rollout(c, r, &w, &configs, todo, &prunable, out, err)
}
