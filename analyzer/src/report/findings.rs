//! The advisor's findings in the report: the idle-loaded models and the consolidation plan
//! priced, the off-peak windows and the off-peak baseline (GPUs free around the clock), each
//! read from the findings' typed evidence ([`Evidence`]), never from JSON keys.
//!
//! This module re-prices findings; it does not detect anything (the advisor does) or read rows.

use super::model::{
    AllocatedDevice, AllocationSummary, BaselineModel, ConsolidationStep, IdleModel, IdlePower,
    MovedBy, OffpeakBaseline, OffpeakWindow,
};
use super::{MONTH_HOURS, r2, r3};
use crate::advisor::evidence::{AllocatedEvidence, OffpeakEvidence, PlanGpu};
use crate::advisor::scheduler::{self, Scheduler};
use crate::advisor::{Analysis, Evidence};
use crate::prices::Prices;

/// A process's team: its namespace, else its Slurm job (the one rule, `crate::owners`).
pub(super) use crate::owners::team_of;

/// The energy `gpu_hours` of the finding's GPU draw at its idle power, kWh and its price (both
/// `None` when the GPU's idle power is unknown).
fn wasted_energy(
    f: &crate::advisor::Finding,
    gpu_hours: f64,
    power: &IdlePower,
    prices: &Prices,
) -> (Option<f64>, Option<f64>) {
    let kwh = power
        .of(f.entity.node.as_deref(), f.entity.gpu)
        .map(|w| r3(gpu_hours * w / 1000.0));
    (kwh, kwh.map(|k| r2(k * prices.kwh)))
}

/// The idle-loaded models, priced (GPU-hours, and their energy at the GPU's idle power), most
/// GiB-hours held idle first.
pub(super) fn idle_models(a: &Analysis, prices: &Prices, power: &IdlePower) -> Vec<IdleModel> {
    let mut v: Vec<IdleModel> = a
        .findings
        .iter()
        .filter_map(|f| match &f.evidence {
            Evidence::IdleLoaded(e) => Some((f, e)),
            _ => None,
        })
        .map(|(f, e)| {
            let reclaim = e.reclaimable_gpu_hours;
            let (wasted_energy_kwh, wasted_energy_cost) = wasted_energy(f, reclaim, power, prices);
            IdleModel {
                finding_id: f.id.clone(),
                what: f.entity.label(),
                team: team_of(f.entity.namespace.as_deref(), f.entity.slurm_job.as_deref()),
                memory_max_gib: e.memory_max_gib,
                idle_hours: e.idle_hours,
                idle_share: e.idle_share,
                idle_gib_hours: e.idle_gib_hours,
                reclaimable_gpu_hours: reclaim,
                wasted_cost: r2(reclaim * prices.gpu_hour),
                wasted_energy_kwh,
                wasted_energy_cost,
                action: f.action.clone(),
            }
        })
        .collect();
    v.sort_by(|a, b| {
        b.idle_gib_hours
            .total_cmp(&a.idle_gib_hours)
            .then(a.finding_id.cmp(&b.finding_id))
    });
    v
}

