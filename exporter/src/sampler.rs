//! The sampler: one dedicated thread that owns the backend, samples at a fixed rate and publishes
//! immutable [`Snapshot`]s.
//!
//! Architecture invariants:
//! - The backend (and so NVML) is called only on this thread. Readers (HTTP handlers, the history
//!   writer, `--once`) get an `Arc<Snapshot>` from [`SnapshotHandle::latest`]; they never wait
//!   for NVML.
//! - One GPU's error never drops the others (that is the backend's contract); a node-level
//!   (driver) error drops the backend, and a new one is created with exponential backoff. Until
//!   then snapshots are still published, carrying the error and no sample.
//! - The two slow counters (energy, per-process utilisation: 5 of a real GPU's 6 ms sample) are
//!   read once per [`SamplerConfig::slow_interval`], on the last sample of each interval by the
//!   backend's own clock ([`SlowSchedule`]); other samples carry their last reading.
//! - Ticks are fixed-rate (`start + n × interval`); a tick that comes too late is skipped and
//!   counted in [`Snapshot::missed_ticks`], never run twice.
//! - The inventory (identity, MIG mode and MIG instances) is read when the backend is created,
//!   again every [`SamplerConfig::inventory_refresh`], and at once (at most every
//!   [`INVENTORY_RECHECK`]) when a sample's MIG devices differ from it — so a MIG layout changed
//!   at run time shows in `tessera_mig_info` and in the drift from the planned layout.
//! - Idle spans of processes and GPUs, and the spans of devices held by a pod and unused
//!   ([`crate::idle`]), are kept here, on the samples' clock.
//! - Who holds each device by allocation ([`Snapshot::allocation`]) combines the configured
//!   sources, the kubelet's latest map and the Slurm hook ([`combine`]): known only when every
//!   configured source is.
//!
//! This module does no rendering and no I/O besides calling the backend and its hooks.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::idle::{IdleTimes, IdleTracker, UnusedTracker};
use crate::kubelet::{DeviceHolders, PodResourcesHandle};
use tessera_core::device::{DeviceError, GpuBackend, SlowReads, SlowSchedule};
use tessera_core::model::{Allocation, Attribution};
use tessera_core::model::{GpuStatus, Inventory, NodeSample};

/// Shortest time between two inventory reads triggered by a sample whose MIG devices differ from
/// the inventory (a GPU whose MIG reads fail would otherwise trigger one every sample).
pub const INVENTORY_RECHECK: Duration = Duration::from_secs(5);

/// Creates a backend; called at start and after every driver-level error.
pub type BackendFactory = Box<dyn FnMut() -> Result<Box<dyn GpuBackend>, DeviceError> + Send>;

/// Where each process of a sample runs (pod, container, Slurm job), by pid. Runs on the sampler
/// thread after each sample, so scrapes never read `/proc`; keeps its own cache.
pub type Attributor = Box<dyn FnMut(&NodeSample) -> HashMap<u32, Arc<Attribution>> + Send>;

/// Which GPUs the scheduler has allocated, for an inventory (`--collector.slurm`:
/// [`crate::slurm::SlurmScanner::allocation`]). Runs on the sampler thread after each sample;
/// must be bounded and never fail (an unknown answer is [`Allocation::unknown`]).
pub type AllocationSource = Box<dyn FnMut(&Inventory) -> Allocation + Send>;

/// Sampler settings.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// Time between samples (`--sample.interval`).
    pub interval: Duration,
    /// First delay before re-creating a failed backend.
    pub backoff_initial: Duration,
    /// Largest delay between re-creation attempts.
    pub backoff_max: Duration,
    /// Time between two reads of the inventory while the backend is up.
    pub inventory_refresh: Duration,
    /// Read the slow counters (energy, per-process utilisation) once per this interval, on the
    /// last sample of each ([`SlowSchedule`]); `None`: every sample.
    pub slow_interval: Option<Duration>,
}

