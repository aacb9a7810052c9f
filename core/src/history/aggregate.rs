//! Aggregation of 1-second samples into history rows: one row per entity (GPU, MIG instance,
//! process) per interval, as `docs/history-format.md` defines them.
//!
//! Pure: [`Aggregator::push`] takes a sample (with the inventory and the attribution the sampler
//! published with it) and returns the rows of every interval the sample closes. Interval
//! boundaries are multiples of `interval_ms` in the samples' own time (`timestamp_ms`, virtual
//! time in the simulator), never the wall clock; a row's `ts` is the end of its interval, and a
//! row holds the samples of `(ts − interval, ts]` (a sample exactly on a boundary ends the row
//! before it — the convention of every source, docs/frames.md).
//!
//! Rules: mean and max only over samples that had the value, null when none had it (absent is
//! never 0); the energy delta sums counter increases, including the step from the previous
//! interval's last sample (so no energy falls between intervals), and ignores a counter that went
//! backwards (driver reload); `status` is the worst seen; `xid_count` counts XID events; a
//! process's SM mean and maximum are over the readings its samples took
//! ([`crate::model::ProcessSample::sm_readings`]), so a backend that reads per-process utilisation
//! once per interval ([`crate::device::SlowReads`]) gives the rows of one that reads it every
//! sample.
//!
//! This module does no I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::schema::{Table, history_row};
use crate::model::{Allocation, Attribution, Holder};
use crate::model::{GpuInfo, GpuSample, GpuStatus, Inventory, NodeSample};

history_row!(
    /// One row of the `gpu` table.
    GpuRow, Table::Gpu, {
    ts: i64,
    interval_ms: i64,
    node: String,
    gpu: u32,
    uuid: String,
    samples: u32,
    model: String,
    status: String,
    busy_mean: Option<f64>,
    busy_max: Option<f64>,
    sm_active_mean: Option<f64>,
    sm_active_max: Option<f64>,
    sm_occupancy_mean: Option<f64>,
    memory_controller_mean: Option<f64>,
    memory_used_max_bytes: Option<u64>,
    memory_total_bytes: Option<u64>,
    power_mean_watts: Option<f64>,
    energy_delta_joules: Option<f64>,
    temperature_max_celsius: Option<f64>,
    xid_count: u32,
    mig_enabled: Option<bool>,
    tensor_active_mean: Option<f64>,
    tensor_active_max: Option<f64>,
    dram_active_mean: Option<f64>,
    fp64_active_mean: Option<f64>,
    fp32_active_mean: Option<f64>,
    fp16_active_mean: Option<f64>,
    integer_active_mean: Option<f64>,
    nvlink_tx_mean_bytes_per_second: Option<f64>,
    nvlink_rx_mean_bytes_per_second: Option<f64>,
    holders: Option<u32>,
    holder_namespace: Option<String>,
    holder_pod: Option<String>,
    holder_slurm_job_id: Option<String>,
});

history_row!(
    /// One row of the `mig` table.
    MigRow, Table::Mig, {
    ts: i64,
    interval_ms: i64,
    node: String,
    gpu: u32,
    uuid: String,
    samples: u32,
    gpu_instance: u32,
    compute_instance: u32,
    profile: String,
    profile_id: u32,
    placement_start: u32,
    placement_size: u32,
    mig_uuid: String,
    memory_used_max_bytes: Option<u64>,
    memory_total_bytes: Option<u64>,
    sm_active_mean: Option<f64>,
    sm_active_max: Option<f64>,
    tensor_active_mean: Option<f64>,
    dram_active_mean: Option<f64>,
    holders: Option<u32>,
    holder_namespace: Option<String>,
    holder_pod: Option<String>,
    holder_slurm_job_id: Option<String>,
});

