//! The sample model: what a device backend reports about a node.
//!
//! These plain data types are the vocabulary shared by every backend (NVML, simulated fleet), the
//! sampler, the renderers, the history writer and the analyzer. They carry values in base units
//! (bytes, watts, joules, celsius, hertz, ratios in 0–1). Two words every layer uses live here too:
//! [`Field`] (the group of values one NVML call reads: the unit of [`FieldError::field`] and of
//! injected faults) and [`Attribution`] (the pod, container or Slurm job of a process; the
//! exporter reads it from cgroups, the simulator knows it).
//!
//! Architecture invariant: a value NVML reports as NotSupported is `None`, never 0. A value that
//! failed with another error is also `None`, and the failure is recorded in
//! [`GpuSample::errors`] so nothing is lost silently.
//!
//! This module does no I/O and knows nothing about NVML.

use serde::{Deserialize, Serialize};

/// What NVML (or the simulator) says about the node's GPUs: identity and configuration, which change
/// rarely. Read once at start and again after a re-initialisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// Host name of the node (or the simulated node's name).
    pub node: String,
    /// Driver version string, e.g. `550.54.15`.
    pub driver_version: Option<String>,
    /// CUDA driver API version, e.g. `12.4`.
    pub cuda_version: Option<String>,
    pub gpus: Vec<GpuInfo>,
}

/// Identity and configuration of one physical GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuInfo {
    /// NVML index (stable for the life of the driver, not across reboots).
    pub index: u32,
    /// The device node's minor number (`/dev/nvidiaN`): what the NVIDIA DRA driver names a GPU by
    /// (`gpu-N`). `None` when NVML does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor_number: Option<u32>,
    pub uuid: String,
    /// Product name as NVML reports it, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// PCI bus id, e.g. `00000000:17:00.0`.
    pub pci_bus_id: String,
    pub memory_total_bytes: Option<u64>,
    /// Enforced power limit in watts.
    pub power_limit_watts: Option<f64>,
    /// `None` when the GPU does not support MIG.
    pub mig_mode: Option<MigMode>,
    /// MIG instances (empty unless MIG is enabled), ordered by (GPU instance id, compute instance id).
    pub mig_instances: Vec<MigInstanceInfo>,
}

/// MIG mode of a GPU: the mode in force and the one that takes effect after a reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigMode {
    pub current: bool,
    pub pending: bool,
}

/// A placement on a GPU's memory-slice axis (8 slots on 7-compute-slice GPUs, 4 on A30).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    pub start: u32,
    pub size: u32,
}

impl Placement {
    /// One past the last slot this placement occupies.
    pub fn end(&self) -> u32 {
        self.start + self.size
    }

    /// Whether two placements share at least one slot.
    pub fn overlaps(&self, other: &Placement) -> bool {
        self.start < other.end() && other.start < self.end()
    }
}

/// One MIG device: a compute instance inside a GPU instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigInstanceInfo {
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    /// GPU instance profile id as `nvidia-smi` shows it (19 = 1g, 9 = 3g, 0 = 7g, ...).
    pub profile_id: u32,
    /// Profile name for this SKU, e.g. `1g.10gb`.
    pub profile_name: String,
    pub placement: Placement,
    /// `MIG-...` UUID.
    pub uuid: String,
    pub memory_total_bytes: Option<u64>,
}

/// One consistent snapshot of the node, taken by one call to
/// [`GpuBackend::sample`](crate::device::GpuBackend::sample).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSample {
    /// When the sample was taken, unix milliseconds (virtual time for the simulator).
    pub timestamp_ms: i64,
    pub gpus: Vec<GpuSample>,
}

/// Health of one GPU as seen in one sample.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case", deny_unknown_fields)]
pub enum GpuStatus {
    /// All reads succeeded or were NotSupported.
    Ok,
    /// Some reads failed with an error other than NotSupported; see [`GpuSample::errors`].
    Degraded,
    /// NVML reports the GPU lost (fell off the bus). Values are absent.
    Lost,
    /// The GPU could not be read at all (no handle).
    Error { message: String },
}

/// A read that failed with an error other than NotSupported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldError {
    /// The field that failed, e.g. `power`.
    pub field: String,
    /// Error kind, a short stable token such as `unknown`, `gpu_lost`, `no_permission`, `timeout`.
    pub kind: String,
}

/// An XID error event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XidEvent {
    pub xid: u64,
    /// When the event was seen, unix milliseconds.
    pub timestamp_ms: i64,
    /// GPU instance id when the event belongs to a MIG instance.
    pub gpu_instance_id: Option<u32>,
}

