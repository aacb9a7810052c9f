//! Volcano v1.14's validating webhook for Queues (`validatequeue.volcano.sh`,
//! `pkg/webhooks/admission/queues/validate/validate_queue.go`), on a queue whose CRD schema
//! [`crate::volcano`] has checked and whose defaults it has set. Each function returns the
//! webhook's message, which `volcano` wraps in the apiserver's denial.
//!
//! What it does, on create and update, in Volcano's order (the first failing step answers):
//! - field errors, aggregated as Go's `ErrorList` (`[a, b]` when several):
//!   - `status.state`, when given, `Open` or `Closed` (`requestBody.spec.state: Invalid value:
//!     "Closing": queue state must be in [Open Closed]`; on update only: the apiserver drops a
//!     created queue's status before the webhook sees it);
//!   - every quantity of `capability`, `deserved` and `guarantee.resource` non-negative (`must
//!     be greater than or equal to 0`) and whole for integer resources (`pods`, extended ones
//!     such as `nvidia.com/gpu`: `must be an integer`);
//!   - the first broken ordering of `guarantee ≤ deserved ≤ capability`, by Volcano's
//!     `LessPartly(…, Zero)`: `deserved` within `capability` and `guarantee.resource` within
//!     `capability` when `capability` is non-empty, `guarantee.resource` within `deserved` when
//!     `guarantee.resource` is non-empty (`requestBody.spec.deserved: Invalid value: "cpu
//!     8000.00, memory 0.00": deserved should less equal than capability`);
//! - on create or when `spec.parent` changes: the parent (other than `""` and `root`) is not
//!   the queue itself (`queue X cannot use itself as parent`), exists (`failed to get parent
//!   queue of queue X: queue.scheduling.volcano.sh "P" not found`), and, when it has no child
//!   yet, has no allocated pods (`status.allocated.pods`);
//! - except for `root`, on create or when the parent or a resource list changes: a child's
//!   `capability` within its parent's, the sum of the siblings' `guarantee.resource` and
//!   `deserved` within the parent's own (else within its `capability`), and the same for the
//!   queue's own children against it.
//!
//! On delete ([`deleting`]): `default` and `root` are refused, and so is a queue that is the
//! `spec.parent` of others (`queue X can not be deleted because it has 2 child queues: a, b`,
//! the children in name order).
//!
//! Resources count as Volcano's scheduler counts them (`api.NewResource`): `cpu` in millicores,
//! `memory` in bytes, `pods` in units, `ephemeral-storage` and the scalar resources (names with
//! a `/`, `hugepages-*`, `attachable-volumes-*`) in milli-units; `count/*` and other names are
//! ignored; a scalar of the smaller side that the bigger side lacks breaks the ordering even at
//! 0 (as `LessPartly` with `Zero` does). Values are shown as Volcano's `Resource.String()`.
//!
//! What it does not do: the stored queues are read exactly (Volcano reads an informer's cache,
//! which can lag); no hierarchy annotations, queue depth limit, root-queue protection or
//! allocated-pods check on delete (flags off by default in v1.14); a fractional quantity is
//! shown as written, not as Go prints a `resource.Quantity`; quantities are `f64`. Volcano
//! v1.15 words the ordering errors per resource (`deserved[cpu]=… must be <= capability[cpu]=…`)
//! and checks a guarantee only against the deserved resources named: not modelled.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Value, json};

use crate::fields::{Errors, invalid, quantity};

/// The name of a queue.
pub(crate) fn name_of(q: &Value) -> &str {
    q["metadata"]["name"].as_str().unwrap_or_default()
}

/// The parent of a queue (`""` when absent).
pub(crate) fn parent_of(q: &Value) -> &str {
    q["spec"]["parent"].as_str().unwrap_or_default()
}

/// A value rounded up, forgiving `f64`'s error on exact decimals (`0.1 × 1000`).
fn ceil(x: f64) -> f64 {
    let r = x.round();
    if (x - r).abs() < 1e-6 { r } else { x.ceil() }
}

/// Whether a resource name is one of Kubernetes' scalar resources (extended, prefixed native,
/// huge pages, attachable volumes).
fn is_scalar(name: &str) -> bool {
    name.contains('/') || name.starts_with("hugepages-") || name.starts_with("attachable-volumes-")
}

