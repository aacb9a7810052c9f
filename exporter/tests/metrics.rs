//! `/metrics` content: golden files (a fixed scenario and clock give a committed exposition,
//! `fixtures/golden/*.snap`, compared by insta like the analyzer's snapshots; take an intended
//! change with `INSTA_UPDATE=always cargo test -p tessera-exporter --test tests metrics::`), and
//! exposition under faults.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tessera_core::device::GpuBackend;
use tessera_core::sim::{Scenario, SimBackend, SimClock};
use tessera_exporter::metrics::{self, RenderOptions};
use tessera_exporter::sampler::{Snapshot, Totals};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn demo() -> Scenario {
    Scenario::from_file(&root().join("fixtures/scenarios/demo.toml")).unwrap()
}

fn ms(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .timestamp_millis()
}

/// `samples` one-second samples of `node` starting at `start`; the snapshot of the last, with
/// totals accumulated over all of them as the sampler does.
fn snapshot(node: &str, start: &str, samples: usize) -> Snapshot {
    let s = demo();
    let mut b = SimBackend::new(
        &s,
        Some(node),
        SimClock::Stepped {
            next_ms: ms(start),
            step_ms: 1000,
        },
    )
    .unwrap();
    let inventory = b.inventory().unwrap();
    let mut totals = Totals::default();
    let mut tracker = tessera_exporter::idle::IdleTracker::default();
    let mut idle = Default::default();
    let mut last = None;
    for _ in 0..samples {
        let sample = b.sample().unwrap();
        totals.add(&sample);
        idle = tracker.update(&sample);
        last = Some(sample);
    }
    Snapshot {
        duration: Duration::from_micros(1250),
        totals: Arc::new(totals),
        attribution: Arc::new(b.node().attribution()),
        idle: Arc::new(idle),
        ..Snapshot::of_sample("sim", samples as u64, Arc::new(inventory), last.unwrap())
    }
}

fn fixed_options() -> RenderOptions {
    RenderOptions {
        runtime: false,
        version: "0.0.0-golden".into(),
        ..RenderOptions::default()
    }
}

fn golden(name: &str, actual: &str) {
    // insta, as the analyzer's snapshots: `fixtures/golden/<name>.snap`; a difference fails with
    // a diff, and `INSTA_UPDATE=always` (or `cargo insta review`) takes an intended change.
    insta::with_settings!({
        snapshot_path => root().join("fixtures/golden"),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, actual);
    });
}

#[test]
fn golden_h100_node_with_mig_xid_and_ecc() {
    // Three samples ending at the XID/ECC fault of GPU 2 (03:00:00).
    let snap = snapshot("gpu-node-1", "2026-11-02T02:59:58Z", 3);
    golden(
        "metrics-gpu-node-1",
        &metrics::render(Arc::new(snap), &fixed_options()),
    );
}

#[test]
fn golden_a100_h200_node_with_mig_and_a_power_error() {
    let snap = snapshot("gpu-node-2", "2026-11-02T06:04:59Z", 2);
    golden(
        "metrics-gpu-node-2",
        &metrics::render(Arc::new(snap), &fixed_options()),
    );
}

#[test]
fn a_lost_gpu_keeps_its_status_series() {
    let snap = snapshot("gpu-node-3", "2026-11-03T11:00:00Z", 1);
    let text = metrics::render(Arc::new(snap), &fixed_options());
    let uuid_line = |state: &str, gpu: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("tessera_gpu_status{")
                    && l.contains(&format!("gpu=\"{gpu}\""))
                    && l.contains(&format!("state=\"{state}\""))
            })
            .unwrap_or_else(|| panic!("no status {state} for GPU {gpu}:\n{text}"))
            .to_string()
    };
    assert!(uuid_line("lost", "1").ends_with(" 1"));
    assert!(uuid_line("ok", "1").ends_with(" 0"));
    assert!(uuid_line("ok", "0").ends_with(" 1"));
    // Values of the lost GPU are absent, the other GPU's are there.
    assert!(
        text.lines()
            .any(|l| l.starts_with("tessera_gpu_power_watts{gpu=\"0\""))
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("tessera_gpu_power_watts{gpu=\"1\""))
    );
    assert!(text.contains("tessera_exporter_gpu_collection_success{gpu=\"1\""));
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn backend_down_still_renders_status_and_self_metrics() {
    let mut snap = snapshot("gpu-node-1", "2026-11-02T12:00:00Z", 1);
    snap.sample = None;
    snap.state.healthy = false;
    snap.state.errors_total = 4;
    let text = metrics::render(Arc::new(snap), &fixed_options());
    assert!(text.contains("tessera_exporter_backend_up 0"), "{text}");
    assert!(text.contains("tessera_exporter_backend_errors_total 4"));
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("tessera_gpu_status{")
                && l.contains("state=\"error\"")
                && l.ends_with(" 1"))
            .count(),
        4
    );
    assert!(!text.contains("tessera_gpu_power_watts"));
}

