//! `/version` and the legacy (unaggregated) discovery documents, so that kube-rs's
//! `apiserver_version`, `list_api_groups`, `list_core_api_versions`,
//! `list_api_group_resources` and `Discovery` see the resources this server serves: core/v1
//! nodes, pods, configmaps, namespaces, nvidia.com/v1 clusterpolicies, and the optional groups
//! ([`OPTIONAL`]) while installed: `kueue.x-k8s.io` ([`crate::FakeKube::set_kueue_installed`];
//! preferred and only version `v1beta2`: clusterqueues, localqueues, resourceflavors, with
//! their short names) and `scheduling.volcano.sh` ([`crate::FakeKube::set_volcano_installed`];
//! preferred and only version `v1beta1`: queues, short names `q` and `queue-v1beta1`); an
//! optional group not installed is not listed and its paths are 404s (`crate::http`).
//!
//! What it does not do: no aggregated discovery (`apidiscovery.k8s.io/v2`: the `Accept`
//! header is ignored and the legacy documents are served), no OpenAPI documents, no Kueue
//! `v1beta1`, no Volcano `v1` or other Volcano kinds (PodGroups, Jobs), no Kueue kinds beyond
//! the three served, no `queues/status` subresource listed; the `apps`, `autoscaling`, KServe
//! and KEDA kinds are served but not listed.

use serde_json::{Value, json};

use crate::objects::{KUEUE_GROUP, Kind, VOLCANO_GROUP};

fn resource(kind: Kind, singular: &str) -> Value {
    json!({
        "name": kind.plural(),
        "singularName": singular,
        "namespaced": kind.namespaced(),
        "kind": kind.kind(),
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    })
}

/// A resource with its singular and short names.
fn with_short(kind: Kind, singular: &str, short: &[&str]) -> Value {
    let mut r = resource(kind, singular);
    r["shortNames"] = json!(short);
    r
}

/// Kueue's resources.
fn kueue_resources() -> Value {
    json!([
        with_short(Kind::ClusterQueue, "clusterqueue", &["cq"]),
        with_short(Kind::LocalQueue, "localqueue", &["queue", "queues", "lq"]),
        with_short(
            Kind::ResourceFlavor,
            "resourceflavor",
            &["flavor", "flavors", "rf"]
        ),
    ])
}

/// Volcano's resources (of `scheduling.volcano.sh/v1beta1`).
fn volcano_resources() -> Value {
    json!([with_short(
        Kind::VolcanoQueue,
        "queue",
        &["q", "queue-v1beta1"]
    )])
}

/// An optional API group: its name, its one version, its resources.
type Optional = (&'static str, &'static str, fn() -> Value);

/// The API groups served only while installed.
pub(crate) const OPTIONAL: [Optional; 2] = [
    (KUEUE_GROUP, "v1beta2", kueue_resources),
    (VOLCANO_GROUP, "v1beta1", volcano_resources),
];

/// An `APIGroup` with one version, preferred.
fn group(name: &str, version: &str) -> Value {
    let v = json!({ "groupVersion": format!("{name}/{version}"), "version": version });
    json!({ "name": name, "versions": [v], "preferredVersion": v })
}

/// The discovery document at these path segments, if any (`installed`: whether an optional
/// group is installed).
pub(crate) fn document(segs: &[&str], installed: impl Fn(&str) -> bool) -> Option<Value> {
    let optional = |g: &str| {
        OPTIONAL
            .into_iter()
            .find(|(name, _, _)| *name == g && installed(name))
    };
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
            let mut groups = vec![group("nvidia.com", "v1")];
            groups.extend(
                OPTIONAL
                    .into_iter()
                    .filter(|(name, _, _)| installed(name))
                    .map(|(name, version, _)| group(name, version)),
            );
            json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
        }
        ["apis", name] => {
            let mut g = match *name {
                "nvidia.com" => group(name, "v1"),
                _ => optional(name).map(|(name, version, _)| group(name, version))?,
            };
            g["kind"] = json!("APIGroup");
            g["apiVersion"] = json!("v1");
            g
        }
        ["apis", name, v] if optional(name).is_some_and(|(_, version, _)| version == *v) => {
            let (name, version, resources) = optional(name)?;
            json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": format!("{name}/{version}"),
                "resources": resources(),
            })
        }
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
