//! Property tests of the web server's parsers (issue 17): the web config file
//! (`WebConfig::from_yaml`, exporter-toolkit's format) and the HTTP/1 request line and headers as
//! the real server sees them, over a TCP socket on 127.0.0.1.
//!
//! Web config inputs: arbitrary bytes; soups of the format's tokens (its keys, bcrypt hashes of
//! good and bad cost, YAML punctuation, anchors, tags, document markers, odd characters);
//! well-formed configs of random users (repeated or not, good and bad hashes), headers (allowed or
//! not, repeated in any case) and TLS settings, checked against a model; and those with random
//! edits. Invariants:
//!
//! - no panic;
//! - the peak of live heap bytes of the parsing thread (a counting global allocator) stays within
//!   `CONFIG_ALLOC_PER_BYTE` × input length + `CONFIG_ALLOC_BASE`;
//! - an error names the input (its file) and where: a line and column, or the key
//!   (`tls_server_config.…`, `basic_auth_users`, `http_server_config`) and quotes at most a few
//!   thousand bytes;
//! - a well-formed config is accepted exactly when the model says it is valid, and when an entry
//!   of `basic_auth_users` or `headers` is at fault the error gives the line of a faulty entry.
//!
//! HTTP inputs, sent as raw bytes to a server without and one with basic auth: well-formed
//! requests (GET/HEAD/other methods, the server's paths and others, random headers, right and
//! wrong credentials), those with random edits, soups of HTTP tokens (CR, LF, NUL, obs-text,
//! `Transfer-Encoding`, `Content-Length` extremes, absolute targets) and arbitrary bytes.
//! Invariants:
//!
//! - the server answers with a well-formed status line, or closes the connection, within
//!   `HTTP_PATIENCE` once the client stops sending (no hang), and keeps serving (`/-/healthy`);
//! - a well-formed request gets exactly the status the routing rules give (200, 401, 404, 405);
//!   any request gets 2xx only for GET or HEAD (with the right credentials on the auth server),
//!   and never 500;
//! - the heap of the server's threads grows by at most `HTTP_ALLOC_BASE` +
//!   `HTTP_ALLOC_PER_BYTE` × request length while handling one (these tests run one at a time;
//!   the test's own threads are not counted: see `HTTP_ALLOC_BASE`).
//!
//! hyper answers malformed requests with a bare status (400, 431, 501, 505…) and no body, so the
//! HTTP errors name neither the input nor a position; the status is the check.
//!
//! Cases per property: `PROPTEST_CASES` (default 1,000; docs/testing.md says how to run longer).

use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine as _;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};

#[path = "../../core/tests/support/counting.rs"]
mod counting;
use tessera_exporter::web::{
    Exposition, Rendered, RunningServer, Server, ServerOptions, WebConfig,
};

// ---- Allocation counting: live bytes and their peak, per thread and for the server's threads.

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// What the server's threads allocate (the tokio runtime's workers and blocking pool, and the
/// thread that runs it: all named [`SERVER_THREAD`]).
static SERVER_LIVE: AtomicIsize = AtomicIsize::new(0);
static SERVER_PEAK: AtomicIsize = AtomicIsize::new(0);

/// The name the web server gives all its threads.
const SERVER_THREAD: &str = "tessera-web";

// Whether this thread is one of the server's: unknown (0), finding out (1), no (2), yes (3).
thread_local! {
    static SERVER_CLASS: Cell<u8> = const { Cell::new(0) };
}

fn on_server_thread() -> bool {
    SERVER_CLASS
        .try_with(|c| match c.get() {
            0 => {
                // `current()` may allocate: while it runs, this thread counts as not the
                // server's (state 1), so the allocation does not recurse here.
                c.set(1);
                let server = std::thread::current().name() == Some(SERVER_THREAD);
                c.set(if server { 3 } else { 2 });
                server
            }
            state => state == 3,
        })
        .unwrap_or(false)
}

