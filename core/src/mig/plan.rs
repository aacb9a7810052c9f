//! tessera's own MIG plan format (`tessera-mig-plan` v1) and MIG schedule format
//! (`tessera-mig-schedule` v1): the contract between the planner (`tessera mig plan`, which writes
//! them) and the applier (`tessera mig export/assert/apply`, which reads and writes them).
//!
//! Unlike nvidia-mig-parted's v1 format ([`crate::mig::parted`]), a tessera plan names every GPU
//! instance's **placement** and, optionally, the workloads the planner assigned to it:
//!
//! ```yaml
//! version: v1
//! kind: tessera-mig-plan
//! configs:
//!   day:                                  # a label, like mig-parted's; `--config day`
//!     - node: gpu-node-01                 # optional: omitted = the entry applies on any node
//!       gpu: 0                            # GPU index on the node
//!       uuid: GPU-5f0c…                   # optional: when given, the GPU must have this UUID
//!       model: H100-80GB                  # tessera model key (see crate::mig::models)
//!       mig-enabled: true
//!       instances:
//!         - profile: 3g.40gb              # name on this model (checked against profile-id)
//!           profile-id: 9
//!           placement: { start: 0, size: 4 }
//!           workloads: [team-a/llm-chat]  # optional: what the planner put here
//!         - profile: 1g.10gb
//!           profile-id: 19
//!           placement: { start: 4, size: 1 }
//!     - node: gpu-node-01
//!       gpu: 1
//!       model: H100-80GB
//!       mig-enabled: false                # a whole GPU: MIG mode off
//!       workloads: [team-b/train]         # optional: what the planner gave the whole GPU
//! ```
//!
//! Parsing is strict: unknown keys fail with the YAML path, line and column; every layout must
//! pass [`crate::mig::validate_layout`] for its model; `instances` must be empty when `mig-enabled`
//! is false, and a GPU's own `workloads` (the whole GPU's, informational) are given only then;
//! one (node, gpu) appears at most once per config; the profile name must be the
//! model's name for the profile id. [`TesseraPlan::to_yaml`] writes what [`TesseraPlan::parse`]
//! reads back unchanged (a round trip is tested).
//!
//! A schedule says which config of a plan applies when:
//!
//! ```yaml
//! version: v1
//! kind: tessera-mig-schedule
//! timezone: Europe/Berlin
//! plan: plan.yaml                         # relative to the schedule file
//! switches:
//!   - at: "07:00"
//!     days: [mon, tue, wed, thu, fri]     # optional: every day when omitted
//!     config: day
//!   - at: "22:00"
//!     config: night
//! ```
//!
//! [`MigSchedule::active_at`] picks the config of the latest switch at or before a given instant
//! (looking back up to a week, in the schedule's time zone, daylight-saving aware).
//!
//! Both readers refuse files larger than [`input_limits::MAX_YAML_BYTES`] or nested deeper than
//! [`input_limits::MAX_YAML_DEPTH`] before parsing them ([`TesseraPlanError::Limit`], with line and
//! column), and quote at most [`input_limits::MAX_MESSAGE_CHARS`] of the input in an error.
//!
//! This module is pure data: it reads the text it is given and never calls NVML.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Datelike, Duration, NaiveTime, TimeZone, Utc, Weekday};
use serde::{Deserialize, Serialize};

use super::plan_queues::QueuePlan;
pub use super::plan_sections::Switch;
use super::plan_sections::{
    ConsolidationMove, PlanSchedule, PlanWindow, Prediction, WorkloadSource, check_sections,
};
use crate::input_limits;
use crate::mig::{self, LayoutInstance};
use crate::model::Placement;

/// The `kind` of a plan file written today: MIG configs and the other sections of
/// [`super::plan_sections`] (docs/plan.md).
pub const PLAN_KIND: &str = "tessera-plan";
/// The `kind` of the first plan files: MIG configs only. Still read (as a plan with only
/// `configs`).
pub const MIG_PLAN_KIND: &str = "tessera-mig-plan";
/// The `kind` of a schedule file.
pub const SCHEDULE_KIND: &str = "tessera-mig-schedule";

