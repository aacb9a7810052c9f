//! `tessera mig apply --via mig-manager` against an API server that fails the way real ones do
//! (`tessera-fake-kube`'s scripted faults): 410 on every watch, a 500 when a watch is re-opened
//! ("etcdserver: leader changed"), a 500 on a label patch (read back, written again) or on every
//! one (config kept, command printed), a label another client sets between decision and write
//! (refused by the resourceVersion), a label write that lands late (refused by the server), a
//! label another client replaces while tessera waits, two runs on different node groups at once, a ConfigMap of deeply
//! nested YAML, watches the server ends at once, and SIGTERM in the middle. Each test asserts
//! the final label and cordon of every node and what tessera printed; the exit codes are those
//! of docs/mig-apply.md ("Exit paths").

use std::process::Stdio;
use std::time::{Duration, Instant};

use fake_kube::{Behaviour, Fault};

use super::mig_manager::{CM, CONFIG, Cluster, NS, STATE};

/// Waits (polling the fake's state, no wall-clock assertion) until `node` carries a
/// `tessera-` label; panics after a minute.
fn until_labelled_by_tessera(c: &Cluster, node: &str) {
    let start = Instant::now();
    while !c.label(node).is_some_and(|l| l.starts_with("tessera-")) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{node} never got tessera's label"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Watch requests for one node.
fn watches(c: &Cluster) -> usize {
    c.kube.requests().iter().filter(|r| r.is_watch()).count()
}

#[test]
fn a_410_on_every_watch_is_a_bounded_loop_that_times_out_and_rolls_back() {
    let c = Cluster::new();
    c.kube.script("gpu-1", "*", Behaviour::StuckPending);
    c.kube.script("gpu-1", "all-disabled", Behaviour::Success);
    c.kube.expire_next_watches(usize::MAX);
    let (code, out, err) = c.apply(&[
        "--config",
        "day",
        "--yes",
        "--node",
        "gpu-1",
        "--cordon",
        "--node-timeout",
        "3s",
    ]);
    // Before: open() and relist() called each other until the stack overflowed (exit 134).
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("410 Gone: resourceVersion too old; retry 1 in"),
        "{err}"
    );
    assert!(
        err.contains("no result after 3.0 s (state pending)"),
        "{err}"
    );
    // The node re-read after each 410 still shows mig-manager's answer to the rollback.
    assert!(
        out.contains(
            "-> all-disabled after no result after 3.0 s (state pending); all-disabled: success"
        ),
        "{out}"
    );
    assert_eq!(c.label("gpu-1").as_deref(), Some("all-disabled"));
    assert!(!c.kube.node_unschedulable("gpu-1"), "uncordoned");
    assert!(out.contains("node gpu-1: uncordoned"), "{out}");
    // Backoff: a handful of watches in the 3 s, not hundreds.
    assert!(watches(&c) <= 20, "{} watches", watches(&c));
}

