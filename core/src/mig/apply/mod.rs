//! Applying a MIG layout safely: targets from a plan, the diff against the node, the exact
//! steps, and their execution with a checkpoint, rollback, a journal and a lock.
//!
//! - [`read_plan`] + [`targets`]: a tessera plan (`tessera-mig-plan` v1, [`crate::mig::plan`]) or
//!   an nvidia-mig-parted v1 file ([`crate::mig::parted`], placed largest first, keeping the
//!   current placements when the profile mix is unchanged) → one [`GpuTarget`] per GPU of this
//!   node the plan names. GPUs the plan does not name are never touched; a plan naming none of
//!   this node's GPUs is an error ([`ApplyError::NoGpuOfNode`]), never an empty check.
//! - [`diff`]: current state vs targets by (profile id, placement): only differing instances are
//!   destroyed or created; matching instances are left alone. A MIG mode change that a GPU reset
//!   must complete is a *pending* note, not a step.
//! - [`Applier::execute`]: refuses before any change when an instance to destroy (or a GPU whose
//!   mode changes) has processes; records the checkpoint (the state before), runs each step and
//!   journals it; on any failure restores the checkpoint (destroying what was partly created) and
//!   checks the result; afterwards checks the node against the targets.
//! - [`Applier::open`]: the lock, then the journal with a torn last line cut off
//!   ([`Journal::repair_tail`]). [`Applier::recover`]: a run interrupted mid-way (its journal
//!   `begin` has no `end`) is restored to its checkpoint by the next run.
//! - [`export_plan`] / [`export_mig_parted`]: the node's current layout in either format.
//!
//! Never: reset a GPU (a pending mode change is reported with the command the operator must run),
//! or touch a GPU or instance that already matches.

mod execute;
mod export;
pub mod journal;
pub mod lock;
mod steps;
mod target;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use execute::{Applied, Applier, Recovered, StepOutcome};
pub use export::{export_mig_parted, export_plan};
pub use journal::{Interrupted, Journal, Record, TornTail, new_run_id};
pub use lock::ApplyLock;
pub use steps::{Diff, GpuDiff, Step, diff};
pub use target::{
    LayoutFile, checkpoint_targets, read_plan, read_plan_named, select_parted, targets,
};

use crate::mig::control::{ControlError, GpuMigState};
use crate::mig::parted::PartedError;
use crate::mig::plan::TesseraPlanError;
use crate::mig::{self, GpuModel};
use crate::model::Placement;

/// Errors of export, assert and apply.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Plan(#[from] TesseraPlanError),
    #[error(transparent)]
    MigParted(#[from] PartedError),
    #[error("cannot read plan {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A plan named by another file (a schedule's `plan:`) that does not read as one; its
    /// content is never quoted.
    #[error(
        "plan {path} (named by {by}): {what}; its content is not shown because another file named it: check it with `tessera mig apply {path}`"
    )]
    NamedPlan {
        path: PathBuf,
        by: PathBuf,
        what: String,
    },
    /// The plan does not fit this node (missing GPU, other UUID or model, MIG unsupported).
    #[error("{source_name}: GPU {gpu}: {message}")]
    Target {
        source_name: String,
        gpu: u32,
        message: String,
    },
    /// The selected config names no GPU of this node: nothing would be checked or changed.
    #[error("{source_name}, config {label:?}, names no GPU of node {node}: {detail}")]
    NoGpuOfNode {
        source_name: String,
        label: String,
        node: String,
        detail: String,
    },
    #[error(transparent)]
    Control(#[from] ControlError),
    /// Instances to destroy (or GPUs whose mode changes) have running processes: nothing changed.
    #[error(
        "refusing to apply: processes run where the plan changes the layout (nothing was changed):\n{}",
        .0.join("\n")
    )]
    Busy(Vec<String>),
    #[error(
        "another tessera mig apply holds the lock {path} ({holder}); wait for it to finish, or choose another --lock only if it manages other GPUs"
    )]
    LockHeld { path: PathBuf, holder: String },
    #[error("lock file {path}: {message}")]
    Lock { path: PathBuf, message: String },
    #[error("journal {path}: {message}")]
    Journal { path: PathBuf, message: String },
    /// A step failed; the checkpoint was restored.
    #[error(
        "step {step} failed: {error}; rolled back to the state before the apply (journal: {journal})"
    )]
    RolledBack {
        step: String,
        error: String,
        journal: PathBuf,
    },
    /// A step failed and the restore did not reach the checkpoint either.
    #[error(
        "{context}; restoring the checkpoint failed too: {errors}. The journal {journal} keeps the checkpoint: the next tessera mig apply retries the restore"
    )]
    RestoreIncomplete {
        context: String,
        errors: String,
        journal: PathBuf,
    },
    /// Every step succeeded but the node still differs from the plan.
    #[error("after applying, the node still differs from the plan:\n{0}")]
    StillDiffers(String),
}

/// One instance of a target layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetInstance {
    pub profile_id: u32,
    pub placement: Placement,
    /// Whether it must carry a compute instance (always for plans; as found for checkpoints).
    pub compute: bool,
}

/// What one GPU must look like.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuTarget {
    pub gpu: u32,
    pub mig_enabled: bool,
    pub instances: Vec<TargetInstance>,
}

fn model_of(g: &GpuMigState) -> Option<&'static GpuModel> {
    g.model
        .as_deref()
        .and_then(mig::model)
        .or_else(|| mig::model_by_nvml_name(&g.name))
}

fn profile_name(model: Option<&GpuModel>, id: u32) -> String {
    model
        .and_then(|m| m.profile(id))
        .map_or_else(|| format!("profile {id}"), |p| p.name.clone())
}

#[cfg(test)]
mod tests;
