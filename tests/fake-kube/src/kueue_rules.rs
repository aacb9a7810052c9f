//! The semantic rules of Kueue's v1beta2 specs (its CRDs' CEL rules and its validating
//! webhooks), on an object whose types [`crate::kueue`] has checked and whose defaults it has
//! set: one function per kind, each adding a field error per broken rule (the list of rules is
//! in `kueue`'s module doc).
//!
//! What it does not do: no checks across objects (a ClusterQueue's flavors, a LocalQueue's
//! ClusterQueue, an admission check need not exist), no feature gates (every field is on), no
//! rules of the kinds not served (Cohort, Workload, Topology, AdmissionCheck).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::fields::{
    Errors, child, crd_quantity, duplicate, invalid, label_value, one_of, qualified_name, required,
    subdomain, too_many,
};

/// The `stopPolicy` values of ClusterQueues and LocalQueues.
const STOP_POLICIES: [&str; 3] = ["None", "Hold", "HoldAndDrain"];
/// The effects a taint may have.
const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
/// Kueue's `maxItems`: resource groups per ClusterQueue, covered resources and flavors per
/// group, flavors in all, node labels, taints and tolerations per ResourceFlavor.
const MAX_GROUPS: usize = 16;
const MAX_PER_GROUP: usize = 64;
const MAX_FLAVORS: usize = 256;
const MAX_FLAVOR_ITEMS: usize = 8;

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// A quantity field (absent is fine): valid and non-negative; its value.
fn non_negative(e: &mut Errors, obj: &Value, parent: &str, key: &str) -> Option<f64> {
    let v = &obj[key];
    if v.is_null() {
        return None;
    }
    let field = child(parent, key);
    match crd_quantity(e, &field, v) {
        None => None,
        Some(q) if q < 0.0 => {
            invalid(e, &field, v, "must be greater than or equal to 0");
            None
        }
        Some(q) => Some(q),
    }
}

/// A ClusterQueue's spec.
pub(crate) fn cluster_queue(spec: &Value, e: &mut Errors) {
    let cohort = spec["cohortName"].as_str().filter(|c| !c.is_empty());
    if let Some(c) = cohort {
        subdomain(c, "spec.cohortName", e);
    }
    one_of(
        e,
        spec,
        "spec",
        "queueingStrategy",
        &["StrictFIFO", "BestEffortFIFO"],
    );
    one_of(e, spec, "spec", "stopPolicy", &STOP_POLICIES);
    policies(spec, e);
    non_negative(e, &spec["fairSharing"], "spec.fairSharing", "weight");
    let groups = items(&spec["resourceGroups"]);
    if groups.len() > MAX_GROUPS {
        too_many(e, "spec.resourceGroups", groups.len(), MAX_GROUPS);
    }
    let total: usize = groups.iter().map(|g| items(&g["flavors"]).len()).sum();
    if total > MAX_FLAVORS {
        invalid(
            e,
            "spec.resourceGroups",
            &json!("array"),
            "at most 256 flavors in all resource groups",
        );
    }
    let (mut resources, mut flavors) = (BTreeSet::new(), BTreeSet::new());
    for (g, group) in groups.iter().enumerate() {
        let path = format!("spec.resourceGroups[{g}]");
        let covered = strings(&group["coveredResources"]);
        match covered.len() {
            0 => required(e, &format!("{path}.coveredResources")),
            n if n > MAX_PER_GROUP => {
                too_many(e, &format!("{path}.coveredResources"), n, MAX_PER_GROUP)
            }
            _ => {}
        }
        for (i, r) in covered.iter().enumerate() {
            if !resources.insert(*r) {
                duplicate(e, &format!("{path}.coveredResources[{i}]"), r);
            }
        }
        let group_flavors = items(&group["flavors"]);
        match group_flavors.len() {
            0 => required(e, &format!("{path}.flavors")),
            n if n > MAX_PER_GROUP => too_many(e, &format!("{path}.flavors"), n, MAX_PER_GROUP),
            _ => {}
        }
        if group_flavors
            .iter()
            .any(|f| items(&f["resources"]).len() != covered.len())
        {
            invalid(
                e,
                &path,
                &json!("object"),
                "flavors must have the same number of resources as the coveredResources",
            );
        }
        for (f, flavor) in group_flavors.iter().enumerate() {
            let fpath = format!("{path}.flavors[{f}]");
            match flavor["name"].as_str() {
                None => required(e, &format!("{fpath}.name")),
                Some(name) => {
                    subdomain(name, &format!("{fpath}.name"), e);
                    if !flavors.insert(name) {
                        duplicate(e, &format!("{fpath}.name"), name);
                    }
                }
            }
            quotas(flavor, &fpath, &covered, cohort.is_some(), e);
        }
    }
}

