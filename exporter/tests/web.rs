//! The HTTP layer through real clients: `curl` (an independent client, required: the test fails
//! when it is missing) and raw TCP sockets for malformed requests and slow clients. Every server
//! listens on 127.0.0.1 port 0 and is stopped by its test. Certificates are made with rcgen in a
//! temporary directory. No test asserts how fast anything is; waits have generous upper bounds.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tessera_exporter::web::{
    Exposition, LandingInfo, LandingLink, Rendered, RunningServer, Server, ServerOptions,
    WebConfig, WebError,
};

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const BODY: &str = "# TYPE tessera_up gauge\ntessera_up 1\n# EOF\n";
/// Upper bound for anything the server is expected to do "soon" (liveness, not speed).
const PATIENCE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Expositions

struct Fixed {
    ready: AtomicBool,
}

impl Fixed {
    fn new(ready: bool) -> Arc<Fixed> {
        Arc::new(Fixed {
            ready: AtomicBool::new(ready),
        })
    }
}

impl Exposition for Fixed {
    fn render(&self, _accept: Option<&str>) -> Rendered {
        Rendered {
            content_type: OPENMETRICS,
            body: BODY.into(),
        }
    }
    fn ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// A render that blocks until the test releases it, and says when it started.
#[derive(Default)]
struct Gated {
    state: Mutex<(usize, bool)>, // (renders started, released)
    cv: Condvar,
}

impl Gated {
    fn wait_started(&self, n: usize) {
        let deadline = Instant::now() + PATIENCE;
        let mut s = self.state.lock().unwrap();
        while s.0 < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "render {n} never started");
            s = self.cv.wait_timeout(s, left).unwrap().0;
        }
    }
    fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.cv.notify_all();
    }
}

