//! Per-GPU metrics: identity (`tessera_gpu_info`), health status, activity, the profiling pipes
//! (GPM: tensor, DRAM, FP/integer pipes, NVLink), idle time, memory, power, energy, temperature,
//! clocks, throttle reasons, ECC, row remapping, PCIe and XID counters.
//!
//! Labels: `gpu` (NVML index) and `uuid` on every series, plus `state`, `reason`, `type`, `pipe`
//! or `xid` where a family needs one, and `pod`, `namespace`, `container` on every series of a GPU
//! that exactly one container holds (from the kubelet, see [`super::HolderLabels`]). Values come
//! from the snapshot only; names, help and units from [`super::catalog`].
//!
//! The collector is one step per group of families, in output order: identity and status from
//! the inventory (also without a sample), then from the sample activity, profiling pipes, memory
//! and idle time, power and thermals, PCIe, throttle reasons, ECC and row remapping, and XIDs.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use super::catalog as c;
use super::{Collector, Context, HolderLabels, counter, gauge, held};
use crate::sampler::Snapshot;
use tessera_core::model::THROTTLE_REASONS;
use tessera_core::model::{GpuInfo, GpuSample, GpuStatus, Inventory, NodeSample};

/// XID codes whose counters exist (at 0) from the start, so `increase()` sees the first one:
/// the critical XIDs of NVIDIA's XID catalogue.
pub const CRITICAL_XIDS: &[u64] = &[48, 62, 63, 64, 74, 79, 94, 95, 119, 120];

/// Per-GPU metrics.
pub struct GpuCollector;

/// `gpu`, `uuid` and the holder's labels.
type L2<'a> = ([(&'static str, &'a str); 2], HolderLabels<'a>);

/// `gpu`, `uuid`, one more label (`state`, `pipe`, `reason`, `type`) and the holder's labels.
type L3<'a> = ([(&'static str, &'a str); 3], HolderLabels<'a>);

/// One GPU's values of a family with an extra label: (label value, value); `None` gives no series.
type Keyed<V> = Vec<(&'static str, Option<V>)>;

impl Collector for GpuCollector {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn collect(&self, ctx: &Context<'_>, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let Some(inventory) = ctx.snapshot.inventory.as_deref() else {
            return Ok(());
        };
        let gpus = Gpus::new(ctx.snapshot, inventory);
        gpus.identity(enc)?;
        gpus.status(enc)?;
        let Some(sample) = &ctx.snapshot.sample else {
            return Ok(());
        };
        let sampled = Sampled {
            gpus: &gpus,
            sample,
        };
        sampled.activity(enc)?;
        sampled.profiling(enc)?;
        sampled.memory_and_idle(enc)?;
        sampled.power_and_thermals(enc)?;
        sampled.pcie(enc)?;
        sampled.throttle(enc)?;
        sampled.ecc_and_row_remapping(enc)?;
        gpus.xid(enc)
    }
}

/// The inventory's GPUs and their labels: what every step reads.
struct Gpus<'a> {
    snap: &'a Snapshot,
    inventory: &'a Inventory,
    /// Each GPU's index as a label value.
    idx: Vec<String>,
    /// The kubelet's pod labels of each GPU (none without the kubelet, or when shared).
    holders: Vec<HolderLabels<'a>>,
}

