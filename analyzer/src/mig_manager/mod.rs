//! `tessera mig apply --via mig-manager`: MIG layouts applied on Kubernetes through the GPU
//! Operator's mig-manager instead of around it.
//!
//! mig-manager owns the GPUs' MIG layout on a GPU Operator node: it reads a mig-parted v1 file
//! from the ConfigMap that ClusterPolicy `spec.migManager.config.name` names (key `config.yaml`),
//! applies the config named by the node label `nvidia.com/mig.config`, and reports progress in
//! `nvidia.com/mig.config.state` (`pending` → `rebooting`? → `success` | `failed`). This module
//! turns a tessera plan (or a mig-parted file) into that language:
//!
//! - [`render`] (pure): each node's layout as a mig-parted config named `tessera-<label>-<hash>`,
//!   merged into the existing ConfigMap text keeping every other config (`all-disabled`, the
//!   operator's defaults), the diff to print, and which nodes' layouts change;
//! - [`rollout`] (pure over the [`Cluster`] trait): the dry run, the refusal when pods hold GPU
//!   resources on a node whose layout changes, then node by node (at most `--max-unavailable` at
//!   once) cordon, label, watch the state with a per-node timeout, and roll the label back on
//!   `failed` or a timeout;
//! - [`kube`]: the [`Cluster`] implementation over the Kubernetes API with kube-rs (kubeconfig or
//!   in-cluster config; watches resumed from their resourceVersion, re-listed on 410 Gone).
//!
//! What it does not do: touch GPUs or NVML (mig-manager does; the node-local path is
//! `tessera_core::mig::apply`), keep tessera's placements (mig-parted has none: it recreates every
//! instance of a GPU whose layout changes), drain pods (it refuses and names them), or edit the
//! ClusterPolicy (it says which field must point at the ConfigMap).

pub mod kube;
pub mod render;
pub mod rollout;

use std::collections::BTreeMap;
use std::time::Instant;

/// The node label mig-manager applies.
pub const CONFIG_LABEL: &str = "nvidia.com/mig.config";
/// The node label mig-manager reports its progress in.
pub const STATE_LABEL: &str = "nvidia.com/mig.config.state";
/// The label the GPU Operator puts on nodes where mig-manager runs.
pub const DEPLOY_LABEL: &str = "nvidia.com/gpu.deploy.mig-manager";
/// The ConfigMap key mig-manager reads.
pub const CONFIG_KEY: &str = "config.yaml";
/// The prefix of the configs tessera writes (and may prune when no node uses them).
pub const CONFIG_PREFIX: &str = "tessera-";

/// What the command needs to know about a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub unschedulable: bool,
    /// The node object's resourceVersion when it was read.
    pub resource_version: String,
    /// The field manager that last wrote `nvidia.com/mig.config` (from `managedFields`), when
    /// the server reports it.
    pub config_manager: Option<String>,
}

impl NodeView {
    /// The value of `nvidia.com/mig.config`.
    pub fn config(&self) -> Option<&str> {
        self.labels.get(CONFIG_LABEL).map(String::as_str)
    }

    /// The value of `nvidia.com/mig.config.state`.
    pub fn state(&self) -> Option<&str> {
        self.labels.get(STATE_LABEL).map(String::as_str)
    }
}

/// A pod holding GPU resources (`nvidia.com/gpu`, `nvidia.com/mig-*`) on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPod {
    pub namespace: String,
    pub name: String,
    /// `resource=quantity`, e.g. `nvidia.com/mig-1g.10gb=1`.
    pub resources: Vec<String>,
}

impl std::fmt::Display for GpuPod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pod {}/{} ({})",
            self.namespace,
            self.name,
            self.resources.join(", ")
        )
    }
}

/// A ConfigMap's `config.yaml` as read, with the version to replace it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredConfig {
    /// `None` when the ConfigMap exists without the key.
    pub text: Option<String>,
    pub resource_version: String,
}

