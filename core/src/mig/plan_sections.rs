//! The sections a tessera plan file (`kind: tessera-plan`, v1; docs/plan.md) holds beside its
//! MIG `configs`: the period it was made from (`window`), where each named workload's rows are
//! in history (`workloads`), the consolidation moves (`consolidation`), a day/night switch of its
//! configs (`schedule`) and what a replay predicted at planning time (`prediction`).
//!
//! ```yaml
//! version: v1
//! kind: tessera-plan
//! window: { from: "2026-11-09T00:00:00Z", until: "2026-11-16T00:00:00Z", sources: ["history:h"] }
//! workloads:
//!   serving/api-0:                   # the id the configs and moves name
//!     kind: process                  # process | mig | gpu
//!     node: gpu-node-01
//!     gpu: 0
//!     uuid: GPU-5f0c…
//!     label: serving/api-0           # process: namespace/pod, pod, slurm-JOB or name-pid
//!     memory-peak-bytes: 21474836480 # measured at planning (informational)
//!   gpu-node-01/GPU1/GI2:
//!     kind: mig
//!     node: gpu-node-01
//!     gpu: 1
//!     uuid: GPU-77aa…
//!     gpu-instance: 2
//! consolidation:                     # whole GPUs' work moved onto a host GPU, shared
//!   - model: NVIDIA H100 80GB HBM3
//!     host: { node: gpu-node-01, gpu: 0, uuid: GPU-5f0c…, label: "gpu-node-01/GPU0 [python3 …]" }
//!     guests:
//!       - { node: gpu-node-01, gpu: 2, uuid: GPU-6fea…, label: "gpu-node-01/GPU2 […]" }
//! schedule:                          # which config applies when (as a tessera-mig-schedule)
//!   timezone: UTC
//!   switches: [ { at: "07:00", config: day }, { at: "22:00", config: night } ]
//! prediction: { … }                  # a replay's figures at planning time
//! ```
//!
//! This module only holds the types and their checks ([`check_sections`]); it reads no file and
//! never looks at telemetry. Reading and writing the whole file is [`super::plan`]'s.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The period and sources a plan was made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PlanWindow {
    /// RFC 3339, UTC.
    pub from: String,
    /// RFC 3339, UTC.
    pub until: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
}

/// How a workload was measured: its rows are a MIG instance's, a process's (or pod's) on a GPU
/// outside MIG mode, or a whole GPU's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    Mig,
    Process,
    Gpu,
}

impl WorkloadKind {
    /// The name used in files and output (`mig`, `process`, `gpu`).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Mig => "mig",
            WorkloadKind::Process => "process",
            WorkloadKind::Gpu => "gpu",
        }
    }
}

/// Where a named workload's rows are in history (what a replay moves).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct WorkloadSource {
    pub kind: WorkloadKind,
    pub node: String,
    /// NVML index of the GPU it ran on.
    pub gpu: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// kind `mig`: the GPU instance id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    /// kind `process`: the process rows' label (`namespace/pod`, the pod, `slurm-JOB`, else
    /// `name-pid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Peak memory measured at planning (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak_bytes: Option<u64>,
    /// The activity quantile measured at planning, 0–1 of `slices-basis` (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<f64>,
    /// The compute slices the activity is a share of (the GPU's, or the MIG instance's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slices_basis: Option<u32>,
}

/// A GPU named by a consolidation move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GpuRef {
    pub node: String,
    /// NVML index on the node.
    pub gpu: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// What ran on it (informational, as the findings show it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// One consolidation move: the work of every guest GPU goes onto the host GPU (which keeps its
/// own), shared (MPS or time-slicing); the guests are freed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConsolidationMove {
    /// The GPUs' model (NVML name or tessera key).
    pub model: String,
    pub host: GpuRef,
    pub guests: Vec<GpuRef>,
}

