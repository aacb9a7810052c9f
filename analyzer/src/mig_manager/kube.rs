//! The [`Cluster`] implementation over the Kubernetes API, with kube-rs: the usual kubeconfig
//! (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`; `--context`) or, when there is none, the
//! in-cluster service account (a CronJob: deploy/mig-manager/).
//!
//! Calls are made on a current-thread tokio runtime owned by [`KubeCluster`], each bounded by
//! the request timeout (`--request-timeout`, default [`CALL_TIMEOUT`]), so the synchronous rollout never hangs on a silent API server. Node watches
//! (one per node, `fieldSelector=metadata.name=<node>`) are resumed from the last
//! resourceVersion seen when the server ends them; a 410 Gone (the version was compacted away,
//! as an HTTP status or an `ERROR` event in the stream) re-reads the node and watches from its
//! current version. ConfigMaps are replaced with the resourceVersion they were read at, so a
//! concurrent writer gives a 409 instead of being overwritten.
//!
//! What it does not do: impersonation, exec credential plugins beyond what kube-rs does, or any
//! write but the ConfigMap, node labels and `spec.unschedulable`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

use super::{
    CONFIG_KEY, Cluster, ClusterError, GpuPod, NodeSelect, NodeView, PolicyView, StoredConfig,
};

/// The longest one API call (not a watch) may take, by default.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server keeps one watch open (`timeoutSeconds`) before it is resumed.
const WATCH_SECONDS: u32 = 60;

enum Item {
    Event(Box<Result<WatchEvent<Node>, kube::Error>>),
    End,
}

/// kube-rs behind the [`Cluster`] trait.
pub struct KubeCluster {
    rt: tokio::runtime::Runtime,
    client: Client,
    /// The longest one call (or the opening of a watch) may take.
    timeout: Duration,
    /// The ConfigMaps as last read, replaced with their other keys kept.
    read: BTreeMap<(String, String), ConfigMap>,
    streams: SelectAll<BoxStream<'static, (String, u64, Item)>>,
    /// Watched nodes: the generation of their current stream and the last version seen.
    watched: BTreeMap<String, (u64, String)>,
    generation: u64,
    /// Consecutive failed re-watches, per node.
    failures: BTreeMap<String, u32>,
}

fn api_error(what: &str, e: kube::Error) -> ClusterError {
    match e {
        kube::Error::Api(s) => match s.code {
            409 => ClusterError::Conflict(format!("{what}: {}", s.message)),
            404 => ClusterError::NotFound(format!("{what}: {}", s.message)),
            401 | 403 => ClusterError::Forbidden {
                what: what.to_string(),
                message: s.message.clone(),
            },
            code => ClusterError::Other(format!("{what}: {} ({code} {})", s.message, s.reason)),
        },
        other => ClusterError::Other(format!("{what}: {other}")),
    }
}

fn view(n: &Node) -> NodeView {
    NodeView {
        name: n.metadata.name.clone().unwrap_or_default(),
        labels: n.metadata.labels.clone().unwrap_or_default(),
        unschedulable: n
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        resource_version: n.metadata.resource_version.clone().unwrap_or_default(),
    }
}

fn is_gpu_resource(name: &str) -> bool {
    name == "nvidia.com/gpu"
        || name == "nvidia.com/gpu.shared"
        || name.starts_with("nvidia.com/mig-")
}

