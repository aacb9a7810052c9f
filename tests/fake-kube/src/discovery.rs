//! `/version` and the legacy (unaggregated) discovery documents, so that kube-rs's
//! `apiserver_version`, `list_api_groups`, `list_core_api_versions`,
//! `list_api_group_resources` and `Discovery` see the resources this server serves: core/v1
//! nodes, pods, configmaps, namespaces, and nvidia.com/v1 clusterpolicies.
//!
//! What it does not do: no aggregated discovery (`apidiscovery.k8s.io/v2`: the `Accept`
//! header is ignored and the legacy documents are served), no OpenAPI documents.

use serde_json::{Value, json};

use crate::objects::Kind;

fn resource(kind: Kind, singular: &str) -> Value {
    json!({
        "name": kind.plural(),
        "singularName": singular,
        "namespaced": kind.namespaced(),
        "kind": kind.kind(),
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    })
}

/// The discovery document at these path segments, if any.
pub(crate) fn document(segs: &[&str]) -> Option<Value> {
    let nvidia = json!({ "groupVersion": "nvidia.com/v1", "version": "v1" });
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
        ["apis"] => json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [{ "name": "nvidia.com", "versions": [nvidia], "preferredVersion": nvidia }],
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
