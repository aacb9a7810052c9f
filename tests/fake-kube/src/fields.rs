//! The field checks the custom resources' schemas and webhooks share ([`crate::kueue`] and
//! [`crate::volcano`] admit the objects): field errors worded as the apiserver words them (`Invalid value`, `Required value`,
//! `Too many`, `Duplicate value`, `Unsupported value`), DNS-1123 names, label keys and values,
//! and Kubernetes quantities.
//!
//! What it does not do: quantities are read as `f64` (exact for integers below 2^53 and for the
//! binary and decimal suffixes, not for every decimal fraction); no canonical quantity form
//! (a quantity is kept as written).

use serde_json::{Value, json};

/// Field errors: (field path, message after the path).
pub(crate) type Errors = Vec<(String, String)>;

/// `path.key` (`key` at the top level).
pub(crate) fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A value as the apiserver quotes it in `Invalid value: …`.
pub(crate) fn shown(v: &Value) -> String {
    v.to_string()
}

/// `field: Invalid value: VALUE: why`.
pub(crate) fn invalid(e: &mut Errors, field: &str, value: &Value, why: &str) {
    e.push((
        field.to_string(),
        format!("Invalid value: {}: {why}", shown(value)),
    ));
}

/// `field: Required value`.
pub(crate) fn required(e: &mut Errors, field: &str) {
    e.push((field.to_string(), "Required value".into()));
}

/// `field: Too many: N: must have at most MAX items`.
pub(crate) fn too_many(e: &mut Errors, field: &str, n: usize, max: usize) {
    e.push((
        field.to_string(),
        format!("Too many: {n}: must have at most {max} items"),
    ));
}

/// `field: Duplicate value: "x"`.
pub(crate) fn duplicate(e: &mut Errors, field: &str, value: &str) {
    e.push((field.to_string(), format!("Duplicate value: \"{value}\"")));
}

/// An enum field `parent.key` (absent is fine): `Unsupported value` when not one of `allowed`.
pub(crate) fn one_of(e: &mut Errors, obj: &Value, parent: &str, key: &str, allowed: &[&str]) {
    let Some(v) = obj[key].as_str() else { return };
    if !allowed.contains(&v) {
        let list: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
        e.push((
            child(parent, key),
            format!(
                "Unsupported value: \"{v}\": supported values: {}",
                list.join(", ")
            ),
        ));
    }
}

fn is_label_part(s: &str, extra: &[char]) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric();
    s.chars().next().is_some_and(ok)
        && s.chars().last().is_some_and(ok)
        && s.chars().all(|c| ok(c) || extra.contains(&c))
}

fn is_dns_label(s: &str) -> bool {
    s.len() <= 63
        && is_label_part(s, &['-'])
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

pub(crate) fn is_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A DNS-1123 subdomain (object names, references to them).
pub(crate) fn subdomain(s: &str, field: &str, e: &mut Errors) {
    if !is_subdomain(s) {
        invalid(
            e,
            field,
            &json!(s),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        );
    }
}

/// A DNS-1123 label (LocalQueue names).
pub(crate) fn label(s: &str, field: &str, e: &mut Errors) {
    if !is_dns_label(s) {
        invalid(
            e,
            field,
            &json!(s),
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        );
    }
}

/// A qualified name (label keys, taint keys): `[prefix/]name`.
pub(crate) fn qualified_name(s: &str, field: &str, e: &mut Errors) {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let prefix_ok = prefix.is_none_or(|p| !p.is_empty() && is_subdomain(p));
    if !prefix_ok || name.len() > 63 || !is_label_part(name, &['-', '_', '.']) {
        invalid(
            e,
            field,
            &json!(s),
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        );
    }
}

/// A label value: empty, or at most 63 characters of the label alphabet.
pub(crate) fn label_value(s: &str, field: &str, e: &mut Errors) {
    if !s.is_empty() && (s.len() > 63 || !is_label_part(s, &['-', '_', '.'])) {
        invalid(
            e,
            field,
            &json!(s),
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        );
    }
}

/// The pattern a CRD gives a quantity (`x-kubernetes-int-or-string`).
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A quantity field of a CRD: its value, or None with a field error naming the CRD's pattern
/// (`field in body should match '^(\+|-)?…'`) when it is not a quantity.
pub(crate) fn crd_quantity(e: &mut Errors, field: &str, v: &Value) -> Option<f64> {
    let q = quantity(v);
    if q.is_none() {
        invalid(
            e,
            field,
            v,
            &format!("{field} in body should match '{QUANTITY_PATTERN}'"),
        );
    }
    q
}

/// The value of a Kubernetes quantity (`4`, `"4"`, `"500m"`, `"16Gi"`, `"1e3"`), None when the
/// value is not one.
pub(crate) fn quantity(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => parse_quantity(s),
        _ => None,
    }
}

/// Digits with at most one `.` and at least one digit.
fn is_decimal(s: &str) -> bool {
    s.chars().filter(|c| *c == '.').count() <= 1
        && s.chars().any(|c| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_digit() || c == '.')
}

fn parse_quantity(s: &str) -> Option<f64> {
    let (sign, rest) = match s.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, s.strip_prefix('+').unwrap_or(s)),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    if !is_decimal(number) {
        return None;
    }
    let n: f64 = number.parse().ok()?;
    let binary = |p: i32| 1024f64.powi(p);
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        other => {
            let exp = other.strip_prefix(['e', 'E'])?;
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if !is_decimal(digits) {
                return None;
            }
            10f64.powf(exp.parse().ok()?)
        }
    };
    Some(sign * n * factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        let q = |s: &str| parse_quantity(s);
        assert_eq!(q("4"), Some(4.0));
        assert_eq!(q("500m"), Some(0.5));
        assert_eq!(q("16Gi"), Some(16.0 * 1024.0 * 1024.0 * 1024.0));
        assert_eq!(q("1e3"), Some(1000.0));
        assert_eq!(q("-2"), Some(-2.0));
        assert_eq!(q(".5"), Some(0.5));
        for bad in ["", "abc", "4x", "1..2", "Gi", "1e", "1einf", "nan", "4 "] {
            assert_eq!(q(bad), None, "{bad}");
        }
        assert_eq!(quantity(&json!(8)), Some(8.0));
        assert_eq!(quantity(&json!(true)), None);
    }

    #[test]
    fn names_follow_dns_1123() {
        assert!(is_subdomain("a100.gpu-pool"));
        assert!(!is_subdomain("A100"));
        assert!(!is_subdomain("-a"));
        assert!(!is_subdomain(""));
        assert!(is_dns_label("team-a"));
        assert!(!is_dns_label("team.a"));
        let mut e = Errors::new();
        qualified_name("nvidia.com/gpu.product", "f", &mut e);
        qualified_name("bad key", "g", &mut e);
        label_value("NVIDIA-A100-SXM4-80GB", "h", &mut e);
        label_value("-x", "i", &mut e);
        let fields: Vec<&str> = e.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(fields, ["g", "i"]);
    }
}
