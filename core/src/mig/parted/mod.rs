//! The node's planned MIG layout, in nvidia-mig-parted's declarative format (`version: v1`), and
//! the comparison of the GPUs' actual layout with it ("drift", `tessera_mig_layout_drift`).
//!
//! The format is the one `nvidia-mig-parted apply -f FILE -c LABEL` and the GPU Operator's MIG
//! manager read:
//!
//! ```yaml
//! version: v1
//! mig-configs:
//!   inference-node:                      # a label: what --mig.config-label selects
//!     - devices: [0, 1]                  # "all" or GPU indices
//!       mig-enabled: false
//!     - device-filter: ["0x233010DE"]    # optional: PCI device ids (device << 16 | vendor)
//!       devices: all
//!       mig-enabled: true
//!       mig-devices: { "3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1 }
//! ```
//!
//! Parsing is strict: unknown keys, a missing `devices` or `mig-enabled`, `mig-devices` on a
//! MIG-disabled entry, a malformed profile name or device id all fail with the file, the YAML
//! path and (for syntax and type errors) the line and column. Compute-instance profiles
//! (`1c.3g.40gb`) are rejected: tessera models one compute instance per GPU instance.
//!
//! Semantics follow mig-parted's: an entry applies to every GPU whose index it lists (or all) and,
//! with a `device-filter`, whose PCI device id is listed. A GPU no entry selects has no plan (no
//! drift series). Two entries that select the same GPU must agree. [`PartedConfig::validate`] validates a
//! plan against a node's inventory (profile names of the GPU's model, MIG support, whether the
//! instances fit); [`PartedConfig::drift`] compares MIG mode and the count of GPU instances per profile
//! (placements are not compared: mig-parted does not specify them either).
//!
//! Files larger than [`input_limits::MAX_YAML_BYTES`] or nested deeper than
//! [`input_limits::MAX_YAML_DEPTH`] are refused before they are parsed ([`PartedError::Limit`],
//! with line and column), as are `mig-devices` asking for more than [`MAX_GPU_INSTANCES`] GPU
//! instances and `devices` lists longer than [`MAX_DEVICE_INDICES`].
//!
//! PCI device ids come from tessera's model table ([`crate::mig::GpuModel::pci_device_id`]), keyed
//! by the product name NVML reports; a GPU of another model cannot be matched by a
//! `device-filter` and has no profile names tessera knows, so [`PartedConfig::validate`] rejects plans
//! that need either for it.
//!
//! This module is pure: it reads the file it is given and never calls NVML.

mod drift;
mod format;
mod placement;

use std::path::PathBuf;

use crate::input_limits;

pub use drift::GpuDrift;
pub use format::{Devices, PartedEntry, PartedFile};
pub use placement::place;

/// Errors reading, parsing or checking a MIG configuration.
#[derive(Debug, thiserror::Error)]
pub enum PartedError {
    #[error("cannot read MIG config {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// YAML syntax or a value of the wrong type; `message` carries the YAML path, line and column.
    #[error("MIG config {path}: {message}")]
    Parse { path: String, message: String },
    /// A value that parsed but is not valid nvidia-mig-parted v1.
    #[error("MIG config {path}: {item}: {message}")]
    Invalid {
        path: String,
        item: String,
        message: String,
    },
    /// The label given to --mig.config-label is not in the file.
    #[error("MIG config {path}: no config labelled {label:?}; the file has: {available}")]
    NoLabel {
        path: String,
        label: String,
        available: String,
    },
    /// Larger or deeper than [`input_limits`] allows (see docs/mig.md).
    #[error("MIG config {path}: {limit}")]
    Limit {
        path: String,
        limit: input_limits::LimitError,
    },
    /// The selected config cannot be checked on, or does not fit, one of the node's GPUs.
    #[error("MIG config {path}, config {label:?}: GPU {gpu} ({name}): {message}")]
    Gpu {
        path: String,
        label: String,
        gpu: u32,
        name: String,
        message: String,
    },
}

/// Most GPU instances a GPU holds (seven `1g` instances; no MIG profile table allows more): a
/// larger `mig-devices` count or sum is refused when the file is parsed.
pub const MAX_GPU_INSTANCES: u32 = 7;

/// Longest `devices` list of GPU indices (each missing index is one warning at start).
pub const MAX_DEVICE_INDICES: usize = 64;

/// The selected config: what the node's MIG layout should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartedConfig {
    /// The file it came from.
    pub source: String,
    /// Its label (the `config` label of the drift metrics).
    pub label: String,
    pub entries: Vec<PartedEntry>,
}

#[cfg(test)]
mod tests;
