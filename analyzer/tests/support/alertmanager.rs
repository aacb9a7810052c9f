//! A real Alertmanager for tests (Debian's `/usr/bin/prometheus-alertmanager`; the test fails,
//! never skips, without it: `scripts/test.sh` installs it) on 127.0.0.1 at a free port, clustering
//! off, killed when the [`Alertmanager`] is dropped; and [`FakeServer`], a tiny HTTP/1.1 server on
//! a std `TcpListener` that answers each request with a scripted reply (or never answers), to test
//! `tessera notify` against an Alertmanager that fails.

#![allow(dead_code)] // each test module uses part of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

/// Kills Alertmanager when dropped (also on panic).
pub struct Alertmanager {
    child: Child,
    pub url: String,
    /// The agent the test reads Alertmanager with (TLS-configured behind TLS).
    agent: ureq::Agent,
    _dir: tempfile::TempDir,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

impl Alertmanager {
    /// Starts Alertmanager with the configuration file `config` and waits until it is ready.
    pub fn start(config: &Path) -> Alertmanager {
        Alertmanager::start_with(config, None, agent())
    }

    /// Starts Alertmanager behind TLS: `web_config` is its `--web.config.file` (exporter-toolkit's
    /// `tls_server_config`), `agent` a client it accepts; the URL is `https://127.0.0.1:PORT`.
    pub fn start_tls(config: &Path, web_config: &Path, agent: ureq::Agent) -> Alertmanager {
        Alertmanager::start_with(config, Some(web_config), agent)
    }

    fn start_with(config: &Path, web_config: Option<&Path>, agent: ureq::Agent) -> Alertmanager {
        assert!(
            Path::new(ALERTMANAGER).exists(),
            "{ALERTMANAGER} is missing: install Debian's prometheus-alertmanager package (scripts/test.sh does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let log = std::fs::File::create(dir.path().join("alertmanager.log")).expect("log");
        let mut cmd = Command::new(ALERTMANAGER);
        if let Some(w) = web_config {
            cmd.arg(format!("--web.config.file={}", w.display()));
        }
        let child = cmd
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus-alertmanager");
        let scheme = if web_config.is_some() {
            "https"
        } else {
            "http"
        };
        let am = Alertmanager {
            child,
            url: format!("{scheme}://127.0.0.1:{port}"),
            agent,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = am.agent.get(format!("{}/-/ready", am.url)).call()
                && r.status() == 200
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "alertmanager not ready after 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        am
    }

    /// `GET path` (with the query), as JSON.
    pub fn get(&self, path_and_query: &str) -> Value {
        let mut r = self
            .agent
            .get(format!("{}{path_and_query}", self.url))
            .call()
            .expect("GET alertmanager");
        let status = r.status().as_u16();
        let body = r.body_mut().read_to_string().unwrap();
        assert_eq!(status, 200, "GET {path_and_query}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// tessera's active alerts (`source="tessera"`).
    pub fn tessera_alerts(&self) -> Vec<Value> {
        self.get("/api/v2/alerts?filter=source%3D%22tessera%22")
            .as_array()
            .unwrap()
            .clone()
    }
}

/// One request a [`FakeServer`] received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub target: String,
    pub body: String,
}

/// What a [`FakeServer`] does with a request: answer (status, body), redirect (status,
/// `Location`), or hold the connection open without answering.
pub enum Reply {
    Answer(u16, String),
    Redirect(u16, String),
    Hang,
}

/// A tiny HTTP/1.1 server on 127.0.0.1; each connection gets one request and one reply
/// (`Connection: close`). Stops accepting when dropped (its thread ends with the process).
pub struct FakeServer {
    pub url: String,
    pub requests: Arc<Mutex<Vec<Request>>>,
}

fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut r = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        target,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

impl FakeServer {
    pub fn start(reply: impl Fn(&Request) -> Reply + Send + 'static) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(req) = read_request(&mut stream) else {
                    continue;
                };
                seen.lock().unwrap().push(req.clone());
                match reply(&req) {
                    Reply::Answer(status, body) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    Reply::Redirect(status, location) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 {status} X\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        );
                    }
                    // Never answered; kept open until the process ends.
                    Reply::Hang => held.push(stream),
                }
            }
        });
        FakeServer { url, requests }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}
