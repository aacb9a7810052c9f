//! The scripted device plugin: what NVIDIA's k8s-device-plugin DaemonSet (with its
//! config-manager sidecar and GPU Feature Discovery) does to a node when the label
//! `nvidia.com/device-plugin.config` changes, on nodes labelled
//! `nvidia.com/gpu.deploy.device-plugin=true`.
//!
//! A run, after a short delay ([`crate::FakeKube::set_device_plugin_delay`], default 80 ms, plus
//! a scripted one for [`PluginBehaviour::Slow`]):
//! 1. read the ClusterPolicy's `spec.devicePlugin.config` (`name`: the ConfigMap in the
//!    operator's namespace, `default`: the key for a node without the label), and the key the
//!    label names (the default key when the label was removed);
//! 2. when the ClusterPolicy names no ConfigMap, the ConfigMap or the key is missing, the config
//!    is not a device plugin v1 config ([`check_sharing_config`]), or it asks for MPS on a node
//!    in MIG mode (`nvidia.com/mig.config` set to anything but `all-disabled`): the plugin
//!    crash-loops: allocatable `nvidia.com/gpu` becomes `0`, labels unchanged;
//! 3. otherwise the script for (node, config) ([`crate::FakeKube::script_device_plugin`],
//!    default [`PluginBehaviour::Success`]): capacity and allocatable `nvidia.com/gpu` become
//!    `nvidia.com/gpu.count` × replicas and GFD's labels `nvidia.com/gpu.replicas` and
//!    `nvidia.com/gpu.sharing-strategy` follow (one status write, then one label write), or
//!    nothing changes ([`PluginBehaviour::StaysOld`]), or the plugin crash-loops
//!    ([`PluginBehaviour::Never`]), or one GPU fewer is advertised
//!    ([`PluginBehaviour::WrongCount`]).
//!
//! A newer label change supersedes a run still in progress. The operator does not watch the
//! ConfigMap: editing it starts nothing (as in the real one).
//!
//! What it does not do: no MPS control daemon, no `renameByDefault` resource names, no
//! per-device `devices` selection, no restart of pods; `nvidia.com/gpu.product` is not suffixed
//! `-SHARED`.

use std::sync::Arc;

use serde_json::{Value, json};
use serde_yaml_ng::Value as Yaml;

use crate::PluginBehaviour;
use crate::objects::Kind;
use crate::shared::Shared;
use crate::store::{MIG_CONFIG, Store, Trigger, labels_of};

/// GFD's label of the replicas per GPU.
pub(crate) const REPLICAS: &str = "nvidia.com/gpu.replicas";
/// GFD's label of the sharing strategy (`none`, `time-slicing`, `mps`).
pub(crate) const STRATEGY: &str = "nvidia.com/gpu.sharing-strategy";
/// The label of the node's GPU count (GFD).
pub(crate) const COUNT: &str = "nvidia.com/gpu.count";

/// Whether `trigger` is still the latest run for its node.
fn current(store: &Store, trigger: &Trigger) -> bool {
    store.dp_generation.get(&trigger.node) == Some(&trigger.generation)
        && store.get(Kind::Node, "", &trigger.node).is_some()
}

/// Starts [`run`] on the server's runtime.
pub(crate) fn start(shared: Arc<Shared>, trigger: Trigger) {
    let handle = shared.handle.clone();
    handle.spawn(run(shared, trigger));
}