/// Named clock-throttle reasons (NVML `nvmlClocksEventReasons`).
pub const THROTTLE_REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// Decode a throttle-reason bit mask into the names of [`THROTTLE_REASONS`].
pub fn throttle_reason_names(mask: u64) -> Vec<&'static str> {
    THROTTLE_REASONS
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, name)| *name)
        .collect()
}

/// Per-GPU values of one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSample {
    pub index: u32,
    pub uuid: String,
    pub status: GpuStatus,
    /// Share of the sample period during which a kernel ran (NVML `utilization.gpu`, DCGM GPU_UTIL).
    pub busy_ratio: Option<f64>,
    /// Share of time the memory controller was busy (NVML `utilization.memory`).
    pub memory_controller_ratio: Option<f64>,
    /// SM activity via GPM (Hopper+); `None` where GPM is unsupported.
    pub sm_active_ratio: Option<f64>,
    /// SM occupancy via GPM (Hopper+).
    pub sm_occupancy_ratio: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub power_watts: Option<f64>,
    /// Energy counter since the driver was loaded, joules.
    pub energy_joules: Option<f64>,
    pub temperature_celsius: Option<f64>,
    pub sm_clock_hertz: Option<f64>,
    pub memory_clock_hertz: Option<f64>,
    /// Clock-throttle reason bit mask; see [`THROTTLE_REASONS`].
    pub throttle_reasons: Option<u64>,
    /// Volatile corrected ECC errors since the driver was loaded.
    pub ecc_corrected_total: Option<u64>,
    pub ecc_uncorrected_total: Option<u64>,
    /// Row remapping (Ampere and later): rows remapped and whether a remap is pending or failed.
    #[serde(default)]
    pub remapped_rows: Option<RemappedRows>,
    /// PCIe throughput: from GPM over the whole interval between two samples where the GPU has
    /// GPM (Hopper+), else `nvmlDeviceGetPcieThroughput`'s 20 ms window.
    pub pcie_tx_bytes_per_second: Option<f64>,
    pub pcie_rx_bytes_per_second: Option<f64>,
    /// The profiling pipes through GPM (Hopper+); left out of the JSON when all absent.
    #[serde(default, skip_serializing_if = "Profiling::is_empty")]
    pub profiling: Profiling,
    /// XID events seen since the previous sample.
    pub xid_events: Vec<XidEvent>,
    pub mig: Vec<MigSample>,
    pub processes: Vec<ProcessSample>,
    /// Reads that failed with an error other than NotSupported.
    pub errors: Vec<FieldError>,
}

impl GpuSample {
    /// A sample with identity and status only and every value absent.
    pub fn empty(index: u32, uuid: impl Into<String>, status: GpuStatus) -> Self {
        GpuSample {
            index,
            uuid: uuid.into(),
            status,
            busy_ratio: None,
            memory_controller_ratio: None,
            sm_active_ratio: None,
            sm_occupancy_ratio: None,
            memory_used_bytes: None,
            memory_total_bytes: None,
            power_watts: None,
            energy_joules: None,
            temperature_celsius: None,
            sm_clock_hertz: None,
            memory_clock_hertz: None,
            throttle_reasons: None,
            ecc_corrected_total: None,
            ecc_uncorrected_total: None,
            remapped_rows: None,
            pcie_tx_bytes_per_second: None,
            pcie_rx_bytes_per_second: None,
            profiling: Profiling::default(),
            xid_events: Vec::new(),
            mig: Vec::new(),
            processes: Vec::new(),
            errors: Vec::new(),
        }
    }
}

/// Row remapping state of a GPU's memory (NVML `nvmlDeviceGetRemappedRows`): rows remapped
/// since manufacture (persistent, not reset by the driver), by the kind of error that caused
/// them, whether a remapping waits for the next GPU reset, and whether one failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failure: bool,
}

/// The profiling pipes of a GPU or a MIG GPU instance over the interval between two GPM samples
/// (Hopper and later): which units worked, not only that a kernel ran. Ratios 0–1 of the
/// interval; NVLink in bytes per second over all links (GPU only). Each is `None` where GPM does
/// not offer it (no GPM, the first sample, a metric the driver lacks), never 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profiling {
    /// Any tensor pipe active (`NVML_GPM_METRIC_ANY_TENSOR_UTIL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_active_ratio: Option<f64>,
    /// Tensor pipes by kind: double precision (DFMA), half (HMMA), integer (IMMA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_dfma_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_hmma_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_imma_ratio: Option<f64>,
    /// DRAM bandwidth in use (`NVML_GPM_METRIC_DRAM_BW_UTIL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_active_ratio: Option<f64>,
    /// The non-tensor pipes: FP64, FP32, FP16 and integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp64_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp16_ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integer_ratio: Option<f64>,
    /// NVLink throughput over all links, bytes per second (0 on a GPU without NVLink peers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_tx_bytes_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_rx_bytes_per_second: Option<f64>,
}

