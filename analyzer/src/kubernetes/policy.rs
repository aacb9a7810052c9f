//! The GPU Operator's ClusterPolicy (`nvidia.com/v1` `clusterpolicies`), read as a dynamic
//! object: the first one listed, as the operator runs one. Each command picks its fields
//! (`spec.migManager.config.name`, `spec.devicePlugin.config.{name,default}`).
//!
//! What it does not do: write the ClusterPolicy (the commands say which field to set), or
//! fail when it cannot be read: none, or not allowed to read it, is `None`.

use kube::api::{Api, ApiResource, DynamicObject, ListParams};

use super::{Kube, KubeError};

/// The ClusterPolicy as read: its name and its whole object.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub name: String,
    pub data: serde_json::Value,
}

impl Policy {
    /// A non-empty string at JSON pointer `ptr` (e.g. `/spec/devicePlugin/config/name`).
    pub fn text(&self, ptr: &str) -> Option<String> {
        self.data
            .pointer(ptr)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    }
}

/// The first ClusterPolicy, `None` when there is none or it may not be read (404, 401, 403).
pub fn read(k: &Kube) -> Result<Option<Policy>, KubeError> {
    let ar = ApiResource {
        group: "nvidia.com".into(),
        version: "v1".into(),
        api_version: "nvidia.com/v1".into(),
        kind: "ClusterPolicy".into(),
        plural: "clusterpolicies".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(k.client(), &ar);
    match k.call("list ClusterPolicies", api.list(&ListParams::default())) {
        Ok(list) => Ok(list.items.first().map(|p| Policy {
            name: p.metadata.name.clone().unwrap_or_default(),
            data: p.data.clone(),
        })),
        Err(KubeError::NotFound(_) | KubeError::Forbidden { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}
