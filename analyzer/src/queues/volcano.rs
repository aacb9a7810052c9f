//! A queue plan as Volcano Queues (docs/queues.md, "Volcano"; `scheduling.volcano.sh/v1beta1`,
//! cluster-scoped): one Queue per team, `<cohort>-<team>`, with `capability` = the team's limit
//! (a hard cap), `deserved` = its guarantee (what it is entitled to; what it runs beyond that is
//! borrowed and reclaimable) and, for a serving team, `guarantee.resource` = its guarantee (held
//! for it, never lent); and the off-peak Queue with the window's GPUs (or the floor) as
//! capability, deserved and guarantee, `reclaimable: false` except while the end-of-window
//! policy drains it (then Volcano's reclaim may evict its jobs above the floor when other queues
//! wait). Every field is written in every state, so that an update never leaves a stale
//! `guarantee` above a lowered `deserved`, which Volcano's webhook refuses.
//!
//! Volcano counts a resource name, not a GPU model: quotas are the sums over the plan's models
//! of `nvidia.com/gpu` (the apply says so when the plan has several). Volcano has no cohort and
//! no namespace binding: idle GPUs are shared between all queues up to their capabilities, and
//! any namespace may name any queue (`spec.queue` of a Volcano Job or PodGroup, or the pod
//! annotation `scheduling.volcano.sh/queue-name`).
//!
//! Pure: objects as JSON values, no I/O. What it does not do: talk to the API server, use
//! hierarchical queues (`spec.parent`), set `weight` (Volcano's webhook defaults it to 1), or
//! decide quotas.

use serde_json::{Value, json};
use tessera_core::mig::plan_queues::{DemandClass, ModelGpus, QueuePlan};

use super::clock::{OffpeakState, Stop};
use super::objects::{Desired, GPU, QueueKind, team_queue};

fn total(list: &[ModelGpus]) -> u32 {
    list.iter().map(|m| m.gpus).sum()
}

fn gpus(n: u32) -> Value {
    json!({ GPU: n.to_string() })
}

fn queue(
    name: String,
    capability: u32,
    deserved: u32,
    guarantee: u32,
    reclaimable: bool,
) -> Desired {
    Desired {
        kind: QueueKind::VolcanoQueue,
        namespace: None,
        name,
        spec: json!({
            "capability": gpus(capability),
            "deserved": gpus(deserved),
            "guarantee": { "resource": gpus(guarantee) },
            "reclaimable": reclaimable,
        }),
    }
}

/// Every Volcano Queue of `plan` with the off-peak queue in `state`: the teams' queues, then
/// the off-peak queue.
pub fn desired(plan: &QueuePlan, state: Option<&OffpeakState>) -> Vec<Desired> {
    let mut out = Vec::new();
    let mut held = 0;
    for t in &plan.teams {
        let g: u32 = t.quotas.iter().map(|q| q.guarantee).sum();
        let l: u32 = t.quotas.iter().map(|q| q.limit.max(q.guarantee)).sum();
        let serving = t.class == DemandClass::Serving;
        let reserved = if serving { g } else { 0 };
        held += reserved;
        out.push(queue(
            team_queue(&plan.cohort, &t.team),
            l,
            g,
            reserved,
            true,
        ));
    }
    if let (Some(o), Some(s)) = (&plan.offpeak, state) {
        let w = total(&s.gpus);
        // What the window may hold for itself: never more than the serving teams leave.
        let reserved = w.min(total(&plan.capacity).saturating_sub(held));
        let drain = s.stop == Stop::HoldAndDrain;
        out.push(queue(o.queue.clone(), w, w, reserved, drain));
    }
    out
}

/// The note the apply prints for a plan of several GPU models (Volcano's quotas count
/// `nvidia.com/gpu` of every model together); none for one model.
pub fn models_note(plan: &QueuePlan) -> Option<String> {
    (plan.capacity.len() > 1).then(|| {
        let models: Vec<&str> = plan.capacity.iter().map(|m| m.model.as_str()).collect();
        format!(
            "Volcano counts {GPU} of every model together: each queue's quota is the sum over {} (a per-model cap needs one resource name per model in the device plugin)",
            models.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queues::objects::{fixture::plan, offpeak_state};
    use chrono::{DateTime, Utc};
    use tessera_core::mig::plan_queues::EndOfWindow;

    fn all(p: &QueuePlan, t: DateTime<Utc>) -> Result<(Vec<Desired>, ()), String> {
        Ok((desired(p, offpeak_state(p, t)?.as_ref()), ()))
    }

    fn spec<'a>(objs: &'a [Desired], name: &str) -> &'a Value {
        &objs.iter().find(|d| d.name == name).unwrap().spec
    }

    #[test]
    fn teams_get_caps_and_shares_and_the_window_never_reserves_what_serving_holds() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let (day, _) = all(&plan(EndOfWindow::Finish), at("2026-11-02T12:00:00Z")).unwrap();
        assert_eq!(day.len(), 3);
        let s = spec(&day, "tessera-serving");
        assert_eq!(s["capability"][GPU], "3");
        assert_eq!(s["deserved"][GPU], "3");
        assert_eq!(s["guarantee"]["resource"][GPU], "3");
        let r = spec(&day, "tessera-research");
        assert_eq!(
            (
                r["capability"][GPU].as_str(),
                r["guarantee"]["resource"][GPU].as_str()
            ),
            (Some("5"), Some("0"))
        );
        let o = spec(&day, "tessera-offpeak");
        assert_eq!(
            (o["capability"][GPU].as_str(), o["reclaimable"].as_bool()),
            (Some("1"), Some(false))
        );
        // In the window: 7 GPUs capability, but only 8 - 3 can be held for it.
        let (night, _) = all(&plan(EndOfWindow::Finish), at("2026-11-02T21:00:00Z")).unwrap();
        let o = spec(&night, "tessera-offpeak");
        assert_eq!(o["capability"][GPU], "7");
        assert_eq!(o["deserved"][GPU], "7");
        assert_eq!(o["guarantee"]["resource"][GPU], "5");
        // A drain policy makes the queue reclaimable in its drain minutes only.
        let p = plan(EndOfWindow::Drain { notice_minutes: 30 });
        let (drain, _) = all(&p, at("2026-11-03T04:35:00Z")).unwrap();
        assert_eq!(spec(&drain, "tessera-offpeak")["reclaimable"], true);
        let (after, _) = all(&p, at("2026-11-03T05:00:00Z")).unwrap();
        assert_eq!(spec(&after, "tessera-offpeak")["reclaimable"], false);
        assert!(models_note(&p).is_none());
    }
}
