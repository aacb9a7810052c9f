//! A real Prometheus for tests: Debian's `/usr/bin/prometheus` and `/usr/bin/promtool` (the test
//! fails, never skips, without them; `scripts/test.sh` installs them). OpenMetrics text is turned
//! into TSDB blocks with `promtool tsdb create-blocks-from openmetrics`, then served on
//! 127.0.0.1 at a free port until the [`Server`] is dropped.

#![allow(dead_code)] // each test binary uses part of it

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const PROMETHEUS: &str = "/usr/bin/prometheus";
pub const PROMTOOL: &str = "/usr/bin/promtool";

/// Kills Prometheus when dropped (also on panic).
pub struct Server {
    child: Child,
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn require_tools() {
    for tool in [PROMETHEUS, PROMTOOL] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: install Debian's prometheus package (scripts/test.sh does)"
        );
    }
}

/// Builds a TSDB in `dir` from the OpenMetrics file `om` (blocks of at most
/// `max_block_duration`, e.g. `2h`) and serves it on a free port.
pub fn serve_file(dir: &Path, om: &Path, max_block_duration: &str) -> Server {
    require_tools();
    let data = dir.join("tsdb");
    let out = Command::new(PROMTOOL)
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(format!("--max-block-duration={max_block_duration}"))
        .arg(om)
        .arg(&data)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    start(dir, &data)
}

/// Serves the TSDB in `data` on a free port (config and log in `dir`).
pub fn start(dir: &Path, data: &Path) -> Server {
    start_with_config(dir, data, "global:\n  scrape_interval: 1m\n")
}

/// Serves the TSDB in `data` on a free port with the configuration `config` (YAML: scrape jobs,
/// `storage.tsdb`), written with the log to `dir`.
///
/// The port is found free by binding it and letting it go, so a test running beside may take it
/// first: a Prometheus that exits (its address in use), or a ready answer from a server that is
/// not this one (its `storage.tsdb.path` is another's), is tried again on another port.
pub fn start_with_config(dir: &Path, data: &Path, config: &str) -> Server {
    let config_text = config;
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, config_text).expect("config");
    for _attempt in 0..5 {
        if let Some(server) = try_start(dir, data, &config) {
            return server;
        }
    }
    panic!(
        "prometheus did not start on any of 5 ports: {}",
        std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
    );
}

/// One start on a free port: the server once it answers as this one, `None` when the port was
/// taken (it exited, or another server answered).
fn try_start(dir: &Path, data: &Path, config: &Path) -> Option<Server> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    let child = Command::new(PROMETHEUS)
        .arg(format!("--storage.tsdb.path={}", data.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg(format!("--config.file={}", config.display()))
        .arg("--storage.tsdb.retention.time=100y")
        .arg("--query.max-samples=200000000")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    let mut server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    // A guard against a hang (a Prometheus that neither answers nor exits), not a bound on speed.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if server.child.try_wait().ok().flatten().is_some() {
            return None;
        }
        if let Ok(r) = ureq::get(format!("{}/-/ready", server.url)).call()
            && r.status() == 200
        {
            let flags = ureq::get(format!("{}/api/v1/status/flags", server.url))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .unwrap_or_default();
            let ours = serde_json::from_str::<serde_json::Value>(&flags)
                .ok()
                .is_some_and(|v| {
                    v["data"]["storage.tsdb.path"].as_str() == Some(&data.display().to_string())
                });
            return ours.then_some(server);
        }
        assert!(
            Instant::now() < deadline,
            "prometheus not ready after 120 s: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Writes `openmetrics` to `dir/data.om` and serves it (2-hour blocks, promtool's default).
pub fn serve(dir: &Path, openmetrics: &str) -> Server {
    let om = dir.join("data.om");
    std::fs::write(&om, openmetrics).expect("write openmetrics");
    serve_file(dir, &om, "2h")
}
