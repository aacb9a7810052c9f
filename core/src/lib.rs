//! tessera-core: the device layer and the formats both binaries share.
//!
//! - [`model`]: inventory and sample types in base units, [`model::Field`] and
//!   [`model::Attribution`] (the vocabulary of every layer).
//! - [`backend`]: [`backend::BackendSpec`], the one set of backend flags and its openers.
//! - [`device`]: the one read-side backend trait, [`device::GpuBackend`], and its error type.
//! - [`nvml`]: the NVML backend (nvml-wrapper, loaded at run time; raw calls where the crate has
//!   gaps), read and MIG write side.
//! - [`sim`]: the simulated fleet (scenarios, workloads, faults, ground truth) and its backends.
//! - [`mig`]: everything MIG: profile tables, the profile-table comparison, the write side,
//!   nvidia-mig-parted's format, tessera's plan and schedule formats, and `apply`.
//! - [`files`]: replacing a file atomically (every file tessera rewrites).
//! - [`history`]: the history format on disk (schema, aggregation, writer, compaction, reader).
//! - [`simulate`]: a whole scenario's history, driving the simulator and the history writer.
//! - [`input_limits`]: size and depth limits for every untrusted text input.
//! - [`units`]: the one duration parser and the one size parser.
//!
//! Architecture invariant: no tokio, hyper, rustls, prometheus-client or polars. This crate never
//! serves HTTP and never analyses; the exporter (`tessera-exporter`) and the analyzer (`tessera`)
//! both depend on it and never on each other.

pub mod backend;
pub mod device;
pub mod files;
pub mod history;
pub mod input_limits;
pub mod mig;
pub mod model;
pub mod nvml;
pub mod sim;
pub mod simulate;
pub mod units;
