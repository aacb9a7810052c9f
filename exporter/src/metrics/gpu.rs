//! Per-GPU metrics: identity (`tessera_gpu_info`), health status, activity, the profiling pipes
//! (GPM: tensor, DRAM, FP/integer pipes, NVLink), idle time, memory, power, energy, temperature,
//! clocks, throttle reasons, ECC, row remapping, PCIe and XID counters.
//!
//! Labels: `gpu` (NVML index) and `uuid` on every series, plus `state`, `reason`, `type`, `pipe`
//! or `xid` where a family needs one, and `pod`, `namespace`, `container` on every series of a GPU
//! that exactly one container holds (from the kubelet, see [`super::HolderLabels`]). Values come
//! from the snapshot only.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Unit;

use super::{Collector, Context, HolderLabels, counter_family, family, held, units};
use tessera_core::model::{GpuStatus, Profiling, THROTTLE_REASONS};

/// XID codes whose counters exist (at 0) from the start, so `increase()` sees the first one:
/// the critical XIDs of NVIDIA's XID catalogue.
pub const CRITICAL_XIDS: &[u64] = &[48, 62, 63, 64, 74, 79, 94, 95, 119, 120];

/// Per-GPU metrics.
pub struct GpuCollector;

type L2<'a> = ([(&'static str, &'a str); 2], HolderLabels<'a>);

