//! MIG, as one tree: what a GPU model can be split into, what the GPUs are split into now, and
//! how tessera changes that safely.
//!
//! - [`profiles`]: GPU models, their MIG profile tables (ids, slices, placements) and the layout
//!   rules ([`validate_layout`]). Pure data.
//! - [`profile_compare`]: a GPU's profile table as NVML reports it compared with the built-in one
//!   (`tessera mig profiles`). Pure.
//! - [`control`]: the write side of the device layer ([`control::MigControl`]) and the node's MIG
//!   state.
//! - [`parted`]: nvidia-mig-parted's v1 config format, and the drift of the GPUs from it.
//! - [`plan`]: tessera's own plan (explicit placements) and schedule formats; [`plan_sections`]:
//!   the plan's other sections (window, workloads, consolidation moves, schedule, prediction).
//! - [`apply`]: targets from a plan or a mig-parted config, the diff against the node, the steps,
//!   their execution with checkpoint, rollback, journal and lock.
//!
//! One word per concept:
//!
//! - a **plan** is tessera's file ([`plan::TesseraPlan`]), a **config** is nvidia-mig-parted's
//!   ([`parted::PartedFile`], one label of it: [`parted::PartedConfig`]), a **layout file** is
//!   either, as `apply` reads it ([`apply::LayoutFile`]); the analyzer's planner makes a
//!   **proposal** (`tessera::mig_planner::Proposal`) and writes it as a plan;
//! - **validate** checks a layout against the rules of a GPU model ([`validate_layout`]) or a
//!   config against a node's inventory ([`parted::PartedConfig::validate`]); **compare** sets a
//!   reported profile table against the built-in one ([`profile_compare::compare`]); **diff**
//!   sets the node against a plan's targets ([`apply::diff`], which `tessera mig assert` prints);
//!   **drift** is the GPUs' distance from a config (`tessera_mig_layout_drift`).
//!
//! The planner that makes proposals is the analyzer's (`tessera::mig_planner`); nothing here
//! reads history or analyses use.

pub mod apply;
pub mod control;
pub mod parted;
pub mod plan;
pub mod plan_queues;
pub mod plan_sections;
pub mod profile_compare;
pub mod profile_reader;
pub mod profiles;

pub use profiles::{
    GpuModel, LayoutError, LayoutInstance, MigProfile, model, model_by_nvml_name, models,
    profile_index, validate_layout,
};
