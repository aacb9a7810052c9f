//! `tessera share plan` and `tessera share apply` (docs/sharing.md): the consolidation moves of a
//! tessera plan turned into NVIDIA k8s-device-plugin sharing configs, one per node, and rolled
//! out through the GPU Operator with the care of `mig apply --via mig-manager`.
//!
//! The device plugin shares GPUs **per node**: one method (time-slicing or MPS, which exclude
//! each other) and one replica count for every GPU of the node. Its config (`version: v1`,
//! `sharing.timeSlicing` or `sharing.mps` with `resources: [{name: nvidia.com/gpu, replicas:
//! N}]`) is a key of the ConfigMap the ClusterPolicy's `spec.devicePlugin.config.name` names; a
//! node selects a key with the label `nvidia.com/device-plugin.config` (unlabelled nodes get
//! `spec.devicePlugin.config.default`). The plugin has no state label: a node is done when its
//! allocatable `nvidia.com/gpu` is GPUs × replicas and GFD's `nvidia.com/gpu.replicas` agrees.
//!
//! - [`demand`] (pure over frames): each GPU's peak memory, memory size, activity quantile and
//!   MIG mode in the plan's window, and the workloads each host GPU of the moves would run;
//! - [`choose`] (pure): per node the method and replicas, with the reasons, and the config text
//!   and name (`tessera-<method>-<replicas>-<hash>`: a changed config is a new label value);
//! - [`configmap`] (pure): the ConfigMap's data with tessera's configs added (every other key
//!   kept), created from the default, the diff, and the pruning of unused tessera keys;
//! - [`rollout`] (pure over [`DevicePluginCluster`]): dry run, disrupted pods, node by node,
//!   success by allocatable and the replicas label, restore on every way out;
//! - [`kube`]: [`DevicePluginCluster`] over kube-rs (the client of `mig_manager::kube`);
//! - [`route`] (pure): whose sharing applies to each host — the device plugin only where pods
//!   hold the moves' GPUs and no Slurm job holds a GPU of the node; Slurm's `gres/shard` and
//!   `gres/mps` lines ([`slurm`]) where jobs hold them; nothing (said) across schedulers or where
//!   the data names no holder.
//!
//! What it does not do: move pods or jobs (the consolidation itself is the scheduler's once the
//! GPUs are shared), configure Slurm (it prints the lines), edit the ClusterPolicy (it prints the
//! patch), or use the DRA driver.

pub mod choose;
pub mod configmap;
pub mod demand;
pub mod kube;
pub mod rollout;
pub mod route;
pub mod slurm;

use std::collections::BTreeMap;

pub use crate::mig_manager::GpuPod;

/// The node label that selects the device plugin's config.
pub const CONFIG_LABEL: &str = "nvidia.com/device-plugin.config";
/// GFD's label of the replicas per GPU.
pub const REPLICAS_LABEL: &str = "nvidia.com/gpu.replicas";
/// GFD's label of the node's GPU count.
pub const COUNT_LABEL: &str = "nvidia.com/gpu.count";
/// The label the GPU Operator puts on nodes where the device plugin runs.
pub const DEPLOY_LABEL: &str = "nvidia.com/gpu.deploy.device-plugin";
/// mig-manager's config label (a node in MIG mode has one other than `all-disabled`).
pub const MIG_CONFIG_LABEL: &str = "nvidia.com/mig.config";
/// The extended resource the device plugin advertises.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The prefix of the configs tessera writes (and may prune when no node uses them).
pub const CONFIG_PREFIX: &str = "tessera-";

/// What the rollout needs to know about a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `status.allocatable["nvidia.com/gpu"]`, when present and a whole number.
    pub allocatable: Option<u64>,
    /// `status.capacity["nvidia.com/gpu"]`.
    pub capacity: Option<u64>,
    /// The node object's resourceVersion when it was read.
    pub resource_version: String,
}

impl NodeView {
    /// The value of `nvidia.com/device-plugin.config`.
    pub fn config(&self) -> Option<&str> {
        self.labels.get(CONFIG_LABEL).map(String::as_str)
    }

    /// GFD's `nvidia.com/gpu.replicas`.
    pub fn replicas(&self) -> Option<u64> {
        self.labels.get(REPLICAS_LABEL).and_then(|v| v.parse().ok())
    }

    /// The physical GPUs: `nvidia.com/gpu.count`, else capacity ÷ replicas.
    pub fn gpu_count(&self) -> Option<u64> {
        if let Some(n) = self.labels.get(COUNT_LABEL).and_then(|v| v.parse().ok()) {
            return Some(n);
        }
        match (self.capacity, self.replicas()) {
            (Some(c), Some(r)) if r > 0 && c % r == 0 => Some(c / r),
            (Some(c), None) => Some(c),
            _ => None,
        }
    }

    /// Why the node is in MIG mode, when its labels say so: mig-manager's config is not
    /// `all-disabled`, GFD counts MIG devices (`nvidia.com/mig-<profile>.count`), or the product
    /// is a MIG device (`…-MIG-…`, the single strategy).
    pub fn mig_mode(&self) -> Option<String> {
        if let Some(c) = self.labels.get(MIG_CONFIG_LABEL)
            && c != "all-disabled"
        {
            return Some(format!("{MIG_CONFIG_LABEL}={c}"));
        }
        for (k, v) in &self.labels {
            if k.starts_with("nvidia.com/mig-")
                && k.ends_with(".count")
                && v.parse::<u64>().is_ok_and(|n| n > 0)
            {
                return Some(format!("{k}={v}"));
            }
        }
        match self.labels.get("nvidia.com/gpu.product") {
            Some(p) if p.contains("-MIG-") => Some(format!("nvidia.com/gpu.product={p}")),
            _ => None,
        }
    }
}

