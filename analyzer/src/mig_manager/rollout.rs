//! The rollout of `--via mig-manager` over the [`Cluster`] trait: choose the nodes, render the
//! ConfigMap, print the dry run, refuse when pods hold GPUs that change, write the ConfigMap
//! (re-read and re-rendered on a 409), then node by node — at most `max_unavailable` at once —
//! cordon (`--cordon`), set `nvidia.com/mig.config` (removing the stale
//! `nvidia.com/mig.config.state` in the same patch, so a `success` seen later is mig-manager's
//! answer to this label), watch the state until `success`, `failed` or the per-node timeout,
//! and on `failed` or a timeout put the previous label back and watch that too. A failed node
//! stops the rollout: later nodes are not started.
//!
//! Output: the ConfigMap diff, the label changes and the per-node results on `out` (data);
//! notes, warnings and refusals on `err`. Returns the exit code: 0 done (or dry run), 2 refused,
//! failed or rolled back — the node-local apply's codes.
//!
//! What it does not do: drain or evict pods, retry a failed node, or change the ClusterPolicy.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::{Duration, Instant};

use tessera_core::mig::apply::LayoutFile;
use tessera_core::mig::parted::PartedFile;

use super::render::{self, Change, NodeLayout, RenderError};
use super::{
    CONFIG_KEY, CONFIG_LABEL, CONFIG_PREFIX, Cluster, ClusterError, DEPLOY_LABEL, GpuPod,
    NodeSelect, NodeView, STATE_LABEL,
};

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
}

/// Input or API errors that stop the command before or while it acts (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("{0}")]
    Input(String),
}

/// How one node ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    Success,
    Failed,
    TimedOut(Option<String>),
}

struct Active {
    node: NodeView,
    layout: NodeLayout,
    cordoned: bool,
    started: Instant,
    deadline: Instant,
    state: Option<String>,
}