impl KubeCluster {
    /// Connect with `kubeconfig` (or the usual search: `$KUBECONFIG`, `~/.kube/config`, then the
    /// in-cluster config) and `context` (default: the current one).
    pub fn connect(
        kubeconfig: Option<&Path>,
        context: Option<&str>,
        timeout: Duration,
    ) -> Result<KubeCluster, ClusterError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ClusterError::Other(format!("cannot start the runtime: {e}")))?;
        let opts = KubeConfigOptions {
            context: context.map(str::to_string),
            ..Default::default()
        };
        let config = rt.block_on(async {
            match kubeconfig {
                Some(p) => {
                    let kc = Kubeconfig::read_from(p).map_err(|e| {
                        ClusterError::Other(format!("kubeconfig {}: {e}", p.display()))
                    })?;
                    Config::from_custom_kubeconfig(kc, &opts)
                        .await
                        .map_err(|e| ClusterError::Other(format!("kubeconfig {}: {e}", p.display())))
                }
                None if context.is_some() => Config::from_kubeconfig(&opts)
                    .await
                    .map_err(|e| ClusterError::Other(format!("kubeconfig: {e}"))),
                None => Config::infer().await.map_err(|e| {
                    ClusterError::Other(format!(
                        "no Kubernetes configuration: {e} (give --kubeconfig FILE, set KUBECONFIG, or run in a pod with a service account)"
                    ))
                }),
            }
        })?;
        let mut config = config;
        config.connect_timeout = Some(timeout.min(Duration::from_secs(10)));
        let client = {
            let _guard = rt.enter();
            Client::try_from(config)
                .map_err(|e| ClusterError::Other(format!("Kubernetes client: {e}")))?
        };
        Ok(KubeCluster {
            rt,
            client,
            timeout,
            read: BTreeMap::new(),
            streams: SelectAll::new(),
            watched: BTreeMap::new(),
            generation: 0,
            failures: BTreeMap::new(),
        })
    }

    /// Run one call within the request timeout.
    fn call<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ClusterError> {
        match self
            .rt
            .block_on(async { tokio::time::timeout(self.timeout, f).await })
        {
            Ok(r) => r.map_err(|e| api_error(what, e)),
            Err(_) => Err(ClusterError::Other(format!(
                "{what}: no answer from the API server in {} s",
                self.timeout.as_secs_f64()
            ))),
        }
    }

    fn nodes_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Open a watch stream of `node` from `rv` and make it the node's current one.
    fn open(&mut self, node: &str, rv: &str) -> Result<(), ClusterError> {
        let api = self.nodes_api();
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={node}"))
            .timeout(WATCH_SECONDS);
        let what = format!("watch node {node}");
        let opened = self
            .rt
            .block_on(async { tokio::time::timeout(self.timeout, api.watch(&wp, rv)).await });
        let s = match opened {
            Ok(Ok(s)) => s,
            Ok(Err(kube::Error::Api(st))) if st.code == 410 => return self.relist(node),
            Ok(Err(e)) => return Err(api_error(&what, e)),
            Err(_) => {
                return Err(ClusterError::Other(format!(
                    "{what}: no answer in {} s",
                    self.timeout.as_secs_f64()
                )));
            }
        };
        self.generation += 1;
        let generation = self.generation;
        let name = node.to_string();
        let end = name.clone();
        let tagged = s
            .map(move |e| (name.clone(), generation, Item::Event(Box::new(e))))
            .chain(stream::once(async move { (end, generation, Item::End) }));
        self.streams.push(tagged.boxed());
        self.watched
            .insert(node.to_string(), (generation, rv.to_string()));
        Ok(())
    }

    /// After a 410: read the node and watch from its current version. The node as read is
    /// returned by the next [`Cluster::next_update`] through a one-event stream.
    fn relist(&mut self, node: &str) -> Result<(), ClusterError> {
        let api = self.nodes_api();
        let n = self.call(&format!("read node {node}"), api.get(node))?;
        let v = view(&n);
        self.open(node, &v.resource_version)?;
        let generation = self.watched[node].0;
        let name = node.to_string();
        self.streams.push(
            stream::once(async move {
                (
                    name,
                    generation,
                    Item::Event(Box::new(Ok(WatchEvent::Modified(n)))),
                )
            })
            .boxed(),
        );
        Ok(())
    }

    fn resume(&mut self, node: &str, why: &str) -> Result<(), ClusterError> {
        let failures = self.failures.entry(node.to_string()).or_insert(0);
        *failures += 1;
        if *failures > 5 {
            return Err(ClusterError::Other(format!(
                "watch node {node}: {why} (5 times in a row)"
            )));
        }
        let rv = self
            .watched
            .get(node)
            .map(|w| w.1.clone())
            .unwrap_or_default();
        self.open(node, &rv)
    }
}