fn note(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
    if on_server_thread() {
        let v = SERVER_LIVE.fetch_add(delta, Ordering::Relaxed) + delta;
        SERVER_PEAK.fetch_max(v, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: counting::Counting = counting::Counting {
    note,
    realloc_holds_both: false,
};

/// The stated bound of a web config parse: serde_yaml_ng holds every event of the document (up to
/// ~100 bytes per input byte, see `input_limits`), plus libyaml's buffers.
const CONFIG_ALLOC_PER_BYTE: usize = 128;
const CONFIG_ALLOC_BASE: usize = 256 << 10;

/// The stated bound of one request, counted on the server's threads only (see [`server_peak`]):
///
/// - per byte of request: hyper's read buffer holds the head (at most ~400 KiB, then 431). It
///   grows by doubling, and while it grows the old and the new buffer are both live, so up to ~3
///   bytes per byte, plus header names hyper copies out of it: 4 (measured: at most ~5.3 per byte
///   for a 25 KB head, inside the base plus 4 per byte);
/// - fixed: hyper's first 8 KiB read buffer and 8 KiB write buffer, the connection's task and
///   state, the request and response, the rendered body, a blocking-pool thread if one is
///   started: 128 KiB (measured: at most ~36 KiB).
///
/// Not counted: what the test's own threads allocate. An earlier version of this test counted
/// the whole process, and failed now and then at ~800 KB for a 2 KB request: the other
/// properties' threads generate their next inputs (token soups of up to a megabyte) while one
/// property holds [`serial`], and those allocations were charged to the server.
const HTTP_ALLOC_PER_BYTE: usize = 4;
const HTTP_ALLOC_BASE: usize = 128 << 10;

/// How long the server may take to answer or close once the client has sent everything.
const HTTP_PATIENCE: Duration = Duration::from_secs(10);

/// `f`'s result and the peak of heap bytes the current thread held beyond what was live before.
fn thread_peak<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, (peak - start).max(0) as usize)
}

/// `f`'s result and the peak of heap bytes the server's threads held beyond what they held
/// before. What they free meanwhile of what they held before (the previous connection's last
/// buffers) lowers the count: that can hide part of an excess, never make one up.
fn server_peak<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = SERVER_LIVE.load(Ordering::Relaxed);
    SERVER_PEAK.store(start, Ordering::Relaxed);
    let out = f();
    let peak = SERVER_PEAK.load(Ordering::Relaxed);
    (out, (peak - start).max(0) as usize)
}

/// The properties run one at a time, so that the server handles one request at a time and its
/// heap peak is that request's.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    }
}

// =============================================================================================
// Web config

const ORIGIN: &str = "/props/web.yml";

/// A good hash (cost 4) per password "p0".."p3", made once.
static HASHES: LazyLock<Vec<String>> = LazyLock::new(|| {
    (0..4)
        .map(|i| bcrypt::hash(format!("p{i}"), 4).expect("hash"))
        .collect()
});

fn with_cost(hash: &str, cost: &str) -> String {
    format!("{}{cost}{}", &hash[..4], &hash[6..])
}

/// What the parser says about `text`, with its peak heap; checks the invariants every input
/// shares (error names the file and a position or key, is short; allocation bound).
fn parse_config(text: &str) -> Result<Result<(), String>, TestCaseError> {
    let (result, peak) = thread_peak(|| {
        WebConfig::from_yaml(text, Path::new(ORIGIN), Path::new("/nonexistent-props"))
    });
    let bound = CONFIG_ALLOC_PER_BYTE * text.len() + CONFIG_ALLOC_BASE;
    prop_assert!(
        peak <= bound,
        "{peak} bytes held for {} bytes of input (bound {bound})",
        text.len()
    );
    match result {
        Ok(_) => Ok(Ok(())),
        Err(e) => {
            let m = e.to_string();
            prop_assert!(m.contains(ORIGIN), "the error names the file: {m}");
            let positioned = m.contains(" at line ")
                || m.contains("line ")
                || m.contains("(the whole file)")
                || m.contains("tls_server_config")
                || m.contains("http_server_config")
                || m.contains("basic_auth_users");
            prop_assert!(positioned, "the error says where: {m}");
            prop_assert!(m.len() <= 4000, "{} bytes of error: {m:.200}", m.len());
            Ok(Err(m))
        }
    }
}

