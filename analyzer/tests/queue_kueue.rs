//! The queue plan applied to Kueue (issue 57 items 3–5; docs/queues.md, "Kueue") by the real
//! binary against the fake API server, which serves Kueue's kinds with strict validation: Kueue
//! absent is said and nothing is written; the dry run prints the changes and writes nothing;
//! `--yes` creates the ResourceFlavors, ClusterQueues and LocalQueues with the plan's numbers;
//! a re-apply changes nothing; an edited plan updates by compare-and-swap through a 409; objects
//! that are not tessera's refuse the apply and are never touched; a team dropped from the plan is
//! pruned; a step that fails puts back what the earlier ones changed; undo removes tessera's
//! objects only. The window-edge CronJobs of `queue schedule`
//! are evaluated by an independent cron implementation (croner) across the autumn and spring
//! daylight-saving changes of Europe/Berlin, and `queue edge` at each fire time sets the quotas
//! and the end-of-window `stopPolicy` the plan documents.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Duration, Utc};
use fake_kube::{FakeKube, Fault};
use serde_json::Value;

use crate::support::cli::run;

const H100: &str = "NVIDIA H100 80GB HBM3";

/// A plan: 8 H100s; serving guaranteed 2 (limit 2), research job-like up to `research_limit`;
/// the off-peak queue holds 1 outside the window Sat 22:00 + 10 h (Europe/Berlin) and 6 in it.
pub(crate) fn plan_text(research_limit: u32, with_research: bool, end: &str) -> String {
    let research = if with_research {
        format!(
            "  - team: research\n    class: job-like\n    quotas:\n    - {{ model: {H100}, guarantee: 0, limit: {research_limit} }}\n"
        )
    } else {
        String::new()
    };
    format!(
        "version: v1\nkind: tessera-plan\nwindow:\n  from: 2026-10-10T00:00:00.000Z\n  until: 2026-10-24T00:00:00.000Z\n  sources: [history:x]\nqueues:\n  cohort: tessera\n  rules: {{ guarantee-quantile: 0.05, limit-quantile: 0.95, serving-share: 0.9 }}\n  capacity: [ {{ model: {H100}, gpus: 8 }} ]\n  teams:\n  - team: serving\n    class: serving\n    quotas:\n    - {{ model: {H100}, guarantee: 2, limit: 2 }}\n{research}  offpeak:\n    queue: tessera-offpeak\n    timezone: Europe/Berlin\n    floor: [ {{ model: {H100}, gpus: 1 }} ]\n    windows:\n    - {{ days: [Sat], start: \"22:00\", hours: 10, gpus: [ {{ model: {H100}, gpus: 6 }} ] }}\n    end: {end}\n"
    )
}

pub(crate) struct Cluster {
    pub(crate) kube: FakeKube,
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    pub(crate) audit: PathBuf,
    pub(crate) plan: PathBuf,
}

pub(crate) fn cluster(plan: &str) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let kube = FakeKube::start();
    kube.add_namespace("serving", &[], &[]);
    kube.add_namespace("research", &[], &[]);
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig);
    let p = dir.path().join("plan.yaml");
    std::fs::write(&p, plan).unwrap();
    Cluster {
        kube,
        audit: dir.path().join("audit.jsonl"),
        kubeconfig,
        plan: p,
        _dir: dir,
    }
}

/// Monday 2026-10-26 12:00 UTC: outside the window, with the plan's data 2.5 days old.
pub(crate) const WEEKDAY: &str = "2026-10-26T12:00:00Z";

impl Cluster {
    pub(crate) fn queue(&self, verb: &str, extra: &[&str]) -> (i32, String, String) {
        let mut args = vec![
            "queue".to_string(),
            verb.to_string(),
            self.plan.display().to_string(),
            "--kubeconfig".into(),
            self.kubeconfig.display().to_string(),
            "--audit-log".into(),
            self.audit.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args)
    }

    pub(crate) fn undo(&self, extra: &[&str]) -> (i32, String, String) {
        let k = self.kubeconfig.display().to_string();
        let a = self.audit.display().to_string();
        let mut args = vec!["queue", "undo", "--kubeconfig", &k, "--audit-log", &a];
        args.extend(extra);
        run(&args)
    }

    fn cq(&self, name: &str) -> Option<Value> {
        self.kube.object("ClusterQueue", "", name)
    }

