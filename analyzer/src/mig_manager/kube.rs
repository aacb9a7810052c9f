//! The [`Cluster`] implementation over the Kubernetes API, with kube-rs: the usual kubeconfig
//! (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`; `--context`) or, when there is none, the
//! in-cluster service account (a CronJob: deploy/mig-manager/).
//!
//! Calls are made on a current-thread tokio runtime owned by [`KubeCluster`], each bounded by
//! the request timeout (`--request-timeout`, default `CALL_TIMEOUT`), so the synchronous
//! rollout never hangs on a silent API server. Node watches (one per node,
//! `fieldSelector=metadata.name=<node>`) are kept open in one bounded loop per node, never by
//! recursion: a stream the server ends is resumed from the last resourceVersion seen; a 410
//! Gone (the version was compacted away, as an HTTP status or an `ERROR` event in the stream)
//! re-reads the node, hands it on as an update, and watches from its current version; a 5xx,
//! 429 or transport error, an error event, or a stream that ends within a second of opening is
//! retried with exponential backoff and jitter (0.2 s doubling to 5 s), each retry said once on
//! stderr with its count, until the watch's deadline (the node timeout); then the node simply
//! gets no more updates, and the rollout times it out. ConfigMaps are replaced with the
//! resourceVersion they were read at, so a concurrent writer gives a 409 instead of being
//! overwritten.
//!
//! What it does not do: impersonation, exec credential plugins beyond what kube-rs does, or any
//! write but the ConfigMap, node labels and `spec.unschedulable`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::json;

use super::{
    CONFIG_KEY, Cluster, GpuPod, KubeError, NodeSelect, NodeView, PolicyView, StoredConfig,
};
use crate::kubernetes::configmap::ReadMaps;
use crate::kubernetes::{Connection, Kube, events, labels, policy};

/// How long the server keeps one watch open (`timeoutSeconds`) before it is resumed.
const WATCH_SECONDS: u32 = 60;

enum Item {
    Event(Box<Result<WatchEvent<Node>, kube::Error>>),
    /// The node as re-read after a 410 (not a sign that the watch works).
    Relisted(Box<Node>),
    End,
}

/// One watched node.
struct Watched {
    /// The generation of its current stream (events of older ones are dropped).
    generation: u64,
    /// The last resourceVersion seen.
    rv: String,
    /// Re-opens are retried until then.
    deadline: Instant,
    /// Consecutive failures (reset by an event from the server's stream).
    failures: u32,
    /// When the current stream was opened.
    opened: Instant,
}

/// Why a watch could not be opened.
enum OpenError {
    /// 410 Gone: the version is too old.
    Gone,
    /// Worth another try: 5xx, 429, a transport error, no answer in time.
    Retry(String),
    /// Not worth another try (401, 403, 404, a bad request).
    Fatal(KubeError),
}

/// The first backoff, its cap, and the time a stream must live to count as working.
const BACKOFF_FIRST: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const SHORT_STREAM: Duration = Duration::from_secs(1);

/// The delay before retry `n` (from 1): doubling from [`BACKOFF_FIRST`] to [`BACKOFF_MAX`], with
/// ±25% jitter from `seed` (so that many clients do not retry in step).
fn backoff(n: u32, seed: u64) -> Duration {
    let base = BACKOFF_FIRST
        .saturating_mul(1u32 << n.saturating_sub(1).min(10))
        .min(BACKOFF_MAX);
    // splitmix64 of the seed: a jitter factor in [0.75, 1.25).
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let f = 0.75 + (z >> 11) as f64 / (1u64 << 53) as f64 * 0.5;
    base.mul_f64(f)
}

/// kube-rs behind the [`Cluster`] trait.
pub struct KubeCluster {
    /// The client; its request timeout bounds each call and the opening of a watch.
    k: Kube,
    /// The ConfigMaps as last read, replaced with their other keys kept.
    read: ReadMaps,
    streams: SelectAll<BoxStream<'static, (String, u64, Item)>>,
    watched: BTreeMap<String, Watched>,
    generation: u64,
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
        config_manager: label_manager(n, super::CONFIG_LABEL),
    }
}