impl Exposition for Gated {
    fn render(&self, _accept: Option<&str>) -> Rendered {
        let mut s = self.state.lock().unwrap();
        s.0 += 1;
        self.cv.notify_all();
        let deadline = Instant::now() + PATIENCE;
        while !s.1 && Instant::now() < deadline {
            s = self
                .cv
                .wait_timeout(s, Duration::from_millis(100))
                .unwrap()
                .0;
        }
        Rendered {
            content_type: OPENMETRICS,
            body: BODY.into(),
        }
    }
    fn ready(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------------------------
// Servers and clients

fn options() -> ServerOptions {
    ServerOptions {
        listen: vec!["127.0.0.1:0".to_string()],
        ..ServerOptions::default()
    }
}

/// Options listening on a loopback address of the test's own (127.0.0.`n`). Tests that check that
/// nothing listens after a shutdown use one, so that another test's server, which may get the same
/// port number on 127.0.0.1, cannot answer in its place.
fn options_on(n: u8) -> ServerOptions {
    ServerOptions {
        listen: vec![format!("127.0.0.{n}:0")],
        ..ServerOptions::default()
    }
}

fn start(opts: ServerOptions, exposition: Arc<dyn Exposition>) -> (RunningServer, SocketAddr) {
    let server = Server::bind(opts, exposition).expect("bind");
    let running = server.spawn().expect("spawn");
    let addr = running.local_addrs()[0];
    (running, addr)
}

#[derive(Debug)]
struct Reply {
    /// curl's exit status (0 = transfer done, whatever the HTTP status).
    exit: i32,
    status: u16,
    http_version: String,
    headers: String,
    body: String,
    /// Shown by `{:#?}` in failure messages.
    #[allow(dead_code)]
    stderr: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
}

/// Run curl with `args` (URL included). Panics when curl cannot be run: the test script installs
/// it (`apt-get install curl`), and a missing client must not turn into a silent pass.
fn curl(args: &[&str]) -> Reply {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = dir.path().join("body");
    let headers = dir.path().join("headers");
    let out = Command::new("curl")
        .args(["-sS", "--noproxy", "*", "--max-time", "30"])
        .arg("-o")
        .arg(&body)
        .arg("-D")
        .arg(&headers)
        .args(["-w", "%{http_code} %{http_version}"])
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run curl ({e}): these tests need it; install it (apt-get install curl)")
        });
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let mut parts = stdout.split_whitespace();
    Reply {
        exit: out.status.code().unwrap_or(-1),
        status: parts.next().and_then(|s| s.parse().ok()).unwrap_or(0),
        http_version: parts.next().unwrap_or("").to_string(),
        headers: std::fs::read_to_string(&headers).unwrap_or_default(),
        body: std::fs::read_to_string(&body).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

fn get(url: &str) -> Reply {
    curl(&[url])
}

fn assert_status(r: &Reply, status: u16) {
    assert_eq!(r.status, status, "{r:#?}");
}

/// Wait until connecting to `addr` fails. Not at once: a child process (curl, started by another
/// test) may hold a copy of the listening socket between its fork and exec.
fn assert_stops_listening(addr: SocketAddr) {
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect(addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "{addr} still accepts connections"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Read from a raw connection until the server closes it (or `PATIENCE` passes: then panic).
fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("read timeout");
    let deadline = Instant::now() + PATIENCE;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                assert!(
                    Instant::now() < deadline,
                    "the server did not close the connection within {PATIENCE:?}"
                );
            }
            Err(_) => return out, // reset: closed
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Certificates

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn p(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
}

/// ca.crt; server.crt/key (localhost, 127.0.0.1); client.crt/key signed by the CA;
/// rogue.crt/key self-signed; other.key unrelated to any certificate.
fn pki() -> Pki {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |n: &str| dir.path().join(n);

    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "tessera test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
    write(&path("ca.crt"), &ca_cert.pem());
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf = |names: Vec<String>, eku: ExtendedKeyUsagePurpose, cn: &str| {
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![eku];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params
    };
    let server_key = KeyPair::generate().expect("server key");
    let server_cert = leaf(
        vec!["localhost".into(), "127.0.0.1".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
        "localhost",
    )
    .signed_by(&server_key, &issuer)
    .expect("server cert");
    write(&path("server.crt"), &server_cert.pem());
    write(&path("server.key"), &server_key.serialize_pem());

    let client_key = KeyPair::generate().expect("client key");
    let client_cert = leaf(
        vec!["client.test".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
        "client",
    )
    .signed_by(&client_key, &issuer)
    .expect("client cert");
    write(&path("client.crt"), &client_cert.pem());
    write(&path("client.key"), &client_key.serialize_pem());

    let rogue_key = KeyPair::generate().expect("rogue key");
    let rogue_cert = leaf(
        vec!["client.test".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
        "client",
    )
    .self_signed(&rogue_key)
    .expect("rogue cert");
    write(&path("rogue.crt"), &rogue_cert.pem());
    write(&path("rogue.key"), &rogue_key.serialize_pem());

    let other_key = KeyPair::generate().expect("other key");
    write(&path("other.key"), &other_key.serialize_pem());
    Pki { dir }
}

/// Write `web.yml` into the PKI directory and load it.
fn web_config(pki: &Pki, yaml: &str) -> Result<WebConfig, WebError> {
    let path = pki.path("web.yml");
    write(&path, yaml);
    WebConfig::from_file(&path)
}

fn tls_options(pki: &Pki, extra: &str) -> ServerOptions {
    let yaml =
        format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{extra}");
    ServerOptions {
        web_config: Some(web_config(pki, &yaml).expect("web config")),
        ..options()
    }
}

// ---------------------------------------------------------------------------------------------
// Plain HTTP endpoints

#[test]
fn metrics_have_the_exposition_body_and_content_type() {
    let (server, addr) = start(options(), Fixed::new(true));
    let r = get(&format!("http://{addr}/metrics"));
    assert_status(&r, 200);
    assert_eq!(r.header("content-type").as_deref(), Some(OPENMETRICS));
    assert_eq!(r.body, BODY);
    // A query string does not change the path.
    assert_status(&get(&format!("http://{addr}/metrics?x=1")), 200);
    server.shutdown().expect("shutdown");
}

#[test]
fn ready_is_503_until_the_exposition_is_ready() {
    let exposition = Fixed::new(false);
    let (server, addr) = start(options(), exposition.clone());
    let url = format!("http://{addr}/-/ready");
    assert_status(&get(&url), 503);
    exposition.ready.store(true, Ordering::SeqCst);
    let r = get(&url);
    assert_status(&r, 200);
    let healthy = get(&format!("http://{addr}/-/healthy"));
    assert_status(&healthy, 200);
    assert_eq!(healthy.body, "OK\n");
    server.shutdown().expect("shutdown");
}

#[test]
fn landing_page_links_everything() {
    let opts = ServerOptions {
        telemetry_path: "/gpu-metrics".to_string(),
        landing: LandingInfo {
            name: "tessera-exporter".into(),
            description: "GPU telemetry <exporter>".into(),
            version: "9.8.7".into(),
            links: vec![LandingLink {
                address: "/docs".into(),
                text: "Docs".into(),
            }],
        },
        ..options()
    };
    let (server, addr) = start(opts, Fixed::new(true));
    let r = get(&format!("http://{addr}/"));
    assert_status(&r, 200);
    assert!(
        r.header("content-type")
            .unwrap_or_default()
            .starts_with("text/html"),
        "{r:#?}"
    );
    for needle in [
        "href=\"./gpu-metrics\"",
        "href=\"./-/healthy\"",
        "href=\"./-/ready\"",
        "href=\"./docs\"",
        "9.8.7",
        "GPU telemetry &lt;exporter&gt;",
    ] {
        assert!(r.body.contains(needle), "{needle} missing in {}", r.body);
    }
    assert_status(&get(&format!("http://{addr}/gpu-metrics")), 200);
    assert_status(&get(&format!("http://{addr}/metrics")), 404);
    server.shutdown().expect("shutdown");
}

#[test]
fn unknown_paths_are_404_and_other_methods_405() {
    let (server, addr) = start(options(), Fixed::new(true));
    assert_status(&get(&format!("http://{addr}/nope")), 404);
    assert_status(&get(&format!("http://{addr}/metrics/")), 404);
    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let r = curl(&["-X", method, &format!("http://{addr}/metrics")]);
        assert_status(&r, 405);
        assert_eq!(r.header("allow").as_deref(), Some("GET, HEAD"), "{r:#?}");
    }
    let head = curl(&["-I", &format!("http://{addr}/metrics")]);
    assert_status(&head, 200);
    assert_eq!(head.header("content-type").as_deref(), Some(OPENMETRICS));
    // curl -I prints the head where the body would go; no body follows it.
    assert!(!head.body.contains("tessera_up"), "{head:#?}");
    let length = BODY.len().to_string();
    assert_eq!(head.header("content-length"), Some(length), "{head:#?}");
    server.shutdown().expect("shutdown");
}

#[test]
fn several_listen_addresses_all_serve() {
    let opts = ServerOptions {
        listen: vec!["127.0.0.21:0".into(), "127.0.0.21:0".into()],
        ..options()
    };
    let server = Server::bind(opts, Fixed::new(true)).expect("bind");
    let addrs = server.local_addrs();
    assert_eq!(addrs.len(), 2);
    assert_ne!(addrs[0], addrs[1]);
    let running = server.spawn().expect("spawn");
    for addr in &addrs {
        assert_status(&get(&format!("http://{addr}/metrics")), 200);
    }
    running.shutdown().expect("shutdown");
    // After shutdown nothing listens any more.
    for addr in addrs {
        assert_stops_listening(addr);
    }
}

#[test]
fn bad_options_are_errors() {
    let bind = |opts: ServerOptions| Server::bind(opts, Fixed::new(true)).map(|_| ());
    for listen in ["nonsense", "127.0.0.1:99999", "::1:80", "[zz]:1"] {
        let e = bind(ServerOptions {
            listen: vec![listen.into()],
            ..options()
        })
        .expect_err(listen)
        .to_string();
        assert!(e.contains(listen), "{e}");
    }
    let e = bind(ServerOptions {
        listen: vec![],
        ..options()
    })
    .expect_err("no listen");
    assert!(e.to_string().contains("listen"), "{e}");
    for path in ["metrics", "/-/ready", "/-/healthy"] {
        let e = bind(ServerOptions {
            telemetry_path: path.into(),
            ..options()
        })
        .expect_err(path);
        assert!(e.to_string().contains("telemetry-path"), "{e}");
    }
    let e = bind(ServerOptions {
        request_timeout: Duration::ZERO,
        ..options()
    })
    .expect_err("zero timeout");
    assert!(e.to_string().contains("timeout"), "{e}");
    // A port in use.
    let (server, addr) = start(options(), Fixed::new(true));
    let e = bind(ServerOptions {
        listen: vec![addr.to_string()],
        ..options()
    })
    .expect_err("port in use");
    assert!(matches!(e, WebError::Bind { .. }), "{e}");
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
    server.shutdown().expect("shutdown");
}

// ---------------------------------------------------------------------------------------------
// max-requests, timeouts, malformed requests

#[test]
fn max_requests_answers_503_to_the_scrape_over_the_limit() {
    let gated = Arc::new(Gated::default());
    let opts = ServerOptions {
        max_requests: 1,
        ..options()
    };
    let (server, addr) = start(opts, gated.clone());
    let url = format!("http://{addr}/metrics");
    let first = {
        let url = url.clone();
        std::thread::spawn(move || get(&url))
    };
    gated.wait_started(1);
    let second = get(&url);
    assert_status(&second, 503);
    assert!(
        second
            .body
            .contains("Limit of concurrent requests reached (1)"),
        "{second:#?}"
    );
    // Other paths are not limited.
    assert_status(&get(&format!("http://{addr}/-/healthy")), 200);
    gated.release();
    assert_status(&first.join().expect("first scrape"), 200);
    // The slot is free again.
    assert_status(&get(&url), 200);
    server.shutdown().expect("shutdown");
}

#[test]
fn unlimited_max_requests_serves_concurrent_scrapes() {
    let gated = Arc::new(Gated::default());
    let opts = ServerOptions {
        max_requests: 0,
        ..options()
    };
    let (server, addr) = start(opts, gated.clone());
    let url = format!("http://{addr}/metrics");
    let scrapes: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || get(&url))
        })
        .collect();
    gated.wait_started(3);
    gated.release();
    for s in scrapes {
        assert_status(&s.join().expect("scrape"), 200);
    }
    server.shutdown().expect("shutdown");
}

#[test]
fn slow_clients_cannot_hold_the_server() {
    // Short enough to keep the test short, long enough that a loaded machine still answers the
    // normal scrape in time.
    let opts = ServerOptions {
        request_timeout: Duration::from_secs(3),
        ..options()
    };
    let (server, addr) = start(opts, Fixed::new(true));

    // Ten connections that send nothing.
    let silent: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    // Ten that trickle a request head, one byte at a time, faster than the timeout.
    let trickling: Vec<_> = (0..10)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connect");
            std::thread::spawn(move || {
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ");
                s.set_read_timeout(Some(Duration::from_millis(300)))
                    .expect("timeout");
                let deadline = Instant::now() + PATIENCE;
                let mut buf = [0u8; 1024];
                while Instant::now() < deadline {
                    if s.write_all(b"a").is_err() {
                        return true;
                    }
                    match s.read(&mut buf) {
                        Ok(_) => return true, // closed (0) or an error response
                        Err(e)
                            if e.kind() == std::io::ErrorKind::WouldBlock
                                || e.kind() == std::io::ErrorKind::TimedOut => {}
                        Err(_) => return true,
                    }
                }
                false
            })
        })
        .collect();
    // A keep-alive connection that goes idle after one request.
    let mut idle = TcpStream::connect(addr).expect("connect");
    idle.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");