    /// The GPU figures of a ClusterQueue's only flavor: (nominal, borrowing, lending).
    fn quota(&self, name: &str) -> (String, Option<String>, Option<String>) {
        let cq = self
            .cq(name)
            .unwrap_or_else(|| panic!("ClusterQueue {name}"));
        let r = &cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0];
        assert_eq!(r["name"], "nvidia.com/gpu");
        let s = |v: &Value| v.as_str().map(str::to_string);
        (
            s(&r["nominalQuota"]).unwrap(),
            s(&r["borrowingLimit"]),
            s(&r["lendingLimit"]),
        )
    }

    fn stop(&self, name: &str) -> String {
        self.cq(name).unwrap()["spec"]["stopPolicy"]
            .as_str()
            .unwrap_or("None")
            .to_string()
    }

    fn ours(&self) -> Vec<String> {
        let mut out = Vec::new();
        for kind in ["ResourceFlavor", "ClusterQueue", "LocalQueue"] {
            for o in self.kube.objects(kind) {
                if o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tessera" {
                    let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
                    out.push(format!(
                        "{kind} {ns}/{}",
                        o["metadata"]["name"].as_str().unwrap()
                    ));
                }
            }
        }
        out.sort();
        out
    }
}

#[test]
fn without_kueue_nothing_is_planned_or_written() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    c.kube.set_kueue_installed(false);
    let (code, _, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("Kueue is not installed"), "{err}");
    assert!(
        c.kube.requests().iter().all(|r| r.method == "GET"),
        "only reads when Kueue is absent"
    );
}

#[test]
fn the_dry_run_writes_nothing_and_yes_creates_the_plans_queues() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    let (code, out, err) = c.queue("apply", &["--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("+ create ClusterQueue tessera-research"),
        "{out}"
    );
    assert!(out.contains("+ create LocalQueue serving/tessera"), "{out}");
    assert!(out.contains("dry run: nothing changed"), "{out}");
    assert!(out.contains("no LocalQueue besides tessera's"), "{out}");
    assert!(c.ours().is_empty(), "the dry run wrote {:?}", c.ours());

    let (code, out, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("applied: 9 created"), "{out}");
    let rf = c
        .kube
        .object("ResourceFlavor", "", "tessera-nvidia-h100-80gb-hbm3")
        .expect("the H100 flavor");
    assert_eq!(
        rf["spec"]["nodeLabels"]["nvidia.com/gpu.product"],
        "NVIDIA-H100-80GB-HBM3"
    );
    // Serving: its guarantee, nothing to borrow, nothing lent.
    assert_eq!(
        c.quota("tessera-serving"),
        ("2".into(), Some("0".into()), Some("0".into()))
    );
    // Research: nothing guaranteed, borrows up to its limit.
    assert_eq!(
        c.quota("tessera-research"),
        ("0".into(), Some("5".into()), None)
    );
    // Outside the window: 8 - 2 guaranteed - 1 floor lent by the shared queue; the floor
    // off-peak.
    assert_eq!(c.quota("tessera-shared").0, "5");
    assert_eq!(c.quota("tessera-offpeak").0, "1");
    assert_eq!(c.stop("tessera-offpeak"), "None");
    for team in ["serving", "research"] {
        let cq = c.cq(&format!("tessera-{team}")).unwrap();
        assert_eq!(cq["spec"]["cohortName"], "tessera");
        let lq = c.kube.object("LocalQueue", team, "tessera").unwrap();
        assert_eq!(lq["spec"]["clusterQueue"], format!("tessera-{team}"));
        let lq = c
            .kube
            .object("LocalQueue", team, "tessera-offpeak")
            .unwrap();
        assert_eq!(lq["spec"]["clusterQueue"], "tessera-offpeak");
    }
    assert!(
        c.cq("tessera-offpeak").unwrap()["spec"]
            .get("cohortName")
            .is_none()
    );
    let events = c.kube.events();
    assert_eq!(
        events
            .iter()
            .filter(|e| e["reason"] == "QueueCreated")
            .count(),
        9,
        "{events:?}"
    );
    let audit = std::fs::read_to_string(&c.audit).unwrap();
    assert_eq!(audit.lines().count(), 9, "{audit}");

    let (code, out, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("nothing to change (9 object(s) as planned)"),
        "{out}"
    );
}