/// The allocated-but-unused summary (`None` when the data has no holders) and its devices,
/// priced, unused first (the detector's order).
pub(super) fn allocated(
    a: &Analysis,
    prices: &Prices,
    power: &IdlePower,
) -> (Option<AllocationSummary>, Vec<AllocatedDevice>) {
    let devices: Vec<AllocatedDevice> = a
        .findings
        .iter()
        .filter_map(|f| match &f.evidence {
            Evidence::Allocated(e) => Some((f, e)),
            _ => None,
        })
        .map(|(f, e)| {
            let (wasted_energy_kwh, wasted_energy_cost) =
                wasted_energy(f, e.wasted_gpu_hours, power, prices);
            AllocatedDevice {
                finding_id: f.id.clone(),
                what: f.entity.label(),
                team: team_of(f.entity.namespace.as_deref(), f.entity.slurm_job.as_deref()),
                kind: e.kind.clone(),
                held_hours: e.held_hours,
                unused_hours: e.unused_hours,
                activity_mean: e.activity_mean,
                wasted_gpu_hours: e.wasted_gpu_hours,
                wasted_cost: r2(e.wasted_gpu_hours * prices.gpu_hour),
                wasted_energy_kwh,
                wasted_energy_cost,
                action: f.action.clone(),
            }
        })
        .collect();
    let data = a
        .detectors
        .iter()
        .find(|d| d.id == AllocatedEvidence::DETECTOR)
        .map(|d| &d.data);
    let known = data.is_some_and(|d| d["allocation_known"] == true);
    let num = |k: &str| data.and_then(|d| d[k].as_f64()).unwrap_or(0.0);
    let summary = known.then(|| AllocationSummary {
        held_gpu_hours: num("held_gpu_hours"),
        unused_gpu_hours: num("unused_gpu_hours"),
        unused_cost: r2(num("unused_gpu_hours") * prices.gpu_hour),
        low_use_gpu_hours: num("low_use_gpu_hours"),
        devices_unused: devices.iter().filter(|d| d.kind == "unused").count(),
        devices_low_use: devices.iter().filter(|d| d.kind == "low_use").count(),
    });
    (summary, devices)
}

/// `node/GPUn`, else the GPU's UUID.
fn gpu_label(node: Option<&str>, gpu: Option<u32>, uuid: Option<&str>) -> String {
    match gpu {
        Some(g) => format!("{}/GPU{g}", node.unwrap_or("")),
        None => uuid.unwrap_or("").to_string(),
    }
}

/// The consolidation groups (one per GPU model), priced, with the moves they make.
pub(super) fn consolidation(a: &Analysis, prices: &Prices) -> Vec<ConsolidationStep> {
    let host_label = |h: &PlanGpu| gpu_label(h.node.as_deref(), h.gpu, h.uuid.as_deref());
    a.findings
        .iter()
        .filter_map(|f| match &f.evidence {
            Evidence::Consolidation(e) => Some((f, e)),
            _ => None,
        })
        .map(|(f, e)| {
            let mut moves = Vec::new();
            let mut moved_by = Vec::new();
            for group in &e.plan {
                let host = &group.host;
                let host_scheduler = group
                    .workloads
                    .iter()
                    .find(|w| w.uuid == host.uuid)
                    .map_or(Scheduler::Unknown, |w| w.scheduler);
                for w in &group.workloads {
                    if w.uuid != host.uuid {
                        let what = if w.label.is_empty() {
                            gpu_label(w.node.as_deref(), w.gpu, w.uuid.as_deref())
                        } else {
                            w.label.clone()
                        };
                        let what = format!("{what} → {}", host_label(host));
                        let node = |n: &Option<String>| n.clone().unwrap_or_default();
                        let (scheduler, by) = scheduler::moved_by(
                            w.scheduler,
                            host_scheduler,
                            &node(&w.node),
                            &node(&host.node),
                        );
                        moves.push(what.clone());
                        moved_by.push(MovedBy {
                            what,
                            scheduler,
                            by: w.moved_by.clone().unwrap_or(by),
                        });
                    }
                }
            }
            let freed_h = e.gpu_hours_freed;
            let freed = e.gpus_freed as u64;
            ConsolidationStep {
                finding_id: f.id.clone(),
                model: e.model.clone(),
                gpus_loaded: e.gpus_loaded as u64,
                gpus_needed: e.gpus_needed as u64,
                gpus_freed: freed,
                gpu_hours_freed: freed_h,
                savings: r2(freed_h * prices.gpu_hour),
                savings_per_month: r2(freed as f64 * MONTH_HOURS * prices.gpu_hour),
                moves,
                moved_by,
            }
        })
        .collect()
}

