//! Issue 50 end to end: GPUs held through DRA ResourceClaims of NVIDIA's DRA driver reach the
//! analyzer's `allocated_unused` finding. The exporter runs on its real NVML path (the fake
//! `libnvidia-ml.so` backed by the demo scenario's `gpu-node-1`, minor numbers = indices) with a
//! fake kubelet whose `dynamic_resources` name a whole GPU (one claim shared by two pods) and an
//! empty MIG device by the driver's names; its history is read back by `tessera analyze`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tessera_core::device::GpuBackend;
use tessera_core::sim::{self, SimBackend, SimClock};
use tessera_e2e::{exporter, fake_nvml, repo_root, run, tessera};
use tessera_fake_kubelet::{FakeKubelet, dra_pod, response};

/// GPU 0's UUID, and the UUID and the DRA device name (25.12 form) of MIG instance 3/5 of the
/// demo's `gpu-node-1`.
fn devices() -> (String, String, String) {
    let scenario =
        sim::load_scenario(Some(&repo_root().join("fixtures/scenarios/demo.toml"))).unwrap();
    let clock = SimClock::Stepped {
        next_ms: scenario.start.timestamp_millis(),
        step_ms: 1000,
    };
    let inv = SimBackend::new(&scenario, Some("gpu-node-1"), clock)
        .unwrap()
        .inventory()
        .unwrap();
    let g3 = inv.gpus.iter().find(|g| g.index == 3).unwrap();
    let m = g3
        .mig_instances
        .iter()
        .find(|m| m.gpu_instance_id == 5)
        .unwrap();
    let name = format!(
        "gpu-{}-mig-{}-{}-{}",
        g3.minor_number.unwrap(),
        m.profile_name.replace('.', ""),
        m.profile_id,
        m.placement.start
    );
    (inv.gpus[0].uuid.clone(), m.uuid.clone(), name)
}

/// The one node folder under the history root.
fn node_dir(root: &Path) -> Option<PathBuf> {
    std::fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.is_dir())
}

#[test]
fn dra_held_devices_reach_history_and_the_allocated_unused_finding() {
    let (gpu0, spare_mig, spare_name) = devices();
    let socket = tempfile::tempdir().unwrap();
    let history = tempfile::tempdir().unwrap();
    let d = "gpu.nvidia.com";
    let kubelet = FakeKubelet::start(
        socket.path().join("kubelet.sock"),
        response(vec![
            dra_pod(
                "p1",
                "ml",
                "gpu-node-1",
                &[("main", "ml", "shared", d, &["gpu-0"])],
            ),
            dra_pod(
                "p2",
                "ml",
                "gpu-node-1",
                &[("main", "ml", "shared", d, &["gpu-0"])],
            ),
            dra_pod(
                "spare",
                "web",
                "gpu-node-1",
                &[("server", "web", "spare", d, &[spare_name.as_str()])],
            ),
        ]),
    )
    .unwrap();
    let mut cmd = exporter![
        "--backend",
        "nvml",
        "--nvml.lib-path",
        fake_nvml(),
        "--sample.interval",
        "100ms",
        "--history.dir",
        history.path(),
        "--history.interval",
        "1s",
        "--kubelet.pod-resources-socket",
        kubelet.path(),
        "--web.listen-address",
        "127.0.0.1:0"
    ];
    cmd.env(
        "TESSERA_FAKE_NVML_SCENARIO",
        repo_root().join("fixtures/scenarios/demo.toml"),
    )
    .env("TESSERA_FAKE_NVML_NODE", "gpu-node-1")
    .env("TESSERA_FAKE_NVML_TIME", "2026-11-02T10:00:00Z")
    .env("TESSERA_FAKE_NVML_STEP_MS", "1000")
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    // Until the spare MIG device has been held for 20 closed rows (the NVML path's rows are
    // the wall clock's seconds); the deadline only guards against a hang.
    let deadline = Instant::now() + Duration::from_secs(600);
    let h = loop {
        if let Some(dir) = node_dir(history.path())
            && let Ok(h) = tessera_core::history::reader::read_node_dir(&dir)
            && h.mig
                .iter()
                .filter(|r| r.mig_uuid == spare_mig && r.holders == Some(1))
                .count()
                >= 20
        {
            break h;
        }
        assert!(Instant::now() < deadline, "no history with DRA holders");
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = child.kill();
    let _ = child.wait();
    let shared = h
        .gpu
        .iter()
        .rfind(|r| r.uuid == gpu0 && r.holders.is_some())
        .unwrap();
    assert_eq!(
        (
            shared.holders,
            shared.holder_namespace.as_deref(),
            shared.holder_pod.as_deref()
        ),
        (Some(2), Some("ml"), Some("p1")),
        "a claim shared by two pods: two holders"
    );
    let (out, stdout, stderr) = run(tessera![
        "analyze",
        "--source",
        format!("history:{}", history.path().display()),
        "--detector",
        "allocated_unused",
        "--idle.min-duration",
        "10s",
        "--format",
        "json"
    ]);
    assert!(out.status.success(), "{stderr}");
    let analysis: Value = serde_json::from_str(&stdout).unwrap();
    let found: Vec<&Value> = analysis["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["detector"] == "allocated_unused")
        .collect();
    assert!(
        found.iter().any(|f| {
            let e = &f["entity"];
            e["pod"] == "spare" && e["namespace"] == "web" && e["gpu"] == 3
        }),
        "the DRA-held empty MIG device is allocated but unused: {}",
        serde_json::to_string_pretty(&found).unwrap()
    );
}