/// What the config the node selects asks for: `(strategy, replicas)`, or why the plugin fails.
fn selected(s: &Store, trigger: &Trigger) -> Result<(&'static str, u64), String> {
    let policy = s
        .get(Kind::ClusterPolicy, "", "cluster-policy")
        .ok_or("no ClusterPolicy")?;
    let cfg = &policy["spec"]["devicePlugin"]["config"];
    let name = cfg["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or("the ClusterPolicy names no config")?;
    let key = if trigger.config.is_empty() {
        cfg["default"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or("no label and no default config")?
            .to_string()
    } else {
        trigger.config.clone()
    };
    let text = s
        .get(Kind::ConfigMap, &s.dp_namespace, name)
        .and_then(|c| c["data"][key.as_str()].as_str())
        .ok_or(format!("no key {key} in ConfigMap {name}"))?;
    let (strategy, replicas) = check_sharing_config(text)?;
    let node = s.get(Kind::Node, "", &trigger.node).ok_or("no node")?;
    let mig = labels_of(node)
        .get(MIG_CONFIG)
        .is_some_and(|c| c != "all-disabled");
    if strategy == "mps" && mig {
        return Err("MPS on a node in MIG mode".into());
    }
    Ok((strategy, replicas))
}

/// One device plugin run for a label change.
async fn run(shared: Arc<Shared>, trigger: Trigger) {
    let delay = shared.lock().dp_step_delay;
    tokio::time::sleep(delay).await;
    let node = trigger.node.clone();
    let plan = shared.write(|s| {
        if !current(s, &trigger) {
            return None;
        }
        let behaviour = s
            .dp_scripts
            .get(&(node.clone(), trigger.config.clone()))
            .or_else(|| s.dp_scripts.get(&(node.clone(), "*".to_string())))
            .copied()
            .unwrap_or_default();
        match selected(s, &trigger) {
            Ok(v) => Some((behaviour, Some(v))),
            Err(_) => Some((PluginBehaviour::Never, None)),
        }
    });
    let Some((behaviour, wanted)) = plan else {
        return;
    };
    if let PluginBehaviour::Slow(d) = behaviour {
        tokio::time::sleep(d).await;
    }
    shared.write(|s| {
        if !current(s, &trigger) {
            return;
        }
        let count: u64 = s
            .get(Kind::Node, "", &node)
            .and_then(|n| labels_of(n).get(COUNT).and_then(|c| c.parse().ok()))
            .unwrap_or(0);
        let advertise = |s: &mut Store, n: u64| {
            let _ = s.set_node_status(&node, |st| {
                for field in ["capacity", "allocatable"] {
                    if !st[field].is_object() {
                        st[field] = json!({});
                    }
                    st[field]["nvidia.com/gpu"] = json!(n.to_string());
                }
            });
        };
        match (behaviour, wanted) {
            (PluginBehaviour::StaysOld, _) => {}
            (PluginBehaviour::Never, _) | (_, None) => {
                let _ = s.set_node_status(&node, |st| {
                    if !st["allocatable"].is_object() {
                        st["allocatable"] = json!({});
                    }
                    st["allocatable"]["nvidia.com/gpu"] = json!("0");
                });
            }
            (b, Some((strategy, replicas))) => {
                let n = count * replicas - u64::from(b == PluginBehaviour::WrongCount).min(count);
                advertise(s, n);
                let labels = json!({ "metadata": { "labels": {
                    REPLICAS: replicas.to_string(),
                    STRATEGY: strategy,
                } } });
                let _ = s.merge_patch(Kind::Node, "", &node, &labels);
            }
        }
    });
}

/// Checks a device plugin config (`version: v1`; optional `flags`, `resources`, and `sharing`
/// with exactly one of `timeSlicing` and `mps`, each holding `resources: [{name, replicas}]`
/// for `nvidia.com/gpu`, and optionally `renameByDefault`, `failRequestsGreaterThanOne`).
/// Unknown keys are errors. Returns the strategy (`none`, `time-slicing`, `mps`) and replicas.
pub fn check_sharing_config(text: &str) -> Result<(&'static str, u64), String> {
    let doc: Yaml = serde_yaml_ng::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let top = doc.as_mapping().ok_or("the config is not a map")?;
    for key in top.keys() {
        match key.as_str() {
            Some("version" | "flags" | "resources" | "sharing") => {}
            _ => return Err(format!("unknown top-level key {key:?}")),
        }
    }
    if top.get("version").and_then(Yaml::as_str) != Some("v1") {
        return Err("version is not v1".into());
    }
    let Some(sharing) = top.get("sharing") else {
        return Ok(("none", 1));
    };
    let sharing = sharing.as_mapping().ok_or("sharing is not a map")?;
    let mut found = None;
    for (key, v) in sharing {
        let strategy = match key.as_str() {
            Some("timeSlicing") => "time-slicing",
            Some("mps") => "mps",
            _ => return Err(format!("unknown sharing key {key:?}")),
        };
        if found.is_some() {
            return Err("time-slicing and MPS exclude each other".into());
        }
        found = Some((strategy, replicas(v)?));
    }
    found.ok_or_else(|| "sharing is empty".into())
}

fn replicas(v: &Yaml) -> Result<u64, String> {
    let m = v.as_mapping().ok_or("a sharing method is not a map")?;
    for key in m.keys() {
        match key.as_str() {
            Some("renameByDefault" | "failRequestsGreaterThanOne" | "resources") => {}
            _ => return Err(format!("unknown key {key:?}")),
        }
    }
    let resources = m
        .get("resources")
        .and_then(Yaml::as_sequence)
        .ok_or("resources is not a list")?;
    let mut out = None;
    for r in resources {
        let r = r.as_mapping().ok_or("a resource is not a map")?;
        let name = r.get("name").and_then(Yaml::as_str).ok_or("no name")?;
        let n = r
            .get("replicas")
            .and_then(Yaml::as_u64)
            .filter(|n| *n >= 1)
            .ok_or("replicas is not a whole number ≥ 1")?;
        if name == "nvidia.com/gpu" {
            out = Some(n);
        }
    }
    out.ok_or_else(|| "no resource nvidia.com/gpu".into())
}

/// A node's status field `nvidia.com/gpu` of `field` (`capacity`, `allocatable`).
pub(crate) fn gpus(node: &Value, field: &str) -> Option<String> {
    node["status"][field]["nvidia.com/gpu"]
        .as_str()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_check() {
        let ts = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n";
        assert_eq!(check_sharing_config(ts), Ok(("time-slicing", 4)));
        let mps = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n";
        assert_eq!(check_sharing_config(mps), Ok(("mps", 2)));
        assert_eq!(check_sharing_config("version: v1\n"), Ok(("none", 1)));
        let both = "version: v1\nsharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n";
        assert!(check_sharing_config(both).is_err());
        assert!(check_sharing_config("version: v2\n").is_err());
        assert!(check_sharing_config("version: v1\nsharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 0}]\n").is_err());
        assert!(
            check_sharing_config(
                "version: v1\nsharing:\n  mps:\n    resources: [{name: other, replicas: 2}]\n"
            )
            .is_err()
        );
        assert!(check_sharing_config("version: v1\nextra: 1\n").is_err());
    }
}