/// Errors reading, parsing or validating a plan or schedule.
#[derive(Debug, thiserror::Error)]
pub enum TesseraPlanError {
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// YAML syntax or a wrong type or an unknown key; `message` carries path, line and column.
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    /// Parsed, but not a valid plan or schedule.
    #[error("{path}: {item}: {message}")]
    Invalid {
        path: String,
        item: String,
        message: String,
    },
    #[error("{path}: no config labelled {label:?} (available: {available})")]
    NoLabel {
        path: String,
        label: String,
        available: String,
    },
    #[error("{path} has several configs ({available}); choose one with --config LABEL")]
    AmbiguousLabel { path: String, available: String },
    /// Larger or deeper than [`input_limits`] allows (see docs/mig.md).
    #[error("{path}: {limit}")]
    Limit {
        path: String,
        limit: input_limits::LimitError,
    },
}

/// The text of `path`, at most [`input_limits::MAX_YAML_BYTES`] of it.
fn read(path: &Path) -> Result<String, TesseraPlanError> {
    input_limits::read_to_string(path, input_limits::MAX_YAML_BYTES).map_err(|e| match e {
        input_limits::ReadError::Io(error) => TesseraPlanError::Read {
            path: path.to_path_buf(),
            error,
        },
        input_limits::ReadError::Limit(limit) => TesseraPlanError::Limit {
            path: path.display().to_string(),
            limit,
        },
    })
}

/// YAML into `T` (strict: the types deny unknown fields) once its size and depth are within
/// [`input_limits`]; `source` names it in errors.
fn from_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
    source: &str,
) -> Result<T, TesseraPlanError> {
    input_limits::check_yaml(text).map_err(|limit| TesseraPlanError::Limit {
        path: source.to_string(),
        limit,
    })?;
    serde_yaml_ng::from_str(text).map_err(|e| TesseraPlanError::Parse {
        path: source.to_string(),
        message: input_limits::yaml_error(&e),
    })
}

/// `version` must be `v1` and `kind` the expected one.
fn check_header(
    version: &str,
    kind: &str,
    expected: &str,
    source: &str,
) -> Result<(), TesseraPlanError> {
    let invalid = |item: &str, message: String| TesseraPlanError::Invalid {
        path: source.to_string(),
        item: item.to_string(),
        message,
    };
    if version != "v1" {
        return Err(invalid(
            "version",
            format!("unsupported version {version:?}; expected \"v1\""),
        ));
    }
    if kind != expected {
        return Err(invalid(
            "kind",
            format!("expected {expected:?}, found {kind:?}"),
        ));
    }
    Ok(())
}

/// A whole plan file: labelled configs, each a list of per-GPU layouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct TesseraPlan {
    /// Always `v1`.
    pub version: String,
    /// Always [`PLAN_KIND`].
    pub kind: String,
    /// Free-form provenance (tool version, source, time range); ignored by readers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// The period and sources the plan was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<PlanWindow>,
    /// MIG layouts by label; may be empty in a `tessera-plan` that has consolidation moves.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub configs: BTreeMap<String, Vec<GpuLayout>>,
    /// Where each workload the configs name has its rows (what a replay moves).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workloads: BTreeMap<String, WorkloadSource>,
    /// Whole GPUs' work moved onto host GPUs, shared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consolidation: Vec<ConsolidationMove>,
    /// Which config applies when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<PlanSchedule>,
    /// What a replay predicted when the plan was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Prediction>,
    /// Team quotas and off-peak windows for a batch scheduler's queues
    /// ([`super::plan_queues`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<QueuePlan>,
}

/// The planned layout of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GpuLayout {
    /// The node this GPU is on; `None` = any node (a node-independent plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// GPU index on the node.
    pub gpu: u32,
    /// When given, the GPU at `gpu` must have this UUID (guards against renumbered GPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// tessera model key, e.g. `H100-80GB`.
    pub model: String,
    pub mig_enabled: bool,
    #[serde(default)]
    pub instances: Vec<PlannedInstance>,
    /// Workloads the planner gave the whole GPU, MIG mode off (informational); only with
    /// `mig_enabled: false` (with MIG on, workloads are named on the instances).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<String>,
}