const CONFIG_TOKENS: &[&str] = &[
    "tls_server_config",
    "http_server_config",
    "basic_auth_users",
    "cert_file",
    "key_file",
    "cert",
    "key",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
    "http2",
    "headers",
    "X-Frame-Options",
    "x-frame-options",
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "Server",
    "deny",
    "nosniff",
    "TLS12",
    "TLS13",
    "TLS11",
    "X25519",
    "CurveP521",
    "RequireAndVerifyClientCert",
    "prometheus",
    "alice",
    "a:b",
    "true",
    "false",
    "maybe",
    "~",
    "null",
    "0",
    "-1",
    "1e400",
    ":",
    ": ",
    "- ",
    "-",
    "[",
    "]",
    "{",
    "}",
    ",",
    "?",
    "'",
    "\"",
    "\\",
    "#",
    "|",
    ">",
    "&a ",
    "*a",
    "!!str ",
    "!!binary ",
    "<<: ",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "\n",
    "\n  ",
    "\n    ",
    "  ",
    "\t",
    "\r",
    "\u{85}",
    "\u{2028}",
    "\u{feff}",
    "é",
    "\0",
    "$2y$",
    "$2b$99$",
];

fn hash_token() -> impl Strategy<Value = String> {
    (0..4usize, 0..4usize).prop_map(|(i, kind)| {
        let h = &HASHES[i];
        match kind {
            0 => h.clone(),
            1 => with_cost(h, "99"),
            2 => with_cost(h, "03"),
            _ => h[..h.len() - 1].to_string(),
        }
    })
}

fn config_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            8 => prop::sample::select(CONFIG_TOKENS).prop_map(str::to_string),
            1 => hash_token(),
        ],
        0..200,
    )
    .prop_map(|t| t.concat())
}

/// A user of a generated config: name, hash, and whether the hash is usable.
#[derive(Debug, Clone)]
struct GenUser {
    name: &'static str,
    hash: String,
    good: bool,
}

fn gen_user() -> impl Strategy<Value = GenUser> {
    (
        prop::sample::select(&["prometheus", "alice", "bob", "a:b", "\"alice\"", "'bob'"][..]),
        0..4usize,
        0..5usize,
    )
        .prop_map(|(name, i, kind)| {
            let h = &HASHES[i];
            let (hash, good) = match kind {
                0 | 1 => (h.clone(), true),
                2 => (with_cost(h, "99"), false),
                3 => (with_cost(h, "32"), false),
                _ => ("plaintext".to_string(), false),
            };
            GenUser { name, hash, good }
        })
}

/// The user name a YAML key stands for.
fn unquote(name: &str) -> &str {
    name.trim_matches(|c| c == '"' || c == '\'')
}

#[derive(Debug, Clone)]
struct GenHeader {
    name: &'static str,
    value: &'static str,
}

fn gen_header() -> impl Strategy<Value = GenHeader> {
    (
        prop::sample::select(
            &[
                "X-Frame-Options",
                "x-frame-options",
                "X-Content-Type-Options",
                "Strict-Transport-Security",
                "Content-Security-Policy",
                "Server",
            ][..],
        ),
        prop::sample::select(&["deny", "sameorigin", "nosniff", "max-age=1", "allow"][..]),
    )
        .prop_map(|(name, value)| GenHeader { name, value })
}

fn header_ok(h: &GenHeader) -> bool {
    match h.name.to_ascii_lowercase().as_str() {
        "x-frame-options" => h.value == "deny" || h.value == "sameorigin",
        "x-content-type-options" => h.value == "nosniff",
        "strict-transport-security" | "content-security-policy" => true,
        _ => false,
    }
}

/// A well-formed config (block style), with what the model expects of it.
#[derive(Debug, Clone)]
struct GenConfig {
    users: Option<Vec<GenUser>>,
    http2: Option<&'static str>,
    headers: Option<Vec<GenHeader>>,
    /// TLS keys given (all point at missing files).
    tls: Option<Vec<&'static str>>,
    /// Section order.
    users_first: bool,
}

fn gen_config() -> impl Strategy<Value = GenConfig> {
    (
        prop::option::of(prop::collection::vec(gen_user(), 0..5)),
        prop::option::of(prop::sample::select(&["true", "false", "maybe"][..])),
        prop::option::of(prop::collection::vec(gen_header(), 0..4)),
        prop::option::weighted(
            0.2,
            prop::collection::vec(
                prop::sample::select(&["cert_file", "key_file", "min_version"][..]),
                0..3,
            ),
        ),
        any::<bool>(),
    )
        .prop_map(|(users, http2, headers, tls, users_first)| GenConfig {
            users,
            http2,
            headers,
            tls,
            users_first,
        })
}