/// Optional steps the sampler runs after each sample.
#[derive(Default)]
pub struct SamplerHooks {
    /// Attributes processes to pods, containers and Slurm jobs.
    pub attributor: Option<Attributor>,
    /// Called with every published snapshot, on the sampler thread: must not block (the history
    /// writer `try_send`s to its own thread, see [`crate::history_thread::HistorySender::offer`]).
    pub on_sample: Option<OnSample>,
    /// The kubelet's latest device map (`--kubelet.pod-resources-socket`), copied into each
    /// snapshot; reading it never waits for the kubelet.
    pub pod_resources: Option<PodResourcesHandle>,
    /// The GPUs Slurm jobs hold (`--collector.slurm`), asked after each sample.
    pub slurm: Option<AllocationSource>,
}

/// A hook that sees every published snapshot (must return at once).
pub type OnSample = Box<dyn FnMut(&Arc<Snapshot>) + Send>;

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            interval: Duration::from_secs(1),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            inventory_refresh: Duration::from_secs(60),
            slow_interval: None,
        }
    }
}

/// State of the backend as of one snapshot.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BackendState {
    /// Backend name (`nvml`, `sim`), or `none` before the first successful creation.
    pub backend: &'static str,
    /// Whether the last attempt (creation or sample) succeeded.
    pub healthy: bool,
    /// The last node-level error, if the last attempt failed.
    pub last_error: Option<String>,
    /// How many times the backend was (re)created successfully.
    pub initialisations: u64,
    /// Node-level errors since start.
    pub errors_total: u64,
}

/// One published snapshot: immutable, shared by `Arc`.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Increases by one per published snapshot, from 1.
    pub sequence: u64,
    /// Inventory from the current backend's initialisation.
    pub inventory: Option<Arc<Inventory>>,
    /// The sample of this tick; `None` when the backend is down.
    pub sample: Option<NodeSample>,
    pub state: BackendState,
    /// How long the backend took for this tick.
    pub duration: Duration,
    /// Ticks skipped since start because sampling overran.
    pub missed_ticks: u64,
    /// Running totals since start, kept on the sampler thread (counters for `/metrics`).
    pub totals: Arc<Totals>,
    /// Attribution of this sample's processes, by pid (absent: unknown).
    pub attribution: Arc<HashMap<u32, Arc<Attribution>>>,
    /// How long each process and GPU of this sample has been idle (absent: unknown).
    pub idle: Arc<IdleTimes>,
    /// Which pods hold which GPU and MIG devices, from the kubelet (empty without it).
    pub holders: Arc<DeviceHolders>,
    /// Who holds each device by allocation, every configured source together (the kubelet's
    /// pods, Slurm's jobs): what history records. Unknown without a source, or while one fails.
    pub allocation: Arc<Allocation>,
}

impl Snapshot {
    /// A snapshot of one sample of a healthy backend (initialised once, no errors) with empty
    /// totals, attribution and idle times: `--once`'s output, tests and benchmarks. Set the rest
    /// with struct update syntax (`Snapshot { totals, ..Snapshot::of_sample(…) }`).
    pub fn of_sample(
        backend: &'static str,
        sequence: u64,
        inventory: Arc<Inventory>,
        sample: NodeSample,
    ) -> Snapshot {
        Snapshot {
            sequence,
            inventory: Some(inventory),
            sample: Some(sample),
            state: BackendState {
                backend,
                healthy: true,
                last_error: None,
                initialisations: 1,
                errors_total: 0,
            },
            ..Snapshot::empty()
        }
    }

    /// The snapshot before any sample (sequence 0): no inventory, no sample, backend not up.
    pub fn empty() -> Snapshot {
        Snapshot {
            sequence: 0,
            inventory: None,
            sample: None,
            state: BackendState {
                backend: "none",
                healthy: false,
                last_error: None,
                initialisations: 0,
                errors_total: 0,
            },
            duration: Duration::ZERO,
            missed_ticks: 0,
            totals: Arc::default(),
            attribution: Arc::default(),
            idle: Arc::default(),
            holders: Arc::default(),
            allocation: Arc::default(),
        }
    }
}

