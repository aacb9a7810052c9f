//! The rollout's node-by-node part (module docs of [`super`]): for each node, the pods it
//! disrupts named, its config checked in the ConfigMap, the label set, and the node read every
//! `poll` until allocatable `nvidia.com/gpu` is GPUs × replicas and `nvidia.com/gpu.replicas`
//! agrees, the timeout passes, or another client relabels it. The first node that does not get
//! there stops the rollout. Then **one restore for every way out** (a failed or timed-out node,
//! an API error, a stop signal): every node tessera labelled that is not at its config gets its
//! previous label back (removed where it had none), unless another client changed it, and is
//! read until it advertises what it did before; what cannot be put back or confirmed is printed
//! as `kubectl` commands (exit 3). Last, the tessera keys no node names are pruned from the
//! ConfigMap (its own of a failed run, and those older runs left).
//!
//! Pure over [`DevicePluginCluster`]; it does not choose configs.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::{Duration, Instant};

use super::super::{
    CONFIG_LABEL, DevicePluginCluster, GPU_RESOURCE, KubeError, Labels, NodeView, configmap,
};
use super::{Request, RolloutError, Target, Where, io, write_configmap};
use crate::kubernetes::configmap::{self as kconfigmap, retry_on_conflict};
use crate::kubernetes::labels::{self, LabelError, Written};
use crate::kubernetes::{events, rollout};

/// What tessera changed on one node.
struct TouchedNode {
    target: Target,
    /// At its config, or left to another client: nothing to restore.
    settled: bool,
    /// The label write got no answer (a timeout, a transport error, a 5xx) and the node did not
    /// carry the label when read back: it may still land. Its config key is kept from pruning
    /// and the command that puts the label back is printed.
    uncertain: bool,
}

/// How waiting for a node ended.
enum Waited {
    Reached(Duration),
    /// The label became another value (another client).
    Replaced(Option<String>),
    TimedOut(String),
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn state(n: &NodeView) -> String {
    format!(
        "{GPU_RESOURCE} {}, nvidia.com/gpu.replicas {}",
        n.allocatable.map_or("unset".into(), |a| a.to_string()),
        n.replicas().map_or("unset".into(), |r| r.to_string())
    )
}

fn check_stop(r: &Request) -> Result<(), RolloutError> {
    if rollout::stopped(&r.stop) {
        return Err(RolloutError::Interrupted);
    }
    Ok(())
}

/// Read `node` every `r.poll` until `done` holds (while its label is `label`), its label
/// changes, or `r.timeout` passes. Read errors are retried until then (each new one said once).
fn wait(
    c: &mut dyn DevicePluginCluster,
    r: &Request,
    node: &str,
    label: Option<&str>,
    done: &dyn Fn(&NodeView) -> bool,
    err: &mut dyn Write,
) -> Result<Waited, RolloutError> {
    let start = Instant::now();
    let deadline = start + r.timeout;
    let mut last: Option<NodeView> = None;
    let mut last_error: Option<String> = None;
    loop {
        check_stop(r)?;
        match c.node(node) {
            Ok(Some(n)) => {
                if n.config() != label {
                    return Ok(Waited::Replaced(n.config().map(str::to_string)));
                }
                if done(&n) {
                    return Ok(Waited::Reached(start.elapsed()));
                }
                last = Some(n);
            }
            Ok(None) => {
                return Err(RolloutError::Input(format!(
                    "node {node} was deleted while it changed"
                )));
            }
            Err(e) => {
                let m = e.to_string();
                if last_error.as_ref() != Some(&m) {
                    writeln!(
                        err,
                        "tessera: read node {node}: {m}; retrying until the node timeout"
                    )
                    .map_err(io)?;
                }
                last_error = Some(m);
            }
        }
        let now = Instant::now();
        if now >= deadline {
            let seen = match (&last, &last_error) {
                (Some(n), _) => state(n),
                (None, Some(e)) => format!("the node could not be read: {e}"),
                (None, None) => "nothing read".into(),
            };
            return Ok(Waited::TimedOut(format!(
                "no result after {} ({seen})",
                secs(r.timeout)
            )));
        }
        std::thread::sleep(r.poll.min(deadline - now));
    }
}

/// The device plugin's rollout in the one frame ([`rollout::run`]): node by node, polled to
/// its config, the restore of every way out, the pruning of unused configs.
struct NodeByNode<'a> {
    c: &'a mut dyn DevicePluginCluster,
    r: &'a Request,
    w: &'a Where,
    configs: &'a [(String, String)],
    todo: Vec<Target>,
}

