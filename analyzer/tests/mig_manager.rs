//! `tessera mig apply --via mig-manager` end to end: the real `tessera` binary, with kube-rs,
//! against `tessera-fake-kube` (a test server speaking the Kubernetes API's wire protocol:
//! resourceVersions, merge and strategic-merge patches, chunked watches, 409 and 410) and its
//! scripted mig-manager (pending → success, failed, stuck in pending, rebooting). No real API
//! server can be installed on these machines.

use std::path::PathBuf;
use std::time::Duration;

use fake_kube::{Behaviour, FakeKube};
use tempfile::TempDir;
use tessera_core::mig::parted::PartedFile;
use tessera_core::mig::plan::{GpuLayout, PlannedInstance, TesseraPlan};
use tessera_core::model::Placement;

use super::support::cli::tessera_with;

pub(super) const NS: &str = "gpu-operator";
pub(super) const CM: &str = "custom-mig-config";
pub(super) const CONFIG: &str = "nvidia.com/mig.config";
pub(super) const STATE: &str = "nvidia.com/mig.config.state";

/// The operator's generated default (a few of its configs).
pub(super) const OPERATOR_DEFAULT: &str = "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n  all-enabled:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n  all-1g.10gb:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.10gb\": 7\n";

/// A fake cluster with two GPU nodes and a plan (shared with `mig_manager_faults`).
pub(super) struct Cluster {
    pub(super) kube: FakeKube,
    dir: TempDir,
}

fn inst(profile: &str, id: u32, start: u32, size: u32) -> PlannedInstance {
    PlannedInstance {
        profile: profile.into(),
        profile_id: id,
        placement: Placement { start, size },
        workloads: vec![],
    }
}

fn gpu(node: &str, index: u32, instances: Vec<PlannedInstance>) -> GpuLayout {
    GpuLayout {
        node: Some(node.into()),
        gpu: index,
        uuid: None,
        model: "H100-80GB".into(),
        mig_enabled: true,
        instances,
        workloads: vec![],
    }
}