/// Whether quantities of a resource must be whole (`pods`, the quota counts, extended
/// resources).
fn is_integer_resource(name: &str) -> bool {
    let counts = [
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    ];
    counts.contains(&name)
        || (name.contains('/')
            && !name.contains("kubernetes.io/")
            && !name.starts_with("requests."))
}

/// A queue's resource list as Volcano's scheduler counts it.
#[derive(Default)]
struct Resource {
    milli_cpu: f64,
    memory: f64,
    scalars: BTreeMap<String, f64>,
}

impl Resource {
    fn of(list: &Value) -> Resource {
        let mut r = Resource::default();
        for (name, q) in list.as_object().into_iter().flatten() {
            let v = quantity(q).unwrap_or(0.0);
            let scalar = match name.as_str() {
                "cpu" => {
                    r.milli_cpu += ceil(v * 1000.0);
                    None
                }
                "memory" => {
                    r.memory += ceil(v);
                    None
                }
                "pods" => Some(ceil(v)),
                n if n.starts_with("count/") => None,
                n if n == "ephemeral-storage" || is_scalar(n) => Some(ceil(v * 1000.0)),
                _ => None,
            };
            if let Some(s) = scalar {
                *r.scalars.entry(name.clone()).or_default() += s;
            }
        }
        r
    }

    fn add(&mut self, other: &Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        for (name, v) in &other.scalars {
            *self.scalars.entry(name.clone()).or_default() += v;
        }
    }

    /// Volcano's `LessPartly(other, Zero)`: whether some dimension of `self` is below
    /// `other`'s, a scalar `self` lacks counting as below.
    fn less_partly(&self, other: &Resource) -> bool {
        self.milli_cpu < other.milli_cpu
            || self.memory < other.memory
            || other.scalars.keys().any(|k| !self.scalars.contains_key(k))
            || self
                .scalars
                .iter()
                .any(|(k, v)| *v < other.scalars.get(k).copied().unwrap_or(0.0))
    }
}

impl fmt::Display for Resource {
    /// As Volcano's `Resource.String()`: `cpu 2000.00, memory 0.00, nvidia.com/gpu 1000.00`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu {:.2}, memory {:.2}", self.milli_cpu, self.memory)?;
        for (name, v) in &self.scalars {
            write!(f, ", {name} {v:.2}")?;
        }
        Ok(())
    }
}

fn non_empty(list: &Value) -> bool {
    list.as_object().is_some_and(|m| !m.is_empty())
}

fn capability(q: &Value) -> &Value {
    &q["spec"]["capability"]
}

fn deserved(q: &Value) -> &Value {
    &q["spec"]["deserved"]
}

fn guarantee(q: &Value) -> &Value {
    &q["spec"]["guarantee"]["resource"]
}

/// Go's `ErrorList.ToAggregate().Error()`: one message, or `[a, b]`.
fn aggregate(e: &Errors) -> String {
    let all: Vec<String> = e.iter().map(|(f, m)| format!("{f}: {m}")).collect();
    match all.as_slice() {
        [one] => one.clone(),
        _ => format!("[{}]", all.join(", ")),
    }
}

/// The queue as validated on create (`old` None) or update, among the stored `queues`: Ok, or
/// the webhook's message.
pub(crate) fn validate(q: &Value, old: Option<&Value>, queues: &[Value]) -> Result<(), String> {
    let mut e = Errors::new();
    let state = &q["status"]["state"];
    if old.is_some()
        && state
            .as_str()
            .is_some_and(|s| !s.is_empty() && s != "Open" && s != "Closed")
    {
        let why = "queue state must be in [Open Closed]";
        invalid(&mut e, "requestBody.spec.state", state, why);
    }
    resource_errors(&q["spec"], &mut e);
    if !e.is_empty() {
        return Err(aggregate(&e));
    }
    let parent_changed = old.is_none_or(|o| parent_of(o) != parent_of(q));
    if parent_changed {
        hierarchical(q, queues)?;
    }
    let lists_changed = |o: &Value| {
        [capability, deserved, guarantee]
            .iter()
            .any(|list| quantities(list(o)) != quantities(list(q)))
    };
    if name_of(q) != "root" && (parent_changed || old.is_none_or(lists_changed)) {
        hierarchy_resources(q, queues)?;
    }
    Ok(())
}

/// A resource list's values by name (Volcano compares the lists semantically).
fn quantities(list: &Value) -> BTreeMap<&str, Option<f64>> {
    list.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), quantity(v)))
        .collect()
}

