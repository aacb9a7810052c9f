//! `tessera report`'s delivery (docs/report.md, "Delivering the report") against real servers on
//! 127.0.0.1: a real SMTP server (PyPI aiosmtpd, installed by `scripts/test.sh`; these tests fail,
//! never skip, without it) keeping what it receives in a mailbox that Python's `mailbox`/`email`
//! parse — plain and STARTTLS with a private CA — and an HTTP server of this file (std
//! `TcpListener`, HTTP/1.1 with Content-Length, one request per connection) that plays a Slack or
//! Teams webhook, answers as scripted and keeps each request. Checked: the message's parts and
//! subject, the payloads field by field, that a second run sends nothing, and that a server down,
//! a refusal (401/403) and 5xx exit 3 with the reason and record nothing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::support::cli::run;
use crate::support::pki::Pki;

fn demo() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/demo-history");
    format!("history:{}", dir.display())
}

/// A port free a moment ago on 127.0.0.1.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `python3 -m aiosmtpd` keeping mail in `dir/mbox`, killed on drop.
struct Smtp {
    child: Child,
    port: u16,
    mbox: PathBuf,
}

impl Smtp {
    /// `extra`: aiosmtpd's TLS flags (`--tlscert`, `--tlskey`: STARTTLS required).
    fn start(dir: &Path, extra: &[&str]) -> Smtp {
        let port = free_port();
        let mbox = dir.join("mbox");
        let child = Command::new("python3")
            .args(["-m", "aiosmtpd", "-n", "-l"])
            .arg(format!("127.0.0.1:{port}"))
            .args(extra)
            .args(["-c", "aiosmtpd.handlers.Mailbox"])
            .arg(&mbox)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m aiosmtpd (scripts/test.sh installs aiosmtpd)");
        let mut s = Smtp { child, port, mbox };
        // Wait for the greeting: the server is up once it answers 220.
        for _ in 0..400 {
            if let Some(status) = s.child.try_wait().unwrap() {
                panic!("aiosmtpd exited ({status}): is it installed? (scripts/test.sh)");
            }
            if let Ok(c) = TcpStream::connect(("127.0.0.1", port)) {
                let mut line = String::new();
                if BufReader::new(c).read_line(&mut line).is_ok() && line.starts_with("220") {
                    return s;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = s.child.kill();
        panic!("aiosmtpd did not answer on 127.0.0.1:{port}");
    }

    /// Every message in the mailbox, as Python's `email` parses it.
    fn messages(&self) -> Vec<Value> {
        const SCRIPT: &str = r#"
import email, email.policy, json, mailbox, sys
out = []
parse = lambda f: email.message_from_binary_file(f, policy=email.policy.default)
for m in mailbox.Maildir(sys.argv[1], factory=parse, create=False):
    parts = []
    for p in m.walk():
        if p.is_multipart():
            parts.append({"type": p.get_content_type()})
            continue
        payload = p.get_payload(decode=True).decode(p.get_content_charset() or "utf-8")
        parts.append({"type": p.get_content_type(), "filename": p.get_filename(),
                      "disposition": p.get_content_disposition(), "body": payload})
    out.append({"subject": str(m["subject"]), "from": m["from"], "to": m["to"],
                "type": m.get_content_type(), "parts": parts})
print(json.dumps(out))
"#;
        let out = Command::new("python3")
            .args(["-c", SCRIPT])
            .arg(&self.mbox)
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request the webhook server received.
#[derive(Debug, Clone)]
struct Request {
    method: String,
    path: String,
    content_type: String,
    body: Value,
}

/// An HTTP server on 127.0.0.1 answering the scripted statuses in turn (the last one from then on),
/// keeping every request; stopped on drop.
struct Hook {
    port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut r = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut words = line.split_whitespace();
    let (method, path) = (words.next()?.to_string(), words.next()?.to_string());
    let (mut len, mut content_type) = (0usize, String::new());
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        match k.to_ascii_lowercase().as_str() {
            "content-length" => len = v.trim().parse().ok()?,
            "content-type" => content_type = v.trim().to_string(),
            _ => {}
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        content_type,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

impl Hook {
    fn start(answers: &[(u16, &'static str)]) -> Hook {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (reqs, halt, answers) = (requests.clone(), stop.clone(), answers.to_vec());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if halt.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let Some(req) = read_request(&mut stream) else {
                    continue;
                };
                let n = {
                    let mut all = reqs.lock().unwrap();
                    all.push(req);
                    all.len()
                };
                let (status, body) = answers[(n - 1).min(answers.len() - 1)];
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Hook {
            port,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// A file holding this server's webhook URL (with a secret path).
    fn url_file(&self, dir: &Path, name: &str) -> String {
        let p = dir.join(name);
        std::fs::write(
            &p,
            format!("http://127.0.0.1:{}/hooks/T0/B0/SECRET-{name}\n", self.port),
        )
        .unwrap();
        p.display().to_string()
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The archived report's JSON in `dir`.
fn archived_json(dir: &Path) -> (PathBuf, Value) {
    let p = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.extension().is_some_and(|e| e == "json")
                && p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("tessera-report-")
        })
        .expect("an archived report");
    let v = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    (p, v)
}

/// "tessera GPU report, <period>: " of the report `r` (its JSON).
fn subject_start(r: &Value) -> String {
    let s = |k: &str| r[k].as_str().unwrap().to_string();
    let period = tessera::times::period_title(&s("from"), &s("until"), &s("tz")).unwrap();
    format!("tessera GPU report, {period}: ")
}

const LINK: &str = "https://reports.example/gpu/{file}";

fn report_args<'a>(src: &'a str, archive: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "report",
        "--source",
        src,
        "--trend.weeks",
        "0",
        "--archive",
        archive,
        "--link",
        LINK,
    ];
    a.extend_from_slice(extra);
    a
}

#[test]
fn mail_reaches_a_real_smtp_server_with_html_text_and_json_and_is_not_sent_twice() {
    let dir = tempfile::tempdir().unwrap();
    let smtp = Smtp::start(dir.path(), &[]);
    let (src, archive) = (demo(), dir.path().join("reports"));
    let port = smtp.port.to_string();
    let archive_s = archive.display().to_string();
    let args = report_args(
        &src,
        &archive_s,
        &[
            "--mail-to",
            "ops@example.com",
            "--mail-to",
            "GPU Lead <Lead@Example.com>",
            "--mail-from",
            "tessera <tessera@example.com>",
            "--smtp.host",
            "127.0.0.1",
            "--smtp.port",
            &port,
            "--smtp.tls",
            "none",
        ],
    );
    let (code, _, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("delivered: mail to ops@example.com via 127.0.0.1"),
        "{err}"
    );
    let (json_path, report) = archived_json(&archive);
    let html = std::fs::read_to_string(json_path.with_extension("html")).unwrap();
    let html_name = json_path
        .with_extension("html")
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();

    let messages = smtp.messages();
    assert_eq!(messages.len(), 2, "{messages:?}");
    let mut to: Vec<&str> = messages.iter().map(|m| m["to"].as_str().unwrap()).collect();
    to.sort();
    assert_eq!(to, ["GPU Lead <Lead@Example.com>", "ops@example.com"]);
    for m in &messages {
        assert_eq!(m["from"], "tessera <tessera@example.com>");
        let subject = m["subject"].as_str().unwrap();
        assert!(subject.starts_with(&subject_start(&report)), "{subject}");
        let n = report["actions"].as_array().unwrap().len();
        assert!(
            subject.ends_with(&format!("a month to save ({n} actions)"))
                || (n == 0 && subject.ends_with("nothing to act on")),
            "{subject} ({n} actions)"
        );
        assert_eq!(m["type"], "multipart/mixed");
        let parts = m["parts"].as_array().unwrap();
        let types: Vec<&str> = parts.iter().map(|p| p["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "multipart/mixed",
                "multipart/alternative",
                "text/plain",
                "text/html",
                "application/json"
            ]
        );
        let text = parts[2]["body"].as_str().unwrap();
        assert!(
            text.starts_with(&format!(
                "The report: https://reports.example/gpu/{html_name}\n"
            )),
            "{}",
            &text[..200.min(text.len())]
        );
        assert!(text.contains("# tessera report"), "the Markdown report");
        assert_eq!(
            parts[3]["body"].as_str().unwrap().trim_end(),
            html.trim_end(),
            "the HTML part is the archived page"
        );
        assert_eq!(parts[4]["disposition"], "attachment");
        assert_eq!(
            parts[4]["filename"].as_str().unwrap(),
            json_path.file_name().unwrap().to_string_lossy()
        );
        let attached: Value = serde_json::from_str(parts[4]["body"].as_str().unwrap()).unwrap();
        assert_eq!(attached, report, "the attached JSON is the report");
    }
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(archive.join("tessera-sent.json")).unwrap())
            .unwrap();
    let mut targets: Vec<&str> = record["sent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["target"].as_str().unwrap())
        .collect();
    targets.sort();
    assert_eq!(targets, ["mail:lead@example.com", "mail:ops@example.com"]);
    assert_eq!(record["sent"][0]["until"], report["until"]);
    // The demo's four days, Monday 2 to Thursday 5 November.
    assert_eq!(record["sent"][0]["period"], "4d ending 2026-11-05 UTC");

    // The same report again: nothing is sent.
    let (code, _, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.matches("already delivered").count(), 2, "{err}");
    assert_eq!(smtp.messages().len(), 2, "no second message");
}

#[test]
fn starttls_with_a_private_ca_delivers_and_an_untrusted_certificate_is_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new();
    let smtp = Smtp::start(
        dir.path(),
        &[
            "--tlscert",
            &pki.p("server.crt"),
            "--tlskey",
            &pki.p("server.key"),
        ],
    );
    let (src, port) = (demo(), smtp.port.to_string());
    let archive = dir.path().join("reports").display().to_string();
    let base = [
        "--mail-to",
        "ops@example.com",
        "--mail-from",
        "tessera@example.com",
        "--smtp.host",
        "localhost",
        "--smtp.port",
        &port,
        "--delivery.retries",
        "0",
    ];
    // The built-in roots do not know the test CA: refused, not retried, nothing recorded.
    let (code, _, err) = run(&report_args(&src, &archive, &base));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("not delivered after 1 attempt(s): mail to ops@example.com via localhost")
            && err.to_lowercase().contains("certificate"),
        "{err}"
    );
    assert!(!dir.path().join("reports/tessera-sent.json").exists());
    assert!(smtp.messages().is_empty());

    let mut with_ca = base.to_vec();
    let ca = pki.p("ca.crt");
    with_ca.extend(["--smtp.tls", "starttls", "--smtp.tls.ca-file", &ca]);
    let (code, _, err) = run(&report_args(&src, &archive, &with_ca));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("(STARTTLS)"), "{err}");
    let messages = smtp.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["to"], "ops@example.com");
}

#[test]
fn slack_and_teams_payloads_are_posted_once_field_by_field() {
    let dir = tempfile::tempdir().unwrap();
    let slack = Hook::start(&[(200, "ok")]);
    let teams = Hook::start(&[(202, "")]);
    let (src, archive) = (demo(), dir.path().join("reports"));
    let archive_s = archive.display().to_string();
    let slack_file = slack.url_file(dir.path(), "slack-url");
    let teams_file = teams.url_file(dir.path(), "teams-url");
    // Two runs: the Slack file with the format its host implies, the Teams one named.
    let slack_args = report_args(&src, &archive_s, &["--webhook.url-file", &slack_file]);
    let teams_args = report_args(
        &src,
        &archive_s,
        &[
            "--webhook.url-file",
            &teams_file,
            "--webhook.format",
            "teams",
        ],
    );
    for args in [&slack_args, &teams_args] {
        let (code, _, err) = run(args);
        assert_eq!(code, 0, "{err}");
        assert!(!err.contains("SECRET"), "the URL is never printed: {err}");
    }
    let (json_path, report) = archived_json(&archive);
    let link = format!(
        "https://reports.example/gpu/{}",
        json_path
            .with_extension("html")
            .file_name()
            .unwrap()
            .to_string_lossy()
    );
    let title_start = subject_start(&report);
    let actions = report["actions"].as_array().unwrap();
    let first_action = actions.first().map(|a| a["what"].as_str().unwrap());

    let got = slack.requests();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str(), r.content_type.as_str()),
        ("POST", "/hooks/T0/B0/SECRET-slack-url", "application/json")
    );
    let b = &r.body;
    let text = b["text"].as_str().unwrap();
    assert!(text.starts_with(&title_start), "{text}");
    assert!(text.contains("\nTop actions:\n"), "{text}");
    assert!(!text.contains("\\n"), "line breaks are line breaks: {text}");
    assert!(
        text.ends_with(&format!("<{link}|Open the report>")),
        "{text}"
    );
    let blocks = b["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 4);
    assert_eq!(blocks[0]["type"], "header");
    assert_eq!(blocks[0]["text"]["type"], "plain_text");
    assert!(
        blocks[0]["text"]["text"]
            .as_str()
            .unwrap()
            .starts_with(&title_start)
    );
    assert_eq!(blocks[1]["type"], "section");
    assert_eq!(blocks[1]["text"]["type"], "mrkdwn");
    assert_eq!(
        blocks[1]["text"]["text"].as_str().unwrap().lines().count(),
        2,
        "the summary and the saving: {}",
        blocks[1]
    );
    assert!(
        blocks[1]["text"]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("{} GPU(s)", report["fleet"]["gpus"])),
        "{}",
        blocks[1]
    );
    let top = blocks[2]["text"]["text"].as_str().unwrap();
    assert!(top.starts_with("*Top actions*\n"), "{top}");
    match first_action {
        Some(what) => assert!(top.contains(&format!("1. {what}")), "{top} / {what}"),
        None => assert!(top.contains("Nothing to act on")),
    }
    assert_eq!(
        blocks[3]["text"]["text"],
        format!("<{link}|Open the report>")
    );

    let got = teams.requests();
    assert_eq!(got.len(), 1);
    let b = &got[0].body;
    assert_eq!(b["type"], "message");
    let att = &b["attachments"][0];
    assert_eq!(
        att["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    let card = &att["content"];
    assert_eq!(
        card["$schema"],
        "http://adaptivecards.io/schemas/adaptive-card.json"
    );
    assert_eq!(
        (card["type"].as_str(), card["version"].as_str()),
        (Some("AdaptiveCard"), Some("1.4"))
    );
    let body = card["body"].as_array().unwrap();
    assert!(
        body.iter()
            .all(|t| t["type"] == "TextBlock" && t["wrap"] == true)
    );
    assert_eq!(
        (body[0]["size"].as_str(), body[0]["weight"].as_str()),
        (Some("Large"), Some("Bolder"))
    );
    assert!(body[0]["text"].as_str().unwrap().starts_with(&title_start));
    assert_eq!(body[3]["text"], "Top actions");
    if let Some(what) = first_action {
        assert!(
            body[4]["text"]
                .as_str()
                .unwrap()
                .starts_with(&format!("1. {what}")),
            "{}",
            body[4]
        );
    }
    assert_eq!(card["actions"][0]["type"], "Action.OpenUrl");
    assert_eq!(card["actions"][0]["url"], link.as_str());

    // Again: both recorded for this period, nothing posted; the record holds no URL.
    for args in [&slack_args, &teams_args] {
        let (code, _, err) = run(args);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("already delivered"), "{err}");
    }
    assert_eq!((slack.requests().len(), teams.requests().len()), (1, 1));
    let record = std::fs::read_to_string(archive.join("tessera-sent.json")).unwrap();
    assert!(
        !record.contains("SECRET") && !record.contains("127.0.0.1"),
        "{record}"
    );
    assert!(
        record.contains("\"slack:") && record.contains("\"teams:"),
        "{record}"
    );
}

#[test]
fn a_server_down_a_refusal_or_5xx_exits_3_with_the_reason_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = demo();
    let record = dir.path().join("sent.json");
    let record_s = record.display().to_string();
    let attempt = |url_file: &str, retries: &str| {
        run(&[
            "report",
            "--source",
            &src,
            "--trend.weeks",
            "0",
            "--format",
            "json",
            "--webhook.url-file",
            url_file,
            "--sent-record",
            &record_s,
            "--delivery.retries",
            retries,
        ])
    };

    // Nobody listens: tried again, then exit 3.
    let down = dir.path().join("down");
    std::fs::write(&down, format!("http://127.0.0.1:{}/x", free_port())).unwrap();
    let (code, out, err) = attempt(&down.display().to_string(), "1");
    assert_eq!(code, 3, "{err}");
    assert!(out.contains("\"version\""), "the report is still written");
    assert!(
        err.contains("not delivered after 2 attempt(s): slack webhook at 127.0.0.1"),
        "{err}"
    );

    // 401 and 403: refusals, not tried again.
    for status in [401, 403] {
        let hook = Hook::start(&[(status, "invalid_token")]);
        let (code, _, err) = attempt(&hook.url_file(dir.path(), "refused"), "2");
        assert_eq!(code, 3, "{err}");
        assert!(
            err.contains("after 1 attempt(s)")
                && err.contains(&format!("HTTP {status} invalid_token: the webhook refused")),
            "{err}"
        );
        assert_eq!(hook.requests().len(), 1);
    }

    // 503 then 500: tried again once, both fail.
    let hook = Hook::start(&[(503, "busy"), (500, "broken")]);
    let (code, _, err) = attempt(&hook.url_file(dir.path(), "failing"), "1");
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("after 2 attempt(s)") && err.contains("HTTP 500 broken"),
        "{err}"
    );
    assert_eq!(hook.requests().len(), 2);
    assert!(!record.exists(), "nothing recorded as sent");

    // 503, then 200: the retry delivers and is recorded; the next run posts nothing.
    let hook = Hook::start(&[(503, "busy"), (200, "ok")]);
    let file = hook.url_file(dir.path(), "flaky");
    let (code, _, err) = attempt(&file, "1");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("(attempt 2)"), "{err}");
    let (code, _, err) = attempt(&file, "1");
    assert_eq!(code, 0, "{err}");
    assert_eq!(hook.requests().len(), 2);
    assert!(err.contains("already delivered"), "{err}");
}