/// One GPU instance (with one compute instance spanning it) in a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PlannedInstance {
    /// Profile name on this model (e.g. `1g.10gb`); must agree with `profile_id`.
    pub profile: String,
    pub profile_id: u32,
    pub placement: Placement,
    /// Workloads the planner assigned to this instance (informational).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<String>,
}

impl GpuLayout {
    /// The layout as the checker's instances.
    pub fn layout(&self) -> Vec<LayoutInstance> {
        self.instances
            .iter()
            .map(|i| LayoutInstance {
                profile_id: i.profile_id,
                placement: i.placement,
            })
            .collect()
    }

    /// Whether this entry applies to `node` (entries without a node apply everywhere).
    pub fn applies_to(&self, node: &str) -> bool {
        self.node.as_deref().is_none_or(|n| n == node)
    }
}

impl TesseraPlan {
    /// An empty v1 plan.
    pub fn new() -> TesseraPlan {
        TesseraPlan {
            version: "v1".into(),
            kind: PLAN_KIND.into(),
            comment: None,
            window: None,
            configs: BTreeMap::new(),
            workloads: BTreeMap::new(),
            consolidation: Vec::new(),
            schedule: None,
            prediction: None,
            queues: None,
        }
    }

    /// Read and parse `path`.
    pub fn from_file(path: &Path) -> Result<TesseraPlan, TesseraPlanError> {
        TesseraPlan::parse(&read(path)?, &path.display().to_string())
    }

    /// Parse and validate the text of a plan; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<TesseraPlan, TesseraPlanError> {
        let plan: TesseraPlan = from_yaml(text, source)?;
        plan.validate(source)?;
        Ok(plan)
    }

    /// Check every rule a parsed plan must satisfy (also used before writing one).
    pub fn validate(&self, source: &str) -> Result<(), TesseraPlanError> {
        let invalid = |item: String, message: String| TesseraPlanError::Invalid {
            path: source.to_string(),
            item,
            message,
        };
        if self.kind == MIG_PLAN_KIND {
            check_header(&self.version, &self.kind, MIG_PLAN_KIND, source)?;
            if self.window.is_some()
                || !self.workloads.is_empty()
                || !self.consolidation.is_empty()
                || self.schedule.is_some()
                || self.prediction.is_some()
                || self.queues.is_some()
            {
                return Err(invalid(
                    "kind".into(),
                    format!(
                        "a {MIG_PLAN_KIND} holds only configs; a plan with window, workloads, consolidation, schedule, prediction or queues is kind {PLAN_KIND:?}"
                    ),
                ));
            }
        } else {
            check_header(&self.version, &self.kind, PLAN_KIND, source)?;
        }
        if self.configs.is_empty() && self.consolidation.is_empty() && self.queues.is_none() {
            return Err(invalid(
                "configs".into(),
                "at least one config (or, in a tessera-plan, a consolidation move or queues) is required"
                    .into(),
            ));
        }
        if let Some(q) = &self.queues {
            q.check()
                .map_err(|(item, message)| invalid(item, message))?;
        }
        let labels: BTreeSet<&str> = self.configs.keys().map(String::as_str).collect();
        check_sections(
            &self.workloads,
            &self.consolidation,
            self.schedule.as_ref(),
            self.prediction.as_ref(),
            &labels,
        )
        .map_err(|(item, message)| invalid(item, message))?;
        for (label, gpus) in &self.configs {
            if label.is_empty()
                || !label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(invalid(
                    format!("configs.{label}"),
                    "a label is letters, digits, '-', '_' or '.'".into(),
                ));
            }
            let mut seen = BTreeSet::new();
            for (i, g) in gpus.iter().enumerate() {
                let item = format!("configs.{label}[{i}]");
                if !seen.insert((g.node.clone(), g.gpu)) {
                    return Err(invalid(
                        item,
                        format!(
                            "GPU {} on {} appears twice in this config",
                            g.gpu,
                            g.node.as_deref().unwrap_or("any node")
                        ),
                    ));
                }
                check_config_gpu(&item, g).map_err(|(item, message)| invalid(item, message))?;
            }
        }
        Ok(())
    }

    /// The plan as YAML (what [`parse`](Self::parse) reads back unchanged).
    pub fn to_yaml(&self) -> String {
        let body = serde_yaml_ng::to_string(self).expect("plan serialises");
        format!(
            "# tessera plan ({} v1); see docs/plan.md\n{body}",
            self.kind
        )
    }

    /// The config labelled `label`, or the only config when `label` is `None`.
    pub fn config(
        &self,
        label: Option<&str>,
        source: &str,
    ) -> Result<(&str, &[GpuLayout]), TesseraPlanError> {
        let available = || self.configs.keys().cloned().collect::<Vec<_>>().join(", ");
        match label {
            Some(l) => self
                .configs
                .get_key_value(l)
                .map(|(k, v)| (k.as_str(), v.as_slice()))
                .ok_or_else(|| TesseraPlanError::NoLabel {
                    path: source.into(),
                    label: l.into(),
                    available: available(),
                }),
            None if self.configs.is_empty() => Err(TesseraPlanError::Invalid {
                path: source.into(),
                item: "configs".into(),
                message: "this plan has no MIG configs (only consolidation moves)".into(),
            }),
            None if self.configs.len() == 1 => {
                let (k, v) = self.configs.iter().next().expect("one config");
                Ok((k.as_str(), v.as_slice()))
            }
            None => Err(TesseraPlanError::AmbiguousLabel {
                path: source.into(),
                available: available(),
            }),
        }
    }
}