impl Profiling {
    /// Whether every value is absent.
    pub fn is_empty(&self) -> bool {
        *self == Profiling::default()
    }

    /// The pipes as (label, value): `tensor_*` kinds and the non-tensor pipes.
    pub fn tensor_pipes(&self) -> [(&'static str, Option<f64>); 3] {
        [
            ("dfma", self.tensor_dfma_ratio),
            ("hmma", self.tensor_hmma_ratio),
            ("imma", self.tensor_imma_ratio),
        ]
    }

    /// The non-tensor pipes as (label, value).
    pub fn pipes(&self) -> [(&'static str, Option<f64>); 4] {
        [
            ("fp64", self.fp64_ratio),
            ("fp32", self.fp32_ratio),
            ("fp16", self.fp16_ratio),
            ("integer", self.integer_ratio),
        ]
    }
}

/// Per-MIG-instance values of one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigSample {
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
    pub uuid: String,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    /// SM activity via GPM (Hopper+ only; NVML has no MIG utilisation on Ampere).
    pub sm_active_ratio: Option<f64>,
    /// The profiling pipes of the GPU instance via GPM (no NVLink); left out when all absent.
    #[serde(default, skip_serializing_if = "Profiling::is_empty")]
    pub profiling: Profiling,
}

/// Per-process values of one sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSample {
    pub pid: u32,
    pub name: Option<String>,
    pub used_memory_bytes: Option<u64>,
    /// SM utilisation of this process (NVML `process_utilization_stats`), 0–1: the newest
    /// reading, carried between reads ([`crate::device::SlowReads`]).
    pub sm_ratio: Option<f64>,
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
    /// The SM utilisation readings (0–1) this sample took of the process, oldest first: every
    /// reading since the previous read (one a sample when every sample reads; none on a sample
    /// that carried `sm_ratio`). The history's per-process mean and maximum are over these, so
    /// each reading counts once. Not serialised: the scrape and `--once` show `sm_ratio`.
    #[serde(skip)]
    pub sm_readings: Vec<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_overlap() {
        let a = Placement { start: 0, size: 4 };
        let b = Placement { start: 4, size: 4 };
        let c = Placement { start: 3, size: 2 };
        assert!(!a.overlaps(&b));
        assert!(a.overlaps(&c) && c.overlaps(&b));
        assert_eq!(a.end(), 4);
    }

    #[test]
    fn throttle_names_decode_bits() {
        assert_eq!(throttle_reason_names(0x5), vec!["gpu_idle", "sw_power_cap"]);
        assert!(throttle_reason_names(0).is_empty());
    }
}

/// Error kinds a simulated `nvml_error` fault may carry (the stable tokens of
/// [`FieldError::kind`]).
pub const ERROR_KINDS: &[&str] = &[
    "unknown",
    "timeout",
    "no_permission",
    "gpu_lost",
    "insufficient_size",
];

/// A group of values read by one NVML call, the unit in which faults are injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// `nvmlDeviceGetUtilizationRates`: busy and memory-controller ratios.
    Utilization,
    /// GPM: SM activity and occupancy (GPU and MIG instances).
    Gpm,
    /// `nvmlDeviceGetMemoryInfo`.
    Memory,
    /// `nvmlDeviceGetPowerUsage`.
    Power,
    /// `nvmlDeviceGetTotalEnergyConsumption`.
    Energy,
    /// `nvmlDeviceGetTemperature`.
    Temperature,
    /// `nvmlDeviceGetClockInfo` (SM and memory).
    Clocks,
    /// `nvmlDeviceGetCurrentClocksEventReasons`.
    Throttle,
    /// `nvmlDeviceGetTotalEccErrors`.
    Ecc,
    /// `nvmlDeviceGetRemappedRows`.
    RowRemap,
    /// `nvmlDeviceGetPcieThroughput`.
    Pcie,
    /// `nvmlDeviceGetComputeRunningProcesses`.
    Processes,
    /// `nvmlDeviceGetProcessUtilization`.
    ProcessUtilization,
    /// Memory of MIG instances.
    MigMemory,
}

const FIELDS: &[(Field, &str)] = &[
    (Field::Utilization, "utilization"),
    (Field::Gpm, "gpm"),
    (Field::Memory, "memory"),
    (Field::Power, "power"),
    (Field::Energy, "energy"),
    (Field::Temperature, "temperature"),
    (Field::Clocks, "clocks"),
    (Field::Throttle, "throttle"),
    (Field::Ecc, "ecc"),
    (Field::RowRemap, "row_remap"),
    (Field::Pcie, "pcie"),
    (Field::Processes, "processes"),
    (Field::ProcessUtilization, "process_utilization"),
    (Field::MigMemory, "mig_memory"),
];

