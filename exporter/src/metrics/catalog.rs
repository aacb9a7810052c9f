//! The declared metrics of the GPU, MIG and process collectors: one [`MetricDesc`] per family
//! (name, help, unit, type and dcgm-exporter's equivalent fields), declared once here as data, as
//! node_exporter declares each collector's `prometheus.NewDesc` once, and listed in output order
//! in [`GPU`], [`MIG`] and [`PROCESS`]. The collectors take names, help and units only from here;
//! a test checks `docs/metrics.md` against these lists (every declared family documented with
//! its type, unit and dcgm-exporter fields, every documented `tessera_gpu_*`, `tessera_mig_*` and
//! `tessera_process_*` family declared).
//!
//! This module is data: it encodes nothing and reads no snapshot. The exporter's self-metrics
//! (`tessera_exporter_*`) and the standard `process_*` metrics are written in their collectors,
//! not here.

/// The metric type of a family (tessera renders only these two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    /// The OpenMetrics `# TYPE` word.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// The base unit of a family: its name's suffix and its `# UNIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    BytesPerSecond,
    Celsius,
    Hertz,
    Joules,
    Ratio,
    Seconds,
    Watts,
}

impl Unit {
    /// The suffix the unit adds to a family's name (`_bytes`, …), without the underscore.
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::BytesPerSecond => "bytes_per_second",
            Unit::Celsius => "celsius",
            Unit::Hertz => "hertz",
            Unit::Joules => "joules",
            Unit::Ratio => "ratio",
            Unit::Seconds => "seconds",
            Unit::Watts => "watts",
        }
    }

    /// The unit as prometheus-client's encoder takes it (the same suffix).
    pub fn encoded(self) -> prometheus_client::registry::Unit {
        use prometheus_client::registry::Unit as P;
        match self {
            Unit::Bytes => P::Bytes,
            Unit::Celsius => P::Celsius,
            Unit::Joules => P::Joules,
            Unit::Seconds => P::Seconds,
            other => P::Other(other.suffix().into()),
        }
    }
}

/// One declared metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDesc {
    /// The family's name without unit suffix or `_total` (the encoder adds both).
    pub name: &'static str,
    /// The `# HELP` text.
    pub help: &'static str,
    /// `None` for counts, flags and `_info` families.
    pub unit: Option<Unit>,
    pub kind: Kind,
    /// dcgm-exporter's fields for the same measurement (as `docs/metrics.md` lists them); empty
    /// when it has none.
    pub dcgm: &'static [&'static str],
}

impl MetricDesc {
    /// The family's name as `# TYPE` shows it: with the unit suffix (`tessera_gpu_energy_joules`).
    pub fn family_name(&self) -> String {
        match self.unit {
            Some(unit) => format!("{}_{}", self.name, unit.suffix()),
            None => self.name.to_string(),
        }
    }

    /// The name of the family's samples as a scrape shows them: unit suffix, `_total` on
    /// counters (`tessera_gpu_energy_joules_total`); the name `docs/metrics.md` lists.
    pub fn exposed_name(&self) -> String {
        match self.kind {
            Kind::Gauge => self.family_name(),
            Kind::Counter => format!("{}_total", self.family_name()),
        }
    }

    /// The same family with another help text (for a help that depends on the node).
    pub const fn with_help(self, help: &'static str) -> MetricDesc {
        MetricDesc { help, ..self }
    }
}

const fn gauge(name: &'static str, unit: Option<Unit>, help: &'static str) -> MetricDesc {
    MetricDesc {
        name,
        help,
        unit,
        kind: Kind::Gauge,
        dcgm: &[],
    }
}

const fn counter(name: &'static str, unit: Option<Unit>, help: &'static str) -> MetricDesc {
    MetricDesc {
        kind: Kind::Counter,
        ..gauge(name, unit, help)
    }
}

impl MetricDesc {
    const fn dcgm(self, dcgm: &'static [&'static str]) -> MetricDesc {
        MetricDesc { dcgm, ..self }
    }
}

