//! MIG, as one tree: what a GPU model can be split into, what the GPUs are split into now, and
//! how tessera changes that safely.
//!
//! - [`profiles`]: GPU models, their MIG profile tables (ids, slices, placements) and the layout
//!   rules (`validate_layout`). Pure data.
//! - [`profile_check`]: a GPU's profile table as NVML reports it compared with the built-in one
//!   (`tessera mig profiles`). Pure.
//! - [`control`]: the write side of the device layer ([`control::MigControl`]) and the node's MIG
//!   state.
//! - [`parted`]: nvidia-mig-parted's v1 config format, and the drift of the GPUs from it.
//! - [`plan`]: tessera's own plan (explicit placements) and schedule formats.
//! - [`apply`]: targets from a plan or a mig-parted config, the diff against the node, the steps,
//!   their execution with checkpoint, rollback, journal and lock.
//!
//! The planner that *writes* plans is the analyzer's (`tessera::mig_planner`); nothing here reads
//! history or analyses use.

pub mod apply;
pub mod control;
pub mod parted;
pub mod plan;
pub mod profile_check;
pub mod profiles;

pub use profiles::{
    GpuModel, LayoutError, LayoutInstance, MigProfile, check_layout, model, model_by_nvml_name,
    models, profile_index,
};
