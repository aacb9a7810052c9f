//! Issue 53: a `prometheus:` source spills each node partition's rows into a folder of the
//! temporary directory (`tessera-spill-*`, `cli/source.rs`), which `main` removes when the
//! command is done: also when the command exits 3 (here `tessera notify`, whose POST to
//! Alertmanager may have been applied). The fake Prometheus of `prometheus_http.rs` sees the
//! folder while the command reads (so the test knows where it was made), and the folder the test
//! gives as `TMPDIR` is empty once the command has exited.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::prometheus_http::{BUSY, matrix_for, names_body, serve};
use super::support::alertmanager::{FakeServer, Reply};
use super::support::cli::tessera_with;

/// The `tessera-spill-*` folders in `dir`.
fn spills(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("tessera-spill-")
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_spill_folder_is_removed_after_an_exit_3() {
    let tmp = tempfile::tempdir().unwrap();
    let tmpdir = tmp.path().join("tmp");
    std::fs::create_dir(&tmpdir).unwrap();
    // The spill folders the fake Prometheus saw while it answered.
    let seen: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let prometheus = {
        let (seen, tmpdir) = (Arc::clone(&seen), tmpdir.clone());
        serve(Box::new(move |req, _| {
            seen.lock().unwrap().extend(spills(&tmpdir));
            Some(if req.path.ends_with("/label/__name__/values") {
                (200, names_body(&[BUSY]))
            } else if !req.params.contains_key("start") {
                // Instant queries (the namespaces' owner labels): none.
                let none = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
                (200, none.to_string())
            } else {
                (200, matrix_for(req, &[]))
            })
        }))
    };
    // Alertmanager holds an alert of tessera that is no longer a finding: the run resolves it
    // in a POST, which fails with a 5xx (it may have been applied: exit 3).
    const HELD: &str = r#"[{"labels":{"alertname":"TesseraIdleLoaded","source":"tessera","detector":"idle_loaded","finding_id":"idle_loaded-0000000000000000","severity":"warning"},"annotations":{"summary":"old"},"startsAt":"2026-11-01T00:00:00.000Z","endsAt":"2030-01-01T00:00:00.000Z","fingerprint":"x","status":{"state":"active"}}]"#;
    let am = FakeServer::start(|r| match r.method.as_str() {
        "GET" => Reply::Answer(200, HELD.to_string()),
        _ => Reply::Answer(503, "unavailable".to_string()),
    });
    let src = format!("prometheus:{}", prometheus.url);
    let out = tessera_with(
        &[
            "notify",
            "--source",
            &src,
            "--since",
            "2026-11-02T00:00:00Z",
            "--until",
            "2026-11-02T02:00:00Z",
            "--interval",
            "10s",
            "--alertmanager.url",
            &am.url,
            "--allow-stale-evidence",
        ],
        |c| {
            c.env("TMPDIR", &tmpdir);
        },
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("HTTP 503"), "{err}");
    assert!(
        am.requests().iter().any(|r| r.method == "POST"),
        "the POST was sent"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        !seen.is_empty(),
        "the spill folder was made in TMPDIR while the source was read"
    );
    assert_eq!(spills(&tmpdir), Vec::<PathBuf>::new(), "left after exit 3");
    assert!(seen.iter().all(|p| !p.exists()), "{seen:?}");
}
