//! The `queues` section of a tessera plan file (docs/queues.md): each team's GPU quota per GPU
//! model from its measured demand — a guaranteed amount and a burst limit, what a batch
//! scheduler's queue enforces (Kueue's `nominalQuota` and `nominalQuota + borrowingLimit`,
//! Volcano's `guarantee` and `capability`, Slurm's `GrpTRES`) — and the off-peak windows in which
//! deferred training may use the GPUs that sit free, with a floor outside them and what happens
//! to training still running when a window closes.
//!
//! ```yaml
//! queues:
//!   cohort: tessera
//!   rules: { guarantee-quantile: 0.05, limit-quantile: 0.95, serving-share: 0.9 }
//!   capacity: [ { model: NVIDIA H100 80GB HBM3, gpus: 8 } ]
//!   teams:
//!     - team: serving                  # a namespace
//!       class: serving                 # serving | job-like (measured, or set by hand)
//!       quotas:
//!         - { model: NVIDIA H100 80GB HBM3, guarantee: 2, limit: 2,
//!             measured: { hours: 336, held-share: 1.0, q-guarantee: 2, median: 2, q-limit: 2, max: 2 } }
//!   offpeak:
//!     queue: tessera-offpeak
//!     timezone: Europe/Berlin
//!     floor: [ { model: NVIDIA H100 80GB HBM3, gpus: 2 } ]
//!     windows:
//!       - { days: [Mon, Tue, Wed, Thu, Fri], start: "18:00", hours: 15,
//!           gpus: [ { model: NVIDIA H100 80GB HBM3, gpus: 6 } ] }
//!     end: { policy: finish }          # finish | max-runtime (hours) | drain (notice-minutes)
//! ```
//!
//! This module holds the types and their checks ([`QueuePlan::check`]) so that a plan a platform
//! team edited is re-validated; it reads no file and measures nothing.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Days as the windows name them.
pub const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// The queue plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct QueuePlan {
    /// The cohort every team's queue joins (Kueue's `cohortName`), so that teams borrow each
    /// other's unused guarantees up to their limits.
    pub cohort: String,
    pub rules: QueueRules,
    /// The fleet's GPUs per model: no guarantee sum and no limit exceeds them.
    pub capacity: Vec<ModelGpus>,
    pub teams: Vec<TeamQueue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offpeak: Option<OffpeakQueue>,
}

/// The rules the numbers were derived with (docs/queues.md, "Rules").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct QueueRules {
    /// A serving team's guarantee: this quantile of its hourly demand (the demand present in all
    /// but this share of hours).
    pub guarantee_quantile: f64,
    /// Every team's limit: this quantile of its hourly demand.
    pub limit_quantile: f64,
    /// A team is serving when it holds GPUs in at least this share of the observed hours.
    pub serving_share: f64,
}

/// Always-on (serving) or job-like (batch, training, notebooks) demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DemandClass {
    /// Holds GPUs nearly all the time: guaranteed its always-on demand.
    Serving,
    /// Comes and goes: guaranteed nothing, borrows up to its limit.
    JobLike,
}

impl DemandClass {
    pub fn as_str(self) -> &'static str {
        match self {
            DemandClass::Serving => "serving",
            DemandClass::JobLike => "job-like",
        }
    }
}

/// GPUs of one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ModelGpus {
    pub model: String,
    pub gpus: u32,
}

/// One team's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TeamQueue {
    /// The namespace.
    pub team: String,
    pub class: DemandClass,
    pub quotas: Vec<ModelQuota>,
}

/// A team's quota of one GPU model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ModelQuota {
    pub model: String,
    /// GPUs always admitted (Kueue `nominalQuota`).
    pub guarantee: u32,
    /// The most GPUs admitted, borrowing included (Kueue `nominalQuota + borrowingLimit`).
    pub limit: u32,
    /// What the numbers were derived from (informational; absent in a hand-made plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<MeasuredDemand>,
}

/// A team's hourly demand of one model over the observed hours: GPUs it held at some point of
/// each hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MeasuredDemand {
    pub hours: u64,
    /// Share of the hours in which it held at least one GPU.
    pub held_share: f64,
    pub q_guarantee: u32,
    pub median: u32,
    pub q_limit: u32,
    pub max: u32,
}

/// The queue of deferred training: its GPUs inside the off-peak windows and outside them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct OffpeakQueue {
    /// Its name (a ClusterQueue outside the teams' cohort: it borrows nothing).
    pub queue: String,
    /// The IANA time zone of the windows' days and times (daylight saving follows it).
    pub timezone: String,
    /// GPUs per model outside the windows.
    pub floor: Vec<ModelGpus>,
    pub windows: Vec<QueueWindow>,
    pub end: EndOfWindow,
}

