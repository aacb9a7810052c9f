//! Volcano's Queue (`scheduling.volcano.sh/v1beta1`, kind `Queue`, cluster-scoped) admitted as
//! Volcano v1.14's CRD and admission webhooks admit it (`pkg/webhooks/admission/queues`:
//! `mutatequeue.volcano.sh` on create, `validatequeue.volcano.sh` on create, update and
//! delete), so that a client writing a misspelled or inconsistent queue fails here as it would
//! on a cluster.
//!
//! What it does, on every create, replace and patch (the object after patching):
//! - strict decoding with [`QUEUE`] ([`crate::crd::decode`]): an unknown field anywhere
//!   (top level, `metadata`, `spec`) is a 400 `BadRequest`, `Queue in version "v1beta1" cannot
//!   be handled as a Queue: strict decoding error: unknown field "spec.foo"`; `status` is free;
//! - the CRD's defaults (`spec.weight: 1`, `spec.dequeueStrategy: traverse`, on every write
//!   that has a `spec`), then, on create only, the mutating webhook's (`spec.reclaimable: true`
//!   when absent, `spec.weight: 1` when 0);
//! - the CRD's schema, a 422 `Invalid` naming every failing field (`Queue.scheduling.volcano.sh
//!   "q" is invalid: spec.weight: Invalid value: 0: spec.weight in body should be greater than
//!   or equal to 1`): types, `weight` 1..=65535, `priority` ≥ 0, `dequeueStrategy` `fifo` or
//!   `traverse`, `parent` a DNS-1123 subdomain of at most 253 characters (`""` too: the CRD's
//!   pattern refuses it), `type` at most 253, quantities matching the quantity pattern,
//!   `status.state` one of `Open`, `Closed`, `Closing`, `Unknown`, the name a DNS-1123
//!   subdomain;
//! - the validating webhook ([`crate::volcano_rules`]), whose denial is kube-apiserver's for a
//!   webhook status without a code: 400, no `reason`, `admission webhook
//!   "validatequeue.volcano.sh" denied the request: <message>`.
//!
//! A delete goes through the validating webhook too ([`admit_delete`]).
//!
//! What it does not do: no `v1` Queue, PodGroups or Jobs; no Volcano controller or scheduler
//! (no `default` or `root` queue is created, no status is written); no status subresource
//! endpoint (a create keeps the `status` it is given, where the apiserver drops it: the only way
//! a test sets one; replace and patch keep the stored status); no hierarchy annotations
//! (`volcano.sh/hierarchy`: neither the mutating webhook's `root/` prefix nor the validating
//! webhook's checks); no `EnableRootQueueProtection` or allocated-pods-on-delete flags (off by
//! default); a Queue without `spec` gets `{}` on create, where the mutating webhook's JSON
//! patch would fail with a 500; a type error is the CRD's 422 here, where Volcano's mutating
//! webhook would fail to decode the queue first; the webhook's error wording is Volcano's, but
//! a fractional quantity of an integer resource shows its value as written, not as Go prints a
//! `resource.Quantity`; quantities are read as `f64`.

use serde_json::{Value, json};

use crate::crd::{METADATA, S, STR_LIST, default};
use crate::fields::{Errors, crd_quantity, invalid, is_subdomain, one_of, subdomain};
use crate::objects::{ApiError, Kind};
use crate::volcano_rules::name_of;

/// The validating webhook's name, as its denials name it.
pub(crate) const WEBHOOK: &str = "validatequeue.volcano.sh";

/// The longest `spec.parent` and `spec.type` (`+kubebuilder:validation:MaxLength`).
const MAX_NAME: usize = 253;

const NODE_GROUPS: S = S::Obj(&[
    ("requiredDuringSchedulingIgnoredDuringExecution", STR_LIST),
    ("preferredDuringSchedulingIgnoredDuringExecution", STR_LIST),
]);

const SPEC: S = S::Obj(&[
    ("weight", S::Int),
    ("capability", S::QuantityMap),
    ("reclaimable", S::Bool),
    (
        "extendClusters",
        S::List(&S::Obj(&[
            ("name", S::Str),
            ("weight", S::Int),
            ("capacity", S::QuantityMap),
        ])),
    ),
    ("guarantee", S::Obj(&[("resource", S::QuantityMap)])),
    (
        "affinity",
        S::Obj(&[
            ("nodeGroupAffinity", NODE_GROUPS),
            ("nodeGroupAntiAffinity", NODE_GROUPS),
        ]),
    ),
    ("type", S::Str),
    ("parent", S::Str),
    ("deserved", S::QuantityMap),
    ("priority", S::Int),
    ("dequeueStrategy", S::Str),
]);