/// Declares each family as a `pub const` and lists them all, in the same order, in one slice,
/// so that no declared family can be left out of the list the documentation test reads.
macro_rules! declare {
    ($(#[$list_meta:meta])* $list:ident { $($(#[$meta:meta])* $id:ident = $desc:expr;)* }) => {
        $($(#[$meta])* pub const $id: MetricDesc = $desc;)*
        $(#[$list_meta])*
        pub const $list: &[MetricDesc] = &[$($id),*];
    };
}

use Unit::{Bytes, BytesPerSecond, Celsius, Hertz, Joules, Ratio, Seconds, Watts};

declare! {
    /// The per-GPU families ([`super::gpu`]) and the kubelet's holders ([`super::pods`]), in
    /// output order.
    GPU {
        GPU_INFO = gauge(
            "tessera_gpu_info",
            None,
            "GPU identity: model name, PCI bus id, driver and CUDA versions (value is always 1).",
        )
        .dcgm(&["DCGM_FI_DRIVER_VERSION"]);
        GPU_POWER_LIMIT = gauge("tessera_gpu_power_limit", Some(Watts), "Enforced power limit.")
            .dcgm(&["DCGM_FI_DEV_ENFORCED_POWER_LIMIT"]);
        GPU_MIG_ENABLED = gauge(
            "tessera_gpu_mig_enabled",
            None,
            "1 when MIG mode is enabled now (absent on GPUs without MIG).",
        );
        GPU_MIG_PENDING_ENABLED = gauge(
            "tessera_gpu_mig_pending_enabled",
            None,
            "1 when MIG mode will be enabled after the next GPU reset.",
        );
        GPU_STATUS = gauge(
            "tessera_gpu_status",
            None,
            "GPU health: 1 for the current state (ok, degraded: some reads failed, lost: fell off the bus, error: unreadable), 0 for the others.",
        );
        GPU_BUSY = gauge(
            "tessera_gpu_busy",
            Some(Ratio),
            "Share of time a kernel was running (NVML utilization.gpu; DCGM GPU_UTIL). Overstates compute load: see tessera_gpu_sm_active_ratio.",
        )
        .dcgm(&["DCGM_FI_DEV_GPU_UTIL"]);
        GPU_MEMORY_CONTROLLER_BUSY = gauge(
            "tessera_gpu_memory_controller_busy",
            Some(Ratio),
            "Share of time the memory controller was busy (NVML utilization.memory).",
        )
        .dcgm(&["DCGM_FI_DEV_MEM_COPY_UTIL"]);
        GPU_SM_ACTIVE = gauge(
            "tessera_gpu_sm_active",
            Some(Ratio),
            "Share of SMs with at least one warp resident, averaged over the sample (GPM, Hopper and later).",
        )
        .dcgm(&["DCGM_FI_PROF_SM_ACTIVE"]);
        GPU_SM_OCCUPANCY = gauge(
            "tessera_gpu_sm_occupancy",
            Some(Ratio),
            "Warps resident per SM relative to the maximum, averaged over the sample (GPM, Hopper and later).",
        )
        .dcgm(&["DCGM_FI_PROF_SM_OCCUPANCY"]);
        GPU_TENSOR_ACTIVE = gauge(
            "tessera_gpu_tensor_active",
            Some(Ratio),
            "Share of the interval any tensor pipe was active (GPM, Hopper and later; DCGM PIPE_TENSOR_ACTIVE).",
        )
        .dcgm(&["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]);
        GPU_TENSOR_PIPE_ACTIVE = gauge(
            "tessera_gpu_tensor_pipe_active",
            Some(Ratio),
            "Share of the interval a tensor pipe of this kind was active: dfma (FP64), hmma (FP16/BF16/TF32), imma (integer) (GPM, Hopper and later).",
        )
        .dcgm(TENSOR_PIPES_DCGM);
        GPU_DRAM_ACTIVE = gauge(
            "tessera_gpu_dram_active",
            Some(Ratio),
            "Share of the interval the DRAM interface was busy, as a fraction of its peak bandwidth (GPM, Hopper and later; DCGM DRAM_ACTIVE).",
        )
        .dcgm(&["DCGM_FI_PROF_DRAM_ACTIVE"]);
        GPU_PIPE_ACTIVE = gauge(
            "tessera_gpu_pipe_active",
            Some(Ratio),
            "Share of the interval a non-tensor pipe was active: fp64, fp32, fp16, integer (GPM, Hopper and later).",
        )
        .dcgm(PIPES_DCGM);
        GPU_NVLINK_TRANSMIT = gauge(
            "tessera_gpu_nvlink_transmit",
            Some(BytesPerSecond),
            "NVLink transmit throughput over all links, averaged over the interval (GPM, Hopper and later; 0 without NVLink traffic).",
        )
        .dcgm(&["DCGM_FI_PROF_NVLINK_TX_BYTES"]);
        GPU_NVLINK_RECEIVE = gauge(
            "tessera_gpu_nvlink_receive",
            Some(BytesPerSecond),
            "NVLink receive throughput over all links, averaged over the interval (GPM, Hopper and later; 0 without NVLink traffic).",
        )
        .dcgm(&["DCGM_FI_PROF_NVLINK_RX_BYTES"]);
        GPU_MEMORY_USED = gauge("tessera_gpu_memory_used", Some(Bytes), "GPU memory in use.")
            .dcgm(&["DCGM_FI_DEV_FB_USED"]);
        GPU_MEMORY_TOTAL = gauge("tessera_gpu_memory_total", Some(Bytes), "GPU memory in total.")
            .dcgm(&["DCGM_FI_DEV_FB_TOTAL"]);
        GPU_IDLE = gauge(
            "tessera_gpu_idle",
            Some(Seconds),
            "How long the GPU has continuously shown no activity (SM activity, else busy time, below 0.1%), on the sampler's clock; 0 while active.",
        );
        GPU_POWER = gauge("tessera_gpu_power", Some(Watts), "Power draw.")
            .dcgm(&["DCGM_FI_DEV_POWER_USAGE"]);
        GPU_ENERGY = counter(
            "tessera_gpu_energy",
            Some(Joules),
            "Energy consumed since the driver was loaded.",
        )
        .dcgm(&["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]);
        GPU_TEMPERATURE = gauge("tessera_gpu_temperature", Some(Celsius), "GPU core temperature.")
            .dcgm(&["DCGM_FI_DEV_GPU_TEMP"]);
        GPU_SM_CLOCK = gauge("tessera_gpu_sm_clock", Some(Hertz), "SM clock frequency.")
            .dcgm(&["DCGM_FI_DEV_SM_CLOCK"]);
        GPU_MEMORY_CLOCK = gauge("tessera_gpu_memory_clock", Some(Hertz), "Memory clock frequency.")
            .dcgm(&["DCGM_FI_DEV_MEM_CLOCK"]);
        /// Its help on a node without GPM; [`GPU_PCIE_TRANSMIT_HELP_GPM`] where a GPU has GPM.
        GPU_PCIE_TRANSMIT = gauge(
            "tessera_gpu_pcie_transmit",
            Some(BytesPerSecond),
            "PCIe transmit throughput (NVML samples it over 20 ms).",
        )
        .dcgm(&["DCGM_FI_PROF_PCIE_TX_BYTES"]);
        /// Its help on a node without GPM; [`GPU_PCIE_RECEIVE_HELP_GPM`] where a GPU has GPM.
        GPU_PCIE_RECEIVE = gauge(
            "tessera_gpu_pcie_receive",
            Some(BytesPerSecond),
            "PCIe receive throughput (NVML samples it over 20 ms).",
        )
        .dcgm(&["DCGM_FI_PROF_PCIE_RX_BYTES"]);
        GPU_THROTTLE_REASON = gauge(
            "tessera_gpu_throttle_reason",
            None,
            "1 while the clocks are held down for this reason (NVML clock event reasons), else 0.",
        )
        .dcgm(&["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]);
        GPU_ECC_ERRORS = counter(
            "tessera_gpu_ecc_errors",
            None,
            "ECC errors since the driver was loaded (volatile), by type.",
        )
        .dcgm(&["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]);
        GPU_REMAPPED_ROWS = gauge(
            "tessera_gpu_remapped_rows",
            None,
            "Memory rows remapped since manufacture (persistent), by the kind of error that caused them.",
        )
        .dcgm(&[
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        ]);
        GPU_ROW_REMAP_PENDING = gauge(
            "tessera_gpu_row_remap_pending",
            None,
            "1 while a row remapping waits for the next GPU reset, else 0.",
        )
        .dcgm(&["DCGM_FI_DEV_ROW_REMAP_PENDING"]);
        GPU_ROW_REMAP_FAILURE = gauge(
            "tessera_gpu_row_remap_failure",
            None,
            "1 when a row remapping has failed (the GPU needs service), else 0.",
        )
        .dcgm(&["DCGM_FI_DEV_ROW_REMAP_FAILURE"]);
        GPU_XID_ERRORS = counter(
            "tessera_gpu_xid_errors",
            None,
            "XID error events since the exporter started, by XID code.",
        )
        .dcgm(&["DCGM_FI_DEV_XID_ERRORS"]);
        GPU_POD_INFO = gauge(
            "tessera_gpu_pod_info",
            None,
            "A container that holds the GPU or MIG device, from the kubelet's pod-resources API; one series per holder, also when several share a device (value is always 1).",
        );
    }
}

/// The help of [`GPU_PCIE_TRANSMIT`] on a node where some GPU has GPM (the source differs).
pub const GPU_PCIE_TRANSMIT_HELP_GPM: &str = "PCIe transmit throughput: averaged over the interval by GPM on GPUs with GPM (Hopper and later), else NVML's 20 ms sample.";

/// The help of [`GPU_PCIE_RECEIVE`] on a node where some GPU has GPM (the source differs).
pub const GPU_PCIE_RECEIVE_HELP_GPM: &str = "PCIe receive throughput: averaged over the interval by GPM on GPUs with GPM (Hopper and later), else NVML's 20 ms sample.";

/// dcgm-exporter's fields of the three tensor pipes (dfma, hmma, imma).
const TENSOR_PIPES_DCGM: &[&str] = &[
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
];

/// dcgm-exporter's fields of the four non-tensor pipes (fp64, fp32, fp16, integer).
const PIPES_DCGM: &[&str] = &[
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "DCGM_FI_PROF_PIPE_INT_ACTIVE",
];

declare! {
    /// The MIG families ([`super::mig`]), in output order.
    MIG {
        MIG_LAYOUT_DRIFT = gauge(
            "tessera_mig_layout_drift",
            None,
            "1 when the GPU's MIG mode or GPU instances per profile differ from the planned layout (--mig.config, --mig.config-label), 0 when they match.",
        );
        MIG_LAYOUT_DRIFT_INSTANCES = gauge(
            "tessera_mig_layout_drift_instances",
            None,
            "GPU instances to create or destroy to match the planned MIG layout.",
        );
        MIG_INFO = gauge(
            "tessera_mig_info",
            None,
            "MIG instance identity: profile, profile id, placement on the memory-slice axis and MIG UUID (value is always 1).",
        );
        MIG_MEMORY_USED = gauge(
            "tessera_mig_memory_used",
            Some(Bytes),
            "Memory in use in the MIG instance.",
        )
        .dcgm(&["DCGM_FI_DEV_FB_USED"]);
        MIG_MEMORY_TOTAL = gauge(
            "tessera_mig_memory_total",
            Some(Bytes),
            "Memory of the MIG instance.",
        )
        .dcgm(&["DCGM_FI_DEV_FB_TOTAL"]);
        MIG_SM_ACTIVE = gauge(
            "tessera_mig_sm_active",
            Some(Ratio),
            "SM activity of the MIG instance (GPM, Hopper and later; NVML has none on Ampere).",
        )
        .dcgm(&["DCGM_FI_PROF_SM_ACTIVE"]);
        MIG_TENSOR_ACTIVE = gauge(
            "tessera_mig_tensor_active",
            Some(Ratio),
            "Share of the interval any tensor pipe of the MIG instance was active (GPM, Hopper and later).",
        )
        .dcgm(&["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]);
        MIG_DRAM_ACTIVE = gauge(
            "tessera_mig_dram_active",
            Some(Ratio),
            "Share of the interval the MIG instance's DRAM bandwidth was in use (GPM, Hopper and later).",
        )
        .dcgm(&["DCGM_FI_PROF_DRAM_ACTIVE"]);
        MIG_TENSOR_PIPE_ACTIVE = gauge(
            "tessera_mig_tensor_pipe_active",
            Some(Ratio),
            "Share of the interval a tensor pipe of this kind of the MIG instance was active: dfma, hmma, imma (GPM, Hopper and later).",
        )
        .dcgm(TENSOR_PIPES_DCGM);
        MIG_PIPE_ACTIVE = gauge(
            "tessera_mig_pipe_active",
            Some(Ratio),
            "Share of the interval a non-tensor pipe of the MIG instance was active: fp64, fp32, fp16, integer (GPM, Hopper and later).",
        )
        .dcgm(PIPES_DCGM);
    }
}

declare! {
    /// The per-process families ([`super::process`]), in output order.
    PROCESS {
        PROCESS_MEMORY_USED = gauge(
            "tessera_process_memory_used",
            Some(Bytes),
            "GPU memory used by the process.",
        );
        PROCESS_SM_UTILIZATION = gauge(
            "tessera_process_sm_utilization",
            Some(Ratio),
            "Share of the sample period the process had a kernel running on the SMs (NVML process utilization; none in MIG mode).",
        );
        PROCESS_IDLE = gauge(
            "tessera_process_idle",
            Some(Seconds),
            "How long the process has continuously shown no activity (its SM utilisation, else its MIG instance's or its GPU's activity, below 0.1%), on the sampler's clock; 0 while active.",
        );
    }
}
