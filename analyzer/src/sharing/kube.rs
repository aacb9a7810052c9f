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

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams, PatchParams, PostParams};

use super::{DevicePluginCluster, GpuPod, KubeError, NodeView, PolicyView, StoredMap};
use crate::kubernetes::{Connection, Kube, events, labels, policy};
use crate::mig_manager::kube::gpu_pod;

/// kube-rs behind [`DevicePluginCluster`].
pub struct KubeDevicePlugin {
    k: Kube,
    /// The ConfigMaps as last read, replaced with their metadata kept.
    read: BTreeMap<(String, String), ConfigMap>,
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
        resource_version: n.metadata.resource_version.clone().unwrap_or_default(),
    }
}

impl KubeDevicePlugin {
    /// Connect as [`Connection`] says; permission errors name deploy/sharing/rbac.yaml.
    pub fn connect(conn: &Connection) -> Result<KubeDevicePlugin, KubeError> {
        Ok(KubeDevicePlugin {
            k: Kube::connect(conn, "deploy/sharing/rbac.yaml")?,
            read: BTreeMap::new(),
        })
    }
}

impl DevicePluginCluster for KubeDevicePlugin {
    fn policy(&mut self) -> Result<Option<PolicyView>, KubeError> {
        Ok(policy::read(&self.k)?.map(|p| PolicyView {
            config_name: p.text("/spec/devicePlugin/config/name"),
            default: p.text("/spec/devicePlugin/config/default"),
            name: p.name,
        }))
    }

    fn read_configmap(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StoredMap>, KubeError> {
        let api: Api<ConfigMap> = Api::namespaced(self.k.client(), namespace);
        let got = self.k.call(
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
    ) -> Result<(), KubeError> {
        let api: Api<ConfigMap> = Api::namespaced(self.k.client(), namespace);
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
        self.k.call(
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
    ) -> Result<(), KubeError> {
        let api: Api<ConfigMap> = Api::namespaced(self.k.client(), namespace);
        let mut cm = self
            .read
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| {
                KubeError::Other(format!(
                    "ConfigMap {namespace}/{name} was not read before it was replaced"
                ))
            })?;
        cm.metadata.resource_version = Some(resource_version.to_string());
        cm.data = Some(data.clone());
        self.k.call(
            &format!("replace ConfigMap {namespace}/{name}"),
            api.replace(name, &PostParams::default(), &cm),
        )?;
        Ok(())
    }

    fn node(&mut self, name: &str) -> Result<Option<NodeView>, KubeError> {
        let api: Api<Node> = Api::all(self.k.client());
        let n = self
            .k
            .call(&format!("read node {name}"), api.get_opt(name))?;
        Ok(n.as_ref().map(view))
    }

    fn configs_in_use(&mut self) -> Result<BTreeSet<String>, KubeError> {
        let api: Api<Node> = Api::all(self.k.client());
        let lp = ListParams::default().labels(super::CONFIG_LABEL);
        let list = self.k.call("list nodes", api.list(&lp))?;
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

    fn gpu_pods(&mut self, node: &str) -> Result<Vec<GpuPod>, KubeError> {
        let api: Api<Pod> = Api::all(self.k.client());
        let lp = ListParams::default().fields(&format!(
            "spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
        ));
        let list = self
            .k
            .call(&format!("list the pods of node {node}"), api.list(&lp))?;
        Ok(list.items.iter().filter_map(gpu_pod).collect())
    }

    fn patch_labels(
        &mut self,
        node: &str,
        labels: &[(&str, Option<&str>)],
        resource_version: &str,
    ) -> Result<NodeView, KubeError> {
        let api: Api<Node> = Api::all(self.k.client());
        let patch = labels::merge_patch(labels, Some(resource_version));
        let n = self.k.call(
            &format!("label node {node}"),
            api.patch(node, &PatchParams::default(), &patch),
        )?;
        Ok(view(&n))
    }

    fn event(&mut self, change: &events::Change<'_>) -> Result<(), KubeError> {
        events::record(&self.k, change)
    }
}