impl Field {
    /// The field named `s` (as in scenario files and [`FieldError::field`]).
    pub fn parse(s: &str) -> Option<Field> {
        FIELDS.iter().find(|(_, n)| *n == s).map(|(f, _)| *f)
    }

    /// The stable name of the field.
    pub fn as_str(self) -> &'static str {
        FIELDS
            .iter()
            .find(|(f, _)| *f == self)
            .map(|(_, n)| *n)
            .unwrap_or("unknown")
    }

    /// Every field name.
    pub fn names() -> Vec<&'static str> {
        FIELDS.iter().map(|(_, n)| *n).collect()
    }

    /// Remove this field's values from a sample (they become absent).
    pub fn clear(self, s: &mut GpuSample) {
        match self {
            Field::Utilization => {
                s.busy_ratio = None;
                s.memory_controller_ratio = None;
            }
            Field::Gpm => {
                s.sm_active_ratio = None;
                s.sm_occupancy_ratio = None;
                s.profiling = Profiling::default();
                s.mig.iter_mut().for_each(|m| {
                    m.sm_active_ratio = None;
                    m.profiling = Profiling::default();
                });
            }
            Field::Memory => {
                s.memory_used_bytes = None;
                s.memory_total_bytes = None;
            }
            Field::Power => s.power_watts = None,
            Field::Energy => s.energy_joules = None,
            Field::Temperature => s.temperature_celsius = None,
            Field::Clocks => {
                s.sm_clock_hertz = None;
                s.memory_clock_hertz = None;
            }
            Field::Throttle => s.throttle_reasons = None,
            Field::Ecc => {
                s.ecc_corrected_total = None;
                s.ecc_uncorrected_total = None;
            }
            Field::RowRemap => s.remapped_rows = None,
            Field::Pcie => {
                s.pcie_tx_bytes_per_second = None;
                s.pcie_rx_bytes_per_second = None;
            }
            Field::Processes => s.processes.clear(),
            Field::ProcessUtilization => s.processes.iter_mut().for_each(|p| p.sm_ratio = None),
            Field::MigMemory => s.mig.iter_mut().for_each(|m| {
                m.memory_used_bytes = None;
                m.memory_total_bytes = None;
            }),
        }
    }
}

/// Where a process runs, as far as its cgroup path says. Every field is `None` when unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Attribution {
    /// Kubernetes pod UID in its canonical form (lower case, with `-`), e.g.
    /// `0b5c4a5e-2b0e-4b8a-9d6a-8f0c2f1e3d4c`; the label `uid` of kube-state-metrics' `kube_pod_info`.
    pub pod_uid: Option<String>,
    /// Container id: the runtime's 64-hex id (containerd, CRI-O, Docker, Podman), lower case.
    pub container_id: Option<String>,
    /// Slurm job id (the numeric id of the job's cgroup, `job_<n>`).
    pub slurm_job_id: Option<String>,
    /// Kubernetes namespace, where known (the simulator knows it; cgroups do not, so `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Kubernetes pod name, where known (the simulator; never from cgroups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

impl Attribution {
    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.pod_uid.is_none()
            && self.container_id.is_none()
            && self.slurm_job_id.is_none()
            && self.namespace.is_none()
            && self.pod.is_none()
    }
}

/// Who holds a GPU or MIG device by allocation (a Kubernetes pod through the device plugin, or
/// a Slurm job through its gres), whether or not anything runs on it. Every field is `None`
/// when unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Holder {
    /// Kubernetes namespace of the holding pod.
    pub namespace: Option<String>,
    /// Kubernetes pod name.
    pub pod: Option<String>,
    /// Slurm job id.
    pub slurm_job_id: Option<String>,
}

/// Which devices are allocated at one instant, by device UUID (a GPU's `GPU-…` or a MIG
/// device's `MIG-…`): the scheduler's view, beside NVML's. `known == false` means no allocation
/// source (no kubelet, no Slurm): every device's holders are unknown, never "free".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocation {
    /// Whether an allocation source answered: then a device not in `devices` is free.
    pub known: bool,
    /// Holders of each allocated device, sorted, without duplicates.
    pub devices: std::collections::HashMap<String, Vec<Holder>>,
}

impl Allocation {
    /// No allocation source.
    pub fn unknown() -> Allocation {
        Allocation::default()
    }

    /// The holders of `device`: `None` when unknown, an empty slice when known to be free.
    pub fn holders(&self, device: &str) -> Option<&[Holder]> {
        self.known
            .then(|| self.devices.get(device).map_or(&[][..], Vec::as_slice))
    }
}
