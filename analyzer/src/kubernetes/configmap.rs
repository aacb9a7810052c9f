//! The one retry loop of every compare-and-swap write tessera makes: a write carries the
//! resourceVersion it was decided on, a 409 (another writer got there first) reads the object
//! again and decides again, at most a few times. The ConfigMaps of `mig apply --via
//! mig-manager` and `share apply` (merge, prune) and scale-down's workload patches go through
//! it.
//!
//! [`ReadMaps`] is the one reader and writer of those ConfigMaps: it keeps each as read, so that
//! a replace carries the resourceVersion it was decided on and keeps what tessera does not write
//! (metadata, binary data, the keys the caller leaves alone).
//!
//! What it does not do: retry anything but a 409 (a write that got no answer may have been
//! applied: the callers read the object back), or merge (the callers' closures do).

use std::collections::BTreeMap;
use std::io::Write;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

use super::{Kube, KubeError};

/// The ConfigMaps as last read, by namespace and name.
#[derive(Default)]
pub struct ReadMaps(BTreeMap<(String, String), ConfigMap>);

/// A ConfigMap's string data and its resourceVersion, as read.
pub type Read = (BTreeMap<String, String>, String);

impl ReadMaps {
    /// ConfigMap `namespace/name` (`None` when absent), kept for a later [`ReadMaps::replace`].
    pub fn read(
        &mut self,
        k: &Kube,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Read>, KubeError> {
        let api: Api<ConfigMap> = Api::namespaced(k.client(), namespace);
        let got = k.call(
            &format!("read ConfigMap {namespace}/{name}"),
            api.get_opt(name),
        )?;
        Ok(got.map(|cm| {
            let out = (
                cm.data.clone().unwrap_or_default(),
                cm.metadata.resource_version.clone().unwrap_or_default(),
            );
            self.0.insert((namespace.to_string(), name.to_string()), cm);
            out
        }))
    }

    /// Create ConfigMap `namespace/name` with `data`, labelled as tessera's
    /// ([`KubeError::Conflict`] when it exists).
    pub fn create(
        k: &Kube,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) -> Result<(), KubeError> {
        let api: Api<ConfigMap> = Api::namespaced(k.client(), namespace);
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
            data: Some(data),
            ..Default::default()
        };
        k.call(
            &format!("create ConfigMap {namespace}/{name}"),
            api.create(&PostParams::default(), &cm),
        )?;
        Ok(())
    }

    /// Replace ConfigMap `namespace/name` as read, its data changed by `edit`, if it is still at
    /// `resource_version` ([`KubeError::Conflict`] otherwise).
    pub fn replace(
        &self,
        k: &Kube,
        namespace: &str,
        name: &str,
        resource_version: &str,
        edit: impl FnOnce(&mut BTreeMap<String, String>),
    ) -> Result<(), KubeError> {
        let api: Api<ConfigMap> = Api::namespaced(k.client(), namespace);
        let mut cm = self
            .0
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| {
                KubeError::Other(format!(
                    "ConfigMap {namespace}/{name} was not read before it was replaced"
                ))
            })?;
        cm.metadata.resource_version = Some(resource_version.to_string());
        edit(cm.data.get_or_insert_with(BTreeMap::new));
        k.call(
            &format!("replace ConfigMap {namespace}/{name}"),
            api.replace(name, &PostParams::default(), &cm),
        )?;
        Ok(())
    }
}

/// How many times a ConfigMap write is tried before a 409 is the answer.
pub const ATTEMPTS: u32 = 5;

/// An error that may be a 409 of the API server.
pub trait MaybeConflict {
    /// The 409's message, when it is one.
    fn conflict(&self) -> Option<&str>;
}

impl MaybeConflict for KubeError {
    fn conflict(&self) -> Option<&str> {
        match self {
            KubeError::Conflict(m) => Some(m),
            _ => None,
        }
    }
}

/// Run `attempt` up to `attempts` times while it fails with a 409; `attempt(again)` is called
/// with `again` = true after a 409, and must then read the object again before it decides and
/// writes. Each 409 is said once on `err`, naming `what`.
pub fn retry_on_conflict<T, E: MaybeConflict>(
    what: &str,
    attempts: u32,
    err: &mut dyn Write,
    mut attempt: impl FnMut(bool) -> Result<T, E>,
) -> Result<T, E> {
    let attempts = attempts.max(1);
    let mut n = 1;
    loop {
        match attempt(n > 1) {
            Err(e) if n < attempts && e.conflict().is_some() => {
                // A lost note on stderr does not change what is written.
                let _ = writeln!(
                    err,
                    "tessera: {what} changed meanwhile ({}); reading it again",
                    e.conflict().unwrap_or_default()
                );
                n += 1;
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflict_is_retried_with_a_fresh_read_and_other_errors_are_not() {
        let mut err = Vec::new();
        let mut calls = Vec::new();
        let r: Result<u32, KubeError> = retry_on_conflict("ConfigMap a/b", 5, &mut err, |again| {
            calls.push(again);
            if calls.len() < 3 {
                Err(KubeError::Conflict("rv 7".into()))
            } else {
                Ok(calls.len() as u32)
            }
        });
        assert_eq!(r, Ok(3));
        assert_eq!(calls, [false, true, true]);
        let text = String::from_utf8(err).unwrap();
        assert_eq!(
            text.matches("ConfigMap a/b changed meanwhile (rv 7)")
                .count(),
            2
        );

        let mut n = 0;
        let r: Result<(), KubeError> = retry_on_conflict("x", 5, &mut Vec::new(), |_| {
            n += 1;
            Err(KubeError::Other("timeout".into()))
        });
        assert!(matches!(r, Err(KubeError::Other(_))));
        assert_eq!(n, 1, "a lost answer is not retried blindly");

        let mut n = 0;
        let r: Result<(), KubeError> = retry_on_conflict("x", 2, &mut Vec::new(), |_| {
            n += 1;
            Err(KubeError::Conflict("again".into()))
        });
        assert!(matches!(r, Err(KubeError::Conflict(_))));
        assert_eq!(n, 2, "bounded by the attempts");
    }
}