/// `validateResourceOfQueue`: valid quantities, then the first broken ordering.
fn resource_errors(spec: &Value, e: &mut Errors) {
    let lists = [
        ("capability", &spec["capability"]),
        ("deserved", &spec["deserved"]),
        ("guarantee.resource", &spec["guarantee"]["resource"]),
    ];
    for (path, list) in lists {
        for (name, q) in list.as_object().into_iter().flatten() {
            let Some(v) = quantity(q) else { continue };
            let field = format!("requestBody.spec.{path}.{name}");
            let written = json!(q.as_str().map_or_else(|| q.to_string(), str::to_string));
            if v < 0.0 {
                invalid(e, &field, &written, "must be greater than or equal to 0");
            }
            if is_integer_resource(name) && ceil(v * 1000.0) % 1000.0 != 0.0 {
                invalid(e, &field, &written, "must be an integer");
            }
        }
    }
    let cap = Resource::of(&spec["capability"]);
    let des = Resource::of(&spec["deserved"]);
    let gua = Resource::of(&spec["guarantee"]["resource"]);
    let capped = non_empty(&spec["capability"]);
    let broken = if capped && cap.less_partly(&des) {
        Some((
            "deserved",
            &des,
            "deserved should less equal than capability",
        ))
    } else if capped && cap.less_partly(&gua) {
        Some((
            "guarantee",
            &gua,
            "guarantee should less equal than capability",
        ))
    } else if non_empty(&spec["guarantee"]["resource"]) && des.less_partly(&gua) {
        Some((
            "guarantee",
            &gua,
            "guarantee should less equal than deserved",
        ))
    } else {
        None
    };
    if let Some((field, value, why)) = broken {
        let field = format!("requestBody.spec.{field}");
        invalid(e, &field, &json!(value.to_string()), why);
    }
}

fn find<'a>(queues: &'a [Value], name: &str) -> Option<&'a Value> {
    queues.iter().find(|q| name_of(q) == name)
}

/// The stored queues whose `spec.parent` is `parent`, in name order.
fn children<'a>(queues: &'a [Value], parent: &'a str) -> impl Iterator<Item = &'a Value> {
    queues.iter().filter(move |q| parent_of(q) == parent)
}

fn not_found(name: &str) -> String {
    format!("queue.scheduling.volcano.sh \"{name}\" not found")
}

/// `validateHierarchicalQueue`: the parent is another queue, stored, without allocated pods
/// unless it already has children.
fn hierarchical(q: &Value, queues: &[Value]) -> Result<(), String> {
    let (name, parent) = (name_of(q), parent_of(q));
    if parent.is_empty() || parent == "root" {
        return Ok(());
    }
    if parent == name {
        return Err(format!("queue {name} cannot use itself as parent"));
    }
    let Some(p) = find(queues, parent) else {
        return Err(format!(
            "failed to get parent queue of queue {name}: {}",
            not_found(parent)
        ));
    };
    let pods = quantity(&p["status"]["allocated"]["pods"]).map_or(0.0, ceil);
    if children(queues, parent).next().is_none() && pods != 0.0 {
        return Err(format!(
            "queue {parent} cannot be the parent queue of queue {name} because it has allocated Pods: {pods}"
        ));
    }
    Ok(())
}

/// `validateResourceLimit`: the children's `sum` of `what` (`guarantee` or `deserved`) within
/// the parent's own list, else within its capability.
fn within_limit(parent: &Value, sum: &Resource, what: &str) -> Result<(), String> {
    let own = if what == "guarantee" {
        guarantee(parent)
    } else {
        deserved(parent)
    };
    if non_empty(own) {
        let limit = Resource::of(own);
        if limit.less_partly(sum) {
            return Err(format!(
                "sum of children's {what} ({sum}) exceeds parent's {what} limit ({limit})"
            ));
        }
    } else if non_empty(capability(parent)) {
        let cap = Resource::of(capability(parent));
        if cap.less_partly(sum) {
            return Err(format!(
                "sum of children's {what} ({sum}) exceeds parent's capability ({cap})"
            ));
        }
    }
    Ok(())
}

