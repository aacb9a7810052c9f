//! A queue plan as Kueue objects (docs/queues.md, "Kueue"): one ResourceFlavor per GPU model,
//! one ClusterQueue per team in the plan's cohort (`nominalQuota` = the guarantee,
//! `borrowingLimit` = limit − guarantee, a serving team lends nothing), a `<cohort>-shared`
//! ClusterQueue that holds the rest of the fleet for the teams to borrow (no namespace submits
//! to it), the off-peak ClusterQueue outside the cohort with the GPUs and `stopPolicy` of the
//! instant ([`super::clock::state_at`]), and LocalQueues `<cohort>` and the off-peak queue's name
//! in each team's namespace. Every object carries tessera's labels; [`diff`] says what changes
//! between an object's spec and the plan's, leaf by leaf; [`schedule`] writes the manifests of
//! the CronJobs that re-apply the window state at each window edge, in the plan's time zone.
//!
//! Pure: objects as JSON values, no I/O. What it does not do: talk to the API server
//! (`kubernetes::kueue` does), decide quotas (the plan has them) or schedule workloads.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tessera_core::mig::plan_queues::{DemandClass, ModelGpus, QueuePlan};

use super::clock::{self, OffpeakState};
pub use crate::kubernetes::kueue::{GROUP, KueueKind, VERSION};

/// The resource the quotas are of.
pub const GPU: &str = "nvidia.com/gpu";
/// The label every tessera-owned object carries (and the only objects tessera changes).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "tessera");
/// The label naming the plan's cohort, so that two plans' objects stay apart.
pub const COHORT_LABEL: &str = "tessera.io/queue-cohort";
/// The GPU Operator's (GPU feature discovery's) label of a node's GPU model.
pub const PRODUCT_LABEL: &str = "nvidia.com/gpu.product";

/// One object the plan wants.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub kind: KueueKind,
    pub namespace: Option<String>,
    pub name: String,
    pub spec: Value,
}

impl Desired {
    /// `Kind name` or `Kind namespace/name`.
    pub fn id(&self) -> String {
        crate::kubernetes::kueue::id(self.kind, self.namespace.as_deref(), &self.name)
    }
}

/// tessera's labels of a plan's objects.
pub fn labels(cohort: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
        (COHORT_LABEL.to_string(), cohort.to_string()),
    ])
}

/// The ResourceFlavor of a GPU model: `<cohort>-` and the model in lower case, other characters
/// as `-` (a DNS subdomain of at most 253 characters).
pub fn flavor_name(cohort: &str, model: &str) -> String {
    let mut s = format!("{cohort}-");
    for c in model.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            s.push(c);
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    let s = s.trim_end_matches('-');
    s.chars().take(253).collect::<String>()
}

/// The ClusterQueue of a team.
pub fn team_queue(cohort: &str, team: &str) -> String {
    format!("{cohort}-{team}")
}

/// The ClusterQueue holding the fleet's unguaranteed GPUs.
pub fn shared_queue(cohort: &str) -> String {
    format!("{cohort}-shared")
}

fn flavors(plan: &QueuePlan, quota: impl Fn(&str) -> Value) -> Value {
    let flavors: Vec<Value> = plan
        .capacity
        .iter()
        .map(|m| {
            json!({
                "name": flavor_name(&plan.cohort, &m.model),
                "resources": [ quota(&m.model) ],
            })
        })
        .collect();
    json!([{ "coveredResources": [GPU], "flavors": flavors }])
}

fn gpus_of(list: &[ModelGpus], model: &str) -> u32 {
    list.iter().find(|m| m.model == model).map_or(0, |m| m.gpus)
}

fn matching(names: &[&str]) -> Value {
    json!({ "matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "In", "values": names,
    }]})
}