impl Cluster {
    /// Two GPU Operator nodes with mig-manager, both at `all-disabled` (success), the operator's
    /// default ConfigMap, and a plan with a `day` and a `night` config for both.
    pub(super) fn new() -> Cluster {
        let kube = FakeKube::start();
        for n in ["gpu-1", "gpu-2"] {
            kube.add_node(
                n,
                &[
                    ("nvidia.com/gpu.deploy.mig-manager", "true"),
                    ("nvidia.com/gpu.deploy.device-plugin", "true"),
                    (CONFIG, "all-disabled"),
                    (STATE, "success"),
                ],
            );
        }
        kube.add_node("cpu-1", &[]);
        kube.put_configmap(
            NS,
            "default-mig-parted-config",
            &[("config.yaml", OPERATOR_DEFAULT)],
        );
        kube.set_mig_manager_configmap(NS, CM);
        let dir = TempDir::new().unwrap();
        kube.write_kubeconfig(&dir.path().join("kubeconfig"));
        let mut plan = TesseraPlan::new();
        let halves = || vec![inst("3g.40gb", 9, 0, 4), inst("3g.40gb", 9, 4, 4)];
        let sevenths = || {
            (0..7)
                .map(|i| inst("1g.10gb", 19, i, 1))
                .collect::<Vec<_>>()
        };
        plan.configs.insert(
            "day".into(),
            vec![
                gpu("gpu-1", 0, halves()),
                gpu("gpu-2", 0, halves()),
                gpu("gpu-2", 1, sevenths()),
            ],
        );
        plan.configs.insert(
            "night".into(),
            vec![gpu("gpu-1", 0, sevenths()), gpu("gpu-2", 0, sevenths())],
        );
        plan.validate("test plan").unwrap();
        std::fs::write(dir.path().join("plan.yaml"), plan.to_yaml()).unwrap();
        Cluster { kube, dir }
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `tessera mig apply plan.yaml --via mig-manager --kubeconfig … ARGS`.
    pub(super) fn apply(&self, args: &[&str]) -> (i32, String, String) {
        let plan = (!args.contains(&"--schedule")).then_some("plan.yaml");
        self.apply_file(plan, args)
    }

    /// `tessera mig apply [FILE] --via mig-manager --kubeconfig … ARGS` in the test's folder.
    fn apply_file(&self, file: Option<&str>, args: &[&str]) -> (i32, String, String) {
        let kubeconfig = self.path("kubeconfig");
        let mut all = vec!["mig", "apply", "--via", "mig-manager", "--kubeconfig"];
        all.push(kubeconfig.to_str().unwrap());
        all.extend(file);
        all.extend_from_slice(args);
        let out = tessera_with(&all, |c| {
            c.env_remove("KUBECONFIG")
                .env("XDG_STATE_HOME", self.path("state"))
                .current_dir(self.dir.path());
        });
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `tessera mig apply plan.yaml --via mig-manager --kubeconfig … ARGS`, not started (for
    /// tests that run two at once or signal one).
    pub(super) fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"));
        cmd.args(["mig", "apply", "--via", "mig-manager", "--kubeconfig"])
            .arg(self.path("kubeconfig"))
            .arg("plan.yaml")
            .args(args)
            .env_remove("KUBECONFIG")
            .env("XDG_STATE_HOME", self.path("state"))
            .current_dir(self.dir.path());
        cmd
    }

    pub(super) fn writes(&self) -> Vec<String> {
        self.kube
            .requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    pub(super) fn stored(&self) -> PartedFile {
        let cm = self.kube.configmap(NS, CM).expect("the ConfigMap exists");
        PartedFile::parse(&cm["config.yaml"], "stored").unwrap()
    }

    /// The tessera config the node is labelled with now.
    pub(super) fn label(&self, node: &str) -> Option<String> {
        self.kube.node_labels(node).get(CONFIG).cloned()
    }
}

#[test]
fn dry_run_prints_the_configmap_diff_and_label_changes_and_writes_nothing() {
    let c = Cluster::new();
    let (code, out, err) = c.apply(&["--config", "day"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "ConfigMap {NS}/{CM} (config.yaml) will be created"
        )),
        "{out}"
    );
    // The operator's defaults are carried over, tessera's configs added.
    assert!(out.contains("+  all-1g.10gb:"), "{out}");
    assert!(out.contains("+  tessera-day-"), "{out}");
    assert!(
        out.contains("gpu-1: nvidia.com/mig.config: all-disabled -> tessera-day-"),
        "{out}"
    );
    assert!(
        out.contains("gpu-2: nvidia.com/mig.config: all-disabled -> tessera-day-"),
        "{out}"
    );
    assert!(out.contains("(GPUs 0, 1 change)"), "{out}");
    assert!(err.contains("dry run: nothing was changed"), "{err}");
    assert!(c.writes().is_empty(), "{:?}", c.writes());
    assert!(c.kube.configmap(NS, CM).is_none());
}

#[test]
fn applies_node_by_node_through_the_configmap_and_labels() {
    let c = Cluster::new();
    c.kube.script("gpu-2", "*", Behaviour::RebootThenSuccess);
    let (code, out, err) = c.apply(&["--config", "day", "--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let stored = c.stored();
    for keep in ["all-disabled", "all-enabled", "all-1g.10gb"] {
        assert!(
            stored.configs.contains_key(keep),
            "{keep} kept: {:?}",
            stored.configs.keys()
        );
    }
    let (g1, g2) = (c.label("gpu-1").unwrap(), c.label("gpu-2").unwrap());
    assert!(
        g1.starts_with("tessera-day-") && g2.starts_with("tessera-day-"),
        "{g1} {g2}"
    );
    assert_ne!(g1, g2, "different layouts get different configs");
    assert_eq!(stored.configs[&g1][0].mig_devices["3g.40gb"], 2);
    assert_eq!(stored.configs[&g2].len(), 2);
    for n in ["gpu-1", "gpu-2"] {
        assert_eq!(c.kube.node_labels(n)[STATE], "success");
        assert!(out.contains(&format!("node {n}: success")), "{out}");
    }
    assert!(
        c.kube
            .state_history("gpu-2")
            .iter()
            .any(|s| s.as_deref() == Some("rebooting"))
    );
    // Labels by JSON merge patch, and the nodes were watched, not polled.
    let reqs = c.kube.requests();
    let patches: Vec<_> = reqs.iter().filter(|r| r.method == "PATCH").collect();
    assert!(!patches.is_empty());
    assert!(
        patches
            .iter()
            .all(|r| r.content_type.as_deref() == Some("application/merge-patch+json"))
    );
    assert!(reqs.iter().filter(|r| r.is_watch()).count() >= 2);
    // Node by node: gpu-2's label changed only after gpu-1 reached success.
    let order: Vec<String> = reqs
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(order, ["/api/v1/nodes/gpu-1", "/api/v1/nodes/gpu-2"]);
    // A second run has nothing to do and writes nothing.
    let before = c.writes().len();
    let (code, out, err) = c.apply(&["--config", "day", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nothing to do"), "{out}");
    assert_eq!(c.writes().len(), before, "{:?}", c.writes());
}

#[test]
fn failed_rolls_the_label_back_and_stops() {
    let c = Cluster::new();
    c.kube.script("gpu-1", "*", Behaviour::Failed);
    c.kube.script("gpu-1", "all-disabled", Behaviour::Success);
    let (code, out, err) = c.apply(&["--config", "day", "--yes"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("node gpu-1: failed with nvidia.com/mig.config=tessera-day-"),
        "{err}"
    );
    assert!(
        out.contains("node gpu-1: rolled back nvidia.com/mig.config tessera-day-"),
        "{out}"
    );
    assert!(
        out.contains("-> all-disabled after failed; all-disabled: success"),
        "{out}"
    );
    assert_eq!(c.label("gpu-1").as_deref(), Some("all-disabled"));
    let history = c.kube.label_history("gpu-1");
    assert_eq!(history.last().unwrap().as_deref(), Some("all-disabled"));
    assert!(
        history
            .iter()
            .any(|l| l.as_deref().is_some_and(|l| l.starts_with("tessera-day-")))
    );
    // gpu-2 was not started.
    assert!(err.contains("not started: gpu-2"), "{err}");
    assert_eq!(c.label("gpu-2").as_deref(), Some("all-disabled"));
    assert_eq!(
        c.kube.label_history("gpu-2").len(),
        1,
        "{:?}",
        c.kube.label_history("gpu-2")
    );
}

#[test]
fn a_stuck_pending_times_out_and_rolls_back() {
    let c = Cluster::new();
    c.kube.script("gpu-1", "*", Behaviour::StuckPending);
    c.kube.script("gpu-1", "all-disabled", Behaviour::Success);
    let (code, out, err) = c.apply(&[
        "--config",
        "day",
        "--yes",
        "--node",
        "gpu-1",
        "--node-timeout",
        "2s",
    ]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("no result after 2.0 s (state pending)"),
        "{err}"
    );
    assert!(
        out.contains(
            "-> all-disabled after no result after 2.0 s (state pending); all-disabled: success"
        ),
        "{out}"
    );
    assert_eq!(c.label("gpu-1").as_deref(), Some("all-disabled"));
    assert_eq!(c.kube.node_labels("gpu-1")[STATE], "success");
}

#[test]
fn pods_holding_gpus_refuse_the_change_naming_them() {
    let c = Cluster::new();
    c.kube.add_pod(
        "team-a",
        "train-0",
        "gpu-2",
        &[("nvidia.com/gpu", "1")],
        "Running",
    );
    c.kube.add_pod(
        "team-b",
        "done-0",
        "gpu-2",
        &[("nvidia.com/gpu", "1")],
        "Succeeded",
    );
    c.kube
        .add_pod("team-c", "web-0", "gpu-1", &[("cpu", "1")], "Running");
    let (code, out, err) = c.apply(&["--config", "day", "--yes"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("refused, nothing was changed"), "{err}");
    assert!(
        err.contains("node gpu-2: pod team-a/train-0 (nvidia.com/gpu=1)"),
        "{err}"
    );
    assert!(!err.contains("done-0") && !err.contains("web-0"), "{err}");
    assert!(c.writes().is_empty(), "{:?}", c.writes());
    // The dry run says so too.
    let (code, _, err) = c.apply(&["--config", "day"]);
    assert_eq!(code, 0);
    assert!(err.contains("--yes would refuse"), "{err}");
    // gpu-1 alone has no GPU pod: it goes ahead.
    let (code, _, err) = c.apply(&["--config", "day", "--yes", "--node", "gpu-1"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn cordon_keeps_pods_off_while_it_changes_and_uncordons_after_success() {
    let c = Cluster::new();
    let (code, out, err) = c.apply(&[
        "--config",
        "night",
        "--yes",
        "--cordon",
        "--max-unavailable",
        "2",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("node gpu-1: cordoned") && out.contains("node gpu-2: uncordoned"),
        "{out}"
    );
    assert!(!c.kube.node_unschedulable("gpu-1") && !c.kube.node_unschedulable("gpu-2"));
    let reqs = c.kube.requests();
    let strategic: Vec<_> = reqs
        .iter()
        .filter(|r| r.content_type.as_deref() == Some("application/strategic-merge-patch+json"))
        .collect();
    assert_eq!(strategic.len(), 4, "cordon and uncordon of two nodes");
    // The audit trail: an Event per node labelled, and a line of the local audit log.
    let log = std::fs::read_to_string(c.path("state/tessera/cluster-audit.jsonl")).unwrap();
    for node in ["gpu-1", "gpu-2"] {
        assert!(
            log.lines().any(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["name"] == node && v["reason"] == "MigConfigLabelled" && v["kind"] == "Node"
            }),
            "{node}: {log}"
        );
    }
    let events = c.kube.events();
    for node in ["gpu-1", "gpu-2"] {
        assert!(
            events.iter().any(|e| e["reason"] == "MigConfigLabelled"
                && e["regarding"]["name"] == node
                && e["note"].as_str().unwrap().contains("tessera-night-")),
            "{node}: {events:?}"
        );
    }
    // Both nodes changed at once: both labels were set before either was uncordoned.
    let idx = |pred: &dyn Fn(&fake_kube::Request) -> bool| reqs.iter().position(pred).unwrap();
    let second_label = idx(&|r| r.path.ends_with("gpu-2") && r.body.contains(CONFIG));
    let first_uncordon = idx(&|r| r.body.contains("\"unschedulable\":false"));
    assert!(second_label < first_uncordon);
}

#[test]
fn a_conflicting_configmap_write_is_reread_and_retried() {
    let c = Cluster::new();
    c.kube.put_configmap(
        NS,
        CM,
        &[("config.yaml", OPERATOR_DEFAULT), ("other-key", "kept")],
    );
    c.kube.conflict_next_configmap_write();
    let (code, out, err) = c.apply(&["--config", "night", "--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("changed meanwhile"), "{err}");
    let cm = c.kube.configmap(NS, CM).unwrap();
    assert_eq!(cm["other-key"], "kept");
    assert!(
        c.stored()
            .configs
            .keys()
            .any(|k| k.starts_with("tessera-night-"))
    );
    let puts = c
        .kube
        .requests()
        .iter()
        .filter(|r| r.method == "PUT")
        .count();
    assert_eq!(puts, 2, "one 409, one success");
}

#[test]
fn watches_survive_410_gone_and_servers_that_end_them() {
    let c = Cluster::new();
    c.kube.set_mig_step_delay(Duration::from_millis(300));
    c.kube.script("gpu-1", "*", Behaviour::RebootThenSuccess);
    // Every watch ends after 100 ms (resumed from its last version), and the first two watches
    // find their version expired (410 in the stream: the node is re-read).
    c.kube.close_watches_after(Duration::from_millis(100));
    c.kube.expire_next_watches(2);
    let (code, out, err) = c.apply(&["--config", "day", "--yes", "--node", "gpu-1"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("node gpu-1: success"), "{out}");
    assert_eq!(c.kube.node_labels("gpu-1")[STATE], "success");
    let reqs = c.kube.requests();
    let log: Vec<String> = reqs
        .iter()
        .map(|r| format!("{} {} {}", r.method, r.path, r.query))
        .collect();
    // Re-read after each 410, and re-watched after each end: some watch resumes the one the
    // server ended (a watch right after a watch, no re-read between). How many ends the rollout
    // sees depends on how long it takes, so that is not counted.
    let rereads = reqs
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/nodes/gpu-1")
        .count();
    assert_eq!(rereads, 2, "{log:#?}");
    let watches: Vec<bool> = reqs
        .iter()
        .filter(|r| r.is_watch() || (r.method == "GET" && r.path == "/api/v1/nodes/gpu-1"))
        .map(|r| r.is_watch())
        .collect();
    assert!(
        watches.windows(2).any(|w| w[0] && w[1]),
        "no watch resumed after the server ended one: {log:#?}"
    );
}

#[test]
fn schedule_goes_through_the_same_path() {
    let c = Cluster::new();
    std::fs::write(
        c.path("schedule.yaml"),
        "version: v1\nkind: tessera-mig-schedule\ntimezone: UTC\nplan: plan.yaml\nswitches:\n  - at: \"07:00\"\n    config: day\n  - at: \"22:00\"\n    config: night\n",
    )
    .unwrap();
    let (code, out, err) = c.apply(&[
        "--schedule",
        "schedule.yaml",
        "--now",
        "2026-11-23T23:00:00Z",
        "--yes",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("config night is active"), "{err}");
    assert!(c.label("gpu-1").unwrap().starts_with("tessera-night-"));
    // Both nodes have the same night layout: one config.
    assert_eq!(c.label("gpu-1"), c.label("gpu-2"));
    // The day config later replaces it through the same path.
    let (code, out, err) = c.apply(&[
        "--schedule",
        "schedule.yaml",
        "--now",
        "2026-11-24T08:00:00Z",
        "--yes",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("config day is active"), "{err}");
    assert!(c.label("gpu-1").unwrap().starts_with("tessera-day-"));
    assert!(c.label("gpu-2").unwrap().starts_with("tessera-day-"));
}

#[test]
fn a_clusterpolicy_pointing_elsewhere_and_bad_input_are_refused() {
    let c = Cluster::new();
    c.kube.set_mig_manager_configmap(NS, "someone-elses");
    let (code, _, err) = c.apply(&["--config", "day", "--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("spec.migManager.config.name is \"someone-elses\""),
        "{err}"
    );
    assert!(
        err.contains("kubectl patch clusterpolicies.nvidia.com/cluster-policy --type merge"),
        "{err}"
    );
    assert!(c.writes().is_empty());
    c.kube.set_mig_manager_configmap(NS, CM);
    // A node of the plan that does not run mig-manager.
    let (code, _, err) = c.apply(&["--config", "day", "--node", "cpu-1"]);
    assert_eq!(code, 2);
    assert!(err.contains("names no GPU of node cpu-1"), "{err}");
    // Node-local flags make no sense here.
    let (code, _, err) = c.apply(&["--config", "day", "--backend", "sim"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--backend sim is for the node-local apply"),
        "{err}"
    );
    // A stored config.yaml that is not a mig-parted file is not overwritten.
    c.kube
        .put_configmap(NS, CM, &[("config.yaml", "version: v2\n")]);
    let (code, _, err) = c.apply(&["--config", "day", "--yes"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a mig-parted v1 file"), "{err}");
    assert_eq!(
        c.kube.configmap(NS, CM).unwrap()["config.yaml"],
        "version: v2\n"
    );
    // Credentials the server refuses: exit 2, saying where the permissions are.
    let kubeconfig = c.path("kubeconfig");
    let good = std::fs::read_to_string(&kubeconfig).unwrap();
    std::fs::write(&kubeconfig, good.replace(c.kube.token(), "wrong-token")).unwrap();
    let (code, _, err) = c.apply(&["--config", "day"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("deploy/mig-manager/rbac.yaml"), "{err}");
    std::fs::write(&kubeconfig, good).unwrap();
    // A server that accepts and never answers is an error within --request-timeout, not a hang.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let good = std::fs::read_to_string(&kubeconfig).unwrap();
    std::fs::write(
        &kubeconfig,
        good.replace(
            &c.kube.url(),
            &format!("http://{}", silent.local_addr().unwrap()),
        ),
    )
    .unwrap();
    let (code, _, err) = c.apply(&["--config", "day", "--request-timeout", "1s"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no answer from the API server in 1 s"),
        "{err}"
    );
    drop(silent);
    std::fs::write(&kubeconfig, good).unwrap();
    // An unreachable API server is an error, not a hang.
    drop(c.kube);
    let kubeconfig = c.dir.path().join("kubeconfig");
    let out = tessera_with(
        &[
            "mig",
            "apply",
            "plan.yaml",
            "--config",
            "day",
            "--via",
            "mig-manager",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
        |cmd| {
            cmd.current_dir(c.dir.path());
        },
    );
    assert_eq!(out.status.code(), Some(2));
}

/// One RBAC rule of deploy/mig-manager/rbac.yaml, with the namespace of its Role
/// (`None` for the ClusterRole).
pub(super) struct Rule {
    namespace: Option<String>,
    groups: Vec<String>,
    pub(super) resources: Vec<String>,
    names: Vec<String>,
    pub(super) verbs: Vec<String>,
}

fn strings(v: &serde_yaml_ng::Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(|l| l.as_sequence())
        .map(|l| {
            l.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn rbac_rules(text: &str) -> Vec<Rule> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v: serde_yaml_ng::Value = serde::Deserialize::deserialize(doc).unwrap();
        let kind = v["kind"].as_str().unwrap();
        if kind != "Role" && kind != "ClusterRole" {
            continue;
        }
        let namespace =
            (kind == "Role").then(|| v["metadata"]["namespace"].as_str().unwrap().to_string());
        for r in v["rules"].as_sequence().unwrap() {
            out.push(Rule {
                namespace: namespace.clone(),
                groups: strings(r, "apiGroups"),
                resources: strings(r, "resources"),
                names: strings(r, "resourceNames"),
                verbs: strings(r, "verbs"),
            });
        }
    }
    out
}

/// (group, resource, namespace, name, verb) of a request, as the API server's authorizer sees it
/// (a subresource as `deployments/scale`).
fn attributes(r: &fake_kube::Request) -> (String, String, Option<String>, Option<String>, String) {
    let parts: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), rest.to_vec()),
        ["apis", g, _, rest @ ..] => (g.to_string(), rest.to_vec()),
        _ => panic!("unexpected path {}", r.path),
    };
    let (namespace, rest) = match rest.as_slice() {
        ["namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest.to_vec()),
        _ => (None, rest),
    };
    let resource = match rest.get(2) {
        Some(sub) => format!("{}/{sub}", rest[0]),
        None => rest[0].to_string(),
    };
    let name = rest.get(1).map(|s| s.to_string());
    let verb = match (r.method.as_str(), &name) {
        ("GET", _) if r.is_watch() => "watch",
        ("GET", Some(_)) => "get",
        ("GET", None) => "list",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("POST", _) => "create",
        (m, _) => panic!("unexpected method {m}"),
    };
    (group, resource, namespace, name, verb.to_string())
}

/// The rule of `rules` that allows request `r` (panics naming it when none does).
pub(super) fn allowed(rules: &[Rule], r: &fake_kube::Request) -> usize {
    let (group, resource, namespace, name, verb) = attributes(r);
    let allowed = rules.iter().position(|rule| {
        rule.namespace
            .as_ref()
            .is_none_or(|ns| Some(ns) == namespace.as_ref())
            && rule.groups.contains(&group)
            && rule.resources.contains(&resource)
            && rule.verbs.contains(&verb)
            && (rule.names.is_empty() || name.as_ref().is_some_and(|n| rule.names.contains(n)))
    });
    allowed.unwrap_or_else(|| {
        panic!(
            "rbac.yaml does not allow {verb} {group}/{resource} {namespace:?} {name:?} ({} {})",
            r.method, r.path
        )
    })
}

#[test]
fn the_cronjob_of_deploy_runs_and_needs_only_its_rbac() {
    let deploy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/mig-manager");
    let kube = FakeKube::start();
    for n in ["gpu-node-1", "gpu-node-2"] {
        kube.add_node(
            n,
            &[
                ("nvidia.com/gpu.deploy.mig-manager", "true"),
                (CONFIG, "all-disabled"),
                (STATE, "success"),
            ],
        );
    }
    kube.put_configmap(
        NS,
        "default-mig-parted-config",
        &[("config.yaml", OPERATOR_DEFAULT)],
    );
    kube.set_mig_manager_configmap(NS, CM);
    let dir = TempDir::new().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    kube.write_kubeconfig(&kubeconfig);
    // The CronJob's own arguments, with the plan ConfigMap's mount point at deploy/.
    let cronjob: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(deploy.join("cronjob.yaml")).unwrap())
            .unwrap();
    let container = &cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["command"][0].as_str(), Some("tessera"));
    let mut args: Vec<String> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("/etc/tessera/", &format!("{}/", deploy.display()))
        })
        .collect();
    assert!(args.contains(&"--yes".to_string()), "{args:?}");
    // A Monday at 10:00 in Berlin: the day config; --cordon exercises the node patch too.
    args.extend(["--now=2026-11-23T09:00:00Z".into(), "--cordon".into()]);
    args.push(format!("--kubeconfig={}", kubeconfig.display()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = tessera_with(&argv, |c| {
        c.env_remove("KUBECONFIG");
    });
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for n in ["gpu-node-1", "gpu-node-2"] {
        assert!(
            kube.node_labels(n)[CONFIG].starts_with("tessera-day-"),
            "{n}"
        );
        // --audit-log=-: each change's audit line is in the pod's log (stderr).
        assert!(
            stderr.lines().any(|l| l.starts_with('{')
                && l.contains("\"reason\":\"MigConfigLabelled\"")
                && l.contains(&format!("\"name\":\"{n}\""))),
            "{stderr}"
        );
    }
    assert!(
        !stderr.contains("audit trail could not be written"),
        "{stderr}"
    );
    // Every call it made is allowed by rbac.yaml, and every verb there was used.
    let rules = rbac_rules(&std::fs::read_to_string(deploy.join("rbac.yaml")).unwrap());
    let mut used = vec![false; rules.len()];
    let reqs = kube.requests();
    assert!(reqs.len() > 10, "{} requests", reqs.len());
    for r in &reqs {
        used[allowed(&rules, r)] = true;
    }
    // (update of the ConfigMap is used on a second run, when it exists.)
    let unused: Vec<usize> = (0..rules.len()).filter(|i| !used[*i]).collect();
    for i in &unused {
        assert!(
            rules[*i].verbs == ["update"],
            "rule {i} ({:?} {:?}) is never used",
            rules[*i].resources,
            rules[*i].verbs
        );
    }
}

#[test]
fn a_node_without_a_previous_label_gets_it_removed_on_rollback() {
    let c = Cluster::new();
    c.kube
        .set_node_labels("gpu-1", &[(CONFIG, None), (STATE, None)]);
    c.kube.script("gpu-1", "*", Behaviour::Failed);
    let (code, out, err) = c.apply(&["--config", "day", "--yes", "--node", "gpu-1", "--cordon"]);
    // Exit 3: the node's GPUs are not known to be back; what to run is printed.
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(
        err.contains("kubectl uncordon gpu-1   # once its GPUs are checked"),
        "{err}"
    );
    assert!(out.contains("-> (removed) after failed"), "{out}");
    assert!(
        out.contains("mig-manager does not revert the GPUs"),
        "{out}"
    );
    assert!(out.contains("it stays cordoned"), "{out}");
    assert_eq!(c.label("gpu-1"), None);
    assert!(
        c.kube.node_unschedulable("gpu-1"),
        "left cordoned after a failed change"
    );
    // The dry run said every GPU may change (no label to compare with).
    let (_, out, _) = c.apply(&["--config", "day"]);
    assert!(
        out.contains("every GPU may change: the node has no nvidia.com/mig.config label"),
        "{out}"
    );
}

#[test]
fn a_mig_parted_file_goes_to_the_nodes_a_selector_picks() {
    let c = Cluster::new();
    std::fs::write(
        c.path("parted.yaml"),
        "version: v1\nmig-configs:\n  all-3g:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"3g.40gb\": 2\n",
    )
    .unwrap();
    let run = |extra: &[&str]| c.apply_file(Some("parted.yaml"), extra);
    let (code, _, err) = run(&["--yes"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--node NAME or --node-selector SELECTOR"),
        "{err}"
    );
    let (code, out, err) = run(&[
        "--yes",
        "--node-selector",
        "nvidia.com/gpu.deploy.mig-manager=true",
        "--max-unavailable",
        "2",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let label = c.label("gpu-1").unwrap();
    assert!(label.starts_with("tessera-all-3g-"), "{label}");
    assert_eq!(c.label("gpu-2").as_deref(), Some(label.as_str()));
    assert_eq!(c.label("cpu-1"), None, "not selected");
    let entries = &c.stored().configs[&label];
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].mig_devices["3g.40gb"], 2);
}