    // A normal scrape still works while they are held.
    assert_status(&get(&format!("http://{addr}/metrics")), 200);

    for mut s in silent {
        read_until_closed(&mut s);
    }
    for t in trickling {
        assert!(
            t.join().expect("trickle thread"),
            "a trickling connection stayed open"
        );
    }
    let answer = read_until_closed(&mut idle);
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert_status(&get(&format!("http://{addr}/metrics")), 200);
    server.shutdown().expect("shutdown");
}

#[test]
fn a_render_that_takes_too_long_gets_503() {
    let gated = Arc::new(Gated::default());
    let opts = ServerOptions {
        request_timeout: Duration::from_secs(1),
        max_requests: 1,
        ..options()
    };
    let (server, addr) = start(opts, gated.clone());
    let r = get(&format!("http://{addr}/metrics"));
    assert_status(&r, 503);
    assert!(r.body.contains("timed out"), "{r:#?}");
    // The stuck render still holds the only slot.
    assert_status(&get(&format!("http://{addr}/metrics")), 503);
    gated.release();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = get(&format!("http://{addr}/metrics"));
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "{r:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    server.shutdown().expect("shutdown");
}

#[test]
fn shutdown_lets_a_running_scrape_finish() {
    let gated = Arc::new(Gated::default());
    let (server, addr) = start(options_on(22), gated.clone());
    let scrape = std::thread::spawn(move || get(&format!("http://{addr}/metrics")));
    gated.wait_started(1);
    let stopper = std::thread::spawn(move || server.shutdown());
    // Once the listener is closed, the shutdown is under way.
    assert_stops_listening(addr);
    gated.release();
    let r = scrape.join().expect("scrape");
    assert_status(&r, 200);
    assert_eq!(r.body, BODY);
    stopper.join().expect("stopper").expect("shutdown");
}