/// Where the ClusterPolicy tells mig-manager to read its config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyView {
    /// The ClusterPolicy's name.
    pub name: String,
    /// `spec.migManager.config.name` (`None` = the operator's generated default).
    pub config_name: Option<String>,
}

pub use crate::kubernetes::KubeError;

/// The Kubernetes API calls the rollout makes. [`kube::KubeCluster`] is the real one; tests
/// also drive it against a wire-faithful fake API server.
pub trait Cluster {
    /// The `config.yaml` of ConfigMap `namespace/name`; `None` when the ConfigMap is absent.
    fn read_config(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<StoredConfig>, KubeError>;
    /// Create ConfigMap `namespace/name` with `config.yaml` = `text` ([`KubeError::Conflict`]
    /// when it exists).
    fn create_config(&mut self, namespace: &str, name: &str, text: &str) -> Result<(), KubeError>;
    /// Replace `config.yaml` of ConfigMap `namespace/name`, keeping its other keys, if it is
    /// still at `resource_version` ([`KubeError::Conflict`] otherwise).
    fn replace_config(
        &mut self,
        namespace: &str,
        name: &str,
        text: &str,
        resource_version: &str,
    ) -> Result<(), KubeError>;
    /// Nodes by name (`names`), or matching a label selector, or all.
    fn nodes(&mut self, select: &NodeSelect) -> Result<Vec<NodeView>, KubeError>;
    /// Pods on `node`, not finished, that hold GPU resources.
    fn gpu_pods(&mut self, node: &str) -> Result<Vec<GpuPod>, KubeError>;
    /// Set (`Some`) or remove (`None`) labels of `node` (a JSON merge patch) if it is still at
    /// `resource_version` (409 otherwise: `crate::kubernetes::labels::write` re-reads it); returns the node
    /// as written.
    fn patch_labels(
        &mut self,
        node: &str,
        labels: &[(&str, Option<&str>)],
        resource_version: &str,
    ) -> Result<NodeView, KubeError>;
    /// Cordon (`true`) or uncordon `node` (a strategic merge patch of `spec.unschedulable`).
    fn set_unschedulable(&mut self, node: &str, unschedulable: bool) -> Result<(), KubeError>;
    /// Start watching `node` from `resource_version` on (replacing an earlier watch of it).
    /// Until `deadline`, a watch that cannot be opened or that ends is opened again with
    /// backoff (re-reading the node on 410 Gone); past it, [`Cluster::next_update`] fails.
    fn watch(
        &mut self,
        node: &str,
        resource_version: &str,
        deadline: Instant,
    ) -> Result<(), KubeError>;
    /// Stop watching `node`.
    fn unwatch(&mut self, node: &str);
    /// The next version of a watched node, or `None` at `deadline`. Streams that end are
    /// resumed from the last version seen; a 410 Gone (a version too old) re-reads the node;
    /// errors re-opening a watch are retried with backoff until the node's watch deadline.
    fn next_update(&mut self, deadline: Instant) -> Result<Option<NodeView>, KubeError>;
    /// The ClusterPolicy, when one can be read (`None`: none, or not allowed to read it).
    fn policy(&mut self) -> Result<Option<PolicyView>, KubeError>;
    /// Write the Kubernetes Event of a change tessera made (the audit trail,
    /// [`crate::kubernetes::events`]).
    fn event(&mut self, change: &crate::kubernetes::events::Change<'_>) -> Result<(), KubeError>;
}

/// Which nodes to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeSelect {
    All,
    Names(Vec<String>),
    Selector(String),
}

/// The node-label calls of [`Cluster`], for [`crate::kubernetes::labels::write`].
pub struct Labels<'a>(pub &'a mut dyn Cluster);

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
        Ok(self
            .0
            .nodes(&NodeSelect::Names(vec![node.to_string()]))?
            .into_iter()
            .find(|n| n.name == node)
            .map(node_labels))
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
