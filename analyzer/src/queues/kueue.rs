//! A queue plan as Kueue objects (docs/queues.md, "Kueue"): one ResourceFlavor per GPU model,
//! one ClusterQueue per team in the plan's cohort (`nominalQuota` = the guarantee,
//! `borrowingLimit` = limit − guarantee, a serving team lends nothing), a `<cohort>-shared`
//! ClusterQueue that holds the rest of the fleet for the teams to borrow (no namespace submits
//! to it), the off-peak ClusterQueue outside the cohort with the GPUs and `stopPolicy` of the
//! instant ([`super::clock::state_at`]), and LocalQueues `<cohort>` and the off-peak queue's name
//! in each team's namespace. Every object carries tessera's labels (`super::objects` has what
//! Kueue and Volcano share: the labels, the diff, the edge CronJobs).
//!
//! Pure: objects as JSON values, no I/O. What it does not do: talk to the API server
//! (`kubernetes::batch` does), decide quotas (the plan has them) or schedule workloads.

use serde_json::{Value, json};
use tessera_core::mig::plan_queues::{DemandClass, QueuePlan};

use super::clock::OffpeakState;
use super::objects::{Desired, GPU, QueueKind, gpus_of, team_queue};

/// The GPU Operator's (GPU feature discovery's) label of a node's GPU model.
pub const PRODUCT_LABEL: &str = "nvidia.com/gpu.product";

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

fn matching(names: &[&str]) -> Value {
    json!({ "matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "In", "values": names,
    }]})
}

/// Every Kueue object of `plan` with the off-peak queue in `state`, in creation order.
pub fn desired(plan: &QueuePlan, state: Option<&OffpeakState>) -> Vec<Desired> {
    let mut out = Vec::new();
    for m in &plan.capacity {
        let mut spec = json!({});
        if m.model != crate::advisor::offpeak::UNKNOWN_MODEL {
            spec["nodeLabels"] = json!({ PRODUCT_LABEL: m.model.replace(' ', "-") });
        }
        out.push(Desired {
            kind: QueueKind::ResourceFlavor,
            namespace: None,
            name: flavor_name(&plan.cohort, &m.model),
            spec,
        });
    }
    let cq = |name: String, spec: Value| Desired {
        kind: QueueKind::ClusterQueue,
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
    let window = |model: &str| state.map_or(0, |s| gpus_of(&s.gpus, model));
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
    if let (Some(o), Some(s)) = (&plan.offpeak, state) {
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
                kind: QueueKind::LocalQueue,
                namespace: Some(t.team.clone()),
                name,
                spec: json!({ "clusterQueue": target }),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::objects::{fixture::plan, offpeak_state};
    use super::*;
    use chrono::{DateTime, Utc};
    use tessera_core::mig::plan_queues::EndOfWindow;

    fn at_(
        plan: &QueuePlan,
        t: DateTime<Utc>,
    ) -> Result<(Vec<Desired>, Option<OffpeakState>), String> {
        let state = offpeak_state(plan, t)?;
        Ok((desired(plan, state.as_ref()), state))
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
        let (day, _) = at_(&plan(EndOfWindow::Finish), at("2026-11-02T12:00:00Z")).unwrap();
        assert_eq!(nominal(&day, "tessera-serving"), "3");
        assert_eq!(nominal(&day, "tessera-shared"), "4"); // 8 - 3 - 1
        assert_eq!(nominal(&day, "tessera-offpeak"), "1");
        // In the window the plan promises 7, more than 8 - 3: the shared queue is 0, not -2.
        let (night, state) = at_(&plan(EndOfWindow::Finish), at("2026-11-02T21:00:00Z")).unwrap();
        assert_eq!(state.unwrap().window, Some(0));
        assert_eq!(nominal(&night, "tessera-shared"), "0");
        assert_eq!(nominal(&night, "tessera-offpeak"), "7");
        assert_eq!(
            flavor_name("tessera", "NVIDIA A100-SXM4-80GB"),
            "tessera-nvidia-a100-sxm4-80gb"
        );
        let kinds: Vec<QueueKind> = day.iter().map(|d| d.kind).collect();
        let mut sorted = kinds.clone();
        sorted.sort();
        assert_eq!(
            kinds, sorted,
            "flavors, then ClusterQueues, then LocalQueues"
        );
    }
}
