//! tessera-exporter's library: everything that touches a GPU, and the sample model.
//!
//! - [`model`]: inventory and sample types, in base units (the vocabulary of every layer).
//! - [`device`]: the one backend trait, [`device::GpuBackend`], and its error type.
//! - [`nvml`]: the NVML backend (nvml-wrapper, loaded at run time; raw calls where the crate has gaps).
//! - [`sim`]: the simulated fleet (scenarios, workloads, faults, ground truth) and its backend.
//! - [`mig`]: GPU models, MIG profile tables and the layout checker.
//! - [`mig_config`]: the planned MIG layout (nvidia-mig-parted v1 files) and drift from it.
//! - [`mig_plan`]: tessera's MIG plan (explicit placements) and schedule formats.
//! - [`mig_control`]: the MIG write side of the device layer (instances, MIG mode) and node MIG state.
//! - [`mig_apply`]: applying a MIG plan safely (diff, steps, checkpoint, rollback, journal, lock).
//! - [`sampler`]: the sampler thread that publishes immutable snapshots.
//! - [`idle`]: how long each process and GPU has done nothing (on the sampler's clock).
//! - [`attribution`]: the pod, container or Slurm job of a GPU process, from `/proc/<pid>/cgroup`.
//! - [`history`]: interval rows on disk (aggregation, JSONL/Parquet writer, strict reader).
//! - [`render`]: one snapshot as a table or JSON (the `--once` output).
//! - [`web`]: the HTTP layer (telemetry path, landing page, health, TLS, basic auth, limits).
//!
//! This crate never links polars and never depends on the analyzer (`tessera`); the analyzer
//! depends on it for the device layer and the sample model.

pub mod attribution;
pub mod device;
pub mod history;
pub mod idle;
pub mod input_limits;
pub mod metrics;
pub mod mig;
pub mod mig_apply;
pub mod mig_check;
pub mod mig_config;
pub mod mig_control;
pub mod mig_plan;
pub mod model;
pub mod nvml;
pub mod render;
pub mod sampler;
pub mod sim;
pub mod web;