struct Panics;

impl Exposition for Panics {
    fn render(&self, _accept: Option<&str>) -> Rendered {
        panic!("render failed on purpose");
    }
    fn ready(&self) -> bool {
        true
    }
}

#[test]
fn a_panicking_render_is_a_500_and_the_server_lives_on() {
    let (server, addr) = start(options(), Arc::new(Panics));
    for _ in 0..2 {
        assert_status(&get(&format!("http://{addr}/metrics")), 500);
    }
    assert_status(&get(&format!("http://{addr}/-/healthy")), 200);
    server.shutdown().expect("shutdown");
}

#[test]
fn run_until_serves_on_the_callers_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let server = Server::bind(options_on(23), Fixed::new(true)).expect("bind");
    let addr = server.local_addrs()[0];
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let client = std::thread::spawn(move || {
        let r = get(&format!("http://{addr}/metrics"));
        let _ = stop_tx.send(());
        r
    });
    runtime
        .block_on(server.run_until(async {
            let _ = stop_rx.await;
        }))
        .expect("run_until");
    assert_status(&client.join().expect("client"), 200);
    assert_stops_listening(addr);
}

fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(request).expect("write");
    String::from_utf8_lossy(&read_until_closed(&mut s)).to_string()
}

#[test]
fn malformed_requests_get_4xx_and_the_server_keeps_serving() {
    let (server, addr) = start(options(), Fixed::new(true));
    let url = format!("http://{addr}/metrics");

    let garbage = raw_exchange(addr, b"\x01\x02garbage \xff\xfe\r\n\r\n");
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
    assert_status(&get(&url), 200);

    let bad_line = raw_exchange(addr, b"GET\r\n\r\n");
    assert!(bad_line.starts_with("HTTP/1.1 400"), "{bad_line}");

    let bad_version = raw_exchange(addr, b"GET /metrics HTTP/9.9\r\n\r\n");
    assert!(bad_version.starts_with("HTTP/1.1 4"), "{bad_version}");

    let mut many = b"GET /metrics HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..200 {
        many.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let too_many = raw_exchange(addr, &many);
    assert!(too_many.starts_with("HTTP/1.1 431"), "{too_many}");
    assert_status(&get(&url), 200);

    // One huge header: the server refuses it (431) or resets the connection, never 2xx.
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut huge = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 1 << 20));
    huge.extend_from_slice(b"\r\n\r\n");
    let _ = s.write_all(&huge);
    let answer = String::from_utf8_lossy(&read_until_closed(&mut s)).to_string();
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 4"),
        "{answer}"
    );
    assert_status(&get(&url), 200);
    server.shutdown().expect("shutdown");
}

