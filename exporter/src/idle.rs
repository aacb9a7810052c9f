//! How long each GPU process, and each GPU, has continuously done nothing: the state behind
//! `tessera_process_idle_seconds` and `tessera_gpu_idle_seconds` (and so the idle-loaded-model
//! alert in `rules/`).
//!
//! Prometheus stamps samples with its own wall clock, so a `for: 1h` alert cannot be tested on a
//! simulator running faster than real time, and is lost whenever Prometheus restarts. Instead the
//! sampler keeps the idle spans on *its* clock — the samples' timestamps, which are the virtual
//! clock on the simulator — and exports their length; the alert compares that with an hour.
//!
//! Activity of a process, from the most to the least precise source available in the sample:
//! 1. its own SM utilisation (NVML process utilisation);
//! 2. outside MIG, when other processes on the same GPU have a utilisation value and the read did
//!    not fail: none, because NVML reports only processes that ran in the window;
//! 3. the SM activity of its MIG instance (GPM);
//! 4. the GPU's SM activity, else its busy ratio — a GPU that did nothing means every process on
//!    it did nothing; a GPU that worked means its processes count as active (cannot tell which).
//!
//! With none of these the activity is unknown: no series, and the span neither starts nor breaks.
//! A value below [`IDLE_BELOW`] is idle: NVML's integer percentages read exactly 0 then.
//!
//! The idle time is `sample time − the last sample in which it was active` (or the first sample
//! it was seen in, if it has not been active since): 0 while active. A process that leaves the
//! sample (or a GPU that is lost) forgets its span. The exporter's restart forgets every span, so
//! the alert can be late after a restart, never early.
//!
//! [`UnusedTracker`] keeps a second kind of span, behind `tessera_gpu_pod_unused_seconds`: how
//! long a container has held a GPU or MIG device (the kubelet's pod-resources map) while nothing
//! used it — no compute process on the device and no activity where activity is measured. A
//! device whose process list could not be read (a failed read, a lost GPU) is unknown: no value,
//! and its spans neither start nor break. A holder that the map no longer lists (it left, or the
//! kubelet stopped answering) is forgotten, so the value can be late, never early.
//!
//! Pure bookkeeping on the sampler thread: no I/O, no NVML.

use std::collections::BTreeMap;

use tessera_core::model::{GpuSample, GpuStatus, NodeSample, ProcessSample};

use crate::kubelet::{DeviceHolders, Holder};

/// Activity ratios below this are idle.
pub const IDLE_BELOW: f64 = 0.001;

/// Idle seconds of one sample: processes by (GPU UUID, pid), GPUs by UUID, and held devices
/// unused by (device UUID, holder) ([`UnusedTracker`]). Absent = unknown.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IdleTimes {
    pub processes: BTreeMap<(String, u32), f64>,
    pub gpus: BTreeMap<String, f64>,
    pub held_unused: BTreeMap<(String, Holder), f64>,
}

/// Where an entity stands: active at `since` (its last active sample), or idle since `since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    since: i64,
    idle: bool,
}

/// The spans kept across samples.
#[derive(Debug, Clone, Default)]
pub struct IdleTracker {
    /// By (GPU UUID, pid).
    processes: BTreeMap<(String, u32), Span>,
    /// By GPU UUID.
    gpus: BTreeMap<String, Span>,
}

fn active(ratio: f64) -> bool {
    ratio >= IDLE_BELOW
}

/// Whether the GPU did anything: SM activity where GPM exists, else busy time.
pub fn gpu_activity(g: &GpuSample) -> Option<bool> {
    g.sm_active_ratio.or(g.busy_ratio).map(active)
}