impl GenConfig {
    /// The text, and the lines (1-based) of the faulty user and header entries.
    fn render(&self) -> (String, Vec<usize>) {
        let mut lines: Vec<String> = Vec::new();
        let mut faulty = Vec::new();
        let users = |lines: &mut Vec<String>, faulty: &mut Vec<usize>| {
            if let Some(users) = &self.users {
                lines.push(if users.is_empty() {
                    "basic_auth_users: {}".into()
                } else {
                    "basic_auth_users:".into()
                });
                let mut seen = std::collections::HashSet::new();
                for u in users {
                    lines.push(format!("  {}: '{}'", u.name, u.hash));
                    let dup = !seen.insert(unquote(u.name));
                    if dup || !u.good || u.name.contains(':') {
                        faulty.push(lines.len());
                    }
                }
            }
        };
        let http = |lines: &mut Vec<String>, faulty: &mut Vec<usize>| {
            if self.http2.is_none() && self.headers.is_none() {
                return;
            }
            lines.push("http_server_config:".into());
            if let Some(v) = self.http2 {
                lines.push(format!("  http2: {v}"));
            }
            if let Some(headers) = &self.headers {
                lines.push(if headers.is_empty() {
                    "  headers: {}".into()
                } else {
                    "  headers:".into()
                });
                let mut seen = std::collections::HashSet::new();
                for h in headers {
                    lines.push(format!("    {}: {}", h.name, h.value));
                    let dup = !seen.insert(h.name.to_ascii_lowercase());
                    if dup || !header_ok(h) {
                        faulty.push(lines.len());
                    }
                }
            }
        };
        if self.users_first {
            users(&mut lines, &mut faulty);
            http(&mut lines, &mut faulty);
        } else {
            http(&mut lines, &mut faulty);
            users(&mut lines, &mut faulty);
        }
        if let Some(keys) = &self.tls {
            lines.push(if keys.is_empty() {
                "tls_server_config: {}".into()
            } else {
                "tls_server_config:".into()
            });
            let mut seen = std::collections::HashSet::new();
            for k in keys {
                if seen.insert(*k) {
                    let v = if *k == "min_version" {
                        "TLS12"
                    } else {
                        "missing.pem"
                    };
                    lines.push(format!("  {k}: {v}"));
                }
            }
        }
        let mut text = lines.join("\n");
        text.push('\n');
        (text, faulty)
    }

    /// Whether the model accepts it.
    fn valid(&self, faulty: &[usize]) -> bool {
        faulty.is_empty()
            && self.http2 != Some("maybe")
            && self.tls.as_ref().is_none_or(|k| k.is_empty())
    }
}

/// 1 to 8 random edits: delete, insert or replace a token-sized piece, duplicate or drop a line.
fn edit(text: String) -> impl Strategy<Value = String> {
    let len = text.len().max(1);
    prop::collection::vec(
        (
            0..5u8,
            0..len,
            prop::sample::select(CONFIG_TOKENS).prop_map(str::to_string),
        ),
        1..8,
    )
    .prop_map(move |edits| {
        let mut t = text.clone();
        for (kind, at, token) in edits {
            let mut at = at.min(t.len());
            while !t.is_char_boundary(at) {
                at -= 1;
            }
            match kind {
                0 => {
                    let mut end = (at + 3).min(t.len());
                    while !t.is_char_boundary(end) {
                        end += 1;
                    }
                    t.replace_range(at..end, "");
                }
                1 => t.insert_str(at, &token),
                2 => {
                    let mut end = (at + token.len()).min(t.len());
                    while !t.is_char_boundary(end) {
                        end += 1;
                    }
                    t.replace_range(at..end, &token);
                }
                3 | 4 => {
                    let lines: Vec<&str> = t.lines().collect();
                    if lines.is_empty() {
                        continue;
                    }
                    let i = at % lines.len();
                    let mut out: Vec<&str> = Vec::new();
                    for (j, l) in lines.iter().enumerate() {
                        if j != i || kind == 3 {
                            out.push(l);
                        }
                        if j == i && kind == 3 {
                            out.push(l);
                        }
                    }
                    t = out.join("\n") + "\n";
                }
                _ => unreachable!(),
            }
        }
        t
    })
}