history_row!(
    /// One row of the `process` table.
    ProcessRow, Table::Process, {
    ts: i64,
    interval_ms: i64,
    node: String,
    gpu: u32,
    uuid: String,
    samples: u32,
    pid: u32,
    process: Option<String>,
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
    pod_uid: Option<String>,
    container_id: Option<String>,
    slurm_job_id: Option<String>,
    namespace: Option<String>,
    pod: Option<String>,
    memory_used_max_bytes: Option<u64>,
    sm_mean: Option<f64>,
    sm_max: Option<f64>,
});

/// The rows of one or more closed intervals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    pub gpu: Vec<GpuRow>,
    pub mig: Vec<MigRow>,
    pub process: Vec<ProcessRow>,
}

impl Rows {
    /// Whether there are no rows at all.
    pub fn is_empty(&self) -> bool {
        self.gpu.is_empty() && self.mig.is_empty() && self.process.is_empty()
    }

    /// Number of rows of `table`.
    pub fn len(&self, table: Table) -> usize {
        match table {
            Table::Gpu => self.gpu.len(),
            Table::Mig => self.mig.len(),
            Table::Process => self.process.len(),
        }
    }

    fn append(&mut self, mut other: Rows) {
        self.gpu.append(&mut other.gpu);
        self.mig.append(&mut other.mig);
        self.process.append(&mut other.process);
    }
}

/// Mean and max of the samples that had a value.
#[derive(Debug, Clone, Copy, Default)]
struct Stat {
    sum: f64,
    max: f64,
    n: u32,
}

impl Stat {
    fn add(&mut self, v: Option<f64>) {
        if let Some(v) = v {
            self.max = if self.n == 0 { v } else { self.max.max(v) };
            self.sum += v;
            self.n += 1;
        }
    }
    fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }
    fn max(&self) -> Option<f64> {
        (self.n > 0).then_some(self.max)
    }
}

fn max_u64(acc: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *acc = Some(acc.map_or(v, |a| a.max(v)));
    }
}

/// Who held a device over an interval: the most holders any sample saw, and the first holder
/// (sorted) of the last sample that saw one; unknown unless some sample had an allocation source.
#[derive(Debug, Default)]
struct Held {
    known: bool,
    max: u32,
    first: Option<Holder>,
}

impl Held {
    fn add<'a>(&mut self, holders: Option<impl Iterator<Item = &'a Holder>>) {
        let Some(holders) = holders else { return };
        let mut all: Vec<&Holder> = holders.collect();
        all.sort();
        all.dedup();
        self.known = true;
        self.max = self.max.max(all.len() as u32);
        if let Some(h) = all.first() {
            self.first = Some((*h).clone());
        }
    }

    /// The four `holder*` columns: (holders, namespace, pod, slurm job id).
    fn columns(self) -> (Option<u32>, Option<String>, Option<String>, Option<String>) {
        let h = self.first.unwrap_or_default();
        (
            self.known.then_some(self.max),
            h.namespace,
            h.pod,
            h.slurm_job_id,
        )
    }
}

fn status_rank(s: &GpuStatus) -> (u8, &'static str) {
    match s {
        GpuStatus::Ok => (0, "ok"),
        GpuStatus::Degraded => (1, "degraded"),
        GpuStatus::Error { .. } => (2, "error"),
        GpuStatus::Lost => (3, "lost"),
    }
}

#[derive(Debug, Default)]
struct GpuAcc {
    uuid: String,
    samples: u32,
    status: u8,
    status_name: &'static str,
    busy: Stat,
    sm_active: Stat,
    sm_occupancy: Stat,
    memory_controller: Stat,
    memory_used_max: Option<u64>,
    memory_total: Option<u64>,
    power: Stat,
    energy: Option<f64>,
    temperature: Stat,
    xid: u32,
    tensor: Stat,
    dram: Stat,
    fp64: Stat,
    fp32: Stat,
    fp16: Stat,
    integer: Stat,
    nvlink_tx: Stat,
    nvlink_rx: Stat,
    held: Held,
}