/// The field manager of the latest `managedFields` entry that owns label `label` (servers that
/// keep `managedFields`, as kube-apiserver does).
fn label_manager(n: &Node, label: &str) -> Option<String> {
    let key = format!("f:{label}");
    n.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1.as_ref().is_some_and(|f| {
                f.0.pointer("/f:metadata/f:labels")
                    .and_then(|l| l.get(&key))
                    .is_some()
            })
        })
        .max_by_key(|m| m.time.as_ref().map(|t| t.0))
        .and_then(|m| m.manager.clone())
}

fn is_gpu_resource(name: &str) -> bool {
    name == "nvidia.com/gpu"
        || name == "nvidia.com/gpu.shared"
        || name.starts_with("nvidia.com/mig-")
}

/// The pod as a [`GpuPod`] when it holds GPU resources (`nvidia.com/gpu`,
/// `nvidia.com/gpu.shared`, `nvidia.com/mig-*`, nonzero, in limits or requests of its containers
/// and init containers). Shared with `sharing::kube`.
pub fn gpu_pod(p: &Pod) -> Option<GpuPod> {
    let spec = p.spec.as_ref()?;
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
    (!resources.is_empty()).then(|| GpuPod {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        resources: resources
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
    })
}

/// The pods on `node`, not finished, that hold GPU resources (shared with `sharing::kube`).
pub fn gpu_pods(k: &Kube, node: &str) -> Result<Vec<GpuPod>, KubeError> {
    let api: Api<Pod> = Api::all(k.client());
    let lp = ListParams::default().fields(&format!(
        "spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
    ));
    let list = k.call(&format!("list the pods of node {node}"), api.list(&lp))?;
    Ok(list.items.iter().filter_map(gpu_pod).collect())
}

/// Set (`Some`) or remove (`None`) labels of `node` by a JSON merge patch carrying
/// `resource_version` (a 409 when the node changed since); the node as written.
pub fn patch_labels(
    k: &Kube,
    node: &str,
    labels: &[(&str, Option<&str>)],
    resource_version: &str,
) -> Result<Node, KubeError> {
    let api: Api<Node> = Api::all(k.client());
    let patch = labels::merge_patch(labels, Some(resource_version));
    k.call(
        &format!("label node {node}"),
        api.patch(node, &PatchParams::default(), &patch),
    )
}

impl KubeCluster {
    /// Connect as [`Connection`] says; permission errors name deploy/mig-manager/rbac.yaml.
    pub fn connect(conn: &Connection) -> Result<KubeCluster, KubeError> {
        Ok(KubeCluster {
            k: Kube::connect(conn, "deploy/mig-manager/rbac.yaml")?,
            read: ReadMaps::default(),
            streams: SelectAll::new(),
            watched: BTreeMap::new(),
            generation: 0,
        })
    }

    fn nodes_api(&self) -> Api<Node> {
        Api::all(self.k.client())
    }

