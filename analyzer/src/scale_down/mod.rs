//! `tessera scale-down` (`docs/scale-down.md`): idle workloads scaled to zero on request, and
//! put back with `--undo`.
//!
//! - [`findings`]: the findings document as scale-down reads it, filtered while it is
//!   deserialized (the data's end and the findings that count, each with its index), so a
//!   findings file is read in memory bounded by those findings;
//! - [`idle`] (pure): which pods are **idle now** — from the advisor's findings (`idle_loaded`,
//!   and `allocated_unused` of kind `unused`) attributed to a pod: every finding of the pod has
//!   a last idle span at least the required length that ends at the data's end — and the
//!   freshness rule: the data's end no older than the maximum age by the clock, not after it;
//! - [`plan`] (reads only, over the [`Workloads`] trait): each idle pod's owner through
//!   ownerReferences (ReplicaSet → Deployment, StatefulSet, KServe InferenceService; a bare pod
//!   gets nothing), the refusals (HPA or KEDA target, GitOps signs, opt-out, a pod of the
//!   workload not idle now), and the dry run with the exact `kubectl` equivalents;
//! - [`apply`]: `--yes` (annotation with the previous count, then the `/scale` subresource; for
//!   KServe one merge patch of `minReplicas` and the annotation), each workload whole or not at
//!   all, each write compare-and-swap on the state it was decided on, a write whose answer was
//!   lost read back;
//! - [`undo`]: `--undo`, each record checked against the workload's recorded history;
//! - [`journal`]: the local journal of what tessera scaled down, replaced atomically;
//! - [`kube`]: [`Workloads`] over kube-rs, every call bounded by the request timeout.
//!
//! What it does not do: delete pods, touch a workload some controller or autoscaler owns the
//! replicas of (it refuses and names the sign), or decide whether a pod is idle itself (the
//! advisor does).

pub mod apply;
pub mod findings;
pub mod idle;
pub mod journal;
pub mod kube;
pub mod plan;
pub mod undo;

use std::collections::BTreeMap;

/// The annotation recording the replicas (or KServe `minReplicas`) before tessera scaled the
/// workload to zero; `--undo` restores it.
pub const FROM_ANNOTATION: &str = "tessera.io/scaled-down-from";
/// The annotation recording when (RFC 3339 UTC).
pub const AT_ANNOTATION: &str = "tessera.io/scaled-down-at";
/// The opt-out: this label or annotation on a workload or one of its pods, with a value that is
/// not a yes ([`opts_in`]): `"false"`, `no`, `off`, `0`, `disabled`, any case, spaces around.
pub const OPT_OUT: &str = "tessera.io/scale-down";
/// The values of [`OPT_OUT`] that opt out (compared trimmed, ignoring case).
pub const OPT_OUT_VALUES: [&str; 5] = ["false", "no", "off", "0", "disabled"];
/// The values of [`OPT_OUT`] that leave a workload to tessera (compared trimmed, ignoring case).
pub const OPT_IN_VALUES: [&str; 5] = ["true", "yes", "on", "1", "enabled"];

/// Whether a value of [`OPT_OUT`] leaves the workload to tessera: one of [`OPT_IN_VALUES`]
/// (trimmed, any case). Any other value opts out: the listed no-values and, to be safe, a value
/// tessera does not understand.
pub fn opts_in(value: &str) -> bool {
    let v = value.trim();
    OPT_IN_VALUES.iter().any(|y| v.eq_ignore_ascii_case(y))
}
/// The label KServe puts on an InferenceService's pods.
pub const KSERVE_LABEL: &str = "serving.kserve.io/inferenceservice";
/// [`FROM_ANNOTATION`]'s value for a KServe `minReplicas` that was not set (KServe's default,
/// 1): `--undo` removes the field again.
pub const UNSET: &str = "unset";

/// The kinds tessera reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pod,
    ReplicaSet,
    Deployment,
    StatefulSet,
    InferenceService,
}

impl Kind {
    /// The object's `kind`.
    pub fn kind(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::InferenceService => "InferenceService",
        }
    }

    /// The object's `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Pod => "v1",
            Kind::ReplicaSet | Kind::Deployment | Kind::StatefulSet => "apps/v1",
            Kind::InferenceService => "serving.kserve.io/v1beta1",
        }
    }

    /// `kubectl`'s name of the resource (`deployment`, `inferenceservice`).
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Pod => "pod",
            Kind::ReplicaSet => "replicaset",
            Kind::Deployment => "deployment",
            Kind::StatefulSet => "statefulset",
            Kind::InferenceService => "inferenceservice",
        }
    }
}

