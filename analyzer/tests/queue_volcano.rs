//! The queue plan applied to Volcano Queues (issue 59; docs/queues.md, "Volcano") by the real
//! binary against the fake API server, which serves `scheduling.volcano.sh/v1beta1` Queues with
//! strict decoding and Volcano's webhooks (capability ≥ deserved ≥ guarantee, weight ≥ 1, the
//! `default` queue undeletable): Volcano absent is said and nothing is written; the dry run
//! prints the changes and writes nothing; `--yes` creates one Queue per team and the off-peak
//! Queue with the plan's numbers; an edited plan updates through a 409 with the changed leaves
//! printed; a same-named queue that is not tessera's refuses the apply; others' queues (Volcano's
//! `default`) are untouched by apply and undo; the window-edge CronJobs, evaluated by croner in
//! Europe/Berlin across both daylight-saving changes, set the off-peak Queue's capability,
//! guarantee and `reclaimable` at each fire time.

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::queue_kueue::{Cluster, WEEKDAY, cluster, fire_times, plan_text, schedule};

const V: &[&str] = &["--scheduler", "volcano"];

fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = V.to_vec();
    v.extend(extra);
    v
}

fn vq(c: &Cluster, name: &str) -> Option<Value> {
    c.kube.object("Queue", "", name)
}

/// A Volcano Queue's GPU figures: (capability, deserved, guarantee, reclaimable).
fn gpus(c: &Cluster, name: &str) -> (String, String, String, bool) {
    let q = vq(c, name).unwrap_or_else(|| panic!("Queue {name}"));
    let s = &q["spec"];
    let g = |v: &Value| v["nvidia.com/gpu"].as_str().unwrap_or("-").to_string();
    (
        g(&s["capability"]),
        g(&s["deserved"]),
        g(&s["guarantee"]["resource"]),
        s["reclaimable"].as_bool().unwrap(),
    )
}

fn ours(c: &Cluster) -> Vec<String> {
    let mut out: Vec<String> = c
        .kube
        .objects("Queue")
        .iter()
        .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tessera")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

fn default_queue() -> Value {
    json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": { "name": "default" },
        "spec": { "weight": 1, "reclaimable": true },
    })
}

fn t(s: &str) -> (String, String, String, bool) {
    let f: Vec<&str> = s.split(' ').collect();
    (f[0].into(), f[1].into(), f[2].into(), f[3] == "true")
}

#[test]
fn without_volcano_nothing_is_planned_or_written() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    c.kube.set_volcano_installed(false);
    let (code, _, err) = c.queue("apply", &with(&["--yes", "--now", WEEKDAY]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("Volcano is not installed") && err.contains("scheduling.volcano.sh/v1beta1"),
        "{err}"
    );
    assert!(c.kube.requests().iter().all(|r| r.method == "GET"));
}