/// Weekly windows with the same start and length and the same GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct QueueWindow {
    /// The days it starts on (`Mon` … `Sun`); empty: every day.
    #[serde(default)]
    pub days: Vec<String>,
    /// Local start, `HH:MM`.
    pub start: String,
    pub hours: u32,
    /// GPUs per model deferred training may use in it.
    pub gpus: Vec<ModelGpus>,
}

/// What happens to training still running when a window closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case",
    tag = "policy"
)]
pub enum EndOfWindow {
    /// It runs to its end (nothing new is admitted): no work is lost. The default.
    Finish,
    /// It runs at most this many hours after the window closes, then is stopped.
    MaxRuntime { hours: u32 },
    /// It is drained (Kueue `HoldAndDrain`) this many minutes after a notice at the close.
    Drain { notice_minutes: u32 },
}

fn quantile_ok(q: f64) -> bool {
    q.is_finite() && (0.0..=1.0).contains(&q)
}

/// A DNS-1123 label (a namespace's or a queue's name).
fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn check_models(
    item: &str,
    gpus: &[ModelGpus],
    capacity: &BTreeMap<&str, u32>,
) -> Result<(), (String, String)> {
    let mut seen = BTreeSet::new();
    for (i, m) in gpus.iter().enumerate() {
        let item = format!("{item}[{i}]");
        if !seen.insert(m.model.as_str()) {
            return Err((item, format!("model {:?} appears twice", m.model)));
        }
        match capacity.get(m.model.as_str()) {
            None => return Err((item, format!("model {:?} is not in capacity", m.model))),
            Some(&c) if m.gpus > c => {
                return Err((
                    item,
                    format!("{} GPUs of {:?}: the fleet has {c}", m.gpus, m.model),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

impl QueuePlan {
    /// Every rule a queue plan keeps: names, quantiles, guarantee ≤ limit ≤ capacity, the
    /// guarantees of a model within its capacity, windows that exist. `(item, message)`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let err = |item: &str, m: String| Err((item.to_string(), m));
        if !dns_label(&self.cohort) {
            return err(
                "queues.cohort",
                format!("{:?} is not a DNS label", self.cohort),
            );
        }
        let r = &self.rules;
        if !(quantile_ok(r.guarantee_quantile)
            && quantile_ok(r.limit_quantile)
            && quantile_ok(r.serving_share)
            && r.guarantee_quantile <= r.limit_quantile)
        {
            return err(
                "queues.rules",
                "quantiles and the share are within 0–1, the guarantee's quantile ≤ the limit's"
                    .into(),
            );
        }
        let mut capacity = BTreeMap::new();
        for (i, c) in self.capacity.iter().enumerate() {
            if c.model.is_empty() || capacity.insert(c.model.as_str(), c.gpus).is_some() {
                return err(
                    &format!("queues.capacity[{i}]"),
                    "an empty or repeated model".into(),
                );
            }
        }
        self.check_teams(&capacity)?;
        if let Some(o) = &self.offpeak {
            o.check(&capacity)?;
        }
        Ok(())
    }

    fn check_teams(&self, capacity: &BTreeMap<&str, u32>) -> Result<(), (String, String)> {
        let mut teams = BTreeSet::new();
        let mut guaranteed: BTreeMap<&str, u32> = BTreeMap::new();
        for (i, t) in self.teams.iter().enumerate() {
            let item = format!("queues.teams[{i}]");
            if !dns_label(&t.team) || !teams.insert(t.team.as_str()) {
                return Err((item, format!("{:?}: a namespace, once", t.team)));
            }
            for (j, q) in t.quotas.iter().enumerate() {
                let item = format!("{item}.quotas[{j}]");
                if q.guarantee > q.limit {
                    return Err((
                        item,
                        format!("guarantee {} above limit {}", q.guarantee, q.limit),
                    ));
                }
                check_models(
                    &item,
                    &[ModelGpus {
                        model: q.model.clone(),
                        gpus: q.limit,
                    }],
                    capacity,
                )
                .map_err(|(_, m)| (item.clone(), m))?;
                *guaranteed.entry(q.model.as_str()).or_default() += q.guarantee;
            }
        }
        for (model, g) in guaranteed {
            let c = capacity.get(model).copied().unwrap_or(0);
            if g > c {
                return Err((
                    "queues.teams".into(),
                    format!("{g} GPUs of {model:?} guaranteed, more than the fleet's {c}"),
                ));
            }
        }
        Ok(())
    }
}

impl OffpeakQueue {
    fn check(&self, capacity: &BTreeMap<&str, u32>) -> Result<(), (String, String)> {
        if !dns_label(&self.queue) {
            return Err((
                "queues.offpeak.queue".into(),
                format!("{:?} is not a DNS label", self.queue),
            ));
        }
        if self.timezone.parse::<chrono_tz::Tz>().is_err() {
            return Err((
                "queues.offpeak.timezone".into(),
                format!("{:?} is not an IANA time zone", self.timezone),
            ));
        }
        check_models("queues.offpeak.floor", &self.floor, capacity)?;
        for (i, w) in self.windows.iter().enumerate() {
            let item = format!("queues.offpeak.windows[{i}]");
            if let Some(d) = w.days.iter().find(|d| !DAYS.contains(&d.as_str())) {
                return Err((item, format!("day {d:?} is not one of {}", DAYS.join(", "))));
            }
            if chrono::NaiveTime::parse_from_str(&w.start, "%H:%M").is_err() {
                return Err((item, format!("start {:?} is not HH:MM", w.start)));
            }
            if !(1..=168).contains(&w.hours) {
                return Err((item, format!("{} hours: 1–168", w.hours)));
            }
            check_models(&format!("{item}.gpus"), &w.gpus, capacity)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> QueuePlan {
        let h100 = "NVIDIA H100 80GB HBM3".to_string();
        QueuePlan {
            cohort: "tessera".into(),
            rules: QueueRules {
                guarantee_quantile: 0.05,
                limit_quantile: 0.95,
                serving_share: 0.9,
            },
            capacity: vec![ModelGpus {
                model: h100.clone(),
                gpus: 8,
            }],
            teams: vec![TeamQueue {
                team: "serving".into(),
                class: DemandClass::Serving,
                quotas: vec![ModelQuota {
                    model: h100.clone(),
                    guarantee: 2,
                    limit: 3,
                    measured: None,
                }],
            }],
            offpeak: Some(OffpeakQueue {
                queue: "tessera-offpeak".into(),
                timezone: "Europe/Berlin".into(),
                floor: vec![ModelGpus {
                    model: h100.clone(),
                    gpus: 2,
                }],
                windows: vec![QueueWindow {
                    days: vec!["Mon".into()],
                    start: "18:00".into(),
                    hours: 15,
                    gpus: vec![ModelGpus {
                        model: h100,
                        gpus: 6,
                    }],
                }],
                end: EndOfWindow::Drain { notice_minutes: 30 },
            }),
        }
    }

    #[test]
    fn a_plan_reads_back_and_checks() {
        let p = plan();
        assert_eq!(p.check(), Ok(()));
        let yaml = serde_yaml_ng::to_string(&p).unwrap();
        assert!(
            yaml.contains("policy: drain") && yaml.contains("notice-minutes: 30"),
            "{yaml}"
        );
        let back: QueuePlan = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn edits_that_break_a_rule_are_named() {
        let mut p = plan();
        p.teams[0].quotas[0].guarantee = 4;
        assert!(
            p.check()
                .unwrap_err()
                .1
                .contains("guarantee 4 above limit 3")
        );
        let mut p = plan();
        p.teams[0].quotas[0].limit = 9;
        assert!(p.check().unwrap_err().1.contains("the fleet has 8"));
        let mut p = plan();
        p.teams.push(TeamQueue {
            team: "research".into(),
            ..p.teams[0].clone()
        });
        p.teams[1].quotas[0].guarantee = 3;
        p.teams[1].quotas[0].limit = 8;
        p.teams[0].quotas[0].guarantee = 3;
        p.teams[0].quotas[0].limit = 8;
        p.teams.push(TeamQueue {
            team: "more".into(),
            ..p.teams[0].clone()
        });
        assert!(p.check().unwrap_err().1.contains("9 GPUs of"));
        let mut p = plan();
        p.teams[0].team = "Bad_Name".into();
        assert_eq!(p.check().unwrap_err().0, "queues.teams[0]");
        let mut p = plan();
        p.offpeak.as_mut().unwrap().windows[0].days = vec!["Monday".into()];
        assert!(p.check().unwrap_err().1.contains("day \"Monday\""));
        let mut p = plan();
        p.offpeak.as_mut().unwrap().timezone = "Mars/Olympus".into();
        assert_eq!(p.check().unwrap_err().0, "queues.offpeak.timezone");
        let mut p = plan();
        p.rules.guarantee_quantile = 0.99;
        assert_eq!(p.check().unwrap_err().0, "queues.rules");
        let bad = "cohort: tessera\nrules: {guarantee-quantile: 0.05, limit-quantile: 0.95, serving-share: 0.9}\ncapacity: []\nteams: []\nextra: 1\n";
        assert!(serde_yaml_ng::from_str::<QueuePlan>(bad).is_err());
    }
}