fn io(e: std::io::Error) -> RolloutError {
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

/// Write the ConfigMap, re-reading and re-merging it on a conflict (another writer).
fn write_config(
    c: &mut dyn Cluster,
    r: &Request,
    layouts: &[NodeLayout],
    in_use: &BTreeSet<String>,
    mut stored: Option<super::StoredConfig>,
    seed: Option<&str>,
    err: &mut dyn Write,
) -> Result<render::Merged, RolloutError> {
    for attempt in 1..=5 {
        let text = stored.as_ref().and_then(|s| s.text.as_deref());
        let merged = render::merge(text, seed, layouts, in_use)?;
        let result = match &stored {
            None => c.create_config(&r.namespace, &r.configmap, &merged.after),
            Some(_) if !merged.changed() => return Ok(merged),
            Some(s) => c.replace_config(
                &r.namespace,
                &r.configmap,
                &merged.after,
                &s.resource_version,
            ),
        };
        match result {
            Ok(()) => return Ok(merged),
            Err(ClusterError::Conflict(m)) if attempt < 5 => {
                writeln!(
                    err,
                    "tessera: ConfigMap {}/{} changed meanwhile ({m}); reading it again",
                    r.namespace, r.configmap
                )
                .map_err(io)?;
                stored = c.read_config(&r.namespace, &r.configmap)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    unreachable!("the loop returns on its last attempt")
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
    let stored_text = stored
        .as_ref()
        .and_then(|s| s.text.as_deref())
        .or(seed.as_deref());
    let stored_file = match stored_text.map(|t| PartedFile::parse(t, "the stored config.yaml")) {
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
    let in_use: BTreeSet<String> = c
        .nodes(&NodeSelect::All)?
        .iter()
        .filter_map(|n| {
            n.config()
                .filter(|v| v.starts_with(CONFIG_PREFIX))
                .map(str::to_string)
        })
        .collect();
    let merged = render::merge(
        stored.as_ref().and_then(|s| s.text.as_deref()),
        seed.as_deref(),
        &layouts,
        &in_use,
    )?;
    let by_name: BTreeMap<&str, &NodeView> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let changes: Vec<(NodeView, NodeLayout, Change)> = layouts
        .iter()
        .map(|l| {
            let n = by_name[l.node.as_str()];
            (
                n.clone(),
                l.clone(),
                render::change(n, l, stored_file.as_ref()),
            )
        })
        .collect();

    // What will change.
    let cm = format!("{}/{}", r.namespace, r.configmap);
    if merged.changed() {
        let verb = if stored.is_none() {
            "created"
        } else {
            "updated"
        };
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
    for (n, l, ch) in &changes {
        writeln!(out, "  {}", render::describe_label(n, l, ch)).map_err(io)?;
    }
    let policy_ok = check_policy(c, r, err)?;
    let mut busy: Vec<(String, Vec<GpuPod>)> = Vec::new();
    for (n, _, ch) in &changes {
        if ch.disturbs() {
            let pods = c.gpu_pods(&n.name)?;
            if !pods.is_empty() {
                busy.push((n.name.clone(), pods));
            }
        }
    }
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
    let merged = write_config(
        c,
        r,
        &layouts,
        &in_use,
        stored.clone(),
        seed.as_deref(),
        err,
    )?;
    if merged.changed() {
        writeln!(
            out,
            "ConfigMap {cm}: {}{}",
            if merged.added.is_empty() {
                "updated".to_string()
            } else {
                format!("added {}", merged.added.join(", "))
            },
            if merged.pruned.is_empty() {
                String::new()
            } else {
                format!("; pruned unused {}", merged.pruned.join(", "))
            }
        )
        .map_err(io)?;
    }
    rollout(c, r, changes, out, err)
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

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// Wait until every active node reports `success` or `failed`, or passes its deadline.
fn wait(
    c: &mut dyn Cluster,
    active: &mut BTreeMap<String, Active>,
) -> Result<BTreeMap<String, Ending>, RolloutError> {
    let mut done = BTreeMap::new();
    while done.len() < active.len() {
        let deadline = active
            .iter()
            .filter(|(n, _)| !done.contains_key(*n))
            .map(|(_, a)| a.deadline)
            .min()
            .expect("an active node is left");
        match c.next_update(deadline)? {
            Some(v) => {
                if done.contains_key(&v.name) {
                    continue;
                }
                if let Some(a) = active.get_mut(&v.name) {
                    a.state = v.state().map(str::to_string);
                    match v.state() {
                        Some("success") => {
                            done.insert(v.name.clone(), Ending::Success);
                            c.unwatch(&v.name);
                        }
                        Some("failed") => {
                            done.insert(v.name.clone(), Ending::Failed);
                            c.unwatch(&v.name);
                        }
                        _ => {}
                    }
                }
            }
            None => {
                let now = Instant::now();
                for (name, a) in active.iter() {
                    if !done.contains_key(name) && a.deadline <= now {
                        done.insert(name.clone(), Ending::TimedOut(a.state.clone()));
                        c.unwatch(name);
                    }
                }
            }
        }
    }
    Ok(done)
}

fn describe(e: &Ending, timeout: Duration) -> String {
    match e {
        Ending::Success => "success".into(),
        Ending::Failed => "failed".into(),
        Ending::TimedOut(s) => format!(
            "no result after {} (state {})",
            secs(timeout),
            s.as_deref().unwrap_or("not set by mig-manager")
        ),
    }
}

/// Set the label on each node of each wave, watch, roll back failures; see the module docs.
fn rollout(
    c: &mut dyn Cluster,
    r: &Request,
    changes: Vec<(NodeView, NodeLayout, Change)>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, RolloutError> {
    let todo: Vec<_> = changes
        .into_iter()
        .filter(|(_, _, ch)| ch.relabels())
        .collect();
    if todo.is_empty() {
        writeln!(
            out,
            "every node is already labelled with its config: nothing to do"
        )
        .map_err(io)?;
        return Ok(0);
    }
    let wave = r.max_unavailable.max(1);
    let mut failed = false;
    let mut left: Vec<String> = Vec::new();
    for chunk in todo.chunks(wave) {
        if failed {
            left.extend(chunk.iter().map(|(n, _, _)| n.name.clone()));
            continue;
        }
        let mut active = BTreeMap::new();
        for (node, layout, change) in chunk {
            let mut cordoned = false;
            if r.cordon && !node.unschedulable {
                c.set_unschedulable(&node.name, true)?;
                cordoned = true;
                writeln!(out, "node {}: cordoned", node.name).map_err(io)?;
            }
            if change.disturbs() {
                let pods = c.gpu_pods(&node.name)?;
                if !pods.is_empty() {
                    let list: Vec<String> = pods.iter().map(|p| format!("  {p}")).collect();
                    writeln!(err, "tessera: node {}: refused, label not changed: pods hold GPU resources:\n{}", node.name, list.join("\n")).map_err(io)?;
                    if cordoned {
                        c.set_unschedulable(&node.name, false)?;
                        writeln!(out, "node {}: uncordoned", node.name).map_err(io)?;
                    }
                    failed = true;
                    continue;
                }
            }
            let written = c.patch_labels(
                &node.name,
                &[(CONFIG_LABEL, Some(&layout.config)), (STATE_LABEL, None)],
            )?;
            c.watch(&node.name, &written.resource_version)?;
            writeln!(
                out,
                "node {}: {CONFIG_LABEL}={} (was {}); waiting for mig-manager",
                node.name,
                layout.config,
                node.config().unwrap_or("unset")
            )
            .map_err(io)?;
            let now = Instant::now();
            active.insert(
                node.name.clone(),
                Active {
                    node: node.clone(),
                    layout: layout.clone(),
                    cordoned,
                    started: now,
                    deadline: now + r.timeout,
                    state: None,
                },
            );
        }
        let endings = wait(c, &mut active)?;
        for (name, ending) in endings {
            let a = &active[&name];
            if ending == Ending::Success {
                writeln!(
                    out,
                    "node {name}: success: {} applied in {}",
                    a.layout.config,
                    secs(a.started.elapsed())
                )
                .map_err(io)?;
                if a.cordoned {
                    c.set_unschedulable(&name, false)?;
                    writeln!(out, "node {name}: uncordoned").map_err(io)?;
                }
                continue;
            }
            failed = true;
            writeln!(
                err,
                "tessera: node {name}: {} with {CONFIG_LABEL}={}; rolling back",
                describe(&ending, r.timeout),
                a.layout.config
            )
            .map_err(io)?;
            rollback(c, r, a, &ending, out, err)?;
        }
    }
    if !left.is_empty() {
        writeln!(
            err,
            "tessera: stopped after a failure; not started: {}",
            left.join(", ")
        )
        .map_err(io)?;
    }
    Ok(if failed { 2 } else { 0 })
}

/// Put the previous label back on a node that failed or timed out, and watch mig-manager apply it.
fn rollback(
    c: &mut dyn Cluster,
    r: &Request,
    a: &Active,
    ending: &Ending,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), RolloutError> {
    let name = a.node.name.as_str();
    let previous = a.node.config();
    let written = c.patch_labels(name, &[(CONFIG_LABEL, previous), (STATE_LABEL, None)])?;
    let what = format!(
        "node {name}: rolled back {CONFIG_LABEL} {} -> {} after {}",
        a.layout.config,
        previous.unwrap_or("(removed)"),
        describe(ending, r.timeout)
    );
    let Some(previous) = previous else {
        writeln!(out, "{what}; mig-manager does not revert the GPUs when the label is removed: check the node (kubectl describe node {name}){}", if a.cordoned { "; it stays cordoned" } else { "" }).map_err(io)?;
        return Ok(());
    };
    c.watch(name, &written.resource_version)?;
    let now = Instant::now();
    let mut again = BTreeMap::from([(
        name.to_string(),
        Active {
            node: a.node.clone(),
            layout: a.layout.clone(),
            cordoned: a.cordoned,
            started: now,
            deadline: now + r.timeout,
            state: None,
        },
    )]);
    let back = wait(c, &mut again)?
        .remove(name)
        .expect("one node waited for");
    writeln!(out, "{what}; {previous}: {}", describe(&back, r.timeout)).map_err(io)?;
    if a.cordoned {
        if back == Ending::Success {
            c.set_unschedulable(name, false)?;
            writeln!(out, "node {name}: uncordoned").map_err(io)?;
        } else {
            writeln!(
                err,
                "tessera: node {name} stays cordoned: its rollback did not reach success"
            )
            .map_err(io)?;
        }
    }
    Ok(())
}