/// The off-peak windows, in the advisor's order.
pub(super) fn offpeak(a: &Analysis) -> Vec<OffpeakWindow> {
    a.findings
        .iter()
        .filter_map(|f| match &f.evidence {
            Evidence::Offpeak(OffpeakEvidence::Window(w)) => Some((f, w)),
            _ => None,
        })
        .map(|(f, w)| OffpeakWindow {
            finding_id: f.id.clone(),
            period: w.period.to_string(),
            days: w.days.iter().map(|d| d.to_string()).collect(),
            start: w.start.clone(),
            end: w.end.clone(),
            hours: f64::from(w.hours),
            expected_free_gpus: u64::from(w.expected_free_gpus),
            confidence: w.confidence,
            cron_start: w.cron_start.clone(),
            cron_end: w.cron_end.clone(),
            tier: w.tier as u64,
            above_baseline: u64::from(w.above_baseline),
            systemd_start: w.systemd_start.clone(),
            systemd_end: w.systemd_end.clone(),
            peaks: w.peaks.clone(),
        })
        .collect()
}

/// The GPUs free around the clock, when the advisor found any.
pub(super) fn offpeak_baseline(a: &Analysis) -> Option<OffpeakBaseline> {
    let (f, b) = a.findings.iter().find_map(|f| match &f.evidence {
        Evidence::Offpeak(OffpeakEvidence::Baseline(b)) => Some((f, b)),
        _ => None,
    })?;
    Some(OffpeakBaseline {
        finding_id: f.id.clone(),
        period: b.period.to_string(),
        gpus: u64::from(b.gpus),
        gpus_observed: b.gpus_observed as u64,
        by_model: b
            .by_model
            .iter()
            .map(|m| BaselineModel {
                model: m.model.clone(),
                gpus: u64::from(m.gpus),
            })
            .collect(),
        unattributed_gpus: u64::from(b.unattributed_gpus),
        min_share: b.min_share,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn offpeak_findings_become_the_baseline_and_windows() {
        use crate::advisor::offpeak::{FreeGpus, OffPeak};
        use crate::advisor::{Detector, Params};
        // 10 days, 4 GPUs: one H100 free all the time, two more free 20:00–06:00.
        let mon = 1_793_577_600 / 3600;
        let free = FreeGpus::fully_observed(
            (0..240)
                .map(|h| {
                    let night = !(6..20).contains(&(h % 24));
                    (
                        mon + h,
                        BTreeMap::from([("H100".to_string(), if night { 3 } else { 1 })]),
                    )
                })
                .collect(),
            BTreeMap::from([("H100".to_string(), 4)]),
        );
        let out = OffPeak
            .finish(vec![Box::new(free)], &Params::default())
            .unwrap();
        let a = Analysis {
            version: 1,
            from: None,
            until: None,
            sources: Vec::new(),
            tz: "UTC".into(),
            actions: Vec::new(),
            detectors: Vec::new(),
            findings: out.findings,
        };
        let b = offpeak_baseline(&a).expect("a baseline");
        assert_eq!((b.period.as_str(), b.gpus, b.gpus_observed), ("day", 1, 4));
        assert_eq!(
            b.by_model,
            vec![BaselineModel {
                model: "H100".into(),
                gpus: 1
            }]
        );
        assert_eq!(b.min_share, 0.9);
        let w = offpeak(&a);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            (
                w[0].start.as_str(),
                w[0].end.as_str(),
                w[0].expected_free_gpus,
                w[0].above_baseline,
                w[0].tier
            ),
            ("20:00", "06:00", 3, 2, 1)
        );
        assert_eq!(w[0].cron_end, "CRON_TZ=UTC 0 6 * * *");
        assert_eq!(w[0].systemd_start, "OnCalendar=*-*-* 20:00:00 UTC");
        assert_eq!(w[0].systemd_end, "OnCalendar=*-*-* 06:00:00 UTC");
    }
}