#[test]
fn an_edited_plan_updates_through_a_conflict_and_a_dropped_team_is_pruned() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    let (code, _, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    std::fs::write(&c.plan, plan_text(6, true, "{ policy: finish }")).unwrap();
    let (code, out, err) = c.queue("apply", &["--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("~ update ClusterQueue tessera-research"),
        "{out}"
    );
    assert!(
        out.contains("spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: 5 -> 6"),
        "{out}"
    );
    assert_eq!(
        c.quota("tessera-research").1.as_deref(),
        Some("5"),
        "dry run"
    );

    c.kube.conflict_next_write("clusterqueues");
    let (code, _, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("changed meanwhile"), "the 409 is said: {err}");
    assert_eq!(c.quota("tessera-research").1.as_deref(), Some("6"));

    std::fs::write(&c.plan, plan_text(6, false, "{ policy: finish }")).unwrap();
    let (code, out, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("- delete ClusterQueue tessera-research"),
        "{out}"
    );
    assert!(c.cq("tessera-research").is_none());
    assert!(c.kube.object("LocalQueue", "research", "tessera").is_none());
    // Research's guarantee was 0: the shared queue is unchanged.
    assert_eq!(c.quota("tessera-shared").0, "5");
}

fn foreign_cq(name: &str) -> Value {
    serde_json::json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": { "name": name },
        "spec": { "cohortName": "theirs", "resourceGroups": [{
            "coveredResources": ["nvidia.com/gpu"],
            "flavors": [{ "name": "default", "resources": [{ "name": "nvidia.com/gpu", "nominalQuota": "3" }] }] }] },
    })
}

