//! The sampler over the simulated backend: a driver-level error fails the whole sample, and the
//! sampler re-creates the backend with backoff and keeps publishing snapshots that say so.

use tessera_core::device::GpuBackend;
use tessera_core::sim::{self, SimBackend, SimClock};

#[test]
fn driver_error_fails_the_whole_sample_and_the_sampler_recovers() {
    use std::time::Duration;
    use tessera_exporter::sampler::{Sampler, SamplerConfig};

    // The embedded demo scenario (starts 2026-11-02T00:00:00Z).
    let mut s = sim::load_scenario(None).unwrap();
    s.faults.push(
        toml::from_str(
            "kind = \"driver_error\"\nnode = \"gpu-node-1\"\nat = \"2026-11-02T00:00:01Z\"\nuntil = \"2026-11-02T00:00:03Z\"",
        )
        .unwrap(),
    );
    s.validate().unwrap();
    let start = s.start.timestamp_millis();
    let stepped = |next_ms: i64| SimClock::Stepped {
        next_ms,
        step_ms: 1000,
    };
    let mut b = SimBackend::new(&s, Some("gpu-node-1"), stepped(start)).unwrap();
    // A reading describes the second before it: 00:00:01 precedes the outage, 00:00:02 is in it.
    assert!(b.sample().is_ok());
    assert!(b.sample().is_ok());
    let err = b.sample().unwrap_err();
    assert!(err.is_driver_level(), "{err}");

    // Through the sampler: each re-created backend resumes the virtual clock where it stopped.
    let clock = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(start));
    let scenario = s.clone();
    let sampler = Sampler::spawn(
        Box::new(move || {
            let next_ms = clock.fetch_add(1000, std::sync::atomic::Ordering::SeqCst);
            SimBackend::new(&scenario, Some("gpu-node-1"), stepped(next_ms))
                .map(|b| Box::new(b) as Box<dyn GpuBackend>)
                .map_err(Into::into)
        }),
        SamplerConfig {
            interval: Duration::from_millis(5),
            backoff_initial: Duration::from_millis(5),
            backoff_max: Duration::from_millis(10),
            ..SamplerConfig::default()
        },
    )
    .unwrap();
    let h = sampler.handle();
    let mut seq = 0;
    let mut failures = 0;
    loop {
        let snap = h
            .wait_newer(seq, Duration::from_secs(5))
            .expect("snapshots keep coming");
        seq = snap.sequence;
        if snap.sample.is_none() {
            failures += 1;
            assert!(snap.state.last_error.is_some());
        }
        if let Some(sample) = &snap.sample
            && sample.timestamp_ms >= start + 3_000
        {
            assert_eq!(sample.gpus.len(), 4);
            assert!(
                snap.state.initialisations >= 3,
                "re-created after each driver error"
            );
            break;
        }
    }
    sampler.stop();
    assert!(failures >= 2, "both failing ticks were published");
}
