//! The batch schedulers' queue objects through the one Kubernetes layer: whether the cluster
//! serves a scheduler's API (Kueue's `kueue.x-k8s.io/v1beta2`, Volcano's
//! `scheduling.volcano.sh/v1beta1`, in discovery), and bounded get, list, create, replace (with
//! the resourceVersion it was decided on) and delete (with a resourceVersion precondition) of
//! their kinds (Kueue's ResourceFlavors, ClusterQueues and LocalQueues; Volcano's Queues) as
//! dynamic objects.
//!
//! What it does not do: decide what to write or whether an object is tessera's
//! (`queues::apply` does), retry (the callers' [`super::configmap::retry_on_conflict`]), or
//! watch.

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
    Preconditions,
};

use super::{Kube, KubeError};

/// A batch scheduler whose queues tessera writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    Kueue,
    Volcano,
}

impl Scheduler {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Scheduler::Kueue => "Kueue",
            Scheduler::Volcano => "Volcano",
        }
    }
    /// Its API group.
    pub fn group(self) -> &'static str {
        match self {
            Scheduler::Kueue => "kueue.x-k8s.io",
            Scheduler::Volcano => "scheduling.volcano.sh",
        }
    }
    /// The version of its group tessera writes.
    pub fn version(self) -> &'static str {
        match self {
            Scheduler::Kueue => "v1beta2",
            Scheduler::Volcano => "v1beta1",
        }
    }
    /// The kind whose objects a window edge changes (Kueue's ClusterQueues, Volcano's Queues).
    pub fn edge_kind(self) -> QueueKind {
        match self {
            Scheduler::Kueue => QueueKind::ClusterQueue,
            Scheduler::Volcano => QueueKind::VolcanoQueue,
        }
    }
    /// Its kinds tessera writes, in the order they are created (deleted in reverse).
    pub fn kinds(self) -> &'static [QueueKind] {
        match self {
            Scheduler::Kueue => &[
                QueueKind::ResourceFlavor,
                QueueKind::ClusterQueue,
                QueueKind::LocalQueue,
            ],
            Scheduler::Volcano => &[QueueKind::VolcanoQueue],
        }
    }
}

/// A kind tessera writes: Kueue's three, Volcano's Queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QueueKind {
    ResourceFlavor,
    ClusterQueue,
    LocalQueue,
    VolcanoQueue,
}

impl QueueKind {
    pub fn scheduler(self) -> Scheduler {
        match self {
            QueueKind::VolcanoQueue => Scheduler::Volcano,
            _ => Scheduler::Kueue,
        }
    }
    pub fn kind(self) -> &'static str {
        match self {
            QueueKind::ResourceFlavor => "ResourceFlavor",
            QueueKind::ClusterQueue => "ClusterQueue",
            QueueKind::LocalQueue => "LocalQueue",
            QueueKind::VolcanoQueue => "Queue",
        }
    }
    pub fn plural(self) -> &'static str {
        match self {
            QueueKind::ResourceFlavor => "resourceflavors",
            QueueKind::ClusterQueue => "clusterqueues",
            QueueKind::LocalQueue => "localqueues",
            QueueKind::VolcanoQueue => "queues",
        }
    }
    pub fn namespaced(self) -> bool {
        self == QueueKind::LocalQueue
    }
    /// `group/version`.
    pub fn api_version(self) -> String {
        let s = self.scheduler();
        format!("{}/{}", s.group(), s.version())
    }
}

fn resource(kind: QueueKind) -> ApiResource {
    let s = kind.scheduler();
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(s.group(), s.version(), kind.kind()),
        kind.plural(),
    )
}

fn api(k: &Kube, kind: QueueKind, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) if kind.namespaced() => Api::namespaced_with(k.client(), ns, &resource(kind)),
        _ => Api::all_with(k.client(), &resource(kind)),
    }
}

/// `Kind name` or `Kind namespace/name`, as messages name an object.
pub fn id(kind: QueueKind, ns: Option<&str>, name: &str) -> String {
    match ns {
        Some(ns) => format!("{} {ns}/{name}", kind.kind()),
        None => format!("{} {name}", kind.kind()),
    }
}

fn what(verb: &str, kind: QueueKind, ns: Option<&str>, name: &str) -> String {
    format!("{verb} {}", id(kind, ns, name))
}

/// Whether the API server serves the scheduler's group at the version tessera writes.
pub fn served(k: &Kube, s: Scheduler) -> Result<bool, KubeError> {
    let client = k.client();
    let groups = k.call("list API groups", client.list_api_groups())?;
    Ok(groups
        .groups
        .iter()
        .any(|g| g.name == s.group() && g.versions.iter().any(|v| v.version == s.version())))
}

/// The object, or `None` when there is none.
pub fn get(
    k: &Kube,
    kind: QueueKind,
    ns: Option<&str>,
    name: &str,
) -> Result<Option<DynamicObject>, KubeError> {
    let api = api(k, kind, ns);
    k.call(&what("get", kind, ns, name), api.get_opt(name))
}

/// Every object of `kind` (all namespaces) with these labels (`k=v,…`; empty: all).
pub fn list(k: &Kube, kind: QueueKind, selector: &str) -> Result<Vec<DynamicObject>, KubeError> {
    let api = api(k, kind, None);
    let lp = ListParams::default().labels(selector);
    let list = k.call(&format!("list {}", kind.plural()), api.list(&lp))?;
    Ok(list.items)
}

/// Create `obj`.
pub fn create(k: &Kube, kind: QueueKind, obj: &DynamicObject) -> Result<DynamicObject, KubeError> {
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
pub fn replace(k: &Kube, kind: QueueKind, obj: &DynamicObject) -> Result<DynamicObject, KubeError> {
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
    kind: QueueKind,
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
