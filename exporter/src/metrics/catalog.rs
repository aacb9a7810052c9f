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
            "Energy consumed since the driver was loaded; read once per history interval (or --energy.interval), so up to one interval old.",
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
        GPU_POD_UNUSED = gauge(
            "tessera_gpu_pod_unused",
            Some(Seconds),
            "How long the container has held the GPU or MIG device while nothing used it (no compute process on the device, no activity where measured), on the sampler's clock; 0 while used.",
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
            "Share of the sample period the process had a kernel running on the SMs (NVML process utilization; none in MIG mode): the newest reading, read once per history interval (or --energy.interval).",
        );
        PROCESS_IDLE = gauge(
            "tessera_process_idle",
            Some(Seconds),
            "How long the process has continuously shown no activity (its SM utilisation, else its MIG instance's or its GPU's activity, below 0.1%), on the sampler's clock; 0 while active.",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefixes of the families this table declares; every documented family with one of
    /// them must be declared.
    const PREFIXES: [&str; 3] = ["tessera_gpu_", "tessera_mig_", "tessera_process_"];

    /// A row of a table in `docs/metrics.md` that lists a family with one of [`PREFIXES`].
    #[derive(Debug)]
    struct DocRow {
        name: String,
        /// The first word of the `type` cell (`gauge`, `counter`).
        kind: String,
        unit: String,
        /// dcgm-exporter's fields, when the table has that column.
        dcgm: Option<Vec<String>>,
    }

    /// A difference between the declared families and `docs/metrics.md`.
    #[derive(Debug, PartialEq, Eq)]
    enum Mismatch {
        /// Declared, not in any table of the doc.
        Undocumented(String),
        /// In a table of the doc, not declared.
        Undeclared(String),
        Type {
            name: String,
            declared: &'static str,
            documented: String,
        },
        Unit {
            name: String,
            declared: &'static str,
            documented: String,
        },
        Dcgm {
            name: String,
            declared: Vec<String>,
            documented: Vec<String>,
        },
    }

    /// How the doc's `unit` column writes a unit.
    fn doc_unit(unit: Option<Unit>) -> &'static str {
        match unit {
            None => "—",
            Some(Unit::BytesPerSecond) => "bytes/s",
            Some(u) => u.suffix(),
        }
    }

    /// The contents of the `code spans` of a Markdown table cell.
    fn code_spans(cell: &str) -> Vec<&str> {
        cell.split('`').skip(1).step_by(2).collect()
    }

    /// A cell without its parenthesised remarks (`(MiB)`, `(not DCGM_FI_…)`).
    fn without_parentheses(cell: &str) -> String {
        let mut depth = 0usize;
        let mut out = String::new();
        for ch in cell.chars() {
            match ch {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ if depth == 0 => out.push(ch),
                _ => {}
            }
        }
        out
    }

    /// The DCGM fields a dcgm-exporter cell names, with its abbreviations expanded: `…_DBE_VOL_TOTAL`
    /// after `DCGM_FI_DEV_ECC_SBE_VOL_TOTAL` replaces as many of the previous name's last `_`
    /// segments as it has (`DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`). Remarks in parentheses are skipped.
    fn dcgm_fields(cell: &str) -> Vec<String> {
        let cell = without_parentheses(cell);
        let mut out: Vec<String> = Vec::new();
        for span in code_spans(&cell) {
            if span.starts_with("DCGM_FI_") {
                out.push(span.to_string());
            } else if let Some(suffix) = span.strip_prefix('…')
                && let Some(previous) = out.last()
            {
                let segments = suffix.matches('_').count();
                let base = previous.rsplitn(segments + 1, '_').last().unwrap_or("");
                out.push(format!("{base}{suffix}"));
            }
        }
        out
    }

    fn cells(line: &str) -> Vec<&str> {
        let line = line.trim().trim_start_matches('|').trim_end_matches('|');
        line.split('|').map(str::trim).collect()
    }

    /// Every table row of the doc that lists a family with one of [`PREFIXES`], with the
    /// columns its table has (found by their header: `metric`, `type`, `unit`,
    /// `dcgm-exporter equivalent`).
    fn doc_rows(doc: &str) -> Vec<DocRow> {
        let mut rows = Vec::new();
        let mut header: Option<Vec<&str>> = None;
        for line in doc.lines() {
            if !line.trim_start().starts_with('|') {
                header = None;
                continue;
            }
            let cells = cells(line);
            let Some(h) = &header else {
                header = Some(cells);
                continue;
            };
            if cells
                .iter()
                .all(|c| c.chars().all(|ch| ch == '-' || ch == ':'))
            {
                continue;
            }
            let col = |name: &str| h.iter().position(|c| *c == name).and_then(|i| cells.get(i));
            let Some(metric) = col("metric") else {
                continue;
            };
            for name in code_spans(metric) {
                if !PREFIXES.iter().any(|p| name.starts_with(p)) {
                    continue;
                }
                let kind = col("type").and_then(|t| t.split_whitespace().next());
                rows.push(DocRow {
                    name: name.to_string(),
                    kind: kind.unwrap_or("").to_string(),
                    unit: col("unit").map_or("", |u| u).to_string(),
                    dcgm: col("dcgm-exporter equivalent").map(|c| dcgm_fields(c)),
                });
            }
        }
        rows
    }

    /// Every difference between the declared families and the doc's tables: each declared family
    /// documented with its type, unit and dcgm-exporter fields (none where its table has no
    /// such column), each documented family with one of [`PREFIXES`] declared.
    fn check(declared: &[&[MetricDesc]], doc: &str) -> Vec<Mismatch> {
        let rows = doc_rows(doc);
        let declared: Vec<&MetricDesc> = declared.iter().flat_map(|l| l.iter()).collect();
        let mut out = Vec::new();
        for d in &declared {
            let name = d.exposed_name();
            let Some(row) = rows.iter().find(|r| r.name == name) else {
                out.push(Mismatch::Undocumented(name));
                continue;
            };
            if row.kind != d.kind.as_str() {
                out.push(Mismatch::Type {
                    name: name.clone(),
                    declared: d.kind.as_str(),
                    documented: row.kind.clone(),
                });
            }
            if row.unit != doc_unit(d.unit) {
                out.push(Mismatch::Unit {
                    name: name.clone(),
                    declared: doc_unit(d.unit),
                    documented: row.unit.clone(),
                });
            }
            let documented = row.dcgm.clone().unwrap_or_default();
            if documented != d.dcgm {
                out.push(Mismatch::Dcgm {
                    name,
                    declared: d.dcgm.iter().map(|s| s.to_string()).collect(),
                    documented,
                });
            }
        }
        for r in &rows {
            if !declared.iter().any(|d| d.exposed_name() == r.name) {
                out.push(Mismatch::Undeclared(r.name.clone()));
            }
        }
        out
    }

    fn metrics_md() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md");
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn docs_metrics_md_lists_exactly_the_declared_families() {
        let doc = metrics_md();
        assert_eq!(check(&[GPU, MIG, PROCESS], &doc), vec![]);
        // The check saw the tables (not a vacuous pass).
        assert_eq!(doc_rows(&doc).len(), GPU.len() + MIG.len() + PROCESS.len());
    }

    #[test]
    fn the_check_reports_planted_differences() {
        let doc = metrics_md();
        let line = |name: &str| {
            doc.lines()
                .find(|l| l.starts_with(&format!("| `{name}` ")))
                .unwrap_or_else(|| panic!("no row for {name}"))
                .to_string()
        };
        let power = line("tessera_gpu_power_watts");
        let energy = line("tessera_gpu_energy_joules_total");
        let temperature = line("tessera_gpu_temperature_celsius");
        let mig_used = line("tessera_mig_memory_used_bytes");
        let planted = doc
            .replace(&format!("{power}\n"), "")
            .replace(&energy, &energy.replacen("| counter |", "| gauge |", 1))
            .replace(
                &temperature,
                &temperature.replace("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP"),
            )
            .replace(&mig_used, &mig_used.replacen("| bytes |", "| ratio |", 1))
            .replace(
                &line("tessera_process_idle_seconds"),
                &format!(
                    "{}\n| `tessera_process_made_up_ratio` | gauge | ratio | none | none |",
                    line("tessera_process_idle_seconds")
                ),
            );
        let found = check(&[GPU, MIG, PROCESS], &planted);
        assert_eq!(
            found,
            vec![
                Mismatch::Undocumented("tessera_gpu_power_watts".into()),
                Mismatch::Type {
                    name: "tessera_gpu_energy_joules_total".into(),
                    declared: "counter",
                    documented: "gauge".into(),
                },
                Mismatch::Dcgm {
                    name: "tessera_gpu_temperature_celsius".into(),
                    declared: vec!["DCGM_FI_DEV_GPU_TEMP".into()],
                    documented: vec!["DCGM_FI_DEV_MEMORY_TEMP".into()],
                },
                Mismatch::Unit {
                    name: "tessera_mig_memory_used_bytes".into(),
                    declared: "bytes",
                    documented: "ratio".into(),
                },
                Mismatch::Undeclared("tessera_process_made_up_ratio".into()),
            ]
        );
    }

    #[test]
    fn dcgm_cells_expand_abbreviations_and_skip_remarks() {
        assert_eq!(
            dcgm_fields("`DCGM_FI_DEV_ECC_SBE_VOL_TOTAL`, `…_DBE_VOL_TOTAL`"),
            [
                "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
            ]
        );
        assert_eq!(
            dcgm_fields("`DCGM_FI_PROF_PCIE_TX_BYTES` (not `DCGM_FI_DEV_PCIE_TX_THROUGHPUT`)"),
            ["DCGM_FI_PROF_PCIE_TX_BYTES"]
        );
        assert_eq!(
            dcgm_fields("labels `modelName`, `pci_bus_id`, `DCGM_FI_DRIVER_VERSION`"),
            ["DCGM_FI_DRIVER_VERSION"]
        );
        assert!(dcgm_fields("none (dcgm-exporter drops the series)").is_empty());
    }

    #[test]
    fn names_are_unique_and_follow_the_conventions() {
        let all: Vec<&MetricDesc> = [GPU, MIG, PROCESS].iter().flat_map(|l| l.iter()).collect();
        let mut names: Vec<String> = all.iter().map(|d| d.exposed_name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len(), "a family is declared twice");
        for d in all {
            assert!(PREFIXES.iter().any(|p| d.name.starts_with(p)), "{}", d.name);
            if d.kind == Kind::Counter {
                assert!(
                    !d.name.ends_with("_total"),
                    "{}: the encoder adds _total",
                    d.name
                );
            }
            if let Some(u) = d.unit {
                assert!(
                    !d.name.ends_with(u.suffix()),
                    "{}: the encoder adds the unit",
                    d.name
                );
            }
            assert!(d.help.ends_with('.'), "{}: help is a sentence", d.name);
        }
    }
}
