//! An in-process Kubernetes API test server that speaks the real API wire protocol, with a
//! scripted GPU Operator mig-manager and device plugin: for testing `tessera mig apply --via
//! mig-manager` and `tessera share apply` (the real binary, with kube-rs) without a cluster. No
//! Kubernetes API server is installable here.
//!
//! [`FakeKube::start`] serves plain HTTP on `127.0.0.1:<a free port>` from a thread of its own;
//! [`FakeKube::write_kubeconfig`] writes a kubeconfig for it. The server keeps Nodes, Pods,
//! ConfigMaps, Namespaces, the ClusterPolicy `cluster-policy`, and the workloads `tessera
//! scale-down` acts on (Deployments, ReplicaSets and StatefulSets with their `scale` subresource,
//! HorizontalPodAutoscalers, KServe InferenceServices, KEDA ScaledObjects; added with
//! [`FakeKube::put`], ownerReferences as given), Kueue's ResourceFlavors, ClusterQueues and
//! LocalQueues (`kueue.x-k8s.io/v1beta2`, served while [`FakeKube::set_kueue_installed`], by
//! default; decoded strictly and validated as Kueue's CRDs and webhooks do: module `kueue`),
//! Volcano's Queues (`scheduling.volcano.sh/v1beta1` kind `Queue`, served while
//! [`FakeKube::set_volcano_installed`], by default; decoded strictly, defaulted and validated as
//! Volcano's CRD and admission webhooks do, deletes included: module `volcano`)
//! as JSON with one global resourceVersion
//! (like etcd's revision), and serves get/list/watch/create/replace/patch/delete with
//! kube-apiserver's paths, content types, `Status` errors (404, 409 AlreadyExists and Conflict,
//! 410 Expired on stale watches, 415, 401) and chunked watch streams. Module docs:
//! `http` (routes, verbs, patch types), `watch` (streams), `mig_manager` and `device_plugin`
//! (the scripts), `late` (another client's write between two requests, writes that land late)
//! with its scripted state in `hold`, `crd` (the custom resources' schema walker: strict
//! decoding, type errors), `kueue` (Kueue's schemas; its rules in `kueue_rules`), `volcano`
//! (Volcano's Queue), `fields` (the field checks both share).
//!
//! What it does not do: no TLS, no authentication beyond one bearer token, no RBAC, no
//! admission beyond Kueue's and Volcano's, no controllers other than the scripted mig-manager and device plugin (pods do not start, nodes do
//! not report, cordon evicts nothing, a Deployment scaled to 0 keeps its pods, KServe does not
//! reconcile, no Kueue or Volcano controller: queues get no status or finalizers, no `default`
//! or `root` Volcano Queue is created), no garbage collection by ownerReferences, strategic merge patch is a merge patch, no server-side
//! apply, no JSON patch, no pagination, no protobuf.

mod crd;
mod device_plugin;
mod discovery;
mod fields;
mod hold;
mod http;
mod kueue;
mod kueue_rules;
mod late;
mod mig_manager;
mod objects;
mod query;
mod selectors;
mod server;
mod shared;
mod store;
mod volcano;
mod volcano_rules;
mod watch;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

pub use device_plugin::check_sharing_config;
pub use hold::Hold;
pub use mig_manager::check_config;

use objects::Kind;
use server::Server;
use shared::Shared;
use store::{DP_CONFIG, MIG_CONFIG};

/// What the scripted mig-manager does with one (node, config) after `pending`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Behaviour {
    /// `pending` → `success`.
    #[default]
    Success,
    /// `pending` → `failed`.
    Failed,
    /// Stays at `pending` with the pause labels paused (mig-parted before PR 484).
    StuckPending,
    /// `pending` → `rebooting` → `success` (mig-manager with `WITH_REBOOT=true`).
    RebootThenSuccess,
}

/// What the scripted device plugin does with one (node, config) it can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PluginBehaviour {
    /// Advertises `nvidia.com/gpu.count` × replicas and labels `nvidia.com/gpu.replicas`.
    #[default]
    Success,
    /// Crash-loops: allocatable `nvidia.com/gpu` becomes 0, labels unchanged.
    Never,
    /// Nothing changes: the old config stays advertised.
    StaysOld,
    /// Advertises one GPU fewer than count × replicas (a GPU unhealthy); labels right.
    WrongCount,
    /// [`PluginBehaviour::Success`] after this extra delay.
    Slow(Duration),
}

