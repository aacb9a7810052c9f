//! The bytes on the wire, read over a plain TCP socket: chunked watch streams of JSON lines,
//! `Status` bodies with the matching HTTP code.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use fake_kube::FakeKube;
use serde_json::Value;

/// One HTTP/1.1 request (`Connection: close`); the whole response as text.
fn raw(kube: &FakeKube, request_line: &str, token: Option<&str>) -> String {
    let mut s = TcpStream::connect(kube.url().trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{request_line} HTTP/1.1\r\nHost: fake\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn watch_streams_are_chunked_json_lines() {
    let kube = FakeKube::start();
    kube.add_node("gpu-1", &[("a", "1")]);
    kube.add_node("gpu-2", &[]);
    let text = raw(
        &kube,
        "GET /api/v1/nodes?&watch=true&timeoutSeconds=1&allowWatchBookmarks=true&resourceVersion=0",
        Some(kube.token()),
    );
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200 ok"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    // Chunks: size line, data; each event one JSON line.
    let events: Vec<Value> = body
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "BOOKMARK"]);
    assert_eq!(events[0]["object"]["kind"], "Node");
    assert_eq!(events[0]["object"]["apiVersion"], "v1");
    assert_eq!(
        events[2]["object"]["metadata"]["resourceVersion"],
        kube.resource_version().to_string()
    );
    assert!(
        body.ends_with("0\r\n\r\n"),
        "the last chunk ends the stream: {body:?}"
    );
}

#[test]
fn errors_are_status_objects_with_the_http_code() {
    let kube = FakeKube::start();
    let text = raw(&kube, "GET /api/v1/nodes", None);
    assert!(text.starts_with("HTTP/1.1 401 Unauthorized"), "{text}");
    let status: Value = serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["apiVersion"], "v1");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["code"], 401);

    let text = raw(&kube, "GET /api/v1/widgets", Some(kube.token()));
    assert!(text.starts_with("HTTP/1.1 404 Not Found"), "{text}");
    let status: Value = serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(
        kube.requests().len(),
        2,
        "every request is logged, authorized or not"
    );
}
