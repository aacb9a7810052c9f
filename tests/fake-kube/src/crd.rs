//! The custom resources' structural schemas, as kube-apiserver's CRD handler decodes and checks
//! them: a schema tree ([`S`]) per kind (Kueue's in [`crate::kueue`], Volcano's in
//! [`crate::volcano`]), strict decoding ([`decode`]: every unknown field, with its dotted path,
//! a 400 `BadRequest`), type errors ([`type_errors`]: `spec.weight in body must be of type
//! integer`, answered as 422 by each kind's admission) and the CRDs' defaults ([`default`]).
//!
//! What it does not do: no rules beyond types (enums, minimums, patterns and the semantic rules
//! are each kind's admission's), no pruning (an unknown field is refused, never dropped: every
//! write here is `fieldValidation=Strict`), no `x-kubernetes-preserve-unknown-fields` other than
//! [`S::Any`], no conversion between versions.

use serde_json::Value;

use crate::fields::{Errors, child};
use crate::objects::{ApiError, Kind};

/// One node of a kind's schema.
#[derive(Clone, Copy)]
pub(crate) enum S {
    /// Anything (status, managed fields).
    Any,
    Str,
    Int,
    Bool,
    /// An int-or-string Kubernetes quantity.
    Quantity,
    /// A map of strings (labels).
    StrMap,
    /// A map of resource names to quantities (a `ResourceList`).
    QuantityMap,
    List(&'static S),
    Obj(&'static [(&'static str, S)]),
}

/// A list of strings.
pub(crate) const STR_LIST: S = S::List(&S::Str);

/// `metadata` (an `ObjectMeta`).
pub(crate) const METADATA: S = S::Obj(&[
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

fn is_quantity_type(v: &Value) -> bool {
    v.is_string() || v.is_number()
}

fn walk(s: &S, v: &Value, path: &str, w: &mut Walk) {
    if v.is_null() {
        return;
    }
    let want = match (s, v) {
        (S::Any, _) | (S::Str, Value::String(_)) | (S::Bool, Value::Bool(_)) => return,
        (S::Quantity, _) if is_quantity_type(v) => return,
        (S::Int, Value::Number(n)) if n.is_i64() || n.is_u64() => return,
        (S::StrMap | S::QuantityMap, Value::Object(m)) => {
            let (ok, want): (fn(&Value) -> bool, _) = match s {
                S::StrMap => (Value::is_string, "string"),
                _ => (is_quantity_type, "integer,string"),
            };
            for (k, x) in m.iter().filter(|(_, x)| !ok(x) && !x.is_null()) {
                w.types.push(type_error(&child(path, k), want, x));
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
        (S::Bool, _) => "boolean",
        (S::Quantity, _) => "integer,string",
        (S::StrMap | S::QuantityMap | S::Obj(_), _) => "object",
        (S::List(_), _) => "array",
    };
    w.types.push(type_error(path, want, v));
}

fn walked(schema: Option<&S>, obj: &Value) -> Walk {
    let mut w = Walk::default();
    if let Some(s) = schema {
        walk(s, obj, "", &mut w);
    }
    w
}

/// Strict decoding of `kind` against its `schema` (the caller's lookup: `kueue::schema`,
/// `volcano::QUEUE`): a 400 naming every unknown field, or Ok (also without a schema).
pub(crate) fn decode(kind: Kind, schema: Option<&S>, obj: &Value) -> Result<(), ApiError> {
    let w = walked(schema, obj);
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

/// Every value whose JSON type is not its schema's (`spec.weight in body must be of type
/// integer: "string"`), as field errors.
pub(crate) fn type_errors(schema: Option<&S>, obj: &Value) -> Errors {
    walked(schema, obj).types
}

/// A CRD default (`+kubebuilder:default`): sets `obj[key]` to `value` when it is absent or
/// null and `obj` is an object (defaults apply only where the parent is present).
pub(crate) fn default(obj: &mut Value, key: &str, value: Value) {
    if obj.is_object() && obj[key].is_null() {
        obj[key] = value;
    }
}