proptest! {
    #![proptest_config(config(cases()))]

    #[test]
    fn web_config_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _serial = serial();
        let _ = parse_config(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn web_config_token_soup(text in config_soup()) {
        let _serial = serial();
        let _ = parse_config(&text)?;
    }

    #[test]
    fn web_config_well_formed_matches_the_model(c in gen_config()) {
        let _serial = serial();
        let (text, faulty) = c.render();
        let got = parse_config(&text)?;
        prop_assert_eq!(got.is_ok(), c.valid(&faulty), "{}\n{:?}", text, got);
        if let Err(m) = got
            && !faulty.is_empty()
            && !m.contains("http2")
        {
            let line = m
                .split(" at line ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse::<usize>().ok());
            prop_assert!(
                line.is_some_and(|l| faulty.contains(&l)),
                "the error names a faulty entry's line {:?}: {}\n{}", faulty, m, text
            );
        }
    }

    #[test]
    fn web_config_edited(text in gen_config().prop_flat_map(|c| edit(c.render().0))) {
        let _serial = serial();
        let _ = parse_config(&text)?;
    }
}

// =============================================================================================
// HTTP request line and headers

const BODY: &str = "# TYPE tessera_up gauge\ntessera_up 1\n# EOF\n";
const USER: &str = "prometheus";
const PASSWORD: &str = "s3cret";

struct Fixed;

impl Exposition for Fixed {
    fn render(&self, _accept: Option<&str>) -> Rendered {
        Rendered {
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body: BODY.into(),
        }
    }
    fn ready(&self) -> bool {
        true
    }
}

/// Two servers for the whole binary: plain, and with basic auth (cost 4).
struct Servers {
    plain: SocketAddr,
    auth: SocketAddr,
    _running: Vec<RunningServer>,
    _dir: tempfile::TempDir,
}

static SERVERS: LazyLock<Servers> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("web.yml");
    let hash = bcrypt::hash(PASSWORD, 4).expect("hash");
    std::fs::write(&path, format!("basic_auth_users:\n  {USER}: '{hash}'\n")).expect("write");
    let start = |web_config: Option<WebConfig>| {
        let running = Server::bind(
            ServerOptions {
                listen: vec!["127.0.0.1:0".into()],
                web_config,
                ..ServerOptions::default()
            },
            Arc::new(Fixed),
        )
        .expect("bind")
        .spawn()
        .expect("spawn");
        let addr = running.local_addrs()[0];
        (running, addr)
    };
    let (plain_server, plain) = start(None);
    let (auth_server, auth) = start(Some(WebConfig::from_file(&path).expect("config")));
    Servers {
        plain,
        auth,
        _running: vec![plain_server, auth_server],
        _dir: dir,
    }
});

/// Send `bytes`, stop sending, and read until the server closes: the answer, or an error when it
/// neither answers nor closes within `HTTP_PATIENCE`.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(HTTP_PATIENCE))
        .map_err(|e| e.to_string())?;
    // The server may close early (a bad request line): then writing fails, which is fine.
    let _ = s.write_all(bytes);
    let _ = s.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return Err(format!(
                    "no answer and no close within {HTTP_PATIENCE:?}; got {:?}",
                    String::from_utf8_lossy(&out)
                ));
            }
            // Reset: closed.
            Err(_) => return Ok(out),
        }
    }
}

/// The status codes of the responses in `answer` (HTTP/1.1 serves pipelined requests one after
/// the other, so a soup of several gets several). Every response starts with `HTTP/1.x NNN `;
/// the server's bodies never contain `HTTP/1.`.
fn statuses(answer: &[u8]) -> Result<Vec<u16>, String> {
    let text = String::from_utf8_lossy(answer);
    if text.is_empty() {
        return Ok(Vec::new());
    }
    if !text.starts_with("HTTP/1.") {
        return Err(format!("not a status line at the start: {text:?}"));
    }
    let mut out = Vec::new();
    for (at, _) in text.match_indices("HTTP/1.") {
        let line = &text[at..];
        let status = line
            .strip_prefix("HTTP/1.1 ")
            .or_else(|| line.strip_prefix("HTTP/1.0 "))
            .and_then(|r| r.get(..3))
            .and_then(|c| c.parse::<u16>().ok())
            .filter(|c| (100..600).contains(c))
            .ok_or_else(|| {
                format!(
                    "not a status line: {:?} in {text:?}",
                    &line[..line.len().min(40)]
                )
            })?;
        out.push(status);
    }
    Ok(out)
}

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// A well-formed request head.
#[derive(Debug, Clone)]
struct Head {
    method: &'static str,
    target: String,
    version: &'static str,
    headers: Vec<(String, String)>,
    /// `Some(true)`: the right credentials; `Some(false)`: wrong ones; `None`: none.
    credentials: Option<bool>,
    /// Sent to the auth server.
    to_auth: bool,
}