/// Whether the process did anything in the sample, or `None` when the sample cannot tell.
pub fn process_activity(g: &GpuSample, p: &ProcessSample) -> Option<bool> {
    if let Some(sm) = p.sm_ratio {
        return Some(active(sm));
    }
    let utilisation_failed = g.errors.iter().any(|e| e.field == "process_utilization");
    if p.gpu_instance_id.is_none()
        && !utilisation_failed
        && g.processes.iter().any(|o| o.sm_ratio.is_some())
    {
        return Some(false);
    }
    if let Some(gi) = p.gpu_instance_id
        && let Some(sm) = g
            .mig
            .iter()
            .find(|m| {
                m.gpu_instance_id == gi
                    && p.compute_instance_id
                        .is_none_or(|ci| ci == m.compute_instance_id)
            })
            .and_then(|m| m.sm_active_ratio)
    {
        return Some(active(sm));
    }
    gpu_activity(g)
}

/// Advance `span` by one sample at `now` with known activity; the idle seconds it shows.
fn step(span: Option<Span>, is_active: bool, now: i64) -> (Span, f64) {
    let span = match (span, is_active) {
        (_, true) => Span {
            since: now,
            idle: false,
        },
        // Idle since the last sample in which it was active.
        (Some(Span { since, idle: false }), false) => Span { since, idle: true },
        (Some(s), false) => s,
        // First seen idle: idle from now on, as far as we know.
        (None, false) => Span {
            since: now,
            idle: true,
        },
    };
    let secs = if span.idle {
        (now - span.since).max(0) as f64 / 1000.0
    } else {
        0.0
    };
    (span, secs)
}

impl IdleTracker {
    /// Account for one sample and return the idle times it shows. Entities that are not in the
    /// sample (and GPUs that are lost or unreadable) are forgotten.
    pub fn update(&mut self, sample: &NodeSample) -> IdleTimes {
        let now = sample.timestamp_ms;
        let mut out = IdleTimes::default();
        let mut procs = BTreeMap::new();
        let mut gpus = BTreeMap::new();
        for g in &sample.gpus {
            if matches!(g.status, GpuStatus::Lost | GpuStatus::Error { .. }) {
                continue;
            }
            let prev = self.gpus.remove(&g.uuid);
            let span = match gpu_activity(g) {
                Some(a) => {
                    let (span, secs) = step(prev, a, now);
                    out.gpus.insert(g.uuid.clone(), secs);
                    Some(span)
                }
                None => prev,
            };
            if let Some(span) = span {
                gpus.insert(g.uuid.clone(), span);
            }
            for p in &g.processes {
                let key = (g.uuid.clone(), p.pid);
                let prev = self.processes.remove(&key);
                let span = match process_activity(g, p) {
                    Some(a) => {
                        let (span, secs) = step(prev, a, now);
                        out.processes.insert(key.clone(), secs);
                        Some(span)
                    }
                    None => prev,
                };
                if let Some(span) = span {
                    procs.insert(key, span);
                }
            }
        }
        self.processes = procs;
        self.gpus = gpus;
        out
    }
}

/// Whether anything used a device in the sample: a compute process on it, or activity where
/// it is measured (the GPU's; a MIG instance's SM activity, GPM only). `None` when its process
/// list is unknown.
fn device_used(g: &GpuSample, mig: Option<&tessera_core::model::MigSample>) -> Option<bool> {
    if matches!(g.status, GpuStatus::Lost | GpuStatus::Error { .. })
        || g.errors.iter().any(|e| e.field == "processes")
    {
        return None;
    }
    Some(match mig {
        None => !g.processes.is_empty() || gpu_activity(g) == Some(true),
        Some(m) => {
            g.processes.iter().any(|p| {
                p.gpu_instance_id == Some(m.gpu_instance_id)
                    && p.compute_instance_id
                        .is_none_or(|ci| ci == m.compute_instance_id)
            }) || m.sm_active_ratio.is_some_and(active)
        }
    })
}

/// How long each container has held each device while nothing used it: the spans behind
/// `tessera_gpu_pod_unused_seconds` (module docs).
#[derive(Debug, Clone, Default)]
pub struct UnusedTracker {
    /// By (device UUID, holder).
    spans: BTreeMap<(String, Holder), Span>,
}