impl Default for TesseraPlan {
    fn default() -> Self {
        TesseraPlan::new()
    }
}

/// A schedule file: which plan config applies at which local time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MigSchedule {
    pub version: String,
    pub kind: String,
    /// IANA time zone of the switch times, e.g. `Europe/Berlin` or `UTC`.
    pub timezone: String,
    /// The plan file, relative to the schedule file's directory (or absolute).
    pub plan: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    pub switches: Vec<Switch>,
}

/// The switch in force at an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveConfig {
    pub config: String,
    /// When that switch happened (UTC).
    pub since: DateTime<Utc>,
}

impl MigSchedule {
    /// Read and parse `path`.
    pub fn from_file(path: &Path) -> Result<MigSchedule, TesseraPlanError> {
        MigSchedule::parse(&read(path)?, &path.display().to_string())
    }

    /// Parse and validate a schedule; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<MigSchedule, TesseraPlanError> {
        let s: MigSchedule = from_yaml(text, source)?;
        s.validate(source)?;
        Ok(s)
    }

    /// Check every rule a schedule must satisfy.
    pub fn validate(&self, source: &str) -> Result<(), TesseraPlanError> {
        let invalid = |item: String, message: String| TesseraPlanError::Invalid {
            path: source.to_string(),
            item,
            message,
        };
        check_header(&self.version, &self.kind, SCHEDULE_KIND, source)?;
        self.tz().map_err(|m| invalid("timezone".into(), m))?;
        if self.switches.is_empty() {
            return Err(invalid(
                "switches".into(),
                "at least one switch is required".into(),
            ));
        }
        for (i, sw) in self.switches.iter().enumerate() {
            super::plan_sections::check_switch(sw)
                .map_err(|(field, message)| invalid(format!("switches[{i}].{field}"), message))?;
            if sw.config.is_empty() {
                return Err(invalid(
                    format!("switches[{i}].config"),
                    "a config label is required".into(),
                ));
            }
        }
        Ok(())
    }

    /// The schedule's time zone.
    pub fn tz(&self) -> Result<chrono_tz::Tz, String> {
        self.timezone
            .parse::<chrono_tz::Tz>()
            .map_err(|_| format!("unknown time zone {:?}; expected an IANA name such as \"Europe/Berlin\" or \"UTC\"", self.timezone))
    }

    /// The plan path, resolved against the directory of the schedule file at `schedule_path`.
    /// It must stay in that directory — a relative path without `..` — unless `anywhere`: a
    /// schedule names the plan beside it (a ConfigMap mount's files, symlinks into `..data/`,
    /// are beside it: the path is checked as written, not where links lead), never a file
    /// elsewhere that whoever edits the schedule cannot otherwise read.
    pub fn plan_path(
        &self,
        schedule_path: &Path,
        anywhere: bool,
    ) -> Result<PathBuf, TesseraPlanError> {
        let p = Path::new(&self.plan);
        let beside = !p.is_absolute()
            && p.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::Normal(_) | std::path::Component::CurDir
                )
            });
        if !beside && !anywhere {
            return Err(TesseraPlanError::Invalid {
                path: schedule_path.display().to_string(),
                item: "plan".into(),
                message: format!(
                    "{:?} is not in the schedule's folder: name a file beside the schedule (a relative path without ..), or pass --allow-plan-outside",
                    self.plan
                ),
            });
        }
        Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            schedule_path.parent().unwrap_or(Path::new(".")).join(p)
        })
    }

    /// The config in force at `now`: the latest switch occurrence at or before `now`, looking
    /// back eight days. `None` only when no switch occurs in that window (impossible for a
    /// validated schedule, whose every switch recurs at least weekly).
    pub fn active_at(&self, now: DateTime<Utc>) -> Option<ActiveConfig> {
        let tz = self.tz().ok()?;
        let local_today = now.with_timezone(&tz).date_naive();
        let mut best: Option<ActiveConfig> = None;
        for back in 0..=8 {
            let day = local_today - Duration::days(back);
            for sw in &self.switches {
                let days: Vec<Weekday> = sw
                    .days
                    .iter()
                    .filter_map(|d| super::plan_sections::parse_day(d))
                    .collect();
                if !days.is_empty() && !days.contains(&day.weekday()) {
                    continue;
                }
                let Ok(t) = NaiveTime::parse_from_str(&sw.at, "%H:%M") else {
                    continue;
                };
                // A local time skipped by a DST jump switches at the first instant after it.
                let local = day.and_time(t);
                let at = match tz.from_local_datetime(&local) {
                    chrono::LocalResult::Single(x) => x,
                    chrono::LocalResult::Ambiguous(a, _) => a,
                    chrono::LocalResult::None => {
                        match tz.from_local_datetime(&(local + Duration::hours(1))) {
                            chrono::LocalResult::Single(x) => x,
                            chrono::LocalResult::Ambiguous(a, _) => a,
                            chrono::LocalResult::None => continue,
                        }
                    }
                }
                .with_timezone(&Utc);
                if at <= now && best.as_ref().is_none_or(|b| at > b.since) {
                    best = Some(ActiveConfig {
                        config: sw.config.clone(),
                        since: at,
                    });
                }
            }
        }
        best
    }

    /// The schedule as YAML (what [`parse`](Self::parse) reads back unchanged).
    pub fn to_yaml(&self) -> String {
        let body = serde_yaml_ng::to_string(self).expect("schedule serialises");
        format!("# tessera MIG schedule (tessera-mig-schedule v1); see docs/mig.md\n{body}")
    }
}