impl<'a> Gpus<'a> {
    fn new(snap: &'a Snapshot, inventory: &'a Inventory) -> Gpus<'a> {
        Gpus {
            snap,
            inventory,
            idx: inventory.gpus.iter().map(|g| g.index.to_string()).collect(),
            holders: inventory.gpus.iter().map(|g| held(snap, &g.uuid)).collect(),
        }
    }

    /// `gpu` and `uuid` of the inventory's `i`-th GPU.
    fn labels(&self, i: usize) -> L2<'_> {
        (
            [
                ("gpu", self.idx[i].as_str()),
                ("uuid", self.inventory.gpus[i].uuid.as_str()),
            ],
            self.holders[i],
        )
    }

    /// `gpu` of the inventory's `i`-th GPU, `uuid` as given, and one more label.
    fn labels3<'b>(&'b self, i: usize, uuid: &'b str, extra: (&'static str, &'b str)) -> L3<'b> {
        (
            [("gpu", self.idx[i].as_str()), ("uuid", uuid), extra],
            self.holders[i],
        )
    }

    /// One series per inventory GPU that has a value.
    fn per_gpu(&self, f: impl Fn(&GpuInfo) -> Option<f64>) -> Vec<(L2<'_>, f64)> {
        (0..self.inventory.gpus.len())
            .filter_map(|i| f(&self.inventory.gpus[i]).map(|v| (self.labels(i), v)))
            .collect()
    }

    /// `tessera_gpu_info`, the power limit and the MIG mode: the inventory's view of each GPU.
    fn identity(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let driver = self.inventory.driver_version.as_deref().unwrap_or("");
        let cuda = self.inventory.cuda_version.as_deref().unwrap_or("");
        let info = self.inventory.gpus.iter().enumerate().map(|(i, g)| {
            let labels = [
                ("gpu", self.idx[i].as_str()),
                ("uuid", g.uuid.as_str()),
                ("name", g.name.as_str()),
                ("pci_bus_id", g.pci_bus_id.as_str()),
                ("driver_version", driver),
                ("cuda_version", cuda),
            ];
            ((labels, self.holders[i]), 1i64)
        });
        gauge(enc, &c::GPU_INFO, info.collect())?;
        gauge(
            enc,
            &c::GPU_POWER_LIMIT,
            self.per_gpu(|g| g.power_limit_watts),
        )?;
        gauge(
            enc,
            &c::GPU_MIG_ENABLED,
            self.per_gpu(|g| g.mig_mode.map(|m| m.current as i64 as f64)),
        )?;
        gauge(
            enc,
            &c::GPU_MIG_PENDING_ENABLED,
            self.per_gpu(|g| g.mig_mode.map(|m| m.pending as i64 as f64)),
        )
    }

    /// The state of the inventory's `i`-th GPU: `error` when the backend is down or the sample
    /// does not list it.
    fn state(&self, i: usize) -> &'static str {
        let Some(sample) = &self.snap.sample else {
            return "error";
        };
        let index = self.inventory.gpus[i].index;
        match sample
            .gpus
            .iter()
            .find(|g| g.index == index)
            .map(|g| &g.status)
        {
            Some(GpuStatus::Ok) => "ok",
            Some(GpuStatus::Degraded) => "degraded",
            Some(GpuStatus::Lost) => "lost",
            Some(GpuStatus::Error { .. }) | None => "error",
        }
    }

    /// `tessera_gpu_status`: one series per state, 1 for the current one.
    fn status(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        const STATES: [&str; 4] = ["ok", "degraded", "lost", "error"];
        let mut status = Vec::new();
        for (i, g) in self.inventory.gpus.iter().enumerate() {
            let current = self.state(i);
            for state in STATES {
                status.push((
                    self.labels3(i, &g.uuid, ("state", state)),
                    (state == current) as i64,
                ));
            }
        }
        gauge(enc, &c::GPU_STATUS, status)
    }

    /// XID counters: accumulated by the sampler; the critical codes exist from the start.
    fn xid(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        type XidLabels<'a> = ([(&'static str, String); 3], HolderLabels<'a>);
        let totals = &self.snap.totals;
        let mut xid: Vec<(XidLabels<'_>, u64)> = Vec::new();
        for (i, g) in self.inventory.gpus.iter().enumerate() {
            let key = (g.index, g.uuid.clone());
            let mut codes: Vec<u64> = CRITICAL_XIDS.to_vec();
            codes.extend(
                totals
                    .xid
                    .keys()
                    .filter(|(k, _)| *k == key)
                    .map(|(_, x)| *x),
            );
            codes.sort_unstable();
            codes.dedup();
            for code in codes {
                let n = totals.xid.get(&(key.clone(), code)).copied().unwrap_or(0);
                let labels = [
                    ("gpu", self.idx[i].clone()),
                    ("uuid", g.uuid.clone()),
                    ("xid", code.to_string()),
                ];
                xid.push(((labels, self.holders[i]), n));
            }
        }
        counter(enc, &c::GPU_XID_ERRORS, xid)
    }
}

/// The GPUs of a sample, labelled from the inventory (a sampled GPU the inventory does not list
/// has no series).
struct Sampled<'s, 'a> {
    gpus: &'s Gpus<'a>,
    sample: &'s NodeSample,
}

impl Sampled<'_, '_> {
    /// The inventory position of the GPU with NVML index `gpu`.
    fn pos(&self, gpu: u32) -> Option<usize> {
        self.gpus.inventory.gpus.iter().position(|g| g.index == gpu)
    }

    /// One series per sampled GPU that has a value.
    fn series<V>(&self, f: impl Fn(&GpuSample) -> Option<V>) -> Vec<(L2<'_>, V)> {
        self.sample
            .gpus
            .iter()
            .filter_map(|g| Some((self.gpus.labels(self.pos(g.index)?), f(g)?)))
            .collect()
    }

    /// One series per sampled GPU and value of the label `key` that has a value.
    fn keyed<V>(&self, key: &'static str, f: impl Fn(&GpuSample) -> Keyed<V>) -> Vec<(L3<'_>, V)> {
        let mut out = Vec::new();
        for g in &self.sample.gpus {
            let Some(p) = self.pos(g.index) else { continue };
            for (label, v) in f(g) {
                if let Some(v) = v {
                    out.push((self.gpus.labels3(p, &g.uuid, (key, label)), v));
                }
            }
        }
        out
    }

    /// Busy time, memory controller, SM activity and occupancy.
    fn activity(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        gauge(enc, &c::GPU_BUSY, self.series(|g| g.busy_ratio))?;
        gauge(
            enc,
            &c::GPU_MEMORY_CONTROLLER_BUSY,
            self.series(|g| g.memory_controller_ratio),
        )?;
        gauge(enc, &c::GPU_SM_ACTIVE, self.series(|g| g.sm_active_ratio))?;
        gauge(
            enc,
            &c::GPU_SM_OCCUPANCY,
            self.series(|g| g.sm_occupancy_ratio),
        )
    }

