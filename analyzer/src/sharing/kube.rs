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

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use super::{DevicePluginCluster, GpuPod, KubeError, NodeView, PolicyView, StoredMap};
use crate::kubernetes::configmap::ReadMaps;
use crate::kubernetes::{Connection, Kube, events, policy};

/// kube-rs behind [`DevicePluginCluster`].
pub struct KubeDevicePlugin {
    k: Kube,
    /// The ConfigMaps as last read, replaced with their metadata kept.
    read: ReadMaps,
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
            read: ReadMaps::default(),
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
        Ok(self
            .read
            .read(&self.k, namespace, name)?
            .map(|(data, resource_version)| StoredMap {
                data,
                resource_version,
            }))
    }

    fn create_configmap(
        &mut self,
        namespace: &str,
        name: &str,
        data: &BTreeMap<String, String>,
    ) -> Result<(), KubeError> {
        ReadMaps::create(&self.k, namespace, name, data.clone())
    }

    fn replace_configmap(
        &mut self,
        namespace: &str,
        name: &str,
        data: &BTreeMap<String, String>,
        resource_version: &str,
    ) -> Result<(), KubeError> {
        self.read
            .replace(&self.k, namespace, name, resource_version, |d| {
                *d = data.clone()
            })
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
        crate::mig_manager::kube::gpu_pods(&self.k, node)
    }

    fn patch_labels(
        &mut self,
        node: &str,
        labels: &[(&str, Option<&str>)],
        resource_version: &str,
    ) -> Result<NodeView, KubeError> {
        let n = crate::mig_manager::kube::patch_labels(&self.k, node, labels, resource_version)?;
        Ok(view(&n))
    }

    fn event(&mut self, change: &events::Change<'_>) -> Result<(), KubeError> {
        events::record(&self.k, change)
    }
}