/// The pipes of a [`Profiling`] as (`pipe` label, value).
type Pipes = Vec<(&'static str, Option<f64>)>;

impl Collector for GpuCollector {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn collect(&self, ctx: &Context<'_>, enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let snap = ctx.snapshot;
        let Some(inventory) = snap.inventory.as_deref() else {
            return Ok(());
        };
        let idx: Vec<String> = inventory.gpus.iter().map(|g| g.index.to_string()).collect();
        let driver = inventory.driver_version.as_deref().unwrap_or("");
        let cuda = inventory.cuda_version.as_deref().unwrap_or("");
        // The kubelet's pod labels of each GPU (none without the kubelet, or when shared).
        let holders: Vec<HolderLabels<'_>> =
            inventory.gpus.iter().map(|g| held(snap, &g.uuid)).collect();

        family(
            enc,
            "tessera_gpu_info",
            "GPU identity: model name, PCI bus id, driver and CUDA versions (value is always 1).",
            None,
            inventory
                .gpus
                .iter()
                .zip(&idx)
                .zip(&holders)
                .map(|((g, i), h)| {
                    (
                        (
                            [
                                ("gpu", i.as_str()),
                                ("uuid", g.uuid.as_str()),
                                ("name", g.name.as_str()),
                                ("pci_bus_id", g.pci_bus_id.as_str()),
                                ("driver_version", driver),
                                ("cuda_version", cuda),
                            ],
                            *h,
                        ),
                        1i64,
                    )
                })
                .collect(),
        )?;
        let labels = |i: usize| -> L2<'_> {
            (
                [
                    ("gpu", idx[i].as_str()),
                    ("uuid", inventory.gpus[i].uuid.as_str()),
                ],
                holders[i],
            )
        };
        let info_gauge = |f: &dyn Fn(usize) -> Option<f64>| -> Vec<(L2<'_>, f64)> {
            (0..inventory.gpus.len())
                .filter_map(|i| f(i).map(|v| (labels(i), v)))
                .collect()
        };
        family(
            enc,
            "tessera_gpu_power_limit",
            "Enforced power limit.",
            units::watts(),
            info_gauge(&|i| inventory.gpus[i].power_limit_watts),
        )?;
        family(
            enc,
            "tessera_gpu_mig_enabled",
            "1 when MIG mode is enabled now (absent on GPUs without MIG).",
            None,
            info_gauge(&|i| inventory.gpus[i].mig_mode.map(|m| m.current as i64 as f64)),
        )?;
        family(
            enc,
            "tessera_gpu_mig_pending_enabled",
            "1 when MIG mode will be enabled after the next GPU reset.",
            None,
            info_gauge(&|i| inventory.gpus[i].mig_mode.map(|m| m.pending as i64 as f64)),
        )?;

        // Status: one series per state; when the backend is down every GPU is in state `error`.
        const STATES: [&str; 4] = ["ok", "degraded", "lost", "error"];
        let state_of = |i: usize| -> &'static str {
            let Some(sample) = &snap.sample else {
                return "error";
            };
            match sample
                .gpus
                .iter()
                .find(|g| g.index == inventory.gpus[i].index)
                .map(|g| &g.status)
            {
                Some(GpuStatus::Ok) => "ok",
                Some(GpuStatus::Degraded) => "degraded",
                Some(GpuStatus::Lost) => "lost",
                Some(GpuStatus::Error { .. }) | None => "error",
            }
        };
        let mut status = Vec::new();
        for (i, (g, gpu)) in inventory.gpus.iter().zip(&idx).enumerate() {
            let current = state_of(i);
            for state in STATES {
                status.push((
                    (
                        [
                            ("gpu", gpu.as_str()),
                            ("uuid", g.uuid.as_str()),
                            ("state", state),
                        ],
                        holders[i],
                    ),
                    (state == current) as i64,
                ));
            }
        }
        family(
            enc,
            "tessera_gpu_status",
            "GPU health: 1 for the current state (ok, degraded: some reads failed, lost: fell off the bus, error: unreadable), 0 for the others.",
            None,
            status,
        )?;

        let Some(sample) = &snap.sample else {
            return Ok(());
        };
        // Index into the inventory by GPU index, for labels.
        let pos = |gpu: u32| inventory.gpus.iter().position(|g| g.index == gpu);
        let series =
            |f: &dyn Fn(&tessera_core::model::GpuSample) -> Option<f64>| -> Vec<(L2<'_>, f64)> {
                sample
                    .gpus
                    .iter()
                    .filter_map(|g| Some((labels(pos(g.index)?), f(g)?)))
                    .collect()
            };
        type Read = fn(&tessera_core::model::GpuSample) -> Option<f64>;
        let ratios: [(&str, &str, Read); 4] = [
            (
                "tessera_gpu_busy",
                "Share of time a kernel was running (NVML utilization.gpu; DCGM GPU_UTIL). Overstates compute load: see tessera_gpu_sm_active_ratio.",
                |g| g.busy_ratio,
            ),
            (
                "tessera_gpu_memory_controller_busy",
                "Share of time the memory controller was busy (NVML utilization.memory).",
                |g| g.memory_controller_ratio,
            ),
            (
                "tessera_gpu_sm_active",
                "Share of SMs with at least one warp resident, averaged over the sample (GPM, Hopper and later).",
                |g| g.sm_active_ratio,
            ),
            (
                "tessera_gpu_sm_occupancy",
                "Warps resident per SM relative to the maximum, averaged over the sample (GPM, Hopper and later).",
                |g| g.sm_occupancy_ratio,
            ),
        ];
        for (name, help, f) in ratios {
            family(enc, name, help, units::ratio(), series(&f))?;
        }
        // The profiling pipes (GPM, Hopper and later): absent where GPM does not give them.
        family(
            enc,
            "tessera_gpu_tensor_active",
            "Share of the interval any tensor pipe was active (GPM, Hopper and later; DCGM PIPE_TENSOR_ACTIVE).",
            units::ratio(),
            series(&|g| g.profiling.tensor_active_ratio),
        )?;
        let piped = |pipes: &dyn Fn(&Profiling) -> Pipes| {
            let mut out = Vec::new();
            for g in &sample.gpus {
                let Some(p) = pos(g.index) else { continue };
                for (pipe, v) in pipes(&g.profiling) {
                    if let Some(v) = v {
                        out.push((
                            (
                                [
                                    ("gpu", idx[p].as_str()),
                                    ("uuid", g.uuid.as_str()),
                                    ("pipe", pipe),
                                ],
                                holders[p],
                            ),
                            v,
                        ));
                    }
                }
            }
            out
        };
        family(
            enc,
            "tessera_gpu_tensor_pipe_active",
            "Share of the interval a tensor pipe of this kind was active: dfma (FP64), hmma (FP16/BF16/TF32), imma (integer) (GPM, Hopper and later).",
            units::ratio(),
            piped(&|p| p.tensor_pipes().to_vec()),
        )?;
        family(
            enc,
            "tessera_gpu_dram_active",
            "Share of the interval the DRAM interface was busy, as a fraction of its peak bandwidth (GPM, Hopper and later; DCGM DRAM_ACTIVE).",
            units::ratio(),
            series(&|g| g.profiling.dram_active_ratio),
        )?;
        family(
            enc,
            "tessera_gpu_pipe_active",
            "Share of the interval a non-tensor pipe was active: fp64, fp32, fp16, integer (GPM, Hopper and later).",
            units::ratio(),
            piped(&|p| p.pipes().to_vec()),
        )?;
        family(
            enc,
            "tessera_gpu_nvlink_transmit",
            "NVLink transmit throughput over all links, averaged over the interval (GPM, Hopper and later; 0 without NVLink traffic).",
            Some(Unit::Other("bytes_per_second".into())),
            series(&|g| g.profiling.nvlink_tx_bytes_per_second),
        )?;
        family(
            enc,
            "tessera_gpu_nvlink_receive",
            "NVLink receive throughput over all links, averaged over the interval (GPM, Hopper and later; 0 without NVLink traffic).",
            Some(Unit::Other("bytes_per_second".into())),
            series(&|g| g.profiling.nvlink_rx_bytes_per_second),
        )?;
        family(
            enc,
            "tessera_gpu_memory_used",
            "GPU memory in use.",
            units::bytes(),
            series(&|g| g.memory_used_bytes.map(|v| v as f64)),
        )?;
        family(
            enc,
            "tessera_gpu_memory_total",
            "GPU memory in total.",
            units::bytes(),
            series(&|g| g.memory_total_bytes.map(|v| v as f64)),
        )?;
        family(
            enc,
            "tessera_gpu_idle",
            "How long the GPU has continuously shown no activity (SM activity, else busy time, below 0.1%), on the sampler's clock; 0 while active.",
            Some(Unit::Seconds),
            series(&|g| snap.idle.gpus.get(&g.uuid).copied()),
        )?;
        family(
            enc,
            "tessera_gpu_power",
            "Power draw.",
            units::watts(),
            series(&|g| g.power_watts),
        )?;
        counter_family(
            enc,
            "tessera_gpu_energy",
            "Energy consumed since the driver was loaded.",
            Some(Unit::Joules),
            series(&|g| g.energy_joules),
        )?;
        family(
            enc,
            "tessera_gpu_temperature",
            "GPU core temperature.",
            Some(Unit::Celsius),
            series(&|g| g.temperature_celsius),
        )?;
        family(
            enc,
            "tessera_gpu_sm_clock",
            "SM clock frequency.",
            units::hertz(),
            series(&|g| g.sm_clock_hertz),
        )?;
        family(
            enc,
            "tessera_gpu_memory_clock",
            "Memory clock frequency.",
            units::hertz(),
            series(&|g| g.memory_clock_hertz),
        )?;
        // PCIe comes from GPM (the whole interval) on GPUs with GPM, else from NVML's 20 ms
        // window; the help says so only where GPM is in use, so a node without GPM serves the
        // same bytes as before.
        let any_gpm = sample.gpus.iter().any(|g| !g.profiling.is_empty());
        let (tx_help, rx_help) = if any_gpm {
            (
                "PCIe transmit throughput: averaged over the interval by GPM on GPUs with GPM (Hopper and later), else NVML's 20 ms sample.",
                "PCIe receive throughput: averaged over the interval by GPM on GPUs with GPM (Hopper and later), else NVML's 20 ms sample.",
            )
        } else {
            (
                "PCIe transmit throughput (NVML samples it over 20 ms).",
                "PCIe receive throughput (NVML samples it over 20 ms).",
            )
        };
        family(
            enc,
            "tessera_gpu_pcie_transmit",
            tx_help,
            Some(Unit::Other("bytes_per_second".into())),
            series(&|g| g.pcie_tx_bytes_per_second),
        )?;
        family(
            enc,
            "tessera_gpu_pcie_receive",
            rx_help,
            Some(Unit::Other("bytes_per_second".into())),
            series(&|g| g.pcie_rx_bytes_per_second),
        )?;

        let mut throttle = Vec::new();
        for g in &sample.gpus {
            let (Some(p), Some(mask)) = (pos(g.index), g.throttle_reasons) else {
                continue;
            };
            for (bit, reason) in THROTTLE_REASONS {
                throttle.push((
                    (
                        [
                            ("gpu", idx[p].as_str()),
                            ("uuid", g.uuid.as_str()),
                            ("reason", reason),
                        ],
                        holders[p],
                    ),
                    (mask & bit != 0) as i64,
                ));
            }
        }
        family(
            enc,
            "tessera_gpu_throttle_reason",
            "1 while the clocks are held down for this reason (NVML clock event reasons), else 0.",
            None,
            throttle,
        )?;

        let mut ecc = Vec::new();
        for g in &sample.gpus {
            let Some(p) = pos(g.index) else { continue };
            for (kind, v) in [
                ("corrected", g.ecc_corrected_total),
                ("uncorrected", g.ecc_uncorrected_total),
            ] {
                if let Some(v) = v {
                    ecc.push((
                        (
                            [
                                ("gpu", idx[p].as_str()),
                                ("uuid", g.uuid.as_str()),
                                ("type", kind),
                            ],
                            holders[p],
                        ),
                        v,
                    ));
                }
            }
        }
        counter_family(
            enc,
            "tessera_gpu_ecc_errors",
            "ECC errors since the driver was loaded (volatile), by type.",
            None,
            ecc,
        )?;

        let mut rows = Vec::new();
        let mut pending = Vec::new();
        let mut failure = Vec::new();
        for g in &sample.gpus {
            let (Some(p), Some(r)) = (pos(g.index), g.remapped_rows) else {
                continue;
            };
            pending.push((labels(p), r.pending as i64));
            failure.push((labels(p), r.failure as i64));
            for (kind, v) in [
                ("correctable", r.correctable),
                ("uncorrectable", r.uncorrectable),
            ] {
                rows.push((
                    (
                        [
                            ("gpu", idx[p].as_str()),
                            ("uuid", g.uuid.as_str()),
                            ("type", kind),
                        ],
                        holders[p],
                    ),
                    v as i64,
                ));
            }
        }
        family(
            enc,
            "tessera_gpu_remapped_rows",
            "Memory rows remapped since manufacture (persistent), by the kind of error that caused them.",
            None,
            rows,
        )?;
        family(
            enc,
            "tessera_gpu_row_remap_pending",
            "1 while a row remapping waits for the next GPU reset, else 0.",
            None,
            pending,
        )?;
        family(
            enc,
            "tessera_gpu_row_remap_failure",
            "1 when a row remapping has failed (the GPU needs service), else 0.",
            None,
            failure,
        )?;

        // XID counters: accumulated by the sampler; critical codes exist from the start.
        type XidLabels<'a> = ([(&'static str, String); 3], HolderLabels<'a>);
        let mut xid: Vec<(XidLabels<'_>, u64)> = Vec::new();
        for (i, g) in inventory.gpus.iter().enumerate() {
            let key = (g.index, g.uuid.clone());
            let mut codes: Vec<u64> = CRITICAL_XIDS.to_vec();
            codes.extend(
                snap.totals
                    .xid
                    .keys()
                    .filter(|(k, _)| *k == key)
                    .map(|(_, x)| *x),
            );
            codes.sort_unstable();
            codes.dedup();
            for code in codes {
                let n = snap
                    .totals
                    .xid
                    .get(&(key.clone(), code))
                    .copied()
                    .unwrap_or(0);
                xid.push((
                    (
                        [
                            ("gpu", idx[i].clone()),
                            ("uuid", g.uuid.clone()),
                            ("xid", code.to_string()),
                        ],
                        holders[i],
                    ),
                    n,
                ));
            }
        }
        counter_family(
            enc,
            "tessera_gpu_xid_errors",
            "XID error events since the exporter started, by XID code.",
            None,
            xid,
        )?;
        Ok(())
    }
}
