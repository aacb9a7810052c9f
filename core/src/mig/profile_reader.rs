//! Reading each GPU's MIG profile table from a backend: the [`ProfileReader`] trait, so that
//! `tessera mig profiles` compares what a node's GPUs report with the built-in tables
//! ([`super::profile_compare`]) without naming a backend.
//!
//! Two implementations, like every device trait: NVML (`crate::nvml`, the profile info, its name
//! and the possible placements of every profile index) and the simulator ([`crate::sim`], the
//! built-in table of each simulated GPU's model, so a simulated node always matches). Read-only:
//! nothing here changes a GPU; comparing is [`super::profile_compare`]'s job.

use super::profile_compare::ReportedProfile;
use crate::device::DeviceError;

/// One GPU's profile table as its backend reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuProfileTable {
    /// GPU index on the node.
    pub gpu: u32,
    /// Product name as the backend reports it (NVML's `nvmlDeviceGetName`).
    pub name: String,
    /// Every profile the GPU reports, in the order the backend gives them; empty on a GPU
    /// without MIG.
    pub profiles: Vec<ReportedProfile>,
}

/// Why a profile table could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProfileReadError {
    /// The node's GPUs could not be listed.
    #[error("reading the GPU inventory")]
    Inventory(#[source] DeviceError),
    /// One read of one GPU failed (`what`: which read, and what it means for the check).
    #[error("GPU {gpu} ({name}): {what}")]
    Read {
        gpu: u32,
        name: String,
        what: String,
        #[source]
        source: DeviceError,
    },
}

/// A backend that reports its GPUs' MIG profile tables.
pub trait ProfileReader {
    /// Short backend name (`nvml`, `sim`).
    fn backend_name(&self) -> &'static str;

    /// Every GPU's table, in GPU-index order.
    fn profile_tables(&mut self) -> Result<Vec<GpuProfileTable>, ProfileReadError>;
}
