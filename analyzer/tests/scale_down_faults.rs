//! `tessera scale-down` when the API server fails or the world moves: a 500 on the scale (the
//! annotation is taken back), a 500 on the scale and on taking the annotation back (exit 3 with
//! the kubectl line), a 409 on the annotation (read again, retried once; twice is an error),
//! 403, a slow server (the request timeout), a server that is down; evidence too old or dated
//! after the clock; a workload that grew between the plan and the write (before the read, the
//! annotation or the scale); a scale whose answer is lost after it was applied, and one that
//! would land after tessera gave up; a findings file that is not the analyze JSON. Each is
//! asserted on the API server's state.

use std::time::Duration;

use fake_kube::{Fault, Hold};
use serde_json::{Value, json};

use super::scale_down::{Case, FROM, NS, meta};

const WEB: &str = "/apis/apps/v1/namespaces/ml/deployments/web";

fn fault(method: &str, path: &str, code: u16, message: &str, times: usize) -> Fault {
    Fault {
        code,
        message: message.into(),
        watch: Some(false),
        ..Fault::leader_changed(method, path, times)
    }
}

#[test]
fn a_500_on_the_scale_takes_the_annotation_back_and_stops() {
    let c = Case::new();
    c.kube.fail(fault(
        "PATCH",
        &format!("{WEB}/scale"),
        500,
        "etcdserver: leader changed",
        1,
    ));
    let (code, out, err) = c.run(&["--yes"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("tessera: deployment ml/web: scale deployment ml/web to 0: etcdserver: leader changed (500"), "{err}");
    assert!(err.contains("it is as it was"), "{err}");
    assert!(
        err.contains(
            "not tried: statefulset ml/db, inferenceservice ml/chat, inferenceservice ml/llm"
        ),
        "{err}"
    );
    assert_eq!(c.replicas("deployments", "web"), 2);
    assert_eq!(
        c.annotation("deployments", "web"),
        None,
        "the annotation was taken back"
    );
    // The workloads after it in the plan were not touched.
    assert_eq!(c.replicas("statefulsets", "db"), 3);
    assert_eq!(c.annotation("statefulsets", "db"), None);
    assert_eq!(
        c.get("inferenceservices", "chat")["spec"]["predictor"].get("minReplicas"),
        None
    );
}

#[test]
fn a_scale_and_a_cleanup_that_both_fail_print_the_command_and_exit_3() {
    let c = Case::new();
    c.kube
        .fail(fault("PATCH", &format!("{WEB}/scale"), 500, "boom", 1));
    c.kube.fail(Fault {
        body_contains: Some("null".into()),
        ..fault("PATCH", WEB, 500, "boom again", 1)
    });
    let (code, out, err) = c.run(&["--yes"]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(err.contains("kubectl -n ml annotate deployment web tessera.io/scaled-down-from- tessera.io/scaled-down-at-"), "{err}");
    // The record stays on a workload at its count: undo removes it and keeps the count.
    assert_eq!(c.replicas("deployments", "web"), 2);
    assert_eq!(c.annotation("deployments", "web").as_deref(), Some("2"));
    let (code, out, _) = c.run(&["--undo", "--yes", "--namespace", "ml"]);
    assert_eq!(code, 0);
    assert!(out.contains("deployment ml/web: replicas is 2"), "{out}");
    assert_eq!(c.annotation("deployments", "web"), None);
    assert_eq!(c.replicas("deployments", "web"), 2);
}

#[test]
fn a_409_on_the_annotation_is_read_again_and_retried_once() {
    let c = Case::new();
    c.kube
        .fail(fault("PATCH", WEB, 409, "the object has been modified", 1));
    let (code, out, err) = c.run(&["--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("deployment ml/web changed meanwhile (patch deployment ml/web: the object has been modified); reading it again"), "{err}");
    assert_eq!(c.replicas("deployments", "web"), 0);
    assert_eq!(c.annotation("deployments", "web").as_deref(), Some("2"));

    // Twice: an error, and nothing of it changed.
    let c = Case::new();
    c.kube
        .fail(fault("PATCH", WEB, 409, "the object has been modified", 2));
    let (code, _, err) = c.run(&["--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "tessera: deployment ml/web: patch deployment ml/web: the object has been modified"
        ),
        "{err}"
    );
    assert_eq!(c.replicas("deployments", "web"), 2);
    assert_eq!(c.annotation("deployments", "web"), None);
    assert!(!c.writes().iter().any(|w| w.ends_with("/web/scale")));
}

#[test]
fn undo_leaves_a_record_that_is_not_a_count() {
    let c = Case::new();
    c.kube
        .put(json!({ "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "x", "namespace": "ml", "annotations": { FROM: "oops" } },
        "spec": { "replicas": 0 } }));
    let (code, out, err) = c.run(&["--undo", "--yes", "--namespace", "ml"]);
    assert_eq!(code, 2, "a refused record is not success: {out}\n{err}");
    assert!(
        err.contains(
            "refused deployment ml/x: tessera.io/scaled-down-from=\"oops\" is not a replica count"
        ),
        "{err}"
    );
    assert_eq!(c.replicas("deployments", "x"), 0);
    assert_eq!(c.annotation("deployments", "x").as_deref(), Some("oops"));
}

#[test]
fn forbidden_slow_and_down_servers_are_clear_errors() {
    // 403 on the pods: the RBAC file is named, nothing written.
    let c = Case::new();
    c.kube.fail(fault(
        "GET",
        "/api/v1/namespaces/ml/pods",
        403,
        "pods is forbidden: User \"x\" cannot list resource \"pods\"",
        1,
    ));
    let (code, _, err) = c.run(&["--yes"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("pods is forbidden") && err.contains("deploy/scale-down/rbac.yaml"),
        "{err}"
    );
    assert_eq!(c.writes(), Vec::<String>::new());

    // Slow: a scale that takes longer than --request-timeout is an error, not a hang; the
    // annotation is taken back.
    let c = Case::new();
    c.kube.fail(Fault::slow(
        "PATCH",
        &format!("{WEB}/scale"),
        "replicas",
        Duration::from_secs(3),
    ));
    let (code, _, err) = c.run(&["--yes", "--request-timeout", "1s"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no answer from the API server in 1 s"),
        "{err}"
    );
    assert_eq!(c.annotation("deployments", "web"), None);

    // Down: the server is gone.
    let c = Case::new();
    let kubeconfig = c.path("kubeconfig");
    let findings = c.path("findings.json");
    let dir = c.dir;
    drop(c.kube);
    let out = super::support::cli::tessera_with(
        &[
            "scale-down",
            "--yes",
            "--request-timeout",
            "2s",
            "--now",
            super::scale_down::NOW,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--findings",
            findings.to_str().unwrap(),
        ],
        |cmd| {
            cmd.env_remove("KUBECONFIG");
        },
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("tessera: list pods in ml:"), "{err}");
    drop(dir);
}

/// A findings file that is not the analyze JSON is refused before any call to the API server,
/// and the message names the file and the place: the line and column, or the finding by its
/// index in the document and the span.
#[test]
fn a_findings_file_that_is_not_the_analyze_json_names_the_file_and_the_place() {
    let c = Case::new();
    let path = c.path("findings.json");
    let name = path.to_str().unwrap().to_string();
    let good = std::fs::read_to_string(&path).unwrap();
    let mut doc: Value = serde_json::from_str(&good).unwrap();
    // findings[2] is db-0's; a busy finding before it keeps the indices honest.
    doc["findings"][2]["evidence"]["spans"][0]["start"] = json!("yesterday");
    doc["findings"].as_array_mut().unwrap().insert(
        0,
        json!({ "id": "busy_not_working-x", "detector": "busy_not_working",
                "entity": { "namespace": NS, "pod": "web-rs-a" }, "evidence": { "spans": [] } }),
    );
    let pretty = serde_json::to_string_pretty(&doc).unwrap();
    for (text, want) in [
        (
            pretty.clone(),
            "findings: findings[3].evidence.spans[0].start: \"yesterday\" is not an RFC 3339 time"
                .to_string(),
        ),
        (
            pretty[..pretty.len() / 2].to_string(),
            format!("--findings {name}: not JSON: EOF while parsing"),
        ),
        (
            "{\n  \"until\": \"2026-11-30T00:00:00Z\",\n  \"findings\": {}\n}".to_string(),
            format!(
                "--findings {name}: invalid type: map, expected the `findings` array at line 3 column 15"
            ),
        ),
    ] {
        std::fs::write(&path, &text).unwrap();
        let (code, out, err) = c.run(&["--yes"]);
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(err.contains(&want), "want {want:?} in {err}");
        assert!(c.kube.requests().is_empty(), "{:?}", c.kube.requests());
    }
    // Over the limit: refused from its size, unread (a sparse file).
    let big = std::fs::File::create(&path).unwrap();
    big.set_len(257 << 20).unwrap();
    let (code, _, err) = c.run(&["--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "--findings {name}: larger than the limit of 268435456 bytes (269484032 bytes)"
        )),
        "{err}"
    );
    // Stdin.
    std::fs::write(&path, "[]").unwrap();
    let kubeconfig = c.path("kubeconfig");
    let out = super::support::cli::tessera_with(
        &[
            "scale-down",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--findings",
            "-",
        ],
        |cmd| {
            cmd.stdin(std::fs::File::open(&path).unwrap());
        },
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--findings -: invalid type: sequence, expected the JSON object `tessera analyze --format json` prints"),
        "{err}"
    );
    // The good file still gives the plan.
    std::fs::write(&path, good).unwrap();
    let (code, out, err) = c.run(&[]);
    assert_eq!(code, 0, "{out}\n{err}");
}

/// The findings file with every date moved to another year.
fn move_findings(c: &Case, year: &str) {
    let path = c.path("findings.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("2026-", &format!("{year}-"))).unwrap();
}

fn untouched(c: &Case) {
    assert_eq!(c.writes(), Vec::<String>::new());
    assert_eq!(c.replicas("deployments", "web"), 2);
    assert_eq!(c.replicas("statefulsets", "db"), 3);
    assert_eq!(c.annotation("deployments", "web"), None);
}

#[test]
fn evidence_older_than_the_maximum_or_dated_after_the_clock_is_refused() {
    // Data that ended decades ago or ends in 2099, against the machine's clock.
    for (year, want) in [
        ("2000", "old: the data ends 2000-11-30T00:00:00Z"),
        ("2099", "the evidence is dated"),
    ] {
        let c = Case::new();
        move_findings(&c, year);
        let (code, out, err) = c.run_on_the_clock(&["--yes"]);
        untouched(&c);
        assert_eq!(code, 2, "{year}: {out}\n{err}");
        assert!(
            err.contains("refusing to act on this evidence") && err.contains(want),
            "{err}"
        );
        assert!(!out.contains("scaling to zero"), "{out}");
        untouched(&c);
    }
    // 30 days after the data's end by --now: the message says how old, the maximum and the flag.
    let c = Case::new();
    let (code, _, err) = c.run(&["--yes", "--now", "2026-12-30T00:00:00Z"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "the evidence is 30d old: the data ends 2026-11-30T00:00:00Z and it is 2026-12-30T00:00:00Z now, more than --evidence.max-age 15m"
        ),
        "{err}"
    );
    untouched(&c);
    // 20 minutes is too old by default; the flag allows it.
    let (code, _, err) = c.run(&["--yes", "--now", "2026-11-30T00:20:00Z"]);
    assert_eq!(code, 2, "{err}");
    untouched(&c);
    let (code, out, err) = c.run(&[
        "--yes",
        "--now",
        "2026-11-30T00:20:00Z",
        "--evidence.max-age",
        "30m",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(c.replicas("deployments", "web"), 0);
    // --allow-stale-evidence acts on evidence of any age (the one flag of every acting command).
    let c = Case::new();
    let (code, out, err) = c.run(&[
        "--yes",
        "--now",
        "2026-12-30T00:00:00Z",
        "--allow-stale-evidence",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(c.replicas("deployments", "web"), 0);
    // Dated after the clock by more than 5 minutes: no --evidence.max-age makes it fresh.
    let c = Case::new();
    let (code, _, err) = c.run(&[
        "--yes",
        "--now",
        "2026-11-29T23:00:00Z",
        "--evidence.max-age",
        "1w",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("dated 1h after the clock"), "{err}");
    untouched(&c);
}

const DB: &str = "/apis/apps/v1/namespaces/ml/statefulsets/db";

/// StatefulSet db at 1 replica (its pod db-0 idle), and what it becomes: 3 replicas, two more
/// pods, busy (no findings).
fn db_grows() -> (Case, Vec<Value>) {
    let c = Case::new();
    c.kube
        .apply(json!({ "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": { "name": "db", "namespace": NS }, "spec": { "replicas": 1 } }));
    let mut grown = vec![json!({ "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": { "name": "db", "namespace": NS }, "spec": { "replicas": 3 } })];
    for p in ["db-1", "db-2"] {
        grown.push(json!({ "apiVersion": "v1", "kind": "Pod",
            "metadata": meta(p, json!({}), json!({}), Some(("apps/v1", "StatefulSet", "db"))),
            "spec": { "nodeName": "gpu-1", "containers": [{ "name": "main" }] },
            "status": { "phase": "Running" } }));
    }
    (c, grown)
}

#[test]
fn a_workload_that_grew_between_plan_and_write_is_not_scaled() {
    // Grown before tessera reads it again for the write (the plan read it at 1).
    let (c, grown) = db_grows();
    c.kube.change_before(
        Fault {
            watch: Some(false),
            ..Fault::leader_changed("GET", DB, 1)
        },
        1,
        grown,
    );
    let (code, out, err) = c.run(&["--yes"]);
    assert_eq!(c.replicas("statefulsets", "db"), 3, "{out}\n{err}");
    assert_eq!(c.annotation("statefulsets", "db"), None);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("statefulset ml/db: replicas 1 -> 0"),
        "the plan: {out}"
    );
    assert!(
        out.contains("skipped statefulset ml/db: changed since the plan: replicas 1 -> 3"),
        "{out}"
    );
    assert!(
        !c.writes()
            .iter()
            .any(|w| w.starts_with(&format!("PATCH {DB}")))
    );
    // The others were done.
    assert_eq!(c.replicas("deployments", "web"), 0);

    // Grown right before the annotation is written: the 409 reads it again, and the count
    // decided on is gone, so nothing is written (the record would say 3).
    let (c, grown) = db_grows();
    c.kube.change_before(
        Fault {
            body_contains: Some("scaled-down-from".into()),
            ..Fault::leader_changed("PATCH", DB, 1)
        },
        0,
        grown,
    );
    let (code, out, err) = c.run(&["--yes"]);
    assert_eq!(c.replicas("statefulsets", "db"), 3, "{out}\n{err}");
    assert_eq!(c.annotation("statefulsets", "db"), None);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("skipped statefulset ml/db: changed since the plan"),
        "{out}"
    );
    assert!(!c.writes().iter().any(|w| w == &format!("PATCH {DB}/scale")));

    // Grown between the annotation and the scale: the scale names the version it was decided
    // on, the API server refuses it, and the record is taken back.
    let (c, grown) = db_grows();
    c.kube.change_before(
        Fault::leader_changed("PATCH", &format!("{DB}/scale"), 1),
        0,
        grown,
    );
    let (code, out, err) = c.run(&["--yes"]);
    assert_eq!(c.replicas("statefulsets", "db"), 3, "{out}\n{err}");
    assert_eq!(c.annotation("statefulsets", "db"), None);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("statefulset ml/db: scale statefulset ml/db to 0"),
        "{err}"
    );
    assert!(
        !c.journal().iter().any(|(_, n, _)| n == "db"),
        "the journal entry goes with the record: {:?}",
        c.journal()
    );
}

#[test]
fn a_scale_whose_answer_is_lost_is_read_back_and_kept_as_applied() {
    let c = Case::new();
    c.kube.hold(
        Fault::leader_changed("PATCH", &format!("{WEB}/scale"), 1),
        Hold::AnswerLate,
    );
    let (code, out, err) = c.run(&["--yes", "--request-timeout", "2s"]);
    assert_eq!(c.replicas("deployments", "web"), 0, "{out}\n{err}");
    assert_eq!(
        c.annotation("deployments", "web").as_deref(),
        Some("2"),
        "the record stays: {out}\n{err}"
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("deployment ml/web: replicas 2 -> 0 (the answer was lost, scale deployment ml/web to 0: no answer from the API server in 2 s; read back as applied)"),
        "{out}"
    );
    assert!(
        err.contains("deployment ml/web: the scale to 0 was applied although its answer was lost; the record stays on it, and `tessera scale-down --undo --yes --namespace ml` restores it (or by hand: kubectl -n ml scale deployment/web --replicas=2 && kubectl -n ml annotate deployment web tessera.io/scaled-down-from- tessera.io/scaled-down-at-)"),
        "{err}"
    );
    assert_eq!(c.replicas("deployments", "web"), 0);
    assert_eq!(
        c.annotation("deployments", "web").as_deref(),
        Some("2"),
        "the record stays"
    );
    // The run went on.
    assert_eq!(c.replicas("statefulsets", "db"), 0);
    assert_eq!(c.kube.release(), [200]);
    // --undo can restore it.
    let (code, out, err) = c.run(&["--undo", "--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(c.replicas("deployments", "web"), 2);
    assert_eq!(c.annotation("deployments", "web"), None);
}

#[test]
fn a_scale_that_would_land_after_tessera_gave_up_is_fenced_out() {
    let c = Case::new();
    c.kube.hold(
        Fault::leader_changed("PATCH", &format!("{WEB}/scale"), 1),
        Hold::ApplyLate,
    );
    let (code, out, err) = c.run(&["--yes", "--request-timeout", "2s"]);
    assert_eq!(c.annotation("deployments", "web"), None, "{out}\n{err}");
    // The scale lands now, after tessera removed its record: refused, the version is stale.
    assert_eq!(c.kube.release(), [409], "{out}\n{err}");
    assert_eq!(c.replicas("deployments", "web"), 2);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("no answer from the API server in 2 s (read back: not applied, and it can no longer land); it is as it was"),
        "{err}"
    );
    assert_eq!(c.annotation("deployments", "web"), None);
    assert!(c.journal().is_empty(), "{:?}", c.journal());
}

#[test]
fn a_record_whose_answer_is_lost_is_read_back_and_taken_back() {
    let c = Case::new();
    c.kube.hold(
        Fault {
            body_contains: Some(r#"scaled-down-from":"2""#.into()),
            ..Fault::leader_changed("PATCH", WEB, 1)
        },
        Hold::AnswerLate,
    );
    let (code, out, err) = c.run(&["--yes", "--request-timeout", "2s"]);
    // The annotation landed; tessera read it back and took it back: as it was.
    assert_eq!(c.annotation("deployments", "web"), None, "{out}\n{err}");
    assert_eq!(c.replicas("deployments", "web"), 2);
    assert!(!c.writes().iter().any(|w| w.ends_with("/web/scale")));
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("no answer from the API server in 2 s (read back: the record had landed; taken back); it is as it was"),
        "{err}"
    );
    assert!(c.journal().is_empty(), "{:?}", c.journal());
    assert_eq!(c.kube.release(), [200]);
}