/// Every object of `plan` as of `at`, in creation order, with the off-peak queue's state; an
/// error names a plan that cannot be written as Kueue objects.
pub fn desired(
    plan: &QueuePlan,
    at: DateTime<Utc>,
) -> Result<(Vec<Desired>, Option<OffpeakState>), String> {
    let state = match &plan.offpeak {
        Some(o) => Some(clock::state_at(o, clock::zone(o)?, at)),
        None => None,
    };
    let mut out = Vec::new();
    for m in &plan.capacity {
        let mut spec = json!({});
        if m.model != crate::advisor::offpeak::UNKNOWN_MODEL {
            spec["nodeLabels"] = json!({ PRODUCT_LABEL: m.model.replace(' ', "-") });
        }
        out.push(Desired {
            kind: KueueKind::ResourceFlavor,
            namespace: None,
            name: flavor_name(&plan.cohort, &m.model),
            spec,
        });
    }
    let cq = |name: String, spec: Value| Desired {
        kind: KueueKind::ClusterQueue,
        namespace: None,
        name,
        spec,
    };
    for t in &plan.teams {
        let serving = t.class == DemandClass::Serving;
        let groups = flavors(plan, |model| {
            let q = t.quotas.iter().find(|q| q.model == model);
            let (g, l) = q.map_or((0, 0), |q| (q.guarantee, q.limit.max(q.guarantee)));
            let mut r = json!({ "name": GPU, "nominalQuota": g.to_string(),
                                "borrowingLimit": (l - g).to_string() });
            if serving {
                r["lendingLimit"] = json!("0");
            }
            r
        });
        out.push(cq(
            team_queue(&plan.cohort, &t.team),
            json!({ "cohortName": plan.cohort, "namespaceSelector": matching(&[&t.team]),
                    "resourceGroups": groups }),
        ));
    }
    let window = |model: &str| state.as_ref().map_or(0, |s| gpus_of(&s.gpus, model));
    let shared = flavors(plan, |model| {
        let guaranteed: u32 = plan
            .teams
            .iter()
            .flat_map(|t| &t.quotas)
            .filter(|q| q.model == model)
            .map(|q| q.guarantee)
            .sum();
        let free = gpus_of(&plan.capacity, model).saturating_sub(guaranteed + window(model));
        json!({ "name": GPU, "nominalQuota": free.to_string(), "borrowingLimit": "0" })
    });
    out.push(cq(
        shared_queue(&plan.cohort),
        json!({ "cohortName": plan.cohort,
                // Every namespace has this label: no namespace submits here; it only lends.
                "namespaceSelector": { "matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "DoesNotExist" }] },
                "resourceGroups": shared }),
    ));
    let teams: Vec<&str> = plan.teams.iter().map(|t| t.team.as_str()).collect();
    if let (Some(o), Some(s)) = (&plan.offpeak, &state) {
        out.push(cq(
            o.queue.clone(),
            json!({ "namespaceSelector": matching(&teams),
                    "stopPolicy": s.stop.as_str(),
                    "resourceGroups": flavors(plan, |model| json!({
                        "name": GPU, "nominalQuota": window(model).to_string() })) }),
        ));
    }
    for t in &plan.teams {
        let mut local = vec![(plan.cohort.clone(), team_queue(&plan.cohort, &t.team))];
        if let Some(o) = &plan.offpeak {
            local.push((o.queue.clone(), o.queue.clone()));
        }
        for (name, target) in local {
            out.push(Desired {
                kind: KueueKind::LocalQueue,
                namespace: Some(t.team.clone()),
                name,
                spec: json!({ "clusterQueue": target }),
            });
        }
    }
    Ok((out, state))
}

/// The objects a window edge changes: the shared and the off-peak ClusterQueues.
pub fn window_objects(plan: &QueuePlan, all: Vec<Desired>) -> Vec<Desired> {
    let shared = shared_queue(&plan.cohort);
    let offpeak = plan.offpeak.as_ref().map(|o| o.queue.clone());
    all.into_iter()
        .filter(|d| {
            d.kind == KueueKind::ClusterQueue
                && (d.name == shared || Some(&d.name) == offpeak.as_ref())
        })
        .collect()
}

fn leaves(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&p, x, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                leaves(&format!("{prefix}[{i}]"), x, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// The leaves of the spec fields the plan sets that differ (`spec.a.b: old -> new`, `(none)`
/// where absent); empty when `current` already says what `want` says. Fields the plan does not
/// set (what Kueue defaults, what others added) are not compared: an update keeps them.
/// Quantities are compared as written (`"4"` and `4` are the same).
pub fn diff(current: &Value, want: &Value) -> Vec<String> {
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    if let Some(want) = want.as_object() {
        for (key, w) in want {
            let path = format!("spec.{key}");
            leaves(&path, w, &mut b);
            if let Some(c) = current.get(key) {
                leaves(&path, c, &mut a);
            }
        }
    }
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            let v = |m: &BTreeMap<String, String>| {
                m.get(k).cloned().unwrap_or_else(|| "(none)".to_string())
            };
            format!("{k}: {} -> {}", v(&a), v(&b))
        })
        .collect()
}

/// Where the window-edge CronJobs run and what they run.
#[derive(Debug, Clone)]
pub struct ScheduleParams {
    pub namespace: String,
    pub image: String,
    /// The plan file's text (put in a ConfigMap the CronJobs mount).
    pub plan_text: String,
}

/// The manifests (one YAML stream) of the window-edge CronJobs: a ConfigMap with the plan, a
/// ServiceAccount allowed to read and update ClusterQueues and to write Events, and one CronJob
/// per edge time (`timeZone` = the plan's, so the API server's CronJob controller follows
/// daylight saving) running `tessera queue edge`, which re-applies the state of the moment.
pub fn schedule(plan: &QueuePlan, p: &ScheduleParams) -> Result<String, String> {
    let Some(o) = &plan.offpeak else {
        return Err("the plan has no off-peak queue: no window edges to schedule".into());
    };
    clock::zone(o)?;
    let name = format!("{}-queue-edges", plan.cohort);
    let mut meta_labels = labels(&plan.cohort);
    meta_labels.insert("app.kubernetes.io/component".into(), "queue-edges".into());
    let meta = |n: &str, ns: bool| {
        let mut m = json!({ "name": n, "labels": meta_labels });
        if ns {
            m["namespace"] = json!(p.namespace);
        }
        m
    };
    let mut docs = vec![
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(&name, true),
                "data": { "plan.yaml": p.plan_text } }),
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(&name, true) }),
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": meta(&name, false),
                "rules": [
                    { "apiGroups": [GROUP], "resources": ["clusterqueues"],
                      "verbs": ["get", "list", "update"] },
                    { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"] },
                ] }),
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": meta(&name, false),
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
                "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": p.namespace }] }),
    ];
    for (i, e) in clock::edges(o).iter().enumerate() {
        docs.push(json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": meta(&format!("{name}-{}", i + 1), true),
            "spec": {
                "schedule": e.cron(),
                "timeZone": o.timezone,
                "concurrencyPolicy": "Replace",
                "startingDeadlineSeconds": 300,
                "successfulJobsHistoryLimit": 1,
                "failedJobsHistoryLimit": 3,
                "jobTemplate": { "spec": { "backoffLimit": 3, "activeDeadlineSeconds": 300,
                    "template": { "metadata": { "labels": meta_labels }, "spec": {
                        "serviceAccountName": name,
                        "restartPolicy": "OnFailure",
                        "containers": [{
                            "name": "edge", "image": p.image,
                            "args": ["queue", "edge", "/etc/tessera/plan.yaml", "--yes", "--audit-log", "-"],
                            "volumeMounts": [{ "name": "plan", "mountPath": "/etc/tessera", "readOnly": true }],
                        }],
                        "volumes": [{ "name": "plan", "configMap": { "name": name } }],
                    } } } },
            },
        }));
    }
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&d).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::mig::plan_queues::{
        EndOfWindow, ModelQuota, OffpeakQueue, QueueRules, QueueWindow, TeamQueue,
    };

    const M: &str = "NVIDIA H100 80GB HBM3";

    fn gpus(n: u32) -> Vec<ModelGpus> {
        vec![ModelGpus {
            model: M.into(),
            gpus: n,
        }]
    }

    fn plan() -> QueuePlan {
        let team = |team: &str, class, guarantee, limit| TeamQueue {
            team: team.into(),
            class,
            quotas: vec![ModelQuota {
                model: M.into(),
                guarantee,
                limit,
                measured: None,
            }],
        };
        QueuePlan {
            cohort: "tessera".into(),
            rules: QueueRules {
                guarantee_quantile: 0.05,
                limit_quantile: 0.95,
                serving_share: 0.9,
            },
            capacity: gpus(8),
            teams: vec![
                team("serving", DemandClass::Serving, 3, 3),
                team("research", DemandClass::JobLike, 0, 5),
            ],
            offpeak: Some(OffpeakQueue {
                queue: "tessera-offpeak".into(),
                timezone: "UTC".into(),
                floor: gpus(1),
                windows: vec![QueueWindow {
                    days: vec![],
                    start: "20:00".into(),
                    hours: 8,
                    gpus: gpus(7),
                }],
                end: EndOfWindow::Finish,
            }),
        }
    }

    fn nominal(objs: &[Desired], name: &str) -> String {
        let o = objs.iter().find(|d| d.name == name).unwrap();
        o.spec["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn the_cohorts_quotas_add_up_to_the_fleet_and_a_window_never_goes_below_zero() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let (day, _) = desired(&plan(), at("2026-11-02T12:00:00Z")).unwrap();
        assert_eq!(nominal(&day, "tessera-serving"), "3");
        assert_eq!(nominal(&day, "tessera-shared"), "4"); // 8 - 3 - 1
        assert_eq!(nominal(&day, "tessera-offpeak"), "1");
        // In the window the plan promises 7, more than 8 - 3: the shared queue is 0, not -2.
        let (night, state) = desired(&plan(), at("2026-11-02T21:00:00Z")).unwrap();
        assert_eq!(state.unwrap().window, Some(0));
        assert_eq!(nominal(&night, "tessera-shared"), "0");
        assert_eq!(nominal(&night, "tessera-offpeak"), "7");
        assert_eq!(
            flavor_name("tessera", "NVIDIA A100-SXM4-80GB"),
            "tessera-nvidia-a100-sxm4-80gb"
        );
        let kinds: Vec<KueueKind> = day.iter().map(|d| d.kind).collect();
        let mut sorted = kinds.clone();
        sorted.sort();
        assert_eq!(
            kinds, sorted,
            "flavors, then ClusterQueues, then LocalQueues"
        );
    }

    #[test]
    fn the_diff_names_changed_leaves_and_ignores_what_kueue_defaults() {
        let want = json!({ "a": { "b": "1" }, "l": ["x"] });
        let have = json!({ "a": { "b": 1 }, "l": ["x"], "queueingStrategy": "BestEffortFIFO" });
        assert!(diff(&have, &want).is_empty(), "{:?}", diff(&have, &want));
        let have = json!({ "a": { "b": "2", "c": "3" }, "extra": true });
        assert_eq!(
            diff(&have, &want),
            [
                "spec.a.b: 2 -> 1",
                "spec.a.c: 3 -> (none)",
                "spec.l[0]: (none) -> x"
            ]
        );
    }
}
