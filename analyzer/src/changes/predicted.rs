//! Predicted beside realized (`tessera report --plan FILE`, docs/report.md "Changes"): the
//! plan that made a change keeps what a replay predicted when it was made (its `prediction`
//! block, docs/plan.md); the report sets it beside what the equal periods around the change
//! measured, and explains a large difference from the data: a node of the plan that stopped
//! reporting, demand that grew, a workload that moved to a GPU the plan does not use.
//!
//! Compared per hour, so periods of other lengths compare: GPUs freed (predicted: GPUs before −
//! after; realized: the fall of the mean GPUs in use) and energy saved in kW (predicted:
//! (kWh before − after) ÷ the replayed hours; realized: the fall of kWh ÷ the compared hours).
//! Work per GPU-hour before and after stands beside them where a source counts work (set by
//! `super::add_work`, not here). Pure: values in, values out; the command reads the plan.

use std::collections::BTreeSet;

use chrono::DateTime;
use tessera_core::mig::plan::TesseraPlan;
use tessera_core::mig::plan_sections::Prediction;

pub use super::model::PredictedVsRealized;
use super::model::{ChangeEvent, Comparison};

/// A difference is large above this many GPUs, or this share of the predicted GPUs freed,
/// whichever is more.
pub const LARGE_GPUS: f64 = 1.0;
pub const LARGE_SHARE: f64 = 0.2;
/// A node of the plan reporting less than this share of its hours before is "down".
const NODE_DOWN_SHARE: f64 = 0.5;
/// Work (GPU-hours busy) after above this multiple of before is "demand grew".
const DEMAND_GREW: f64 = 1.2;

/// The plan a change came from, as the report needs it.
#[derive(Debug, Clone)]
pub struct PlanPrediction {
    /// The plan file, as given.
    pub file: String,
    pub prediction: Prediction,
    /// The nodes the plan names.
    pub nodes: BTreeSet<String>,
    /// The GPUs the plan places work on (`node/GPUi`).
    pub gpus: BTreeSet<String>,
    /// The end of the period the plan was made from (its `window.until`), unix ms.
    pub planned_until: Option<i64>,
}

impl PlanPrediction {
    /// What the report needs of `plan` (read from `file`): its prediction (required: made by
    /// `tessera replay --write-prediction`), the nodes it names, the GPUs it places work on
    /// (the configs' GPUs with instances or workloads, the consolidation hosts) and the end of
    /// the period it was made from.
    pub fn from_plan(
        plan: &TesseraPlan,
        file: &str,
        sources: &[String],
    ) -> Result<PlanPrediction, String> {
        let Some(prediction) = plan.prediction.clone() else {
            return Err(format!(
                "{file} has no prediction block: run `{} --write-prediction` on the period it was planned from first (docs/plan.md)",
                crate::commands::replay(file, sources, &[])
            ));
        };
        let mut nodes = BTreeSet::new();
        let mut gpus = BTreeSet::new();
        for g in plan.configs.values().flatten() {
            if let Some(n) = &g.node {
                nodes.insert(n.clone());
                if !g.instances.is_empty() || !g.workloads.is_empty() {
                    gpus.insert(format!("{n}/GPU{}", g.gpu));
                }
            }
        }
        for w in plan.workloads.values() {
            nodes.insert(w.node.clone());
        }
        for m in &plan.consolidation {
            gpus.insert(format!("{}/GPU{}", m.host.node, m.host.gpu));
            for g in std::iter::once(&m.host).chain(&m.guests) {
                nodes.insert(g.node.clone());
            }
        }
        let planned_until = plan
            .window
            .as_ref()
            .and_then(|w| DateTime::parse_from_rfc3339(&w.until).ok())
            .map(|t| t.timestamp_millis());
        Ok(PlanPrediction {
            file: file.to_string(),
            prediction,
            nodes,
            gpus,
            planned_until,
        })
    }
}

fn hours_between(from: &str, until: &str) -> Option<f64> {
    let a = DateTime::parse_from_rfc3339(from).ok()?;
    let b = DateTime::parse_from_rfc3339(until).ok()?;
    let h = (b - a).num_milliseconds() as f64 / 3.6e6;
    (h > 0.0).then_some(h)
}

/// Rounded to 3 decimals; never `-0`.
fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0 + 0.0
}

/// `node/GPU3` → its node and index (`node/GPU3/GI1` too).
fn device_gpu(d: &str) -> Option<String> {
    let (node, rest) = d.rsplit_once("/GPU").or_else(|| {
        let (head, _) = d.rsplit_once('/')?;
        head.rsplit_once("/GPU")
    })?;
    let idx: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!idx.is_empty()).then(|| format!("{node}/GPU{idx}"))
}