#[derive(Debug, Default)]
struct MigAcc {
    uuid: String,
    mig_uuid: String,
    samples: u32,
    memory_used_max: Option<u64>,
    memory_total: Option<u64>,
    sm_active: Stat,
    tensor: Stat,
    dram: Stat,
    held: Held,
}

#[derive(Debug, Default)]
struct ProcAcc {
    uuid: String,
    samples: u32,
    name: Option<String>,
    memory_used_max: Option<u64>,
    sm: Stat,
    attribution: Option<Arc<Attribution>>,
}

impl GpuAcc {
    /// Add one sample of the GPU: its status (the worst seen is kept), utilisation, memory,
    /// power, temperature, XID events, profiling pipes, and the holders of the GPU and of its
    /// MIG devices together. Not its energy (the aggregator carries the counter across
    /// intervals).
    fn add(&mut self, g: &GpuSample, allocation: &Allocation) {
        self.samples += 1;
        let (rank, name) = status_rank(&g.status);
        if rank >= self.status {
            self.status = rank;
            self.status_name = name;
        }
        self.busy.add(g.busy_ratio);
        self.sm_active.add(g.sm_active_ratio);
        self.sm_occupancy.add(g.sm_occupancy_ratio);
        self.memory_controller.add(g.memory_controller_ratio);
        max_u64(&mut self.memory_used_max, g.memory_used_bytes);
        max_u64(&mut self.memory_total, g.memory_total_bytes);
        self.power.add(g.power_watts);
        self.temperature.add(g.temperature_celsius);
        self.xid += g.xid_events.len() as u32;
        let p = &g.profiling;
        self.tensor.add(p.tensor_active_ratio);
        self.dram.add(p.dram_active_ratio);
        self.fp64.add(p.fp64_ratio);
        self.fp32.add(p.fp32_ratio);
        self.fp16.add(p.fp16_ratio);
        self.integer.add(p.integer_ratio);
        self.nvlink_tx.add(p.nvlink_tx_bytes_per_second);
        self.nvlink_rx.add(p.nvlink_rx_bytes_per_second);
        self.held.add(allocation.holders(&g.uuid).map(|own| {
            own.iter().chain(
                g.mig
                    .iter()
                    .filter_map(|m| allocation.holders(&m.uuid))
                    .flatten(),
            )
        }));
    }

    /// The GPU's row of the interval ending at `ts` (`gi`: its inventory entry, if known).
    fn row(
        self,
        index: u32,
        gi: Option<&GpuInfo>,
        ts: i64,
        interval_ms: i64,
        node: &str,
    ) -> GpuRow {
        let (holders, holder_namespace, holder_pod, holder_slurm_job_id) = self.held.columns();
        GpuRow {
            ts,
            interval_ms,
            node: node.to_string(),
            gpu: index,
            uuid: self.uuid,
            samples: self.samples,
            model: gi.map(|g| g.name.clone()).unwrap_or_default(),
            status: self.status_name.to_string(),
            busy_mean: self.busy.mean(),
            busy_max: self.busy.max(),
            sm_active_mean: self.sm_active.mean(),
            sm_active_max: self.sm_active.max(),
            sm_occupancy_mean: self.sm_occupancy.mean(),
            memory_controller_mean: self.memory_controller.mean(),
            memory_used_max_bytes: self.memory_used_max,
            memory_total_bytes: self.memory_total.or(gi.and_then(|g| g.memory_total_bytes)),
            power_mean_watts: self.power.mean(),
            energy_delta_joules: self.energy,
            temperature_max_celsius: self.temperature.max(),
            xid_count: self.xid,
            mig_enabled: gi.and_then(|g| g.mig_mode).map(|m| m.current),
            tensor_active_mean: self.tensor.mean(),
            tensor_active_max: self.tensor.max(),
            dram_active_mean: self.dram.mean(),
            fp64_active_mean: self.fp64.mean(),
            fp32_active_mean: self.fp32.mean(),
            fp16_active_mean: self.fp16.mean(),
            integer_active_mean: self.integer.mean(),
            nvlink_tx_mean_bytes_per_second: self.nvlink_tx.mean(),
            nvlink_rx_mean_bytes_per_second: self.nvlink_rx.mean(),
            holders,
            holder_namespace,
            holder_pod,
            holder_slurm_job_id,
        }
    }
}

