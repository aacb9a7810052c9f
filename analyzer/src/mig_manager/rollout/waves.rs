//! The rollout's node-by-node part (module docs of [`super`]): the waves of label changes
//! watched to `success`, `failed`, a timeout or a label another client set; the one restore
//! of every way out (previous label back and watched, uncordon what tessera cordoned, `kubectl`
//! commands for what cannot be done); the config check before each label; and the pruning of
//! unused `tessera-…` configs after the rollout.
//!
//! Pure over the [`Cluster`] trait; it does not render configs or decide which nodes change.

mod settle;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::{Duration, Instant};

use tessera_core::mig::parted::PartedFile;

use super::super::render::{self, Change, NodeLayout};
use super::super::{
    CONFIG_LABEL, CONFIG_PREFIX, Cluster, KubeError, Labels, NodeSelect, NodeView, STATE_LABEL,
};
use super::{Request, RolloutError, io};
use crate::kubernetes::configmap::{self, retry_on_conflict};
use crate::kubernetes::labels::{self, LabelError, Written};
use crate::kubernetes::{events, rollout};
use settle::{announce_label, settle_endings};

/// How one node ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    Success,
    Failed,
    TimedOut(Option<String>),
    /// The label became another value than the one waited for (another client); the field
    /// manager of that change when the server says.
    Replaced {
        value: Option<String>,
        manager: Option<String>,
    },
}

/// A node being waited for.
struct Active {
    /// The label value whose state counts.
    expect: Option<String>,
    started: Instant,
    deadline: Instant,
    state: Option<String>,
}