/// The Queue's schema (volcano-sh/apis `pkg/apis/scheduling/v1beta1/types.go`).
pub(crate) const QUEUE: S = S::Obj(&[
    ("apiVersion", S::Str),
    ("kind", S::Str),
    ("metadata", METADATA),
    ("spec", SPEC),
    ("status", S::Any),
]);

/// Admits a queue being created (`old` None) or updated (`old`: the stored queue), among the
/// stored `queues`: Ok with `obj` defaulted, or the 422 or the webhook's denial.
pub(crate) fn admit(
    obj: &mut Value,
    old: Option<&Value>,
    queues: &[Value],
) -> Result<(), ApiError> {
    let name = name_of(obj).to_string();
    let kind = Kind::VolcanoQueue;
    let types = crate::crd::type_errors(Some(&QUEUE), obj);
    if !types.is_empty() {
        return Err(ApiError::invalid_fields(kind, &name, &types));
    }
    if old.is_none() && obj["spec"].is_null() {
        obj["spec"] = json!({});
    }
    if let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) {
        default(spec, "weight", json!(1));
        default(spec, "dequeueStrategy", json!("traverse"));
        if old.is_none() {
            // mutatequeue.volcano.sh (create only).
            default(spec, "reclaimable", json!(true));
            if spec["weight"] == 0 {
                spec["weight"] = json!(1);
            }
        }
    }
    let mut e = Errors::new();
    crd_rules(obj, &name, &mut e);
    if !e.is_empty() {
        return Err(ApiError::invalid_fields(kind, &name, &e));
    }
    crate::volcano_rules::validate(obj, old, queues)
        .map_err(|message| ApiError::webhook_denied(WEBHOOK, &message))
}

/// Admits the delete of queue `name` among the stored `queues` (it is one of them): Ok, or
/// the webhook's denial.
pub(crate) fn admit_delete(name: &str, queues: &[Value]) -> Result<(), ApiError> {
    crate::volcano_rules::deleting(name, queues)
        .map_err(|message| ApiError::webhook_denied(WEBHOOK, &message))
}

/// An integer field `spec.key` (absent is fine) within `min..=max`, as the CRD's `minimum` and
/// `maximum` word it.
fn bounded(e: &mut Errors, spec: &Value, key: &str, min: i64, max: Option<i64>) {
    let Some(n) = spec[key].as_i64() else { return };
    let field = format!("spec.{key}");
    if n < min {
        let why = format!("{field} in body should be greater than or equal to {min}");
        invalid(e, &field, &spec[key], &why);
    }
    if let Some(max) = max.filter(|m| n > *m) {
        let why = format!("{field} in body should be less than or equal to {max}");
        invalid(e, &field, &spec[key], &why);
    }
}

/// A string field of at most [`MAX_NAME`] characters.
fn max_length(e: &mut Errors, field: &str, s: &str) {
    if s.len() > MAX_NAME {
        e.push((
            field.to_string(),
            format!("Too long: may not be more than {MAX_NAME} bytes"),
        ));
    }
}