#[test]
fn objects_that_are_not_tesseras_refuse_the_apply_and_survive_undo() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    c.kube.put(foreign_cq("tessera-research"));
    let (code, _, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("ClusterQueue tessera-research") && err.contains("not tessera's"),
        "{err}"
    );
    assert!(c.ours().is_empty(), "nothing written: {:?}", c.ours());

    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    c.kube.put(foreign_cq("team-x"));
    c.kube.add_namespace("team-x", &[], &[]);
    c.kube.put(serde_json::json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": { "name": "main", "namespace": "team-x" },
        "spec": { "clusterQueue": "team-x" },
    }));
    let (code, out, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1 LocalQueue(s) of others, in team-x"),
        "{out}"
    );
    let before = c.cq("team-x").unwrap();

    let (code, out, err) = c.undo(&[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("- delete ClusterQueue tessera-serving"),
        "{out}"
    );
    assert_eq!(c.ours().len(), 9, "the dry run deletes nothing");
    let (code, _, err) = c.undo(&["--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(c.ours().is_empty(), "{:?}", c.ours());
    assert_eq!(c.cq("team-x").unwrap(), before, "theirs untouched");
    assert!(c.kube.object("LocalQueue", "team-x", "main").is_some());
}

/// The UTC instants at which the schedule's CronJobs fire in `[from, until)`, by an
/// independent cron implementation in the CronJob's `timeZone`.
pub(crate) fn fire_times(manifests: &str, from: &str, until: &str) -> Vec<DateTime<Utc>> {
    let from: DateTime<Utc> = from.parse().unwrap();
    let until: DateTime<Utc> = until.parse().unwrap();
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(manifests) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        if v["kind"] != "CronJob" {
            continue;
        }
        let tz: chrono_tz::Tz = v["spec"]["timeZone"].as_str().unwrap().parse().unwrap();
        let args = &v["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"];
        assert_eq!(args[0], "queue");
        assert_eq!(args[1], "edge");
        let cron: croner::Cron = v["spec"]["schedule"].as_str().unwrap().parse().unwrap();
        let mut t = from.with_timezone(&tz);
        while let Ok(next) = cron.find_next_occurrence(&t, false) {
            if next.with_timezone(&Utc) >= until {
                break;
            }
            out.push(next.with_timezone(&Utc));
            t = next;
        }
    }
    out.sort();
    out
}

pub(crate) fn schedule(c: &Cluster, extra: &[&str]) -> String {
    let mut args = vec![
        "queue",
        "schedule",
        c.plan.to_str().unwrap(),
        "--image",
        "registry.example.invalid/tessera/tessera:test",
    ];
    args.extend(extra);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    out
}

fn edge_at(c: &Cluster, t: DateTime<Utc>) -> (String, String, String) {
    let (code, _, err) = c.queue("edge", &["--yes", "--now", &t.to_rfc3339()]);
    assert_eq!(code, 0, "edge at {t}: {err}");
    (
        c.quota("tessera-offpeak").0,
        c.quota("tessera-shared").0,
        c.stop("tessera-offpeak"),
    )
}

#[test]
fn window_edges_fire_at_local_times_across_daylight_saving_changes() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    let (code, _, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    let manifests = schedule(&c, &[]);
    assert!(manifests.contains("timeZone: Europe/Berlin"), "{manifests}");
    // Autumn: Sat 22:00 CEST = 20:00Z; the close Sun 08:00 CET = 07:00Z (an 11-hour night).
    let autumn = fire_times(&manifests, "2026-10-24T00:00:00Z", "2026-10-26T00:00:00Z");
    let want: Vec<DateTime<Utc>> = ["2026-10-24T20:00:00Z", "2026-10-25T07:00:00Z"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(autumn, want);
    // Spring: Sat 22:00 CET = 21:00Z; Sun 08:00 CEST = 06:00Z (9 hours).
    let spring = fire_times(&manifests, "2027-03-27T00:00:00Z", "2027-03-29T00:00:00Z");
    let want_spring: Vec<DateTime<Utc>> = ["2027-03-27T21:00:00Z", "2027-03-28T06:00:00Z"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(spring, want_spring);
    for fires in [autumn, spring] {
        let (open, close) = (fires[0], fires[1]);
        let minute = Duration::minutes(1);
        assert_eq!(
            edge_at(&c, open - minute),
            ("1".into(), "5".into(), "None".into())
        );
        assert_eq!(edge_at(&c, open), ("6".into(), "0".into(), "None".into()));
        assert_eq!(
            edge_at(&c, close - minute),
            ("6".into(), "0".into(), "None".into())
        );
        assert_eq!(edge_at(&c, close), ("1".into(), "5".into(), "None".into()));
    }
}

#[test]
fn drain_holds_at_the_close_and_drains_after_the_notice() {
    let c = cluster(&plan_text(5, true, "{ policy: drain, notice-minutes: 30 }"));
    let (code, _, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    let fires = fire_times(
        &schedule(&c, &[]),
        "2026-10-24T00:00:00Z",
        "2026-10-26T00:00:00Z",
    );
    let want: Vec<DateTime<Utc>> = [
        "2026-10-24T20:00:00Z", // open
        "2026-10-25T07:00:00Z", // close: hold (the notice)
        "2026-10-25T07:30:00Z", // drain
        "2026-10-25T07:40:00Z", // admit up to the floor again
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    assert_eq!(fires, want);
    let states: Vec<(String, String, String)> = fires.iter().map(|t| edge_at(&c, *t)).collect();
    assert_eq!(
        states,
        [
            ("6".into(), "0".into(), "None".into()),
            ("1".into(), "5".into(), "Hold".into()),
            ("1".into(), "5".into(), "HoldAndDrain".into()),
            ("1".into(), "5".into(), "None".into()),
        ]
    );
}

#[test]
fn edge_refuses_a_plan_that_was_not_applied_and_apply_refuses_stale_evidence() {
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    let (code, _, err) = c.queue("edge", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 2);
    assert!(err.contains("run `tessera queue apply`"), "{err}");
    let (code, _, err) = c.queue("apply", &["--yes", "--now", "2027-01-01T00:00:00Z"]);
    assert_eq!(code, 2);
    assert!(err.contains("--evidence.max-age"), "{err}");
    assert!(c.ours().is_empty());
    let _: &Path = &c.plan;
}

pub(crate) fn refuse(kube: &FakeKube, method: &str, path: &str) {
    kube.fail(Fault {
        code: 403,
        message: "forbidden by the test".into(),
        ..Fault::leader_changed(method, path, 1)
    });
}

#[test]
fn a_failed_step_puts_back_what_the_earlier_steps_changed() {
    // A first apply whose last LocalQueue is refused: the 8 objects created before are deleted.
    let c = cluster(&plan_text(5, true, "{ policy: finish }"));
    refuse(
        &c.kube,
        "POST",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/research/localqueues",
    );
    let (code, _, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("forbidden by the test"), "{err}");
    assert!(err.contains("were put back"), "{err}");
    assert!(c.ours().is_empty(), "{:?}", c.ours());

    // An edited plan (research's limit 6, serving dropped) whose first delete is refused: the
    // updates made before it are restored.
    let (code, _, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    let mut text = plan_text(6, true, "{ policy: finish }");
    let serving = "  - team: serving\n    class: serving\n    quotas:\n    - { model: NVIDIA H100 80GB HBM3, guarantee: 2, limit: 2 }\n";
    assert!(text.contains(serving));
    text = text.replace(serving, "");
    std::fs::write(&c.plan, text).unwrap();
    refuse(
        &c.kube,
        "DELETE",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/serving/localqueues/tessera",
    );
    let (code, _, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("were put back"), "{err}");
    assert_eq!(c.quota("tessera-research").1.as_deref(), Some("5"));
    assert_eq!(c.quota("tessera-shared").0, "5");
    assert!(c.cq("tessera-serving").is_some());
    assert_eq!(c.ours().len(), 9, "{:?}", c.ours());
    // Without the fault the same apply goes through.
    let (code, _, err) = c.queue("apply", &["--yes", "--now", WEEKDAY]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(c.quota("tessera-research").1.as_deref(), Some("6"));
    assert_eq!(c.quota("tessera-shared").0, "7");
    assert!(c.cq("tessera-serving").is_none());
}
