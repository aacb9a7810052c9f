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

/// `tessera notify` on the demo history (older than --evidence.max-age: with
/// --allow-stale-evidence).
fn notify(url: &str, extra: &[&str]) -> (i32, String, String) {
    let src = demo();
    let mut args = vec![
        "notify",
        "--source",
        &src,
        "--alertmanager.url",
        url,
        "--allow-stale-evidence",
    ];
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

/// An alert of tessera's in Alertmanager's JSON (`gettableAlert`), with `extra` labels.
fn held_alert(finding: &str, extra: &[(&str, &str)]) -> serde_json::Value {
    let mut labels = serde_json::json!({
        "alertname": "TesseraIdleLoaded",
        "source": "tessera",
        "detector": "idle_loaded",
        "finding_id": finding,
        "severity": "warning",
    });
    for (k, v) in extra {
        labels[*k] = serde_json::Value::from(*v);
    }
    serde_json::json!({
        "labels": labels,
        "annotations": {"summary": "old"},
        "startsAt": "2026-11-01T00:00:00.000Z",
        "endsAt": "2030-01-01T00:00:00.000Z",
        "fingerprint": "x",
        "status": {"state": "active"},
    })
}

#[test]
fn a_redirect_is_an_error_and_is_never_followed() {
    // A proxy or an ingress answering 3xx: the POST is not turned into a GET elsewhere (nor
    // re-sent elsewhere), and nothing is reported as sent.
    const HELD: &str = "[]";
    for status in [301, 302, 303, 307, 308] {
        let s = FakeServer::start(move |r| {
            if r.target.starts_with("/elsewhere") {
                Reply::Answer(200, "[]".into())
            } else if r.method == "GET" {
                Reply::Answer(200, HELD.into())
            } else {
                Reply::Redirect(status, "/elsewhere/api/v2/alerts".into())
            }
        });
        let (code, out, err) = notify(&s.url, &[]);
        assert_eq!(code, 2, "{status}: {out}\n{err}");
        assert!(
            err.contains(&format!("HTTP {status}"))
                && err.contains("redirect")
                && err.contains("/elsewhere/api/v2/alerts")
                && err.contains("nothing was stored"),
            "{status}: {err}"
        );
        assert!(!err.contains("sent 2 firing"), "{status}: {err}");
        let reqs = s.requests();
        let methods: Vec<(&str, &str)> = reqs
            .iter()
            .map(|r| (r.method.as_str(), r.target.split('?').next().unwrap()))
            .collect();
        assert_eq!(
            methods,
            [("GET", "/api/v2/alerts"), ("POST", "/api/v2/alerts")],
            "{status}"
        );
        no_panic(&err);

        // A redirected GET: nothing is posted anywhere.
        let s = FakeServer::start(move |r| {
            if r.target.starts_with("/elsewhere") {
                Reply::Answer(200, "[]".into())
            } else {
                Reply::Redirect(status, "/elsewhere/api/v2/alerts".into())
            }
        });
        let (code, _, err) = notify(&s.url, &[]);
        assert_eq!(code, 2, "{status}: {err}");
        assert!(
            err.contains(&format!("HTTP {status}"))
                && err.contains("redirect")
                && err.contains("nothing was sent"),
            "{status}: {err}"
        );
        let reqs = s.requests();
        assert_eq!(reqs.len(), 1, "{reqs:?}");
        assert_eq!(reqs[0].method, "GET");
    }
}

#[test]
fn credentials_in_the_url_are_refused_and_never_printed() {
    let s = FakeServer::start(|_| Reply::Answer(200, "[]".into()));
    let host = s.url.trim_start_matches("http://");
    const SECRET: &str = "hunter2-s3cret";
    for url in [
        format!("http://alice:{SECRET}@{host}"),
        format!("https://alice:{SECRET}@{host}/alertmanager/"),
        format!("http://alice:{SECRET}%40x@{host}"),
        format!("http://{SECRET}@{host}"),
        format!("http://alice:{SECRET}/x@{host}"),
        format!("ftp://alice:{SECRET}@{host}"),
        format!("alice:{SECRET}@{host}"),
    ] {
        for extra in [&[][..], &["--dry-run"][..]] {
            let (code, out, err) = notify(&url, extra);
            assert_eq!(code, 2, "{url} {extra:?}: {out}\n{err}");
            assert!(
                !out.contains(SECRET) && !err.contains(SECRET) && !err.contains("s3cret"),
                "{url} {extra:?}: the secret was printed:\n{out}\n{err}"
            );
            assert!(err.contains("--alertmanager.url"), "{url}: {err}");
            assert!(err.contains("--alertmanager.basic-auth"), "{url}: {err}");
            no_panic(&err);
        }
    }
    assert!(s.requests().is_empty(), "{:?}", s.requests());
}

#[test]
fn a_server_that_ignores_the_filter_gets_only_this_tessera_s_alerts_resolved() {
    // An Alertmanager (or a proxy in front of one) that ignores `filter` answers every alert it
    // holds. Only this run's own alerts — source="tessera", this run's --label values, tessera's
    // alertname and finding id for the detector, no other label — are resolved.
    let ours = held_alert("idle_loaded-0000000000000000", &[("cluster", "a")]);
    let no_source = {
        let mut a = held_alert("idle_loaded-3333333333333333", &[("cluster", "a")]);
        a["labels"].as_object_mut().unwrap().remove("source");
        a
    };
    let held = serde_json::Value::Array(vec![
        ours.clone(),
        // Another cluster's tessera.
        held_alert("idle_loaded-1111111111111111", &[("cluster", "b")]),
        // A tessera without --label.
        held_alert("idle_loaded-2222222222222222", &[]),
        // Not tessera's: no source label, another source, another alertname, a finding id that
        // is not the detector's, one that is not a finding id.
        no_source,
        held_alert(
            "idle_loaded-4444444444444444",
            &[("cluster", "a"), ("source", "other")],
        ),
        held_alert(
            "idle_loaded-5555555555555555",
            &[("cluster", "a"), ("alertname", "GpuIdle")],
        ),
        held_alert("consolidation-6666666666666666", &[("cluster", "a")]),
        held_alert("idle_loaded-7777", &[("cluster", "a")]),
    ])
    .to_string();
    let held: &'static str = Box::leak(held.into_boxed_str());
    let s = server(held, (200, ""));
    let (code, out, err) = notify(&s.url, &["--label", "cluster=a"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("and 1 resolution(s)"), "{err}");
    let posts: Vec<_> = s
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts.len(), 1);
    let body: serde_json::Value = serde_json::from_str(&posts[0].body).unwrap();
    let resolved: Vec<&serde_json::Value> = body
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["annotations"]["summary"] == "old")
        .collect();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0]["labels"], ours["labels"]);
    // The firing alerts carry the labels that prove them tessera's.
    for a in body.as_array().unwrap() {
        assert_eq!(a["labels"]["source"], "tessera");
        assert_eq!(a["labels"]["cluster"], "a");
    }
}

