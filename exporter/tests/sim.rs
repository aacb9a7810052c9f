//! Simulator properties: scenarios load, samples are deterministic, MIG state obeys the
//! placement table, faults and NotSupported fields show up as documented.

use std::path::PathBuf;

use tessera_exporter::device::GpuBackend;
use tessera_exporter::mig::{self, LayoutInstance};
use tessera_exporter::model::GpuStatus;
use tessera_exporter::sim::truth::GroundTruth;
use tessera_exporter::sim::{Scenario, SimBackend, SimClock};

fn demo() -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/demo.toml");
    Scenario::from_file(&path).unwrap()
}

fn ms(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .timestamp_millis()
}

fn stepped(s: &Scenario, node: &str, start: &str) -> SimBackend {
    SimBackend::new(
        s,
        Some(node),
        SimClock::Stepped {
            next_ms: ms(start),
            step_ms: 1000,
        },
    )
    .unwrap()
}

#[test]
fn same_seed_gives_identical_samples() {
    let s = demo();
    for node in ["gpu-node-1", "gpu-node-2", "gpu-node-3"] {
        let mut a = stepped(&s, node, "2026-11-02T13:00:00Z");
        let mut b = stepped(&s, node, "2026-11-02T13:00:00Z");
        for _ in 0..30 {
            assert_eq!(a.sample().unwrap(), b.sample().unwrap());
        }
        assert_eq!(a.inventory().unwrap(), b.inventory().unwrap());
    }
}

#[test]
fn another_seed_gives_other_samples() {
    let s = demo();
    let mut other = s.clone();
    other.seed += 1;
    let mut a = stepped(&s, "gpu-node-1", "2026-11-02T13:00:00Z");
    let mut b = stepped(&other, "gpu-node-1", "2026-11-02T13:00:00Z");
    assert_ne!(
        a.sample().unwrap().gpus[0].sm_active_ratio,
        b.sample().unwrap().gpus[0].sm_active_ratio
    );
    assert_ne!(
        a.inventory().unwrap().gpus[0].uuid,
        b.inventory().unwrap().gpus[0].uuid
    );
}

#[test]
fn mig_state_obeys_the_placement_table() {
    let s = demo();
    for node in &s.nodes {
        let mut b = stepped(&s, &node.name, "2026-11-02T13:00:00Z");
        let inv = b.inventory().unwrap();
        for gpu in &inv.gpus {
            let model = mig::model_by_nvml_name(&gpu.name).unwrap();
            let layout: Vec<LayoutInstance> = gpu
                .mig_instances
                .iter()
                .map(|m| LayoutInstance {
                    profile_id: m.profile_id,
                    placement: m.placement,
                })
                .collect();
            if gpu.mig_mode.is_some_and(|m| m.current) {
                assert!(!layout.is_empty());
                mig::check_layout(model, &layout).unwrap();
                for m in &gpu.mig_instances {
                    let p = model.profile(m.profile_id).unwrap();
                    assert_eq!(m.profile_name, p.name);
                    assert_eq!(m.memory_total_bytes, Some(p.memory_bytes));
                }
                let mut gi: Vec<_> = gpu
                    .mig_instances
                    .iter()
                    .map(|m| m.gpu_instance_id)
                    .collect();
                gi.dedup();
                assert_eq!(
                    gi.len(),
                    gpu.mig_instances.len(),
                    "GPU instance ids are unique"
                );
            } else {
                assert!(layout.is_empty());
            }
        }
    }
}

