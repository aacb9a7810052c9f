//! The scripted mig-manager: what NVIDIA's `nvidia-mig-manager` DaemonSet does to a node's
//! labels when `nvidia.com/mig.config` changes, on nodes labelled
//! `nvidia.com/gpu.deploy.mig-manager=true`.
//!
//! A run, each step a separate write (its own resourceVersion and watch event), a short delay
//! ([`crate::FakeKube::set_mig_step_delay`], default 80 ms) before each:
//! 1. `nvidia.com/mig.config.state=pending`, and the pause labels already on the node
//!    (`nvidia.com/gpu.deploy.{device-plugin,gpu-feature-discovery,dcgm-exporter}`) set to
//!    `paused-for-mig-change`;
//! 2. read key `config.yaml` of the ConfigMap the ClusterPolicy names
//!    ([`crate::FakeKube::set_mig_manager_configmap`]); when it is missing, not a mig-parted v1
//!    file ([`check_config`]) or lacks the config the label names: `failed`;
//! 3. otherwise the script for (node, config) ([`crate::FakeKube::script`], default
//!    [`Behaviour::Success`]): `success`, `failed`, stuck at `pending`, or `rebooting` then
//!    `success`;
//! 4. with `success` or `failed`, the paused labels go back to `true` (same write).
//!
//! A newer label change supersedes a run still in progress (its later steps are dropped), as
//! the real one restarts on the latest label. Removing the label starts nothing.
//!
//! What it does not do: it changes no GPUs, waits for no pods, does not read
//! `spec.migManager.config.default`, does not react to the label a node was created with, and
//! pauses neither `nvidia.com/gpu.deploy.{dcgm,nvsm,client}`.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use serde_yaml_ng::Value as Yaml;

use crate::Behaviour;
use crate::objects::Kind;
use crate::shared::Shared;
use crate::store::{MIG_STATE, Store, Trigger};

/// The labels paused while a change is applied.
pub(crate) const PAUSE_LABELS: [&str; 3] = [
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia.com/gpu.deploy.dcgm-exporter",
];

/// The value of a paused label.
pub(crate) const PAUSED: &str = "paused-for-mig-change";

/// Whether `trigger` is still the latest run for its node.
fn current(store: &Store, trigger: &Trigger) -> bool {
    store.mig_generation.get(&trigger.node) == Some(&trigger.generation)
        && store.get(Kind::Node, "", &trigger.node).is_some()
}

/// Sets (or removes, with None) node labels in one write.
fn set_labels(store: &mut Store, node: &str, labels: &[(&str, Option<&str>)]) {
    let labels: Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let _ = store.merge_patch(
        Kind::Node,
        "",
        node,
        &json!({ "metadata": { "labels": labels } }),
    );
}

/// One step: waits, then runs `f` under the lock when the run is still current.
async fn step<R>(
    shared: &Arc<Shared>,
    trigger: &Trigger,
    f: impl FnOnce(&mut Store) -> R,
) -> Option<R> {
    let delay = shared.lock().mig_step_delay;
    tokio::time::sleep(delay).await;
    shared.write(|s| current(s, trigger).then(|| f(s)))
}

/// Starts [`run`] on the server's runtime: the hook [`Shared::write`] calls for each trigger.
pub(crate) fn start(shared: Arc<Shared>, trigger: Trigger) {
    let handle = shared.handle.clone();
    handle.spawn(run(shared, trigger));
}

/// One mig-manager run for a label change.
async fn run(shared: Arc<Shared>, trigger: Trigger) {
    let node = trigger.node.clone();
    let Some(paused) = step(&shared, &trigger, |s| {
        let present: Vec<&'static str> = s
            .get(Kind::Node, "", &node)
            .map(|n| {
                PAUSE_LABELS
                    .into_iter()
                    .filter(|l| !n["metadata"]["labels"][*l].is_null())
                    .collect()
            })
            .unwrap_or_default();
        let mut labels = vec![(MIG_STATE, Some("pending"))];
        labels.extend(present.iter().map(|l| (*l, Some(PAUSED))));
        set_labels(s, &node, &labels);
        present
    })
    .await
    else {
        return;
    };
    let Some(outcome) = step(&shared, &trigger, |s| {
        let (ns, name) = s.mig_configmap.clone();
        let file = s
            .get(Kind::ConfigMap, &ns, &name)
            .and_then(|c| c["data"]["config.yaml"].as_str());
        let valid = file
            .is_some_and(|f| check_config(f).is_ok_and(|names| names.contains(&trigger.config)));
        if valid {
            s.scripts
                .get(&(node.clone(), trigger.config.clone()))
                .or_else(|| s.scripts.get(&(node.clone(), "*".to_string())))
                .copied()
                .unwrap_or(Behaviour::Success)
        } else {
            Behaviour::Failed
        }
    })
    .await
    else {
        return;
    };
    let finish = |state: &'static str| {
        let paused = paused.clone();
        let node = node.clone();
        move |s: &mut Store| {
            let mut labels = vec![(MIG_STATE, Some(state))];
            labels.extend(paused.iter().map(|l| (*l, Some("true"))));
            set_labels(s, &node, &labels);
        }
    };
    match outcome {
        Behaviour::StuckPending => {}
        Behaviour::Success => {
            step(&shared, &trigger, finish("success")).await;
        }
        Behaviour::Failed => {
            step(&shared, &trigger, finish("failed")).await;
        }
        Behaviour::RebootThenSuccess => {
            if step(&shared, &trigger, |s| {
                set_labels(s, &node, &[(MIG_STATE, Some("rebooting"))])
            })
            .await
            .is_some()
            {
                step(&shared, &trigger, finish("success")).await;
            }
        }
    }
}