    /// Open a watch stream of `node` from `rv` and make it the node's current one.
    fn try_open(&mut self, node: &str, rv: &str) -> Result<(), OpenError> {
        let api = self.nodes_api();
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={node}"))
            .timeout(WATCH_SECONDS);
        let what = format!("watch node {node}");
        let opened = self
            .k
            .runtime()
            .block_on(async { tokio::time::timeout(self.k.timeout(), api.watch(&wp, rv)).await });
        let s = match opened {
            Ok(Ok(s)) => s,
            Ok(Err(kube::Error::Api(st))) if st.code == 410 => return Err(OpenError::Gone),
            Ok(Err(kube::Error::Api(st))) if st.code >= 500 || st.code == 429 => {
                return Err(OpenError::Retry(format!("{} ({})", st.message, st.code)));
            }
            Ok(Err(e @ kube::Error::Api(_))) => {
                return Err(OpenError::Fatal(self.k.error(&what, e)));
            }
            Ok(Err(e)) => return Err(OpenError::Retry(e.to_string())),
            Err(_) => {
                return Err(OpenError::Retry(format!(
                    "no answer in {} s",
                    self.k.timeout().as_secs_f64()
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
        if let Some(w) = self.watched.get_mut(node) {
            w.generation = generation;
            w.rv = rv.to_string();
            w.opened = Instant::now();
        }
        Ok(())
    }

    /// After a 410 in a stream: re-read the node (handed on as an update) and watch from its
    /// version, through [`KubeCluster::rewatch`]'s loop (a 410 that repeats backs off).
    fn rewatch_gone(&mut self, node: &str) -> Result<(), KubeError> {
        let api = self.nodes_api();
        match self.k.call(&format!("read node {node}"), api.get(node)) {
            Ok(n) => {
                if let Some(w) = self.watched.get_mut(node) {
                    w.rv = n.metadata.resource_version.clone().unwrap_or_default();
                }
                let name = node.to_string();
                self.streams.push(
                    stream::once(async move { (name, 0, Item::Relisted(Box::new(n))) }).boxed(),
                );
                self.rewatch(node, Some("410 Gone: resourceVersion too old".into()), true)
            }
            Err(KubeError::Other(m)) => self.rewatch(node, Some(m), true),
            Err(e) => Err(e),
        }
    }

    /// Keep `node` watched after `why` (None: a first open): the one loop that opens, re-reads
    /// on 410 and backs off, until the watch's deadline. `failed`: `why` counts as a failure.
    fn rewatch(
        &mut self,
        node: &str,
        mut why: Option<String>,
        failed: bool,
    ) -> Result<(), KubeError> {
        if failed && let Some(w) = self.watched.get_mut(node) {
            w.failures += 1;
        }
        loop {
            let Some(w) = self.watched.get(node) else {
                return Ok(()); // unwatched meanwhile
            };
            let (rv, failures, deadline) = (w.rv.clone(), w.failures, w.deadline);
            if failures > 0 {
                let delay = backoff(failures, self.generation ^ u64::from(failures));
                let reason = why.as_deref().unwrap_or("the watch failed");
                if Instant::now() + delay >= deadline {
                    eprintln!(
                        "tessera: watch node {node}: {reason}; no retry {failures} before the node timeout"
                    );
                    // No stream: the node gets no more updates and times out.
                    self.watched.remove(node);
                    return Ok(());
                }
                eprintln!(
                    "tessera: watch node {node}: {reason}; retry {failures} in {:.1} s",
                    delay.as_secs_f64()
                );
                std::thread::sleep(delay);
            }
            match self.try_open(node, &rv) {
                Ok(()) => return Ok(()),
                Err(OpenError::Gone) => {
                    // Re-read the node, hand it on, and watch from its current version.
                    let api = self.nodes_api();
                    match self.k.call(&format!("read node {node}"), api.get(node)) {
                        Ok(n) => {
                            let generation = self.generation;
                            if let Some(w) = self.watched.get_mut(node) {
                                w.rv = n.metadata.resource_version.clone().unwrap_or_default();
                            }
                            let name = node.to_string();
                            self.streams.push(
                                stream::once(async move {
                                    (name, generation, Item::Relisted(Box::new(n)))
                                })
                                .boxed(),
                            );
                            why = Some("410 Gone: resourceVersion too old".into());
                        }
                        Err(KubeError::Other(m)) => why = Some(m),
                        Err(e) => return Err(e),
                    }
                }
                Err(OpenError::Retry(m)) => why = Some(m),
                Err(OpenError::Fatal(e)) => return Err(e),
            }
            if let Some(w) = self.watched.get_mut(node) {
                w.failures += 1;
            }
        }
    }
}

impl Cluster for KubeCluster {
    fn read_config(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StoredConfig>, KubeError> {
        Ok(self
            .read
            .read(&self.k, namespace, name)?
            .map(|(data, resource_version)| StoredConfig {
                text: data.get(CONFIG_KEY).cloned(),
                resource_version,
            }))
    }

    fn create_config(&mut self, namespace: &str, name: &str, text: &str) -> Result<(), KubeError> {
        let data = BTreeMap::from([(CONFIG_KEY.to_string(), text.to_string())]);
        ReadMaps::create(&self.k, namespace, name, data)
    }

    fn replace_config(
        &mut self,
        namespace: &str,
        name: &str,
        text: &str,
        resource_version: &str,
    ) -> Result<(), KubeError> {
        self.read
            .replace(&self.k, namespace, name, resource_version, |d| {
                d.insert(CONFIG_KEY.to_string(), text.to_string());
            })
    }

    fn nodes(&mut self, select: &NodeSelect) -> Result<Vec<NodeView>, KubeError> {
        let api = self.nodes_api();
        let lp = match select {
            NodeSelect::Selector(s) => ListParams::default().labels(s),
            NodeSelect::Names(names) if names.len() == 1 => {
                ListParams::default().fields(&format!("metadata.name={}", names[0]))
            }
            _ => ListParams::default(),
        };
        let list = self.k.call("list nodes", api.list(&lp))?;
        let mut out: Vec<NodeView> = list.items.iter().map(view).collect();
        if let NodeSelect::Names(names) = select {
            let want: BTreeSet<&String> = names.iter().collect();
            out.retain(|n| want.contains(&n.name));
        }
        Ok(out)
    }

    fn gpu_pods(&mut self, node: &str) -> Result<Vec<GpuPod>, KubeError> {
        gpu_pods(&self.k, node)
    }

    fn patch_labels(
        &mut self,
        node: &str,
        labels: &[(&str, Option<&str>)],
        resource_version: &str,
    ) -> Result<NodeView, KubeError> {
        Ok(view(&patch_labels(
            &self.k,
            node,
            labels,
            resource_version,
        )?))
    }

    fn set_unschedulable(&mut self, node: &str, unschedulable: bool) -> Result<(), KubeError> {
        let api = self.nodes_api();
        let patch: Patch<serde_json::Value> =
            Patch::Strategic(json!({ "spec": { "unschedulable": unschedulable } }));
        let what = if unschedulable { "cordon" } else { "uncordon" };
        self.k.call(
            &format!("{what} node {node}"),
            api.patch(node, &PatchParams::default(), &patch),
        )?;
        Ok(())
    }

    fn watch(
        &mut self,
        node: &str,
        resource_version: &str,
        deadline: Instant,
    ) -> Result<(), KubeError> {
        self.watched.insert(
            node.to_string(),
            Watched {
                generation: 0,
                rv: resource_version.to_string(),
                deadline,
                failures: 0,
                opened: Instant::now(),
            },
        );
        self.rewatch(node, None, false)
    }

    fn unwatch(&mut self, node: &str) {
        // Events of its streams are dropped as they come; the streams end by themselves.
        self.watched.remove(node);
    }

    fn next_update(&mut self, deadline: Instant) -> Result<Option<NodeView>, KubeError> {
        loop {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Ok(None);
            };
            let next = self
                .k
                .runtime()
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
            let Some(w) = self.watched.get_mut(&node) else {
                continue;
            };
            // A re-read node is news whatever stream it came with; stream items count only
            // from the node's current stream.
            if !matches!(item, Item::Relisted(_)) && w.generation != generation {
                continue;
            }
            match item {
                Item::Relisted(n) => return Ok(Some(view(&n))),
                Item::Event(e) => match *e {
                    Ok(WatchEvent::Added(n) | WatchEvent::Modified(n)) => {
                        let v = view(&n);
                        w.failures = 0;
                        w.rv = v.resource_version.clone();
                        return Ok(Some(v));
                    }
                    Ok(WatchEvent::Bookmark(b)) => {
                        w.failures = 0;
                        w.rv = b.metadata.resource_version.clone();
                    }
                    Ok(WatchEvent::Deleted(_)) => {
                        return Err(KubeError::Other(format!(
                            "node {node} was deleted while it changed"
                        )));
                    }
                    Ok(WatchEvent::Error(st)) if st.code == 410 => {
                        // Re-read at once: the loop backs off only when this repeats.
                        w.generation = 0;
                        self.rewatch_gone(&node)?;
                    }
                    Err(kube::Error::Api(st)) if st.code == 410 => {
                        w.generation = 0;
                        self.rewatch_gone(&node)?;
                    }
                    Ok(WatchEvent::Error(st)) => {
                        w.generation = 0;
                        self.rewatch(&node, Some(format!("{} ({})", st.message, st.code)), true)?;
                    }
                    Err(e) => {
                        w.generation = 0;
                        self.rewatch(&node, Some(e.to_string()), true)?;
                    }
                },
                Item::End => {
                    // The server ended the watch (timeoutSeconds): resume where it stopped; a
                    // stream that ended at once counts as a failure (backoff).
                    let short = w.opened.elapsed() < SHORT_STREAM;
                    w.generation = 0;
                    let why = short.then(|| "the server ended the watch at once".to_string());
                    self.rewatch(&node, why, short)?;
                }
            }
        }
    }

    fn policy(&mut self) -> Result<Option<PolicyView>, KubeError> {
        Ok(policy::read(&self.k)?.map(|p| PolicyView {
            config_name: p.text("/spec/migManager/config/name"),
            name: p.name,
        }))
    }

    fn event(&mut self, change: &events::Change<'_>) -> Result<(), KubeError> {
        events::record(&self.k, change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_manager_is_the_latest_writer_of_the_label() {
        // managedFields as kube-apiserver keeps them: the GPU Operator set the label first,
        // then `kubectl label` changed it; tessera's own entry does not own it any more.
        let n: Node = serde_json::from_value(json!({
            "metadata": {
                "name": "gpu-1",
                "labels": { "nvidia.com/mig.config": "all-1g.10gb" },
                "managedFields": [
                    { "manager": "gpu-operator", "operation": "Update", "time": "2026-11-26T10:00:00Z",
                      "fieldsType": "FieldsV1",
                      "fieldsV1": { "f:metadata": { "f:labels": { "f:nvidia.com/mig.config": {} } } } },
                    { "manager": "kubectl-label", "operation": "Update", "time": "2026-11-26T12:00:00Z",
                      "fieldsType": "FieldsV1",
                      "fieldsV1": { "f:metadata": { "f:labels": { "f:nvidia.com/mig.config": {} } } } },
                    { "manager": "kubelet", "operation": "Update", "time": "2026-11-26T13:00:00Z",
                      "fieldsType": "FieldsV1",
                      "fieldsV1": { "f:status": {} } }
                ]
            }
        }))
        .unwrap();
        let v = view(&n);
        assert_eq!(v.config_manager.as_deref(), Some("kubectl-label"));
        assert_eq!(v.config(), Some("all-1g.10gb"));
        // No managedFields (the test server keeps none): unknown.
        let bare: Node =
            serde_json::from_value(json!({ "metadata": { "name": "gpu-2" } })).unwrap();
        assert_eq!(view(&bare).config_manager, None);
    }

    #[test]
    fn backoff_doubles_to_its_cap_with_jitter() {
        for seed in [0, 1, 42, u64::MAX] {
            let d = backoff(1, seed).as_secs_f64();
            assert!((0.15..0.25).contains(&d), "{d}");
            let d = backoff(3, seed).as_secs_f64();
            assert!((0.6..1.0).contains(&d), "{d}");
            let d = backoff(30, seed).as_secs_f64();
            assert!((3.75..6.25).contains(&d), "{d}");
        }
        assert_ne!(backoff(2, 1), backoff(2, 2), "jitter");
    }
}
