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

mod parse;
mod validate;

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

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
    /// Allocations in a scenario.
    pub const ALLOCATIONS: usize = 65_536;
    /// MIG instances on one GPU (no MIG profile table allows more than 7).
    pub const MIG_INSTANCES_PER_GPU: usize = 7;
    /// MIG layouts of one GPU over time (windows that do not overlap).
    pub const MIG_LAYOUTS_PER_GPU: u64 = 64;
    /// Moves of one workload.
    pub const MOVES_PER_WORKLOAD: usize = 1024;
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
    /// Devices held by pods or Slurm jobs (allocated), whether or not a process runs there.
    #[serde(default)]
    pub allocations: Vec<AllocationSpec>,
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

/// MIG enabled on one GPU, with its instances (one compute instance per GPU instance), over
/// the window `[from, until)` (absent: from the start, until the end). A GPU may have several
/// layouts whose windows do not overlap; outside every window it is a whole GPU, MIG off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSpec {
    pub gpu: u32,
    pub instances: Vec<MigInstanceSpec>,
    /// Start of the window in which this layout is in force (absent: from the start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<DateTime<Utc>>,
    /// End of the window (absent: until the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
}

impl MigSpec {
    /// Whether the layout is in force at unix second `t`: `from ≤ t < until`.
    pub fn in_force(&self, t: i64) -> bool {
        self.from.is_none_or(|f| t >= f.timestamp()) && self.until.is_none_or(|u| t < u.timestamp())
    }

    /// Whether the layout has a window (`from` or `until`).
    pub fn is_windowed(&self) -> bool {
        self.from.is_some() || self.until.is_some()
    }
}

/// A workload moved to another GPU (or MIG instance, or node) at `at`: from then on it runs
/// there, until the next move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveSpec {
    pub at: DateTime<Utc>,
    /// Node it moves to (absent: the node it was on).
    #[serde(default)]
    pub node: Option<String>,
    pub gpu: u32,
    /// Placement start of its MIG instance there (required where that GPU has MIG enabled).
    #[serde(default)]
    pub mig_start: Option<u32>,
}

/// Where a workload runs over one span of time (its start, or a move, until the next move).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place<'a> {
    /// Unix second the span starts (`None`: from the start).
    pub from: Option<i64>,
    /// Unix second the span ends, exclusive (`None`: until the end).
    pub until: Option<i64>,
    pub node: &'a str,
    pub gpu: u32,
    pub mig_start: Option<u32>,
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

/// Which pipes a workload's SM activity runs on (what GPM's profiling metrics show): the mix
/// `sim::activity::pipe_mix` gives each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pipes {
    /// Half-precision tensor work with heavy DRAM traffic (training, most inference).
    #[default]
    Tensor,
    /// Integer (INT8) tensor work: quantised inference.
    Int8,
    /// FP64 HPC: double-precision pipes and DFMA tensor work.
    Fp64,
    /// Data loading and preprocessing: kernels run, but tensor and DRAM stay nearly idle.
    DataLoading,
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
    /// Which pipes its activity runs on (GPM's tensor, DRAM, FP and NVLink figures).
    #[serde(default)]
    pub pipes: Pipes,
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
    /// Moves to other GPUs or MIG instances over time, in order of `at`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<MoveSpec>,
}

impl WorkloadSpec {
    /// Its places in time order: where it starts (`node`, `gpu`, `mig_start`), then each move.
    /// The spans are not clipped to the workload's own `from`/`until`.
    pub fn places(&self) -> impl Iterator<Item = Place<'_>> + '_ {
        let mut node = self.node.as_str();
        let first = Place {
            from: None,
            until: self.moves.first().map(|m| m.at.timestamp()),
            node,
            gpu: self.gpu,
            mig_start: self.mig_start,
        };
        let rest = self.moves.iter().enumerate().map(move |(i, m)| {
            node = m.node.as_deref().unwrap_or(node);
            Place {
                from: Some(m.at.timestamp()),
                until: self.moves.get(i + 1).map(|n| n.at.timestamp()),
                node,
                gpu: m.gpu,
                mig_start: m.mig_start,
            }
        });
        std::iter::once(first).chain(rest)
    }

    /// Where it runs at unix second `t`.
    pub fn place_at(&self, t: i64) -> Place<'_> {
        if self.moves.is_empty() {
            return Place {
                from: None,
                until: None,
                node: &self.node,
                gpu: self.gpu,
                mig_start: self.mig_start,
            };
        }
        self.places()
            .take_while(|p| p.from.is_none_or(|f| f <= t))
            .last()
            .expect("the first place has no start")
    }

    /// Whether it runs on node `name` at any time.
    pub fn ever_on(&self, name: &str) -> bool {
        self.node == name || self.places().any(|p| p.node == name)
    }
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

/// A GPU or MIG instance held by a pod or a Slurm job (the scheduler's allocation) from `from`
/// until `until`, whether or not a process runs on it: a notebook pod that requested a GPU and
/// never started anything, the GPUs of a Slurm job that uses one of four.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocationSpec {
    pub node: String,
    pub gpu: u32,
    /// Placement start of the MIG instance held (required on MIG-enabled GPUs).
    #[serde(default)]
    pub mig_start: Option<u32>,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub pod: Option<String>,
    #[serde(default)]
    pub slurm_job: Option<String>,
    /// Held window (absent: the whole simulation).
    #[serde(default)]
    pub from: Option<DateTime<Utc>>,
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
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
    /// Field of `nvml_error` / `not_supported` faults; see [`Field`](crate::model::Field).
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
}

/// Pointer to the documented limits, appended to limit errors.
const SEE_LIMITS: &str = " (limits: docs/scenarios.md)";

/// Weekday index (mon = 0) of a three-letter name.
pub fn weekday_index(name: &str) -> Option<u32> {
    ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
        .iter()
        .position(|d| d.eq_ignore_ascii_case(name))
        .map(|i| i as u32)
}