/// A CSV source (in `dir`) of one pod holding 2 GiB and running nothing for two hours, one row a
/// minute, the last row ending at `end_s` (unix seconds).
fn idle_csv(dir: &std::path::Path, end_s: i64) -> String {
    let mut csv = String::from("timestamp,entity,metric,value,kind,node,uuid,pod,namespace\n");
    let end_s = end_s - end_s.rem_euclid(60);
    for i in (0..=120).rev() {
        let ts = end_s - i * 60;
        for (m, v) in [
            ("memory_used_bytes", "2147483648"),
            ("sm_active_ratio", "0"),
        ] {
            csv.push_str(&format!(
                "{ts},101,{m},{v},process,n1,GPU-1,idle-pod,team-a\n"
            ));
        }
    }
    let path = dir.join(format!("idle-{end_s}.csv"));
    std::fs::write(&path, csv).unwrap();
    format!("csv:{}", path.display())
}

/// A tessera alert Alertmanager holds whose finding is in none of these sources: a run acting
/// on them resolves it.
const HELD_GONE: &str = r#"[{"labels":{"alertname":"TesseraIdleLoaded","source":"tessera","detector":"idle_loaded","finding_id":"idle_loaded-0000000000000000","severity":"warning"},"annotations":{"summary":"old"},"startsAt":"2026-11-01T00:00:00.000Z","endsAt":"2030-01-01T00:00:00.000Z","fingerprint":"x","status":{"state":"active"}}]"#;