/// A client that shuts down its sending side once its request is out (`nc -N`, some scripts) is
/// answered, even when the response is not ready by the time the server sees that EOF.
#[test]
fn a_half_closed_client_is_answered() {
    let gated = Arc::new(Gated::default());
    let (server, addr) = start(options(), gated.clone());
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("write");
    s.shutdown(std::net::Shutdown::Write).expect("half-close");
    gated.wait_started(1);
    // Give the server time to read the EOF while the render is still running.
    std::thread::sleep(Duration::from_millis(200));
    gated.release();
    let answer = String::from_utf8_lossy(&read_until_closed(&mut s)).to_string();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert!(answer.ends_with(BODY), "{answer:?}");
    server.shutdown().expect("shutdown");
}

#[test]
fn configured_headers_are_on_every_response() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("web.yml");
    write(
        &path,
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    \
         X-Content-Type-Options: nosniff\n",
    );
    let opts = ServerOptions {
        web_config: Some(WebConfig::from_file(&path).expect("config")),
        ..options()
    };
    let (server, addr) = start(opts, Fixed::new(true));
    for path in ["/metrics", "/", "/nope"] {
        let r = get(&format!("http://{addr}{path}"));
        assert_eq!(
            r.header("x-frame-options").as_deref(),
            Some("deny"),
            "{r:#?}"
        );
        assert_eq!(
            r.header("x-content-type-options").as_deref(),
            Some("nosniff"),
            "{r:#?}"
        );
    }
    server.shutdown().expect("shutdown");
}

// ---------------------------------------------------------------------------------------------
// Basic auth

#[test]
fn basic_auth_guards_every_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("web.yml");
    // Cost 4 keeps the test quick; the server does not care about the cost.
    let hash = bcrypt::hash("s3cret", 4).expect("hash");
    write(
        &path,
        &format!("basic_auth_users:\n  prometheus: '{hash}'\n  other: '{hash}'\n"),
    );
    let opts = ServerOptions {
        web_config: Some(WebConfig::from_file(&path).expect("config")),
        ..options()
    };
    let (server, addr) = start(opts, Fixed::new(true));
    let url = format!("http://{addr}/metrics");

    let ok = curl(&["-u", "prometheus:s3cret", &url]);
    assert_status(&ok, 200);
    assert_eq!(ok.body, BODY);
    // Sustained scrapes with the same credentials keep working (they hit the cache).
    for _ in 0..20 {
        assert_status(&curl(&["-u", "prometheus:s3cret", &url]), 200);
    }
    for (who, args) in [
        ("wrong password", vec!["-u", "prometheus:wrong"]),
        ("unknown user", vec!["-u", "nobody:s3cret"]),
        ("empty password", vec!["-u", "prometheus:"]),
        ("no credentials", vec![]),
    ] {
        let mut a = args.clone();
        a.push(&url);
        let r = curl(&a);
        assert_eq!(r.status, 401, "{who}: {r:#?}");
        assert_eq!(
            r.header("www-authenticate").as_deref(),
            Some("Basic"),
            "{who}"
        );
        assert!(!r.body.contains("tessera_up"), "{who}");
    }
    // A wrong password after the right one was cached is still refused.
    assert_status(&curl(&["-u", "prometheus:s3cret2", &url]), 401);
    for path in ["/", "/-/healthy", "/-/ready", "/nope"] {
        assert_status(&get(&format!("http://{addr}{path}")), 401);
    }
    assert_status(
        &curl(&["-u", "other:s3cret", &format!("http://{addr}/-/healthy")]),
        200,
    );
    server.shutdown().expect("shutdown");
}

// ---------------------------------------------------------------------------------------------
// TLS

