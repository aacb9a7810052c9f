//! The device layer's MIG write side: [`MigControl`], the node's MIG state ([`MigNodeState`])
//! and the errors of MIG write calls ([`ControlError`]).
//!
//! Two implementations exist, like [`GpuBackend`](crate::device::GpuBackend)'s:
//! [`NvmlBackend`](crate::nvml::NvmlBackend) (raw NVML calls through the function table, see
//! `nvml/control.rs`) and [`SimMigControl`](crate::sim::control::SimMigControl) (a simulated
//! node whose MIG state lives in a JSON state file between calls).
//!
//! What it does: read every GPU's MIG state (mode current/pending, GPU instances with profile id,
//! placement and compute instances, the processes running on each instance), set MIG mode
//! (returning the activation status), create a GPU instance at an explicit placement, destroy a
//! GPU instance, create or destroy the one compute instance spanning a GPU instance.
//!
//! What it does not do: it never resets a GPU (NVML has no reset call, and tessera never shells
//! out to `nvidia-smi -r`); it plans nothing (see [`crate::mig::apply`]); it creates only compute
//! instances that span their whole GPU instance.

use serde::{Deserialize, Serialize};

use crate::device::DeviceError;
use crate::model::{MigMode, Placement};

/// A process running on a GPU or on one of its MIG instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningProcess {
    pub pid: u32,
    /// Process name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Owner (`pod NAMESPACE/NAME`, `slurm job ID`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl std::fmt::Display for RunningProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}", self.pid)?;
        if let Some(n) = &self.name {
            write!(f, " ({n})")?;
        }
        if let Some(o) = &self.owner {
            write!(f, " of {o}")?;
        }
        Ok(())
    }
}

/// One GPU instance as the device reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInstanceState {
    pub gpu_instance_id: u32,
    pub profile_id: u32,
    pub placement: Placement,
    /// Compute instance ids on this GPU instance.
    #[serde(default)]
    pub compute_instances: Vec<u32>,
    /// Processes running on this GPU instance (any of its compute instances).
    #[serde(default)]
    pub processes: Vec<RunningProcess>,
}

/// One GPU's MIG state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuMigState {
    pub index: u32,
    pub uuid: String,
    /// Product name as NVML reports it.
    pub name: String,
    /// tessera model key (`H100-80GB`), when tessera knows the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// MIG mode; `None` on GPUs without MIG.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_mode: Option<MigMode>,
    /// GPU instances, sorted by placement start.
    #[serde(default)]
    pub instances: Vec<GpuInstanceState>,
    /// Processes on the GPU outside any MIG instance (MIG disabled).
    #[serde(default)]
    pub processes: Vec<RunningProcess>,
}

impl GpuMigState {
    /// Whether MIG is enabled now.
    pub fn mig_current(&self) -> bool {
        self.mig_mode.is_some_and(|m| m.current)
    }

    /// Whether MIG will be enabled after the next GPU reset (equals current when nothing pends).
    pub fn mig_pending(&self) -> bool {
        self.mig_mode.is_some_and(|m| m.pending)
    }
}

/// The node's MIG state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigNodeState {
    pub node: String,
    pub gpus: Vec<GpuMigState>,
}

impl MigNodeState {
    /// The GPU with index `index`.
    pub fn gpu(&self, index: u32) -> Option<&GpuMigState> {
        self.gpus.iter().find(|g| g.index == index)
    }
}

/// What a MIG mode change did (`nvmlDeviceSetMigMode`'s activation status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Activation {
    /// The new mode is in effect.
    Done,
    /// The new mode is recorded and takes effect after a GPU reset (Ampere; VM passthrough).
    PendingReset,
}

/// Errors of MIG write and state calls.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The instance or GPU has running processes (NVML_ERROR_IN_USE).
    #[error("GPU {gpu}: {what} is in use{}", procs_suffix(.processes))]
    InUse {
        gpu: u32,
        what: String,
        processes: Vec<RunningProcess>,
    },
    /// No room: overlap, a max count, the one `+me`, compute slices (NVML_ERROR_INSUFFICIENT_RESOURCES).
    #[error("GPU {gpu}: insufficient resources for {what}: {reason}")]
    InsufficientResources {
        gpu: u32,
        what: String,
        reason: String,
    },
    /// A bad argument (unknown profile, illegal placement, MIG disabled).
    #[error("GPU {gpu}: invalid request {what}: {reason}")]
    Invalid {
        gpu: u32,
        what: String,
        reason: String,
    },
    /// No such GPU, GPU instance or compute instance.
    #[error("GPU {gpu}: {what} not found")]
    NotFound { gpu: u32, what: String },
    /// MIG changes need root.
    #[error("{call}: no permission (MIG changes need root)")]
    NoPermission { call: String },
    /// A fault injected by a test (simulated backend's `fail_write_call`).
    #[error("injected fault: write call #{n} ({call}) failed")]
    Injected { n: u64, call: String },
    /// Any other device error (missing symbol, driver, other NVML return codes).
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The simulated backend's state file could not be read or written.
    #[error("simulated MIG state {path}: {message}")]
    State { path: String, message: String },
}

fn procs_suffix(p: &[RunningProcess]) -> String {
    if p.is_empty() {
        String::new()
    } else {
        format!(
            " by {}",
            p.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// The MIG write side of a node's device layer.
///
/// Every call acts on the real device at once (no batching); a call either succeeds or leaves the
/// device as it was. GPUs are named by index, GPU instances by their id on that GPU.
pub trait MigControl {
    /// Short backend name (`nvml`, `sim`).
    fn backend_name(&self) -> &'static str;

    /// Every GPU's MIG state, with processes per instance.
    fn read_state(&mut self) -> Result<MigNodeState, ControlError>;

    /// Enable or disable MIG mode. Never resets the GPU: on Ampere the change is pending until
    /// the operator resets it. `InUse` when processes run on the GPU.
    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> Result<Activation, ControlError>;

    /// Create a GPU instance of `profile_id` at `placement`; returns its GPU instance id.
    fn create_gpu_instance(
        &mut self,
        gpu: u32,
        profile_id: u32,
        placement: Placement,
    ) -> Result<u32, ControlError>;

    /// Destroy GPU instance `gpu_instance` (it must have no compute instances left).
    fn destroy_gpu_instance(&mut self, gpu: u32, gpu_instance: u32) -> Result<(), ControlError>;

    /// Create one compute instance spanning GPU instance `gpu_instance`; returns its id.
    fn create_compute_instance(&mut self, gpu: u32, gpu_instance: u32)
    -> Result<u32, ControlError>;

    /// Destroy compute instance `compute_instance` of GPU instance `gpu_instance`.
    fn destroy_compute_instance(
        &mut self,
        gpu: u32,
        gpu_instance: u32,
        compute_instance: u32,
    ) -> Result<(), ControlError>;
}