#[test]
fn a_500_when_a_watch_is_reopened_is_retried_with_backoff() {
    let c = Cluster::new();
    c.kube.set_mig_step_delay(Duration::from_millis(300));
    // Watches end every 100 ms (re-opened), and two re-opens get "leader changed".
    c.kube.close_watches_after(Duration::from_millis(100));
    let mut f = Fault::leader_changed("GET", "/api/v1/nodes", 2);
    f.watch = Some(true);
    c.kube.fail(f.clone());
    let (code, out, err) = c.apply(&["--config", "day", "--yes", "--node", "gpu-1", "--cordon"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("etcdserver: leader changed (500); retry 1 in")
            && err.contains("etcdserver: leader changed (500); retry 2 in"),
        "{err}"
    );
    assert!(out.contains("node gpu-1: success"), "{out}");
    assert!(c.label("gpu-1").unwrap().starts_with("tessera-day-"));
    assert_eq!(c.kube.node_labels("gpu-1")[STATE], "success");
    assert!(!c.kube.node_unschedulable("gpu-1"));
    assert!(c.kube.count(&f) >= 3, "the failed opens and a good one");
}

/// A 500 on the label patch may or may not have applied: the node is read back and, not
/// carrying the label, written again with its current resourceVersion (compare-and-swap, so a
/// late landing of the first write is refused).
#[test]
fn a_500_on_a_label_patch_is_read_back_and_written_again() {
    let c = Cluster::new();
    let f = Fault {
        body_contains: Some("tessera-day-".into()),
        ..Fault::leader_changed("PATCH", "/api/v1/nodes/gpu-1", 1)
    };
    c.kube.fail(f.clone());
    let (code, out, err) = c.apply(&["--config", "day", "--yes", "--node", "gpu-1", "--cordon"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("label node gpu-1: etcdserver: leader changed")
            && err.contains("reading the node back"),
        "{err}"
    );
    assert!(c.label("gpu-1").unwrap().starts_with("tessera-day-"));
    assert_eq!(c.kube.count(&f), 2, "one failed write and one that landed");
    assert!(out.contains("node gpu-1: success"), "{out}");
    assert!(!c.kube.node_unschedulable("gpu-1"), "uncordoned");
}

/// Every label patch gets a 500: tessera stops after its attempts, says the write may still
/// land, keeps the config it names and prints the command that puts the label back (exit 3).
#[test]
fn a_label_patch_that_never_answers_keeps_its_config_and_prints_the_command() {
    let c = Cluster::new();
    c.kube.fail(Fault {
        body_contains: Some("tessera-day-".into()),
        ..Fault::leader_changed("PATCH", "/api/v1/nodes/gpu-1", 100)
    });
    let (code, out, err) = c.apply(&["--config", "day", "--yes", "--node", "gpu-1", "--cordon"]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(err.contains("may still land"), "{err}");
    assert!(
        err.contains("kubectl label node gpu-1 nvidia.com/mig.config=all-disabled"),
        "{err}"
    );
    assert_eq!(c.label("gpu-1").as_deref(), Some("all-disabled"));
    let cm = c
        .kube
        .configmap("gpu-operator", "custom-mig-config")
        .unwrap();
    assert!(
        cm["config.yaml"].contains("tessera-day-"),
        "the config a late label would name was pruned: {cm:?}"
    );
}

#[test]
fn what_cannot_be_put_back_is_printed_as_kubectl_commands_with_exit_3() {
    let c = Cluster::new();
    c.kube.script("gpu-1", "*", Behaviour::Failed);
    // Every patch that would put all-disabled back fails.
    c.kube.fail(Fault {
        body_contains: Some("\"all-disabled\"".into()),
        ..Fault::leader_changed("PATCH", "/api/v1/nodes/gpu-1", 100)
    });
    let (code, out, err) = c.apply(&["--config", "day", "--yes", "--node", "gpu-1", "--cordon"]);
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(
        err.contains("not everything tessera changed could be put back or confirmed; run:"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "  kubectl label node gpu-1 {CONFIG}=all-disabled {STATE}- --overwrite"
        )),
        "{err}"
    );
    assert!(err.contains("  kubectl uncordon gpu-1"), "{err}");
    // Left as the commands say: tessera's label, cordoned.
    assert!(c.label("gpu-1").unwrap().starts_with("tessera-day-"));
    assert!(c.kube.node_unschedulable("gpu-1"));
}

#[test]
fn a_label_another_client_replaces_is_left_to_it_and_never_counted_as_success() {
    let c = Cluster::new();
    c.kube.set_mig_step_delay(Duration::from_millis(1500));
    std::thread::scope(|s| {
        s.spawn(|| {
            until_labelled_by_tessera(&c, "gpu-1");
            c.kube.set_node_labels(
                "gpu-1",
                &[(CONFIG, Some("all-1g.10gb")), (STATE, Some("success"))],
            );
        });
        let (code, out, err) = c.apply(&["--config", "day", "--yes", "--cordon"]);
        // Before: "success: tessera-… applied", uncordoned, exit 0.
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(
            err.contains(&format!(
                "node gpu-1: {CONFIG} changed to all-1g.10gb by another client (the server does not say which)"
            )),
            "{err}"
        );
        assert!(!out.contains("node gpu-1: success"), "{out}");
        assert!(err.contains("not started: gpu-2"), "{err}");
        assert!(out.contains("node gpu-1: uncordoned"), "{out}");
    });
    assert_eq!(c.label("gpu-1").as_deref(), Some("all-1g.10gb"));
    assert!(!c.kube.node_unschedulable("gpu-1"));
    assert_eq!(c.label("gpu-2").as_deref(), Some("all-disabled"));
}

#[test]
fn two_runs_on_different_nodes_at_once_leave_every_label_naming_a_config_that_exists() {
    // Run B (gpu-2, night) reads the nodes, then its ConfigMap write is held for 4 s; run A
    // (gpu-1, day) meanwhile writes its config, labels gpu-1 and succeeds. B's write then gets
    // a 409 and is merged again. Before: B re-read the ConfigMap but not the nodes and pruned
    // A's config, which gpu-1 still named.
    let c = Cluster::new();
    c.kube.put_configmap(
        NS,
        CM,
        &[("config.yaml", super::mig_manager::OPERATOR_DEFAULT)],
    );
    let path = format!("/api/v1/namespaces/{NS}/configmaps/{CM}");
    c.kube.fail(Fault::slow(
        "PUT",
        &path,
        "tessera-night-",
        Duration::from_secs(4),
    ));
    let spawn = |args: &[&str]| {
        c.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let b = spawn(&["--config", "night", "--yes", "--node", "gpu-2"]);
    // A starts once B's write has arrived (logged on arrival, handled 4 s later): B has read
    // the nodes and the ConfigMap before A changes either.
    let start = Instant::now();
    while !c
        .kube
        .requests()
        .iter()
        .any(|r| r.method == "PUT" && r.path == path)
    {
        assert!(start.elapsed() < Duration::from_secs(60), "B never wrote");
        std::thread::sleep(Duration::from_millis(10));
    }
    let a = spawn(&["--config", "day", "--yes", "--node", "gpu-1"]);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let stored = c.stored();
    for (node, run, want) in [
        ("gpu-1", &a, "tessera-day-"),
        ("gpu-2", &b, "tessera-night-"),
    ] {
        let text = format!(
            "{node}: {}\n{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        assert_eq!(run.status.code(), Some(0), "{text}");
        let label = c.label(node).unwrap();
        assert!(label.starts_with(want), "{text}");
        assert!(
            stored.configs.contains_key(&label),
            "{text}\n{node} names {label}, not in {:?}",
            stored.configs.keys()
        );
    }
    assert!(
        String::from_utf8_lossy(&b.stderr).contains("changed meanwhile"),
        "B's write was a conflict"
    );
}

#[test]
fn a_configmap_of_deeply_nested_yaml_is_refused_before_it_is_parsed() {
    let c = Cluster::new();
    let deep = format!("version: v1\nmig-configs:\n  x: {}\n", "[".repeat(100_000));
    c.kube.put_configmap(NS, CM, &[("config.yaml", &deep)]);
    let before = c.writes().len();
    let (code, out, err) = c.apply(&["--config", "day", "--yes"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains(&format!("ConfigMap {NS}/{CM}, config.yaml: line 3 column"))
            && err.contains("nested deeper than"),
        "{err}"
    );
    assert!(!err.contains("warning"), "said once: {err}");
    assert_eq!(c.writes().len(), before, "nothing written");
}

#[test]
fn watches_the_server_ends_at_once_back_off() {
    let c = Cluster::new();
    c.kube.script("gpu-1", "*", Behaviour::StuckPending);
    c.kube.script("gpu-1", "all-disabled", Behaviour::Success);
    c.kube.close_watches_after(Duration::ZERO);
    let (code, out, err) = c.apply(&[
        "--config",
        "day",
        "--yes",
        "--node",
        "gpu-1",
        "--node-timeout",
        "3s",
    ]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("the server ended the watch at once; retry 1 in"),
        "{err}"
    );
    assert_eq!(c.label("gpu-1").as_deref(), Some("all-disabled"));
    // Before: ~22 watches a second for the whole timeout.
    assert!(watches(&c) <= 20, "{} watches", watches(&c));
}

#[test]
fn sigterm_puts_the_node_back_and_uncordons_it() {
    let c = Cluster::new();
    c.kube.script("gpu-1", "*", Behaviour::StuckPending);
    c.kube.script("gpu-1", "all-disabled", Behaviour::Success);
    let child = c
        .command(&[
            "--config",
            "day",
            "--yes",
            "--node",
            "gpu-1",
            "--cordon",
            "--node-timeout",
            "10m",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until_labelled_by_tessera(&c, "gpu-1");
    // A CronJob's deadline: SIGTERM.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let run = child.wait_with_output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert_eq!(run.status.code(), Some(2), "{out}\n{err}");
    assert!(err.contains("stopped by a signal"), "{err}");
    assert!(
        out.contains(
            "-> all-disabled after stopped by a signal (SIGTERM or SIGINT); all-disabled: success"
        ),
        "{out}"
    );
    assert_eq!(c.label("gpu-1").as_deref(), Some("all-disabled"));
    assert!(!c.kube.node_unschedulable("gpu-1"));
}

/// Issue 49 item 6: another client relabels the node between tessera's decision and its write.
/// The label PATCH carries the resourceVersion read, so the API server refuses it; read again,
/// the label is no longer the one the change was decided on: nothing is written, the run stops
/// (exit 2) and the other client's label stays.
#[test]
fn a_label_changed_between_plan_and_write_is_not_overwritten() {
    let c = Cluster::new();
    c.kube.change_before(
        Fault {
            body_contains: Some("tessera-day-".into()),
            ..Fault::leader_changed("PATCH", "/api/v1/nodes/gpu-1", 1)
        },
        0,
        vec![serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": { "name": "gpu-1", "labels": { CONFIG: "someone-elses" } },
        })],
    );
    let (code, out, err) = c.apply(&["--config", "day", "--yes", "--node", "gpu-1", "--cordon"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert_eq!(c.label("gpu-1").as_deref(), Some("someone-elses"));
    assert!(
        err.contains("refused, label not changed")
            && err.contains("is someone-elses now, not all-disabled as when tessera decided"),
        "{err}"
    );
    assert!(!c.kube.node_unschedulable("gpu-1"), "uncordoned");
    assert!(
        !c.kube
            .events()
            .iter()
            .any(|e| e["reason"] == "MigConfigLabelled"),
        "no Event for a change not made"
    );
}

/// Issue 49 findings 3/4 for mig-manager: the label PATCH is held by the API server past its
/// answer and lands only after tessera gave up on it. tessera reads the node back, writes again
/// at the current resourceVersion and goes on to success; the held write, landing late with the
/// old version, is refused (409) and the node keeps tessera's finished state.
#[test]
fn a_label_write_that_lands_late_is_refused_by_the_server() {
    let c = Cluster::new();
    c.kube.hold(
        Fault {
            body_contains: Some("tessera-day-".into()),
            ..Fault::leader_changed("PATCH", "/api/v1/nodes/gpu-1", 1)
        },
        fake_kube::Hold::ApplyLate,
    );
    let (code, out, err) = c.apply(&[
        "--config",
        "day",
        "--yes",
        "--node",
        "gpu-1",
        "--request-timeout",
        "1s",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("reading the node back"), "{err}");
    assert!(out.contains("node gpu-1: success"), "{out}");
    assert_eq!(c.kube.release(), [409]);
    assert!(c.label("gpu-1").unwrap().starts_with("tessera-day-"));
    assert_eq!(c.kube.node_labels("gpu-1")[STATE], "success");
}