impl rollout::Touched for TouchedNode {
    fn node(&self) -> &str {
        &self.target.before.name
    }
    fn uncertain_config(&self) -> Option<&str> {
        self.uncertain.then_some(self.target.sharing.name.as_str())
    }
}

impl rollout::Rollout for NodeByNode<'_> {
    type Touched = TouchedNode;
    type Error = RolloutError;
    fn forward(
        &mut self,
        touched: &mut Vec<TouchedNode>,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Option<String>, RolloutError> {
        nodes(
            self.c,
            self.r,
            self.w,
            self.configs,
            &self.todo,
            touched,
            out,
            err,
        )
    }
    fn restore(
        &mut self,
        touched: &mut [TouchedNode],
        _why: &str,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Vec<String>, RolloutError> {
        restore(self.c, self.r, touched, out, err)
    }
    fn prune(
        &mut self,
        prunable: &BTreeSet<String>,
        _out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<(), RolloutError> {
        prune(self.c, self.w, prunable, err)
    }
    fn io(e: std::io::Error) -> RolloutError {
        io(e)
    }
}

/// Label the nodes one by one and wait for each; on any way out that leaves nodes changed, put
/// them back ([`restore`]); then prune. Returns the exit code.
#[allow(clippy::too_many_arguments)]
pub(super) fn rollout(
    c: &mut dyn DevicePluginCluster,
    r: &Request,
    w: &Where,
    configs: &[(String, String)],
    todo: Vec<Target>,
    prunable: &BTreeSet<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, RolloutError> {
    let names: Vec<String> = todo.iter().map(|t| t.before.name.clone()).collect();
    let mut r = NodeByNode {
        c,
        r,
        w,
        configs,
        todo,
    };
    rollout::run(&mut r, &names, prunable, out, err)
}

/// Node by node; `Ok(Some(why))` when a node did not reach its config (the rollout stops).
#[allow(clippy::too_many_arguments)]
fn nodes(
    c: &mut dyn DevicePluginCluster,
    r: &Request,
    w: &Where,
    configs: &[(String, String)],
    todo: &[Target],
    touched: &mut Vec<TouchedNode>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Option<String>, RolloutError> {
    for t in todo {
        check_stop(r)?;
        let name = t.before.name.clone();
        let now = reread_node(c, w, configs, t, &name, err)?;
        let mut target = t.clone();
        target.before = now;
        touched.push(TouchedNode {
            target: target.clone(),
            settled: false,
            uncertain: false,
        });
        let previous = target.before.config().map(str::to_string);
        let written = labels::write(
            &mut Labels(c),
            &name,
            &[(CONFIG_LABEL, previous.as_deref())],
            &[(CONFIG_LABEL, Some(t.sharing.name.as_str()))],
            err,
        );
        match written {
            Ok(Written::Done(_) | Written::Already(_)) => {}
            Ok(Written::Changed(why)) => {
                touched.last_mut().expect("pushed above").settled = true;
                return Ok(Some(format!(
                    "node {name}: {why}; stopping, the node's label is left as it is"
                )));
            }
            Ok(Written::Gone) => {
                touched.last_mut().expect("pushed above").settled = true;
                return Err(RolloutError::Input(format!(
                    "node {name} was deleted while it changed"
                )));
            }
            Err(LabelError::Failed(e)) => {
                // Refused: the node is as it was.
                touched.last_mut().expect("pushed above").settled = true;
                return Err(e.into());
            }
            Err(e @ LabelError::Unknown(_)) => {
                touched.last_mut().expect("pushed above").uncertain = true;
                return Err(RolloutError::Input(format!("node {name}: {e}")));
            }
        }
        announce_label(c, r, t, &name, previous.as_deref(), err);
        let want = t.want();
        let replicas = u64::from(t.sharing.replicas);
        let done =
            move |n: &NodeView| n.allocatable == Some(want) && n.replicas() == Some(replicas);
        match wait(c, r, &name, Some(t.sharing.name.as_str()), &done, err)? {
            Waited::Reached(d) => {
                writeln!(
                    out,
                    "node {name}: {CONFIG_LABEL}={}: {GPU_RESOURCE} {} -> {want} ({} GPUs × {}, {}), nvidia.com/gpu.replicas={replicas} after {}",
                    t.sharing.name,
                    target.before.allocatable.map_or("?".into(), |a| a.to_string()),
                    t.gpus,
                    t.sharing.replicas,
                    t.sharing.method.as_str(),
                    secs(d)
                )
                .map_err(io)?;
                touched.last_mut().expect("pushed above").settled = true;
            }
            Waited::Replaced(v) => {
                touched.last_mut().expect("pushed above").settled = true;
                return Ok(Some(format!(
                    "node {name}: {CONFIG_LABEL} changed to {} by another client while tessera waited for {}; stopping, the node's label is left as it is",
                    v.as_deref().unwrap_or("(removed)"),
                    t.sharing.name
                )));
            }
            Waited::TimedOut(why) => {
                writeln!(
                    err,
                    "tessera: node {name}: {why} with {CONFIG_LABEL}={} (expected {GPU_RESOURCE} {want} = {} GPUs × {}, nvidia.com/gpu.replicas={replicas}); rolling back",
                    t.sharing.name, t.gpus, t.sharing.replicas
                )
                .map_err(io)?;
                return Ok(Some(format!("node {name} did not reach its config")));
            }
        }
    }
    Ok(None)
}

/// Reads `name` again right before its change and says which pods the device plugin restarts
/// under; the config is written back first when another run pruned it meanwhile.
fn reread_node(
    c: &mut dyn DevicePluginCluster,
    w: &Where,
    configs: &[(String, String)],
    t: &Target,
    name: &str,
    err: &mut dyn Write,
) -> Result<NodeView, RolloutError> {
    // Read again right before the change: its previous label is what it is now.
    let Some(now) = c.node(name)? else {
        return Err(RolloutError::Input(format!(
            "node {name} is not in the cluster any more"
        )));
    };
    for p in c.gpu_pods(name)? {
        writeln!(
            err,
            "tessera: node {name}: the device plugin restarts under {p}"
        )
        .map_err(io)?;
    }
    // Another run may have pruned the config meanwhile: it is added back.
    let stored = c.read_configmap(&w.namespace, &w.configmap)?;
    if stored.as_ref().and_then(|s| s.data.get(&t.sharing.name)) != Some(&t.sharing.text) {
        write_configmap(c, w, configs, stored, err)?;
    }
    Ok(now)
}

/// Records the label change of `name` (from `previous`) as a Kubernetes event; a failure to
/// record is only warned about.
fn announce_label(
    c: &mut dyn DevicePluginCluster,
    r: &Request,
    t: &Target,
    name: &str,
    previous: Option<&str>,
    err: &mut dyn Write,
) {
    let change = events::Change {
        regarding: events::Regarding::node(name),
        reason: "SharingConfigLabelled",
        action: "Label",
        note: format!(
            "tessera share apply: {CONFIG_LABEL} {} -> {} ({} × {}, {})",
            previous.unwrap_or("(unset)"),
            t.sharing.name,
            t.gpus,
            t.sharing.replicas,
            r.source
        ),
        warning: false,
    };
    events::warn(c.event(&change), err);
}

/// Waits until the device plugin advertises `t`'s node as before its label was put back and
/// says so; when it does not, the command to look at the node is added to `commands`.
fn await_restored(
    c: &mut dyn DevicePluginCluster,
    r: &Request,
    t: &TouchedNode,
    commands: &mut Vec<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), RolloutError> {
    let b = &t.target.before;
    let name = b.name.as_str();
    let previous = b.config();
    let (alloc, replicas) = (b.allocatable, b.replicas());
    let done = move |n: &NodeView| n.allocatable == alloc && n.replicas() == replicas;
    let back = previous.unwrap_or("(none)");
    match wait(c, r, name, previous, &done, err) {
        Ok(Waited::Reached(d)) => writeln!(
            out,
            "node {name}: rolled back {CONFIG_LABEL} {} -> {back}; {} again after {}",
            t.target.sharing.name,
            state(b),
            secs(d)
        )
        .map_err(io)?,
        Ok(Waited::Replaced(v)) => writeln!(err, "tessera: node {name}: {CONFIG_LABEL} changed to {} by another client during the rollback; left as it is", v.as_deref().unwrap_or("(removed)")).map_err(io)?,
        Ok(Waited::TimedOut(why)) => {
            writeln!(err, "tessera: node {name}: {CONFIG_LABEL} is back to {back}, but the device plugin did not advertise its previous {} within the timeout: {why}", state(b)).map_err(io)?;
            commands.push(format!("kubectl describe node {name}   # expect {}, then check the device plugin's pod", state(b)));
        }
        Err(e) => {
            writeln!(err, "tessera: node {name}: {e}").map_err(io)?;
            commands.push(format!("kubectl describe node {name}   # expect {}", state(b)));
        }
    }
    Ok(())
}

/// The `kubectl` command that sets `node`'s label back to `value` (removes it when `None`).
fn relabel_command(node: &str, value: Option<&str>) -> String {
    match value {
        Some(v) => format!("kubectl label node {node} {CONFIG_LABEL}={v} --overwrite"),
        None => format!("kubectl label node {node} {CONFIG_LABEL}-"),
    }
}

/// Put back every touched node not settled; returns the commands for what could not be.
fn restore(
    c: &mut dyn DevicePluginCluster,
    r: &Request,
    touched: &[TouchedNode],
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Vec<String>, RolloutError> {
    let mut commands = Vec::new();
    // A restore is not stopped by the signal that may have started it.
    let r = Request {
        stop: None,
        ..r.clone()
    };
    for t in touched.iter().filter(|t| !t.settled) {
        let b = &t.target.before;
        let name = b.name.as_str();
        let previous = b.config();
        if t.uncertain {
            // Its label write got no answer every time it was tried: it may still land, so the
            // config it names stays, and the command that puts the label back is printed.
            match c.node(name) {
                Ok(Some(n)) if n.config() == previous => {
                    writeln!(
                        err,
                        "tessera: node {name}: its label write got no answer and may still land: {} is kept in the ConfigMap",
                        t.target.sharing.name
                    )
                    .map_err(io)?;
                    commands.push(format!(
                        "{}   # if the node shows {CONFIG_LABEL}={}",
                        relabel_command(name, previous),
                        t.target.sharing.name
                    ));
                    continue;
                }
                Ok(None) => continue,
                _ => {} // it landed (or cannot be read): put it back below
            }
        }
        let mine = Some(t.target.sharing.name.as_str());
        match labels::write(
            &mut Labels(c),
            name,
            &[(CONFIG_LABEL, mine)],
            &[(CONFIG_LABEL, previous)],
            err,
        ) {
            Ok(Written::Already(_)) => continue, // tessera's label never applied

            Ok(Written::Done(_)) => {
                let change = events::Change {
                    regarding: events::Regarding::node(name),
                    reason: "SharingConfigRolledBack",
                    action: "Label",
                    note: format!(
                        "tessera share apply: {CONFIG_LABEL} {} -> {} (rolled back)",
                        t.target.sharing.name,
                        previous.unwrap_or("(removed)")
                    ),
                    warning: true,
                };
                events::warn(c.event(&change), err);
            }
            Ok(Written::Changed(why)) => {
                writeln!(
                    err,
                    "tessera: node {name}: {why}, set by another client; left as it is"
                )
                .map_err(io)?;
                continue;
            }
            Ok(Written::Gone) => continue,
            Err(e) => {
                writeln!(
                    err,
                    "tessera: node {name}: cannot put {CONFIG_LABEL} back: {e}"
                )
                .map_err(io)?;
                commands.push(relabel_command(name, previous));
                continue;
            }
        }
        await_restored(c, &r, t, &mut commands, out, err)?;
    }
    Ok(commands)
}

/// Remove the prunable tessera keys no node names (409: read both again, retry); a failure is a
/// warning with the command.
fn prune(
    c: &mut dyn DevicePluginCluster,
    w: &Where,
    prunable: &BTreeSet<String>,
    err: &mut dyn Write,
) -> Result<(), RolloutError> {
    let what = format!("ConfigMap {}/{}", w.namespace, w.configmap);
    let attempt = retry_on_conflict(&what, kconfigmap::ATTEMPTS, err, |_| {
        let in_use = c.configs_in_use()?;
        let Some(stored) = c.read_configmap(&w.namespace, &w.configmap)? else {
            return Ok(None);
        };
        let Some((data, gone)) =
            configmap::prune(&stored.data, prunable, &in_use, w.default_key.as_deref())
        else {
            return Ok(None);
        };
        c.replace_configmap(&w.namespace, &w.configmap, &data, &stored.resource_version)?;
        Ok::<_, KubeError>(Some(gone))
    });
    match attempt {
        Ok(None) => {}
        Ok(Some(gone)) => writeln!(
            err,
            "tessera: ConfigMap {}/{}: removed {} (no node names them)",
            w.namespace,
            w.configmap,
            gone.join(", ")
        )
        .map_err(io)?,
        Err(e) => writeln!(
            err,
            "tessera: warning: unused configs could not be pruned from ConfigMap {}/{} ({e}); the ones no node names can be removed with kubectl -n {} edit configmap {} (tessera's: {})",
            w.namespace,
            w.configmap,
            w.namespace,
            w.configmap,
            prunable.iter().cloned().collect::<Vec<_>>().join(", ")
        )
        .map_err(io)?,
    }
    Ok(())
}
