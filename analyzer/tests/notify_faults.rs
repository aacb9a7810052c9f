//! `tessera notify` when Alertmanager is down, slow or answers errors (a port nobody listens on,
//! and [`FakeServer`]: scripted answers or none), `--dry-run` contacting nothing, and bad flags:
//! a clear message, exit 2 when nothing was sent, 3 when the POST may have been applied in part;
//! never a panic or a hang.

use std::path::PathBuf;

use super::support::alertmanager::{FakeServer, Reply};
use super::support::cli::run;

fn demo() -> String {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    format!("history:{}", repo.join("fixtures/demo-history").display())
}

fn notify(url: &str, extra: &[&str]) -> (i32, String, String) {
    let src = demo();
    let mut args = vec!["notify", "--source", &src, "--alertmanager.url", url];
    args.extend_from_slice(extra);
    run(&args)
}

/// Answers GET /api/v2/alerts with `held` and POSTs with `post`.
fn server(held: &'static str, post: (u16, &'static str)) -> FakeServer {
    FakeServer::start(move |r| {
        if r.method == "GET" {
            Reply::Answer(200, held.to_string())
        } else {
            Reply::Answer(post.0, post.1.to_string())
        }
    })
}

fn no_panic(err: &str) {
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn nobody_listening_sends_nothing_and_exits_2() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (code, out, err) = notify(&format!("http://127.0.0.1:{port}"), &[]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("reading tessera's alerts from")
            && err.contains("nothing was sent (no alert fired or resolved)"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    no_panic(&err);
}

#[test]
fn an_error_answer_or_garbage_to_the_get_sends_nothing() {
    for (status, body, want) in [
        (500, "internal", "HTTP 500: internal"),
        (401, "unauthorized", "HTTP 401"),
        (
            200,
            "<html>not json",
            "not an Alertmanager API v2 list of alerts",
        ),
    ] {
        let s = FakeServer::start(move |_| Reply::Answer(status, body.to_string()));
        let (code, _, err) = notify(&s.url, &[]);
        assert_eq!(code, 2, "{status}: {err}");
        assert!(
            err.contains(want) && err.contains("nothing was sent"),
            "{err}"
        );
        let reqs = s.requests();
        assert_eq!(reqs.len(), 1, "{reqs:?}");
        assert_eq!(reqs[0].method, "GET");
        assert!(
            reqs[0].target.starts_with("/api/v2/alerts?")
                && reqs[0].target.contains("filter=source%3D%22tessera%22"),
            "{}",
            reqs[0].target
        );
        no_panic(&err);
    }
}

#[test]
fn a_server_that_never_answers_times_out_and_sends_nothing() {
    let s = FakeServer::start(|_| Reply::Hang);
    let (code, _, err) = notify(&s.url, &["--alertmanager.timeout", "1s"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nothing was sent"), "{err}");
    assert!(err.to_lowercase().contains("timeout"), "{err}");
    assert!(s.requests().iter().all(|r| r.method == "GET"));
}

#[test]
fn a_failed_post_says_whether_alertmanager_may_have_stored_it() {
    // 5xx: not known → exit 3; 401: nothing stored → exit 2. One POST either way, with the
    // findings and the resolution of a held alert that is no longer a finding.
    const HELD: &str = r#"[{"labels":{"alertname":"TesseraIdleLoaded","source":"tessera","detector":"idle_loaded","finding_id":"idle_loaded-0000000000000000","severity":"warning"},"annotations":{"summary":"old"},"startsAt":"2026-11-01T00:00:00.000Z","endsAt":"2030-01-01T00:00:00.000Z","fingerprint":"x","status":{"state":"active"}}]"#;
    for (status, code_want, words) in [
        (503, 3, "may have stored some or all of them"),
        (401, 2, "nothing was stored"),
    ] {
        let s = server(HELD, (status, "no"));
        let (code, out, err) = notify(&s.url, &[]);
        assert_eq!(code, code_want, "{status}: {out}\n{err}");
        assert!(
            err.contains(&format!(
                "sending 2 firing and 1 resolved alert(s) to {}",
                s.url
            )) && err.contains(&format!("HTTP {status}"))
                && err.contains(words),
            "{err}"
        );
        let posts: Vec<_> = s
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .collect();
        assert_eq!(posts.len(), 1);
        let body: serde_json::Value = serde_json::from_str(&posts[0].body).unwrap();
        let body = body.as_array().unwrap();
        assert_eq!(body.len(), 3);
        assert_eq!(
            body[2]["labels"]["finding_id"],
            "idle_loaded-0000000000000000"
        );
        assert_eq!(body[2]["startsAt"], "2026-11-01T00:00:00.000Z");
        assert_eq!(body[2]["annotations"]["summary"], "old");
        no_panic(&err);
    }
    // A held alert with another tessera's label is not resolved; its prefix path is kept.
    const OTHER: &str = r#"[{"labels":{"source":"tessera","detector":"idle_loaded","finding_id":"x","cluster":"b"},"startsAt":"2026-11-01T00:00:00.000Z"}]"#;
    let s = server(OTHER, (200, ""));
    let (code, _, err) = notify(&format!("{}/am/", s.url), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("and 0 resolution(s)"), "{err}");
    let reqs = s.requests();
    assert!(
        reqs.iter()
            .all(|r| r.target.starts_with("/am/api/v2/alerts")),
        "{reqs:?}"
    );
}

#[test]
fn dry_run_prints_the_alerts_and_contacts_nothing() {
    let s = FakeServer::start(|_| Reply::Answer(500, "must not be called".into()));
    let (code, out, err) = notify(&s.url, &["--dry-run", "--min-severity", "info"]);
    assert_eq!(code, 0, "{err}");
    let alerts: serde_json::Value = serde_json::from_str(&out).unwrap();
    let alerts = alerts.as_array().unwrap();
    assert_eq!(alerts.len(), 6);
    assert!(alerts.iter().all(|a| a["labels"]["source"] == "tessera"));
    assert!(err.contains("nothing was sent"), "{err}");
    assert!(s.requests().is_empty(), "{:?}", s.requests());
}

#[test]
fn bad_flags_are_refused_before_anything_is_read_or_sent() {
    let s = FakeServer::start(|_| Reply::Answer(500, "must not be called".into()));
    for (flags, want) in [
        (vec!["--ttl", "30s"], "bad --ttl"),
        (vec!["--label", "team=x"], "one of tessera's own labels"),
        (vec!["--label", "a-b=x"], "is not a label name"),
        (vec!["--label", "c=x", "--label", "c=y"], "given twice"),
        (vec!["--generator-url", "no scheme"], "bad --generator-url"),
        (
            vec!["--alertmanager.basic-auth", "u:/nonexistent/pw"],
            "cannot read the basic auth password file",
        ),
    ] {
        let (code, _, err) = notify(&s.url, &flags);
        assert_eq!(code, 2, "{flags:?}: {err}");
        assert!(err.contains(want), "{flags:?}: {err}");
        no_panic(&err);
    }
    let (code, _, err) = notify("ftp://x", &[]);
    assert_eq!(code, 2);
    assert!(err.contains("bad --alertmanager.url"), "{err}");
    assert!(s.requests().is_empty());
}