impl UnusedTracker {
    /// Account for one sample and the holders at its instant; the unused seconds of every held
    /// device whose use is known. Holders no longer listed are forgotten.
    pub fn update(
        &mut self,
        sample: &NodeSample,
        holders: &DeviceHolders,
    ) -> BTreeMap<(String, Holder), f64> {
        let now = sample.timestamp_ms;
        let mut out = BTreeMap::new();
        let mut spans = BTreeMap::new();
        let devices = sample.gpus.iter().flat_map(|g| {
            std::iter::once((g, None, g.uuid.as_str()))
                .chain(g.mig.iter().map(move |m| (g, Some(m), m.uuid.as_str())))
        });
        for (g, mig, uuid) in devices {
            let used = device_used(g, mig);
            for h in holders.holders(uuid) {
                let key = (uuid.to_string(), h.clone());
                let prev = self.spans.remove(&key);
                let span = match used {
                    // Unused is idle; used is active.
                    Some(used) => {
                        let (span, secs) = step(prev, used, now);
                        out.insert(key.clone(), secs);
                        Some(span)
                    }
                    None => prev,
                };
                if let Some(span) = span {
                    spans.insert(key, span);
                }
            }
        }
        self.spans = spans;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::model::{FieldError, MigSample};

    fn proc_(pid: u32, sm: Option<f64>, gi: Option<u32>) -> ProcessSample {
        ProcessSample {
            pid,
            name: None,
            used_memory_bytes: Some(2 << 30),
            sm_ratio: sm,
            sm_readings: sm.into_iter().collect(),
            gpu_instance_id: gi,
            compute_instance_id: gi.map(|_| 0),
        }
    }

    fn gpu(uuid: &str, busy: Option<f64>, procs: Vec<ProcessSample>) -> GpuSample {
        let mut g = GpuSample::empty(0, uuid, GpuStatus::Ok);
        g.busy_ratio = busy;
        g.processes = procs;
        g
    }

    fn at(ms: i64, gpus: Vec<GpuSample>) -> NodeSample {
        NodeSample {
            timestamp_ms: ms,
            gpus,
        }
    }

    #[test]
    fn idle_time_grows_resets_and_is_forgotten() {
        let mut t = IdleTracker::default();
        let busy = |ms, sm1: f64| {
            at(
                ms,
                vec![gpu(
                    "G",
                    Some(0.5),
                    vec![proc_(1, Some(sm1), None), proc_(2, Some(0.3), None)],
                )],
            )
        };
        // Process 1 is first seen idle: 0, then counts from its first sample.
        let r = t.update(&busy(1_000, 0.0));
        assert_eq!(r.processes[&("G".into(), 1)], 0.0);
        assert_eq!(r.processes[&("G".into(), 2)], 0.0);
        assert_eq!(r.gpus["G"], 0.0, "the GPU works");
        let r = t.update(&busy(3_601_000, 0.0));
        assert_eq!(r.processes[&("G".into(), 1)], 3600.0);
        // Active again: 0; idle afterwards counts from that last active sample.
        assert_eq!(
            t.update(&busy(3_602_000, 0.2)).processes[&("G".into(), 1)],
            0.0
        );
        assert_eq!(
            t.update(&busy(3_612_000, 0.0)).processes[&("G".into(), 1)],
            10.0
        );
        // Gone for one sample: forgotten.
        t.update(&at(
            3_613_000,
            vec![gpu("G", Some(0.5), vec![proc_(2, Some(0.3), None)])],
        ));
        assert_eq!(
            t.update(&busy(3_614_000, 0.0)).processes[&("G".into(), 1)],
            0.0
        );
    }

    #[test]
    fn activity_falls_back_from_process_to_instance_to_gpu() {
        // NVML lists only processes that ran: a process without a value beside one with a
        // value did nothing.
        let g = gpu(
            "G",
            Some(0.4),
            vec![proc_(1, None, None), proc_(2, Some(0.4), None)],
        );
        assert_eq!(process_activity(&g, &g.processes[0]), Some(false));
        // ... unless the utilisation read failed: then the GPU decides (it worked).
        let mut failed = g.clone();
        failed.errors.push(FieldError {
            field: "process_utilization".into(),
            kind: "unknown".into(),
        });
        failed.processes[1].sm_ratio = None;
        assert_eq!(process_activity(&failed, &failed.processes[0]), Some(true));
        // MIG: the instance's GPM activity.
        let mut mig = gpu(
            "G",
            None,
            vec![proc_(1, None, Some(3)), proc_(2, None, Some(5))],
        );
        for (gi, sm) in [(3, 0.0), (5, 0.2)] {
            mig.mig.push(MigSample {
                gpu_instance_id: gi,
                compute_instance_id: 0,
                uuid: String::new(),
                memory_used_bytes: None,
                memory_total_bytes: None,
                sm_active_ratio: Some(sm),
                profiling: Default::default(),
            });
        }
        assert_eq!(process_activity(&mig, &mig.processes[0]), Some(false));
        assert_eq!(process_activity(&mig, &mig.processes[1]), Some(true));
        // MIG without GPM (A100) and no GPU values: unknown.
        mig.mig.iter_mut().for_each(|m| m.sm_active_ratio = None);
        assert_eq!(process_activity(&mig, &mig.processes[0]), None);
        // An idle GPU means its processes are idle.
        let idle = gpu("G", Some(0.0), vec![proc_(1, None, None)]);
        assert_eq!(process_activity(&idle, &idle.processes[0]), Some(false));
        // SM activity wins over busy time.
        let mut sm = gpu("G", Some(0.3), vec![]);
        sm.sm_active_ratio = Some(0.0);
        assert_eq!(gpu_activity(&sm), Some(false));
    }

    #[test]
    fn unknown_samples_neither_start_nor_break_a_span() {
        let mut t = IdleTracker::default();
        let idle = |ms| at(ms, vec![gpu("G", Some(0.0), vec![proc_(1, None, None)])]);
        let unknown = |ms| at(ms, vec![gpu("G", None, vec![proc_(1, None, None)])]);
        assert!(t.update(&unknown(0)).processes.is_empty());
        t.update(&idle(1_000));
        let r = t.update(&unknown(2_000));
        assert!(
            r.processes.is_empty() && r.gpus.is_empty(),
            "no series when unknown"
        );
        assert_eq!(t.update(&idle(5_000)).processes[&("G".into(), 1)], 4.0);
        assert_eq!(t.update(&idle(5_000)).gpus["G"], 4.0);
        // A lost GPU forgets its span.
        let mut lost = gpu("G", None, vec![]);
        lost.status = GpuStatus::Lost;
        t.update(&at(6_000, vec![lost]));
        assert_eq!(t.update(&idle(7_000)).gpus["G"], 0.0);
    }

    /// The kubelet's map: `(pod, device UUIDs)` in namespace `n`, container `c`.
    fn held_by(pods: &[(&str, &[&str])]) -> DeviceHolders {
        use crate::kubelet::proto::{
            ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
        };
        DeviceHolders::from_response(&ListPodResourcesResponse {
            pod_resources: pods
                .iter()
                .map(|(pod, ids)| PodResources {
                    name: pod.to_string(),
                    namespace: "n".into(),
                    containers: vec![ContainerResources {
                        name: "c".into(),
                        devices: vec![ContainerDevices {
                            resource_name: "nvidia.com/gpu".into(),
                            device_ids: ids.iter().map(|s| s.to_string()).collect(),
                            topology: None,
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .collect(),
        })
    }

    fn key(device: &str, pod: &str) -> (String, Holder) {
        (
            device.into(),
            Holder {
                pod: pod.into(),
                namespace: "n".into(),
                container: "c".into(),
                resource: "nvidia.com/gpu".into(),
            },
        )
    }

    #[test]
    fn a_held_device_is_unused_while_no_process_runs_and_nothing_is_active() {
        let mut t = UnusedTracker::default();
        let held = held_by(&[("p", &["G"])]);
        let empty = |ms| at(ms, vec![gpu("G", Some(0.0), vec![])]);
        let g = key("G", "p");
        assert_eq!(t.update(&empty(0), &held)[&g], 0.0);
        assert_eq!(t.update(&empty(60_000), &held)[&g], 60.0);
        // A process, even an idle one, uses it; the span restarts from its last sample.
        let with_proc = at(
            120_000,
            vec![gpu("G", Some(0.0), vec![proc_(1, Some(0.0), None)])],
        );
        assert_eq!(t.update(&with_proc, &held)[&g], 0.0);
        assert_eq!(t.update(&empty(180_000), &held)[&g], 60.0);
        // Activity without a listed process (NVML's list can lag) uses it too.
        let busy = at(200_000, vec![gpu("G", Some(0.5), vec![])]);
        assert_eq!(t.update(&busy, &held)[&g], 0.0);
        assert_eq!(t.update(&empty(260_000), &held)[&g], 60.0);
        // A device nobody holds has no value; a GPU nobody holds neither.
        let r = t.update(
            &at(
                270_000,
                vec![gpu("G", Some(0.0), vec![]), gpu("H", Some(0.0), vec![])],
            ),
            &held,
        );
        assert_eq!(r.len(), 1, "{r:?}");
        // The holder leaves (or the kubelet stops answering): forgotten, so a new holder, or
        // the same one back, starts from 0.
        assert!(
            t.update(&empty(280_000), &DeviceHolders::default())
                .is_empty()
        );
        assert_eq!(t.update(&empty(290_000), &held)[&g], 0.0);
    }

    #[test]
    fn an_unknown_process_list_neither_starts_nor_breaks_the_span() {
        let mut t = UnusedTracker::default();
        let held = held_by(&[("p", &["G"])]);
        let empty = |ms| at(ms, vec![gpu("G", Some(0.0), vec![])]);
        let g = key("G", "p");
        t.update(&empty(0), &held);
        let mut failed = gpu("G", Some(0.0), vec![]);
        failed.errors.push(FieldError {
            field: "processes".into(),
            kind: "unknown".into(),
        });
        assert!(t.update(&at(10_000, vec![failed]), &held).is_empty());
        let mut lost = gpu("G", None, vec![]);
        lost.status = GpuStatus::Error {
            message: "x".into(),
        };
        assert!(t.update(&at(20_000, vec![lost]), &held).is_empty());
        assert_eq!(t.update(&empty(30_000), &held)[&g], 30.0);
    }

    #[test]
    fn a_mig_instance_is_used_by_its_own_processes_and_activity_only() {
        let mut t = UnusedTracker::default();
        let held = held_by(&[("p", &["MIG-3"]), ("q", &["MIG-5"])]);
        let sample = |ms, procs: Vec<ProcessSample>, sm5: Option<f64>| {
            let mut g = gpu("G", None, procs);
            for (gi, sm) in [(3, Some(0.0)), (5, sm5)] {
                g.mig.push(MigSample {
                    gpu_instance_id: gi,
                    compute_instance_id: 0,
                    uuid: format!("MIG-{gi}"),
                    memory_used_bytes: None,
                    memory_total_bytes: None,
                    sm_active_ratio: sm,
                    profiling: Default::default(),
                });
            }
            at(ms, vec![g])
        };
        let (p, q) = (key("MIG-3", "p"), key("MIG-5", "q"));
        t.update(&sample(0, vec![], None), &held);
        // A process on instance 5 uses 5, not 3; no GPM on 5 (A100): its process list decides.
        let r = t.update(&sample(10_000, vec![proc_(1, None, Some(5))], None), &held);
        assert_eq!((r[&p], r[&q]), (10.0, 0.0));
        let r = t.update(&sample(20_000, vec![], None), &held);
        assert_eq!((r[&p], r[&q]), (20.0, 10.0));
        // Activity on instance 5 without a listed process uses it.
        let r = t.update(&sample(30_000, vec![], Some(0.2)), &held);
        assert_eq!((r[&p], r[&q]), (30.0, 0.0));
    }
}
