//! End-to-end: the exporter as a Prometheus scrape target, on the simulator and on the NVML path
//! through the fake library, scraped with curl while faults are injected.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tessera_e2e::{exporter, fake_nvml};

/// A running exporter on 127.0.0.1 with a port chosen by the OS; killed on drop.
struct Served {
    child: Child,
    addr: String,
    /// History goes here, never to the default /var/lib/tessera/history.
    history: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(mut cmd: Command) -> Served {
    let history = tempfile::tempdir().unwrap();
    cmd.args(["--web.listen-address", "127.0.0.1:0", "--history.dir"])
        .arg(history.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("starting tessera-exporter");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("exporter exited before listening")
            .unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining stderr so the exporter never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Served {
        child,
        addr,
        history,
    }
}

fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl not found: install Debian's curl (bash scripts/test.sh does)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
    (body.to_string(), code.to_string())
}

fn wait_ready(s: &Served) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while curl(&[&format!("http://{}/-/ready", s.addr)]).1 != "200" {
        assert!(Instant::now() < deadline, "exporter never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn line<'a>(body: &'a str, prefix: &str, contains: &[&str]) -> Option<&'a str> {
    body.lines()
        .find(|l| l.starts_with(prefix) && contains.iter().all(|c| l.contains(c)))
}

#[test]
fn scrape_target_on_the_simulator() {
    let s = serve(exporter!["--backend", "sim", "--sample.interval", "100ms"]);
    wait_ready(&s);
    let (body, code) = curl(&[&format!("http://{}/metrics", s.addr)]);
    assert_eq!(code, "200");
    assert!(
        line(&body, "tessera_gpu_info{", &["NVIDIA H100 80GB HBM3"]).is_some(),
        "{body}"
    );
    assert!(
        line(
            &body,
            "tessera_mig_info{",
            &["profile=\"3g.40gb\"", "placement_start=\"0\""]
        )
        .is_some()
    );
    assert!(line(&body, "tessera_process_memory_used_bytes{", &["pod_uid=\""]).is_some());
    assert!(line(&body, "tessera_exporter_backend_up", &[" 1"]).is_some());
    assert!(
        !body.contains("# EOF"),
        "0.0.4 text for a client that did not ask for OpenMetrics"
    );
    let (om, _) = curl(&[
        "-H",
        "Accept: application/openmetrics-text; version=1.0.0",
        &format!("http://{}/metrics", s.addr),
    ]);
    assert!(
        om.trim_end().ends_with("# EOF"),
        "OpenMetrics when asked for"
    );
    let (_, code) = curl(&[&format!("http://{}/nope", s.addr)]);
    assert_eq!(code, "404");
    let (landing, _) = curl(&[&format!("http://{}/", s.addr)]);
    assert!(landing.contains("/metrics"));
}

#[test]
fn process_metrics_can_be_capped_and_turned_off() {
    let s = serve(exporter!["--backend", "sim", "--no-collector.processes"]);
    wait_ready(&s);
    let (body, _) = curl(&[&format!("http://{}/metrics", s.addr)]);
    assert!(!body.contains("tessera_process_"));
    let s = serve(exporter![
        "--backend",
        "sim",
        "--collector.processes.max",
        "1"
    ]);
    wait_ready(&s);
    let (body, _) = curl(&[&format!("http://{}/metrics", s.addr)]);
    assert_eq!(
        body.lines()
            .filter(|l| l.starts_with("tessera_process_memory_used_bytes{"))
            .count(),
        1
    );
    assert!(
        line(&body, "tessera_exporter_processes_truncated ", &[])
            .is_some_and(|l| !l.ends_with(" 0"))
    );
}

/// The NVML path through the fake library, its clock stepping one virtual second per sample from
/// just before gpu-node-3's GPU 1 falls off the bus (10:00–12:00): scrapes keep answering, the lost
/// GPU shows as `state="lost"`, the other GPU keeps its values.
#[test]
fn scrapes_keep_working_while_a_gpu_is_lost_on_the_nvml_path() {
    let mut cmd = exporter![
        "--backend",
        "nvml",
        "--nvml.lib-path",
        fake_nvml(),
        "--sample.interval",
        "50ms"
    ];
    cmd.env("TESSERA_FAKE_NVML_SCENARIO", "fixtures/scenarios/demo.toml")
        .env("TESSERA_FAKE_NVML_NODE", "gpu-node-3")
        .env("TESSERA_FAKE_NVML_TIME", "2026-11-03T09:59:50Z")
        .env("TESSERA_FAKE_NVML_STEP_MS", "1000");
    let s = serve(cmd);
    wait_ready(&s);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut saw_ok, mut saw_lost) = (false, false);
    while !(saw_ok && saw_lost) {
        assert!(
            Instant::now() < deadline,
            "never saw GPU 1 both ok and lost"
        );
        let (body, code) = curl(&[&format!("http://{}/metrics", s.addr)]);
        assert_eq!(code, "200");
        let gpu1 = |state| {
            line(
                &body,
                "tessera_gpu_status{",
                &["gpu=\"1\"", &format!("state=\"{state}\"")],
            )
            .is_some_and(|l| l.ends_with(" 1"))
        };
        saw_ok |= gpu1("ok");
        if gpu1("lost") {
            saw_lost = true;
            assert!(line(&body, "tessera_gpu_power_watts{", &["gpu=\"1\""]).is_none());
            assert!(
                line(&body, "tessera_gpu_power_watts{", &["gpu=\"0\""]).is_some(),
                "GPU 0 still reported"
            );
            assert!(
                line(
                    &body,
                    "tessera_exporter_gpu_collection_success{",
                    &["gpu=\"1\""]
                )
                .is_some_and(|l| l.ends_with(" 0"))
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// gpu-node-2's power reads fail 06:00–06:10 (NVML_ERROR_UNKNOWN from the fake library): the
/// error is counted by field and kind, the GPU is degraded, scrapes keep working.
#[test]
fn nvml_read_errors_are_counted_and_scrapes_keep_working() {
    let mut cmd = exporter![
        "--backend",
        "nvml",
        "--nvml.lib-path",
        fake_nvml(),
        "--sample.interval",
        "50ms"
    ];
    cmd.env("TESSERA_FAKE_NVML_SCENARIO", "fixtures/scenarios/demo.toml")
        .env("TESSERA_FAKE_NVML_NODE", "gpu-node-2")
        .env("TESSERA_FAKE_NVML_TIME", "2026-11-02T06:00:00Z")
        .env("TESSERA_FAKE_NVML_STEP_MS", "1000");
    let s = serve(cmd);
    wait_ready(&s);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "the power error never showed");
        let (body, code) = curl(&[&format!("http://{}/metrics", s.addr)]);
        assert_eq!(code, "200");
        let counted = line(
            &body,
            "tessera_exporter_nvml_errors_total{",
            &["gpu=\"0\"", "field=\"power\"", "kind=\"unknown\""],
        );
        if counted.is_some_and(|l| !l.ends_with(" 0")) {
            assert!(
                line(
                    &body,
                    "tessera_gpu_status{",
                    &["gpu=\"0\"", "state=\"degraded\""]
                )
                .is_some_and(|l| l.ends_with(" 1"))
            );
            assert!(
                line(&body, "tessera_gpu_temperature_celsius{", &["gpu=\"0\""]).is_some(),
                "other values of GPU 0 remain"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn history_is_recorded_where_asked() {
    let s = serve(exporter![
        "--backend",
        "sim",
        "--sample.interval",
        "20ms",
        "--history.interval",
        "100ms"
    ]);
    wait_ready(&s);
    let node = s.history.path().join("gpu-node-1");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (body, _) = curl(&[&format!("http://{}/metrics", s.addr)]);
        let written = line(
            &body,
            "tessera_exporter_history_rows_written_total{",
            &["table=\"gpu\""],
        )
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
        if written >= 8.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no history rows written:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(node.join("tessera-history.json").exists());
    let gpu_dir = std::fs::read_dir(node.join("gpu")).unwrap().count();
    assert!(gpu_dir >= 1, "an open segment exists");
}
