//! `tessera scale-down` end to end: the real binary, with kube-rs, against `tessera-fake-kube`
//! (the Kubernetes API's wire protocol, with Deployments, ReplicaSets, StatefulSets and their
//! `scale` subresource, HPAs and KServe InferenceServices) and a hand-written findings file
//! (`--findings`): the dry run's kubectl lines and refusals, `--yes`, `--undo`, and the RBAC of
//! `deploy/scale-down/`. Faults are in `scale_down_faults.rs`.

use std::path::PathBuf;

use fake_kube::FakeKube;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::mig_manager::{allowed, rbac_rules};
use super::support::cli::tessera_with;

pub(super) const NS: &str = "ml";
pub(super) const FROM: &str = "tessera.io/scaled-down-from";
const UNTIL: &str = "2026-11-30T00:00:00Z";
/// The clock of the runs (`--now`): 5 minutes after the data's end.
pub(super) const NOW: &str = "2026-11-30T00:05:00Z";

pub(super) fn meta(
    name: &str,
    labels: Value,
    annotations: Value,
    owner: Option<(&str, &str, &str)>,
) -> Value {
    let mut m =
        json!({ "name": name, "namespace": NS, "labels": labels, "annotations": annotations });
    if let Some((api, kind, owner)) = owner {
        m["ownerReferences"] = json!([{ "apiVersion": api, "kind": kind, "name": owner,
            "uid": format!("uid-{owner}"), "controller": true }]);
    }
    m
}

pub(super) fn apps(
    kind: &str,
    name: &str,
    replicas: i64,
    labels: Value,
    annotations: Value,
) -> Value {
    json!({ "apiVersion": "apps/v1", "kind": kind, "metadata": meta(name, labels, annotations, None),
            "spec": { "replicas": replicas, "selector": { "matchLabels": { "app": name } } } })
}

/// Deployment `name` → ReplicaSet `name-rs` → pods `name-rs-<p>` for each of `pods`.
pub(super) fn deployment(
    kube: &FakeKube,
    name: &str,
    replicas: i64,
    labels: Value,
    annotations: Value,
    pods: &[&str],
) {
    kube.put(apps("Deployment", name, replicas, labels, annotations));
    let rs = format!("{name}-rs");
    kube.put(json!({ "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": meta(&rs, json!({}), json!({}), Some(("apps/v1", "Deployment", name))),
        "spec": { "replicas": replicas } }));
    for p in pods {
        pod(
            kube,
            &format!("{rs}-{p}"),
            json!({}),
            Some(("apps/v1", "ReplicaSet", &rs)),
        );
    }
}

pub(super) fn pod(kube: &FakeKube, name: &str, labels: Value, owner: Option<(&str, &str, &str)>) {
    kube.put(
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": meta(name, labels, json!({}), owner),
        "spec": { "nodeName": "gpu-1", "containers": [{ "name": "main",
            "resources": { "limits": { "nvidia.com/gpu": "1" } } }] },
        "status": { "phase": "Running" } }),
    );
}

pub(super) fn finding(pod: &str, start: &str, end: &str) -> Value {
    json!({ "id": format!("idle_loaded-{pod}"), "detector": "idle_loaded", "severity": "warning",
        "entity": { "kind": "process", "node": "gpu-1", "namespace": NS, "pod": pod },
        "evidence": { "spans": [{ "start": start, "end": end, "minutes": 0 }] } })
}

/// A cluster with one workload of each case, and the findings of its pods.
pub(super) struct Case {
    pub(super) kube: FakeKube,
    pub(super) dir: TempDir,
}