/// The allocations of several sources as one: a device's holders are the union of its holders
/// in each (sorted, without duplicates); known only when every source is (a device one source
/// cannot see is never called free). No source: unknown.
pub fn combine(sources: &[Allocation]) -> Allocation {
    if sources.is_empty() || sources.iter().any(|a| !a.known) {
        return Allocation::unknown();
    }
    let mut devices: HashMap<String, Vec<tessera_core::model::Holder>> = HashMap::new();
    for source in sources {
        for (device, holders) in &source.devices {
            devices
                .entry(device.clone())
                .or_default()
                .extend(holders.iter().cloned());
        }
    }
    for holders in devices.values_mut() {
        holders.sort();
        holders.dedup();
    }
    Allocation {
        known: true,
        devices,
    }
}

/// Whether a sample's MIG devices (GPU and compute instance ids) differ from the inventory's, on
/// any GPU that was read fully (not lost, no failed MIG reads).
pub fn mig_devices_changed(inventory: &Inventory, sample: &NodeSample) -> bool {
    sample.gpus.iter().any(|g| {
        if matches!(g.status, GpuStatus::Lost | GpuStatus::Error { .. })
            || g.errors.iter().any(|e| e.field == "mig_memory")
        {
            return false;
        }
        let Some(info) = inventory.gpus.iter().find(|i| i.index == g.index) else {
            return true;
        };
        let have: Vec<(u32, u32)> = g
            .mig
            .iter()
            .map(|m| (m.gpu_instance_id, m.compute_instance_id))
            .collect();
        let known: Vec<(u32, u32)> = info
            .mig_instances
            .iter()
            .map(|m| (m.gpu_instance_id, m.compute_instance_id))
            .collect();
        have != known
    })
}

/// A GPU as a counter key: index and UUID.
pub type GpuKey = (u32, String);

/// Counters accumulated over every sample since the exporter started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// XID events by GPU and XID code.
    pub xid: BTreeMap<(GpuKey, u64), u64>,
    /// Failed reads by GPU, field and error kind.
    pub field_errors: BTreeMap<(GpuKey, String, String), u64>,
}

impl Totals {
    /// Add what one sample reports. Returns whether anything changed.
    pub fn add(&mut self, sample: &NodeSample) -> bool {
        let mut changed = false;
        for g in &sample.gpus {
            for x in &g.xid_events {
                *self
                    .xid
                    .entry(((g.index, g.uuid.clone()), x.xid))
                    .or_default() += 1;
                changed = true;
            }
            for e in &g.errors {
                *self
                    .field_errors
                    .entry(((g.index, g.uuid.clone()), e.field.clone(), e.kind.clone()))
                    .or_default() += 1;
                changed = true;
            }
        }
        changed
    }
}

#[derive(Default)]
struct Slot {
    latest: Option<Arc<Snapshot>>,
}

/// Read side of the sampler: cheap to clone, safe to share between threads.
#[derive(Clone, Default)]
pub struct SnapshotHandle {
    inner: Arc<(Mutex<Slot>, Condvar)>,
}

