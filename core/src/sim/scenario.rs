//! Scenario files: the TOML that describes a simulated fleet (nodes, GPUs, MIG layouts, workloads
//! and faults). Documented for users in `docs/scenarios.md`.
//!
//! Parsing is strict (unknown fields are rejected) and [`Scenario::validate`] checks every cross
//! reference (node and GPU names, MIG placements against the model's table, workload placement)
//! and value range (finite durations, windows that end after they start) so a bad file fails
//! with the file, the item and what was expected, never later with a panic.
//!
//! The [`limits`] (file size, nodes, GPUs per node, workloads, faults, MIG instances, fault
//! counts) are checked before anything proportional to them is allocated: the file is read no
//! further than its limit, and counts are compared before GPUs are listed.
//!
//! This module only reads and checks scenario files; it computes nothing over time.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::input_limits;
use crate::mig::{self, GpuModel, LayoutInstance};
use crate::model::Placement;

/// Limits on a scenario, each checked before anything proportional to it is allocated
/// (documented in `docs/scenarios.md`).
pub mod limits {
    /// Largest scenario file, bytes: 16 MiB (`scripts/gen-fleet.py --gpus 1024` writes 320 KB).
    pub const FILE_BYTES: u64 = 16 << 20;
    /// Nodes in a scenario.
    pub const NODES: usize = 4096;
    /// GPUs on one node (the sum of its groups' counts).
    pub const GPUS_PER_NODE: u64 = 64;
    /// Workloads in a scenario.
    pub const WORKLOADS: usize = 65_536;
    /// Faults in a scenario.
    pub const FAULTS: usize = 10_000;
    /// MIG instances on one GPU (no MIG profile table allows more than 7).
    pub const MIG_INSTANCES_PER_GPU: usize = 7;
    /// `count` of one `ecc` or `row_remap` fault (with [`FAULTS`], sums stay within u32).
    pub const FAULT_COUNT: u64 = 100_000;
    /// Longest training run, hours (a week).
    pub const DURATION_HOURS: f64 = 168.0;
    /// Range of `utc_offset_hours` (the offsets in use on Earth).
    pub const UTC_OFFSET_HOURS: std::ops::RangeInclusive<i32> = -12..=14;
}

/// Errors reading or checking a scenario file.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("scenario {path}: {message}")]
    Parse { path: String, message: String },
    #[error("scenario {path}: {item}: {message}")]
    Invalid {
        path: String,
        item: String,
        message: String,
    },
}

/// A simulated fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    /// Seed of every pseudo-random choice; the same seed gives identical samples.
    #[serde(default)]
    pub seed: u64,
    /// Virtual time at which the simulation starts.
    pub start: DateTime<Utc>,
    /// Offset of the fleet's local time from UTC, hours; daily and weekly cycles follow local time.
    #[serde(default)]
    pub utc_offset_hours: i32,
    #[serde(default = "default_driver")]
    pub driver_version: String,
    #[serde(default = "default_cuda")]
    pub cuda_version: String,
    pub nodes: Vec<NodeSpec>,
    #[serde(default)]
    pub workloads: Vec<WorkloadSpec>,
    #[serde(default)]
    pub faults: Vec<FaultSpec>,
    /// Where the scenario was read from (for error messages); not part of the file.
    #[serde(skip)]
    pub source: String,
}

fn default_driver() -> String {
    "550.54.15".into()
}
fn default_cuda() -> String {
    "12.4".into()
}

/// One node and its GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub name: String,
    /// GPU groups in index order, e.g. `[{ model = "H100-80GB", count = 4 }]`.
    pub gpus: Vec<GpuGroup>,
    /// MIG layouts of some of the node's GPUs.
    #[serde(default)]
    pub mig: Vec<MigSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuGroup {
    pub model: String,
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

/// MIG enabled on one GPU, with its instances (one compute instance per GPU instance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    pub gpu: u32,
    pub instances: Vec<MigInstanceSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigInstanceSpec {
    /// Profile name on this SKU (`3g.40gb`) or profile id as a string (`"9"`).
    pub profile: String,
    /// Placement start slot on the memory-slice axis.
    pub start: u32,
}

/// The kinds of workload the simulator models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKind {
    /// Online inference: always loaded, activity follows a daily cycle (peak 14:00 local) and is
    /// lower at weekends.
    Inference,
    /// A loaded model nobody uses: memory held, activity exactly 0.
    Idle,
    /// Training: loaded and near peak activity while scheduled, absent otherwise.
    Training,
    /// Interactive notebook: loaded during working hours, bursts of activity in 5-minute buckets.
    Notebook,
    /// Batch inference: runs every `every_hours` for `duration_minutes`.
    Batch,
}