impl Bucket {
    /// Add one sample of each MIG instance of GPU `g`, with its own holders.
    fn add_migs(&mut self, g: &GpuSample, allocation: &Allocation) {
        for m in &g.mig {
            let acc = self
                .migs
                .entry((g.index, m.gpu_instance_id, m.compute_instance_id))
                .or_insert_with(|| MigAcc {
                    uuid: g.uuid.clone(),
                    mig_uuid: m.uuid.clone(),
                    ..MigAcc::default()
                });
            acc.samples += 1;
            max_u64(&mut acc.memory_used_max, m.memory_used_bytes);
            max_u64(&mut acc.memory_total, m.memory_total_bytes);
            acc.sm_active.add(m.sm_active_ratio);
            acc.tensor.add(m.profiling.tensor_active_ratio);
            acc.dram.add(m.profiling.dram_active_ratio);
            acc.held.add(allocation.holders(&m.uuid).map(|h| h.iter()));
        }
    }

    /// Add one sample of each process on GPU `g`: its name (the last known kept), memory, SM
    /// readings and attribution.
    fn add_processes(&mut self, g: &GpuSample, attribution: &HashMap<u32, Arc<Attribution>>) {
        for p in &g.processes {
            let acc = self
                .procs
                .entry((g.index, p.pid, p.gpu_instance_id, p.compute_instance_id))
                .or_insert_with(|| ProcAcc {
                    uuid: g.uuid.clone(),
                    ..ProcAcc::default()
                });
            acc.samples += 1;
            if p.name.is_some() && acc.name != p.name {
                acc.name = p.name.clone();
            }
            max_u64(&mut acc.memory_used_max, p.used_memory_bytes);
            for v in &p.sm_readings {
                acc.sm.add(Some(*v));
            }
            if let Some(a) = attribution.get(&p.pid) {
                acc.attribution = Some(a.clone());
            }
        }
    }
}

/// The interval in progress.
#[derive(Debug, Default)]
struct Bucket {
    end_ms: i64,
    gpus: BTreeMap<u32, GpuAcc>,
    migs: BTreeMap<(u32, u32, u32), MigAcc>,
    procs: BTreeMap<(u32, u32, Option<u32>, Option<u32>), ProcAcc>,
    inventory: Option<Arc<Inventory>>,
}

/// Turns 1-second samples into interval rows for one node.
#[derive(Debug)]
pub struct Aggregator {
    node: String,
    interval_ms: i64,
    bucket: Option<Bucket>,
    /// Last energy reading per GPU index: (timestamp, joules), carried across intervals.
    last_energy: HashMap<u32, (i64, f64)>,
}

impl Aggregator {
    /// An aggregator for `node` with intervals of `interval_ms` (at least 1).
    pub fn new(node: impl Into<String>, interval_ms: i64) -> Aggregator {
        Aggregator {
            node: node.into(),
            interval_ms: interval_ms.max(1),
            bucket: None,
            last_energy: HashMap::new(),
        }
    }

    /// The interval length in milliseconds.
    pub fn interval_ms(&self) -> i64 {
        self.interval_ms
    }

    /// End of the interval containing `t_ms` (intervals are `(end − interval, end]`).
    pub fn interval_end(&self, t_ms: i64) -> i64 {
        let i = self.interval_ms;
        t_ms.div_euclid(i) * i + if t_ms.rem_euclid(i) == 0 { 0 } else { i }
    }