#[test]
fn tls_serves_https_and_refuses_plain_http() {
    let pki = pki();
    let (server, addr) = start(tls_options(&pki, ""), Fixed::new(true));
    let https = format!("https://127.0.0.1:{}/metrics", addr.port());
    let ca = pki.p("ca.crt");

    let r = curl(&["--cacert", &ca, &https]);
    assert_status(&r, 200);
    assert_eq!(r.body, BODY);
    assert_eq!(
        r.http_version, "2",
        "HTTP/2 is negotiated by default: {r:#?}"
    );
    let r = curl(&["--cacert", &ca, "--http1.1", &https]);
    assert_status(&r, 200);
    assert_eq!(r.http_version, "1.1");

    // Plain HTTP to the TLS port: no metrics, Go's 400 answer.
    let plain = get(&format!("http://{addr}/metrics"));
    assert_ne!(plain.status, 200, "{plain:#?}");
    assert!(!plain.body.contains("tessera_up"), "{plain:#?}");
    assert_eq!(plain.status, 400, "{plain:#?}");
    // A client that does not trust the CA fails the handshake.
    let untrusted = get(&https);
    assert_ne!(untrusted.exit, 0, "{untrusted:#?}");
    // Garbage that looks like a TLS record, then nothing: the handshake fails, the server lives.
    let garbage = raw_exchange(addr, b"\x16\x03\x01\x00\x05hello");
    assert!(!garbage.contains("200"), "{garbage}");

    assert_status(&curl(&["--cacert", &ca, &https]), 200);
    server.shutdown().expect("shutdown");
}

#[test]
fn tls_handshake_must_finish_within_the_timeout() {
    let pki = pki();
    let opts = ServerOptions {
        request_timeout: Duration::from_secs(3),
        ..tls_options(&pki, "")
    };
    let (server, addr) = start(opts, Fixed::new(true));
    let mut silent = TcpStream::connect(addr).expect("connect");
    let mut half = TcpStream::connect(addr).expect("connect");
    half.write_all(b"\x16\x03\x01\x02\x00\x01").expect("write");
    let https = format!("https://127.0.0.1:{}/metrics", addr.port());
    assert_status(&curl(&["--cacert", &pki.p("ca.crt"), &https]), 200);
    read_until_closed(&mut silent);
    read_until_closed(&mut half);
    server.shutdown().expect("shutdown");
}

#[test]
fn http2_can_be_switched_off() {
    let pki = pki();
    let yaml = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
                http_server_config:\n  http2: false\n";
    let opts = ServerOptions {
        web_config: Some(web_config(&pki, yaml).expect("config")),
        ..options()
    };
    let (server, addr) = start(opts, Fixed::new(true));
    let r = curl(&[
        "--cacert",
        &pki.p("ca.crt"),
        "--http2",
        &format!("https://127.0.0.1:{}/metrics", addr.port()),
    ]);
    assert_status(&r, 200);
    assert_eq!(r.http_version, "1.1", "{r:#?}");
    server.shutdown().expect("shutdown");
}

#[test]
fn min_version_tls13_refuses_a_tls12_only_client() {
    let pki = pki();
    let (server, addr) = start(
        tls_options(&pki, "  min_version: TLS13\n"),
        Fixed::new(true),
    );
    let https = format!("https://127.0.0.1:{}/metrics", addr.port());
    let ca = pki.p("ca.crt");
    let old = curl(&["--cacert", &ca, "--tls-max", "1.2", &https]);
    assert_ne!(old.exit, 0, "{old:#?}");
    assert_ne!(old.status, 200, "{old:#?}");
    assert_status(&curl(&["--cacert", &ca, &https]), 200);
    server.shutdown().expect("shutdown");

    // And max_version TLS12 still serves TLS 1.2 clients.
    let (server, addr) = start(
        tls_options(&pki, "  max_version: TLS12\n"),
        Fixed::new(true),
    );
    let https = format!("https://127.0.0.1:{}/metrics", addr.port());
    assert_status(&curl(&["--cacert", &ca, "--tls-max", "1.2", &https]), 200);
    let new_only = curl(&["--cacert", &ca, "--tlsv1.3", &https]);
    assert_ne!(new_only.exit, 0, "{new_only:#?}");
    server.shutdown().expect("shutdown");
}

fn with_cert(pki: &Pki, name: &str, url: &str) -> Reply {
    curl(&[
        "--cacert",
        &pki.p("ca.crt"),
        "--cert",
        &pki.p(&format!("{name}.crt")),
        "--key",
        &pki.p(&format!("{name}.key")),
        url,
    ])
}

#[test]
fn require_and_verify_client_cert() {
    let pki = pki();
    let opts = tls_options(
        &pki,
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    );
    let (server, addr) = start(opts, Fixed::new(true));
    let url = format!("https://127.0.0.1:{}/metrics", addr.port());

    let none = curl(&["--cacert", &pki.p("ca.crt"), &url]);
    assert_ne!(none.status, 200, "{none:#?}");
    assert_ne!(none.exit, 0, "{none:#?}");
    let good = with_cert(&pki, "client", &url);
    assert_status(&good, 200);
    assert_eq!(good.body, BODY);
    let rogue = with_cert(&pki, "rogue", &url);
    assert_ne!(rogue.status, 200, "{rogue:#?}");
    assert_ne!(rogue.exit, 0, "{rogue:#?}");
    // TLS 1.2 clients are held to the same rule.
    let rogue12 = curl(&[
        "--cacert",
        &pki.p("ca.crt"),
        "--tls-max",
        "1.2",
        "--cert",
        &pki.p("rogue.crt"),
        "--key",
        &pki.p("rogue.key"),
        &url,
    ]);
    assert_ne!(rogue12.status, 200, "{rogue12:#?}");
    assert_status(&with_cert(&pki, "client", &url), 200);
    server.shutdown().expect("shutdown");
}

