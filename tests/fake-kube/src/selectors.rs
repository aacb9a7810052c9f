//! Label and field selectors, as `labelSelector` and `fieldSelector` query parameters carry them.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, joined by
//! commas (`!=` and `notin` match objects without the label, as on the apiserver). Field
//! selectors: `=`, `==`, `!=` joined by commas, on the fields the apiserver indexes for these
//! kinds: `metadata.name` (all), `metadata.namespace` (namespaced kinds), `spec.nodeName` and
//! `status.phase` (Pods), `spec.unschedulable` (Nodes). Any other field is a 400, as there.
//!
//! What it does not do: no set-based field selectors, no validation of label syntax beyond
//! parsing.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::objects::{ApiError, Kind};
use crate::store::labels_of;

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// Parsed label and field selectors; empty matches everything.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selector {
    labels: Vec<LabelReq>,
    fields: Vec<(String, bool, String)>,
}

/// Splits at commas outside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn set_values(s: &str) -> Result<Vec<String>, ApiError> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(&format!(
                "unable to parse requirement: found '{s}', expected: '('"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_label(req: &str) -> Result<LabelReq, ApiError> {
    if let Some(key) = req.strip_prefix('!') {
        return Ok(LabelReq::NotExists(key.trim().to_string()));
    }
    if let Some(i) = req.find(" notin ") {
        return Ok(LabelReq::NotIn(
            req[..i].trim().to_string(),
            set_values(&req[i + 7..])?,
        ));
    }
    if let Some(i) = req.find(" in ") {
        return Ok(LabelReq::In(
            req[..i].trim().to_string(),
            set_values(&req[i + 4..])?,
        ));
    }
    if let Some((k, v)) = req.split_once("!=") {
        return Ok(LabelReq::NotEq(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
        return Ok(LabelReq::Eq(k.trim().into(), v.trim().into()));
    }
    Ok(LabelReq::Exists(req.to_string()))
}

fn label_matches(req: &LabelReq, labels: &BTreeMap<String, String>) -> bool {
    match req {
        LabelReq::Eq(k, v) => labels.get(k) == Some(v),
        LabelReq::NotEq(k, v) => labels.get(k) != Some(v),
        LabelReq::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
        LabelReq::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
        LabelReq::Exists(k) => labels.contains_key(k),
        LabelReq::NotExists(k) => !labels.contains_key(k),
    }
}

/// The value of a selectable field, or None when `kind` does not support it.
fn field_value(kind: Kind, obj: &Value, field: &str) -> Option<String> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    match (kind, field) {
        (_, "metadata.name") => Some(s(&obj["metadata"]["name"])),
        (k, "metadata.namespace") if k.namespaced() => Some(s(&obj["metadata"]["namespace"])),
        (Kind::Pod, "spec.nodeName") => Some(s(&obj["spec"]["nodeName"])),
        (Kind::Pod, "status.phase") => Some(s(&obj["status"]["phase"])),
        (Kind::Node, "spec.unschedulable") => Some(
            obj["spec"]["unschedulable"]
                .as_bool()
                .unwrap_or(false)
                .to_string(),
        ),
        _ => None,
    }
}

impl Selector {
    /// Parses the two query parameters for `kind`; a malformed selector or an unsupported
    /// field is a 400 BadRequest.
    pub(crate) fn parse(
        kind: Kind,
        labels: Option<&str>,
        fields: Option<&str>,
    ) -> Result<Selector, ApiError> {
        let labels = split_top(labels.unwrap_or_default())
            .iter()
            .map(|r| parse_label(r))
            .collect::<Result<Vec<_>, _>>()?;
        let mut parsed = Vec::new();
        for req in split_top(fields.unwrap_or_default()) {
            let (field, eq, value) = if let Some((f, v)) = req.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(&format!(
                    "invalid selector: '{req}'; can't understand '{req}'"
                )));
            };
            let field = field.trim();
            if field_value(kind, &Value::Null, field).is_none() {
                return Err(ApiError::bad_request(&format!(
                    "field label not supported: {field}"
                )));
            }
            parsed.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(Selector {
            labels,
            fields: parsed,
        })
    }

    /// Whether `obj` (of `kind`) matches.
    pub(crate) fn matches(&self, kind: Kind, obj: &Value) -> bool {
        let labels = labels_of(obj);
        self.labels.iter().all(|r| label_matches(r, &labels))
            && self.fields.iter().all(|(f, eq, v)| {
                let actual = field_value(kind, obj, f).unwrap_or_default();
                (actual == *v) == *eq
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: &str, phase: &str, labels: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels},
               "spec": {"nodeName": node}, "status": {"phase": phase}})
    }

    #[test]
    fn field_selectors_on_pods() {
        let sel = Selector::parse(
            Kind::Pod,
            None,
            Some("spec.nodeName=gpu-1,status.phase!=Succeeded,status.phase!=Failed"),
        )
        .unwrap();
        assert!(sel.matches(Kind::Pod, &pod("gpu-1", "Running", json!({}))));
        assert!(!sel.matches(Kind::Pod, &pod("gpu-2", "Running", json!({}))));
        assert!(!sel.matches(Kind::Pod, &pod("gpu-1", "Failed", json!({}))));
        let sel = Selector::parse(Kind::Pod, None, Some("metadata.namespace==ns")).unwrap();
        assert!(sel.matches(Kind::Pod, &pod("gpu-1", "Running", json!({}))));
    }

    #[test]
    fn unsupported_fields_are_rejected() {
        let err = Selector::parse(Kind::Node, None, Some("spec.nodeName=x")).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (400, "field label not supported: spec.nodeName")
        );
    }

    #[test]
    fn label_selectors() {
        let p = pod("n", "Running", json!({"a": "1", "b": "2"}));
        let m = |s: &str| {
            Selector::parse(Kind::Pod, Some(s), None)
                .unwrap()
                .matches(Kind::Pod, &p)
        };
        assert!(m("a=1"));
        assert!(m("a==1,b"));
        assert!(!m("a=2"));
        assert!(m("c!=1"));
        assert!(m("!c"));
        assert!(!m("!a"));
        assert!(m("a in (0, 1),b notin (3)"));
        assert!(!m("a notin (1,2)"));
        assert!(!m("c"));
    }
}