/// Checks a mig-parted v1 file: `version: v1` and `mig-configs`, a map of config name → list of
/// entries, each with `devices` (`all` or a list of GPU indexes), `mig-enabled` (bool), and
/// optionally `mig-devices` (profile name → count) and `device-filter` (a string or a list).
/// Unknown keys are errors. Returns the config names.
pub fn check_config(text: &str) -> Result<Vec<String>, String> {
    let doc: Yaml = serde_yaml_ng::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let top = doc.as_mapping().ok_or("the file is not a map")?;
    for key in top.keys() {
        match key.as_str() {
            Some("version" | "mig-configs") => {}
            _ => return Err(format!("unknown top-level key {key:?}")),
        }
    }
    if top.get("version").and_then(Yaml::as_str) != Some("v1") {
        return Err("version is not v1".into());
    }
    let configs = top
        .get("mig-configs")
        .and_then(Yaml::as_mapping)
        .ok_or("mig-configs is not a map")?;
    let mut names = Vec::new();
    for (name, entries) in configs {
        let name = name
            .as_str()
            .ok_or("a config name is not a string")?
            .to_string();
        let entries = entries.as_sequence().ok_or(format!("{name}: not a list"))?;
        for entry in entries {
            check_entry(entry).map_err(|e| format!("{name}: {e}"))?;
        }
        names.push(name);
    }
    Ok(names)
}

fn check_entry(entry: &Yaml) -> Result<(), String> {
    let entry = entry.as_mapping().ok_or("an entry is not a map")?;
    for key in entry.keys() {
        match key.as_str() {
            Some("devices" | "mig-enabled" | "mig-devices" | "device-filter") => {}
            _ => return Err(format!("unknown key {key:?}")),
        }
    }
    match entry.get("devices") {
        Some(Yaml::String(s)) if s == "all" => {}
        Some(Yaml::Sequence(ids)) if ids.iter().all(|i| i.as_u64().is_some()) => {}
        _ => return Err("devices is neither \"all\" nor a list of GPU indexes".into()),
    }
    if !entry.get("mig-enabled").is_some_and(Yaml::is_bool) {
        return Err("mig-enabled is not a bool".into());
    }
    if let Some(devices) = entry.get("mig-devices") {
        let devices = devices.as_mapping().ok_or("mig-devices is not a map")?;
        if !devices
            .iter()
            .all(|(k, v)| k.is_string() && v.as_u64().is_some())
        {
            return Err("mig-devices is not a map of profile → count".into());
        }
    }
    match entry.get("device-filter") {
        None | Some(Yaml::String(_)) => {}
        Some(Yaml::Sequence(f)) if f.iter().all(Yaml::is_string) => {}
        Some(_) => return Err("device-filter is neither a string nor a list of strings".into()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  tessera-gpu-1:
    - device-filter: ["0x233010DE"]
      devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
    - devices: [2]
      mig-enabled: false
"#;

    #[test]
    fn a_mig_parted_file_checks() {
        assert_eq!(
            check_config(FILE).unwrap(),
            vec!["all-disabled", "tessera-gpu-1"]
        );
    }

    #[test]
    fn bad_files_fail() {
        assert!(check_config("version: v2\nmig-configs: {}\n").is_err());
        assert!(check_config("version: v1\n").is_err());
        assert!(check_config("version: v1\nmig-configs:\n  a:\n    - devices: all\n").is_err());
        assert!(
            check_config(
                "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig_enabled: true\n"
            )
            .is_err()
        );
        assert!(
            check_config(
                "version: v1\nmig-configs:\n  a:\n    - devices: [x]\n      mig-enabled: true\n"
            )
            .is_err()
        );
        assert!(
            check_config(
                "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {1g.10gb: many}\n"
            )
            .is_err()
        );
        assert!(check_config(": : :").is_err());
    }
}