/// The prediction of `plan` beside the change's `comparison`, with the change's `events`.
pub fn compare(
    plan: &PlanPrediction,
    comparison: &Comparison,
    events: &[ChangeEvent],
) -> PredictedVsRealized {
    let p = &plan.prediction;
    let freed_predicted = f64::from(p.gpus_before) - f64::from(p.gpus_after);
    let fleet = &comparison.fleet;
    let freed_realized = fleet.delta.gpus_in_use.map(|d| r3(-d));
    let difference = freed_realized.map(|r| r3(r - freed_predicted));
    let replay_hours = hours_between(&p.from, &p.until);
    let kw_predicted = match (p.energy_kwh_before, p.energy_kwh_after, replay_hours) {
        (Some(b), Some(a), Some(h)) => Some(r3((b - a) / h)),
        _ => None,
    };
    let kw_realized = fleet
        .delta
        .energy_kwh
        .filter(|_| comparison.hours > 0.0)
        .map(|d| r3(-d / comparison.hours));
    let large =
        difference.is_some_and(|d| d.abs() > LARGE_GPUS.max(LARGE_SHARE * freed_predicted.abs()));
    let mut explanation = Vec::new();
    if large {
        // A node of the plan that stopped reporting after the change.
        for n in &comparison.by_node {
            if !plan.nodes.contains(&n.key) {
                continue;
            }
            let (b, a) = (n.before.gpu_hours_observed, n.after.gpu_hours_observed);
            if b > 0.0 && a < NODE_DOWN_SHARE * b {
                explanation.push(format!(
                    "node {} was down or not reporting: {:.1} GPU-hours of rows after the change, {:.1} before",
                    n.key, a, b
                ));
            }
        }
        // Demand that grew.
        if let (Some(b), Some(a)) = (fleet.before.gpu_hours_busy, fleet.after.gpu_hours_busy)
            && b > 0.0
            && a > DEMAND_GREW * b
        {
            explanation.push(format!(
                "demand grew: {:.1} GPU-hours of work after the change, {:.1} before (+{:.0}%)",
                a,
                b,
                (a / b - 1.0) * 100.0
            ));
        }
        // Workloads that moved to a GPU the plan does not use.
        for e in events.iter().filter(|e| e.kind == "move") {
            let to = e.detail.rsplit_once(" → ").map_or("", |(_, t)| t);
            let elsewhere: Vec<String> = to
                .split('+')
                .filter_map(device_gpu)
                .filter(|g| !plan.gpus.contains(g))
                .collect();
            if !plan.gpus.is_empty() && !elsewhere.is_empty() {
                explanation.push(format!(
                    "{} moved to {}, which the plan does not use",
                    e.subject,
                    elsewhere.join(", ")
                ));
            }
        }
        if explanation.is_empty() {
            explanation.push(
                "no cause found in the data (the plan's nodes reported, demand did not grow, no \
                 workload went elsewhere): the prediction itself was off"
                    .into(),
            );
        }
    } else if difference.is_some() {
        explanation.push(format!(
            "as predicted: {} GPU(s) freed, {} predicted",
            freed_realized.map_or("unknown".into(), |r| format!("{r:.1}")),
            freed_predicted
        ));
    } else {
        explanation.push("GPUs in use are unknown in the compared periods: not compared".into());
    }
    PredictedVsRealized {
        plan: plan.file.clone(),
        replayed_from: p.from.clone(),
        replayed_until: p.until.clone(),
        verdict: p.verdict.clone(),
        gpus_before_predicted: p.gpus_before,
        gpus_after_predicted: p.gpus_after,
        gpus_freed_predicted: freed_predicted,
        gpus_freed_realized: freed_realized,
        gpus_freed_difference: difference,
        energy_kw_saved_predicted: kw_predicted,
        energy_kw_saved_realized: kw_realized,
        large_difference: large,
        explanation,
        work_per_gpu_hour: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::changes::model::{KeyedPeriods, PeriodDelta, PeriodUsage, Side};

    fn usage(observed: f64, in_use: f64, busy: f64) -> PeriodUsage {
        PeriodUsage {
            gpus: 10,
            gpus_in_use: Some(in_use),
            gpu_hours_observed: observed,
            gpu_hours_busy: Some(busy),
            ..PeriodUsage::default()
        }
    }

    fn periods(key: &str, before: PeriodUsage, after: PeriodUsage) -> KeyedPeriods {
        let delta = PeriodDelta {
            gpus_in_use: Some(after.gpus_in_use.unwrap() - before.gpus_in_use.unwrap()),
            ..PeriodDelta::default()
        };
        KeyedPeriods {
            key: key.into(),
            before,
            after,
            delta,
        }
    }

    fn comparison(fleet: KeyedPeriods, nodes: Vec<KeyedPeriods>) -> Comparison {
        Comparison {
            hours: 10.0,
            before: Side {
                from: "a".into(),
                until: "b".into(),
            },
            after: Side {
                from: "c".into(),
                until: "d".into(),
            },
            fleet,
            by_node: nodes,
            by_team: Vec::new(),
            predicted: None,
            work: None,
            work_per_gpu_hour: Vec::new(),
        }
    }

    fn plan(after: u32) -> PlanPrediction {
        PlanPrediction {
            file: "plan.yaml".into(),
            prediction: Prediction {
                from: "2026-11-02T00:00:00Z".into(),
                until: "2026-11-03T00:00:00Z".into(),
                verdict: "safe".into(),
                gpus_before: 10,
                gpus_after: after,
                gpu_hours_freed: 0.0,
                cost_freed: None,
                energy_kwh_before: Some(24.0),
                energy_kwh_after: Some(12.0),
                failed_intervals: 0,
            },
            nodes: ["n1".to_string(), "n2".to_string()].into(),
            gpus: ["n1/GPU0".to_string(), "n1/GPU1".to_string()].into(),
            planned_until: None,
        }
    }

    fn event(subject: &str, detail: &str) -> ChangeEvent {
        ChangeEvent {
            kind: "move".into(),
            at: "t".into(),
            subject: subject.into(),
            detail: detail.into(),
        }
    }

    #[test]
    fn as_predicted_within_the_margin() {
        let c = comparison(
            periods("fleet", usage(100.0, 10.0, 10.0), usage(100.0, 2.2, 10.0)),
            vec![],
        );
        let r = compare(&plan(2), &c, &[]);
        assert!(!r.large_difference, "{r:?}");
        assert_eq!(r.gpus_freed_realized, Some(7.8));
        assert_eq!(r.gpus_freed_difference, Some(-0.2));
        assert_eq!(r.energy_kw_saved_predicted, Some(0.5));
        assert!(r.explanation[0].starts_with("as predicted"), "{r:?}");
    }

    #[test]
    fn a_large_difference_is_explained_by_what_the_data_shows() {
        // Node n2 of the plan reported 20 of 50 h, work grew 50%, svc-x went to n3/GPU4.
        let c = comparison(
            periods("fleet", usage(100.0, 10.0, 10.0), usage(100.0, 6.0, 15.0)),
            vec![
                periods("n1", usage(50.0, 5.0, 5.0), usage(50.0, 3.0, 7.0)),
                periods("n2", usage(50.0, 5.0, 5.0), usage(20.0, 3.0, 8.0)),
                periods("n9", usage(50.0, 5.0, 5.0), usage(0.0, 0.0, 0.0)),
            ],
        );
        let events = [
            event("team/svc-x", "n1/GPU2 → n3/GPU4"),
            event("team/svc-y", "n1/GPU3 → n1/GPU1/GI2"),
        ];
        let r = compare(&plan(2), &c, &events);
        assert!(r.large_difference);
        assert_eq!(r.gpus_freed_difference, Some(-4.0));
        let text = r.explanation.join("\n");
        assert!(text.contains("node n2 was down"), "{text}");
        assert!(!text.contains("n9"), "not a node of the plan: {text}");
        assert!(
            text.contains("demand grew") && text.contains("+50%"),
            "{text}"
        );
        assert!(
            text.contains("team/svc-x moved to n3/GPU4, which the plan does not use"),
            "{text}"
        );
        assert!(!text.contains("svc-y"), "moved where the plan said: {text}");
    }

    #[test]
    fn a_large_difference_without_a_cause_says_the_prediction_was_off() {
        let c = comparison(
            periods("fleet", usage(100.0, 10.0, 10.0), usage(100.0, 9.0, 10.0)),
            vec![periods("n1", usage(50.0, 5.0, 5.0), usage(50.0, 4.5, 5.0))],
        );
        let r = compare(&plan(2), &c, &[]);
        assert!(r.large_difference);
        assert!(
            r.explanation[0].contains("the prediction itself was off"),
            "{r:?}"
        );
    }

    #[test]
    fn devices_name_their_gpu() {
        assert_eq!(device_gpu("gpu-a/GPU3").as_deref(), Some("gpu-a/GPU3"));
        assert_eq!(device_gpu("gpu-a/GPU3/GI2").as_deref(), Some("gpu-a/GPU3"));
        assert_eq!(
            device_gpu("gpu.a/x/GPU12").as_deref(),
            Some("gpu.a/x/GPU12")
        );
        assert_eq!(device_gpu("nothing"), None);
    }
}