/// One request the server received (authorized or not), as logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `PATCH`, …
    pub method: String,
    /// The URL path, such as `/api/v1/nodes/gpu-1`.
    pub path: String,
    /// The raw query string (percent-encoded, as sent; kube-rs starts it with `&`).
    pub query: String,
    /// The `Content-Type` header, as sent.
    pub content_type: Option<String>,
    /// The request body (UTF-8, lossy).
    pub body: String,
}

impl Request {
    /// One decoded query parameter, such as `param("watch") == Some("true".into())`.
    pub fn param(&self, name: &str) -> Option<String> {
        query::Query::parse(&self.query)
            .get(name)
            .map(str::to_string)
    }

    /// Whether this was a watch (`GET …?watch=true`).
    pub fn is_watch(&self) -> bool {
        self.method == "GET" && matches!(self.param("watch").as_deref(), Some("true" | "1"))
    }
}

/// A scripted failure of the API server: the next `times` requests that match wait `delay`,
/// then are answered with a `Status` of `code` and `message` instead of being handled (like an
/// etcd leader change: "etcdserver: leader changed", 500); `code` 0 handles them after the
/// delay (a slow request, to order two clients' writes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// `GET`, `PATCH`, …
    pub method: String,
    /// The exact URL path, such as `/api/v1/nodes/gpu-1` (a watch of one node is a GET of
    /// `/api/v1/nodes` with `watch=true`).
    pub path: String,
    /// Only watches (`true`), only other requests (`false`), or both (`None`).
    pub watch: Option<bool>,
    /// Only requests whose body contains this text (e.g. `mig.config` for a label patch, not a
    /// cordon).
    pub body_contains: Option<String>,
    pub times: usize,
    pub code: u16,
    pub message: String,
    pub delay: std::time::Duration,
}

impl Fault {
    /// `times` × 500 "etcdserver: leader changed" for `method path`, any body, watch or not.
    pub fn leader_changed(method: &str, path: &str, times: usize) -> Fault {
        Fault {
            method: method.to_string(),
            path: path.to_string(),
            watch: None,
            body_contains: None,
            times,
            code: 500,
            message: "etcdserver: leader changed".into(),
            delay: Duration::ZERO,
        }
    }

    /// `times` requests `method path` whose body contains `body` handled only after `delay`.
    pub fn slow(method: &str, path: &str, body: &str, delay: Duration) -> Fault {
        Fault {
            body_contains: Some(body.to_string()),
            code: 0,
            delay,
            ..Fault::leader_changed(method, path, 1)
        }
    }

    fn matches(&self, r: &Request) -> bool {
        r.method == self.method
            && r.path == self.path
            && self.watch.is_none_or(|w| w == r.is_watch())
            && self
                .body_contains
                .as_deref()
                .is_none_or(|b| r.body.contains(b))
    }
}

/// The running test server; dropping it stops the server and joins its thread.
pub struct FakeKube {
    server: Server,
    token: String,
}

impl FakeKube {
    /// Starts a server on 127.0.0.1 (a free port), with an empty store, the ClusterPolicy
    /// `cluster-policy` pointing mig-manager at `gpu-operator/custom-mig-config`, and a fresh
    /// bearer token.
    pub fn start() -> FakeKube {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let token = format!("fake-kube-{:x}{:x}", nanos, std::process::id());
        let server = Server::start(token.clone());
        let kube = FakeKube { server, token };
        kube.set_mig_manager_configmap("gpu-operator", "custom-mig-config");
        kube
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.server.shared
    }