#[test]
fn mig_mode_hides_device_utilisation_like_real_hardware() {
    let s = demo();
    let mut b = stepped(&s, "gpu-node-1", "2026-11-02T14:00:00Z");
    let sample = b.sample().unwrap();
    let mig_gpu = &sample.gpus[3];
    assert_eq!(
        mig_gpu.busy_ratio, None,
        "NVML has no utilisation in MIG mode"
    );
    assert!(mig_gpu.sm_active_ratio.is_some(), "H100 has GPM");
    assert_eq!(mig_gpu.mig.len(), 3);
    let rerank = mig_gpu
        .processes
        .iter()
        .find(|p| p.gpu_instance_id == Some(mig_gpu.mig[0].gpu_instance_id));
    assert!(rerank.is_some_and(|p| p.sm_ratio.is_none()));
    // A100 has no GPM: SM activity absent, never 0.
    let mut a100 = stepped(&s, "gpu-node-2", "2026-11-02T14:00:00Z");
    let a = a100.sample().unwrap();
    assert_eq!(a.gpus[0].sm_active_ratio, None);
    assert!(a.gpus[0].busy_ratio.is_some());
    // Scenario-level NotSupported: PCIe on node 2 GPU 2.
    assert_eq!(a.gpus[2].pcie_rx_bytes_per_second, None);
    assert!(a.gpus[2].errors.is_empty());
}

#[test]
fn faults_appear_at_their_time() {
    let s = demo();
    let mut n1 = stepped(&s, "gpu-node-1", "2026-11-02T02:59:59Z");
    let before = n1.sample().unwrap();
    assert!(before.gpus[2].xid_events.is_empty());
    assert_eq!(before.gpus[2].ecc_corrected_total, Some(0));
    let at = n1.sample().unwrap();
    assert_eq!(at.gpus[2].xid_events.len(), 1);
    assert_eq!(at.gpus[2].xid_events[0].xid, 79);
    assert_eq!(at.gpus[2].ecc_corrected_total, Some(3));
    let after = n1.sample().unwrap();
    assert!(
        after.gpus[2].xid_events.is_empty(),
        "an XID is reported once"
    );

    let mut n3 = stepped(&s, "gpu-node-3", "2026-11-03T11:00:00Z");
    let lost = n3.sample().unwrap();
    assert_eq!(lost.gpus[1].status, GpuStatus::Lost);
    assert_eq!(lost.gpus[1].power_watts, None);
    assert_eq!(
        lost.gpus[0].status,
        GpuStatus::Ok,
        "one GPU's fault never drops the others"
    );
    assert!(lost.gpus[0].power_watts.is_some());

    let mut n2 = stepped(&s, "gpu-node-2", "2026-11-02T06:05:00Z");
    let err = n2.sample().unwrap();
    assert_eq!(err.gpus[0].status, GpuStatus::Degraded);
    assert_eq!(err.gpus[0].power_watts, None);
    assert_eq!(err.gpus[0].errors[0].field, "power");
    assert_eq!(err.gpus[0].errors[0].kind, "unknown");
}

#[test]
fn energy_counts_up_with_power() {
    let s = demo();
    let mut b = stepped(&s, "gpu-node-1", "2026-11-02T14:00:00Z");
    let a = b.sample().unwrap();
    let c = b.sample().unwrap();
    let (e0, e1) = (
        a.gpus[0].energy_joules.unwrap(),
        c.gpus[0].energy_joules.unwrap(),
    );
    let p = c.gpus[0].power_watts.unwrap();
    assert!(
        (e1 - e0 - p).abs() < 1e-6,
        "1 s at {p} W adds {p} J, got {}",
        e1 - e0
    );
}

#[test]
fn ground_truth_finds_the_planted_conditions() {
    let s = demo();
    let start = s.start;
    let truth = GroundTruth::compute(&s, start, start + chrono::Duration::days(7));
    let idle: Vec<_> = truth
        .idle_loaded
        .iter()
        .map(|t| t.workload.as_str())
        .collect();
    assert!(idle.contains(&"embeddings-forgotten"));
    assert!(idle.contains(&"ocr-mig-idle"));
    assert!(
        !idle.contains(&"tiny-idle"),
        "0.8 GiB is below the 1 GiB bar"
    );
    assert!(!idle.contains(&"chat-api"));
    let forgotten = truth
        .idle_loaded
        .iter()
        .find(|t| t.workload == "embeddings-forgotten")
        .unwrap();
    assert_eq!((forgotten.start, forgotten.end), (truth.start, truth.end));
    let bnw: Vec<_> = truth
        .busy_not_working
        .iter()
        .map(|t| t.workload.as_str())
        .collect();
    assert!(bnw.contains(&"dataloader-bound") && !bnw.contains(&"chat-api"));
    let train = truth
        .workloads
        .iter()
        .find(|w| w.name == "llm-pretrain")
        .unwrap();
    assert_eq!(train.loaded.len(), 5, "five weekday nights");
    assert_eq!(
        truth,
        GroundTruth::compute(&s, start, start + chrono::Duration::days(7))
    );
}