fn posts(s: &FakeServer) -> Vec<serde_json::Value> {
    s.requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect()
}

#[test]
fn stale_or_future_evidence_is_refused_before_anything_is_sent_or_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let now_s = chrono::Utc::now().timestamp();
    let s = server(HELD_GONE, (200, ""));
    let stale = |src: &str, extra: &[&str]| {
        let mut args = vec!["notify", "--source", src, "--alertmanager.url", &s.url];
        args.extend_from_slice(extra);
        run(&args)
    };
    // The demo history ends in early November 2026, data from three hours ago, and data dated
    // 2099: each refused, Alertmanager not contacted (the held alert is not resolved).
    let demo = demo();
    let three_hours = idle_csv(dir.path(), now_s - 3 * 3600);
    let future = idle_csv(dir.path(), 4_070_908_800); // 2099-01-01
    for (src, extra, want) in [
        (&demo, &[][..], "more than --evidence.max-age 1h"),
        (
            &three_hours,
            &["--detector", "idle_loaded"][..],
            "more than --evidence.max-age 1h",
        ),
        (
            &three_hours,
            &["--detector", "idle_loaded", "--evidence.max-age", "2h"][..],
            "more than --evidence.max-age 2h",
        ),
        (
            &future,
            &["--detector", "idle_loaded"][..],
            "after the clock",
        ),
        (
            &future,
            &["--detector", "idle_loaded", "--evidence.max-age", "1000w"][..],
            "this machine's clock or the data is wrong",
        ),
    ] {
        let (code, out, err) = stale(src, extra);
        assert_eq!(code, 2, "{src} {extra:?}: {out}\n{err}");
        assert!(
            err.contains(want)
                && err.contains("nothing was sent")
                && err.contains("--allow-stale-evidence"),
            "{src} {extra:?}: {err}"
        );
        assert!(out.is_empty(), "{out}");
        assert!(s.requests().is_empty(), "{:?}", s.requests());
        no_panic(&err);
    }
    // Three hours old is fresh enough for --evidence.max-age 4h: the finding fires and the held
    // alert resolves.
    let (code, out, err) = stale(
        &three_hours,
        &["--detector", "idle_loaded", "--evidence.max-age", "4h"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("and 1 resolution(s)"), "{err}");
    // --allow-stale-evidence acts on the demo history (a replay of old data on purpose).
    let (code, _, err) = stale(&demo, &["--allow-stale-evidence"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(posts(&s).len(), 2);
}

#[test]
fn fresh_evidence_fires_and_resolves_without_an_override() {
    let dir = tempfile::tempdir().unwrap();
    let src = idle_csv(dir.path(), chrono::Utc::now().timestamp());
    let s = server(HELD_GONE, (200, ""));
    let (code, out, err) = run(&[
        "notify",
        "--source",
        &src,
        "--alertmanager.url",
        &s.url,
        "--detector",
        "idle_loaded",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("sent 1 firing alert(s) (1 new, 0 renewed")
            && err.contains("and 1 resolution(s)"),
        "{err}"
    );
    let posts = posts(&s);
    assert_eq!(posts.len(), 1);
    let body = posts[0].as_array().unwrap();
    assert_eq!(body.len(), 2);
    assert_eq!(body[0]["labels"]["pod"], "idle-pod");
    assert_eq!(
        body[1]["labels"]["finding_id"],
        "idle_loaded-0000000000000000"
    );
}
