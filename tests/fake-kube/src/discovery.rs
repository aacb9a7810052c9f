//! `/version` and the legacy (unaggregated) discovery documents, so that kube-rs's
//! `apiserver_version`, `list_api_groups`, `list_core_api_versions`,
//! `list_api_group_resources` and `Discovery` see the resources this server serves: core/v1
//! nodes, pods, configmaps, namespaces, nvidia.com/v1 clusterpolicies, and, while Kueue is
//! installed ([`crate::FakeKube::set_kueue_installed`]), the group `kueue.x-k8s.io` (preferred
//! and only version `v1beta2`: clusterqueues, localqueues, resourceflavors, with their short
//! names); while it is not, the group is not listed and its paths are 404s.
//!
//! What it does not do: no aggregated discovery (`apidiscovery.k8s.io/v2`: the `Accept`
//! header is ignored and the legacy documents are served), no OpenAPI documents, no Kueue
//! `v1beta1` or Kueue kinds beyond the three served; the `apps`, `autoscaling`, KServe and KEDA
//! kinds are served but not listed.

use serde_json::{Value, json};

use crate::objects::{KUEUE_GROUP, Kind};

fn resource(kind: Kind, singular: &str) -> Value {
    json!({
        "name": kind.plural(),
        "singularName": singular,
        "namespaced": kind.namespaced(),
        "kind": kind.kind(),
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    })
}

/// Kueue's resources, with their short names.
fn kueue_resources() -> Value {
    let with = |kind: Kind, singular: &str, short: &[&str]| {
        let mut r = resource(kind, singular);
        r["shortNames"] = json!(short);
        r
    };
    json!([
        with(Kind::ClusterQueue, "clusterqueue", &["cq"]),
        with(Kind::LocalQueue, "localqueue", &["queue", "queues", "lq"]),
        with(
            Kind::ResourceFlavor,
            "resourceflavor",
            &["flavor", "flavors", "rf"]
        ),
    ])
}

/// The discovery document at these path segments, if any (`kueue`: whether Kueue's group is
/// installed).
pub(crate) fn document(segs: &[&str], kueue: bool) -> Option<Value> {
    let nvidia = json!({ "groupVersion": "nvidia.com/v1", "version": "v1" });
    let kueue_version = json!({ "groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2" });
    let kueue_group = json!({
        "name": KUEUE_GROUP,
        "versions": [kueue_version],
        "preferredVersion": kueue_version,
    });
    Some(match segs {
        ["version"] => json!({
            "major": "1",
            "minor": "33",
            "gitVersion": "v1.33.0-fake-kube",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24",
            "compiler": "gc",
            "platform": "linux/amd64",
        }),
        ["api"] => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1" }],
        }),
        ["apis"] => {
            let mut groups = vec![
                json!({ "name": "nvidia.com", "versions": [nvidia], "preferredVersion": nvidia }),
            ];
            if kueue {
                groups.push(kueue_group);
            }
            json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
        }
        ["apis", KUEUE_GROUP] if kueue => {
            let mut g = kueue_group;
            g["kind"] = json!("APIGroup");
            g["apiVersion"] = json!("v1");
            g
        }
        ["apis", KUEUE_GROUP, "v1beta2"] if kueue => json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "kueue.x-k8s.io/v1beta2",
            "resources": kueue_resources(),
        }),
        ["apis", "nvidia.com"] => json!({
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": "nvidia.com",
            "versions": [nvidia],
            "preferredVersion": nvidia,
        }),
        ["api", "v1"] => json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "v1",
            "resources": [
                resource(Kind::ConfigMap, "configmap"),
                resource(Kind::Namespace, "namespace"),
                resource(Kind::Node, "node"),
                resource(Kind::Pod, "pod"),
            ],
        }),
        ["apis", "nvidia.com", "v1"] => json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": "nvidia.com/v1",
            "resources": [resource(Kind::ClusterPolicy, "clusterpolicy")],
        }),
        _ => return None,
    })
}
