//! Kueue's kinds (`kueue.x-k8s.io/v1beta2` ResourceFlavor, ClusterQueue, LocalQueue) admitted
//! as Kueue's CRD schemas and validating webhooks admit them, so that a client writing a
//! misspelled or invalid queue fails here as it would on a cluster.
//!
//! What it does, on every create, replace and patch (the object after patching) of these kinds:
//! - [`crate::crd::decode`] with the schemas here ([`schema`]): unknown fields (top level,
//!   `metadata`, anywhere in `spec`) are a 400 `BadRequest`, as kube-apiserver answers under
//!   `fieldValidation=Strict`: `ClusterQueue in version "v1beta2" cannot be handled as a
//!   ClusterQueue: strict decoding error: unknown field "spec.resourceGroups[0].foo"` (every
//!   unknown field, dotted paths with list indexes).
//!   Stricter than the apiserver's default (`Warn`: dropped with a warning): every write here is
//!   strict, whatever `fieldValidation` says. A ResourceFlavor has no `status` (unknown here).
//! - [`admit`]: type errors (`spec.cohortName in body must be of type string`), the CRD defaults
//!   (ClusterQueue `queueingStrategy: BestEffortFIFO`, `stopPolicy: None`, `flavorFungibility`
//!   `{whenCanBorrow: MayStopSearch, whenCanPreempt: TryNextFlavor}`, `preemption`
//!   `{reclaimWithinCohort: Never, withinClusterQueue: Never, borrowWithinCohort: {policy:
//!   Never}}`, `fairSharing.weight: 1` when `fairSharing` is given; LocalQueue `stopPolicy: None`),
//!   then the semantic rules, each a 422 `Invalid` naming every failing field:
//!   - names: a DNS-1123 subdomain (ClusterQueue, ResourceFlavor; also `cohortName`, flavor and
//!     topology names, `clusterQueue`), a DNS-1123 label (LocalQueue);
//!   - ClusterQueue: at most 16 resource groups, 64 covered resources and 64 flavors per group,
//!     256 flavors in all; a covered resource and a flavor in at most one group; every flavor
//!     lists exactly the group's `coveredResources`, in order; `nominalQuota` required; quotas
//!     and limits valid non-negative quantities; `borrowingLimit` and `lendingLimit` only with a
//!     `cohortName`; `lendingLimit` ≤ `nominalQuota`; the enums (`queueingStrategy`,
//!     `stopPolicy`, preemption policies, flavor fungibility, `admissionScope.admissionMode`);
//!   - ResourceFlavor: at most 8 `nodeLabels` (valid label keys and values), `nodeTaints` and
//!     `tolerations`; taints with a key and a known effect; tolerations as Kueue's CEL rules say;
//!     `topologyName` needs a node label, and makes the spec immutable;
//!   - LocalQueue: `spec.clusterQueue` required and immutable (the CRD's `self == oldSelf`).
//!
//! What it does not do: no `v1beta1` (its `cohort` is an unknown field here), no conversion, no
//! status validation (any `status` is kept as given, except a ResourceFlavor's), no
//! `metadata.generation`, no checks across objects (a flavor or ClusterQueue that does not
//! exist is fine, as on a cluster), no finalizers; quantities compare as `f64`; error wording
//! follows the apiserver's for the common cases, not byte for byte for every rule.

use serde_json::{Value, json};

use crate::crd::{METADATA, S, STR_LIST, default};
use crate::fields::{Errors, label, subdomain};
use crate::objects::{ApiError, Kind};

const FAIR_SHARING: S = S::Obj(&[("weight", S::Quantity)]);

const LABEL_SELECTOR: S = S::Obj(&[
    ("matchLabels", S::StrMap),
    (
        "matchExpressions",
        S::List(&S::Obj(&[
            ("key", S::Str),
            ("operator", S::Str),
            ("values", STR_LIST),
        ])),
    ),
]);

const RESOURCE_QUOTA: S = S::Obj(&[
    ("name", S::Str),
    ("nominalQuota", S::Quantity),
    ("borrowingLimit", S::Quantity),
    ("lendingLimit", S::Quantity),
]);

const RESOURCE_GROUP: S = S::Obj(&[
    ("coveredResources", STR_LIST),
    (
        "flavors",
        S::List(&S::Obj(&[
            ("name", S::Str),
            ("resources", S::List(&RESOURCE_QUOTA)),
        ])),
    ),
]);

const CLUSTER_QUEUE_SPEC: S = S::Obj(&[
    ("resourceGroups", S::List(&RESOURCE_GROUP)),
    ("cohortName", S::Str),
    ("queueingStrategy", S::Str),
    ("namespaceSelector", LABEL_SELECTOR),
    (
        "flavorFungibility",
        S::Obj(&[
            ("whenCanBorrow", S::Str),
            ("whenCanPreempt", S::Str),
            ("preference", S::Str),
        ]),
    ),
    (
        "preemption",
        S::Obj(&[
            ("reclaimWithinCohort", S::Str),
            (
                "borrowWithinCohort",
                S::Obj(&[("policy", S::Str), ("maxPriorityThreshold", S::Int)]),
            ),
            ("withinClusterQueue", S::Str),
        ]),
    ),
    (
        "admissionChecksStrategy",
        S::Obj(&[(
            "admissionChecks",
            S::List(&S::Obj(&[("name", S::Str), ("onFlavors", STR_LIST)])),
        )]),
    ),
    ("stopPolicy", S::Str),
    ("fairSharing", FAIR_SHARING),
    ("admissionScope", S::Obj(&[("admissionMode", S::Str)])),
]);