/// Where the ClusterPolicy tells the device plugin to read its config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyView {
    /// The ClusterPolicy's name.
    pub name: String,
    /// `spec.devicePlugin.config.name` (`None`: the plugin runs without a config).
    pub config_name: Option<String>,
    /// `spec.devicePlugin.config.default`: the key for nodes without the label.
    pub default: Option<String>,
}

/// A ConfigMap's data as read, with the version to replace it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMap {
    pub data: BTreeMap<String, String>,
    pub resource_version: String,
}

pub use crate::kubernetes::KubeError;

/// The Kubernetes API calls the rollout makes. [`kube::KubeDevicePlugin`] is the real one.
pub trait DevicePluginCluster {
    /// The ClusterPolicy, when one can be read (`None`: none, or not allowed to read it).
    fn policy(&mut self) -> Result<Option<PolicyView>, KubeError>;
    /// ConfigMap `namespace/name`; `None` when absent.
    fn read_configmap(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StoredMap>, KubeError>;
    /// Create ConfigMap `namespace/name` with `data` ([`KubeError::Conflict`] when it exists).
    fn create_configmap(
        &mut self,
        namespace: &str,
        name: &str,
        data: &BTreeMap<String, String>,
    ) -> Result<(), KubeError>;
    /// Replace the data of ConfigMap `namespace/name` if it is still at `resource_version`
    /// ([`KubeError::Conflict`] otherwise); its metadata is kept.
    fn replace_configmap(
        &mut self,
        namespace: &str,
        name: &str,
        data: &BTreeMap<String, String>,
        resource_version: &str,
    ) -> Result<(), KubeError>;
    /// Node `name`; `None` when absent.
    fn node(&mut self, name: &str) -> Result<Option<NodeView>, KubeError>;
    /// The values of `nvidia.com/device-plugin.config` over every node.
    fn configs_in_use(&mut self) -> Result<std::collections::BTreeSet<String>, KubeError>;
    /// Pods on `node`, not finished, that hold GPU resources.
    fn gpu_pods(&mut self, node: &str) -> Result<Vec<GpuPod>, KubeError>;
    /// Set (`Some`) or remove (`None`) labels of `node` (a JSON merge patch) if it is still at
    /// `resource_version` (409 otherwise: `crate::kubernetes::labels::write` re-reads it).
    fn patch_labels(
        &mut self,
        node: &str,
        labels: &[(&str, Option<&str>)],
        resource_version: &str,
    ) -> Result<NodeView, KubeError>;
    /// Write the Kubernetes Event of a change tessera made (the audit trail,
    /// [`crate::kubernetes::events`]).
    fn event(&mut self, change: &crate::kubernetes::events::Change<'_>) -> Result<(), KubeError>;
}

/// The node-label calls of [`DevicePluginCluster`], for [`crate::kubernetes::labels::write`].
pub struct Labels<'a>(pub &'a mut dyn DevicePluginCluster);

fn node_labels(n: NodeView) -> crate::kubernetes::labels::NodeLabels {
    crate::kubernetes::labels::NodeLabels {
        labels: n.labels,
        resource_version: n.resource_version,
    }
}

impl crate::kubernetes::labels::LabelApi for Labels<'_> {
    fn read_labels(
        &mut self,
        node: &str,
    ) -> Result<Option<crate::kubernetes::labels::NodeLabels>, KubeError> {
        Ok(self.0.node(node)?.map(node_labels))
    }

    fn patch_labels_at(
        &mut self,
        node: &str,
        labels: &[(&str, Option<&str>)],
        resource_version: &str,
    ) -> Result<crate::kubernetes::labels::NodeLabels, KubeError> {
        self.0
            .patch_labels(node, labels, resource_version)
            .map(node_labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: &[(&str, &str)], capacity: Option<u64>) -> NodeView {
        NodeView {
            name: "n".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            allocatable: capacity,
            capacity,
            resource_version: String::new(),
        }
    }

    #[test]
    fn mig_mode_from_each_sign() {
        assert_eq!(
            node(&[(MIG_CONFIG_LABEL, "all-disabled")], None).mig_mode(),
            None
        );
        assert!(
            node(&[(MIG_CONFIG_LABEL, "all-1g.10gb")], None)
                .mig_mode()
                .unwrap()
                .contains("all-1g.10gb")
        );
        assert!(
            node(&[("nvidia.com/mig-1g.10gb.count", "7")], None)
                .mig_mode()
                .is_some()
        );
        assert_eq!(
            node(&[("nvidia.com/mig-1g.10gb.count", "0")], None).mig_mode(),
            None
        );
        assert!(
            node(
                &[(
                    "nvidia.com/gpu.product",
                    "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
                )],
                None
            )
            .mig_mode()
            .is_some()
        );
        assert_eq!(
            node(&[("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3")], None).mig_mode(),
            None
        );
    }

    #[test]
    fn gpu_count_from_the_label_else_capacity() {
        assert_eq!(node(&[(COUNT_LABEL, "4")], Some(12)).gpu_count(), Some(4));
        assert_eq!(
            node(&[(REPLICAS_LABEL, "3")], Some(12)).gpu_count(),
            Some(4)
        );
        assert_eq!(node(&[(REPLICAS_LABEL, "5")], Some(12)).gpu_count(), None);
        assert_eq!(node(&[], Some(2)).gpu_count(), Some(2));
        assert_eq!(node(&[], None).gpu_count(), None);
    }
}