/// One flavor's resources: named as the group's covered resources, in order, with their quotas.
fn quotas(flavor: &Value, fpath: &str, covered: &[&str], cohort: bool, e: &mut Errors) {
    for (r, quota) in items(&flavor["resources"]).iter().enumerate() {
        let rpath = format!("{fpath}.resources[{r}]");
        match quota["name"].as_str() {
            None => required(e, &format!("{rpath}.name")),
            Some(n) if covered.get(r) != Some(&n) => invalid(
                e,
                &format!("{rpath}.name"),
                &json!(n),
                "must match the name in coveredResources",
            ),
            Some(_) => {}
        }
        let nominal = if quota["nominalQuota"].is_null() {
            required(e, &format!("{rpath}.nominalQuota"));
            None
        } else {
            non_negative(e, quota, &rpath, "nominalQuota")
        };
        if !quota["borrowingLimit"].is_null() && !cohort {
            invalid(
                e,
                "spec",
                &json!("object"),
                "borrowingLimit must be nil when cohort is empty",
            );
        }
        non_negative(e, quota, &rpath, "borrowingLimit");
        let lending = &quota["lendingLimit"];
        if !lending.is_null() && !cohort {
            invalid(
                e,
                &format!("{rpath}.lendingLimit"),
                lending,
                "must be nil when cohort is empty",
            );
        }
        if let (Some(l), Some(n)) = (non_negative(e, quota, &rpath, "lendingLimit"), nominal)
            && l > n
        {
            invalid(
                e,
                &format!("{rpath}.lendingLimit"),
                lending,
                "must be less than or equal to the nominalQuota",
            );
        }
    }
}

/// A ClusterQueue's preemption, flavor fungibility, admission checks and admission scope.
fn policies(spec: &Value, e: &mut Errors) {
    let p = &spec["preemption"];
    let never_lower_any = ["Never", "LowerPriority", "Any"];
    one_of(
        e,
        p,
        "spec.preemption",
        "reclaimWithinCohort",
        &never_lower_any,
    );
    one_of(
        e,
        p,
        "spec.preemption",
        "withinClusterQueue",
        &["Never", "LowerPriority", "LowerOrNewerEqualPriority"],
    );
    let borrow = &p["borrowWithinCohort"];
    one_of(
        e,
        borrow,
        "spec.preemption.borrowWithinCohort",
        "policy",
        &["Never", "LowerPriority"],
    );
    if p["reclaimWithinCohort"] == "Never"
        && borrow["policy"].as_str().is_some_and(|b| b != "Never")
    {
        invalid(
            e,
            "spec.preemption",
            &json!("object"),
            "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
        );
    }
    let f = &spec["flavorFungibility"];
    let policies = ["MayStopSearch", "TryNextFlavor"];
    one_of(e, f, "spec.flavorFungibility", "whenCanBorrow", &policies);
    one_of(e, f, "spec.flavorFungibility", "whenCanPreempt", &policies);
    one_of(
        e,
        f,
        "spec.flavorFungibility",
        "preference",
        &["BorrowingOverPreemption", "PreemptionOverBorrowing"],
    );
    if !f["preference"].is_null()
        && (f["whenCanBorrow"] != "TryNextFlavor" || f["whenCanPreempt"] != "TryNextFlavor")
    {
        invalid(
            e,
            "spec.flavorFungibility",
            &json!("object"),
            "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
        );
    }
    let checks = &spec["admissionChecksStrategy"];
    if checks.is_object() {
        let rules = items(&checks["admissionChecks"]);
        if rules.is_empty() {
            required(e, "spec.admissionChecksStrategy.admissionChecks");
        }
        for (i, rule) in rules.iter().enumerate() {
            if rule["name"].as_str().is_none_or(str::is_empty) {
                required(
                    e,
                    &format!("spec.admissionChecksStrategy.admissionChecks[{i}].name"),
                );
            }
        }
    }
    let scope = &spec["admissionScope"];
    if scope.is_object() {
        if scope["admissionMode"].is_null() {
            required(e, "spec.admissionScope.admissionMode");
        }
        one_of(
            e,
            scope,
            "spec.admissionScope",
            "admissionMode",
            &["UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"],
        );
    }
}