const RESOURCE_FLAVOR_SPEC: S = S::Obj(&[
    ("nodeLabels", S::StrMap),
    (
        "nodeTaints",
        S::List(&S::Obj(&[
            ("key", S::Str),
            ("value", S::Str),
            ("effect", S::Str),
            ("timeAdded", S::Any),
        ])),
    ),
    (
        "tolerations",
        S::List(&S::Obj(&[
            ("key", S::Str),
            ("operator", S::Str),
            ("value", S::Str),
            ("effect", S::Str),
            ("tolerationSeconds", S::Int),
        ])),
    ),
    ("topologyName", S::Str),
]);

const LOCAL_QUEUE_SPEC: S = S::Obj(&[
    ("clusterQueue", S::Str),
    ("stopPolicy", S::Str),
    ("fairSharing", FAIR_SHARING),
]);

const CLUSTER_QUEUE: S = S::Obj(&[
    ("apiVersion", S::Str),
    ("kind", S::Str),
    ("metadata", METADATA),
    ("spec", CLUSTER_QUEUE_SPEC),
    ("status", S::Any),
]);

const RESOURCE_FLAVOR: S = S::Obj(&[
    ("apiVersion", S::Str),
    ("kind", S::Str),
    ("metadata", METADATA),
    ("spec", RESOURCE_FLAVOR_SPEC),
]);

const LOCAL_QUEUE: S = S::Obj(&[
    ("apiVersion", S::Str),
    ("kind", S::Str),
    ("metadata", METADATA),
    ("spec", LOCAL_QUEUE_SPEC),
    ("status", S::Any),
]);

/// The schema of a Kueue kind.
pub(crate) fn schema(kind: Kind) -> Option<&'static S> {
    match kind {
        Kind::ClusterQueue => Some(&CLUSTER_QUEUE),
        Kind::ResourceFlavor => Some(&RESOURCE_FLAVOR),
        Kind::LocalQueue => Some(&LOCAL_QUEUE),
        _ => None,
    }
}

/// Types, defaults, then the semantic rules (`old`: the stored object on an update); a 422
/// naming every failing field, or Ok with `obj` defaulted.
pub(crate) fn admit(kind: Kind, obj: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let types = crate::crd::type_errors(schema(kind), obj);
    if !types.is_empty() {
        return Err(ApiError::invalid_fields(kind, &name, &types));
    }
    defaults(kind, obj);
    let mut e = Errors::new();
    let spec = &obj["spec"];
    let old_spec = old.map(|o| &o["spec"]);
    match kind {
        Kind::ClusterQueue => {
            subdomain(&name, "metadata.name", &mut e);
            crate::kueue_rules::cluster_queue(spec, &mut e);
        }
        Kind::ResourceFlavor => {
            subdomain(&name, "metadata.name", &mut e);
            crate::kueue_rules::resource_flavor(spec, old_spec, &mut e);
        }
        Kind::LocalQueue => {
            label(&name, "metadata.name", &mut e);
            crate::kueue_rules::local_queue(spec, old_spec, &mut e);
        }
        _ => {}
    }
    if e.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_fields(kind, &name, &e))
    }
}

/// The CRDs' defaults (`+kubebuilder:default`), applied where the parent object is present.
fn defaults(kind: Kind, obj: &mut Value) {
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        return;
    }
    match kind {
        Kind::ClusterQueue => {
            default(spec, "queueingStrategy", json!("BestEffortFIFO"));
            default(spec, "stopPolicy", json!("None"));
            default(spec, "flavorFungibility", json!({}));
            let f = &mut spec["flavorFungibility"];
            default(f, "whenCanBorrow", json!("MayStopSearch"));
            default(f, "whenCanPreempt", json!("TryNextFlavor"));
            default(spec, "preemption", json!({}));
            let p = &mut spec["preemption"];
            default(p, "reclaimWithinCohort", json!("Never"));
            default(p, "withinClusterQueue", json!("Never"));
            default(p, "borrowWithinCohort", json!({}));
            default(&mut p["borrowWithinCohort"], "policy", json!("Never"));
            if let Some(f) = spec.get_mut("fairSharing") {
                default(f, "weight", json!(1));
            }
        }
        Kind::LocalQueue => {
            default(spec, "stopPolicy", json!("None"));
            if let Some(f) = spec.get_mut("fairSharing") {
                default(f, "weight", json!(1));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_named_with_their_path() {
        let cq = json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": { "name": "cq", "labelz": {} },
            "spec": { "cohort": "c", "resourceGroups": [{ "coveredResources": ["cpu"], "flavors": [
                { "name": "f", "resources": [{ "name": "cpu", "nominalQuota": 1, "foo": 2 }] }] }] },
        });
        let e =
            crate::crd::decode(Kind::ClusterQueue, schema(Kind::ClusterQueue), &cq).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "ClusterQueue in version \"v1beta2\" cannot be handled as a ClusterQueue: strict decoding error: unknown field \"metadata.labelz\", unknown field \"spec.cohort\", unknown field \"spec.resourceGroups[0].flavors[0].resources[0].foo\""
        );
        assert!(crate::crd::decode(Kind::ConfigMap, None, &json!({ "anything": 1 })).is_ok());
    }
}