    /// Add one sample without an allocation source (holders unknown): [`Aggregator::push_held`].
    pub fn push(
        &mut self,
        inventory: &Arc<Inventory>,
        sample: &NodeSample,
        attribution: &HashMap<u32, Arc<Attribution>>,
    ) -> Option<Rows> {
        self.push_held(inventory, sample, attribution, &Allocation::unknown())
    }

    /// Add one sample with the devices' holders at its instant. Returns the rows of the interval
    /// it closed, if it starts a new one. A sample older than the interval in progress (clock
    /// went back) closes it too. A GPU's holders are those of the GPU and of its MIG devices
    /// together (a MIG GPU is held when any instance is); a MIG instance's, its own.
    pub fn push_held(
        &mut self,
        inventory: &Arc<Inventory>,
        sample: &NodeSample,
        attribution: &HashMap<u32, Arc<Attribution>>,
        allocation: &Allocation,
    ) -> Option<Rows> {
        let end = self.interval_end(sample.timestamp_ms);
        let mut closed = None;
        if self.bucket.as_ref().is_some_and(|b| b.end_ms != end) {
            closed = self.flush();
        }
        let interval_ms = self.interval_ms;
        let bucket = self.bucket.get_or_insert_with(|| Bucket {
            end_ms: end,
            ..Bucket::default()
        });
        bucket.inventory = Some(inventory.clone());
        for g in &sample.gpus {
            let acc = bucket.gpus.entry(g.index).or_insert_with(|| GpuAcc {
                uuid: g.uuid.clone(),
                status_name: "ok",
                ..GpuAcc::default()
            });
            acc.add(g, allocation);
            if let Some(e) = g.energy_joules {
                let mut delta = 0.0;
                if let Some(&(t, prev)) = self.last_energy.get(&g.index)
                    && t > end - 2 * interval_ms
                    && e >= prev
                {
                    delta = e - prev;
                }
                *acc.energy.get_or_insert(0.0) += delta;
                self.last_energy.insert(g.index, (sample.timestamp_ms, e));
            }
            bucket.add_migs(g, allocation);
            bucket.add_processes(g, attribution);
        }
        closed
    }

    /// Close the interval in progress (at shutdown or the end of a simulation).
    pub fn flush(&mut self) -> Option<Rows> {
        let b = self.bucket.take()?;
        let inv = b.inventory.as_deref();
        let info = |index: u32| inv.and_then(|i| i.gpus.iter().find(|g| g.index == index));
        let mut rows = Rows::default();
        let (ts, interval_ms, node) = (b.end_ms, self.interval_ms, &self.node);
        for (index, a) in b.gpus {
            let gi = info(index);
            rows.gpu.push(a.row(index, gi, ts, interval_ms, node));
        }
        for ((index, gi_id, ci_id), a) in b.migs {
            // A MIG instance the inventory does not know (reconfigured since) has no profile: skip.
            let Some(mi) = info(index).and_then(|g| {
                g.mig_instances
                    .iter()
                    .find(|m| m.gpu_instance_id == gi_id && m.compute_instance_id == ci_id)
            }) else {
                continue;
            };
            let (holders, holder_namespace, holder_pod, holder_slurm_job_id) = a.held.columns();
            rows.mig.push(MigRow {
                ts,
                interval_ms,
                node: node.clone(),
                gpu: index,
                uuid: a.uuid,
                samples: a.samples,
                gpu_instance: gi_id,
                compute_instance: ci_id,
                profile: mi.profile_name.clone(),
                profile_id: mi.profile_id,
                placement_start: mi.placement.start,
                placement_size: mi.placement.size,
                mig_uuid: a.mig_uuid,
                memory_used_max_bytes: a.memory_used_max,
                memory_total_bytes: a.memory_total.or(mi.memory_total_bytes),
                sm_active_mean: a.sm_active.mean(),
                sm_active_max: a.sm_active.max(),
                tensor_active_mean: a.tensor.mean(),
                dram_active_mean: a.dram.mean(),
                holders,
                holder_namespace,
                holder_pod,
                holder_slurm_job_id,
            });
        }
        for ((index, pid, gi_id, ci_id), a) in b.procs {
            let at = a.attribution.as_deref();
            let field = |f: fn(&Attribution) -> &Option<String>| at.and_then(|x| f(x).clone());
            rows.process.push(ProcessRow {
                ts,
                interval_ms,
                node: node.clone(),
                gpu: index,
                uuid: a.uuid,
                samples: a.samples,
                pid,
                process: a.name,
                gpu_instance: gi_id,
                compute_instance: ci_id,
                pod_uid: field(|x| &x.pod_uid),
                container_id: field(|x| &x.container_id),
                slurm_job_id: field(|x| &x.slurm_job_id),
                namespace: field(|x| &x.namespace),
                pod: field(|x| &x.pod),
                memory_used_max_bytes: a.memory_used_max,
                sm_mean: a.sm.mean(),
                sm_max: a.sm.max(),
            });
        }
        Some(rows)
    }