    /// The server's base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    /// The bearer token requests must carry (`Authorization: Bearer <token>`); others get a 401
    /// `Status`.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Writes a kubeconfig: cluster `fake-kube` (server [`FakeKube::url`]), user `fake-kube`
    /// (the token), context `fake-kube` (namespace `default`), the current context.
    pub fn write_kubeconfig(&self, path: &Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake-kube\n  cluster:\n    server: {url}\n\
             users:\n- name: fake-kube\n  user:\n    token: {token}\n\
             contexts:\n- name: fake-kube\n  context:\n    cluster: fake-kube\n    user: fake-kube\n    namespace: default\n\
             current-context: fake-kube\npreferences: {{}}\n",
            url = self.url(),
            token = self.token
        );
        std::fs::write(path, text)
            .unwrap_or_else(|e| panic!("fake-kube: write {}: {e}", path.display()));
    }

    /// Adds a Namespace with these labels and annotations (the teams' owners of `tessera
    /// report --owners.kubernetes`). Panics if it exists.
    pub fn add_namespace(&self, name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) {
        let map = |kv: &[(&str, &str)]| -> serde_json::Map<String, serde_json::Value> {
            kv.iter().map(|(k, v)| (k.to_string(), json!(v))).collect()
        };
        self.put(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name, "labels": map(labels), "annotations": map(annotations) },
        }));
    }

    /// Adds a Ready node with these labels. mig-manager acts on it when it carries
    /// `nvidia.com/gpu.deploy.mig-manager=true`; the `nvidia.com/mig.config` it starts with
    /// triggers nothing. Panics if it exists.
    pub fn add_node(&self, name: &str, labels: &[(&str, &str)]) {
        let node = objects::node(name, labels);
        self.shared()
            .write(|s| s.create(Kind::Node, node))
            .expect("fake-kube: add_node");
    }

    /// Adds a pod on `node` whose one container has these resource limits (and equal requests),
    /// such as `[("nvidia.com/mig-1g.10gb", "1")]`, in `phase` (`Running`, `Succeeded`, …).
    /// Panics if it exists.
    pub fn add_pod(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
        limits: &[(&str, &str)],
        phase: &str,
    ) {
        let pod = objects::pod(namespace, name, node, limits, phase);
        self.shared()
            .write(|s| s.create(Kind::Pod, pod))
            .expect("fake-kube: add_pod");
    }

    /// Creates the ConfigMap, or replaces its data (a write with a new resourceVersion).
    pub fn put_configmap(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let cm = objects::configmap(namespace, name, data);
        self.shared()
            .write(|s| match s.get(Kind::ConfigMap, namespace, name).cloned() {
                None => s.create(Kind::ConfigMap, cm),
                Some(mut current) => {
                    current["data"] = cm["data"].clone();
                    s.replace(Kind::ConfigMap, namespace, name, current, None, false)
                }
            })
            .expect("fake-kube: put_configmap");
    }

    /// The data of a ConfigMap, None when absent.
    pub fn configmap(&self, namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
        let store = self.shared().lock();
        let cm = store.get(Kind::ConfigMap, namespace, name)?;
        Some(
            cm["data"]
                .as_object()
                .map(|d| {
                    d.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default(),
        )
    }

    /// Creates any object of a kind this server knows (by its `apiVersion` and `kind`:
    /// `apps/v1` Deployment, ReplicaSet, StatefulSet; `autoscaling/v2`
    /// HorizontalPodAutoscaler; `serving.kserve.io/v1beta1` InferenceService; `keda.sh/v1alpha1`
    /// ScaledObject; `kueue.x-k8s.io/v1beta2` ResourceFlavor, ClusterQueue, LocalQueue and
    /// `scheduling.volcano.sh/v1beta1` Queue, validated and defaulted as a POST's (a Queue keeps
    /// the `status` it is given: how a test sets one); the core kinds), as a client's POST
    /// would: it gets a uid, a resourceVersion and a creation time (and `spec.replicas: 1` when
    /// an `apps` workload has none); returns it as stored. Panics on an unknown kind, if it
    /// exists, or if it is refused (a Queue whose parent is not stored, …).
    pub fn put(&self, obj: serde_json::Value) -> serde_json::Value {
        let kind = Kind::from_object(&obj).unwrap_or_else(|| {
            panic!(
                "fake-kube: put: unknown kind {} {}",
                obj["apiVersion"], obj["kind"]
            )
        });
        self.shared()
            .write(|s| s.create(kind, obj))
            .expect("fake-kube: put")
    }

    /// The stored object as JSON, None when absent. `kind` is the resource name (`nodes`,
    /// `pods`, `configmaps`, `deployments`, `inferenceservices`, `clusterqueues`, `queues`, …) or
    /// the `kind` (`ClusterQueue`, `LocalQueue`, `Queue` (Volcano's), …); `namespace` is ignored
    /// for cluster-scoped kinds.
    pub fn object(&self, kind: &str, namespace: &str, name: &str) -> Option<serde_json::Value> {
        let kind = Kind::from_name(kind)?;
        let ns = if kind.namespaced() { namespace } else { "" };
        self.shared().lock().get(kind, ns, name).cloned()
    }

    /// Every stored object of a kind (named as in [`FakeKube::object`]), in any namespace,
    /// ordered by namespace and name. Panics on an unknown kind.
    pub fn objects(&self, kind: &str) -> Vec<serde_json::Value> {
        let kind = Kind::from_name(kind)
            .unwrap_or_else(|| panic!("fake-kube: objects: unknown kind {kind}"));
        self.shared().lock().list(kind, None)
    }

    /// Installs or uninstalls Kueue (default: installed). Uninstalled, `/apis` does not list
    /// `kueue.x-k8s.io` and every path under `/apis/kueue.x-k8s.io` answers 404 NotFound "the
    /// server could not find the requested resource", as for a group whose CRDs are absent. The
    /// stored Kueue objects are kept (served again once reinstalled).
    pub fn set_kueue_installed(&self, installed: bool) {
        self.set_installed(objects::KUEUE_GROUP, installed);
    }

    /// Installs or uninstalls Volcano (default: installed), as
    /// [`FakeKube::set_kueue_installed`] does Kueue: uninstalled, `/apis` does not list
    /// `scheduling.volcano.sh` and every path under `/apis/scheduling.volcano.sh` answers 404;
    /// the stored Queues are kept.
    pub fn set_volcano_installed(&self, installed: bool) {
        self.set_installed(objects::VOLCANO_GROUP, installed);
    }

    fn set_installed(&self, group: &'static str, installed: bool) {
        let mut store = self.shared().lock();
        if installed {
            store.uninstalled.remove(group);
        } else {
            store.uninstalled.insert(group);
        }
    }

    /// Another writer: right before the next PUT or PATCH of an object of `kind` (named as in
    /// [`FakeKube::object`]: `clusterqueues`, `LocalQueue`, …) is handled, the stored object gets
    /// a new resourceVersion (nothing else changes), so that a write carrying the version it
    /// read gets 409 Conflict (a PATCH only when it carries `metadata.resourceVersion`). Once per
    /// call. Panics on an unknown kind.
    pub fn conflict_next_write(&self, kind: &str) {
        let kind = Kind::from_name(kind)
            .unwrap_or_else(|| panic!("fake-kube: conflict_next_write: unknown kind {kind}"));
        self.shared().lock().conflict_next_write.insert(kind);
    }

    /// Every Event (`events.k8s.io/v1`) written, in any namespace.
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.shared().lock().list(Kind::Event, None)
    }

    /// The labels of a node (empty when it is absent).
    pub fn node_labels(&self, name: &str) -> BTreeMap<String, String> {
        self.shared()
            .lock()
            .get(Kind::Node, "", name)
            .map(store::labels_of)
            .unwrap_or_default()
    }

    /// Whether a node is cordoned (`spec.unschedulable: true`).
    pub fn node_unschedulable(&self, name: &str) -> bool {
        self.shared()
            .lock()
            .get(Kind::Node, "", name)
            .is_some_and(|n| n["spec"]["unschedulable"].as_bool() == Some(true))
    }

    /// Sets a node's labels (None removes one) in one write, as another client would; a change of
    /// `nvidia.com/mig.config` starts mig-manager. Panics if the node is absent.
    pub fn set_node_labels(&self, name: &str, labels: &[(&str, Option<&str>)]) {
        let labels: serde_json::Map<_, _> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        self.shared()
            .write(|s| {
                s.merge_patch(
                    Kind::Node,
                    "",
                    name,
                    &json!({ "metadata": { "labels": labels } }),
                )
            })
            .expect("fake-kube: set_node_labels");
    }

    /// Points mig-manager at ConfigMap `namespace/name` (key `config.yaml`), as ClusterPolicy
    /// `spec.migManager.config.name` does; the ClusterPolicy `cluster-policy` served at
    /// `/apis/nvidia.com/v1/clusterpolicies` says `name`. Default:
    /// `gpu-operator/custom-mig-config`.
    pub fn set_mig_manager_configmap(&self, namespace: &str, name: &str) {
        let policy = objects::cluster_policy(name);
        self.shared().write(|s| {
            s.mig_configmap = (namespace.to_string(), name.to_string());
            let result = if s.get(Kind::ClusterPolicy, "", "cluster-policy").is_some() {
                let patch = json!({ "spec": { "migManager": { "config": { "name": name } } } });
                s.merge_patch(Kind::ClusterPolicy, "", "cluster-policy", &patch)
            } else {
                s.create(Kind::ClusterPolicy, policy)
            };
            result.expect("fake-kube: the ClusterPolicy");
        });
    }

    /// Scripts what mig-manager does when `node`'s `nvidia.com/mig.config` becomes `config`
    /// (default: [`Behaviour::Success`]); `config` `"*"` scripts every value not scripted by
    /// name. A config missing from the ConfigMap fails regardless.
    pub fn script(&self, node: &str, config: &str, b: Behaviour) {
        self.shared()
            .lock()
            .scripts
            .insert((node.to_string(), config.to_string()), b);
    }

    /// The delay before each mig-manager step (default 80 ms).
    pub fn set_mig_step_delay(&self, d: Duration) {
        self.shared().lock().mig_step_delay = d;
    }

    /// Adds a Ready GPU node of the GPU Operator without sharing: labels `nvidia.com/gpu.count`
    /// = `gpus`, `nvidia.com/gpu.replicas=1`, `nvidia.com/gpu.sharing-strategy=none`,
    /// `nvidia.com/gpu.deploy.device-plugin=true` and `labels`; capacity and allocatable
    /// `nvidia.com/gpu` = `gpus`. Panics if it exists.
    pub fn add_gpu_node(&self, name: &str, gpus: u32, labels: &[(&str, &str)]) {
        let count = gpus.to_string();
        let mut all = vec![
            ("nvidia.com/gpu.count", count.as_str()),
            ("nvidia.com/gpu.replicas", "1"),
            ("nvidia.com/gpu.sharing-strategy", "none"),
            ("nvidia.com/gpu.deploy.device-plugin", "true"),
        ];
        all.extend_from_slice(labels);
        let mut node = objects::node(name, &all);
        for field in ["capacity", "allocatable"] {
            node["status"][field] = json!({ "cpu": "64", "nvidia.com/gpu": count });
        }
        self.shared()
            .write(|s| s.create(Kind::Node, node))
            .expect("fake-kube: add_gpu_node");
    }

    /// A node's `status.allocatable` of `resource` (such as `nvidia.com/gpu`).
    pub fn node_allocatable(&self, name: &str, resource: &str) -> Option<String> {
        let store = self.shared().lock();
        let n = store.get(Kind::Node, "", name)?;
        if resource == "nvidia.com/gpu" {
            return device_plugin::gpus(n, "allocatable");
        }
        n["status"]["allocatable"][resource]
            .as_str()
            .map(str::to_string)
    }

    /// Points the device plugin at ConfigMap `name` in the operator's namespace (ClusterPolicy
    /// `spec.devicePlugin.config.name`) with `default` the key for unlabelled nodes (`.default`);
    /// `None` removes the field (the operator's default: no config).
    pub fn set_device_plugin_config(&self, name: Option<&str>, default: Option<&str>) {
        let patch = json!({ "spec": { "devicePlugin": { "config": { "name": name, "default": default } } } });
        self.shared()
            .write(|s| s.merge_patch(Kind::ClusterPolicy, "", "cluster-policy", &patch))
            .expect("fake-kube: the ClusterPolicy");
    }

    /// Scripts what the device plugin does when `node`'s `nvidia.com/device-plugin.config`
    /// becomes `config` (`""`: removed; `"*"`: every value not scripted by name). A config it
    /// cannot read or use crash-loops it regardless.
    pub fn script_device_plugin(&self, node: &str, config: &str, b: PluginBehaviour) {
        self.shared()
            .lock()
            .dp_scripts
            .insert((node.to_string(), config.to_string()), b);
    }

    /// The delay before the device plugin acts on a label (default 80 ms).
    pub fn set_device_plugin_delay(&self, d: Duration) {
        self.shared().lock().dp_step_delay = d;
    }

    /// Every value a node's `nvidia.com/device-plugin.config` took, in order: the value at
    /// `add_node` (None when unlabelled), then one entry per change.
    pub fn device_plugin_label_history(&self, node: &str) -> Vec<Option<String>> {
        self.shared()
            .lock()
            .dp_label_history
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    /// A node's current `nvidia.com/device-plugin.config`.
    pub fn device_plugin_config(&self, node: &str) -> Option<String> {
        self.node_labels(node).remove(DP_CONFIG)
    }

    /// The API server goes away: once a request matching `fault`'s method, path, watch and
    /// body has been handled (its `times`, `code` and `delay` are ignored), every later request
    /// is answered 500 "the API server is gone". The scripted controllers go on.
    pub fn down_after(&self, fault: Fault) {
        self.shared().lock().down_after = Some(fault);
    }

    /// Forgets the watch history: a watch from an older resourceVersion then gets a 410
    /// `Expired` ERROR event.
    pub fn compact(&self) {
        self.shared().lock().compact();
    }

    /// The next `n` watches from a resourceVersion get the 410 Expired ERROR event whatever
    /// the version (as after a restart of the API server's watch cache): a deterministic way to
    /// make a client re-list, where [`FakeKube::compact`] depends on timing.
    pub fn expire_next_watches(&self, n: usize) {
        self.shared().lock().expire_watches = n;
    }

    /// Another writer: right before the next ConfigMap PUT is handled, the stored ConfigMap gets
    /// a new resourceVersion (nothing else changes), so that PUT gets 409 Conflict.
    pub fn conflict_next_configmap_write(&self) {
        self.shared().lock().conflict_next_put = true;
    }

    /// Ends every watch opened after this call after `d` (like `timeoutSeconds`, the shorter of
    /// the two wins); clients must re-watch.
    pub fn close_watches_after(&self, d: Duration) {
        self.shared().lock().close_watches_after = Some(d);
    }

    /// Scripts a failure ([`Fault`]); faults are tried in the order added.
    pub fn fail(&self, fault: Fault) {
        self.shared().lock().faults.push(fault);
    }

    /// Writes an object as another client would (by its `apiVersion` and `kind`, as
    /// [`FakeKube::put`]): created when absent, else merged into the stored one by a JSON merge
    /// patch (a new resourceVersion); returns it as stored.
    pub fn apply(&self, obj: serde_json::Value) -> serde_json::Value {
        late::apply(self.shared(), obj)
    }

    /// Another client's writes between two of the client's requests: right before the request
    /// after the first `skip` that match `fault`'s method, path, watch and body (its `times`,
    /// `code` and `delay` are ignored) is handled, each of `objects` is written as by
    /// [`FakeKube::apply`]. Once.
    pub fn change_before(&self, fault: Fault, skip: usize, objects: Vec<serde_json::Value>) {
        self.shared()
            .lock()
            .late
            .change_before(fault, skip, objects);
    }

    /// A write that lands late: the next request matching `fault`'s method, path, watch and
    /// body (its `times`, `code` and `delay` are ignored) is held as [`Hold`] says until
    /// [`FakeKube::release`].
    pub fn hold(&self, fault: Fault, how: Hold) {
        self.shared().lock().late.hold(fault, how);
    }

    /// Releases every held request and returns once each was handled: their HTTP statuses (200,
    /// 409, …) in the order they were handled. Once per server.
    pub fn release(&self) -> Vec<u16> {
        late::release(self.shared())
    }

    /// How many requests matched `fault`'s method, path, watch and body (answered or failed).
    pub fn count(&self, fault: &Fault) -> usize {
        self.requests().iter().filter(|r| fault.matches(r)).count()
    }

    /// The global resourceVersion (that of the last write).
    pub fn resource_version(&self) -> u64 {
        self.shared().lock().rv
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared().lock().requests.clone()
    }

    /// Every value a node's `nvidia.com/mig.config` took, in order: the value at `add_node`
    /// (None when unlabelled), then one entry per change.
    pub fn label_history(&self, node: &str) -> Vec<Option<String>> {
        self.shared()
            .lock()
            .label_history
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    /// Every value a node's `nvidia.com/mig.config.state` took, in order: the value at
    /// `add_node` (None when unlabelled), then one entry per change.
    pub fn state_history(&self, node: &str) -> Vec<Option<String>> {
        self.shared()
            .lock()
            .state_history
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    /// A node's current `nvidia.com/mig.config`.
    pub fn mig_config(&self, node: &str) -> Option<String> {
        self.node_labels(node).remove(MIG_CONFIG)
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.server.stop();
    }
}