#[test]
fn verify_client_cert_if_given() {
    let pki = pki();
    let opts = tls_options(
        &pki,
        "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n",
    );
    let (server, addr) = start(opts, Fixed::new(true));
    let url = format!("https://127.0.0.1:{}/metrics", addr.port());
    assert_status(&curl(&["--cacert", &pki.p("ca.crt"), &url]), 200);
    assert_status(&with_cert(&pki, "client", &url), 200);
    assert_ne!(with_cert(&pki, "rogue", &url).status, 200);
    server.shutdown().expect("shutdown");
}

#[test]
fn require_any_client_cert() {
    let pki = pki();
    let opts = tls_options(&pki, "  client_auth_type: RequireAnyClientCert\n");
    let (server, addr) = start(opts, Fixed::new(true));
    let url = format!("https://127.0.0.1:{}/metrics", addr.port());
    assert_ne!(curl(&["--cacert", &pki.p("ca.crt"), &url]).status, 200);
    assert_status(&with_cert(&pki, "client", &url), 200);
    assert_status(&with_cert(&pki, "rogue", &url), 200);
    server.shutdown().expect("shutdown");
}

#[test]
fn tls_and_basic_auth_together() {
    let pki = pki();
    let hash = bcrypt::hash("pw", 4).expect("hash");
    let yaml = format!(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
         basic_auth_users:\n  prom: '{hash}'\n"
    );
    let opts = ServerOptions {
        web_config: Some(web_config(&pki, &yaml).expect("config")),
        ..options()
    };
    let (server, addr) = start(opts, Fixed::new(true));
    let url = format!("https://127.0.0.1:{}/metrics", addr.port());
    let ca = pki.p("ca.crt");
    assert_status(&curl(&["--cacert", &ca, &url]), 401);
    assert_status(&curl(&["--cacert", &ca, "-u", "prom:pw", &url]), 200);
    server.shutdown().expect("shutdown");
}

// ---------------------------------------------------------------------------------------------
// Invalid web config files

fn config_error(pki: &Pki, yaml: &str) -> String {
    let e = web_config(pki, yaml).expect_err(yaml).to_string();
    assert!(
        e.contains(&pki.p("web.yml")),
        "the message names the config file: {e}"
    );
    e
}