/// A ResourceFlavor's spec (`old`: the stored spec on an update).
pub(crate) fn resource_flavor(spec: &Value, old: Option<&Value>, e: &mut Errors) {
    let labels = spec["nodeLabels"].as_object();
    let n = labels.map_or(0, |l| l.len());
    if n > MAX_FLAVOR_ITEMS {
        too_many(e, "spec.nodeLabels", n, MAX_FLAVOR_ITEMS);
    }
    for (k, v) in labels.into_iter().flatten() {
        qualified_name(k, "spec.nodeLabels", e);
        label_value(v.as_str().unwrap_or_default(), "spec.nodeLabels", e);
    }
    let taints = items(&spec["nodeTaints"]);
    if taints.len() > MAX_FLAVOR_ITEMS {
        too_many(e, "spec.nodeTaints", taints.len(), MAX_FLAVOR_ITEMS);
    }
    for (i, t) in taints.iter().enumerate() {
        let path = format!("spec.nodeTaints[{i}]");
        match t["key"].as_str() {
            None | Some("") => required(e, &format!("{path}.key")),
            Some(k) => qualified_name(k, &format!("{path}.key"), e),
        }
        if let Some(v) = t["value"].as_str() {
            label_value(v, &format!("{path}.value"), e);
        }
        if t["effect"].is_null() {
            required(e, &format!("{path}.effect"));
        }
        one_of(e, t, &path, "effect", &EFFECTS);
    }
    tolerations(items(&spec["tolerations"]), e);
    if let Some(topology) = spec["topologyName"].as_str() {
        subdomain(topology, "spec.topologyName", e);
        if n == 0 {
            invalid(
                e,
                "spec",
                &json!("object"),
                "at least one nodeLabel is required when topology is set",
            );
        }
    }
    if let Some(old) = old
        && !old["topologyName"].is_null()
        && old != spec
    {
        invalid(
            e,
            "spec",
            &json!("object"),
            "resourceFlavorSpec are immutable when topologyName is set",
        );
    }
}

/// One rule on one toleration.
type Holds = fn(&Value) -> bool;

/// A ResourceFlavor's tolerations: Kueue's CEL rules.
fn tolerations(list: &[Value], e: &mut Errors) {
    if list.len() > MAX_FLAVOR_ITEMS {
        too_many(e, "spec.tolerations", list.len(), MAX_FLAVOR_ITEMS);
    }
    let rules: [(&str, Holds); 5] = [
        (
            "operator must be Exists when 'key' is empty, which means 'match all values and all keys'",
            |t| !t["key"].is_null() || t["operator"] == "Exists",
        ),
        (
            "effect must be 'NoExecute' when 'tolerationSeconds' is set",
            |t| t["tolerationSeconds"].is_null() || t["effect"] == "NoExecute",
        ),
        (
            "supported toleration values: 'Equal'(default), 'Exists'",
            |t| t["operator"].is_null() || t["operator"] == "Equal" || t["operator"] == "Exists",
        ),
        ("a value must be empty when 'operator' is 'Exists'", |t| {
            t["operator"] != "Exists" || t["value"].is_null()
        }),
        (
            "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
            |t| t["effect"].as_str().is_none_or(|x| EFFECTS.contains(&x)),
        ),
    ];
    for (message, holds) in rules {
        if !list.iter().all(holds) {
            invalid(e, "spec.tolerations", &json!("array"), message);
        }
    }
}

/// A LocalQueue's spec (`old`: the stored spec on an update).
pub(crate) fn local_queue(spec: &Value, old: Option<&Value>, e: &mut Errors) {
    match spec["clusterQueue"].as_str().filter(|c| !c.is_empty()) {
        None => required(e, "spec.clusterQueue"),
        Some(cq) => subdomain(cq, "spec.clusterQueue", e),
    }
    if let Some(old) = old
        && old["clusterQueue"] != spec["clusterQueue"]
    {
        invalid(
            e,
            "spec.clusterQueue",
            &json!("string"),
            "field is immutable",
        );
    }
    one_of(e, spec, "spec", "stopPolicy", &STOP_POLICIES);
    non_negative(e, &spec["fairSharing"], "spec.fairSharing", "weight");
}