/// One switch: from `at` on the listed days, `config` applies (until the next switch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Switch {
    /// Local time `HH:MM`.
    pub at: String,
    /// Days of the week (`mon` … `sun`); every day when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<String>,
    /// The plan config label that applies from this switch on.
    pub config: String,
}

/// The rules of one switch's time and days, shared by a schedule file and a plan's inline
/// `schedule` (the one reader): `at` is `HH:MM` (00:00–23:59), each day one of `mon` … `sun`.
/// On error: the field (`at`, `days`) and what was expected.
pub(crate) fn check_switch(sw: &Switch) -> Result<(), (&'static str, String)> {
    chrono::NaiveTime::parse_from_str(&sw.at, "%H:%M").map_err(|_| {
        (
            "at",
            format!(
                "bad time {:?}: expected HH:MM from 00:00 to 23:59, e.g. \"07:00\"",
                sw.at
            ),
        )
    })?;
    for d in &sw.days {
        if parse_day(d).is_none() {
            return Err((
                "days",
                format!("bad day {d:?}: expected mon, tue, wed, thu, fri, sat or sun"),
            ));
        }
    }
    Ok(())
}

/// `mon` … `sun` as a weekday.
pub(crate) fn parse_day(s: &str) -> Option<chrono::Weekday> {
    use chrono::Weekday;
    Some(match s {
        "mon" => Weekday::Mon,
        "tue" => Weekday::Tue,
        "wed" => Weekday::Wed,
        "thu" => Weekday::Thu,
        "fri" => Weekday::Fri,
        "sat" => Weekday::Sat,
        "sun" => Weekday::Sun,
        _ => return None,
    })
}

/// A day/night switch of the plan's configs (a `tessera-mig-schedule` without its `plan:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PlanSchedule {
    /// IANA time zone of the switch times.
    pub timezone: String,
    pub switches: Vec<Switch>,
}

/// What a replay of the plan predicted when it was made (`tessera replay`, docs/plan.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Prediction {
    /// The replayed period, RFC 3339.
    pub from: String,
    pub until: String,
    /// `safe`, `tight` or `unsafe`.
    pub verdict: String,
    pub gpus_before: u32,
    pub gpus_after: u32,
    pub gpu_hours_freed: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_freed: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_kwh_before: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_kwh_after: Option<f64>,
    /// Intervals in which some placement's memory would have been exceeded.
    pub failed_intervals: u64,
}