/// One GPU of a config (`item` names it): a known model, no more instances than compute slices,
/// its workloads on its instances when MIG is enabled and no instances when it is not, each
/// instance's profile id and name those of the model, and a layout the model can hold. Returns
/// `(item, message)` of the first problem.
fn check_config_gpu(item: &str, g: &GpuLayout) -> Result<(), (String, String)> {
    let Some(model) = mig::model(&g.model) else {
        let known: Vec<_> = mig::models().iter().map(|m| m.key).collect();
        return Err((
            format!("{item}.model"),
            format!(
                "unknown GPU model {:?}; known: {}",
                g.model,
                known.join(", ")
            ),
        ));
    };
    // Each instance takes at least one compute slice: more cannot fit, and are not
    // looked at one by one.
    if g.instances.len() > model.compute_slices as usize {
        return Err((
            format!("{item}.instances"),
            format!(
                "{} instances; expected at most {} on {}",
                g.instances.len(),
                model.compute_slices,
                model.key
            ),
        ));
    }
    if g.mig_enabled && !g.workloads.is_empty() {
        return Err((
            format!("{item}.workloads"),
            "a GPU's own workloads given while mig-enabled is true (name them on its instances)"
                .into(),
        ));
    }
    if !g.mig_enabled {
        if !g.instances.is_empty() {
            return Err((
                format!("{item}.instances"),
                "instances given while mig-enabled is false".into(),
            ));
        }
        return Ok(());
    }
    for (j, inst) in g.instances.iter().enumerate() {
        let Some(p) = model.profile(inst.profile_id) else {
            return Err((
                format!("{item}.instances[{j}].profile-id"),
                format!(
                    "profile id {} does not exist on {}",
                    inst.profile_id, model.key
                ),
            ));
        };
        if p.name != inst.profile {
            return Err((
                format!("{item}.instances[{j}].profile"),
                format!(
                    "profile id {} is {:?} on {}, not {:?}",
                    inst.profile_id, p.name, model.key, inst.profile
                ),
            ));
        }
    }
    mig::validate_layout(model, &g.layout())
        .map_err(|e| (format!("{item}.instances"), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"
version: v1
kind: tessera-mig-plan
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
        - profile: 1g.10gb
          profile-id: 19
          placement: { start: 4, size: 1 }
    - node: n1
      gpu: 1
      model: H100-80GB
      mig-enabled: false
      workloads: [team-b/train]
  night:
    - gpu: 0
      model: H100-80GB
      mig-enabled: true
      instances:
        - profile: 7g.80gb
          profile-id: 0
          placement: { start: 0, size: 8 }
"#;

    #[test]
    fn parses_and_round_trips() {
        let p = TesseraPlan::parse(PLAN, "p.yaml").unwrap();
        assert_eq!(p.configs["day"].len(), 2);
        assert_eq!(
            p.configs["day"][0].instances[0].workloads,
            vec!["team-a/chat"]
        );
        assert_eq!(p.configs["day"][1].workloads, vec!["team-b/train"]);
        let again = TesseraPlan::parse(&p.to_yaml(), "again").unwrap();
        assert_eq!(p, again);
        let (label, gpus) = p.config(Some("night"), "p").unwrap();
        assert_eq!((label, gpus.len()), ("night", 1));
        assert!(gpus[0].applies_to("any-node"));
        assert!(!p.configs["day"][0].applies_to("n2"));
        assert!(matches!(
            p.config(None, "p"),
            Err(TesseraPlanError::AmbiguousLabel { .. })
        ));
        assert!(matches!(
            p.config(Some("nope"), "p"),
            Err(TesseraPlanError::NoLabel { .. })
        ));
    }

    #[test]
    fn rejects_bad_plans_with_their_path() {
        let cases = [
            (PLAN.replace("version: v1", "version: v2"), "version"),
            (PLAN.replace("kind: tessera-mig-plan", "kind: other"), "kind"),
            (PLAN.replace("workloads:", "workload:"), "unknown field"),
            (PLAN.replace("start: 4, size: 1", "start: 3, size: 1"), "overlap"),
            (PLAN.replace("profile: 1g.10gb", "profile: 1g.5gb"), "configs.day[0].instances[1].profile"),
            (PLAN.replace("profile-id: 19", "profile-id: 42"), "does not exist"),
            (PLAN.replace("model: H100-80GB\n      mig-enabled: false", "model: H100-80GB\n      mig-enabled: false\n      instances: [{profile: 7g.80gb, profile-id: 0, placement: {start: 0, size: 8}}]"), "mig-enabled is false"),
            (PLAN.replace("gpu: 1", "gpu: 0"), "appears twice"),
            (PLAN.replace("gpu: 1\n      model: H100-80GB\n      mig-enabled: false", "gpu: 1\n      model: H100-80GB\n      mig-enabled: true"), "configs.day[1].workloads"),
            (PLAN.replace("model: H100-80GB\n      mig-enabled: false", "model: X100\n      mig-enabled: false"), "unknown GPU model"),
        ];
        for (text, want) in cases {
            let err = TesseraPlan::parse(&text, "p.yaml").unwrap_err().to_string();
            assert!(err.contains(want), "{want:?} not in {err}");
            assert!(err.starts_with("p.yaml"), "{err}");
        }
    }

    const SCHEDULE: &str = r#"
version: v1
kind: tessera-mig-schedule
timezone: Europe/Berlin
plan: plan.yaml
switches:
  - at: "07:00"
    days: [mon, tue, wed, thu, fri]
    config: day
  - at: "22:00"
    config: night
"#;

    #[test]
    fn schedule_picks_the_latest_switch() {
        let s = MigSchedule::parse(SCHEDULE, "s.yaml").unwrap();
        let at = |t: &str| DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc);
        // Monday 2026-11-23 07:30 CET = 06:30 UTC: day since 06:00 UTC.
        let a = s.active_at(at("2026-11-23T06:30:00Z")).unwrap();
        assert_eq!(a.config, "day");
        assert_eq!(a.since, at("2026-11-23T06:00:00Z"));
        // Monday 06:59 CET: still night since Sunday 22:00 CET.
        let a = s.active_at(at("2026-11-23T05:59:00Z")).unwrap();
        assert_eq!(
            (a.config.as_str(), a.since),
            ("night", at("2026-11-22T21:00:00Z"))
        );
        // Saturday noon: night since Friday 22:00 (no day switch at weekends).
        let a = s.active_at(at("2026-11-28T11:00:00Z")).unwrap();
        assert_eq!(
            (a.config.as_str(), a.since),
            ("night", at("2026-11-27T21:00:00Z"))
        );
        // Summer time: 07:00 CEST = 05:00 UTC.
        let a = s.active_at(at("2026-06-01T05:00:00Z")).unwrap();
        assert_eq!(a.config, "day");
        assert_eq!(MigSchedule::parse(&s.to_yaml(), "again").unwrap(), s);
        assert_eq!(
            s.plan_path(Path::new("/etc/tessera/schedule.yaml"), false)
                .unwrap(),
            PathBuf::from("/etc/tessera/plan.yaml")
        );
        // Only beside the schedule, unless allowed.
        for outside in ["/var/run/secrets/token", "../plan.yaml", "sub/../../x"] {
            let o = MigSchedule {
                plan: outside.into(),
                ..s.clone()
            };
            let e = o
                .plan_path(Path::new("/etc/tessera/schedule.yaml"), false)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not in the schedule's folder"), "{e}");
            assert!(
                o.plan_path(Path::new("/etc/tessera/schedule.yaml"), true)
                    .is_ok()
            );
        }
        let sub = MigSchedule {
            plan: "./plans/day.yaml".into(),
            ..s.clone()
        };
        assert_eq!(
            sub.plan_path(Path::new("/etc/tessera/schedule.yaml"), false)
                .unwrap(),
            PathBuf::from("/etc/tessera/./plans/day.yaml")
        );
    }

    #[test]
    fn rejects_bad_schedules() {
        let cases = [
            (
                SCHEDULE.replace("Europe/Berlin", "Mars/Olympus"),
                "unknown time zone",
            ),
            (SCHEDULE.replace("\"07:00\"", "\"7am\""), "switches[0].at"),
            (SCHEDULE.replace("thu, fri", "thu, friday"), "bad day"),
            (
                SCHEDULE.replace("kind: tessera-mig-schedule", "kind: tessera-mig-plan"),
                "kind",
            ),
            (
                SCHEDULE.replace("config: night", "conf: night"),
                "unknown field",
            ),
        ];
        for (text, want) in cases {
            let err = MigSchedule::parse(&text, "s.yaml").unwrap_err().to_string();
            assert!(err.contains(want), "{want:?} not in {err}");
        }
    }
}
