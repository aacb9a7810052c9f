//! What every scheduler's queue objects share (docs/queues.md, "Kueue" and "Volcano"): the
//! object a plan wants ([`Desired`]; `kueue` and `volcano` make them, `apply` picks the
//! scheduler's), tessera's labels, the off-peak queue's state of an instant, the diff
//! of an object's spec against the plan's, leaf by leaf ([`diff`]), and the manifests of the
//! CronJobs that re-apply the window state at each window edge ([`schedule`]).
//!
//! Pure: objects as JSON values, no I/O. What it does not do: talk to the API server
//! (`kubernetes::batch` does), decide quotas (the plan has them) or schedule workloads.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tessera_core::mig::plan_queues::{ModelGpus, QueuePlan};

use super::clock::{self, OffpeakState};
pub use crate::kubernetes::batch::{QueueKind, Scheduler};

/// The resource the quotas are of.
pub const GPU: &str = "nvidia.com/gpu";
/// The label every tessera-owned object carries (and the only objects tessera changes).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "tessera");
/// The label naming the plan's cohort, so that two plans' objects stay apart.
pub const COHORT_LABEL: &str = "tessera.io/queue-cohort";
/// One object the plan wants.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    pub kind: QueueKind,
    pub namespace: Option<String>,
    pub name: String,
    pub spec: Value,
}

impl Desired {
    /// `Kind name` or `Kind namespace/name`.
    pub fn id(&self) -> String {
        crate::kubernetes::batch::id(self.kind, self.namespace.as_deref(), &self.name)
    }
}

/// tessera's labels of a plan's objects.
pub fn labels(cohort: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
        (COHORT_LABEL.to_string(), cohort.to_string()),
    ])
}

/// The queue of a team (a Kueue ClusterQueue, a Volcano Queue).
pub fn team_queue(cohort: &str, team: &str) -> String {
    format!("{cohort}-{team}")
}

/// The off-peak queue's state at `at` (none without an off-peak queue); an error names a time
/// zone that is not one.
pub fn offpeak_state(plan: &QueuePlan, at: DateTime<Utc>) -> Result<Option<OffpeakState>, String> {
    match &plan.offpeak {
        Some(o) => Ok(Some(clock::state_at(o, clock::zone(o)?, at))),
        None => Ok(None),
    }
}

/// The GPUs of `model` in `list` (0 when absent).
pub fn gpus_of(list: &[ModelGpus], model: &str) -> u32 {
    list.iter().find(|m| m.model == model).map_or(0, |m| m.gpus)
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
/// ServiceAccount allowed to read and update the scheduler's queues (Kueue's ClusterQueues,
/// Volcano's Queues) and to write Events, and one CronJob per edge time (`timeZone` = the
/// plan's, so the API server's CronJob controller follows daylight saving) running `tessera
/// queue edge`, which re-applies the state of the moment.
pub fn schedule(s: Scheduler, plan: &QueuePlan, p: &ScheduleParams) -> Result<String, String> {
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
                    { "apiGroups": [s.group()], "resources": [s.edge_kind().plural()],
                      "verbs": ["get", "list", "update"] },
                    { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"] },
                ] }),
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": meta(&name, false),
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
                "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": p.namespace }] }),
    ];
    let mut args = vec![
        "queue",
        "edge",
        "/etc/tessera/plan.yaml",
        "--yes",
        "--audit-log",
        "-",
    ];
    if s != Scheduler::Kueue {
        args.extend(["--scheduler", "volcano"]);
    }
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
                            "args": args,
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

/// The plan the unit tests of `kueue` and `volcano` share.
#[cfg(test)]
pub(crate) mod fixture {
    use tessera_core::mig::plan_queues::{
        DemandClass, EndOfWindow, ModelGpus, ModelQuota, OffpeakQueue, QueuePlan, QueueRules,
        QueueWindow, TeamQueue,
    };

    const M: &str = "NVIDIA H100 80GB HBM3";

    fn gpus(n: u32) -> Vec<ModelGpus> {
        vec![ModelGpus {
            model: M.into(),
            gpus: n,
        }]
    }

    /// 8 H100s; serving guaranteed 3 (limit 3), research job-like up to 5; off-peak: the
    /// floor 1, 7 GPUs daily 20:00 UTC for 8 hours, ending by `end`.
    pub(crate) fn plan(end: EndOfWindow) -> QueuePlan {
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
                end,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_names_changed_leaves_and_ignores_what_the_scheduler_defaults() {
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
