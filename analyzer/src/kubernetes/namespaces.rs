//! The namespaces' labels and annotations, read in one bounded `list` call: where the teams'
//! owners are written (`owners::Owners::from_namespaces`). A read only: no change, so no Event
//! and no audit line.
//!
//! What it does not do: decide who owns a namespace (`owners` does), page (one list; the
//! namespaces of a cluster are few), or watch.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};

use super::{Kube, KubeError};

/// One namespace's name, labels and annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceMeta {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// Every namespace with its labels and annotations (`list namespaces`).
pub fn list(k: &Kube) -> Result<Vec<NamespaceMeta>, KubeError> {
    let api: Api<Namespace> = Api::all(k.client());
    let list = k.call("list namespaces", api.list(&ListParams::default()))?;
    Ok(list
        .items
        .into_iter()
        .map(|n| NamespaceMeta {
            name: n.metadata.name.unwrap_or_default(),
            labels: n.metadata.labels.unwrap_or_default(),
            annotations: n.metadata.annotations.unwrap_or_default(),
        })
        .filter(|n| !n.name.is_empty())
        .collect())
}
