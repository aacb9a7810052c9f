//! [`DevicePluginCluster`] over the Kubernetes API with kube-rs: the client of
//! `mig_manager::kube` (`connect_client`: `--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`,
//! `--context`, then the in-cluster service account) and its reading of GPU pods, every call on
//! a current-thread runtime bounded by the request timeout, so a silent API server is an error,
//! never a hang.
//!
//! ConfigMaps are replaced with the resourceVersion they were read at (a concurrent writer gives
//! 409, never a lost write), their metadata and binary data kept. The ClusterPolicy is read as a
//! dynamic object (`nvidia.com/v1` `clusterpolicies`, the first one listed).
//!
//! What it does not do: watch (the rollout polls the node), or write anything but the
//! ConfigMap's data and node labels.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PatchParams, PostParams};

use super::{ApiError, DevicePluginCluster, GpuPod, NodeView, PolicyView, StoredMap};
use crate::mig_manager::ClusterError;
use crate::mig_manager::kube::{connect_client, gpu_pod, labels_patch};

/// kube-rs behind [`DevicePluginCluster`].
pub struct KubeDevicePlugin {
    rt: tokio::runtime::Runtime,
    client: Client,
    timeout: Duration,
    /// The ConfigMaps as last read, replaced with their metadata kept.
    read: BTreeMap<(String, String), ConfigMap>,
}

fn api_error(what: &str, e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(s) => match s.code {
            409 => ApiError::Conflict(format!("{what}: {}", s.message)),
            404 => ApiError::NotFound(format!("{what}: {}", s.message)),
            401 | 403 => ApiError::Forbidden {
                what: what.to_string(),
                message: s.message.clone(),
            },
            code => ApiError::Other(format!("{what}: {} ({code} {})", s.message, s.reason)),
        },
        other => ApiError::Other(format!("{what}: {other}")),
    }
}

fn gpus(
    q: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Option<u64> {
    q?.get(super::GPU_RESOURCE)?.0.trim().parse().ok()
}

fn view(n: &Node) -> NodeView {
    let status = n.status.as_ref();
    NodeView {
        name: n.metadata.name.clone().unwrap_or_default(),
        labels: n.metadata.labels.clone().unwrap_or_default(),
        allocatable: gpus(status.and_then(|s| s.allocatable.as_ref())),
        capacity: gpus(status.and_then(|s| s.capacity.as_ref())),
    }
}

impl KubeDevicePlugin {
    /// Connect as `mig_manager::kube::connect_client` does; each call may take `timeout`.
    pub fn connect(
        kubeconfig: Option<&Path>,
        context: Option<&str>,
        timeout: Duration,
    ) -> Result<KubeDevicePlugin, ApiError> {
        let (rt, client) = connect_client(kubeconfig, context, timeout).map_err(|e| match e {
            ClusterError::Forbidden { what, message } => ApiError::Forbidden { what, message },
            other => ApiError::Other(other.to_string()),
        })?;
        Ok(KubeDevicePlugin {
            rt,
            client,
            timeout,
            read: BTreeMap::new(),
        })
    }

    /// Run one call within the request timeout.
    fn call<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ApiError> {
        match self
            .rt
            .block_on(async { tokio::time::timeout(self.timeout, f).await })
        {
            Ok(r) => r.map_err(|e| api_error(what, e)),
            Err(_) => Err(ApiError::Other(format!(
                "{what}: no answer from the API server in {} s",
                self.timeout.as_secs_f64()
            ))),
        }
    }
}

impl DevicePluginCluster for KubeDevicePlugin {
    fn policy(&mut self) -> Result<Option<PolicyView>, ApiError> {
        let ar = ApiResource {
            group: "nvidia.com".into(),
            version: "v1".into(),
            api_version: "nvidia.com/v1".into(),
            kind: "ClusterPolicy".into(),
            plural: "clusterpolicies".into(),
        };
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let text = |p: &DynamicObject, ptr: &str| {
            p.data
                .pointer(ptr)
                .and_then(|v| v.as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        match self.call("list ClusterPolicies", api.list(&ListParams::default())) {
            Ok(list) => Ok(list.items.first().map(|p| PolicyView {
                name: p.metadata.name.clone().unwrap_or_default(),
                config_name: text(p, "/spec/devicePlugin/config/name"),
                default: text(p, "/spec/devicePlugin/config/default"),
            })),
            Err(ApiError::NotFound(_) | ApiError::Forbidden { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn read_configmap(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StoredMap>, ApiError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let got = self.call(
            &format!("read ConfigMap {namespace}/{name}"),
            api.get_opt(name),
        )?;
        Ok(got.map(|cm| {
            let out = StoredMap {
                data: cm.data.clone().unwrap_or_default(),
                resource_version: cm.metadata.resource_version.clone().unwrap_or_default(),
            };
            self.read
                .insert((namespace.to_string(), name.to_string()), cm);
            out
        }))
    }

    fn create_configmap(
        &mut self,
        namespace: &str,
        name: &str,
        data: &BTreeMap<String, String>,
    ) -> Result<(), ApiError> {
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
            data: Some(data.clone()),
            ..Default::default()
        };
        self.call(
            &format!("create ConfigMap {namespace}/{name}"),
            api.create(&PostParams::default(), &cm),
        )?;
        Ok(())
    }

    fn replace_configmap(
        &mut self,
        namespace: &str,
        name: &str,
        data: &BTreeMap<String, String>,
        resource_version: &str,
    ) -> Result<(), ApiError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let mut cm = self
            .read
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| {
                ApiError::Other(format!(
                    "ConfigMap {namespace}/{name} was not read before it was replaced"
                ))
            })?;
        cm.metadata.resource_version = Some(resource_version.to_string());
        cm.data = Some(data.clone());
        self.call(
            &format!("replace ConfigMap {namespace}/{name}"),
            api.replace(name, &PostParams::default(), &cm),
        )?;
        Ok(())
    }

    fn node(&mut self, name: &str) -> Result<Option<NodeView>, ApiError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let n = self.call(&format!("read node {name}"), api.get_opt(name))?;
        Ok(n.as_ref().map(view))
    }

    fn configs_in_use(&mut self) -> Result<BTreeSet<String>, ApiError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let lp = ListParams::default().labels(super::CONFIG_LABEL);
        let list = self.call("list nodes", api.list(&lp))?;
        Ok(list
            .items
            .iter()
            .filter_map(|n| {
                n.metadata
                    .labels
                    .as_ref()?
                    .get(super::CONFIG_LABEL)
                    .cloned()
            })
            .collect())
    }

    fn gpu_pods(&mut self, node: &str) -> Result<Vec<GpuPod>, ApiError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(&format!(
            "spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
        ));
        let list = self.call(&format!("list the pods of node {node}"), api.list(&lp))?;
        Ok(list.items.iter().filter_map(gpu_pod).collect())
    }

    fn patch_labels(
        &mut self,
        node: &str,
        labels: &[(&str, Option<&str>)],
    ) -> Result<NodeView, ApiError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = labels_patch(labels);
        let n = self.call(
            &format!("label node {node}"),
            api.patch(node, &PatchParams::default(), &patch),
        )?;
        Ok(view(&n))
    }
}