#[test]
fn the_dry_run_writes_nothing_and_yes_creates_volcano_queues_with_the_plans_numbers() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    c.kube.put(default_queue());
    let theirs = vq(&c, "default").unwrap();
    let (code, out, err) = c.queue("apply", &with(&["--now", WEEKDAY]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1 Queue(s) of others (default) left alone"),
        "{out}"
    );
    assert!(out.contains("+ create Queue tessera-research"), "{out}");
    assert!(out.contains("reclaimable false"), "{out}");
    assert!(out.contains("dry run: nothing changed"), "{out}");
    assert!(ours(&c).is_empty());

    let (code, out, err) = c.queue("apply", &with(&["--yes", "--now", WEEKDAY]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("applied: 3 created"), "{out}");
    assert_eq!(
        ours(&c),
        ["tessera-offpeak", "tessera-research", "tessera-serving"]
    );
    // Serving: its guarantee held for it and deserved, capped at its limit.
    assert_eq!(gpus(&c, "tessera-serving"), t("2 2 2 true"));
    // Research: nothing deserved or held, runs up to its limit on idle GPUs (reclaimable).
    assert_eq!(gpus(&c, "tessera-research"), t("5 0 0 true"));
    // Off-peak outside the window: the floor, not reclaimable.
    assert_eq!(gpus(&c, "tessera-offpeak"), t("1 1 1 false"));
    // Volcano's webhook defaulted the weight; tessera's labels are on every queue.
    let q = vq(&c, "tessera-research").unwrap();
    assert_eq!(q["spec"]["weight"], 1);
    assert_eq!(
        q["metadata"]["labels"]["tessera.io/queue-cohort"],
        "tessera"
    );
    let events = c.kube.events();
    assert_eq!(
        events
            .iter()
            .filter(|e| e["reason"] == "QueueCreated")
            .count(),
        3
    );
    assert_eq!(
        std::fs::read_to_string(&c.audit).unwrap().lines().count(),
        3
    );

    let (code, out, err) = c.queue("apply", &with(&["--yes", "--now", WEEKDAY]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("nothing to change (3 object(s) as planned)"),
        "{out}"
    );
    assert_eq!(vq(&c, "default").unwrap(), theirs, "theirs untouched");
}

#[test]
fn an_edited_plan_updates_through_a_conflict_and_a_dropped_team_is_pruned() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    let (code, _, err) = c.queue("apply", &with(&["--yes", "--now", WEEKDAY]));
    assert_eq!(code, 0, "{err}");
    std::fs::write(&c.plan, plan_text(6, true, "{ policy: finish }")).unwrap();
    let (code, out, err) = c.queue("apply", &with(&["--now", WEEKDAY]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("~ update Queue tessera-research"), "{out}");
    assert!(
        out.contains("spec.capability.nvidia.com/gpu: 5 -> 6"),
        "{out}"
    );
    assert_eq!(gpus(&c, "tessera-research").0, "5", "dry run");

    c.kube.conflict_next_write("queues");
    let (code, _, err) = c.queue("apply", &with(&["--yes", "--now", WEEKDAY]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("changed meanwhile"), "the 409 is said: {err}");
    assert_eq!(gpus(&c, "tessera-research").0, "6");

    std::fs::write(&c.plan, plan_text(6, false, "{ policy: finish }")).unwrap();
    let (code, out, err) = c.queue("apply", &with(&["--yes", "--now", WEEKDAY]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("- delete Queue tessera-research"), "{out}");
    assert!(vq(&c, "tessera-research").is_none());
}

#[test]
fn a_queue_that_is_not_tesseras_refuses_the_apply_and_undo_leaves_theirs() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    let mut foreign = default_queue();
    foreign["metadata"]["name"] = json!("tessera-research");
    c.kube.put(foreign);
    let (code, _, err) = c.queue("apply", &with(&["--yes", "--now", WEEKDAY]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("Queue tessera-research") && err.contains("not tessera's"),
        "{err}"
    );
    assert!(ours(&c).is_empty(), "nothing written: {:?}", ours(&c));

    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    c.kube.put(default_queue());
    let (code, _, err) = c.queue("apply", &with(&["--yes", "--now", WEEKDAY]));
    assert_eq!(code, 0, "{err}");
    let before = vq(&c, "default").unwrap();
    let (code, out, err) = c.undo(V);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("- delete Queue tessera-serving"), "{out}");
    assert_eq!(ours(&c).len(), 3, "the dry run deletes nothing");
    let (code, _, err) = c.undo(&with(&["--yes"]));
    assert_eq!(code, 0, "{err}");
    assert!(ours(&c).is_empty(), "{:?}", ours(&c));
    assert_eq!(vq(&c, "default").unwrap(), before, "theirs untouched");
    // Kueue's undo of the same cohort does not touch Volcano's objects, and the other way round.
    assert!(c.kube.objects("ClusterQueue").is_empty());
}

#[test]
fn a_failed_step_puts_back_the_queues_created_before_it() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    // The third create (the off-peak queue) is refused: the two team queues created before it
    // are deleted again.
    c.kube.fail(fake_kube::Fault {
        code: 403,
        message: "forbidden by the test".into(),
        body_contains: Some("tessera-offpeak".into()),
        ..fake_kube::Fault::leader_changed("POST", "/apis/scheduling.volcano.sh/v1beta1/queues", 1)
    });
    let (code, _, err) = c.queue("apply", &with(&["--yes", "--now", WEEKDAY]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("forbidden by the test"), "{err}");
    assert!(
        err.contains("the 2 change(s) made before it were put back"),
        "{err}"
    );
    assert!(ours(&c).is_empty(), "{:?}", ours(&c));
    let deletes = c
        .kube
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count();
    assert_eq!(deletes, 2);
}

fn edge_at(c: &Cluster, at: DateTime<Utc>) -> (String, String, String, bool) {
    let now = at.to_rfc3339();
    let (code, _, err) = c.queue("edge", &with(&["--yes", "--now", &now]));
    assert_eq!(code, 0, "edge at {at}: {err}");
    gpus(c, "tessera-offpeak")
}

#[test]
fn window_edges_set_the_offpeak_queue_at_local_times_across_daylight_saving_changes() {
    let c = cluster(&plan_text(5, true, "{ policy: drain, notice-minutes: 30 }"));
    let (code, _, err) = c.queue("apply", &with(&["--yes", "--now", WEEKDAY]));
    assert_eq!(code, 0, "{err}");
    let manifests = schedule(&c, V);
    assert!(manifests.contains("- scheduling.volcano.sh"), "{manifests}");
    assert!(manifests.contains("- queues"), "{manifests}");
    assert!(
        manifests.contains("- --scheduler\n") && manifests.contains("- volcano\n"),
        "{manifests}"
    );
    let minute = Duration::minutes(1);
    // Autumn: open Sat 22:00 CEST = 20:00Z, close Sun 08:00 CET = 07:00Z, drain 07:30Z-07:40Z.
    // Spring: open 21:00Z, close 06:00Z, drain 06:30Z-06:40Z.
    for (from, until, open) in [
        (
            "2026-10-24T00:00:00Z",
            "2026-10-26T00:00:00Z",
            "2026-10-24T20:00:00Z",
        ),
        (
            "2027-03-27T00:00:00Z",
            "2027-03-29T00:00:00Z",
            "2027-03-27T21:00:00Z",
        ),
    ] {
        let fires = fire_times(&manifests, from, until);
        assert_eq!(fires.len(), 4, "{fires:?}");
        assert_eq!(fires[0], open.parse::<DateTime<Utc>>().unwrap());
        assert_eq!(fires[2] - fires[1], Duration::minutes(30));
        assert_eq!(edge_at(&c, fires[0] - minute), t("1 1 1 false"));
        assert_eq!(edge_at(&c, fires[0]), t("6 6 6 false"));
        assert_eq!(edge_at(&c, fires[1] - minute), t("6 6 6 false"));
        assert_eq!(edge_at(&c, fires[1]), t("1 1 1 false"));
        assert_eq!(edge_at(&c, fires[2]), t("1 1 1 true"));
        assert_eq!(edge_at(&c, fires[3]), t("1 1 1 false"));
    }
    // The teams' queues are not a window edge's business.
    assert_eq!(gpus(&c, "tessera-serving"), t("2 2 2 true"));
}
