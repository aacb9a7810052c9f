//! Kueue's objects through the one Kubernetes layer: whether the cluster serves Kueue's API
//! (`kueue.x-k8s.io/v1beta2` in discovery), and bounded get, list, create, replace (with the
//! resourceVersion it was decided on) and delete (with a resourceVersion precondition) of
//! ResourceFlavors, ClusterQueues and LocalQueues as dynamic objects.
//!
//! What it does not do: decide what to write or whether an object is tessera's
//! (`queues::apply` does), retry (the callers' [`super::configmap::retry_on_conflict`]), or
//! watch.

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
    Preconditions,
};

use super::{Kube, KubeError};

/// Kueue's API group and the version tessera writes.
pub const GROUP: &str = "kueue.x-k8s.io";
pub const VERSION: &str = "v1beta2";
/// The Kueue kinds tessera writes, in the order they are created (deleted in reverse).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KueueKind {
    ResourceFlavor,
    ClusterQueue,
    LocalQueue,
}

impl KueueKind {
    pub const ALL: [KueueKind; 3] = [
        KueueKind::ResourceFlavor,
        KueueKind::ClusterQueue,
        KueueKind::LocalQueue,
    ];
    pub fn kind(self) -> &'static str {
        match self {
            KueueKind::ResourceFlavor => "ResourceFlavor",
            KueueKind::ClusterQueue => "ClusterQueue",
            KueueKind::LocalQueue => "LocalQueue",
        }
    }
    pub fn plural(self) -> &'static str {
        match self {
            KueueKind::ResourceFlavor => "resourceflavors",
            KueueKind::ClusterQueue => "clusterqueues",
            KueueKind::LocalQueue => "localqueues",
        }
    }
    pub fn namespaced(self) -> bool {
        self == KueueKind::LocalQueue
    }
}

fn resource(kind: KueueKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, VERSION, kind.kind()),
        kind.plural(),
    )
}

fn api(k: &Kube, kind: KueueKind, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) if kind.namespaced() => Api::namespaced_with(k.client(), ns, &resource(kind)),
        _ => Api::all_with(k.client(), &resource(kind)),
    }
}

/// `Kind name` or `Kind namespace/name`, as messages name an object.
pub fn id(kind: KueueKind, ns: Option<&str>, name: &str) -> String {
    match ns {
        Some(ns) => format!("{} {ns}/{name}", kind.kind()),
        None => format!("{} {name}", kind.kind()),
    }
}

fn what(verb: &str, kind: KueueKind, ns: Option<&str>, name: &str) -> String {
    format!("{verb} {}", id(kind, ns, name))
}

/// Whether the API server serves Kueue's group at the version tessera writes.
pub fn served(k: &Kube) -> Result<bool, KubeError> {
    let client = k.client();
    let groups = k.call("list API groups", client.list_api_groups())?;
    Ok(groups
        .groups
        .iter()
        .any(|g| g.name == GROUP && g.versions.iter().any(|v| v.version == VERSION)))
}

/// The object, or `None` when there is none.
pub fn get(
    k: &Kube,
    kind: KueueKind,
    ns: Option<&str>,
    name: &str,
) -> Result<Option<DynamicObject>, KubeError> {
    let api = api(k, kind, ns);
    k.call(&what("get", kind, ns, name), api.get_opt(name))
}

/// Every object of `kind` (all namespaces) with these labels (`k=v,…`; empty: all).
pub fn list(k: &Kube, kind: KueueKind, selector: &str) -> Result<Vec<DynamicObject>, KubeError> {
    let api = api(k, kind, None);
    let lp = ListParams::default().labels(selector);
    let list = k.call(&format!("list {}", kind.plural()), api.list(&lp))?;
    Ok(list.items)
}

/// Create `obj`.
pub fn create(k: &Kube, kind: KueueKind, obj: &DynamicObject) -> Result<DynamicObject, KubeError> {
    let ns = obj.metadata.namespace.as_deref();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api = api(k, kind, ns);
    k.call(
        &what("create", kind, ns, &name),
        api.create(&PostParams::default(), obj),
    )
}

/// Replace `obj`; its `metadata.resourceVersion` is the version it was decided on (a 409 when
/// the object changed since).
pub fn replace(k: &Kube, kind: KueueKind, obj: &DynamicObject) -> Result<DynamicObject, KubeError> {
    let ns = obj.metadata.namespace.as_deref();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api = api(k, kind, ns);
    k.call(
        &what("update", kind, ns, &name),
        api.replace(&name, &PostParams::default(), obj),
    )
}

/// Delete the object at `resource_version` (a 409 when it changed since).
pub fn delete(
    k: &Kube,
    kind: KueueKind,
    ns: Option<&str>,
    name: &str,
    resource_version: Option<String>,
) -> Result<(), KubeError> {
    let api = api(k, kind, ns);
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version,
            uid: None,
        }),
        ..DeleteParams::default()
    };
    k.call(&what("delete", kind, ns, name), api.delete(name, &dp))
        .map(|_| ())
}