/// The plan's non-MIG sections, checked against each other and against the `configs` labels.
/// Returns `(item, message)` of the first problem. A config may name a workload the
/// `workloads` section does not describe (the night layout's `training` placeholder, a plan
/// written by hand): a replay has no rows for it and says so.
pub fn check_sections(
    workloads: &BTreeMap<String, WorkloadSource>,
    consolidation: &[ConsolidationMove],
    schedule: Option<&PlanSchedule>,
    prediction: Option<&Prediction>,
    config_labels: &BTreeSet<&str>,
) -> Result<(), (String, String)> {
    for (id, w) in workloads {
        let item = format!("workloads.{id}");
        if id.is_empty() {
            return Err(("workloads".into(), "an empty workload id".into()));
        }
        match w.kind {
            WorkloadKind::Mig if w.gpu_instance.is_none() => {
                return Err((item, "kind mig needs gpu-instance".into()));
            }
            WorkloadKind::Process if w.label.as_deref().is_none_or(str::is_empty) => {
                return Err((item, "kind process needs label".into()));
            }
            _ => {}
        }
        if w.kind != WorkloadKind::Mig && w.gpu_instance.is_some() {
            return Err((item, "gpu-instance is only for kind mig".into()));
        }
        if let Some(a) = w.activity
            && !(a.is_finite() && (0.0..=1.0).contains(&a))
        {
            return Err((item, format!("activity {a} is not within 0–1")));
        }
    }
    let mut seen: BTreeSet<(&str, u32)> = BTreeSet::new();
    for (i, m) in consolidation.iter().enumerate() {
        let item = format!("consolidation[{i}]");
        if m.guests.is_empty() {
            return Err((item, "a move needs at least one guest GPU".into()));
        }
        for g in std::iter::once(&m.host).chain(&m.guests) {
            if !seen.insert((g.node.as_str(), g.gpu)) {
                return Err((
                    item.clone(),
                    format!(
                        "GPU {} on {} appears in more than one place of the moves",
                        g.gpu, g.node
                    ),
                ));
            }
        }
    }
    if let Some(s) = schedule {
        if s.timezone.parse::<chrono_tz::Tz>().is_err() {
            return Err((
                "schedule.timezone".into(),
                format!("unknown time zone {:?}", s.timezone),
            ));
        }
        if s.switches.is_empty() {
            return Err(("schedule.switches".into(), "no switch".into()));
        }
        for (i, sw) in s.switches.iter().enumerate() {
            check_switch(sw)
                .map_err(|(field, message)| (format!("schedule.switches[{i}].{field}"), message))?;
            if !config_labels.contains(sw.config.as_str()) {
                return Err((
                    format!("schedule.switches[{i}].config"),
                    format!("no config labelled {:?} in this plan", sw.config),
                ));
            }
        }
    }
    if let Some(p) = prediction {
        if !["safe", "tight", "unsafe"].contains(&p.verdict.as_str()) {
            return Err((
                "prediction.verdict".into(),
                format!("{:?}; expected safe, tight or unsafe", p.verdict),
            ));
        }
        for (k, v) in [
            ("gpu-hours-freed", Some(p.gpu_hours_freed)),
            ("cost-freed", p.cost_freed),
            ("energy-kwh-before", p.energy_kwh_before),
            ("energy-kwh-after", p.energy_kwh_after),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err((
                    format!("prediction.{k}"),
                    format!("{v} is not a finite, non-negative number"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::mig::plan::{MIG_PLAN_KIND, PLAN_KIND, TesseraPlan};

    const PLAN: &str = r#"
version: v1
kind: tessera-plan
window: { from: "2026-11-09T00:00:00.000Z", until: "2026-11-16T00:00:00.000Z", sources: ["history:h"] }
configs:
  day:
    - node: n1
      gpu: 0
      model: H100-80GB
      mig-enabled: true
      instances:
        - profile: 3g.40gb
          profile-id: 9
          placement: { start: 0, size: 4 }
          workloads: [team-a/chat]
  night:
    - node: n1
      gpu: 0
      model: H100-80GB
      mig-enabled: false
      workloads: [training]
workloads:
  team-a/chat:
    kind: process
    node: n1
    gpu: 1
    uuid: GPU-1
    label: team-a/chat
    memory-peak-bytes: 1000
    activity: 0.3
    slices-basis: 7
consolidation:
  - model: NVIDIA H100 80GB HBM3
    host: { node: n2, gpu: 0 }
    guests: [ { node: n2, gpu: 1, label: "n2/GPU1 [x]" } ]
schedule:
  timezone: Europe/Berlin
  switches: [ { at: "22:00", config: night }, { at: "07:00", days: [mon], config: day } ]
prediction:
  from: "2026-11-16T00:00:00.000Z"
  until: "2026-11-23T00:00:00.000Z"
  verdict: tight
  gpus-before: 3
  gpus-after: 2
  gpu-hours-freed: 168.0
  failed-intervals: 0
"#;

    fn err(text: &str) -> String {
        TesseraPlan::parse(text, "p.yaml").unwrap_err().to_string()
    }

    #[test]
    fn every_section_parses_and_round_trips() {
        let p = TesseraPlan::parse(PLAN, "p.yaml").unwrap();
        assert_eq!(p.kind, PLAN_KIND);
        assert_eq!(
            p.workloads["team-a/chat"].label.as_deref(),
            Some("team-a/chat")
        );
        assert_eq!(p.consolidation[0].guests[0].gpu, 1);
        assert_eq!(p.schedule.as_ref().unwrap().switches.len(), 2);
        assert_eq!(p.prediction.as_ref().unwrap().verdict, "tight");
        // "training" (the night placeholder) names no workloads entry: allowed.
        let back = TesseraPlan::parse(&p.to_yaml(), "again.yaml").unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn a_plan_of_moves_only_is_a_plan_but_has_no_mig_config() {
        let text = PLAN.split("configs:").next().unwrap().to_string()
            + "consolidation:\n  - model: m\n    host: { node: n2, gpu: 0 }\n    guests: [ { node: n2, gpu: 1 } ]\n";
        let p = TesseraPlan::parse(&text, "p.yaml").unwrap();
        assert!(p.configs.is_empty());
        let e = p.config(None, "p.yaml").unwrap_err().to_string();
        assert!(e.contains("no MIG configs"), "{e}");
        assert!(!p.to_yaml().contains("configs"), "{}", p.to_yaml());
    }

    #[test]
    fn bad_sections_are_named() {
        for (from, to, names) in [
            (
                "kind: process\n",
                "kind: mig\n",
                "workloads.team-a/chat: kind mig needs gpu-instance",
            ),
            ("    label: team-a/chat\n", "", "kind process needs label"),
            ("activity: 0.3", "activity: 1.5", "not within 0–1"),
            ("activity: 0.3", "activity: .nan", "not within 0–1"),
            (
                "    guests: [ { node: n2, gpu: 1, label: \"n2/GPU1 [x]\" } ]",
                "    guests: []",
                "at least one guest",
            ),
            (
                "guests: [ { node: n2, gpu: 1,",
                "guests: [ { node: n2, gpu: 0,",
                "appears in more than one place",
            ),
            (
                "timezone: Europe/Berlin",
                "timezone: Mars/Olympus",
                "unknown time zone",
            ),
            (
                "config: night }",
                "config: evening }",
                "schedule.switches[0].config",
            ),
            // Times and days are checked as in a schedule file (issue 49): no 24:00, 25:00 or
            // Funday that a replay would read as nonsense.
            (
                "at: \"22:00\", config: night",
                "at: \"25:00\", config: night",
                "schedule.switches[0].at",
            ),
            (
                "at: \"22:00\", config: night",
                "at: \"24:00\", config: night",
                "expected HH:MM from 00:00 to 23:59",
            ),
            (
                "days: [mon]",
                "days: [Funday]",
                "schedule.switches[1].days: bad day \"Funday\"",
            ),
            (
                "verdict: tight",
                "verdict: fine",
                "expected safe, tight or unsafe",
            ),
            (
                "gpu-hours-freed: 168.0",
                "gpu-hours-freed: -1.0",
                "prediction.gpu-hours-freed",
            ),
            (
                "failed-intervals: 0",
                "failed-intervals: 0\n  surprise: 1",
                "unknown field `surprise`",
            ),
            (
                "kind: tessera-plan",
                "kind: tessera-mig-plan",
                "holds only configs",
            ),
        ] {
            assert!(PLAN.contains(from), "{from}");
            let e = err(&PLAN.replacen(from, to, 1));
            assert!(e.contains(names), "{from} -> {to}: {e}");
        }
    }

    #[test]
    fn a_first_format_plan_is_still_read() {
        let text = "version: v1\nkind: tessera-mig-plan\nconfigs:\n  day:\n    - gpu: 0\n      model: H100-80GB\n      mig-enabled: false\n";
        let p = TesseraPlan::parse(text, "old.yaml").unwrap();
        assert_eq!(p.kind, MIG_PLAN_KIND);
        assert!(p.to_yaml().contains("kind: tessera-mig-plan"));
        let e = err("version: v1\nkind: tessera-plan\n");
        assert!(e.contains("at least one config"), "{e}");
    }
}
