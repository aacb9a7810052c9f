//! Kueue's kinds (`kueue.x-k8s.io/v1beta2` ResourceFlavor, ClusterQueue, LocalQueue) admitted
//! as Kueue's CRD schemas and validating webhooks admit them, so that a client writing a
//! misspelled or invalid queue fails here as it would on a cluster.
//!
//! What it does, on every create, replace and patch (the object after patching) of these kinds:
//! - [`decode`]: unknown fields (top level, `metadata`, anywhere in `spec`) are a 400
//!   `BadRequest`, as kube-apiserver answers under `fieldValidation=Strict`: `ClusterQueue in
//!   version "v1beta2" cannot be handled as a ClusterQueue: strict decoding error: unknown field
//!   "spec.resourceGroups[0].foo"` (every unknown field, dotted paths with list indexes).
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

use crate::kueue_fields::{Errors, child, label, subdomain};
use crate::objects::{ApiError, Kind};

/// One node of a kind's schema.
#[derive(Clone, Copy)]
enum S {
    /// Anything (status, managed fields).
    Any,
    Str,
    Int,
    /// An int-or-string Kubernetes quantity.
    Quantity,
    /// A map of strings (labels).
    StrMap,
    List(&'static S),
    Obj(&'static [(&'static str, S)]),
}

const STR_LIST: S = S::List(&S::Str);

const METADATA: S = S::Obj(&[
    ("name", S::Str),
    ("generateName", S::Str),
    ("namespace", S::Str),
    ("selfLink", S::Str),
    ("uid", S::Str),
    ("resourceVersion", S::Str),
    ("generation", S::Int),
    ("creationTimestamp", S::Any),
    ("deletionTimestamp", S::Any),
    ("deletionGracePeriodSeconds", S::Int),
    ("labels", S::StrMap),
    ("annotations", S::StrMap),
    ("ownerReferences", S::List(&S::Any)),
    ("finalizers", STR_LIST),
    ("managedFields", S::List(&S::Any)),
]);

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

fn schema(kind: Kind) -> Option<&'static S> {
    match kind {
        Kind::ClusterQueue => Some(&CLUSTER_QUEUE),
        Kind::ResourceFlavor => Some(&RESOURCE_FLAVOR),
        Kind::LocalQueue => Some(&LOCAL_QUEUE),
        _ => None,
    }
}

/// What a walk of an object against its schema found.
#[derive(Default)]
struct Walk {
    unknown: Vec<String>,
    types: Errors,
}

/// The JSON type name of a value, as the apiserver's schema errors name it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_error(path: &str, want: &str, v: &Value) -> (String, String) {
    let got = type_name(v);
    (
        path.to_string(),
        format!("Invalid value: \"{got}\": {path} in body must be of type {want}: \"{got}\""),
    )
}

fn walk(s: &S, v: &Value, path: &str, w: &mut Walk) {
    if v.is_null() {
        return;
    }
    let want = match (s, v) {
        (S::Any, _) | (S::Str, Value::String(_)) => return,
        (S::Quantity, Value::String(_) | Value::Number(_)) => return,
        (S::Int, Value::Number(n)) if n.is_i64() || n.is_u64() => return,
        (S::StrMap, Value::Object(m)) => {
            for (k, x) in m.iter().filter(|(_, x)| !x.is_string() && !x.is_null()) {
                w.types.push(type_error(&child(path, k), "string", x));
            }
            return;
        }
        (S::List(item), Value::Array(a)) => {
            for (i, x) in a.iter().enumerate() {
                walk(item, x, &format!("{path}[{i}]"), w);
            }
            return;
        }
        (S::Obj(fields), Value::Object(m)) => {
            for (k, x) in m {
                match fields.iter().find(|(name, _)| name == k) {
                    Some((_, f)) => walk(f, x, &child(path, k), w),
                    None => w.unknown.push(child(path, k)),
                }
            }
            return;
        }
        (S::Str, _) => "string",
        (S::Int, _) => "integer",
        (S::Quantity, _) => "integer,string",
        (S::StrMap | S::Obj(_), _) => "object",
        (S::List(_), _) => "array",
    };
    w.types.push(type_error(path, want, v));
}

fn walked(kind: Kind, obj: &Value) -> Walk {
    let mut w = Walk::default();
    if let Some(s) = schema(kind) {
        walk(s, obj, "", &mut w);
    }
    w
}

/// Strict decoding: a 400 naming every unknown field, or Ok.
pub(crate) fn decode(kind: Kind, obj: &Value) -> Result<(), ApiError> {
    let w = walked(kind, obj);
    if w.unknown.is_empty() {
        return Ok(());
    }
    let fields: Vec<String> = w
        .unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    let version = kind.api_version().rsplit('/').next().unwrap_or_default();
    Err(ApiError::bad_request(&format!(
        "{k} in version \"{version}\" cannot be handled as a {k}: strict decoding error: {}",
        fields.join(", "),
        k = kind.kind(),
    )))
}

/// Types, defaults, then the semantic rules (`old`: the stored object on an update); a 422
/// naming every failing field, or Ok with `obj` defaulted.
pub(crate) fn admit(kind: Kind, obj: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let types = walked(kind, obj).types;
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

/// Sets `obj[key]` to `value` when it is absent or null.
fn default(obj: &mut Value, key: &str, value: Value) {
    if obj.is_object() && obj[key].is_null() {
        obj[key] = value;
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
            default(&mut spec["fairSharing"], "weight", json!(1));
        }
        Kind::LocalQueue => {
            default(spec, "stopPolicy", json!("None"));
            default(&mut spec["fairSharing"], "weight", json!(1));
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
        let e = decode(Kind::ClusterQueue, &cq).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "ClusterQueue in version \"v1beta2\" cannot be handled as a ClusterQueue: strict decoding error: unknown field \"metadata.labelz\", unknown field \"spec.cohort\", unknown field \"spec.resourceGroups[0].flavors[0].resources[0].foo\""
        );
    }
}