const PATHS: &[&str] = &[
    "/metrics",
    "/",
    "/-/healthy",
    "/-/ready",
    "/nope",
    "/metrics/",
    "/METRICS",
    "//metrics",
    "/-/",
];

/// Header names that change how the request is framed or answered, left out of well-formed
/// requests (the soups have them).
const FRAMING: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "expect",
    "upgrade",
    "te",
    "authorization",
    "keep-alive",
];

fn token() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(
            &b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~"[..],
        ),
        1..30,
    )
    .prop_map(|b| String::from_utf8(b).expect("ascii"))
}

fn field_value() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(
            &b" \tabcdefghijklmnopqrstuvwxyzABC0123456789!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"[..],
        ),
        0..200,
    )
    .prop_map(|b| String::from_utf8(b).expect("ascii").trim().to_string())
}

fn head() -> impl Strategy<Value = Head> {
    (
        prop::sample::select(&["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"][..]),
        prop::sample::select(PATHS),
        prop::option::of("[a-z0-9=&%]{0,40}"),
        prop::sample::select(&["HTTP/1.1", "HTTP/1.0"][..]),
        prop::collection::vec(
            (token(), field_value()).prop_filter("framing headers", |(n, _)| {
                !FRAMING.contains(&n.to_ascii_lowercase().as_str())
            }),
            0..20,
        ),
        prop::option::of(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(
            |(method, path, query, version, headers, credentials, to_auth)| Head {
                method,
                target: match query {
                    Some(q) => format!("{path}?{q}"),
                    None => path.to_string(),
                },
                version,
                headers,
                credentials,
                to_auth,
            },
        )
}

impl Head {
    fn bytes(&self) -> Vec<u8> {
        let mut r = format!("{} {} {}\r\n", self.method, self.target, self.version);
        r.push_str("Host: tessera\r\n");
        for (n, v) in &self.headers {
            r.push_str(&format!("{n}: {v}\r\n"));
        }
        match self.credentials {
            Some(true) => r.push_str(&format!("Authorization: {}\r\n", basic(USER, PASSWORD))),
            Some(false) => r.push_str(&format!("Authorization: {}\r\n", basic(USER, "wrong"))),
            None => {}
        }
        r.push_str("Connection: close\r\n\r\n");
        r.into_bytes()
    }

    /// The status the routing rules give.
    fn expected(&self) -> u16 {
        if self.to_auth && self.credentials != Some(true) {
            return 401;
        }
        let path = self.target.split('?').next().unwrap_or("");
        if !["/metrics", "/", "/-/healthy", "/-/ready"].contains(&path) {
            return 404;
        }
        if self.method == "GET" || self.method == "HEAD" {
            200
        } else {
            405
        }
    }
}

const HTTP_TOKENS: &[&str] = &[
    "GET",
    "HEAD",
    "POST",
    "get",
    "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "CONNECT",
    " ",
    "  ",
    "\t",
    "/",
    "/metrics",
    "/-/healthy",
    "*",
    "http://tessera/metrics",
    "?",
    "#",
    "%00",
    "%",
    "HTTP/1.1",
    "HTTP/1.0",
    "HTTP/2",
    "HTTP/9.9",
    "HTTP/1.1 ",
    "\r\n",
    "\n",
    "\r",
    "\r\n\r\n",
    ":",
    ": ",
    "Host",
    "Content-Length: ",
    "Content-Length: 5",
    "Content-Length: -1",
    "Content-Length: 99999999999999999999",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: gzip, chunked",
    "0\r\n\r\n",
    "Connection: close",
    "Connection: keep-alive",
    "Expect: 100-continue",
    "Upgrade: h2c",
    "Authorization: Basic ",
    "Authorization: Basic cHJvbWV0aGV1czpzM2NyZXQ=",
    "Authorization: basic !!!",
    "Authorization: Bearer x",
    "Accept: application/openmetrics-text",
    "\0",
    "\u{7f}",
    "é",
    "\u{ff}",
    "==",
    "x",
];

fn http_soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            10 => prop::sample::select(HTTP_TOKENS).prop_map(|t| t.as_bytes().to_vec()),
            1 => prop::collection::vec(any::<u8>(), 0..8),
            1 => (1..20_000usize).prop_map(|n| vec![b'a'; n]),
        ],
        0..60,
    )
    .prop_map(|t| t.concat())
}