#[test]
fn process_cap_and_switch() {
    let snap = Arc::new(snapshot("gpu-node-1", "2026-11-02T14:00:00Z", 1));
    let all = metrics::render(snap.clone(), &fixed_options());
    let n = all
        .lines()
        .filter(|l| l.starts_with("tessera_process_memory_used_bytes{"))
        .count();
    assert!(n >= 4, "{all}");
    assert!(all.contains("tessera_exporter_processes_truncated 0"));
    let capped = metrics::render(
        snap.clone(),
        &RenderOptions {
            processes_max: 2,
            ..fixed_options()
        },
    );
    assert_eq!(
        capped
            .lines()
            .filter(|l| l.starts_with("tessera_process_memory_used_bytes{"))
            .count(),
        2
    );
    assert!(capped.contains(&format!("tessera_exporter_processes_truncated {}", n - 2)));
    // The largest holders are kept: the 71 GiB training job is not running at 14:00, so chat-api (38 GiB).
    assert!(capped.contains("pod_uid=") && capped.contains("process=\"python3\""));
    let off = metrics::render(
        snap,
        &RenderOptions {
            processes: false,
            ..fixed_options()
        },
    );
    assert!(!off.contains("tessera_process_"));
}

#[test]
fn cache_renders_once_per_snapshot() {
    let cache = metrics::MetricsCache::new(fixed_options());
    let snap = Arc::new(snapshot("gpu-node-1", "2026-11-02T14:00:00Z", 1));
    let a = cache.get(snap.clone());
    let b = cache.get(snap.clone());
    assert!(a.openmetrics.ends_with(b"# EOF\n") && !a.text.windows(5).any(|w| w == b"# EOF"));
    assert!(Arc::ptr_eq(&a, &b));
    let mut next = (*snap).clone();
    next.sequence += 1;
    assert!(!Arc::ptr_eq(&a, &cache.get(Arc::new(next))));
}

/// `promtool check metrics` (Debian's prometheus package; the test script installs it) must be
/// clean on what `/metrics` serves to a 0.0.4 client: every lint, including naming and units.
#[test]
fn promtool_check_metrics_is_clean() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    for (node, start, n) in [
        ("gpu-node-1", "2026-11-02T02:59:58Z", 3),
        ("gpu-node-2", "2026-11-02T06:04:59Z", 2),
        ("gpu-node-3", "2026-11-03T11:00:00Z", 1),
    ] {
        let om = metrics::render(
            Arc::new(snapshot(node, start, n)),
            &RenderOptions::default(),
        );
        let text = metrics::to_prometheus_text(&om);
        let mut child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool not found: install Debian's prometheus package (bash scripts/test.sh does)");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let msg = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && msg.trim().is_empty(),
            "promtool on {node}:\n{msg}"
        );
    }
}