impl Cluster for KubeCluster {
    fn read_config(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StoredConfig>, ClusterError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let got = self.call(
            &format!("read ConfigMap {namespace}/{name}"),
            api.get_opt(name),
        )?;
        Ok(got.map(|cm| {
            let out = StoredConfig {
                text: cm.data.as_ref().and_then(|d| d.get(CONFIG_KEY).cloned()),
                resource_version: cm.metadata.resource_version.clone().unwrap_or_default(),
            };
            self.read
                .insert((namespace.to_string(), name.to_string()), cm);
            out
        }))
    }

    fn create_config(
        &mut self,
        namespace: &str,
        name: &str,
        text: &str,
    ) -> Result<(), ClusterError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_string(),
                    "tessera".to_string(),
                )])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(CONFIG_KEY.to_string(), text.to_string())])),
            ..Default::default()
        };
        self.call(
            &format!("create ConfigMap {namespace}/{name}"),
            api.create(&PostParams::default(), &cm),
        )?;
        Ok(())
    }

    fn replace_config(
        &mut self,
        namespace: &str,
        name: &str,
        text: &str,
        resource_version: &str,
    ) -> Result<(), ClusterError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let mut cm = self
            .read
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| {
                ClusterError::Other(format!(
                    "ConfigMap {namespace}/{name} was not read before it was replaced"
                ))
            })?;
        cm.metadata.resource_version = Some(resource_version.to_string());
        cm.data
            .get_or_insert_with(BTreeMap::new)
            .insert(CONFIG_KEY.to_string(), text.to_string());
        self.call(
            &format!("replace ConfigMap {namespace}/{name}"),
            api.replace(name, &PostParams::default(), &cm),
        )?;
        Ok(())
    }

    fn nodes(&mut self, select: &NodeSelect) -> Result<Vec<NodeView>, ClusterError> {
        let api = self.nodes_api();
        let lp = match select {
            NodeSelect::Selector(s) => ListParams::default().labels(s),
            NodeSelect::Names(names) if names.len() == 1 => {
                ListParams::default().fields(&format!("metadata.name={}", names[0]))
            }
            _ => ListParams::default(),
        };
        let list = self.call("list nodes", api.list(&lp))?;
        let mut out: Vec<NodeView> = list.items.iter().map(view).collect();
        if let NodeSelect::Names(names) = select {
            let want: BTreeSet<&String> = names.iter().collect();
            out.retain(|n| want.contains(&n.name));
        }
        Ok(out)
    }

    fn gpu_pods(&mut self, node: &str) -> Result<Vec<GpuPod>, ClusterError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(&format!(
            "spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
        ));
        let list = self.call(&format!("list the pods of node {node}"), api.list(&lp))?;
        let mut out = Vec::new();
        for p in list.items {
            let Some(spec) = &p.spec else { continue };
            let mut resources = BTreeMap::new();
            let containers = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten());
            for c in containers {
                let Some(r) = &c.resources else { continue };
                for q in [&r.limits, &r.requests].into_iter().flatten() {
                    for (k, v) in q {
                        if is_gpu_resource(k) && v.0.trim() != "0" {
                            resources.entry(k.clone()).or_insert_with(|| v.0.clone());
                        }
                    }
                }
            }
            if !resources.is_empty() {
                out.push(GpuPod {
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    name: p.metadata.name.clone().unwrap_or_default(),
                    resources: resources
                        .into_iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect(),
                });
            }
        }
        Ok(out)
    }

    fn patch_labels(
        &mut self,
        node: &str,
        labels: &[(&str, Option<&str>)],
    ) -> Result<NodeView, ClusterError> {
        let api = self.nodes_api();
        let map: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.map_or(serde_json::Value::Null, |v| json!(v)),
                )
            })
            .collect();
        let patch = Patch::Merge(json!({ "metadata": { "labels": map } }));
        let n = self.call(
            &format!("label node {node}"),
            api.patch(node, &PatchParams::default(), &patch),
        )?;
        Ok(view(&n))
    }

    fn set_unschedulable(&mut self, node: &str, unschedulable: bool) -> Result<(), ClusterError> {
        let api = self.nodes_api();
        let patch: Patch<serde_json::Value> =
            Patch::Strategic(json!({ "spec": { "unschedulable": unschedulable } }));
        let what = if unschedulable { "cordon" } else { "uncordon" };
        self.call(
            &format!("{what} node {node}"),
            api.patch(node, &PatchParams::default(), &patch),
        )?;
        Ok(())
    }

    fn watch(&mut self, node: &str, resource_version: &str) -> Result<(), ClusterError> {
        self.failures.remove(node);
        self.open(node, resource_version)
    }

    fn unwatch(&mut self, node: &str) {
        // Events of its streams are dropped as they come; the streams end by themselves.
        self.watched.remove(node);
    }

    fn next_update(&mut self, deadline: Instant) -> Result<Option<NodeView>, ClusterError> {
        loop {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Ok(None);
            };
            let next = self
                .rt
                .block_on(async { tokio::time::timeout(left, self.streams.next()).await });
            let (node, generation, item) = match next {
                Err(_) => return Ok(None),
                Ok(None) => {
                    // Nothing watched: wait out the deadline.
                    std::thread::sleep(left);
                    return Ok(None);
                }
                Ok(Some(x)) => x,
            };
            if self.watched.get(&node).map(|w| w.0) != Some(generation) {
                continue;
            }
            let item = match item {
                Item::Event(e) => Some(*e),
                Item::End => None,
            };
            match item {
                Some(Ok(WatchEvent::Added(n) | WatchEvent::Modified(n))) => {
                    let v = view(&n);
                    self.failures.remove(&node);
                    if let Some(w) = self.watched.get_mut(&node) {
                        w.1 = v.resource_version.clone();
                    }
                    return Ok(Some(v));
                }
                Some(Ok(WatchEvent::Bookmark(b))) => {
                    if let Some(w) = self.watched.get_mut(&node) {
                        w.1 = b.metadata.resource_version.clone();
                    }
                }
                Some(Ok(WatchEvent::Deleted(_))) => {
                    return Err(ClusterError::Other(format!(
                        "node {node} was deleted while it changed"
                    )));
                }
                Some(Ok(WatchEvent::Error(s))) if s.code == 410 => self.relist(&node)?,
                Some(Err(kube::Error::Api(s))) if s.code == 410 => self.relist(&node)?,
                Some(Ok(WatchEvent::Error(s))) => {
                    self.resume(&node, &format!("{} ({})", s.message, s.code))?;
                }
                Some(Err(e)) => {
                    let why = e.to_string();
                    std::thread::sleep(Duration::from_millis(200));
                    self.resume(&node, &why)?;
                }
                None => {
                    // The server ended the watch (timeoutSeconds): resume where it stopped.
                    let rv = self.watched[&node].1.clone();
                    self.open(&node, &rv)?;
                }
            }
        }
    }

    fn policy(&mut self) -> Result<Option<PolicyView>, ClusterError> {
        let ar = ApiResource {
            group: "nvidia.com".into(),
            version: "v1".into(),
            api_version: "nvidia.com/v1".into(),
            kind: "ClusterPolicy".into(),
            plural: "clusterpolicies".into(),
        };
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        match self.call("list ClusterPolicies", api.list(&ListParams::default())) {
            Ok(list) => Ok(list.items.first().map(|p| PolicyView {
                name: p.metadata.name.clone().unwrap_or_default(),
                config_name: p
                    .data
                    .pointer("/spec/migManager/config/name")
                    .and_then(|v| v.as_str())
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            })),
            Err(ClusterError::NotFound(_) | ClusterError::Forbidden { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