    /// Add many samples; returns every closed interval's rows (convenience for tests).
    pub fn push_all<'a>(
        &mut self,
        inventory: &Arc<Inventory>,
        samples: impl IntoIterator<Item = &'a NodeSample>,
        attribution: &HashMap<u32, Arc<Attribution>>,
    ) -> Rows {
        let mut out = Rows::default();
        for s in samples {
            if let Some(r) = self.push(inventory, s, attribution) {
                out.append(r);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::schema::HistoryRow;
    use crate::model::{
        GpuInfo, GpuSample, MigInstanceInfo, MigMode, MigSample, Placement, ProcessSample, XidEvent,
    };

    fn inventory() -> Arc<Inventory> {
        Arc::new(Inventory {
            node: "n1".into(),
            driver_version: None,
            cuda_version: None,
            gpus: vec![GpuInfo {
                index: 0,
                minor_number: None,
                uuid: "GPU-0".into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                pci_bus_id: "0".into(),
                memory_total_bytes: Some(80),
                power_limit_watts: None,
                mig_mode: Some(MigMode {
                    current: true,
                    pending: true,
                }),
                mig_instances: vec![MigInstanceInfo {
                    gpu_instance_id: 1,
                    compute_instance_id: 0,
                    profile_id: 9,
                    profile_name: "3g.40gb".into(),
                    placement: Placement { start: 0, size: 4 },
                    uuid: "MIG-1".into(),
                    memory_total_bytes: Some(40),
                }],
            }],
        })
    }

    fn sample(t: i64, busy: Option<f64>, energy: Option<f64>, status: GpuStatus) -> NodeSample {
        let mut g = GpuSample::empty(0, "GPU-0", status);
        g.busy_ratio = busy;
        g.energy_joules = energy;
        g.memory_used_bytes = busy.map(|b| (b * 100.0) as u64);
        g.mig = vec![MigSample {
            gpu_instance_id: 1,
            compute_instance_id: 0,
            uuid: "MIG-1".into(),
            memory_used_bytes: Some(t as u64),
            memory_total_bytes: None,
            sm_active_ratio: None,
            profiling: Default::default(),
        }];
        g.processes = vec![ProcessSample {
            pid: 7,
            name: Some("python".into()),
            used_memory_bytes: Some(5),
            sm_ratio: busy,
            sm_readings: busy.into_iter().collect(),
            gpu_instance_id: Some(1),
            compute_instance_id: Some(0),
        }];
        NodeSample {
            timestamp_ms: t,
            gpus: vec![g],
        }
    }

    #[test]
    fn rows_match_the_schema() {
        fn check<R: HistoryRow>() {
            let fields = R::fields();
            let cols = R::TABLE.columns();
            assert_eq!(fields.len(), cols.len(), "{}", R::TABLE.name());
            for (f, c) in fields.iter().zip(cols) {
                assert_eq!((f.0, f.1, f.2), (c.name, c.ty, c.nullable));
            }
        }
        check::<GpuRow>();
        check::<MigRow>();
        check::<ProcessRow>();
    }

    #[test]
    fn means_maxima_nulls_and_boundaries() {
        let inv = inventory();
        let attr: HashMap<u32, Arc<Attribution>> = [(
            7,
            Arc::new(Attribution {
                namespace: Some("ns".into()),
                pod: Some("p".into()),
                ..Attribution::default()
            }),
        )]
        .into();
        let mut agg = Aggregator::new("n1", 10_000);
        // Intervals are (end − 10 s, end]: a sample exactly on a boundary ends an interval.
        let samples = vec![
            sample(1_000, Some(0.2), Some(100.0), GpuStatus::Ok),
            sample(2_000, None, Some(110.0), GpuStatus::Degraded),
            sample(10_000, Some(0.6), Some(130.0), GpuStatus::Ok),
            // Next interval: energy counts from 130.
            sample(10_001, None, Some(135.0), GpuStatus::Ok),
            sample(20_000, None, None, GpuStatus::Lost),
            // Closes the second interval.
            sample(20_001, Some(1.0), None, GpuStatus::Ok),
        ];
        let rows = agg.push_all(&inv, &samples, &attr);
        assert_eq!(rows.gpu.len(), 2);
        let a = &rows.gpu[0];
        assert_eq!(
            (a.ts, a.samples, a.status.as_str()),
            (10_000, 3, "degraded")
        );
        assert!((a.busy_mean.unwrap() - 0.4).abs() < 1e-9);
        assert_eq!(a.busy_max, Some(0.6));
        assert_eq!(a.memory_used_max_bytes, Some(60));
        assert_eq!(a.memory_total_bytes, Some(80));
        assert_eq!(a.energy_delta_joules, Some(30.0));
        assert_eq!(a.power_mean_watts, None);
        assert_eq!(a.mig_enabled, Some(true));
        assert_eq!(a.model, "NVIDIA H100 80GB HBM3");
        let b = &rows.gpu[1];
        assert_eq!((b.ts, b.samples, b.status.as_str()), (20_000, 2, "lost"));
        assert_eq!(b.busy_mean, None);
        assert_eq!(b.energy_delta_joules, Some(5.0));
        assert_eq!(rows.mig.len(), 2);
        assert_eq!(rows.mig[0].memory_used_max_bytes, Some(10_000));
        assert_eq!(rows.mig[0].memory_total_bytes, Some(40));
        assert_eq!(rows.mig[0].profile, "3g.40gb");
        assert_eq!(rows.process.len(), 2);
        let p = &rows.process[0];
        assert_eq!(p.samples, 3);
        assert_eq!(p.namespace.as_deref(), Some("ns"));
        assert_eq!(p.pod_uid, None);
        assert_eq!(p.sm_max, Some(0.6));
        // The open interval comes out on flush.
        let last = agg.flush().unwrap();
        assert_eq!(last.gpu[0].ts, 30_000);
        assert_eq!(last.gpu[0].energy_delta_joules, None);
        assert!(agg.flush().is_none());
    }

    #[test]
    fn xid_and_counter_reset() {
        let inv = inventory();
        let mut agg = Aggregator::new("n1", 10_000);
        let mut s = sample(1_000, Some(0.1), Some(500.0), GpuStatus::Ok);
        s.gpus[0].xid_events = vec![
            XidEvent {
                xid: 79,
                timestamp_ms: 1_000,
                gpu_instance_id: None,
            };
            2
        ];
        agg.push(&inv, &s, &HashMap::new());
        // Counter went backwards (driver reload): no negative energy.
        agg.push(
            &inv,
            &sample(2_000, Some(0.1), Some(3.0), GpuStatus::Ok),
            &HashMap::new(),
        );
        agg.push(
            &inv,
            &sample(3_000, Some(0.1), Some(4.0), GpuStatus::Ok),
            &HashMap::new(),
        );
        let r = agg.flush().unwrap();
        assert_eq!(r.gpu[0].xid_count, 2);
        assert_eq!(r.gpu[0].energy_delta_joules, Some(1.0));
    }

    #[test]
    fn negative_times_align_too() {
        let agg = Aggregator::new("n", 10_000);
        assert_eq!(agg.interval_end(-1), 0);
        assert_eq!(agg.interval_end(-10_000), -10_000);
        assert_eq!(agg.interval_end(0), 0);
        assert_eq!(agg.interval_end(1), 10_000);
        assert_eq!(agg.interval_end(9_999), 10_000);
        // A sample exactly on a boundary ends the interval before it.
        assert_eq!(agg.interval_end(10_000), 10_000);
        assert_eq!(agg.interval_end(10_001), 20_000);
    }

    #[test]
    fn holders_are_counted_per_device_and_unknown_without_a_source() {
        let inv = inventory();
        let pod = |ns: &str, p: &str| Holder {
            namespace: Some(ns.into()),
            pod: Some(p.into()),
            slurm_job_id: None,
        };
        let job = Holder {
            slurm_job_id: Some("81".into()),
            ..Holder::default()
        };
        let held = |devices: Vec<(&str, Vec<Holder>)>| Allocation {
            known: true,
            devices: devices
                .into_iter()
                .map(|(d, h)| (d.to_string(), h))
                .collect(),
        };
        let none = HashMap::new();
        let mut agg = Aggregator::new("n1", 10_000);
        // Interval 1: no source at first, then the GPU held by two pods (time-slicing), then
        // the MIG instance by a Slurm job as well: the GPU counts all three, the instance one.
        let a1 = agg.push_held(
            &inv,
            &sample(1_000, None, None, GpuStatus::Ok),
            &none,
            &Allocation::unknown(),
        );
        assert!(a1.is_none());
        agg.push_held(
            &inv,
            &sample(2_000, None, None, GpuStatus::Ok),
            &none,
            &held(vec![(
                "GPU-0",
                vec![pod("b", "y"), pod("a", "x"), pod("a", "x")],
            )]),
        );
        agg.push_held(
            &inv,
            &sample(3_000, None, None, GpuStatus::Ok),
            &none,
            &held(vec![
                ("GPU-0", vec![pod("a", "x"), pod("b", "y")]),
                ("MIG-1", vec![job.clone()]),
            ]),
        );
        // Interval 2: known, nobody holds anything. Interval 3: no source.
        let r1 = agg
            .push_held(
                &inv,
                &sample(11_000, None, None, GpuStatus::Ok),
                &none,
                &held(vec![]),
            )
            .unwrap();
        let r2 = agg
            .push_held(
                &inv,
                &sample(21_000, None, None, GpuStatus::Ok),
                &none,
                &Allocation::unknown(),
            )
            .unwrap();
        let r3 = agg.flush().unwrap();
        let g = &r1.gpu[0];
        assert_eq!(g.holders, Some(3));
        // Sorted by namespace, pod, job, a missing field first: the job comes before the pods.
        assert_eq!(
            (
                g.holder_namespace.as_deref(),
                g.holder_slurm_job_id.as_deref()
            ),
            (None, Some("81"))
        );
        let m = &r1.mig[0];
        assert_eq!(m.holders, Some(1));
        assert_eq!(m.holder_slurm_job_id.as_deref(), Some("81"));
        assert_eq!(m.holder_pod, None);
        assert_eq!((r2.gpu[0].holders, r2.mig[0].holders), (Some(0), Some(0)));
        assert_eq!(r2.gpu[0].holder_pod, None);
        assert_eq!((r3.gpu[0].holders, r3.mig[0].holders), (None, None));
    }
}