#[test]
fn prometheus_text_names_counters_after_their_samples() {
    let om = "# HELP a_total x\n# HELP c Counter.\n# TYPE c counter\n# UNIT c_seconds seconds\nc_total 1\n# HELP g G.\n# TYPE g gauge\ng 2\n# EOF\n";
    assert_eq!(
        metrics::to_prometheus_text(om),
        "# HELP a_total x\n# HELP c_total Counter.\n# TYPE c_total counter\nc_total 1\n# HELP g G.\n# TYPE g gauge\ng 2\n"
    );
    assert!(metrics::accepts_openmetrics(Some(
        "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    )));
    assert!(!metrics::accepts_openmetrics(Some("*/*")));
    assert!(!metrics::accepts_openmetrics(None));
}

#[test]
fn mig_layout_drift_of_the_simulated_node_against_a_plan() {
    // gpu-node-1 of the demo: GPUs 0–2 without MIG, GPU 3 as 3g + 2g + 1g.
    let snap = Arc::new(snapshot("gpu-node-1", "2026-11-02T14:00:00Z", 1));
    let plan = tessera_core::mig::parted::PartedFile::parse(
        r#"
version: v1
mig-configs:
  node-1:
    - devices: [0, 1]
      mig-enabled: false
    - devices: [2]
      mig-enabled: true
      mig-devices: { "1g.10gb": 7 }
    - devices: [3]
      mig-enabled: true
      mig-devices: { "3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1 }
"#,
        "plan.yaml",
    )
    .unwrap()
    .select("node-1")
    .unwrap();
    plan.validate(snap.inventory.as_deref().unwrap()).unwrap();
    let text = metrics::render(
        snap.clone(),
        &RenderOptions {
            mig_plan: Some(Arc::new(plan)),
            ..fixed_options()
        },
    );
    let value = |family: &str, gpu: &str| {
        text.lines()
            .find(|l| {
                l.starts_with(&format!("{family}{{gpu=\"{gpu}\""))
                    && l.contains("config=\"node-1\"")
            })
            .unwrap_or_else(|| panic!("no {family} for GPU {gpu}:\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string()
    };
    for (gpu, drift, instances) in [
        ("0", "0", "0"),
        ("1", "0", "0"),
        ("2", "1", "7"),
        ("3", "0", "0"),
    ] {
        assert_eq!(value("tessera_mig_layout_drift", gpu), drift, "GPU {gpu}");
        assert_eq!(
            value("tessera_mig_layout_drift_instances", gpu),
            instances,
            "GPU {gpu}"
        );
    }
    // Without a plan there is no drift series.
    let plain = metrics::render(snap, &fixed_options());
    assert!(!plain.contains("tessera_mig_layout_drift"));
}

#[test]
fn golden_a100_node_without_gpm() {
    // No GPM (A100s): the exposition is byte for byte what it was before the GPM profiling
    // families (issue 29); the file was rendered by the code before them.
    let snap = snapshot("gpu-node-3", "2026-11-02T14:00:00Z", 2);
    golden(
        "metrics-gpu-node-3-no-gpm",
        &metrics::render(Arc::new(snap), &fixed_options()),
    );
}

#[test]
fn every_rendered_gpu_mig_and_process_family_is_declared() {
    // The collectors take their families from metrics::catalog, which docs/metrics.md is
    // checked against; a family written past it would show here.
    use tessera_exporter::metrics::catalog;
    let declared = [catalog::GPU, catalog::MIG, catalog::PROCESS].concat();
    let mut seen = 0;
    for (node, start, samples) in [
        ("gpu-node-1", "2026-11-02T02:59:58Z", 3),
        ("gpu-node-2", "2026-11-02T06:04:59Z", 2),
        ("gpu-node-3", "2026-11-02T14:00:00Z", 2),
    ] {
        let text = metrics::render(Arc::new(snapshot(node, start, samples)), &fixed_options());
        for line in text.lines() {
            let Some((family, kind)) = line
                .strip_prefix("# TYPE ")
                .and_then(|rest| rest.split_once(' '))
            else {
                continue;
            };
            if !["tessera_gpu_", "tessera_mig_", "tessera_process_"]
                .iter()
                .any(|p| family.starts_with(p))
            {
                continue;
            }
            let desc = declared
                .iter()
                .find(|d| d.family_name() == family)
                .unwrap_or_else(|| panic!("{family} is rendered but not in metrics::catalog"));
            assert_eq!(kind, desc.kind.as_str(), "{family}");
            seen += 1;
        }
    }
    assert!(seen > 60, "only {seen} families checked");
}