    /// The profiling pipes (GPM, Hopper and later): absent where GPM does not give them.
    fn profiling(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        gauge(
            enc,
            &c::GPU_TENSOR_ACTIVE,
            self.series(|g| g.profiling.tensor_active_ratio),
        )?;
        gauge(
            enc,
            &c::GPU_TENSOR_PIPE_ACTIVE,
            self.keyed("pipe", |g| g.profiling.tensor_pipes().to_vec()),
        )?;
        gauge(
            enc,
            &c::GPU_DRAM_ACTIVE,
            self.series(|g| g.profiling.dram_active_ratio),
        )?;
        gauge(
            enc,
            &c::GPU_PIPE_ACTIVE,
            self.keyed("pipe", |g| g.profiling.pipes().to_vec()),
        )?;
        gauge(
            enc,
            &c::GPU_NVLINK_TRANSMIT,
            self.series(|g| g.profiling.nvlink_tx_bytes_per_second),
        )?;
        gauge(
            enc,
            &c::GPU_NVLINK_RECEIVE,
            self.series(|g| g.profiling.nvlink_rx_bytes_per_second),
        )
    }

    /// Memory in use and in total, and how long each GPU has been idle.
    fn memory_and_idle(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        gauge(
            enc,
            &c::GPU_MEMORY_USED,
            self.series(|g| g.memory_used_bytes.map(|v| v as f64)),
        )?;
        gauge(
            enc,
            &c::GPU_MEMORY_TOTAL,
            self.series(|g| g.memory_total_bytes.map(|v| v as f64)),
        )?;
        let idle = &self.gpus.snap.idle.gpus;
        gauge(
            enc,
            &c::GPU_IDLE,
            self.series(|g| idle.get(&g.uuid).copied()),
        )
    }

    /// Power, energy, temperature and clocks.
    fn power_and_thermals(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        gauge(enc, &c::GPU_POWER, self.series(|g| g.power_watts))?;
        counter(enc, &c::GPU_ENERGY, self.series(|g| g.energy_joules))?;
        gauge(
            enc,
            &c::GPU_TEMPERATURE,
            self.series(|g| g.temperature_celsius),
        )?;
        gauge(enc, &c::GPU_SM_CLOCK, self.series(|g| g.sm_clock_hertz))?;
        gauge(
            enc,
            &c::GPU_MEMORY_CLOCK,
            self.series(|g| g.memory_clock_hertz),
        )
    }

    /// PCIe throughput. It comes from GPM (the whole interval) on GPUs with GPM, else from
    /// NVML's 20 ms window; the help says so only where GPM is in use, so a node without GPM
    /// serves the same bytes as before.
    fn pcie(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let any_gpm = self.sample.gpus.iter().any(|g| !g.profiling.is_empty());
        let (tx, rx) = if any_gpm {
            (
                c::GPU_PCIE_TRANSMIT.with_help(c::GPU_PCIE_TRANSMIT_HELP_GPM),
                c::GPU_PCIE_RECEIVE.with_help(c::GPU_PCIE_RECEIVE_HELP_GPM),
            )
        } else {
            (c::GPU_PCIE_TRANSMIT, c::GPU_PCIE_RECEIVE)
        };
        gauge(enc, &tx, self.series(|g| g.pcie_tx_bytes_per_second))?;
        gauge(enc, &rx, self.series(|g| g.pcie_rx_bytes_per_second))
    }

    /// One series per throttle reason of each GPU whose reasons were read.
    fn throttle(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let reasons = self.keyed("reason", |g| {
            let Some(mask) = g.throttle_reasons else {
                return Vec::new();
            };
            THROTTLE_REASONS
                .iter()
                .map(|(bit, reason)| (*reason, Some((mask & bit != 0) as i64)))
                .collect()
        });
        gauge(enc, &c::GPU_THROTTLE_REASON, reasons)
    }

    /// ECC error counters, remapped rows and the row remapping's pending and failure flags.
    fn ecc_and_row_remapping(&self, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let ecc = self.keyed("type", |g| {
            vec![
                ("corrected", g.ecc_corrected_total),
                ("uncorrected", g.ecc_uncorrected_total),
            ]
        });
        counter(enc, &c::GPU_ECC_ERRORS, ecc)?;
        let rows = self.keyed("type", |g| {
            g.remapped_rows.map_or_else(Vec::new, |r| {
                vec![
                    ("correctable", Some(r.correctable as i64)),
                    ("uncorrectable", Some(r.uncorrectable as i64)),
                ]
            })
        });
        gauge(enc, &c::GPU_REMAPPED_ROWS, rows)?;
        let flag = |f: fn(&tessera_core::model::RemappedRows) -> bool| {
            self.series(move |g| g.remapped_rows.map(|r| f(&r) as i64))
        };
        gauge(enc, &c::GPU_ROW_REMAP_PENDING, flag(|r| r.pending))?;
        gauge(enc, &c::GPU_ROW_REMAP_FAILURE, flag(|r| r.failure))
    }
}
