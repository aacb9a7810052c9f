//! Reading the slow counters (energy, per-process utilisation) once per history interval
//! (issue 51) against the fake library: a backend that reads them on the last sample of each
//! interval ([`SlowSchedule`]) writes the same history rows — energy deltas, per-process SM mean
//! and maximum — as one that reads them every sample, over 95 samples starting and ending
//! mid-interval (the last sample reads, as the exporter's last one at shutdown does), and
//! a sample that carries makes neither call (an error injected into them shows only where they
//! are read). The simulated backend follows the same pattern.

use std::collections::HashMap;
use std::sync::Arc;

use crate::common::{FULL, Fake, NVML_ERROR_TIMEOUT, demo, demo_path, ms};
use tessera_core::device::{GpuBackend, SlowReads, SlowSchedule};
use tessera_core::history::aggregate::{Aggregator, Rows};
use tessera_core::model::{Inventory, NodeSample};
use tessera_core::sim::{SimBackend, SimClock};

const NODE: &str = "gpu-node-1";
const INTERVAL_MS: i64 = 10_000;

/// Every row of `samples` aggregated into 10 s intervals.
fn rows(inventory: &Arc<Inventory>, samples: &[NodeSample]) -> Rows {
    let mut agg = Aggregator::new(NODE, INTERVAL_MS);
    let mut out = Rows::default();
    for s in samples {
        if let Some(r) = agg.push(inventory, s, &HashMap::new()) {
            out.gpu.extend(r.gpu);
            out.process.extend(r.process);
        }
    }
    if let Some(r) = agg.flush() {
        out.gpu.extend(r.gpu);
        out.process.extend(r.process);
    }
    out
}

/// The rows' energy deltas per (ts, gpu) and SM mean/max per (ts, gpu, pid).
type Energy = Vec<(i64, u32, Option<f64>)>;
type Sm = Vec<(i64, u32, u32, Option<f64>, Option<f64>)>;
fn figures(r: &Rows) -> (Energy, Sm) {
    (
        r.gpu
            .iter()
            .map(|g| (g.ts, g.gpu, g.energy_delta_joules))
            .collect(),
        r.process
            .iter()
            .map(|p| (p.ts, p.gpu, p.pid, p.sm_mean, p.sm_max))
            .collect(),
    )
}

#[test]
fn reading_once_per_interval_writes_the_rows_of_reading_every_sample() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    fake.load(&demo_path(), NODE);
    let start = ms("2026-11-02T10:00:03Z");
    fake.set_time_ms(start);
    let mut every = fake.backend(NODE);
    let mut once = fake.backend(NODE);
    let inventory = Arc::new(every.inventory().expect("inventory"));
    once.inventory().expect("inventory");
    let mut schedule = SlowSchedule::new(INTERVAL_MS);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut reads = 0;
    for step in 0..95 {
        let t = start + step * 1000;
        if step > 0 {
            fake.advance_ms(1000);
        }
        let mut x = every.sample_with(SlowReads::Read).expect("sample");
        // The last sample reads, as the exporter's last one at shutdown does.
        let slow = if step == 94 {
            SlowReads::Read
        } else {
            schedule.due(t)
        };
        reads += usize::from(slow == SlowReads::Read);
        let mut y = once.sample_with(slow).expect("sample");
        // The samples carry the wall clock; the fake's values follow its virtual one.
        x.timestamp_ms = t;
        y.timestamp_ms = t;
        if slow == SlowReads::Carry {
            let prev: &NodeSample = b.last().expect("a read first");
            for (g, p) in y.gpus.iter().zip(&prev.gpus) {
                assert_eq!(g.energy_joules, p.energy_joules, "GPU {}: carried", g.index);
                assert!(g.processes.iter().all(|p| p.sm_readings.is_empty()));
            }
        }
        a.push(x);
        b.push(y);
    }
    // 10:00:03 … 10:01:37: the first sample, 10:00:09, :19, … :01:29, and the last one.
    assert_eq!(reads, 11, "one read per interval");
    let (ea, sa) = figures(&rows(&inventory, &a));
    let (eb, sb) = figures(&rows(&inventory, &b));
    assert!(
        ea.len() >= 40 && sa.len() >= 10,
        "{} {}",
        ea.len(),
        sa.len()
    );
    assert!(
        ea.iter().filter(|e| e.2.is_some_and(|j| j > 0.0)).count() >= 30,
        "energy was spent: {ea:?}"
    );
    assert!(
        sa.iter()
            .any(|s| s.3.is_some_and(|m| m > 0.0) && s.3 != s.4),
        "SM varies within an interval: {sa:?}"
    );
    assert_eq!(ea, eb, "energy deltas");
    assert_eq!(sa, sb, "per-process SM mean and max");
}

#[test]
fn a_sample_that_carries_makes_neither_slow_call() {
    let _guard = Fake::lock();
    let fake = Fake::open(FULL);
    fake.load(&demo_path(), NODE);
    fake.set_time("2026-11-02T10:00:00Z");
    let mut b = fake.backend(NODE);
    b.inventory().expect("inventory");
    let first = b.sample_with(SlowReads::Carry).expect("first sample reads");
    assert!(first.gpus.iter().any(|g| g.energy_joules.is_some()));
    for f in [
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetProcessUtilization",
    ] {
        fake.inject(f, -1, NVML_ERROR_TIMEOUT);
    }
    fake.advance_ms(1000);
    let carried = b.sample_with(SlowReads::Carry).expect("sample");
    for g in &carried.gpus {
        assert!(g.errors.is_empty(), "GPU {}: {:?}", g.index, g.errors);
    }
    fake.advance_ms(1000);
    let read = b.sample_with(SlowReads::Read).expect("sample");
    let failed: Vec<&str> = read
        .gpus
        .iter()
        .flat_map(|g| g.errors.iter().map(|e| e.field.as_str()))
        .collect();
    assert!(failed.contains(&"energy"), "{failed:?}");
    assert!(failed.contains(&"process_utilization"), "{failed:?}");
    fake.clear();
}

#[test]
fn the_simulated_backend_follows_the_same_pattern() {
    let start = ms("2026-11-02T10:00:03Z");
    let clock = || SimClock::Stepped {
        next_ms: start,
        step_ms: 1000,
    };
    let mut every = SimBackend::new(&demo(), Some(NODE), clock()).unwrap();
    let mut once = SimBackend::new(&demo(), Some(NODE), clock()).unwrap();
    let inventory = Arc::new(every.inventory().unwrap());
    let mut schedule = SlowSchedule::new(INTERVAL_MS);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for step in 0..95 {
        a.push(every.sample().unwrap());
        let t = once.stamp();
        let slow = if step == 94 {
            SlowReads::Read
        } else {
            schedule.due(t)
        };
        b.push(once.sample_with(slow).unwrap());
    }
    assert_ne!(a, b, "some samples carried");
    assert_eq!(
        figures(&rows(&inventory, &a)),
        figures(&rows(&inventory, &b))
    );
}