/// One workload: a process on a GPU (or MIG instance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    pub name: String,
    pub kind: WorkloadKind,
    pub node: String,
    pub gpu: u32,
    /// Placement start of the MIG instance it runs on (required on MIG-enabled GPUs).
    #[serde(default)]
    pub mig_start: Option<u32>,
    pub memory_gib: f64,
    /// Peak SM activity of its GPU (or MIG instance), 0–1.
    #[serde(default = "default_peak")]
    pub peak: f64,
    /// Activity floor of inference workloads, 0–1.
    #[serde(default = "default_base")]
    pub base: f64,
    /// SM activity per unit of busy time: busy = activity / efficiency (capped at 1). Low values
    /// plant "busy but not working" GPUs.
    #[serde(default = "default_efficiency")]
    pub efficiency: f64,
    /// Noise amplitude added to activity, 0–1.
    #[serde(default = "default_noise")]
    pub noise: f64,
    /// Active window (absent: the whole simulation).
    #[serde(default)]
    pub from: Option<DateTime<Utc>>,
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
    /// Training and batch: local hour the run starts.
    #[serde(default)]
    pub start_hour: Option<f64>,
    /// Training: run length in hours.
    #[serde(default)]
    pub duration_hours: Option<f64>,
    /// Training: weekdays it runs (`mon`..`sun`); absent: every day.
    #[serde(default)]
    pub days: Option<Vec<String>>,
    /// Batch: hours between runs.
    #[serde(default)]
    pub every_hours: Option<f64>,
    /// Batch: run length in minutes.
    #[serde(default)]
    pub duration_minutes: Option<f64>,
    /// Notebook: probability that a 5-minute bucket of working hours is busy.
    #[serde(default)]
    pub burst_probability: Option<f64>,
    #[serde(default = "default_process")]
    pub process: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub pod: Option<String>,
    #[serde(default)]
    pub slurm_job: Option<String>,
}

fn default_peak() -> f64 {
    0.8
}
fn default_base() -> f64 {
    0.05
}
fn default_efficiency() -> f64 {
    0.6
}
fn default_noise() -> f64 {
    0.03
}
fn default_process() -> String {
    "python3".into()
}

/// The kinds of fault the simulator injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// One XID event at `at`.
    Xid,
    /// The GPU falls off the bus from `at` until `until` (or the end).
    GpuLost,
    /// Reads of `field` fail with `error` from `at` until `until`.
    NvmlError,
    /// `field` is NotSupported on this GPU (from `at`, default the start).
    NotSupported,
    /// `count` ECC errors (corrected unless `uncorrected`) at `at`.
    Ecc,
    /// `count` memory rows remapped at `at` (for uncorrectable errors if `uncorrected`), the
    /// remapping pending until `until` (a GPU reset; default: pending for good); with
    /// `failure`, the remapping failed instead.
    RowRemap,
    /// Every NVML call on the node fails (driver-level) from `at` until `until`.
    DriverError,
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    pub kind: FaultKind,
    pub node: String,
    /// GPU index; not used by `driver_error`.
    #[serde(default)]
    pub gpu: Option<u32>,
    #[serde(default)]
    pub at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
    #[serde(default)]
    pub xid: Option<u64>,
    /// Field of `nvml_error` / `not_supported` faults; see [`Field`](super::Field).
    #[serde(default)]
    pub field: Option<String>,
    /// Error kind of `nvml_error` faults: `unknown`, `timeout`, `no_permission`, `gpu_lost`.
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub count: Option<u64>,
    #[serde(default)]
    pub uncorrected: bool,
    /// `row_remap` faults: the remapping failed (NVML `failureOccurred`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failure: bool,
}