#[test]
fn a_run_retried_later_the_same_day_is_the_same_period_and_the_next_day_another() {
    let dir = tempfile::tempdir().unwrap();
    let hook = Hook::start(&[(200, "ok")]);
    let (src, file) = (demo(), hook.url_file(dir.path(), "url"));
    let record = dir.path().join("sent.json").display().to_string();
    let report = |until: &str| {
        run(&[
            "report",
            "--source",
            &src,
            "--trend.weeks",
            "0",
            "--format",
            "json",
            "--until",
            until,
            "--webhook.url-file",
            &file,
            "--sent-record",
            &record,
        ])
    };
    // The data (and so the report) ends 40 minutes later on the retry: the same day's report.
    let (code, _, err) = report("2026-11-05T22:00:00Z");
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = report("2026-11-05T22:40:00Z");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("already delivered"), "{err}");
    assert_eq!(hook.requests().len(), 1);
    // A report ending on another day is another period.
    let (code, _, err) = report("2026-11-04T22:00:00Z");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("delivered: slack webhook"), "{err}");
    assert_eq!(hook.requests().len(), 2);
}

#[test]
fn bad_delivery_flags_exit_2_before_reading_data() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing-url");
    let missing_s = missing.display().to_string();
    let src = demo();
    let (code, _, err) = run(&[
        "report",
        "--source",
        &src,
        "--webhook.url-file",
        &missing_s,
        "--sent-record",
        "x.json",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--webhook.url-file") && err.contains("missing-url"),
        "{err}"
    );

    let url = dir.path().join("url");
    std::fs::write(&url, "https://user:pw@hooks.example/x").unwrap();
    let url_s = url.display().to_string();
    let (code, _, err) = run(&["report", "--source", &src, "--webhook.url-file", &url_s]);
    assert_eq!(code, 2);
    assert!(
        err.contains("user or password") && !err.contains("pw@"),
        "{err}"
    );

    std::fs::write(&url, "https://hooks.example/x").unwrap();
    let (code, _, err) = run(&["report", "--source", &src, "--webhook.url-file", &url_s]);
    assert_eq!(code, 2);
    assert!(err.contains("--sent-record"), "{err}");

    let (code, _, err) = run(&[
        "report",
        "--source",
        &src,
        "--mail-to",
        "ops@example.com",
        "--mail-from",
        "me",
        "--smtp.host",
        "127.0.0.1",
        "--sent-record",
        "x.json",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("bad --mail-from \"me\""), "{err}");
}

/// `--mail-owners` (docs/report.md, "Owners"): each owner of a team the owners file names gets
/// their team's part of the report (its team-table row, its actions, its findings; not another
/// team's), one message each; the `--mail-to` recipients get the whole report (an owner who is
/// one gets that, once); a contact that is not a mail address is named on stderr and not
/// mailed; a re-run sends nothing twice.
#[test]
fn mail_owners_sends_each_owner_their_teams_rows() {
    let dir = tempfile::tempdir().unwrap();
    let smtp = Smtp::start(dir.path(), &[]);
    let owners = dir.path().join("owners.toml");
    std::fs::write(
        &owners,
        "[owners]\nserving = \"ml-serving@example.com\"\nresearch = \"Research <leads@example.com>\"\n\
         docs = \"#docs-oncall\"\n\"slurm job 81234\" = \"ops@example.com\"\n",
    )
    .unwrap();
    let (src, archive) = (demo(), dir.path().join("reports"));
    let (port, archive_s, owners_s) = (
        smtp.port.to_string(),
        archive.display().to_string(),
        owners.display().to_string(),
    );
    let args = report_args(
        &src,
        &archive_s,
        &[
            "--owners",
            &owners_s,
            "--mail-owners",
            "--mail-to",
            "ops@example.com",
            "--mail-from",
            "tessera@example.com",
            "--smtp.host",
            "127.0.0.1",
            "--smtp.port",
            &port,
            "--smtp.tls",
            "none",
        ],
    );
    let (code, _, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("team docs's owner is not mailed"), "{err}");
    let messages = smtp.messages();
    let mut to: Vec<String> = messages
        .iter()
        .map(|m| m["to"].as_str().unwrap().to_string())
        .collect();
    to.sort();
    assert_eq!(
        to,
        [
            "Research <leads@example.com>",
            "ml-serving@example.com",
            "ops@example.com"
        ],
        "ops@example.com once, though it is also a team's owner"
    );
    let by_to = |addr: &str| -> &Value {
        messages
            .iter()
            .find(|m| m["to"].as_str().unwrap().contains(addr))
            .unwrap()
    };
    let part = |m: &Value, ty: &str| -> String {
        m["parts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["type"] == ty)
            .unwrap_or_else(|| panic!("no {ty} part: {m}"))["body"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let teams_of = |m: &Value| -> (Value, Vec<String>) {
        let doc: Value = serde_json::from_str(&part(m, "application/json")).unwrap();
        let teams = doc["teams"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["team"].as_str().unwrap().to_string())
            .collect();
        (doc, teams)
    };
    // The whole report to --mail-to.
    let (_, all) = teams_of(by_to("ops@example.com"));
    assert!(
        all.len() >= 3 && all.contains(&"serving".to_string()),
        "{all:?}"
    );
    // research's owner: research's row, its actions and findings, nothing of serving.
    let research = by_to("leads@example.com");
    assert!(
        research["subject"]
            .as_str()
            .unwrap()
            .contains("for research"),
        "{}",
        research["subject"]
    );
    let (doc, teams) = teams_of(research);
    assert_eq!(teams, ["research"]);
    let actions = doc["actions"].as_array().unwrap();
    assert!(
        actions.iter().any(|a| a["kind"] == "scale_to_zero"),
        "research's scale-to-zero action: {actions:?}"
    );
    for a in actions {
        assert!(a["teams"].to_string().contains("research"), "{a}");
    }
    for m in doc["idle_models"].as_array().unwrap() {
        assert_eq!(m["team"], "research", "{m}");
    }
    for ty in ["text/plain", "text/html"] {
        let body = part(research, ty);
        assert!(
            body.contains("leads@example.com"),
            "{ty}: research's own row"
        );
        assert!(
            !body.contains("ml-serving@example.com"),
            "{ty}: serving's row in research's mail"
        );
    }
    // serving's owner: serving's row, not research's.
    let serving = by_to("ml-serving@example.com");
    let (_, teams) = teams_of(serving);
    assert_eq!(teams, ["serving"]);
    for ty in ["text/plain", "text/html"] {
        let body = part(serving, ty);
        assert!(body.contains("ml-serving@example.com"), "{ty}");
        assert!(
            !body.contains("leads@example.com"),
            "{ty}: research's row in serving's mail"
        );
    }
    let (code, _, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(smtp.messages().len(), 3, "nothing twice: {err}");
}