impl Active {
    /// Waiting from `now` for `expect`'s state, for at most `timeout`.
    fn since(expect: &str, now: Instant, timeout: Duration) -> Active {
        Active {
            expect: Some(expect.to_string()),
            started: now,
            deadline: now + timeout,
            state: None,
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// How long [`wait`] waits at most between two looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(250);

fn check_stop(r: &Request) -> Result<(), RolloutError> {
    if rollout::stopped(&r.stop) {
        return Err(RolloutError::Interrupted);
    }
    Ok(())
}

/// Wait until every active node reports `success` or `failed` for the label it waits for, or
/// that label is replaced, or its deadline passes; stops early (an error) when the stop flag is
/// set.
fn wait(
    c: &mut dyn Cluster,
    r: &Request,
    active: &mut BTreeMap<String, Active>,
) -> Result<BTreeMap<String, Ending>, RolloutError> {
    let mut done = BTreeMap::new();
    while done.len() < active.len() {
        check_stop(r)?;
        let deadline = active
            .iter()
            .filter(|(n, _)| !done.contains_key(*n))
            .map(|(_, a)| a.deadline)
            .min()
            .expect("an active node is left");
        let look = match r.stop {
            Some(_) => deadline.min(Instant::now() + STOP_POLL),
            None => deadline,
        };
        match c.next_update(look)? {
            Some(v) => {
                if done.contains_key(&v.name) {
                    continue;
                }
                if let Some(a) = active.get_mut(&v.name) {
                    // A state counts only for the label tessera set.
                    if v.config() != a.expect.as_deref() {
                        done.insert(
                            v.name.clone(),
                            Ending::Replaced {
                                value: v.config().map(str::to_string),
                                manager: v.config_manager.clone(),
                            },
                        );
                        c.unwatch(&v.name);
                        continue;
                    }
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
        Ending::Replaced { value, manager } => format!(
            "{CONFIG_LABEL} changed to {} by {}",
            value.as_deref().unwrap_or("(removed)"),
            manager.as_deref().map_or(
                "another client (the server does not say which)".to_string(),
                |m| { format!("field manager {m:?}") }
            )
        ),
    }
}

/// What tessera changed on one node: what [`restore`] puts back on any exit path.
struct TouchedNode {
    /// The node as read before the rollout (its previous label and cordon).
    node: NodeView,
    layout: NodeLayout,
    /// tessera cordoned it (set before the call: a failed call may have applied).
    cordoned: bool,
    /// The label patch was sent (it may have applied even when the call failed).
    labelled: bool,
    /// At its new config with `success`, or left to another actor: nothing to restore.
    settled: bool,
    /// How it ended when it failed or timed out itself (else the rollout's reason is used).
    ending: Option<String>,
    /// Its label write got no answer however often it was tried: it may still land, so the
    /// config it names is kept from pruning and the command that puts the label back printed.
    uncertain: bool,
}

/// mig-manager's rollout in the one frame ([`rollout::run`]): waves of label changes watched
/// to `success`, the restore of every way out, the pruning of unused configs.
struct Waves<'a> {
    c: &'a mut dyn Cluster,
    r: &'a Request,
    todo: Vec<(NodeView, NodeLayout, Change)>,
}

impl TouchedNode {
    /// `node` about to change to `layout`: nothing done to it yet.
    fn untouched(node: &NodeView, layout: &NodeLayout) -> TouchedNode {
        TouchedNode {
            node: node.clone(),
            layout: layout.clone(),
            cordoned: false,
            labelled: false,
            settled: false,
            ending: None,
            uncertain: false,
        }
    }
}

impl rollout::Touched for TouchedNode {
    fn node(&self) -> &str {
        &self.node.name
    }
    fn uncertain_config(&self) -> Option<&str> {
        self.uncertain.then_some(self.layout.config.as_str())
    }
}

impl rollout::Rollout for Waves<'_> {
    type Touched = TouchedNode;
    type Error = RolloutError;
    fn forward(
        &mut self,
        touched: &mut Vec<TouchedNode>,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Option<String>, RolloutError> {
        waves(self.c, self.r, &self.todo, touched, out, err)
    }
    fn restore(
        &mut self,
        touched: &mut [TouchedNode],
        why: &str,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Vec<String>, RolloutError> {
        restore(self.c, self.r, touched, why, out, err)
    }
    fn prune(
        &mut self,
        prunable: &BTreeSet<String>,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<(), RolloutError> {
        prune_unused(self.c, self.r, prunable, out, err)
    }
    fn io(e: std::io::Error) -> RolloutError {
        io(e)
    }
}

/// Set the label on each node of each wave and watch it; on any way out that leaves nodes
/// changed (a failed or timed-out node, an API error, a refusal, a stop signal) put them back
/// ([`restore`]). Returns the exit code (module docs).
pub(super) fn rollout(
    c: &mut dyn Cluster,
    r: &Request,
    changes: Vec<(NodeView, NodeLayout, Change)>,
    prunable: &BTreeSet<String>,
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
    let names: Vec<String> = todo.iter().map(|(n, _, _)| n.name.clone()).collect();
    rollout::run(&mut Waves { c, r, todo }, &names, prunable, out, err)
}

/// The waves of the rollout: `Ok(None)` when every node reached `success`, `Ok(Some(why))` when
/// it stopped (a node failed, timed out, was refused or relabelled by another actor), `Err` on
/// an API error or a stop signal. Every node it touches is in `touched`.
fn waves(
    c: &mut dyn Cluster,
    r: &Request,
    todo: &[(NodeView, NodeLayout, Change)],
    touched: &mut Vec<TouchedNode>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Option<String>, RolloutError> {
    let wave = r.max_unavailable.max(1);
    for chunk in todo.chunks(wave) {
        let mut active = BTreeMap::new();
        let mut stopped = None;
        for (node, layout, change) in chunk {
            check_stop(r)?;
            let i = touched.len();
            touched.push(TouchedNode::untouched(node, layout));
            if r.cordon && !node.unschedulable {
                touched[i].cordoned = true;
                c.set_unschedulable(&node.name, true)?;
                writeln!(out, "node {}: cordoned", node.name).map_err(io)?;
            }
            if change.disturbs() {
                let pods = c.gpu_pods(&node.name)?;
                if !pods.is_empty() {
                    let list: Vec<String> = pods.iter().map(|p| format!("  {p}")).collect();
                    writeln!(err, "tessera: node {}: refused, label not changed: pods hold GPU resources:\n{}", node.name, list.join("\n")).map_err(io)?;
                    stopped = Some(format!("node {}: pods hold GPU resources", node.name));
                    break;
                }
            }
            ensure_config(c, r, layout, err)?;
            touched[i].labelled = true;
            // Compare-and-swap on the label the change was decided on.
            let written = match labels::write(
                &mut Labels(c),
                &node.name,
                &[(CONFIG_LABEL, node.config())],
                &[(CONFIG_LABEL, Some(&layout.config)), (STATE_LABEL, None)],
                err,
            ) {
                Ok(Written::Done(n) | Written::Already(n)) => n,
                Ok(Written::Changed(why)) => {
                    touched[i].labelled = false;
                    writeln!(
                        err,
                        "tessera: node {}: refused, label not changed: {why}",
                        node.name
                    )
                    .map_err(io)?;
                    stopped = Some(format!("node {}: {why}", node.name));
                    break;
                }
                Ok(Written::Gone) => {
                    touched[i].labelled = false;
                    return Err(RolloutError::Input(format!(
                        "node {} is not in the cluster any more",
                        node.name
                    )));
                }
                Err(LabelError::Failed(e)) => {
                    touched[i].labelled = false;
                    return Err(e.into());
                }
                Err(e @ LabelError::Unknown(_)) => {
                    touched[i].uncertain = true;
                    return Err(RolloutError::Input(format!("node {}: {e}", node.name)));
                }
            };
            announce_label(c, r, node, layout, err);
            let now = Instant::now();
            c.watch(&node.name, &written.resource_version, now + r.timeout)?;
            writeln!(
                out,
                "node {}: {CONFIG_LABEL}={} (was {}); waiting for mig-manager",
                node.name,
                layout.config,
                node.config().unwrap_or("unset")
            )
            .map_err(io)?;
            active.insert(
                node.name.clone(),
                Active::since(&layout.config, now, r.timeout),
            );
        }
        let endings = if active.is_empty() {
            BTreeMap::new()
        } else {
            wait(c, r, &mut active)?
        };
        settle_endings(c, r, (endings, &active), touched, &mut stopped, (out, err))?;
        if stopped.is_some() {
            return Ok(stopped);
        }
    }
    Ok(None)
}

/// Put back every touched node that is not settled: its previous `nvidia.com/mig.config`
/// (removed where it had none), watched until mig-manager reports `success`, then uncordon the
/// nodes tessera cordoned. Never stops at an error: what could not be done is returned as the
/// `kubectl` commands that do it.
fn restore(
    c: &mut dyn Cluster,
    r: &Request,
    touched: &mut [TouchedNode],
    why: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Vec<String>, RolloutError> {
    let mut commands = Vec::new();
    for t in touched.iter_mut().filter(|t| !t.settled) {
        let name = t.node.name.clone();
        let previous = t.node.config().map(str::to_string);
        let label_cmd = match &previous {
            Some(p) => {
                format!("kubectl label node {name} {CONFIG_LABEL}={p} {STATE_LABEL}- --overwrite")
            }
            None => format!("kubectl label node {name} {CONFIG_LABEL}- {STATE_LABEL}-"),
        };
        // Whether the node's GPUs are back at the previous config (or were never changed).
        let mut back = true;
        if t.labelled {
            let why = t.ending.clone().unwrap_or_else(|| why.to_string());
            match restore_label(c, r, t, previous.as_deref(), &why, out, err) {
                Ok(ok) => back = ok,
                Err(e) => {
                    writeln!(
                        err,
                        "tessera: node {name}: cannot put {CONFIG_LABEL} back: {e}"
                    )
                    .map_err(io)?;
                    commands.push(label_cmd);
                    back = false;
                }
            }
        }
        if t.cordoned {
            if back {
                match c.set_unschedulable(&name, false) {
                    Ok(()) => writeln!(out, "node {name}: uncordoned").map_err(io)?,
                    Err(e) => {
                        writeln!(err, "tessera: node {name}: cannot uncordon: {e}").map_err(io)?;
                        commands.push(format!("kubectl uncordon {name}"));
                    }
                }
            } else {
                writeln!(
                    err,
                    "tessera: node {name} stays cordoned: its rollback did not reach success"
                )
                .map_err(io)?;
                commands.push(format!(
                    "kubectl uncordon {name}   # once its GPUs are checked (kubectl describe node {name})"
                ));
            }
        }
        t.settled = true;
    }
    Ok(commands)
}

/// Put one node's previous label back and watch mig-manager apply it: `Ok(true)` when the node
/// is back (`success`, or tessera's label never took), `Ok(false)` when it is not known to be.
fn restore_label(
    c: &mut dyn Cluster,
    r: &Request,
    t: &TouchedNode,
    previous: Option<&str>,
    why: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<bool, RolloutError> {
    let name = t.node.name.as_str();
    // Read it first: the label patch may not have applied, or another actor may own it now.
    let now = c.nodes(&NodeSelect::Names(vec![name.to_string()]))?;
    let current = now.first().and_then(|n| n.config()).map(str::to_string);
    if current.as_deref() == previous && t.uncertain {
        return Err(RolloutError::Input(format!(
            "its label write got no answer and may still land ({CONFIG_LABEL}={} is kept in the ConfigMap)",
            t.layout.config
        )));
    }
    if current.as_deref() == previous {
        return Ok(true);
    }
    if current.as_deref() != Some(t.layout.config.as_str()) {
        writeln!(
            err,
            "tessera: node {name}: {CONFIG_LABEL} is {} now, set by another client: left as it is",
            current.as_deref().unwrap_or("(removed)")
        )
        .map_err(io)?;
        return Ok(true);
    }
    let written = match labels::write(
        &mut Labels(c),
        name,
        &[(CONFIG_LABEL, Some(t.layout.config.as_str()))],
        &[(CONFIG_LABEL, previous), (STATE_LABEL, None)],
        err,
    ) {
        Ok(Written::Done(n) | Written::Already(n)) => n,
        Ok(Written::Changed(why)) => {
            writeln!(
                err,
                "tessera: node {name}: {why}, set by another client: left as it is"
            )
            .map_err(io)?;
            return Ok(true);
        }
        Ok(Written::Gone) => return Ok(true),
        Err(e) => return Err(RolloutError::Input(e.to_string())),
    };
    let change = events::Change {
        regarding: events::Regarding::node(name),
        reason: "MigConfigRolledBack",
        action: "Label",
        note: format!(
            "tessera mig apply --via mig-manager: {CONFIG_LABEL} {} -> {} after {why}",
            t.layout.config,
            previous.unwrap_or("(removed)")
        ),
        warning: true,
    };
    events::warn(c.event(&change), err);
    let what = format!(
        "node {name}: rolled back {CONFIG_LABEL} {} -> {} after {why}",
        t.layout.config,
        previous.unwrap_or("(removed)"),
    );
    let Some(previous) = previous else {
        writeln!(out, "{what}; mig-manager does not revert the GPUs when the label is removed: check the node (kubectl describe node {name}){}", if t.cordoned { "; it stays cordoned" } else { "" }).map_err(io)?;
        return Ok(false);
    };
    let now = Instant::now();
    c.watch(name, &written.resource_version, now + r.timeout)?;
    let mut again = BTreeMap::from([(
        name.to_string(),
        Active {
            expect: Some(previous.to_string()),
            started: now,
            deadline: now + r.timeout,
            state: None,
        },
    )]);
    // A stop signal does not cut the rollback short: it is what the signal asks for.
    let quiet = Request {
        stop: None,
        ..r.clone()
    };
    let back = wait(c, &quiet, &mut again)?
        .remove(name)
        .expect("one node waited for");
    writeln!(out, "{what}; {previous}: {}", describe(&back, r.timeout)).map_err(io)?;
    Ok(back == Ending::Success)
}

/// Make sure the ConfigMap holds `layout`'s config right before a node is labelled with it
/// (another run may have pruned it since it was written): re-added when missing, never
/// pruning anything.
fn ensure_config(
    c: &mut dyn Cluster,
    r: &Request,
    layout: &NodeLayout,
    err: &mut dyn Write,
) -> Result<(), RolloutError> {
    let stored = c.read_config(&r.namespace, &r.configmap)?;
    let merged = super::write_config(c, r, std::slice::from_ref(layout), stored, None, err)?;
    if !merged.added.is_empty() {
        writeln!(
            err,
            "tessera: ConfigMap {}/{} had lost {} (another run pruned it?): added again",
            r.namespace, r.configmap, layout.config
        )
        .map_err(io)?;
    }
    Ok(())
}

/// After the rollout: remove the `tessera-…` configs of `prunable` (those in the ConfigMap when
/// this run started, and this run's own) that no node names, re-reading the nodes and the
/// ConfigMap on a conflict. A config another run added meanwhile is not this run's to prune,
/// and one that run added earlier but labels only later is added back by its
/// [`ensure_config`]. A failure here is a warning: nothing depends on it.
fn prune_unused(
    c: &mut dyn Cluster,
    r: &Request,
    prunable: &BTreeSet<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), RolloutError> {
    let what = format!("ConfigMap {}/{}", r.namespace, r.configmap);
    let attempt = retry_on_conflict(
        &what,
        configmap::ATTEMPTS,
        err,
        |_| -> Result<Vec<String>, KubeError> {
            let mut keep = configs_in_use(c)?;
            let Some(stored) = c.read_config(&r.namespace, &r.configmap)? else {
                return Ok(Vec::new());
            };
            let Some(text) = stored.text.as_deref() else {
                return Ok(Vec::new());
            };
            let Ok(file) = PartedFile::parse(text, "the stored config.yaml") else {
                return Ok(Vec::new());
            };
            keep.extend(
                file.configs
                    .keys()
                    .filter(|k| !prunable.contains(*k))
                    .cloned(),
            );
            let Ok(merged) = render::merge(Some(text), None, &[], Some(&keep)) else {
                return Ok(Vec::new());
            };
            if merged.pruned.is_empty() {
                return Ok(Vec::new());
            }
            c.replace_config(
                &r.namespace,
                &r.configmap,
                &merged.after,
                &stored.resource_version,
            )?;
            Ok(merged.pruned)
        },
    );
    match attempt {
        Ok(pruned) => {
            if !pruned.is_empty() {
                writeln!(
                    out,
                    "ConfigMap {}/{}: pruned unused {}",
                    r.namespace,
                    r.configmap,
                    pruned.join(", ")
                )
                .map_err(io)?;
            }
        }
        Err(e) => writeln!(
            err,
            "tessera: warning: unused tessera configs were not pruned from ConfigMap {}/{}: {e}",
            r.namespace, r.configmap
        )
        .map_err(io)?,
    }
    Ok(())
}

/// The `tessera-…` configs some node's `nvidia.com/mig.config` names.
pub(super) fn configs_in_use(c: &mut dyn Cluster) -> Result<BTreeSet<String>, KubeError> {
    Ok(c.nodes(&NodeSelect::All)?
        .iter()
        .filter_map(|n| {
            n.config()
                .filter(|v| v.starts_with(CONFIG_PREFIX))
                .map(str::to_string)
        })
        .collect())
}
