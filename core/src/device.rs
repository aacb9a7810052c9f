//! The device layer's one interface: [`GpuBackend`].
//!
//! Everything that touches a GPU goes through this trait. Two implementations exist:
//! [`NvmlBackend`](crate::nvml::NvmlBackend) (the real driver, or a fake `libnvidia-ml.so` in
//! tests) and [`SimBackend`](crate::sim::SimBackend) (a seeded, simulated node on a virtual
//! clock). This module holds the trait and its error type only; it does no I/O itself.
//!
//! Architecture invariant: backends are called only from the sampler thread (or a one-shot CLI
//! command). HTTP handlers and the analyzer never call a backend while serving a request; they read
//! published snapshots instead.
//!
//! This is the read side. The MIG write side (create/destroy instances, MIG mode) is
//! [`crate::mig::control::MigControl`], implemented by the same two backends; only the one-shot
//! `tessera mig apply` calls it.

use crate::model::{Inventory, NodeSample};

/// Errors at the device-layer boundary.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The NVML library could not be loaded (no driver installed, or a wrong `--nvml.lib-path`).
    #[error(
        "NVML not available: {detail} — is the NVIDIA driver installed? Use --backend sim to try without a GPU"
    )]
    LibraryNotFound { detail: String },
    /// The library loaded but the kernel driver is not running.
    #[error(
        "NVML not available: the NVIDIA kernel driver is not loaded ({detail}). Use --backend sim to try without a GPU"
    )]
    DriverNotLoaded { detail: String },
    /// The loaded library lacks a function tessera needs (driver too old, or an incomplete fake).
    #[error("NVML function {symbol} is missing from the loaded library (driver too old?)")]
    MissingSymbol { symbol: String },
    /// A node-level NVML call failed (the sampler re-initialises with backoff).
    #[error("NVML call {call} failed: {kind}")]
    Nvml { call: String, kind: String },
    /// The backend could not be set up from its configuration (e.g. an invalid simulator
    /// scenario: `sim` converts its `ScenarioError` into this, so this module names no backend).
    #[error("{detail}")]
    Setup { detail: String },
}

impl DeviceError {
    /// Whether the error means the driver itself is unusable, so the backend should be re-created
    /// (NVML re-initialised) rather than merely retried.
    pub fn is_driver_level(&self) -> bool {
        matches!(
            self,
            DeviceError::DriverNotLoaded { .. }
                | DeviceError::Nvml { .. }
                | DeviceError::LibraryNotFound { .. }
        )
    }
}

/// A source of GPU inventory and samples for one node.
///
/// One call to [`sample`](GpuBackend::sample) returns one consistent snapshot of every GPU. A
/// failure confined to one GPU is reported in that GPU's [`status`](crate::model::GpuSample::status)
/// and never drops the others; only node-level failures (driver gone) are returned as `Err`.
pub trait GpuBackend: Send {
    /// Short backend name for logs and self-metrics (`nvml`, `sim`).
    fn name(&self) -> &'static str;

    /// Identity and configuration of every GPU on the node.
    fn inventory(&mut self) -> Result<Inventory, DeviceError>;

    /// One snapshot of every GPU, MIG instance and process on the node.
    fn sample(&mut self) -> Result<NodeSample, DeviceError>;
}