#[test]
fn bad_scenarios_fail_with_a_clear_message() {
    let base = r#"name = "x"
start = "2026-11-02T00:00:00Z"
[[nodes]]
name = "n"
gpus = [{ model = "H100-80GB", count = 1 }]
"#;
    let cases = [
        (format!("{base}bogus = 1\n"), "unknown field"),
        (
            base.replace("H100-80GB", "H900"),
            "unknown GPU model \"H900\"",
        ),
        (
            format!(
                "{base}mig = [{{ gpu = 0, instances = [{{ profile = \"3g.40gb\", start = 2 }}] }}]\n"
            ),
            "cannot be placed at",
        ),
        (
            format!(
                "{base}mig = [{{ gpu = 0, instances = [{{ profile = \"3g.40gb\", start = 0 }}, {{ profile = \"1g.10gb\", start = 2 }}] }}]\n"
            ),
            "overlap",
        ),
        (
            format!(
                "{base}[[workloads]]\nname = \"w\"\nkind = \"idle\"\nnode = \"m\"\ngpu = 0\nmemory_gib = 1.0\n"
            ),
            "unknown node \"m\"",
        ),
        (
            format!(
                "{base}[[workloads]]\nname = \"w\"\nkind = \"idle\"\nnode = \"n\"\ngpu = 0\nmemory_gib = 500.0\n"
            ),
            "memory_gib = 500",
        ),
        (
            format!(
                "{base}[[faults]]\nkind = \"nvml_error\"\nnode = \"n\"\ngpu = 0\nfield = \"volts\"\n"
            ),
            "field \"volts\"",
        ),
        (
            "name = \"x\"\nstart = \"yesterday\"\nnodes = []\n".to_string(),
            "start",
        ),
    ];
    for (text, want) in cases {
        let err = Scenario::from_toml(&text, "case.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("case.toml"), "{err}");
        assert!(err.contains(want), "expected {want:?} in: {err}");
    }
}

#[test]
fn driver_error_fails_the_whole_sample_and_the_sampler_recovers() {
    use std::time::Duration;
    use tessera_exporter::sampler::{Sampler, SamplerConfig};

    let mut s = demo();
    s.faults.push(
        toml::from_str(
            "kind = \"driver_error\"\nnode = \"gpu-node-1\"\nat = \"2026-11-02T00:00:01Z\"\nuntil = \"2026-11-02T00:00:03Z\"",
        )
        .unwrap(),
    );
    s.validate().unwrap();
    let mut b = stepped(&s, "gpu-node-1", "2026-11-02T00:00:00Z");
    // A reading describes the second before it: 00:00:01 precedes the outage, 00:00:02 is in it.
    assert!(b.sample().is_ok());
    assert!(b.sample().is_ok());
    let err = b.sample().unwrap_err();
    assert!(err.is_driver_level(), "{err}");

    // Through the sampler: each re-created backend resumes the virtual clock where it stopped.
    let clock = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(ms(
        "2026-11-02T00:00:00Z",
    )));
    let scenario = s.clone();
    let sampler = Sampler::spawn(
        Box::new(move || {
            let next_ms = clock.fetch_add(1000, std::sync::atomic::Ordering::SeqCst);
            SimBackend::new(
                &scenario,
                Some("gpu-node-1"),
                SimClock::Stepped {
                    next_ms,
                    step_ms: 1000,
                },
            )
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
            && sample.timestamp_ms >= ms("2026-11-02T00:00:03Z")
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