/// The CRD's schema rules beyond types, and the name.
fn crd_rules(obj: &Value, name: &str, e: &mut Errors) {
    subdomain(name, "metadata.name", e);
    let spec = &obj["spec"];
    bounded(e, spec, "weight", 1, Some(65535));
    bounded(e, spec, "priority", 0, None);
    one_of(e, spec, "spec", "dequeueStrategy", &["fifo", "traverse"]);
    if let Some(parent) = spec["parent"].as_str() {
        max_length(e, "spec.parent", parent);
        if !is_subdomain(parent) || parent.len() > MAX_NAME {
            invalid(
                e,
                "spec.parent",
                &spec["parent"],
                r"spec.parent in body should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
            );
        }
    }
    if let Some(t) = spec["type"].as_str() {
        max_length(e, "spec.type", t);
    }
    let clusters = spec["extendClusters"].as_array().map(Vec::as_slice);
    let capacities = clusters
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("spec.extendClusters[{i}].capacity"), &c["capacity"]));
    let maps = [
        ("spec.capability".to_string(), &spec["capability"]),
        ("spec.deserved".to_string(), &spec["deserved"]),
        (
            "spec.guarantee.resource".to_string(),
            &spec["guarantee"]["resource"],
        ),
    ];
    for (path, map) in maps.into_iter().chain(capacities) {
        for (resource, q) in map.as_object().into_iter().flatten() {
            if !q.is_null() {
                crd_quantity(e, &format!("{path}.{resource}"), q);
            }
        }
    }
    one_of(
        e,
        &obj["status"],
        "status",
        "state",
        &["Open", "Closed", "Closing", "Unknown"],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_checked_in_maps_lists_and_booleans() {
        let q = json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": { "name": "q", "labels": { "a": 1 } },
            "spec": { "reclaimable": "yes", "capability": { "cpu": 2, "memory": true },
                      "extendClusters": [{ "name": 3 }] },
        });
        let fields: Vec<String> = crate::crd::type_errors(Some(&QUEUE), &q)
            .into_iter()
            .map(|(f, m)| format!("{f}: {m}"))
            .collect();
        assert_eq!(
            fields,
            [
                "metadata.labels.a: Invalid value: \"integer\": metadata.labels.a in body must be of type string: \"integer\"",
                "spec.capability.memory: Invalid value: \"boolean\": spec.capability.memory in body must be of type integer,string: \"boolean\"",
                "spec.extendClusters[0].name: Invalid value: \"integer\": spec.extendClusters[0].name in body must be of type string: \"integer\"",
                "spec.reclaimable: Invalid value: \"string\": spec.reclaimable in body must be of type boolean: \"string\"",
            ]
        );
    }

    fn queue(spec: Value) -> Value {
        json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": { "name": "team-a" }, "spec": spec,
        })
    }

    fn refusal(spec: Value) -> String {
        let mut q = queue(spec);
        admit(&mut q, None, &[]).unwrap_err().message
    }

    #[test]
    fn create_defaults_and_update_keeps_what_it_is_given() {
        let mut q = queue(json!({ "weight": 0 }));
        admit(&mut q, None, &[]).unwrap();
        assert_eq!(
            q["spec"],
            json!({ "weight": 1, "reclaimable": true, "dequeueStrategy": "traverse" })
        );
        let old = q.clone();
        let mut updated = queue(json!({ "dequeueStrategy": "fifo" }));
        admit(&mut updated, Some(&old), std::slice::from_ref(&old)).unwrap();
        // The CRD's default applies; the mutating webhook's reclaimable does not.
        assert_eq!(
            updated["spec"],
            json!({ "weight": 1, "dequeueStrategy": "fifo" })
        );
        let mut zero = queue(json!({ "weight": 0 }));
        let e = admit(&mut zero, Some(&old), std::slice::from_ref(&old)).unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        assert_eq!(
            e.message,
            "Queue.scheduling.volcano.sh \"team-a\" is invalid: spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1"
        );
    }

    #[test]
    fn the_crd_schema_is_enforced_with_422() {
        for (spec, message) in [
            (
                json!({ "weight": 70000 }),
                "spec.weight: Invalid value: 70000: spec.weight in body should be less than or equal to 65535",
            ),
            (
                json!({ "priority": -1 }),
                "spec.priority: Invalid value: -1: spec.priority in body should be greater than or equal to 0",
            ),
            (
                json!({ "dequeueStrategy": "lifo" }),
                "spec.dequeueStrategy: Unsupported value: \"lifo\": supported values: \"fifo\", \"traverse\"",
            ),
            (
                json!({ "parent": "Team_A" }),
                "spec.parent: Invalid value: \"Team_A\": spec.parent in body should match '^[a-z0-9]",
            ),
            (
                json!({ "deserved": { "cpu": "four" } }),
                "spec.deserved.cpu: Invalid value: \"four\": spec.deserved.cpu in body should match '^(\\+|-)?",
            ),
            (
                json!({ "reclaimable": "yes" }),
                "spec.reclaimable in body must be of type boolean: \"string\"",
            ),
        ] {
            let m = refusal(spec);
            assert!(
                m.starts_with("Queue.scheduling.volcano.sh \"team-a\" is invalid: "),
                "{m}"
            );
            assert!(m.contains(message), "{message}\n{m}");
        }
        let mut bad_name = queue(json!({}));
        bad_name["metadata"]["name"] = json!("Team-A");
        let e = admit(&mut bad_name, None, &[]).unwrap_err();
        assert!(
            e.message
                .contains("metadata.name: Invalid value: \"Team-A\""),
            "{}",
            e.message
        );
    }
}