impl Case {
    pub(super) fn new() -> Case {
        let kube = FakeKube::start();
        let none = || json!({});
        // To scale: a Deployment (two idle pods), a StatefulSet, two InferenceServices.
        deployment(&kube, "web", 2, none(), none(), &["a", "b"]);
        kube.put(apps("StatefulSet", "db", 3, none(), none()));
        pod(
            &kube,
            "db-0",
            none(),
            Some(("apps/v1", "StatefulSet", "db")),
        );
        kube.put(
            json!({ "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": meta("llm", none(), none(), None),
            "spec": { "predictor": { "minReplicas": 2 } } }),
        );
        kube.put(json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": meta("llm-predictor", none(), none(), Some(("serving.kserve.io/v1beta1", "InferenceService", "llm"))),
            "spec": { "replicas": 2 } }));
        kube.put(json!({ "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": meta("llm-predictor-rs", none(), none(), Some(("apps/v1", "Deployment", "llm-predictor"))),
            "spec": { "replicas": 2 } }));
        pod(
            &kube,
            "llm-predictor-rs-x",
            none(),
            Some(("apps/v1", "ReplicaSet", "llm-predictor-rs")),
        );
        kube.put(
            json!({ "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": meta("chat", none(), none(), None), "spec": { "predictor": {} } }),
        );
        pod(
            &kube,
            "chat-predictor-00001-y",
            json!({ "serving.kserve.io/inferenceservice": "chat" }),
            None,
        );
        // Refused.
        pod(&kube, "solo", none(), None);
        deployment(&kube, "api", 1, none(), none(), &["a"]);
        kube.put(json!({ "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": meta("api", none(), none(), None),
            "spec": { "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "api" },
                      "minReplicas": 1, "maxReplicas": 3 } }));
        deployment(
            &kube,
            "argo",
            1,
            json!({ "app.kubernetes.io/instance": "argo" }),
            json!({ "argocd.argoproj.io/tracking-id": "argo:apps/Deployment:ml/argo" }),
            &["a"],
        );
        deployment(
            &kube,
            "flux",
            1,
            json!({ "kustomize.toolkit.fluxcd.io/name": "apps" }),
            none(),
            &["a"],
        );
        deployment(&kube, "optout", 1, none(), none(), &[]);
        pod(
            &kube,
            "optout-rs-a",
            json!({ "tessera.io/scale-down": "false" }),
            Some(("apps/v1", "ReplicaSet", "optout-rs")),
        );
        deployment(&kube, "lastweek", 1, none(), none(), &["a"]);
        deployment(&kube, "half", 2, none(), none(), &["a", "b"]);
        let idle = |p: &str| finding(p, "2026-11-28T00:00:00Z", UNTIL);
        let findings = json!({
            "version": 1, "from": "2026-11-23T00:00:00Z", "until": UNTIL, "sources": [], "tz": "UTC",
            "detectors": [],
            "findings": [
                idle("web-rs-a"), idle("web-rs-b"), idle("db-0"), idle("llm-predictor-rs-x"),
                // Allocated with nothing running counts too.
                { "id": "allocated_unused-chat", "detector": "allocated_unused", "severity": "warning",
                  "entity": { "kind": "gpu", "namespace": NS, "pod": "chat-predictor-00001-y" },
                  "evidence": { "kind": "unused", "spans": [{ "start": "2026-11-29T00:00:00Z", "end": UNTIL }] } },
                idle("solo"), idle("api-rs-a"), idle("argo-rs-a"), idle("flux-rs-a"), idle("optout-rs-a"),
                finding("lastweek-rs-a", "2026-11-23T00:00:00Z", "2026-11-25T00:00:00Z"),
                idle("half-rs-a"),
                // A hostile name: never a path segment.
                idle("../../../api/v1/nodes/gpu-1"),
            ],
        });
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join("findings.json"), findings.to_string()).unwrap();
        kube.write_kubeconfig(&dir.path().join("kubeconfig"));
        Case { kube, dir }
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Adds findings that `pods` are idle now to findings.json.
    pub(super) fn add_idle(&self, pods: &[&str]) {
        let path = self.path("findings.json");
        let mut doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for p in pods {
            doc["findings"]
                .as_array_mut()
                .unwrap()
                .push(finding(p, "2026-11-28T00:00:00Z", UNTIL));
        }
        std::fs::write(&path, doc.to_string()).unwrap();
    }

    /// The journal's entries as (kind, name, from).
    pub(super) fn journal(&self) -> Vec<(String, String, String)> {
        let path = self.path("state/journal.json");
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(doc["kind"], "tessera-scale-down-journal");
        doc["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap().to_string();
                (s("kind"), s("name"), s("from"))
            })
            .collect()
    }

    /// `tessera scale-down --kubeconfig … --journal … ARGS` (with `--findings findings.json`
    /// unless --undo), at `--now` [`NOW`] unless ARGS give it.
    pub(super) fn run(&self, args: &[&str]) -> (i32, String, String) {
        let mut all = vec![];
        if !args.contains(&"--now") {
            all.extend(["--now", NOW]);
        }
        all.extend_from_slice(args);
        self.run_on_the_clock(&all)
    }

    /// As [`Case::run`], judged against the machine's clock (no `--now`).
    pub(super) fn run_on_the_clock(&self, args: &[&str]) -> (i32, String, String) {
        let kubeconfig = self.path("kubeconfig");
        let findings = self.path("findings.json");
        let journal = self.path("state/journal.json");
        let mut all = vec![
            "scale-down",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
        ];
        if !args.contains(&"--undo") {
            all.extend(["--findings", findings.to_str().unwrap()]);
        }
        all.extend_from_slice(args);
        let out = tessera_with(&all, |c| {
            c.env_remove("KUBECONFIG")
                .env("XDG_STATE_HOME", self.path("xdg"));
        });
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub(super) fn writes(&self) -> Vec<String> {
        self.kube
            .requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    pub(super) fn get(&self, plural: &str, name: &str) -> Value {
        self.kube
            .object(plural, NS, name)
            .expect("the object exists")
    }

    pub(super) fn replicas(&self, plural: &str, name: &str) -> i64 {
        self.get(plural, name)["spec"]["replicas"].as_i64().unwrap()
    }

    pub(super) fn annotation(&self, plural: &str, name: &str) -> Option<String> {
        self.get(plural, name)["metadata"]["annotations"][FROM]
            .as_str()
            .map(str::to_string)
    }
}

#[test]
fn the_dry_run_prints_kubectl_lines_and_refusals_and_changes_nothing() {
    let c = Case::new();
    let (code, out, err) = c.run(&[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("dry run: nothing is changed; --yes to apply"),
        "{out}"
    );
    for line in [
        "deployment ml/web: replicas 2 -> 0; pods web-rs-a, web-rs-b idle since 2026-11-28T00:00:00Z",
        "kubectl -n ml scale deployment/web --replicas=0",
        "statefulset ml/db: replicas 3 -> 0",
        "kubectl -n ml scale statefulset/db --replicas=0",
        "inferenceservice ml/llm: minReplicas 2 -> 0",
        r#"kubectl -n ml patch inferenceservice llm --type merge -p '{"spec":{"predictor":{"minReplicas":0}}}'"#,
        "inferenceservice ml/chat: minReplicas unset (1) -> 0",
        "kubectl -n ml annotate deployment web tessera.io/scaled-down-from=2 tessera.io/scaled-down-at=",
        "kubectl -n ml annotate inferenceservice chat tessera.io/scaled-down-from=unset",
        "pod ml/solo: bare pod: no owner to scale; tessera proposes nothing for it",
        "deployment ml/api: targeted by HorizontalPodAutoscaler ml/api (spec.scaleTargetRef)",
        "deployment ml/argo: managed by Argo CD (annotation argocd.argoproj.io/tracking-id=",
        "deployment ml/flux: managed by Flux (label kustomize.toolkit.fluxcd.io/name=apps)",
        "deployment ml/optout: opted out: label tessera.io/scale-down=false on pod ml/optout-rs-a",
        "deployment ml/lastweek: pod lastweek-rs-a: not idle now: its last idle span (idle_loaded-lastweek-rs-a) ended 2026-11-25T00:00:00Z before the data's end (2026-11-30T00:00:00Z)",
        "deployment ml/half: not every pod is idle now: pod half-rs-b has no idle finding",
        r#"pod ml/../../../api/v1/nodes/gpu-1: not a Kubernetes pod name"#,
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
    // The refused workloads get no kubectl line.
    for w in ["api", "argo", "flux", "optout", "lastweek", "half"] {
        assert!(!out.contains(&format!("deployment/{w} ")), "{w}\n{out}");
    }
    assert_eq!(c.writes(), Vec::<String>::new());
    assert!(
        c.kube.requests().iter().all(|r| !r.path.contains("nodes")),
        "a hostile name reached the API"
    );
    assert!(
        err.contains("6 pod(s) idle now") || err.contains("pod(s) idle now"),
        "{err}"
    );
}

#[test]
fn yes_scales_the_idle_workloads_and_undo_restores_them() {
    let c = Case::new();
    let (code, out, err) = c.run(&["--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(c.replicas("deployments", "web"), 0);
    assert_eq!(c.annotation("deployments", "web").as_deref(), Some("2"));
    assert_eq!(c.replicas("statefulsets", "db"), 0);
    assert_eq!(c.annotation("statefulsets", "db").as_deref(), Some("3"));
    let llm = c.get("inferenceservices", "llm");
    assert_eq!(llm["spec"]["predictor"]["minReplicas"], 0);
    assert_eq!(
        c.annotation("inferenceservices", "llm").as_deref(),
        Some("2")
    );
    assert!(
        llm["metadata"]["annotations"]["tessera.io/scaled-down-at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert_eq!(
        c.get("inferenceservices", "chat")["spec"]["predictor"]["minReplicas"],
        0
    );
    assert_eq!(
        c.annotation("inferenceservices", "chat").as_deref(),
        Some("unset")
    );
    // KServe's own Deployment is left to KServe.
    assert_eq!(c.replicas("deployments", "llm-predictor"), 2);
    for (w, n) in [
        ("api", 1),
        ("argo", 1),
        ("flux", 1),
        ("optout", 1),
        ("lastweek", 1),
        ("half", 2),
    ] {
        assert_eq!(c.replicas("deployments", w), n, "{w}");
        assert_eq!(c.annotation("deployments", w), None, "{w}");
    }
    // Through the scale subresource, as kubectl scale does.
    let writes = c.writes();
    assert!(
        writes.contains(&"PATCH /apis/apps/v1/namespaces/ml/deployments/web/scale".to_string()),
        "{writes:?}"
    );
    assert!(out.contains("deployment ml/web: replicas 2 -> 0"), "{out}");
    // The audit trail: one Event per workload scaled, in its namespace, regarding it.
    let events = c.kube.events();
    let web = events
        .iter()
        .find(|e| e["regarding"]["name"] == "web" && e["regarding"]["kind"] == "Deployment")
        .unwrap_or_else(|| panic!("no Event about deployment web: {events:?}"));
    assert_eq!(web["metadata"]["namespace"], "ml", "{web}");
    assert_eq!(web["reason"], "ScaledDown", "{web}");
    assert_eq!(web["reportingController"], "tessera.dev/tessera", "{web}");
    assert!(
        web["note"].as_str().unwrap().contains("replicas 2 -> 0"),
        "{web}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e["reason"] == "ScaledDown")
            .count(),
        4,
        "web, db, llm, chat: {events:?}"
    );
    let log = std::fs::read_to_string(c.path("xdg/tessera/cluster-audit.jsonl")).unwrap();
    assert_eq!(
        log.lines().filter(|l| l.contains("\"ScaledDown\"")).count(),
        4,
        "{log}"
    );

    // Again: nothing to do.
    let (code, out, _) = c.run(&["--yes"]);
    assert_eq!(code, 0);
    assert!(out.contains("deployment ml/web: at zero already"), "{out}");
    assert!(out.contains("nothing to scale down"), "{out}");

    // Undo: a dry run first, then back to the recorded counts.
    let before = c.writes().len();
    let (code, out, _) = c.run(&["--undo"]);
    assert_eq!(code, 0);
    assert!(out.contains("would restore"), "{out}");
    assert!(
        out.contains("deployment ml/web: tessera.io/scaled-down-from=2"),
        "{out}"
    );
    assert_eq!(c.writes().len(), before);
    let (code, out, err) = c.run(&["--undo", "--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(c.replicas("deployments", "web"), 2);
    assert!(
        c.kube.events().iter().any(|e| e["reason"] == "ScaledBack"
            && e["regarding"]["name"] == "web"
            && e["note"].as_str().unwrap().contains("replicas 0 -> 2")),
        "{:?}",
        c.kube.events()
    );
    assert_eq!(c.annotation("deployments", "web"), None);
    assert_eq!(c.replicas("statefulsets", "db"), 3);
    assert_eq!(
        c.get("inferenceservices", "llm")["spec"]["predictor"]["minReplicas"],
        2
    );
    let chat = c.get("inferenceservices", "chat");
    assert_eq!(
        chat["spec"]["predictor"].get("minReplicas"),
        None,
        "unset again"
    );
    assert_eq!(c.annotation("inferenceservices", "chat"), None);
    assert!(
        out.contains("inferenceservice ml/chat: minReplicas 0 -> unset (1)"),
        "{out}"
    );
    let (_, out, _) = c.run(&["--undo", "--yes"]);
    assert!(out.contains("nothing to undo"), "{out}");
}

#[test]
fn undo_leaves_a_count_someone_changed_and_takes_a_namespace() {
    let c = Case::new();
    assert_eq!(c.run(&["--yes", "--namespace", "ml"]).0, 0);
    // A workload with tessera's record whose count someone changed since.
    c.kube.put(apps(
        "Deployment",
        "other",
        1,
        json!({}),
        json!({ FROM: "4" }),
    ));
    let (_, out, _) = c.run(&["--undo", "--yes", "--namespace", "elsewhere"]);
    assert!(out.contains("nothing to undo"), "{out}");
    let (code, out, err) = c.run(&["--undo", "--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("deployment ml/other: replicas is 1 (changed since tessera scaled it down): left as it is, record removed"), "{out}");
    assert_eq!(c.replicas("deployments", "other"), 1);
    assert_eq!(c.annotation("deployments", "other"), None);
    // A bad --namespace is bad input.
    let (code, _, err) = c.run(&["--namespace", "../x"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a Kubernetes namespace name"), "{err}");
}

#[test]
fn the_rbac_of_deploy_allows_every_call_and_every_rule_is_used() {
    let deploy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/scale-down");
    let rules = rbac_rules(&std::fs::read_to_string(deploy.join("rbac.yaml")).unwrap());
    let c = Case::new();
    assert_eq!(c.run(&["--yes"]).0, 0);
    assert_eq!(c.run(&["--undo", "--yes"]).0, 0);
    let mut used = vec![false; rules.len()];
    let reqs = c.kube.requests();
    assert!(reqs.len() > 10, "{} requests", reqs.len());
    for r in &reqs {
        used[allowed(&rules, r)] = true;
    }
    for (i, u) in used.iter().enumerate() {
        assert!(
            u,
            "rule {i} ({:?} {:?}) is never used",
            rules[i].resources, rules[i].verbs
        );
    }
}

#[test]
fn opt_out_values_are_read_leniently() {
    let c = Case::new();
    // (workload, where, value, opted out)
    let cases = [
        ("no-label", "label", "NO", true),
        ("zero-label", "label", "0", true),
        ("off-annotation", "annotation", " Off ", true),
        ("disabled-annotation", "annotation", "disabled", true),
        ("false-annotation", "annotation", "FALSE ", true),
        ("unknown-annotation", "annotation", "maybe", true),
        ("yes-annotation", "annotation", " yes", false),
    ];
    let mut pods = Vec::new();
    for (name, place, value, _) in cases {
        let v = json!({ "tessera.io/scale-down": value });
        let (labels, annotations) = match place {
            "label" => (v, json!({})),
            _ => (json!({}), v),
        };
        deployment(&c.kube, name, 1, labels, annotations, &["a"]);
        pods.push(format!("{name}-rs-a"));
    }
    // One opted out on its pod only.
    deployment(&c.kube, "pod-off", 1, json!({}), json!({}), &[]);
    pod(
        &c.kube,
        "pod-off-rs-a",
        json!({ "tessera.io/scale-down": "Off" }),
        Some(("apps/v1", "ReplicaSet", "pod-off-rs")),
    );
    pods.push("pod-off-rs-a".into());
    c.add_idle(&pods.iter().map(String::as_str).collect::<Vec<_>>());
    let (code, out, err) = c.run(&["--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    for (name, place, value, opted_out) in cases {
        let n = c.replicas("deployments", name);
        if opted_out {
            assert_eq!(n, 1, "{name} ({place} {value:?}) was scaled:\n{out}");
            assert_eq!(c.annotation("deployments", name), None, "{name}");
            assert!(
                out.contains(&format!(
                    "deployment ml/{name}: opted out: {place} tessera.io/scale-down="
                )),
                "{name}\n{out}"
            );
        } else {
            assert_eq!(n, 0, "{name} ({value:?}) opts in:\n{out}");
        }
    }
    assert_eq!(c.replicas("deployments", "pod-off"), 1);
    assert!(
        out.contains("deployment ml/unknown-annotation: opted out: annotation tessera.io/scale-down=\"maybe\" on deployment ml/unknown-annotation (not a value tessera knows: taken as an opt-out)"),
        "{out}"
    );
}

#[test]
fn undo_refuses_records_outside_the_history_and_restores_the_others() {
    let c = Case::new();
    assert_eq!(c.run(&["--yes"]).0, 0);
    // A record changed to 100000 since, and one tessera has no journal entry for.
    c.kube
        .apply(json!({ "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "web", "namespace": NS, "annotations": { FROM: "100000" } } }));
    c.kube.put(apps(
        "Deployment",
        "stranger",
        0,
        json!({}),
        json!({ FROM: "3" }),
    ));
    let (code, out, err) = c.run(&["--undo", "--yes"]);
    assert_eq!(c.replicas("deployments", "web"), 0, "{out}\n{err}");
    assert_eq!(
        c.annotation("deployments", "web").as_deref(),
        Some("100000")
    );
    assert_eq!(c.replicas("deployments", "stranger"), 0);
    // The others, after the refused ones in the list, were restored.
    assert_eq!(c.replicas("statefulsets", "db"), 3, "{out}\n{err}");
    assert_eq!(c.annotation("statefulsets", "db"), None);
    assert_eq!(
        c.get("inferenceservices", "llm")["spec"]["predictor"]["minReplicas"],
        2
    );
    assert_eq!(code, 2, "refused records are reported: {out}\n{err}");
    assert!(
        err.contains("refused deployment ml/web: tessera.io/scaled-down-from=\"100000\" but tessera's journal recorded 2 at 2026-11-30T00:05:00Z"),
        "{err}"
    );
    assert!(
        err.contains(
            "refused deployment ml/stranger: tessera.io/scaled-down-from=3: tessera's journal"
        ) && err.contains("kubectl -n ml scale deployment/stranger --replicas=3"),
        "{err}"
    );
    // The journal, replaced atomically (nothing else in its folder), kept the entry of the
    // refused record and dropped those restored.
    assert_eq!(
        c.journal(),
        [("Deployment".into(), "web".into(), "2".into())]
    );
    let files: Vec<String> = std::fs::read_dir(c.path("state"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["journal.json"]);
    // The dry run says which records it would refuse.
    let (code, out, err) = c.run(&["--undo"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("deployment ml/web: tessera.io/scaled-down-from=100000")
            && out.contains(
                "refused: tessera.io/scaled-down-from=\"100000\" but tessera's journal recorded 2"
            ),
        "{out}"
    );
    // --undo.max-replicas bounds records without an entry; the journal still decides for web.
    let (code, _, err) = c.run(&["--undo", "--yes", "--undo.max-replicas", "4"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(c.replicas("deployments", "stranger"), 3);
    assert_eq!(c.annotation("deployments", "stranger"), None);
    assert_eq!(c.replicas("deployments", "web"), 0);
}

#[test]
fn the_journal_records_each_workload_scaled_and_forgets_it_once_restored() {
    let c = Case::new();
    assert_eq!(c.run(&["--yes"]).0, 0);
    let mut journal = c.journal();
    journal.sort();
    assert_eq!(
        journal,
        [
            ("Deployment".into(), "web".into(), "2".into()),
            ("InferenceService".into(), "chat".into(), "unset".into()),
            ("InferenceService".into(), "llm".into(), "2".into()),
            ("StatefulSet".into(), "db".into(), "3".into()),
        ]
    );
    let (code, out, err) = c.run(&["--undo", "--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(c.journal(), Vec::<(String, String, String)>::new());
    let files: Vec<String> = std::fs::read_dir(c.path("state"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["journal.json"], "no temporary file is left");
    // A journal that is not one stops --yes before anything is written.
    std::fs::write(c.path("state/journal.json"), "{").unwrap();
    let before = c.writes().len();
    let (code, _, err) = c.run(&["--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("not a tessera-scale-down-journal document"),
        "{err}"
    );
    assert_eq!(c.writes().len(), before);
}

#[test]
fn a_journal_write_cut_short_writes_nothing_to_the_cluster_and_keeps_the_journal() {
    let c = Case::new();
    // A journal larger than the file-size limit below (entries of other workloads).
    let entries: Vec<Value> = (0..20)
        .map(|i| {
            json!({ "kind": "Deployment", "namespace": "other", "name": format!("w{i}"),
            "uid": format!("uid-{i}"), "from": "1", "at": "2026-11-29T00:00:00Z" })
        })
        .collect();
    let journal = c.path("state/journal.json");
    std::fs::create_dir_all(journal.parent().unwrap()).unwrap();
    let before = serde_json::to_vec_pretty(
        &json!({ "kind": "tessera-scale-down-journal", "version": 1, "entries": entries }),
    )
    .unwrap();
    assert!(before.len() > 2048, "{} bytes", before.len());
    std::fs::write(&journal, &before).unwrap();
    let kubeconfig = c.path("kubeconfig");
    let findings = c.path("findings.json");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 2; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .args([
            "scale-down",
            "--yes",
            "--now",
            NOW,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--findings",
            findings.to_str().unwrap(),
            "--journal",
            journal.to_str().unwrap(),
        ])
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(c.writes(), Vec::<String>::new(), "{err}");
    assert_eq!(
        std::fs::read(&journal).unwrap(),
        before,
        "the journal changed"
    );
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("deployment ml/web: nothing written: journal") && err.contains("not changed"),
        "{err}"
    );
    let names: Vec<String> = std::fs::read_dir(journal.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["journal.json"], "no temporary file is left");
}