impl Scenario {
    /// Read, parse and validate a scenario file (refused past [`limits::FILE_BYTES`] without
    /// reading further).
    pub fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = input_limits::read_to_string(path, limits::FILE_BYTES).map_err(|e| match e {
            input_limits::ReadError::Io(source) => ScenarioError::Read {
                path: path.to_path_buf(),
                source,
            },
            input_limits::ReadError::Limit(e) => ScenarioError::Invalid {
                path: path.display().to_string(),
                item: "file".into(),
                message: format!("{e}{SEE_LIMITS}"),
            },
        })?;
        Scenario::from_toml(&text, &path.display().to_string())
    }

    /// Parse and validate scenario text; `source` names it in errors.
    pub fn from_toml(text: &str, source: &str) -> Result<Scenario, ScenarioError> {
        if text.len() as u64 > limits::FILE_BYTES {
            return Err(ScenarioError::Invalid {
                path: source.to_string(),
                item: "file".into(),
                message: format!(
                    "{}{SEE_LIMITS}",
                    input_limits::LimitError::TooLarge {
                        size: Some(text.len() as u64),
                        limit: limits::FILE_BYTES,
                    }
                ),
            });
        }
        let mut s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: source.to_string(),
            message: toml_message(text, &e),
        })?;
        s.source = source.to_string();
        s.validate()?;
        Ok(s)
    }

    fn invalid(&self, item: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        ScenarioError::Invalid {
            path: self.source.clone(),
            item: item.into(),
            message: input_limits::clip(&message.into()),
        }
    }

    /// The models of a node's GPUs in index order.
    pub fn node_models(&self, node: &NodeSpec) -> Vec<&'static GpuModel> {
        node.gpus
            .iter()
            .flat_map(|g| {
                let m = mig::model(&g.model).expect("validated");
                std::iter::repeat_n(m, g.count as usize)
            })
            .collect()
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The MIG layout of one GPU as checked instances (profile id, placement).
    pub fn mig_layout(
        &self,
        model: &GpuModel,
        spec: &MigSpec,
    ) -> Result<Vec<LayoutInstance>, String> {
        spec.instances
            .iter()
            .map(|i| {
                let profile = model
                    .profile_by_name(&i.profile)
                    .or_else(|| i.profile.parse().ok().and_then(|id| model.profile(id)))
                    .ok_or_else(|| {
                        let names: Vec<_> =
                            model.profiles.iter().map(|p| p.name.as_str()).collect();
                        format!(
                            "unknown MIG profile {:?} for {}; expected one of {}",
                            i.profile,
                            model.key,
                            names.join(", ")
                        )
                    })?;
                Ok(LayoutInstance {
                    profile_id: profile.id,
                    placement: Placement {
                        start: i.start,
                        size: profile.memory_slices,
                    },
                })
            })
            .collect()
    }

    /// The [`limits`]: counts only, before anything proportional to them is built.
    fn check_limits(&self) -> Result<(), ScenarioError> {
        for (what, n, max) in [
            ("nodes", self.nodes.len(), limits::NODES),
            ("workloads", self.workloads.len(), limits::WORKLOADS),
            ("faults", self.faults.len(), limits::FAULTS),
        ] {
            if n > max {
                return Err(self.invalid(
                    what,
                    format!("{n} {what}; expected at most {max}{SEE_LIMITS}"),
                ));
            }
        }
        for (ni, node) in self.nodes.iter().enumerate() {
            let item = format!("nodes[{ni}] ({})", node.name);
            if let Some(gi) = node.gpus.iter().position(|g| g.count == 0) {
                return Err(self.invalid(
                    format!("{item}.gpus[{gi}]"),
                    "count = 0; expected at least 1 GPU in a group",
                ));
            }
            // At most 2^32 groups' worth of text fits no file; each count is below 2^32.
            let gpus: u64 = node.gpus.iter().map(|g| g.count as u64).sum();
            if gpus > limits::GPUS_PER_NODE {
                return Err(self.invalid(
                    format!("{item}.gpus"),
                    format!(
                        "{gpus} GPUs; expected at most {} per node{SEE_LIMITS}",
                        limits::GPUS_PER_NODE
                    ),
                ));
            }
            if node.mig.len() as u64 > gpus {
                return Err(self.invalid(
                    item,
                    format!(
                        "{} MIG layouts for {gpus} GPU(s); expected at most one per GPU",
                        node.mig.len()
                    ),
                ));
            }
            for (mi, m) in node.mig.iter().enumerate() {
                if m.instances.len() > limits::MIG_INSTANCES_PER_GPU {
                    return Err(self.invalid(
                        format!("{item}.mig[{mi}]"),
                        format!(
                            "{} MIG instances; expected at most {} per GPU{SEE_LIMITS}",
                            m.instances.len(),
                            limits::MIG_INSTANCES_PER_GPU
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Check the [`limits`], then every cross reference and value range. Linear in the size
    /// of the scenario.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        self.check_limits()?;
        if !limits::UTC_OFFSET_HOURS.contains(&self.utc_offset_hours) {
            return Err(self.invalid(
                "utc_offset_hours",
                format!(
                    "utc_offset_hours = {}; expected {} to {} (hours from UTC)",
                    self.utc_offset_hours,
                    limits::UTC_OFFSET_HOURS.start(),
                    limits::UTC_OFFSET_HOURS.end()
                ),
            ));
        }
        if self.nodes.is_empty() {
            return Err(self.invalid("nodes", "a scenario needs at least one node"));
        }
        let known: Vec<_> = mig::models().iter().map(|m| m.key).collect();
        // Each node's index and GPU models, by name (built once: look-ups are not linear).
        let mut nodes: HashMap<&str, (&NodeSpec, Vec<&'static GpuModel>)> = HashMap::new();
        for (ni, node) in self.nodes.iter().enumerate() {
            let item = format!("nodes[{ni}] ({})", node.name);
            if node.name.is_empty() {
                return Err(self.invalid(item, "a node needs a name"));
            }
            if nodes.contains_key(node.name.as_str()) {
                return Err(self.invalid(item, "duplicate node name"));
            }
            for g in &node.gpus {
                if mig::model(&g.model).is_none() {
                    return Err(self.invalid(
                        item,
                        format!(
                            "unknown GPU model {:?}; expected one of {}",
                            g.model,
                            known.join(", ")
                        ),
                    ));
                }
            }
            let models = self.node_models(node);
            if models.is_empty() {
                return Err(self.invalid(item, "a node needs at least one GPU"));
            }
            for (mi, spec) in node.mig.iter().enumerate() {
                let item = format!("{item}.mig[{mi}]");
                let model = models.get(spec.gpu as usize).ok_or_else(|| {
                    self.invalid(
                        &item,
                        format!(
                            "GPU {} does not exist (node has {})",
                            spec.gpu,
                            models.len()
                        ),
                    )
                })?;
                if node.mig[..mi].iter().any(|o| o.gpu == spec.gpu) {
                    return Err(
                        self.invalid(&item, format!("GPU {} has two MIG layouts", spec.gpu))
                    );
                }
                let layout = self
                    .mig_layout(model, spec)
                    .map_err(|m| self.invalid(&item, m))?;
                mig::check_layout(model, &layout)
                    .map_err(|e| self.invalid(&item, e.to_string()))?;
            }
            nodes.insert(&node.name, (node, models));
        }
        let mut names = HashSet::new();
        for (wi, w) in self.workloads.iter().enumerate() {
            let item = format!("workloads[{wi}] ({})", w.name);
            if w.name.is_empty() {
                return Err(self.invalid(item, "a workload needs a name"));
            }
            if !names.insert(w.name.as_str()) {
                return Err(self.invalid(item, "duplicate workload name"));
            }
            let (node, models) = nodes
                .get(w.node.as_str())
                .ok_or_else(|| self.invalid(&item, format!("unknown node {:?}", w.node)))?;
            let model = models.get(w.gpu as usize).ok_or_else(|| {
                self.invalid(
                    &item,
                    format!(
                        "GPU {} does not exist on {} (it has {})",
                        w.gpu,
                        w.node,
                        models.len()
                    ),
                )
            })?;
            let mig = node.mig.iter().find(|m| m.gpu == w.gpu);
            match (mig, w.mig_start) {
                (Some(spec), Some(start)) => {
                    if !spec.instances.iter().any(|i| i.start == start) {
                        let starts: Vec<_> = spec.instances.iter().map(|i| i.start).collect();
                        return Err(self.invalid(
                            &item,
                            format!("no MIG instance starts at slot {start}; instances start at {starts:?}"),
                        ));
                    }
                }
                (Some(_), None) => {
                    return Err(self.invalid(
                        &item,
                        "GPU has MIG enabled: set mig_start to the instance's start slot",
                    ));
                }
                (None, Some(_)) => {
                    return Err(
                        self.invalid(&item, "mig_start given but the GPU has no MIG layout")
                    );
                }
                (None, None) => {}
            }
            self.check_workload_values(w, model, &item)?;
        }
        for (fi, f) in self.faults.iter().enumerate() {
            let item = format!("faults[{fi}] ({:?})", f.kind);
            let (_, models) = nodes
                .get(f.node.as_str())
                .ok_or_else(|| self.invalid(&item, format!("unknown node {:?}", f.node)))?;
            let gpus = models.len() as u32;
            if f.kind != FaultKind::DriverError {
                match f.gpu {
                    None => return Err(self.invalid(&item, "gpu is required")),
                    Some(g) if g >= gpus => {
                        return Err(self.invalid(
                            &item,
                            format!("GPU {g} does not exist on {} (it has {gpus})", f.node),
                        ));
                    }
                    _ => {}
                }
            }
            if let (Some(at), Some(until)) = (f.at, f.until)
                && until <= at
            {
                return Err(self.invalid(
                    &item,
                    format!(
                        "until ({}) must be after at ({})",
                        until.to_rfc3339(),
                        at.to_rfc3339()
                    ),
                ));
            }
            if let Some(c) = f.count
                && !(1..=limits::FAULT_COUNT).contains(&c)
            {
                return Err(self.invalid(
                    &item,
                    format!("count = {c}; expected 1–{}", limits::FAULT_COUNT),
                ));
            }
            match f.kind {
                FaultKind::Xid if f.xid.is_none() || f.at.is_none() => {
                    return Err(self.invalid(&item, "xid faults need xid and at"));
                }
                FaultKind::Ecc if f.at.is_none() => {
                    return Err(self.invalid(&item, "ecc faults need at"));
                }
                FaultKind::RowRemap if f.at.is_none() => {
                    return Err(self.invalid(&item, "row_remap faults need at"));
                }
                _ if f.failure && f.kind != FaultKind::RowRemap => {
                    return Err(self.invalid(&item, "failure applies to row_remap faults only"));
                }
                FaultKind::NvmlError | FaultKind::NotSupported => {
                    let field = f.field.as_deref().unwrap_or("");
                    if crate::model::Field::parse(field).is_none() {
                        return Err(self.invalid(
                            &item,
                            format!(
                                "field {field:?}; expected one of {}",
                                crate::model::Field::names().join(", ")
                            ),
                        ));
                    }
                    if f.kind == FaultKind::NvmlError {
                        let e = f.error.as_deref().unwrap_or("unknown");
                        if !crate::model::ERROR_KINDS.contains(&e) {
                            return Err(self.invalid(
                                &item,
                                format!(
                                    "error {e:?}; expected one of {}",
                                    crate::model::ERROR_KINDS.join(", ")
                                ),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The value ranges of one workload on a GPU of `model`: ratios in 0–1, finite durations
    /// and periods, a window that ends after it starts.
    fn check_workload_values(
        &self,
        w: &WorkloadSpec,
        model: &GpuModel,
        item: &str,
    ) -> Result<(), ScenarioError> {
        for (name, v) in [("peak", w.peak), ("base", w.base), ("noise", w.noise)] {
            if !(0.0..=1.0).contains(&v) {
                return Err(self.invalid(item, format!("{name} = {v}; expected a ratio in 0–1")));
            }
        }
        if !(w.efficiency > 0.0 && w.efficiency <= 1.0) {
            return Err(self.invalid(
                item,
                format!("efficiency = {}; expected 0 < efficiency ≤ 1", w.efficiency),
            ));
        }
        let mem_total = model.memory_total_bytes as f64 / (1u64 << 30) as f64;
        if !(w.memory_gib >= 0.0 && w.memory_gib <= mem_total) {
            return Err(self.invalid(
                item,
                format!(
                    "memory_gib = {}; expected 0–{mem_total:.1} for {}",
                    w.memory_gib, model.key
                ),
            ));
        }
        if let (Some(from), Some(until)) = (w.from, w.until)
            && until <= from
        {
            return Err(self.invalid(
                item,
                format!(
                    "until ({}) must be after from ({})",
                    until.to_rfc3339(),
                    from.to_rfc3339()
                ),
            ));
        }
        if let Some(d) = w.duration_hours
            && !(d > 0.0 && d <= limits::DURATION_HOURS)
        {
            return Err(self.invalid(
                item,
                format!(
                    "duration_hours = {d}; expected more than 0 and at most {} (a week)",
                    limits::DURATION_HOURS
                ),
            ));
        }
        for (name, v) in [
            ("every_hours", w.every_hours),
            ("duration_minutes", w.duration_minutes),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return Err(self.invalid(
                    item,
                    format!("{name} = {v}; expected a finite number more than 0"),
                ));
            }
        }
        let training_half_scheduled = w.start_hour.is_none() != w.duration_hours.is_none();
        if w.kind == WorkloadKind::Training && training_half_scheduled {
            return Err(self.invalid(
                item,
                "training needs both start_hour and duration_hours (or neither, with from/until)",
            ));
        }
        match (w.kind, w.every_hours, w.duration_minutes) {
            (WorkloadKind::Batch, Some(every), Some(minutes)) if minutes > every * 60.0 => {
                return Err(self.invalid(
                    item,
                    format!(
                        "duration_minutes = {minutes} is longer than every_hours = {every} ({} minutes): a run must end before the next starts",
                        every * 60.0
                    ),
                ));
            }
            (WorkloadKind::Batch, None, _) | (WorkloadKind::Batch, _, None) => {
                return Err(
                    self.invalid(item, "batch needs every_hours > 0 and duration_minutes > 0")
                );
            }
            _ => {}
        }
        if let Some(h) = w.start_hour
            && !(0.0..24.0).contains(&h)
        {
            return Err(self.invalid(item, format!("start_hour = {h}; expected 0 ≤ hour < 24")));
        }
        if let Some(days) = &w.days {
            let mut seen = [false; 7];
            for d in days {
                let Some(i) = super::activity::weekday_index(d) else {
                    return Err(self.invalid(
                        item,
                        format!(
                            "unknown weekday {d:?}; expected mon, tue, wed, thu, fri, sat or sun"
                        ),
                    ));
                };
                if std::mem::replace(&mut seen[i as usize], true) {
                    return Err(self.invalid(item, format!("days lists {d:?} twice")));
                }
            }
        }
        if let Some(p) = w.burst_probability
            && !(0.0..=1.0).contains(&p)
        {
            return Err(self.invalid(item, format!("burst_probability = {p}; expected 0–1")));
        }
        Ok(())
    }
}

/// Pointer to the documented limits, appended to limit errors.
const SEE_LIMITS: &str = " (limits: docs/scenarios.md)";

/// A TOML error on one line: its position and message, without toml's echo of the source line
/// (a whole, possibly megabytes-long line, twice).
fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let message = input_limits::clip(e.message().trim_end());
    match e.span() {
        Some(span) => {
            let before = &text.as_bytes()[..span.start.min(text.len())];
            let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
            let line_start = before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let column = String::from_utf8_lossy(&before[line_start..])
                .chars()
                .count()
                + 1;
            let rest = &text[line_start..];
            let source_line = &rest[..rest.find('\n').unwrap_or(rest.len())];
            format!(
                "TOML parse error at line {line}, column {column} ({}): {message}",
                excerpt(source_line.trim_end(), column - 1)
            )
        }
        None => format!("TOML parse error: {message}"),
    }
}

/// At most 80 characters of `line` around character `column`, marked `…` where cut.
fn excerpt(line: &str, column: usize) -> String {
    let chars: Vec<char> = line.chars().take(column + 41).collect();
    let from = column.saturating_sub(40).min(chars.len());
    let mut out: String = chars[from..].iter().collect();
    if from > 0 {
        out.insert(0, '…');
    }
    if line.chars().count() > chars.len() {
        out.push('…');
    }
    format!("`{out}`")
}
