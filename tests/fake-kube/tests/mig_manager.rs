//! The scripted mig-manager, driven the way `tessera mig apply --via mig-manager` drives it: a
//! merge patch of `nvidia.com/mig.config` through kube-rs, then the state label.

use std::time::Duration;

use fake_kube::{Behaviour, FakeKube};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::support::{client, eventually};

const STATE: &str = "nvidia.com/mig.config.state";
const PLUGIN: &str = "nvidia.com/gpu.deploy.device-plugin";

const FILE: &str = "version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        1g.10gb: 7
";

fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

/// A server with mig-manager on `gpu-1` (config `all-disabled`, state `success`, device plugin
/// deployed) and the ConfigMap holding [`FILE`].
fn cluster() -> FakeKube {
    let kube = FakeKube::start();
    kube.set_mig_step_delay(Duration::from_millis(30));
    kube.add_node(
        "gpu-1",
        &[
            ("nvidia.com/gpu.deploy.mig-manager", "true"),
            (PLUGIN, "true"),
            ("nvidia.com/mig.config", "all-disabled"),
            (STATE, "success"),
        ],
    );
    kube.put_configmap(
        "gpu-operator",
        "custom-mig-config",
        &[("config.yaml", FILE)],
    );
    kube
}

async fn set_config(kube: &FakeKube, config: &str) -> Api<Node> {
    let nodes: Api<Node> = Api::all(client(kube).await);
    let patch = json!({"metadata": {"labels": {"nvidia.com/mig.config": config}}});
    nodes
        .patch("gpu-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    nodes
}

fn state_is(kube: &FakeKube, want: &str) -> Option<()> {
    (kube.node_labels("gpu-1").get(STATE).map(String::as_str) == Some(want)).then_some(())
}

#[tokio::test]
async fn success_goes_pending_then_success_with_the_plugin_paused_meanwhile() {
    let kube = cluster();
    let nodes: Api<Node> = Api::all(client(&kube).await);
    let from = kube.resource_version().to_string();
    let mut events = nodes
        .watch(&WatchParams::default().fields("metadata.name=gpu-1"), &from)
        .await
        .unwrap()
        .boxed();
    set_config(&kube, "all-1g.10gb").await;

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let e = tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .unwrap()
            .unwrap();
        let Some(WatchEvent::Modified(n)) = e else {
            panic!("{e:?}")
        };
        let labels = n.metadata.labels.unwrap();
        seen.push((labels.get(STATE).cloned(), labels.get(PLUGIN).cloned()));
    }
    assert_eq!(
        seen,
        [
            (s("success"), s("true")), // the label change itself
            (s("pending"), s("paused-for-mig-change")),
            (s("success"), s("true")),
        ]
    );
    assert_eq!(
        kube.state_history("gpu-1"),
        [s("success"), s("pending"), s("success")]
    );
    assert_eq!(
        kube.label_history("gpu-1"),
        [s("all-disabled"), s("all-1g.10gb")]
    );
}

#[tokio::test]
async fn failed_and_reboot_scripts() {
    let kube = cluster();
    kube.script("gpu-1", "all-1g.10gb", Behaviour::Failed);
    set_config(&kube, "all-1g.10gb").await;
    eventually(5, "failed", || state_is(&kube, "failed")).await;
    assert_eq!(
        kube.state_history("gpu-1"),
        [s("success"), s("pending"), s("failed")]
    );
    assert_eq!(
        kube.node_labels("gpu-1")[PLUGIN],
        "true",
        "unpaused after failing"
    );

    kube.script("gpu-1", "all-disabled", Behaviour::RebootThenSuccess);
    set_config(&kube, "all-disabled").await;
    eventually(5, "success", || state_is(&kube, "success")).await;
    assert_eq!(
        kube.state_history("gpu-1")[3..],
        [s("pending"), s("rebooting"), s("success")]
    );
}

#[tokio::test]
async fn stuck_pending_stays_pending_with_the_plugin_paused() {
    let kube = cluster();
    kube.script("gpu-1", "all-1g.10gb", Behaviour::StuckPending);
    set_config(&kube, "all-1g.10gb").await;
    eventually(5, "pending", || state_is(&kube, "pending")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(kube.state_history("gpu-1"), [s("success"), s("pending")]);
    assert_eq!(kube.node_labels("gpu-1")[PLUGIN], "paused-for-mig-change");

    // A newer label change (a rollback) supersedes the stuck run.
    set_config(&kube, "all-disabled").await;
    eventually(5, "success", || state_is(&kube, "success")).await;
    assert_eq!(kube.node_labels("gpu-1")[PLUGIN], "true");
    assert_eq!(
        kube.label_history("gpu-1"),
        [s("all-disabled"), s("all-1g.10gb"), s("all-disabled")]
    );
}

#[tokio::test]
async fn a_config_missing_from_the_configmap_fails() {
    let kube = cluster();
    set_config(&kube, "tessera-gpu-1").await;
    eventually(5, "failed", || state_is(&kube, "failed")).await;
    assert_eq!(
        kube.state_history("gpu-1"),
        [s("success"), s("pending"), s("failed")]
    );

    // An invalid file fails every config, even one it names.
    kube.put_configmap(
        "gpu-operator",
        "custom-mig-config",
        &[("config.yaml", "version: v2\nmig-configs: {}\n")],
    );
    set_config(&kube, "all-disabled").await;
    eventually(5, "failed again", || {
        (kube.state_history("gpu-1").len() == 5).then_some(())
    })
    .await;
    assert_eq!(
        kube.state_history("gpu-1")[3..],
        [s("pending"), s("failed")]
    );

    // The ConfigMap the ClusterPolicy names is the one read.
    kube.put_configmap("gpu-operator", "tessera-mig", &[("config.yaml", FILE)]);
    kube.set_mig_manager_configmap("gpu-operator", "tessera-mig");
    set_config(&kube, "all-1g.10gb").await;
    eventually(5, "success", || state_is(&kube, "success")).await;
}

#[tokio::test]
async fn nodes_without_mig_manager_are_left_alone() {
    let kube = FakeKube::start();
    kube.set_mig_step_delay(Duration::from_millis(10));
    kube.add_node("gpu-1", &[]);
    kube.put_configmap(
        "gpu-operator",
        "custom-mig-config",
        &[("config.yaml", FILE)],
    );
    set_config(&kube, "all-1g.10gb").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(kube.state_history("gpu-1"), [None]);
}
