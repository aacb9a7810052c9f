//! The scripted device plugin, driven the way `tessera share apply` drives it: the ConfigMap the
//! ClusterPolicy names, then a merge patch of `nvidia.com/device-plugin.config` through kube-rs;
//! the node's allocatable `nvidia.com/gpu` and GFD's labels are read back through kube-rs.

use std::time::Duration;

use fake_kube::{FakeKube, Fault, PluginBehaviour};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::support::{client, eventually};

const LABEL: &str = "nvidia.com/device-plugin.config";
const TS3: &str = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 3\n";
const MPS2: &str = "version: v1\nsharing:\n  mps:\n    resources:\n      - name: nvidia.com/gpu\n        replicas: 2\n";

fn cluster() -> FakeKube {
    let kube = FakeKube::start();
    kube.set_device_plugin_delay(Duration::from_millis(20));
    kube.add_gpu_node("gpu-1", 4, &[]);
    kube.set_device_plugin_config(Some("dp"), Some("plain"));
    kube.put_configmap(
        "gpu-operator",
        "dp",
        &[
            ("plain", "version: v1\n"),
            ("ts3", TS3),
            ("mps2", MPS2),
            ("bad", "version: v9\n"),
        ],
    );
    kube
}

async fn label(kube: &FakeKube, value: Option<&str>) -> Api<Node> {
    let nodes: Api<Node> = Api::all(client(kube).await);
    let patch = json!({ "metadata": { "labels": { LABEL: value } } });
    nodes
        .patch("gpu-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    nodes
}

async fn allocatable(nodes: &Api<Node>) -> Option<String> {
    let n = nodes.get("gpu-1").await.unwrap();
    n.status?
        .allocatable?
        .get("nvidia.com/gpu")
        .map(|q| q.0.clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_is_advertised_as_gpus_times_replicas_and_the_default_on_removal() {
    let kube = cluster();
    let nodes = label(&kube, Some("ts3")).await;
    eventually(5, "12 GPUs", || {
        (kube.node_allocatable("gpu-1", "nvidia.com/gpu").as_deref() == Some("12")).then_some(())
    })
    .await;
    assert_eq!(allocatable(&nodes).await.as_deref(), Some("12"));
    eventually(5, "the labels", || {
        (kube
            .node_labels("gpu-1")
            .get("nvidia.com/gpu.replicas")
            .map(String::as_str)
            == Some("3"))
        .then_some(())
    })
    .await;
    assert_eq!(
        kube.node_labels("gpu-1")["nvidia.com/gpu.sharing-strategy"],
        "time-slicing"
    );
    // Removing the label selects the default key: no sharing.
    label(&kube, None).await;
    eventually(5, "4 GPUs", || {
        (kube.node_allocatable("gpu-1", "nvidia.com/gpu").as_deref() == Some("4")).then_some(())
    })
    .await;
    assert_eq!(kube.node_labels("gpu-1")["nvidia.com/gpu.replicas"], "1");
    assert_eq!(
        kube.device_plugin_label_history("gpu-1"),
        vec![None, Some("ts3".into()), None]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_missing_or_mps_on_mig_configs_crash_loop_and_scripts_apply() {
    for (value, mig) in [("bad", false), ("absent", false), ("mps2", true)] {
        let kube = cluster();
        if mig {
            kube.set_node_labels("gpu-1", &[("nvidia.com/mig.config", Some("all-1g.10gb"))]);
        }
        label(&kube, Some(value)).await;
        eventually(5, value, || {
            (kube.node_allocatable("gpu-1", "nvidia.com/gpu").as_deref() == Some("0")).then_some(())
        })
        .await;
        assert_eq!(
            kube.node_labels("gpu-1")["nvidia.com/gpu.replicas"],
            "1",
            "{value}"
        );
    }
    let kube = cluster();
    kube.script_device_plugin("gpu-1", "mps2", PluginBehaviour::WrongCount);
    label(&kube, Some("mps2")).await;
    eventually(5, "7 GPUs", || {
        (kube.node_allocatable("gpu-1", "nvidia.com/gpu").as_deref() == Some("7")).then_some(())
    })
    .await;
    let kube = cluster();
    kube.script_device_plugin("gpu-1", "*", PluginBehaviour::StaysOld);
    label(&kube, Some("mps2")).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        kube.node_allocatable("gpu-1", "nvidia.com/gpu").as_deref(),
        Some("4")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_goes_down_after_the_request_named() {
    let kube = cluster();
    kube.down_after(Fault {
        body_contains: Some(LABEL.into()),
        ..Fault::leader_changed("PATCH", "/api/v1/nodes/gpu-1", 1)
    });
    let nodes = label(&kube, Some("ts3")).await;
    let e = nodes.get("gpu-1").await.unwrap_err();
    assert!(e.to_string().contains("the API server is gone"), "{e}");
    // The device plugin goes on without the API.
    eventually(5, "12 GPUs", || {
        (kube.node_allocatable("gpu-1", "nvidia.com/gpu").as_deref() == Some("12")).then_some(())
    })
    .await;
}