/// One ownerReference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub controller: bool,
}

/// What tessera reads of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub owners: Vec<OwnerRef>,
    /// `spec.replicas` (Deployments, ReplicaSets, StatefulSets) or `spec.predictor.minReplicas`
    /// (InferenceServices; `None` when not set); `None` for pods.
    pub replicas: Option<i64>,
    pub resource_version: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `spec.predictor.maxReplicas` of an InferenceService (KServe requires `minReplicas` not
    /// above it); `None` for other kinds or when not set.
    pub max_replicas: Option<i64>,
    /// `status.phase` of a pod.
    pub phase: Option<String>,
}

impl Object {
    /// The controller among the ownerReferences (the first one marked, else the only one).
    pub fn controller(&self) -> Option<&OwnerRef> {
        self.owners
            .iter()
            .find(|o| o.controller)
            .or(match self.owners.as_slice() {
                [only] => Some(only),
                _ => None,
            })
    }

    /// `deployment ml/web`.
    pub fn label(&self) -> String {
        format!("{} {}/{}", self.kind.resource(), self.namespace, self.name)
    }
}

/// A HorizontalPodAutoscaler's or KEDA ScaledObject's `spec.scaleTargetRef`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleTarget {
    /// `HorizontalPodAutoscaler ml/web`.
    pub source: String,
    /// The target's `kind` (KEDA's default: `Deployment`).
    pub kind: String,
    pub name: String,
}

pub use crate::kubernetes::KubeError;

/// A `scale` subresource as written: the replicas and the object's new resourceVersion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scaled {
    pub replicas: i64,
    pub resource_version: String,
}

/// The Kubernetes API calls `scale-down` makes. [`kube::KubeWorkloads`] is the real one.
pub trait Workloads {
    /// One object, `None` when absent.
    fn get(&mut self, kind: Kind, namespace: &str, name: &str)
    -> Result<Option<Object>, KubeError>;
    /// The objects of `kind` in `namespace` (all namespaces: `None`).
    fn list(&mut self, kind: Kind, namespace: Option<&str>) -> Result<Vec<Object>, KubeError>;
    /// The scale targets of the HorizontalPodAutoscalers and KEDA ScaledObjects in `namespace`
    /// (a cluster without KEDA has no ScaledObjects).
    fn scale_targets(&mut self, namespace: &str) -> Result<Vec<ScaleTarget>, KubeError>;
    /// A JSON merge patch of the object (a `metadata.resourceVersion` in it is a precondition:
    /// [`KubeError::Conflict`] when stale); returns the object as written.
    fn patch(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Object, KubeError>;
    /// Set `spec.replicas` through the `scale` subresource (Deployments, StatefulSets), only if
    /// the object is still at `resource_version` (compare-and-swap: [`KubeError::Conflict`]
    /// when it changed since); returns the scale as written.
    fn scale(
        &mut self,
        kind: Kind,
        namespace: &str,
        name: &str,
        replicas: i64,
        resource_version: &str,
    ) -> Result<Scaled, KubeError>;
    /// Write the Kubernetes Event of a change tessera made (the audit trail,
    /// [`crate::kubernetes::events`]).
    fn event(&mut self, change: &crate::kubernetes::events::Change<'_>) -> Result<(), KubeError>;
}

/// Whether `s` is a DNS-1123 label (a namespace: at most 63 of `a-z0-9-`, alphanumeric at both
/// ends).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a DNS-1123 subdomain (an object name: at most 253, labels joined by dots).
/// Names from findings files are checked with it before they become a path segment: kube-rs puts
/// names into URLs as they are.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_1123() {
        for ok in ["web", "web-5d8f-x2", "a.b-c.d", "0"] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "..",
            "../nodes",
            "a/b",
            "Web",
            "-a",
            "a-",
            "a..b",
            "a b",
            "a\nb",
            "a%2Fb",
            &"a".repeat(254),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
        assert!(is_dns_label("team-a"));
    }

    #[test]
    fn only_a_yes_leaves_a_workload_to_tessera() {
        for yes in ["true", " YES ", "on", "1", "Enabled"] {
            assert!(opts_in(yes), "{yes:?}");
        }
        for no in ["false", " No", "OFF ", "0", "disabled", "maybe", ""] {
            assert!(!opts_in(no), "{no:?}");
        }
        assert!(!is_dns_label("team.a"));
        assert!(!is_dns_label(&"a".repeat(64)));
    }
}
