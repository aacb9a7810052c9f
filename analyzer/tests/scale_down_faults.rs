//! `tessera scale-down` when the API server fails: a 500 on the scale (the annotation is taken
//! back), a 500 on the scale and on taking the annotation back (exit 3 with the kubectl line),
//! a 409 on the annotation (read again, retried once; twice is an error), 403, a slow server
//! (the request timeout), and a server that is down. Each leaves the workload as it was, with a
//! clear message and exit code.

use std::time::Duration;

use fake_kube::Fault;
use serde_json::json;

use super::scale_down::{Case, FROM};

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
    assert!(err.contains("deployment ml/web: patch deployment ml/web: the object has been modified; reading it again"), "{err}");
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
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(
            "skipped deployment ml/x: tessera.io/scaled-down-from=\"oops\" is not a replica count"
        ),
        "{out}"
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