impl SnapshotHandle {
    /// The latest snapshot, if any has been published.
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.lock().latest.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        // A poisoned lock only means a reader panicked; the data is still a valid Arc.
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until a snapshot with `sequence > after` is published, or `timeout` passes.
    pub fn wait_newer(&self, after: u64, timeout: Duration) -> Option<Arc<Snapshot>> {
        let deadline = Instant::now() + timeout;
        let mut slot = self.lock();
        loop {
            if let Some(s) = &slot.latest
                && s.sequence > after
            {
                return Some(s.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            slot = self
                .inner
                .1
                .wait_timeout(slot, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn publish(&self, snapshot: Arc<Snapshot>) {
        self.lock().latest = Some(snapshot);
        self.inner.1.notify_all();
    }
}

/// A running sampler thread. Dropping it stops the thread.
pub struct Sampler {
    handle: SnapshotHandle,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Start sampling on a new thread.
    pub fn spawn(factory: BackendFactory, config: SamplerConfig) -> std::io::Result<Sampler> {
        Sampler::spawn_with(factory, config, SamplerHooks::default())
    }

    /// Start sampling on a new thread, with hooks.
    pub fn spawn_with(
        factory: BackendFactory,
        config: SamplerConfig,
        hooks: SamplerHooks,
    ) -> std::io::Result<Sampler> {
        let handle = SnapshotHandle::default();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let publish = handle.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-sampler".into())
            .spawn(move || run(factory, config, hooks, publish, stop_rx))?;
        Ok(Sampler {
            handle,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The read side.
    pub fn handle(&self) -> SnapshotHandle {
        self.handle.clone()
    }

    /// Stop the thread and wait for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Offset of tick `n` from the start, without the `u32` overflow of `Duration * u32`.
fn tick_time(interval: Duration, n: u64) -> Duration {
    let nanos = interval.as_nanos().saturating_mul(n as u128);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// The backend side of the sampler thread: the backend (created, and re-created after a
/// node-level error with exponential backoff), its inventory, state, slow-read schedule and
/// error totals.
struct BackendSlot {
    factory: BackendFactory,
    config: SamplerConfig,
    backend: Option<Box<dyn GpuBackend>>,
    inventory: Option<Arc<Inventory>>,
    /// When the inventory was last read.
    inventory_at: Instant,
    state: BackendState,
    backoff: Duration,
    /// When the next creation may be tried.
    retry_at: Instant,
    slow: Option<SlowSchedule>,
    totals: Arc<Totals>,
}

impl BackendSlot {
    /// Create the backend (and read its inventory); on failure, note the error and put the next
    /// try off by the backoff, doubled up to its maximum.
    fn connect(&mut self) {
        let config = &self.config;
        match (self.factory)().and_then(|mut b| b.inventory().map(|inv| (b, inv))) {
            Ok((b, inv)) => {
                log::info!("{} backend ready: {} GPU(s)", b.name(), inv.gpus.len());
                self.state.backend = b.name();
                self.state.initialisations += 1;
                self.inventory = Some(Arc::new(inv));
                self.inventory_at = Instant::now();
                self.backend = Some(b);
                self.slow = config
                    .slow_interval
                    .map(|i| SlowSchedule::new(i.as_millis().max(1) as i64));
                self.backoff = config.backoff_initial;
            }
            Err(e) => {
                log::warn!("backend unavailable: {e}; retrying in {:?}", self.backoff);
                self.state.healthy = false;
                self.state.last_error = Some(e.to_string());
                self.state.errors_total += 1;
                self.retry_at = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(config.backoff_max);
            }
        }
    }

    /// One sample of the backend, if there is one (the slow counters read when due, or when
    /// `closing`): counts its XID events and field errors, re-reads the inventory when due; a
    /// node-level error drops the backend.
    fn sample(&mut self, closing: bool) -> Option<NodeSample> {
        let b = self.backend.as_mut()?;
        let reads = match self.slow.as_mut() {
            Some(schedule) if !closing => schedule.due(b.stamp()),
            _ => SlowReads::Read,
        };
        match b.sample_with(reads) {
            Ok(s) => {
                self.state.healthy = true;
                self.state.last_error = None;
                if s.gpus
                    .iter()
                    .any(|g| !g.xid_events.is_empty() || !g.errors.is_empty())
                {
                    Arc::make_mut(&mut self.totals).add(&s);
                }
                self.refresh_inventory(&s);
                Some(s)
            }
            Err(e) => {
                self.state.healthy = false;
                self.state.last_error = Some(e.to_string());
                self.state.errors_total += 1;
                if e.is_driver_level() {
                    log::warn!(
                        "node-level error: {e}; re-initialising in {:?}",
                        self.backoff
                    );
                    self.backend = None;
                    self.retry_at = Instant::now() + self.backoff;
                    self.backoff = (self.backoff * 2).min(self.config.backoff_max);
                } else {
                    log::warn!("sample failed: {e}");
                }
                None
            }
        }
    }

    /// Re-read the inventory every [`SamplerConfig::inventory_refresh`], or after
    /// [`INVENTORY_RECHECK`] when the sample's MIG devices differ from it; keep it if changed.
    fn refresh_inventory(&mut self, s: &NodeSample) {
        let since = self.inventory_at.elapsed();
        if since >= self.config.inventory_refresh
            || (since >= INVENTORY_RECHECK
                && self
                    .inventory
                    .as_deref()
                    .is_some_and(|inv| mig_devices_changed(inv, s)))
        {
            self.inventory_at = Instant::now();
            let Some(b) = self.backend.as_mut() else {
                return;
            };
            match b.inventory() {
                Ok(inv) if self.inventory.as_deref() != Some(&inv) => {
                    log::info!("GPU inventory changed (MIG mode or instances); using the new one");
                    self.inventory = Some(Arc::new(inv));
                }
                Ok(_) => {}
                Err(e) => log::warn!("re-reading the GPU inventory failed: {e}"),
            }
        }
    }
}

/// Who holds and uses the devices, added to each sample's snapshot: the hooks, the kubelet's
/// device names, the idle and held-unused spans.
struct Usage {
    hooks: SamplerHooks,
    ids: crate::kubelet::Mapper,
    idle: IdleTracker,
    unused: UnusedTracker,
}

impl Usage {
    /// The snapshot of one tick: the sample (if any) with its processes' attribution, the
    /// kubelet's holders keyed by UUID, the combined allocation and the idle spans.
    fn snapshot(
        &mut self,
        sequence: u64,
        sample: Option<NodeSample>,
        slot: &BackendSlot,
        began: Instant,
        missed: u64,
    ) -> Arc<Snapshot> {
        let hooks = &mut self.hooks;
        let inventory = &slot.inventory;
        let attribution = match (&sample, hooks.attributor.as_mut()) {
            (Some(s), Some(attribute)) => Arc::new(attribute(s)),
            _ => Arc::default(),
        };
        let holders = hooks
            .pod_resources
            .as_ref()
            .map(PodResourcesHandle::latest)
            .unwrap_or_default();
        // Devices the kubelet names otherwise than by UUID (DRA, indices) keyed by UUID.
        let holders = self.ids.map(holders, inventory.as_ref());
        if let (Some(s), Some(inv)) = (&sample, inventory)
            && hooks.pod_resources.is_some()
            && !self.ids.said_unnamed()
            && let Some(m) = unnamed_pod_gpu(&mut self.ids, &holders, s, inv, &attribution)
        {
            log::warn!("{m}");
        }
        let mut sources = Vec::new();
        if hooks.pod_resources.is_some() {
            sources.push(holders.allocation());
        }
        if let Some(scan) = hooks.slurm.as_mut() {
            sources.push(match (&sample, inventory) {
                (Some(_), Some(inv)) => scan(inv),
                _ => Allocation::unknown(),
            });
        }
        let allocation = Arc::new(combine(&sources));
        let idle_times = match &sample {
            Some(s) => Arc::new(IdleTimes {
                held_unused: self.unused.update(s, &holders),
                ..self.idle.update(s)
            }),
            None => Arc::default(),
        };
        Arc::new(Snapshot {
            sequence,
            inventory: inventory.clone(),
            sample,
            state: slot.state.clone(),
            duration: began.elapsed(),
            missed_ticks: missed,
            totals: slot.totals.clone(),
            attribution,
            idle: idle_times,
            holders,
            allocation,
        })
    }
}

fn run(
    factory: BackendFactory,
    config: SamplerConfig,
    hooks: SamplerHooks,
    publish: SnapshotHandle,
    stop: mpsc::Receiver<()>,
) {
    let mut usage = Usage {
        hooks,
        ids: crate::kubelet::Mapper::default(),
        idle: IdleTracker::default(),
        unused: UnusedTracker::default(),
    };
    let mut slot = BackendSlot {
        factory,
        backoff: config.backoff_initial,
        retry_at: Instant::now(),
        config: config.clone(),
        backend: None,
        inventory: None,
        inventory_at: Instant::now(),
        state: BackendState {
            backend: "none",
            healthy: false,
            last_error: None,
            initialisations: 0,
            errors_total: 0,
        },
        slow: None,
        totals: Arc::new(Totals::default()),
    };
    let mut sequence = 0u64;
    let mut missed = 0u64;
    let start = Instant::now();
    let interval = config.interval.max(Duration::from_millis(1));
    let mut tick = 0u64;
    // On stop, one last sample reads the slow counters, so the history's interval in progress
    // (written at shutdown) has its energy and per-process readings, not the carried ones.
    let mut closing = false;
    loop {
        let began = Instant::now();
        if slot.backend.is_none() && began >= slot.retry_at {
            slot.connect();
        }
        let sample = slot.sample(closing);
        sequence += 1;
        let snapshot = usage.snapshot(sequence, sample, &slot, began, missed);
        if let Some(hook) = usage.hooks.on_sample.as_mut() {
            hook(&snapshot);
        }
        publish.publish(snapshot);
        if closing {
            return;
        }
        // Next fixed-rate tick; skip (and count) ticks already past.
        tick += 1;
        let elapsed = start.elapsed();
        let due = tick_time(interval, tick);
        if elapsed > due {
            let behind = ((elapsed - due).as_nanos() / interval.as_nanos()) as u64 + 1;
            missed += behind;
            tick += behind;
        }
        let wait = tick_time(interval, tick).saturating_sub(start.elapsed());
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            _ if slot.backend.is_some() && slot.slow.is_some() => closing = true,
            _ => return,
        }
    }
}

/// The first GPU a pod's process runs on that the kubelet names no holder of, said once
/// ([`crate::kubelet::Mapper::check_held`]).
fn unnamed_pod_gpu(
    ids: &mut crate::kubelet::Mapper,
    holders: &DeviceHolders,
    sample: &tessera_core::model::NodeSample,
    inv: &Inventory,
    attribution: &HashMap<u32, Arc<tessera_core::model::Attribution>>,
) -> Option<String> {
    for g in &sample.gpus {
        let Some(pod) = g
            .processes
            .iter()
            .find_map(|p| attribution.get(&p.pid)?.pod_uid.clone())
        else {
            continue;
        };
        let parts: Vec<&str> = inv
            .gpus
            .iter()
            .filter(|i| i.uuid == g.uuid)
            .flat_map(|i| i.mig_instances.iter().map(|m| m.uuid.as_str()))
            .collect();
        if let Some(m) = ids.check_held(holders, &g.uuid, &parts, &pod) {
            return Some(m);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tessera_core::model::NodeSample;

    /// A backend that fails at node level on chosen calls.
    struct Flaky {
        calls: Arc<AtomicU32>,
        fail_on: Vec<u32>,
    }

    impl GpuBackend for Flaky {
        fn name(&self) -> &'static str {
            "flaky"
        }
        fn inventory(&mut self) -> Result<Inventory, DeviceError> {
            Ok(Inventory {
                node: "n".into(),
                driver_version: None,
                cuda_version: None,
                gpus: vec![],
            })
        }
        fn sample_with(&mut self, _: SlowReads) -> Result<NodeSample, DeviceError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if self.fail_on.contains(&n) {
                Err(DeviceError::Nvml {
                    call: "nvmlDeviceGetCount_v2".into(),
                    kind: "unknown".into(),
                })
            } else {
                Ok(NodeSample {
                    timestamp_ms: n as i64,
                    gpus: vec![],
                })
            }
        }
    }

    /// One GPU whose MIG layout the test switches between one and two instances.
    struct Reconfigured {
        two: Arc<std::sync::atomic::AtomicBool>,
        inventories: Arc<AtomicU32>,
    }

    impl Reconfigured {
        fn instances(&self) -> Vec<tessera_core::model::MigInstanceInfo> {
            let n = if self.two.load(Ordering::SeqCst) {
                2
            } else {
                1
            };
            (0..n)
                .map(|i| tessera_core::model::MigInstanceInfo {
                    gpu_instance_id: 1 + i,
                    compute_instance_id: 0,
                    profile_id: 9,
                    profile_name: "3g.40gb".into(),
                    placement: tessera_core::model::Placement {
                        start: 4 * i,
                        size: 4,
                    },
                    uuid: format!("MIG-{i}"),
                    memory_total_bytes: None,
                })
                .collect()
        }
    }

    impl GpuBackend for Reconfigured {
        fn name(&self) -> &'static str {
            "reconfigured"
        }
        fn inventory(&mut self) -> Result<Inventory, DeviceError> {
            self.inventories.fetch_add(1, Ordering::SeqCst);
            Ok(Inventory {
                node: "n".into(),
                driver_version: None,
                cuda_version: None,
                gpus: vec![tessera_core::model::GpuInfo {
                    index: 0,
                    minor_number: None,
                    uuid: "GPU-0".into(),
                    name: "NVIDIA H100 80GB HBM3".into(),
                    pci_bus_id: String::new(),
                    memory_total_bytes: None,
                    power_limit_watts: None,
                    mig_mode: Some(tessera_core::model::MigMode {
                        current: true,
                        pending: true,
                    }),
                    mig_instances: self.instances(),
                }],
            })
        }
        fn sample_with(&mut self, _: SlowReads) -> Result<NodeSample, DeviceError> {
            let mut g = tessera_core::model::GpuSample::empty(0, "GPU-0", GpuStatus::Ok);
            g.mig = self
                .instances()
                .iter()
                .map(|m| tessera_core::model::MigSample {
                    gpu_instance_id: m.gpu_instance_id,
                    compute_instance_id: 0,
                    uuid: m.uuid.clone(),
                    memory_used_bytes: None,
                    memory_total_bytes: None,
                    sm_active_ratio: None,
                    profiling: Default::default(),
                })
                .collect();
            Ok(NodeSample {
                timestamp_ms: 0,
                gpus: vec![g],
            })
        }
    }

    #[test]
    fn a_mig_layout_changed_at_run_time_reaches_the_inventory() {
        let two = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let inventories = Arc::new(AtomicU32::new(0));
        let (t, n) = (two.clone(), inventories.clone());
        let sampler = Sampler::spawn(
            Box::new(move || {
                Ok(Box::new(Reconfigured {
                    two: t.clone(),
                    inventories: n.clone(),
                }) as Box<dyn GpuBackend>)
            }),
            SamplerConfig {
                inventory_refresh: Duration::from_millis(30),
                ..fast()
            },
        )
        .unwrap();
        let h = sampler.handle();
        let first = h.wait_newer(0, Duration::from_secs(5)).unwrap();
        assert_eq!(
            first.inventory.as_ref().unwrap().gpus[0]
                .mig_instances
                .len(),
            1
        );
        two.store(true, Ordering::SeqCst);
        let mut seq = first.sequence;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let s = h.wait_newer(seq, Duration::from_secs(5)).unwrap();
            seq = s.sequence;
            if s.inventory.as_ref().unwrap().gpus[0].mig_instances.len() == 2 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the new layout never reached the inventory"
            );
        }
        sampler.stop();
        assert!(inventories.load(Ordering::SeqCst) >= 2);
    }

    #[test]
    fn changed_mig_devices_are_noticed_unless_the_read_failed() {
        let mut b = Reconfigured {
            two: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            inventories: Arc::default(),
        };
        let inv = b.inventory().unwrap();
        assert!(!mig_devices_changed(&inv, &b.sample().unwrap()));
        b.two.store(true, Ordering::SeqCst);
        let mut s = b.sample().unwrap();
        assert!(mig_devices_changed(&inv, &s));
        s.gpus[0].errors.push(tessera_core::model::FieldError {
            field: "mig_memory".into(),
            kind: "unknown".into(),
        });
        assert!(!mig_devices_changed(&inv, &s));
        s.gpus[0].errors.clear();
        s.gpus[0].status = GpuStatus::Lost;
        assert!(!mig_devices_changed(&inv, &s));
    }

    #[test]
    fn allocations_combine_only_when_every_source_is_known() {
        use tessera_core::model::Holder;
        let pod = Holder {
            namespace: Some("ml".into()),
            pod: Some("train".into()),
            slurm_job_id: None,
        };
        let job = |id: &str| Holder {
            slurm_job_id: Some(id.into()),
            ..Holder::default()
        };
        let known = |devices: &[(&str, Vec<Holder>)]| Allocation {
            known: true,
            devices: devices
                .iter()
                .map(|(d, h)| (d.to_string(), h.clone()))
                .collect(),
        };
        let kubelet = known(&[("GPU-0", vec![pod.clone()])]);
        let slurm = known(&[
            ("GPU-0", vec![job("9")]),
            ("GPU-1", vec![job("7"), job("9")]),
        ]);
        let both = combine(&[kubelet.clone(), slurm.clone()]);
        assert!(both.known);
        // Holders sort with the pod's `None` job first.
        assert_eq!(both.holders("GPU-0"), Some(&[job("9"), pod.clone()][..]));
        assert_eq!(both.holders("GPU-1"), Some(&[job("7"), job("9")][..]));
        assert_eq!(both.holders("GPU-2"), Some(&[][..]));
        assert_eq!(combine(&[slurm.clone(), slurm.clone()]), slurm);
        assert_eq!(combine(std::slice::from_ref(&kubelet)), kubelet);
        // One source unknown: a device only it could see is never called free.
        assert_eq!(
            combine(&[kubelet, Allocation::unknown()]),
            Allocation::unknown()
        );
        assert_eq!(combine(&[]), Allocation::unknown());
    }

    #[test]
    fn tick_offsets_do_not_wrap() {
        let ms = Duration::from_millis(1);
        assert_eq!(tick_time(ms, 5_000_000_000), Duration::from_secs(5_000_000));
    }

    fn fast() -> SamplerConfig {
        SamplerConfig {
            interval: Duration::from_millis(5),
            backoff_initial: Duration::from_millis(5),
            backoff_max: Duration::from_millis(20),
            inventory_refresh: Duration::from_secs(60),
            slow_interval: None,
        }
    }

    #[test]
    fn driver_error_reinitialises_the_backend() {
        let calls = Arc::new(AtomicU32::new(0));
        let created = Arc::new(AtomicU32::new(0));
        let (c, k) = (calls.clone(), created.clone());
        let sampler = Sampler::spawn(
            Box::new(move || {
                k.fetch_add(1, Ordering::SeqCst);
                Ok(Box::new(Flaky {
                    calls: c.clone(),
                    fail_on: vec![2, 3],
                }) as Box<dyn GpuBackend>)
            }),
            fast(),
        )
        .unwrap();
        let h = sampler.handle();
        let mut saw_error = false;
        let mut seq = 0;
        let last = loop {
            let s = h
                .wait_newer(seq, Duration::from_secs(5))
                .expect("snapshots keep coming");
            seq = s.sequence;
            saw_error |= s.state.last_error.is_some() && s.sample.is_none();
            if s.state.initialisations >= 3 && s.sample.is_some() {
                break s;
            }
        };
        sampler.stop();
        assert!(saw_error, "the failure was published");
        assert!(last.state.healthy);
        assert_eq!(last.state.errors_total, 2);
        assert_eq!(
            created.load(Ordering::SeqCst),
            3,
            "re-created once per driver error"
        );
    }

    #[test]
    fn a_backend_that_cannot_start_is_retried_with_backoff() {
        let attempts = Arc::new(AtomicU32::new(0));
        let a = attempts.clone();
        let sampler = Sampler::spawn(
            Box::new(move || {
                let n = a.fetch_add(1, Ordering::SeqCst);
                if n < 2 {
                    Err(DeviceError::DriverNotLoaded {
                        detail: "test".into(),
                    })
                } else {
                    Ok(Box::new(Flaky {
                        calls: Arc::new(AtomicU32::new(0)),
                        fail_on: vec![],
                    }) as Box<dyn GpuBackend>)
                }
            }),
            fast(),
        )
        .unwrap();
        let h = sampler.handle();
        let first = h.wait_newer(0, Duration::from_secs(5)).unwrap();
        assert!(
            first.sample.is_none()
                && first
                    .state
                    .last_error
                    .as_deref()
                    .unwrap()
                    .contains("not loaded")
        );
        let mut seq = first.sequence;
        loop {
            let s = h.wait_newer(seq, Duration::from_secs(5)).unwrap();
            seq = s.sequence;
            if s.sample.is_some() {
                assert_eq!(s.state.backend, "flaky");
                break;
            }
        }
        sampler.stop();
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
    }
}