/// The sums of the guarantees and deserved resources of `queues`.
fn sums<'a>(queues: impl Iterator<Item = &'a Value>) -> (Resource, Resource) {
    let (mut g, mut d) = (Resource::default(), Resource::default());
    for q in queues {
        g.add(&Resource::of(guarantee(q)));
        d.add(&Resource::of(deserved(q)));
    }
    (g, d)
}

/// `validateHierarchicalQueueResources`: against the parent and the siblings, then against the
/// queue's own children.
fn hierarchy_resources(q: &Value, queues: &[Value]) -> Result<(), String> {
    let (name, parent) = (name_of(q), parent_of(q));
    let cap = Resource::of(capability(q));
    if !parent.is_empty() && parent != "root" {
        let Some(p) = find(queues, parent) else {
            return Err(format!(
                "parent queue {parent} not found: {}",
                not_found(parent)
            ));
        };
        let parent_cap = Resource::of(capability(p));
        if parent_cap.less_partly(&cap) {
            return Err(format!(
                "queue {name} capability ({cap}) exceeds parent queue {parent} capability ({parent_cap})"
            ));
        }
        let siblings = children(queues, parent).filter(|s| name_of(s) != name);
        let (g, d) = sums(siblings.chain(std::iter::once(q)));
        for (sum, what) in [(g, "guarantee"), (d, "deserved")] {
            within_limit(p, &sum, what)
                .map_err(|e| format!("parent queue {parent} validation failed: {e}"))?;
        }
    }
    let kids: Vec<&Value> = children(queues, name).collect();
    if kids.is_empty() {
        return Ok(());
    }
    for child in &kids {
        let child_cap = Resource::of(capability(child));
        if cap.less_partly(&child_cap) {
            return Err(format!(
                "queue {name} capability ({cap}) is less than child queue {} capability ({child_cap})",
                name_of(child)
            ));
        }
    }
    let (g, d) = sums(kids.into_iter());
    for (sum, what) in [(g, "guarantee"), (d, "deserved")] {
        within_limit(q, &sum, what).map_err(|e| format!("queue {name} validation failed: {e}"))?;
    }
    Ok(())
}