#[test]
fn invalid_web_configs_are_clear_errors() {
    let pki = pki();
    let tls = |cert: &str, key: &str| {
        format!("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    };

    let e = config_error(&pki, &tls("missing.crt", "server.key"));
    assert!(e.contains("tls_server_config.cert_file"), "{e}");
    assert!(e.contains(&pki.p("missing.crt")), "{e}");
    assert!(e.contains("cannot read"), "{e}");

    let e = config_error(&pki, &tls("server.crt", "missing.key"));
    assert!(e.contains("tls_server_config.key_file"), "{e}");
    assert!(e.contains(&pki.p("missing.key")), "{e}");

    write(&pki.path("garbage.pem"), "this is not PEM\n");
    let e = config_error(&pki, &tls("garbage.pem", "server.key"));
    assert!(e.contains("no certificate"), "{e}");
    assert!(e.contains(&pki.p("garbage.pem")), "{e}");
    let e = config_error(&pki, &tls("server.crt", "garbage.pem"));
    assert!(e.contains("no private key"), "{e}");

    write(
        &pki.path("broken.pem"),
        "-----BEGIN CERTIFICATE-----\n!!!! not base64 !!!!\n-----END CERTIFICATE-----\n",
    );
    let e = config_error(&pki, &tls("broken.pem", "server.key"));
    assert!(e.contains("bad PEM"), "{e}");

    // A key file that holds a certificate, and a certificate file that holds a key.
    let e = config_error(&pki, &tls("server.crt", "server.crt"));
    assert!(e.contains("no private key"), "{e}");
    let e = config_error(&pki, &tls("server.key", "server.key"));
    assert!(e.contains("no certificate"), "{e}");

    let e = config_error(&pki, &tls("server.crt", "other.key"));
    assert!(e.contains("does not match"), "{e}");
    assert!(e.contains(&pki.p("other.key")), "{e}");

    let e = config_error(&pki, "tls_server_config:\n  cert_file: server.crt\n");
    assert!(e.contains("key_file"), "{e}");

    let e = config_error(
        &pki,
        &format!(
            "{}  client_ca_file: ca.crt\n",
            tls("server.crt", "server.key")
        ),
    );
    assert!(e.contains("client_auth_type"), "{e}");
    let e = config_error(
        &pki,
        &format!(
            "{}  client_auth_type: RequireAndVerifyClientCert\n",
            tls("server.crt", "server.key")
        ),
    );
    assert!(e.contains("client_ca_file"), "{e}");
    let e = config_error(
        &pki,
        &format!(
            "{}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: garbage.pem\n",
            tls("server.crt", "server.key")
        ),
    );
    assert!(e.contains("tls_server_config.client_ca_file"), "{e}");
    assert!(e.contains("no certificate"), "{e}");
    let e = config_error(
        &pki,
        &format!(
            "{}  client_auth_type: Sometimes\n",
            tls("server.crt", "server.key")
        ),
    );
    assert!(e.contains("Sometimes"), "{e}");

    for (version, needle) in [("TLS11", "not supported"), ("SSL3", "unknown TLS version")] {
        let e = config_error(
            &pki,
            &format!(
                "{}  min_version: {version}\n",
                tls("server.crt", "server.key")
            ),
        );
        assert!(e.contains(needle), "{e}");
    }
    let e = config_error(
        &pki,
        &format!(
            "{}  min_version: TLS13\n  max_version: TLS12\n",
            tls("server.crt", "server.key")
        ),
    );
    assert!(e.contains("min_version"), "{e}");
    let e = config_error(
        &pki,
        &format!(
            "{}  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n",
            tls("server.crt", "server.key")
        ),
    );
    assert!(e.contains("no TLS 1.2 cipher suite"), "{e}");

    let e = config_error(&pki, "tls_server_config:\n  cert_file: a\n  keyfile: b\n");
    assert!(e.contains("keyfile"), "{e}");
    let e = config_error(&pki, "basic_auth_users:\n  alice: plaintext\n");
    assert!(e.contains("basic_auth_users.alice"), "{e}");
    assert!(e.contains("bcrypt"), "{e}");
    let e = config_error(&pki, "basic_auth_users: [a, b]\n");
    assert!(e.contains("basic_auth_users"), "{e}");
    let e = config_error(&pki, "tls_server_config: {cert_file: [\n");
    assert!(e.contains("line 1 column"), "{e}");
    let e = config_error(&pki, "http_server_config:\n  http2: maybe\n");
    assert!(e.contains("http2"), "{e}");
    // A long scalar instead of a map: the quote is clipped, the position is kept.
    let e = config_error(&pki, &format!("cert_file{}\n", "x".repeat(5000)));
    assert!(e.contains("at line 1 column 1"), "{e}");
    assert!(e.len() < 1500, "{} bytes: {e}", e.len());

    let missing = WebConfig::from_file(pki.path("nope.yml")).expect_err("missing file");
    assert!(missing.to_string().contains("nope.yml"), "{missing}");
}

#[test]
fn valid_web_configs_load() {
    let pki = pki();
    // Relative paths are relative to the config file, wherever the process runs.
    let c = web_config(
        &pki,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
         min_version: TLS12\n  max_version: TLS13\n  \
         cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_RSA_WITH_AES_128_CBC_SHA]\n  \
         prefer_server_cipher_suites: false\n  curve_preferences: [X25519, CurveP256, CurveP521]\n",
    )
    .expect("config");
    assert!(c.tls_enabled());
    assert_eq!(
        c.client_auth(),
        tessera_exporter::web::ClientAuth::RequireAndVerifyClientCert
    );
    // Absolute paths work too; inline PEM as well.
    let cert = std::fs::read_to_string(pki.path("server.crt")).expect("cert");
    let key = std::fs::read_to_string(pki.path("server.key")).expect("key");
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let c = web_config(
        &pki,
        &format!(
            "tls_server_config:\n  cert: |\n{}  key: |\n{}",
            indent(&cert),
            indent(&key)
        ),
    )
    .expect("inline config");
    assert!(c.tls_enabled());
    let c = web_config(
        &pki,
        &format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
            pki.p("server.crt"),
            pki.p("server.key")
        ),
    )
    .expect("absolute paths");
    assert!(c.tls_enabled());
}

#[test]
fn the_example_in_docs_web_md_loads() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/web.md"))
        .expect("docs/web.md");
    let start = doc.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let len = doc[start..].find("```").expect("end of the yaml block");
    let yaml = &doc[start..start + len];
    let pki = pki();
    std::fs::create_dir(pki.path("tls")).expect("mkdir");
    for (from, to) in [
        ("server.crt", "tls/server.crt"),
        ("server.key", "tls/server.key"),
        ("ca.crt", "tls/clients-ca.crt"),
    ] {
        std::fs::copy(pki.path(from), pki.path(to)).expect("copy");
    }
    let c = web_config(&pki, yaml).expect("the documented example");
    assert!(c.tls_enabled());
    assert!(c.basic_auth_enabled());
}