/// 1 to 6 random byte edits of a well-formed request.
fn http_edited() -> impl Strategy<Value = (Vec<u8>, bool)> {
    (
        head(),
        prop::collection::vec((0..4u8, any::<prop::sample::Index>(), any::<u8>()), 1..6),
    )
        .prop_map(|(h, edits)| {
            let mut b = h.bytes();
            for (kind, at, byte) in edits {
                if b.is_empty() {
                    b.push(byte);
                    continue;
                }
                let i = at.index(b.len());
                match kind {
                    0 => {
                        b.remove(i);
                    }
                    1 => b.insert(i, byte),
                    2 => b[i] = byte,
                    _ => {
                        let special = [b'\r', b'\n', b' ', b':', 0u8, 0x80];
                        b.insert(i, special[usize::from(byte) % special.len()]);
                    }
                }
            }
            (b, h.to_auth)
        })
}

/// The invariants of any request: answered with status lines or closed, in time; 2xx only for a
/// GET or HEAD (with credentials on the auth server); never 500; heap bounded.
fn check_any(bytes: &[u8], to_auth: bool) -> Result<Vec<u16>, TestCaseError> {
    let servers = &*SERVERS;
    let addr = if to_auth { servers.auth } else { servers.plain };
    let (answer, peak) = server_peak(|| exchange(addr, bytes));
    let answer = answer.map_err(TestCaseError::fail)?;
    let bound = HTTP_ALLOC_BASE + HTTP_ALLOC_PER_BYTE * bytes.len();
    prop_assert!(
        peak <= bound,
        "{peak} bytes of heap for a {}-byte request (bound {bound})",
        bytes.len()
    );
    let codes = statuses(&answer).map_err(TestCaseError::fail)?;
    for &c in &codes {
        prop_assert!(c != 500, "500 for {:?}", String::from_utf8_lossy(bytes));
        if (200..300).contains(&c) {
            // hyper skips empty lines before a request line, as RFC 9112 allows.
            let start = bytes
                .iter()
                .position(|&b| b != b'\r' && b != b'\n')
                .map_or(&[][..], |i| &bytes[i..]);
            prop_assert!(
                start.starts_with(b"GET ") || start.starts_with(b"HEAD "),
                "{c} for {:?}",
                String::from_utf8_lossy(bytes)
            );
            if to_auth {
                let text = String::from_utf8_lossy(bytes).to_ascii_lowercase();
                prop_assert!(
                    text.contains("authorization"),
                    "{c} without credentials: {text:?}"
                );
            }
        }
    }
    Ok(codes)
}

fn still_serving() -> Result<(), TestCaseError> {
    for addr in [SERVERS.plain, SERVERS.auth] {
        let a = exchange(
            addr,
            format!(
                "GET /-/healthy HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nConnection: \
                 close\r\n\r\n",
                basic(USER, PASSWORD)
            )
            .as_bytes(),
        )
        .map_err(TestCaseError::fail)?;
        prop_assert_eq!(statuses(&a).map_err(TestCaseError::fail)?, vec![200]);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(cases()))]

    #[test]
    fn http_well_formed_requests_get_the_routing_status(h in head()) {
        let _serial = serial();
        let codes = check_any(&h.bytes(), h.to_auth)?;
        prop_assert_eq!(codes, vec![h.expected()], "{:?}", String::from_utf8_lossy(&h.bytes()));
    }

    #[test]
    fn http_edited_requests((bytes, to_auth) in http_edited()) {
        let _serial = serial();
        check_any(&bytes, to_auth)?;
    }

    #[test]
    fn http_token_soup(bytes in http_soup(), to_auth in any::<bool>()) {
        let _serial = serial();
        check_any(&bytes, to_auth)?;
    }

    #[test]
    fn http_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2000), to_auth in any::<bool>()) {
        let _serial = serial();
        check_any(&bytes, to_auth)?;
    }
}

/// After every property above, both servers still answer.
#[test]
fn http_servers_keep_serving() {
    let _serial = serial();
    still_serving().expect("serving");
    // Something the properties send a lot of, then check again.
    for _ in 0..50 {
        let _ = exchange(SERVERS.plain, b"\x16\x03\x01garbage\r\n\r\n");
    }
    still_serving().expect("still serving");
}