/// `validateQueueDeleting`: Ok, or why queue `name` cannot be deleted.
pub(crate) fn deleting(name: &str, queues: &[Value]) -> Result<(), String> {
    if name == "default" || name == "root" {
        return Err(format!("`{name}` queue can not be deleted"));
    }
    let kids: Vec<&str> = children(queues, name).map(name_of).collect();
    if kids.is_empty() {
        return Ok(());
    }
    Err(format!(
        "queue {name} can not be deleted because it has {} child queues: {}",
        kids.len(),
        kids.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: Value) -> Result<(), String> {
        let mut e = Errors::new();
        resource_errors(&s, &mut e);
        if e.is_empty() {
            Ok(())
        } else {
            Err(aggregate(&e))
        }
    }

    #[test]
    fn resources_print_and_compare_as_volcano_s() {
        let r = Resource::of(
            &json!({ "cpu": "1.5", "memory": "1Gi", "nvidia.com/gpu": 2, "pods": 3, "foo": 9 }),
        );
        assert_eq!(
            r.to_string(),
            "cpu 1500.00, memory 1073741824.00, nvidia.com/gpu 2000.00, pods 3.00"
        );
        assert_eq!(Resource::of(&json!({ "cpu": "0.1" })).milli_cpu, 100.0);
        let big = Resource::of(&json!({ "cpu": 4 }));
        assert!(!big.less_partly(&Resource::of(&json!({ "cpu": "4000m", "memory": 0 }))));
        assert!(big.less_partly(&Resource::of(&json!({ "memory": "1" }))));
        // A scalar the bigger side lacks breaks the ordering, even at 0.
        assert!(big.less_partly(&Resource::of(&json!({ "nvidia.com/gpu": 0 }))));
        // Names Volcano ignores do not.
        assert!(!big.less_partly(&Resource::of(&json!({ "foo": 1, "count/pods": 2 }))));
    }

    #[test]
    fn orderings_and_quantities_are_checked_in_volcano_s_order() {
        assert_eq!(
            spec(json!({ "capability": { "cpu": 4 }, "deserved": { "cpu": 8 } })),
            Err("requestBody.spec.deserved: Invalid value: \"cpu 8000.00, memory 0.00\": deserved should less equal than capability".into())
        );
        assert_eq!(
            spec(json!({ "capability": { "cpu": 4 }, "guarantee": { "resource": { "cpu": 1, "nvidia.com/gpu": 1 } } })),
            Err("requestBody.spec.guarantee: Invalid value: \"cpu 1000.00, memory 0.00, nvidia.com/gpu 1000.00\": guarantee should less equal than capability".into())
        );
        // Without a capability, only the guarantee within the deserved counts; an absent
        // deserved resource is 0.
        assert_eq!(
            spec(json!({ "guarantee": { "resource": { "memory": "1Gi" } }, "deserved": { "cpu": 2 } })),
            Err("requestBody.spec.guarantee: Invalid value: \"cpu 0.00, memory 1073741824.00\": guarantee should less equal than deserved".into())
        );
        assert_eq!(
            spec(json!({ "capability": {}, "deserved": { "cpu": 8 } })),
            Ok(())
        );
        assert_eq!(
            spec(json!({ "capability": { "cpu": 4, "nvidia.com/gpu": "0.5" }, "deserved": { "cpu": "-1" } })),
            Err("[requestBody.spec.capability.nvidia.com/gpu: Invalid value: \"0.5\": must be an integer, requestBody.spec.deserved.cpu: Invalid value: \"-1\": must be greater than or equal to 0]".into())
        );
    }

    #[test]
    fn a_parent_must_exist_and_not_be_the_queue_itself() {
        let q = |name: &str, parent: &str| json!({ "metadata": { "name": name }, "spec": { "parent": parent } });
        let stored = [q("ml", "root")];
        assert_eq!(validate(&q("a", "root"), None, &[]), Ok(()));
        assert_eq!(validate(&q("a", "ml"), None, &stored), Ok(()));
        assert_eq!(
            validate(&q("a", "a"), None, &stored),
            Err("queue a cannot use itself as parent".into())
        );
        assert_eq!(
            validate(&q("a", "dev"), None, &stored),
            Err("failed to get parent queue of queue a: queue.scheduling.volcano.sh \"dev\" not found".into())
        );
        // An update that keeps a parent that has gone is not checked again.
        let old = q("a", "dev");
        assert_eq!(
            validate(&q("a", "dev"), Some(&old), std::slice::from_ref(&old)),
            Ok(())
        );
    }

    #[test]
    fn children_fit_their_parent() {
        let parent = json!({ "metadata": { "name": "ml" }, "spec": { "capability": { "cpu": 8 }, "deserved": { "cpu": 6 } } });
        let child = |name: &str, cap: i64, des: i64| {
            json!({ "metadata": { "name": name },
            "spec": { "parent": "ml", "capability": { "cpu": cap }, "deserved": { "cpu": des } } })
        };
        let stored = [parent.clone(), child("a", 4, 4)];
        assert_eq!(validate(&child("b", 2, 2), None, &stored), Ok(()));
        assert_eq!(
            validate(&child("b", 16, 2), None, &stored),
            Err("queue b capability (cpu 16000.00, memory 0.00) exceeds parent queue ml capability (cpu 8000.00, memory 0.00)".into())
        );
        assert_eq!(
            validate(&child("b", 4, 3), None, &stored),
            Err("parent queue ml validation failed: sum of children's deserved (cpu 7000.00, memory 0.00) exceeds parent's deserved limit (cpu 6000.00, memory 0.00)".into())
        );
        let mut small = parent.clone();
        small["spec"] = json!({ "capability": { "cpu": 2 }, "deserved": { "cpu": 2 } });
        assert_eq!(
            validate(&small, Some(&parent), &stored),
            Err("queue ml capability (cpu 2000.00, memory 0.00) is less than child queue a capability (cpu 4000.00, memory 0.00)".into())
        );
    }

    #[test]
    fn default_root_and_parents_cannot_be_deleted() {
        assert_eq!(
            deleting("default", &[]),
            Err("`default` queue can not be deleted".into())
        );
        assert_eq!(
            deleting("root", &[]),
            Err("`root` queue can not be deleted".into())
        );
        let q = |name: &str, parent: &str| json!({ "metadata": { "name": name }, "spec": { "parent": parent } });
        let stored = [q("ml", "root"), q("a", "ml"), q("b", "ml")];
        assert_eq!(
            deleting("ml", &stored),
            Err("queue ml can not be deleted because it has 2 child queues: a, b".into())
        );
        assert_eq!(deleting("a", &stored), Ok(()));
    }
}
