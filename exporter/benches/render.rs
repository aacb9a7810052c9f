//! Render benchmark: a node with 8 H100s × 7 MIG instances × 128 processes
//! (`fixtures/scenarios/big-node.toml`), rendered as the
//! `/metrics` body (OpenMetrics + 0.0.4 text, as the cache does once per sample). Prints p50, p99
//! and max over many renders. Run: `cargo bench -p tessera-exporter --bench render`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_core::device::GpuBackend;
use tessera_core::sim::{Scenario, SimBackend, SimClock};
use tessera_exporter::metrics::{self, RenderOptions};
use tessera_exporter::sampler::Snapshot;

fn scenario() -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/scenarios/big-node.toml");
    Scenario::from_file(&path).expect("fixtures/scenarios/big-node.toml")
}

fn main() {
    let s = scenario();
    let mut b = SimBackend::new(
        &s,
        None,
        SimClock::Stepped {
            next_ms: s.start.timestamp_millis(),
            step_ms: 1000,
        },
    )
    .unwrap();
    let inventory = Arc::new(b.inventory().unwrap());
    let mut tracker = tessera_exporter::idle::IdleTracker::default();
    tracker.update(&b.sample().unwrap());
    let sample = b.sample().unwrap();
    let idle = tracker.update(&sample);
    let procs: usize = sample.gpus.iter().map(|g| g.processes.len()).sum();
    let migs: usize = sample.gpus.iter().map(|g| g.mig.len()).sum();
    let snap = Arc::new(Snapshot {
        duration: Duration::from_millis(1),
        attribution: Arc::new(b.node().attribution()),
        idle: Arc::new(idle),
        ..Snapshot::of_sample("sim", 1, inventory, sample)
    });

    let options = RenderOptions::default();
    let mut bytes = 0;
    for _ in 0..200 {
        bytes = metrics::render(snap.clone(), &options).len();
    }
    let n = 5000;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let om = metrics::render(snap.clone(), &options);
        let text = metrics::to_prometheus_text(&om);
        std::hint::black_box((om, text));
        times.push(t.elapsed());
    }
    times.sort();
    let pct = |p: f64| times[((n as f64 * p) as usize).min(n - 1)];
    println!(
        "render (OpenMetrics + 0.0.4) of 8 GPUs, {migs} MIG instances, {procs} processes, {bytes} bytes: p50 {:?}  p99 {:?}  max {:?}  ({n} renders)",
        pct(0.50),
        pct(0.99),
        times[n - 1]
    );
}
