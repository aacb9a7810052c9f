//! `tessera share plan` and `tessera share apply` end to end: the real `tessera` binary, with
//! kube-rs, against `tessera-fake-kube` and its scripted device plugin (it reads the node's
//! `nvidia.com/device-plugin.config` and the ConfigMap the ClusterPolicy names, then advertises
//! GPUs × replicas and labels `nvidia.com/gpu.replicas`, or fails as scripted), with a plan's
//! consolidation moves measured on a CSV source written here.

use std::path::PathBuf;
use std::time::Duration;

use fake_kube::{FakeKube, Fault, Hold, PluginBehaviour};
use tempfile::TempDir;
use tessera::sharing::choose::{Method, config_name, render};
use tessera_core::mig::plan::TesseraPlan;
use tessera_core::mig::plan_sections::{ConsolidationMove, GpuRef, PlanWindow};

use super::mig_manager::{allowed, rbac_rules};
use super::support::cli::tessera_with;

const NS: &str = "gpu-operator";
const CM: &str = "device-plugin-configs";
const LABEL: &str = "nvidia.com/device-plugin.config";
const GIB: f64 = (1u64 << 30) as f64;

/// One GPU of the CSV: node, index, peak memory (GiB), activity, MIG mode.
type Gpu = (&'static str, u32, f64, f64, bool);

/// gpu-1 (4 GPUs): 0 ← 1, and 2 ← 3 + gpu-2's 1 (3 workloads: replicas 3); gpu-2 (3 GPUs):
/// 0 ← 2. Small, quiet workloads: MPS everywhere.
const SMALL: &[Gpu] = &[
    ("gpu-1", 0, 6.0, 0.10, false),
    ("gpu-1", 1, 4.0, 0.05, false),
    ("gpu-1", 2, 8.0, 0.20, false),
    ("gpu-1", 3, 2.0, 0.10, false),
    ("gpu-2", 0, 5.0, 0.10, false),
    ("gpu-2", 1, 3.0, 0.10, false),
    ("gpu-2", 2, 6.0, 0.20, false),
];

/// Who holds a GPU of the CSV (its `holder_*` labels): a pod, a Slurm job, or no one named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Pod,
    Job,
    Unknown,
}

pub(super) struct Cluster {
    pub(super) kube: FakeKube,
    dir: TempDir,
}

fn gref(node: &str, gpu: u32) -> GpuRef {
    GpuRef {
        node: node.into(),
        gpu,
        uuid: Some(format!("GPU-{node}-{gpu}")),
        label: Some(format!("{node}/GPU{gpu} [python3]")),
    }
}

/// The config tessera writes for `method` × `replicas`.
fn name(method: Method, replicas: u32) -> String {
    config_name(method, replicas, &render(method, replicas))
}

impl Cluster {
    /// [`Cluster::held`] with every GPU held by a pod.
    pub(super) fn new(gpus: &[Gpu]) -> Cluster {
        Cluster::held(gpus, |_, _| Holder::Pod)
    }

    /// GPU nodes gpu-1 (4 GPUs) and gpu-2 (3 GPUs) with the device plugin, a CPU node, the
    /// ClusterPolicy pointing the device plugin at `gpu-operator/device-plugin-configs` (default
    /// key `any`), that ConfigMap with `any` and a hand-written config, the CSV of `gpus` (each
    /// held as `holder` says: pod `team-a/<node>-gpu<i>`, Slurm job `71<i>` on gpu-1 and `72<i>`
    /// on gpu-2, or no one named) and a plan of the moves.
    fn held(gpus: &[Gpu], holder: impl Fn(&str, u32) -> Holder) -> Cluster {
        let kube = FakeKube::start();
        kube.set_device_plugin_delay(Duration::from_millis(30));
        kube.add_gpu_node("gpu-1", 4, &[]);
        kube.add_gpu_node("gpu-2", 3, &[]);
        kube.add_node("cpu-1", &[]);
        kube.set_device_plugin_config(Some(CM), Some("any"));
        kube.put_configmap(
            NS,
            CM,
            &[
                ("any", "version: v1\n"),
                ("hand-ts-2", "version: v1\nsharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n"),
            ],
        );
        let dir = TempDir::new().unwrap();
        kube.write_kubeconfig(&dir.path().join("kubeconfig"));
        let mut csv = String::from(
            "timestamp,entity,metric,value,kind,node,gpu,uuid,model,mig_enabled,holder_namespace,holder_pod,holder_slurm_job_id\n",
        );
        for i in 1..=60u32 {
            let ts = 1_793_577_600 + u64::from(i) * 60;
            for (node, gpu, peak, act, mig) in gpus {
                // Memory rises to its peak at the last row; activity is flat.
                let mem = peak * GIB * f64::from(i) / 60.0;
                let held = holder(node, *gpu);
                let labels = match held {
                    Holder::Pod => format!("team-a,{node}-gpu{gpu},"),
                    Holder::Job => format!(",,7{}{gpu}", &node[4..]),
                    Holder::Unknown => ",,".into(),
                };
                let mut values = vec![
                    ("memory_used_bytes", format!("{mem:.0}")),
                    ("memory_total_bytes", format!("{:.0}", 80.0 * GIB)),
                    ("sm_active_ratio", format!("{act}")),
                ];
                if held != Holder::Unknown {
                    values.push(("holders", "1".into()));
                }
                for (m, v) in values {
                    csv.push_str(&format!(
                        "{ts},GPU-{node}-{gpu},{m},{v},gpu,{node},{gpu},GPU-{node}-{gpu},H100,{mig},{labels}\n"
                    ));
                }
            }
        }
        std::fs::write(dir.path().join("gpus.csv"), csv).unwrap();
        let mut plan = TesseraPlan::new();
        plan.window = Some(PlanWindow {
            from: "2026-11-02T00:00:00Z".into(),
            until: "2026-11-02T01:00:00Z".into(),
            sources: vec![],
        });
        plan.consolidation = vec![
            ConsolidationMove {
                model: "H100".into(),
                host: gref("gpu-1", 0),
                guests: vec![gref("gpu-1", 1)],
            },
            ConsolidationMove {
                model: "H100".into(),
                host: gref("gpu-1", 2),
                guests: vec![gref("gpu-1", 3), gref("gpu-2", 1)],
            },
            ConsolidationMove {
                model: "H100".into(),
                host: gref("gpu-2", 0),
                guests: vec![gref("gpu-2", 2)],
            },
        ];
        plan.validate("test plan").unwrap();
        std::fs::write(dir.path().join("plan.yaml"), plan.to_yaml()).unwrap();
        Cluster { kube, dir }
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `tessera share VERB --plan plan.yaml --source csv:gpus.csv [--kubeconfig …] ARGS`.
    pub(super) fn share(&self, verb: &str, args: &[&str]) -> (i32, String, String) {
        let kubeconfig = self.path("kubeconfig");
        let src = format!("csv:{}", self.path("gpus.csv").display());
        let mut all = vec!["share", verb, "--plan", "plan.yaml", "--source", &src];
        if verb == "apply" {
            all.extend(["--kubeconfig", kubeconfig.to_str().unwrap()]);
            all.extend(["--poll-interval", "50ms"]);
            if !args.contains(&"--node-timeout") {
                all.extend(["--node-timeout", "3s"]);
            }
            // The CSV's data is of 2026-11-02: judged an hour after it ends.
            if !args
                .iter()
                .any(|a| a.starts_with("--now") || a.contains("evidence"))
            {
                all.extend(["--now", "2026-11-02T02:00:00Z"]);
            }
        }
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

    pub(super) fn writes(&self) -> Vec<String> {
        self.kube
            .requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    fn gpus(&self, node: &str) -> Option<String> {
        self.kube.node_allocatable(node, "nvidia.com/gpu")
    }

    fn replicas(&self, node: &str) -> Option<String> {
        self.kube
            .node_labels(node)
            .get("nvidia.com/gpu.replicas")
            .cloned()
    }
}

#[test]
fn plan_prints_mps_for_small_workloads_and_time_slicing_for_big_or_mig() {
    let c = Cluster::new(SMALL);
    let (code, out, err) = c.share("plan", &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(&format!(
            "node gpu-1: mps × 3 (config {})",
            name(Method::Mps, 3)
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "node gpu-2: mps × 2 (config {})",
            name(Method::Mps, 2)
        )),
        "{out}"
    );
    assert!(out.contains("GPU 2 would run: gpu-1/GPU2 [python3] (peak 8.0 GiB, active 20%), gpu-1/GPU3 [python3] (peak 2.0 GiB, active 10%), gpu-2/GPU1 [python3]"), "{out}");
    assert!(
        out.contains(&format!(
            "kubectl label node gpu-1 {LABEL}={} --overwrite",
            name(Method::Mps, 3)
        )),
        "{out}"
    );
    assert!(
        out.contains(
            "    mps:\n      resources:\n        - name: nvidia.com/gpu\n          replicas: 3"
        ),
        "{out}"
    );
    assert!(c.kube.requests().is_empty(), "plan talks to no cluster");

    // gpu-2's guest peaks at 45 GiB: more than 80 GiB / 2 → time-slicing; gpu-1 in MIG mode.
    let mut gpus = SMALL.to_vec();
    gpus[6] = ("gpu-2", 2, 45.0, 0.2, false);
    gpus[0] = ("gpu-1", 0, 6.0, 0.1, true);
    let c = Cluster::new(&gpus);
    let (code, out, err) = c.share("plan", &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("node gpu-2: time-slicing × 2"), "{out}");
    assert!(out.contains("gpu-2/GPU2 [python3] peaks at 45.0 GiB (+10%: 49.5 GiB), more than 80.0 GiB / 2 = 40.0 GiB"), "{out}");
    assert!(out.contains("node gpu-1: time-slicing × 3"), "{out}");
    assert!(
        out.contains("MIG mode (a GPU of the node was in MIG mode in the window)"),
        "{out}"
    );
}

#[test]
fn dry_run_names_the_diff_the_labels_and_the_pods_and_writes_nothing() {
    let c = Cluster::new(SMALL);
    c.kube.add_pod(
        "team-a",
        "train-0",
        "gpu-1",
        &[("nvidia.com/gpu", "1")],
        "Running",
    );
    c.kube.add_pod(
        "team-a",
        "done-0",
        "gpu-1",
        &[("nvidia.com/gpu", "1")],
        "Succeeded",
    );
    let (code, out, err) = c.share("apply", &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (n3, n2) = (name(Method::Mps, 3), name(Method::Mps, 2));
    assert!(
        out.contains(&format!(
            "ConfigMap {NS}/{CM} will be updated (other keys kept):"
        )),
        "{out}"
    );
    assert!(out.contains(&format!("+++ {n3} (new)")), "{out}");
    assert!(!out.contains("hand-ts-2 (new)"), "{out}");
    assert!(
        out.contains(&format!(
            "node gpu-1: {LABEL} (none) -> {n3}; nvidia.com/gpu 4 -> 12 (4 GPUs × 3, mps)"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "node gpu-2: {LABEL} (none) -> {n2}; nvidia.com/gpu 3 -> 6 (3 GPUs × 2, mps)"
        )),
        "{out}"
    );
    assert!(
        out.contains("node gpu-1: pod team-a/train-0 (nvidia.com/gpu=1)"),
        "{out}"
    );
    assert!(!out.contains("done-0"), "{out}");
    assert!(err.contains("refused without --yes"), "{err}");
    assert!(err.contains("dry run: nothing was changed"), "{err}");
    assert!(c.writes().is_empty(), "{:?}", c.writes());
}

#[test]
fn apply_rolls_out_node_by_node_keeping_other_configs_and_is_idempotent() {
    let c = Cluster::new(SMALL);
    let (code, out, err) = c.share("apply", &["--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (n3, n2) = (name(Method::Mps, 3), name(Method::Mps, 2));
    assert_eq!(c.gpus("gpu-1").as_deref(), Some("12"));
    assert_eq!(c.replicas("gpu-1").as_deref(), Some("3"));
    assert_eq!(c.gpus("gpu-2").as_deref(), Some("6"));
    assert_eq!(c.replicas("gpu-2").as_deref(), Some("2"));
    assert_eq!(c.kube.device_plugin_config("gpu-1"), Some(n3.clone()));
    let cm = c.kube.configmap(NS, CM).unwrap();
    assert!(
        cm["hand-ts-2"].contains("replicas: 2") && cm["any"] == "version: v1\n",
        "{cm:?}"
    );
    assert!(cm[&n3].contains("mps:") && cm.contains_key(&n2), "{cm:?}");
    fake_kube::check_sharing_config(&cm[&n3]).unwrap();
    assert!(out.contains(&format!("node gpu-1: {LABEL}={n3}: nvidia.com/gpu 4 -> 12 (4 GPUs × 3, mps), nvidia.com/gpu.replicas=3 after")), "{out}");
    // The audit trail: an Event per node labelled, regarding the node (namespace default), and
    // a line each in the local audit log.
    let log = std::fs::read_to_string(c.path("state/tessera/cluster-audit.jsonl")).unwrap();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("\"SharingConfigLabelled\""))
            .count(),
        2,
        "{log}"
    );
    let events = c.kube.events();
    for (node, config) in [("gpu-1", &n3), ("gpu-2", &n2)] {
        assert!(
            events.iter().any(|e| e["regarding"]["kind"] == "Node"
                && e["regarding"]["name"] == node
                && e["metadata"]["namespace"] == "default"
                && e["reason"] == "SharingConfigLabelled"
                && e["note"].as_str().unwrap().contains(config.as_str())),
            "{node}: {events:?}"
        );
    }
    // Node by node: gpu-2 was labelled only after gpu-1 was read at its config.
    let reqs = c.kube.requests();
    let patch = |node: &str| {
        reqs.iter()
            .position(|r| r.method == "PATCH" && r.path == format!("/api/v1/nodes/{node}"))
            .unwrap()
    };
    let (p1, p2) = (patch("gpu-1"), patch("gpu-2"));
    assert!(p1 < p2);
    assert!(
        reqs[p1..p2]
            .iter()
            .filter(|r| r.method == "GET" && r.path == "/api/v1/nodes/gpu-1")
            .count()
            >= 1
    );
    // Again: nothing to do, nothing written.
    let before = c.writes().len();
    let (code, out, err) = c.share("apply", &["--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("every node is already at its config: nothing to do"),
        "{out}"
    );
    assert_eq!(c.writes().len(), before, "{:?}", c.writes());
}

#[test]
fn an_absent_configmap_is_created_from_the_default() {
    let c = Cluster::new(SMALL);
    c.kube
        .set_device_plugin_config(Some("tessera-new"), Some("plain"));
    let (code, out, err) = c.share("apply", &["--yes", "--node", "gpu-2"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(&format!("ConfigMap {NS}/tessera-new will be created")),
        "{out}"
    );
    let cm = c.kube.configmap(NS, "tessera-new").unwrap();
    assert_eq!(cm["plain"], "version: v1\n");
    assert!(cm.contains_key(&name(Method::Mps, 2)), "{cm:?}");
    assert_eq!(cm.len(), 2, "{cm:?}");
    assert_eq!(c.gpus("gpu-2").as_deref(), Some("6"));
    // Only the node asked for.
    assert_eq!(c.kube.device_plugin_config("gpu-1"), None);
}

#[test]
fn a_conflict_on_the_configmap_write_is_read_again_and_retried() {
    let c = Cluster::new(SMALL);
    c.kube.conflict_next_configmap_write();
    let (code, out, err) = c.share("apply", &["--yes", "--node", "gpu-2"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("changed meanwhile") && err.contains("reading it again"),
        "{err}"
    );
    let puts = c.writes().iter().filter(|w| w.starts_with("PUT")).count();
    assert_eq!(puts, 2, "{:?}", c.writes());
    let cm = c.kube.configmap(NS, CM).unwrap();
    assert!(cm.contains_key("hand-ts-2") && cm.contains_key(&name(Method::Mps, 2)));
    assert_eq!(c.gpus("gpu-2").as_deref(), Some("6"));
}

/// A node that does not reach its config gets its previous label back and advertises what it
/// did before; later nodes are not started; tessera's unused config is pruned.
fn rolls_back(b: PluginBehaviour, expect: &str) {
    let c = Cluster::new(SMALL);
    c.kube.set_node_labels("gpu-1", &[(LABEL, Some("any"))]);
    let n3 = name(Method::Mps, 3);
    c.kube.script_device_plugin("gpu-1", &n3, b);
    let (code, out, err) = c.share("apply", &["--yes", "--node-timeout", "1s"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains(expect), "{expect}: {err}");
    assert!(err.contains("rolling back"), "{err}");
    assert!(err.contains("not started: gpu-2"), "{err}");
    assert!(out.contains(&format!("node gpu-1: rolled back {LABEL} {n3} -> any; nvidia.com/gpu 4, nvidia.com/gpu.replicas 1 again")), "{out}");
    assert_eq!(
        c.kube.device_plugin_label_history("gpu-1"),
        vec![
            None,
            Some("any".into()),
            Some(n3.clone()),
            Some("any".into())
        ]
    );
    assert_eq!(c.gpus("gpu-1").as_deref(), Some("4"));
    assert!(
        c.kube
            .events()
            .iter()
            .any(|e| e["reason"] == "SharingConfigRolledBack"
                && e["type"] == "Warning"
                && e["regarding"]["name"] == "gpu-1"),
        "{:?}",
        c.kube.events()
    );
    assert_eq!(c.kube.device_plugin_config("gpu-2"), None);
    let cm = c.kube.configmap(NS, CM).unwrap();
    assert!(
        !cm.contains_key(&n3) && !cm.contains_key(&name(Method::Mps, 2)),
        "{cm:?}"
    );
    assert!(cm.contains_key("hand-ts-2") && cm.contains_key("any"));
}

#[test]
fn a_device_plugin_that_stays_at_its_old_config_times_out_and_is_rolled_back() {
    rolls_back(
        PluginBehaviour::StaysOld,
        "no result after 1.0 s (nvidia.com/gpu 4, nvidia.com/gpu.replicas 1)",
    );
}

#[test]
fn a_wrong_count_times_out_and_is_rolled_back() {
    rolls_back(
        PluginBehaviour::WrongCount,
        "(nvidia.com/gpu 11, nvidia.com/gpu.replicas 3)",
    );
}

#[test]
fn a_crash_looping_device_plugin_is_rolled_back() {
    rolls_back(
        PluginBehaviour::Never,
        "(nvidia.com/gpu 0, nvidia.com/gpu.replicas 1)",
    );
}

#[test]
fn a_slow_device_plugin_within_the_timeout_succeeds_and_beyond_it_is_rolled_back() {
    let c = Cluster::new(SMALL);
    c.kube.script_device_plugin(
        "gpu-2",
        "*",
        PluginBehaviour::Slow(Duration::from_millis(400)),
    );
    let (code, out, err) = c.share("apply", &["--yes", "--node", "gpu-2"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(c.gpus("gpu-2").as_deref(), Some("6"));
    rolls_back(
        PluginBehaviour::Slow(Duration::from_secs(3)),
        "no result after 1.0 s",
    );
}

#[test]
fn a_node_in_mig_mode_gets_time_slicing_not_mps() {
    let c = Cluster::new(SMALL);
    c.kube
        .set_node_labels("gpu-2", &[("nvidia.com/mig.config", Some("all-1g.10gb"))]);
    let (code, out, err) = c.share("apply", &["--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let ts2 = name(Method::TimeSlicing, 2);
    assert!(
        out.contains(&format!("node gpu-2: time-slicing × 2 (config {ts2})")),
        "{out}"
    );
    assert!(out.contains("the node is in MIG mode (nvidia.com/mig.config=all-1g.10gb); MPS does not work with MIG"), "{out}");
    assert_eq!(c.kube.device_plugin_config("gpu-2"), Some(ts2));
    assert_eq!(c.gpus("gpu-2").as_deref(), Some("6"));
    assert_eq!(
        c.kube
            .node_labels("gpu-2")
            .get("nvidia.com/gpu.sharing-strategy")
            .map(String::as_str),
        Some("time-slicing")
    );
    // gpu-1 is not in MIG mode: MPS.
    assert_eq!(
        c.kube.device_plugin_config("gpu-1"),
        Some(name(Method::Mps, 3))
    );
}

#[test]
fn the_api_server_gone_mid_way_prints_the_commands() {
    let c = Cluster::new(SMALL);
    c.kube
        .script_device_plugin("gpu-1", "*", PluginBehaviour::StaysOld);
    c.kube.down_after(Fault {
        body_contains: Some(LABEL.into()),
        ..Fault::leader_changed("PATCH", "/api/v1/nodes/gpu-1", 1)
    });
    let (code, out, err) = c.share(
        "apply",
        &[
            "--yes",
            "--node-timeout",
            "500ms",
            "--request-timeout",
            "2s",
        ],
    );
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(err.contains("the API server is gone"), "{err}");
    assert!(
        err.contains(&format!("kubectl label node gpu-1 {LABEL}-")),
        "{err}"
    );
    assert!(err.contains("unused configs could not be pruned"), "{err}");
    // The label tessera set is still there: nothing could put it back.
    assert_eq!(
        c.kube.device_plugin_config("gpu-1"),
        Some(name(Method::Mps, 3))
    );
}

/// Issue 49, finding 4: the node label PATCH gets no answer and lands only after tessera gave
/// up. Before, nothing was rolled back and the config key was pruned, so the node named a
/// missing config. Now the node is read back and, not carrying the label, written again with its
/// current resourceVersion: the rollout goes on, and the held write, landing late with the old
/// resourceVersion, is refused by the server (409) instead of overwriting a later state.
#[test]
fn a_label_write_that_lands_after_tessera_gave_up_is_fenced() {
    let c = Cluster::new(SMALL);
    c.kube.hold(
        Fault {
            body_contains: Some(LABEL.into()),
            ..Fault::leader_changed("PATCH", "/api/v1/nodes/gpu-1", 1)
        },
        Hold::ApplyLate,
    );
    let (code, out, err) = c.share("apply", &["--yes", "--request-timeout", "1s"]);
    let n3 = name(Method::Mps, 3);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("reading the node back"), "{err}");
    assert_eq!(c.kube.device_plugin_config("gpu-1"), Some(n3.clone()));
    // The held write lands now, with the resourceVersion it was decided on: refused.
    assert_eq!(c.kube.release(), [409], "{out}\n{err}");
    assert_eq!(c.kube.device_plugin_config("gpu-1"), Some(n3.clone()));
    let cm = c.kube.configmap(NS, CM).unwrap();
    assert!(cm.contains_key(&n3), "{cm:?}");
}

/// Every label PATCH is held past its answer: after its attempts tessera says the write may still
/// land, keeps its config in the ConfigMap and prints the command that puts the label back
/// (exit 3); when the writes land, the node names a config that is still there.
#[test]
fn a_label_write_that_never_answers_keeps_its_config() {
    let c = Cluster::new(SMALL);
    for _ in 0..tessera::kubernetes::labels::ATTEMPTS {
        c.kube.hold(
            Fault {
                body_contains: Some(LABEL.into()),
                ..Fault::leader_changed("PATCH", "/api/v1/nodes/gpu-1", 1)
            },
            Hold::ApplyLate,
        );
    }
    let (code, out, err) = c.share("apply", &["--yes", "--request-timeout", "1s"]);
    let n3 = name(Method::Mps, 3);
    assert_eq!(c.kube.device_plugin_config("gpu-1"), None, "{out}\n{err}");
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(err.contains("may still land"), "{err}");
    assert!(
        err.contains(&format!("kubectl label node gpu-1 {LABEL}-")),
        "{err}"
    );
    // The writes land now: one of them (all carry the same resourceVersion), the others 409.
    let mut landed = c.kube.release();
    landed.sort();
    assert_eq!(landed.first(), Some(&200), "{landed:?}");
    assert!(landed[1..].iter().all(|s| *s == 409), "{landed:?}");
    assert_eq!(c.kube.device_plugin_config("gpu-1"), Some(n3.clone()));
    let cm = c.kube.configmap(NS, CM).unwrap();
    assert!(
        cm.contains_key(&n3),
        "the config the late label names was pruned: {cm:?}"
    );
}

/// Issue 49 item 1: share apply acts only on fresh evidence. The CSV's data ends 2026-11-02;
/// judged by the clock it is weeks old: `--yes` refuses before anything is written (exit 2), a
/// dry run warns; `--evidence.max-age` or `--allow-stale-evidence` allows it.
#[test]
fn share_apply_on_old_data_refuses_before_any_write() {
    let c = Cluster::new(SMALL);
    let (code, out, err) = c.share("apply", &["--yes", "--evidence.max-age", "1d"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("old: the data ends 2026-11-02T")
            && err.contains("more than --evidence.max-age 1d")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(c.writes().is_empty(), "{:?}", c.writes());
    assert_eq!(c.kube.device_plugin_config("gpu-1"), None);
    let (code, _, err) = c.share("apply", &["--evidence.max-age", "1d"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("apply --yes would refuse"), "{err}");
    let (code, out, err) = c.share("apply", &["--yes", "--allow-stale-evidence"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        c.kube.device_plugin_config("gpu-1"),
        Some(name(Method::Mps, 3))
    );
}

#[test]
fn a_cluster_policy_without_a_device_plugin_config_refuses_with_the_commands() {
    let c = Cluster::new(SMALL);
    c.kube.set_device_plugin_config(None, None);
    let (code, out, err) = c.share("apply", &["--yes"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("spec.devicePlugin.config.name is unset"),
        "{err}"
    );
    assert!(err.contains("kubectl -n gpu-operator create configmap tessera-device-plugin-config --from-literal=default='version: v1'"), "{err}");
    assert!(err.contains(r#"kubectl patch clusterpolicies.nvidia.com/cluster-policy --type merge -p '{"spec":{"devicePlugin":{"config":{"name":"tessera-device-plugin-config","default":"default"}}}}'"#), "{err}");
    assert!(err.contains("refused, nothing was changed"), "{err}");
    assert!(c.writes().is_empty(), "{:?}", c.writes());
}

#[test]
fn the_rbac_of_deploy_allows_every_call_and_every_rule_is_used() {
    let deploy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/sharing");
    let rules = rbac_rules(&std::fs::read_to_string(deploy.join("rbac.yaml")).unwrap());
    let c = Cluster::new(SMALL);
    // A ConfigMap that does not exist yet (create), then one that does (update), a rollback
    // (pruning), and the pods of the nodes.
    c.kube
        .set_device_plugin_config(Some("tessera-device-plugin-config"), Some("any"));
    c.kube.add_pod(
        "team-a",
        "train-0",
        "gpu-1",
        &[("nvidia.com/gpu", "1")],
        "Running",
    );
    let (code, out, err) = c.share("apply", &["--yes", "--node", "gpu-2"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = c.share("apply", &["--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let mut used = vec![false; rules.len()];
    for r in &c.kube.requests() {
        used[allowed(&rules, r)] = true;
    }
    for (i, u) in used.iter().enumerate() {
        assert!(
            *u,
            "rule {i} of rbac.yaml ({:?} {:?}) is not used",
            rules[i].resources, rules[i].verbs
        );
    }
}

impl Cluster {
    /// `tessera share apply --yes` started, not waited for (stdout and stderr piped).
    fn spawn_apply(&self, args: &[&str]) -> std::process::Child {
        let src = format!("csv:{}", self.path("gpus.csv").display());
        std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args([
                "share",
                "apply",
                "--yes",
                "--plan",
                "plan.yaml",
                "--source",
                &src,
            ])
            .arg("--kubeconfig")
            .arg(self.path("kubeconfig"))
            .args(["--poll-interval", "50ms"])
            .args(["--now", "2026-11-02T02:00:00Z"])
            .args(args)
            .env_remove("KUBECONFIG")
            .env("XDG_STATE_HOME", self.path("state"))
            .current_dir(self.dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Waits (up to 60 s) until gpu-1 carries `value`.
    fn wait_label(&self, value: &str) {
        for _ in 0..3000 {
            if self.kube.device_plugin_config("gpu-1").as_deref() == Some(value) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("gpu-1 never got {value}");
    }
}

fn finish(child: std::process::Child) -> (i32, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_label_another_client_sets_meanwhile_is_left_alone() {
    let c = Cluster::new(SMALL);
    let n3 = name(Method::Mps, 3);
    c.kube
        .script_device_plugin("gpu-1", &n3, PluginBehaviour::Slow(Duration::from_secs(30)));
    let child = c.spawn_apply(&["--node-timeout", "60s"]);
    c.wait_label(&n3);
    c.kube
        .set_node_labels("gpu-1", &[(LABEL, Some("hand-ts-2"))]);
    let (code, out, err) = finish(child);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains(&format!("node gpu-1: {LABEL} changed to hand-ts-2 by another client while tessera waited for {n3}; stopping")), "{err}");
    assert!(err.contains("not started: gpu-2"), "{err}");
    assert_eq!(
        c.kube.device_plugin_config("gpu-1").as_deref(),
        Some("hand-ts-2")
    );
    assert_eq!(c.kube.device_plugin_config("gpu-2"), None);
    // Their config took effect; tessera's unused one is pruned, theirs kept.
    let cm = c.kube.configmap(NS, CM).unwrap();
    assert!(
        !cm.contains_key(&n3) && cm.contains_key("hand-ts-2"),
        "{cm:?}"
    );
}

#[test]
fn sigterm_mid_way_puts_the_node_back() {
    let c = Cluster::new(SMALL);
    let n3 = name(Method::Mps, 3);
    c.kube
        .script_device_plugin("gpu-1", &n3, PluginBehaviour::Slow(Duration::from_secs(30)));
    let child = c.spawn_apply(&["--node-timeout", "60s"]);
    c.wait_label(&n3);
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let (code, out, err) = finish(child);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("stopped by a signal"), "{err}");
    assert!(
        out.contains(&format!("node gpu-1: rolled back {LABEL} {n3} -> (none)")),
        "{out}"
    );
    assert_eq!(c.kube.device_plugin_config("gpu-1"), None);
    assert_eq!(c.gpus("gpu-1").as_deref(), Some("4"));
}

#[test]
fn a_mixed_fleet_gets_each_schedulers_sharing_and_apply_leaves_slurm_nodes_alone() {
    // Slurm jobs hold gpu-1's GPUs, pods gpu-2's: gpu-1 0 ← 1 is Slurm's; gpu-1 2 ← 3 + gpu-2's
    // 1 moves a pod onto a job's GPU (neither scheduler); gpu-2 0 ← 2 is the device plugin's.
    let c = Cluster::held(SMALL, |node, _| {
        if node == "gpu-1" {
            Holder::Job
        } else {
            Holder::Pod
        }
    });
    let (code, out, err) = c.share("plan", &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(
            "node gpu-1: Slurm jobs hold its GPUs: gres/shard (GPU 0 × 2), not the device plugin"
        ),
        "{out}"
    );
    for line in [
        "    NodeName=gpu-1 Name=shard Count=2 File=/dev/nvidia0\n",
        "    NodeName=gpu-1 Name=shard Count=0 File=/dev/nvidia1\n",
        "    NodeName=gpu-1 Name=shard Count=0 File=/dev/nvidia3\n",
        "    GresTypes=gpu,shard\n",
        "    NodeName=gpu-1 Gres=gpu:4,shard:2\n",
        "  jobs that share: --gres=shard:1\n",
        "    NodeName=gpu-1 Name=mps Count=100 File=/dev/nvidia0\n",
        "    NodeName=gpu-1 Gres=gpu:4,mps:100\n",
        "    jobs that share: GPU 0: --gres=mps:50\n",
    ] {
        assert!(out.contains(line), "{line:?} in:\n{out}");
    }
    assert!(out.contains("GPU 0 would run: gpu-1/GPU0 [python3] (peak 6.0 GiB, active 10%), gpu-1/GPU1 [python3] (peak 4.0 GiB, active 5%)"), "{out}");
    assert!(out.contains("node gpu-1: no sharing config\n  GPU 2: not shared: gpu-1/GPU2 [python3] (slurm job 712), gpu-1/GPU3 [python3] (slurm job 713), gpu-2/GPU1 [python3] (pod team-a/gpu-2-gpu1) — a move between a pod's GPU and a Slurm job's is made by neither scheduler; not automated"), "{out}");
    assert!(
        out.contains(&format!(
            "node gpu-2: mps × 2 (config {})",
            name(Method::Mps, 2)
        )),
        "{out}"
    );
    assert!(
        out.contains(
            "kubernetes: pods hold these GPUs (pod team-a/gpu-2-gpu0, pod team-a/gpu-2-gpu2)"
        ),
        "{out}"
    );
    assert!(out.contains("kubectl label node gpu-2 "), "{out}");
    assert!(!out.contains("kubectl label node gpu-1"), "{out}");

    // JSON names the scheduler of every node, host and workload.
    let (code, out, err) = c.share("plan", &["--format", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["version"], 1);
    let nodes: Vec<(String, String, String, bool)> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap().to_string(),
                n["scheduler"].as_str().unwrap().to_string(),
                n["advice"].as_str().unwrap().to_string(),
                n["automated"].as_bool().unwrap(),
            )
        })
        .collect();
    let row = |a: &str, b: &str, c: &str, d| (a.to_string(), b.to_string(), c.to_string(), d);
    assert_eq!(
        nodes,
        [
            row("gpu-1", "both", "none", false),
            row("gpu-1", "slurm", "slurm-gres", false),
            row("gpu-2", "kubernetes", "device-plugin", true),
        ]
    );
    let slurm = &v["nodes"][1];
    assert_eq!(slurm["slurm"]["shards"][0]["gpu"], 0);
    assert_eq!(slurm["slurm"]["shards"][0]["count"], 2);
    assert_eq!(
        slurm["slurm"]["slurm_conf"][1],
        "NodeName=gpu-1 Gres=gpu:4,shard:2"
    );
    assert!(slurm["device_plugin"].is_null());
    let w = &slurm["hosts"][0]["workloads"][1];
    assert_eq!(
        (w["scheduler"].as_str(), w["holders"].as_str()),
        (Some("slurm"), Some("slurm job 711"))
    );
    let cross: Vec<&str> = v["nodes"][0]["hosts"][0]["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["scheduler"].as_str().unwrap())
        .collect();
    assert_eq!(cross, ["slurm", "slurm", "kubernetes"]);
    assert_eq!(v["nodes"][2]["device_plugin"]["replicas"], 2);

    // Apply: gpu-2 only; gpu-1 (in the cluster, with the device plugin) is not touched.
    let (code, out, err) = c.share("apply", &["--yes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("tessera: node gpu-1: Slurm jobs hold its hosts: no device-plugin config"),
        "{err}"
    );
    assert!(
        err.contains("tessera: node gpu-1: GPU 2: not shared:"),
        "{err}"
    );
    assert_eq!(
        c.kube.device_plugin_config("gpu-2"),
        Some(name(Method::Mps, 2))
    );
    assert_eq!(c.kube.device_plugin_config("gpu-1"), None);
    assert_eq!(c.gpus("gpu-1").as_deref(), Some("4"));
    let cm = c.kube.configmap(NS, CM).unwrap();
    assert!(cm.contains_key(&name(Method::Mps, 2)), "{cm:?}");
    assert_eq!(
        cm.keys().filter(|k| k.starts_with("tessera-")).count(),
        1,
        "{cm:?}"
    );
    let writes = c.writes();
    assert!(
        !writes.iter().any(|w| w.contains("/nodes/gpu-1")),
        "{writes:?}"
    );
}

#[test]
fn a_slurm_fleet_gets_gres_lines_and_apply_refuses_without_writing() {
    let c = Cluster::held(SMALL, |_, _| Holder::Job);
    let (code, out, err) = c.share("plan", &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    // gpu-2's GPU 1 moves onto gpu-1: a job's next submission with --nodelist=gpu-1.
    assert!(out.contains("node gpu-1: Slurm jobs hold its GPUs: gres/shard (GPU 0 × 2, GPU 2 × 3), not the device plugin"), "{out}");
    assert!(
        out.contains("    NodeName=gpu-1 Name=shard Count=3 File=/dev/nvidia2\n"),
        "{out}"
    );
    assert!(
        out.contains("    NodeName=gpu-1 Gres=gpu:4,shard:5\n"),
        "{out}"
    );
    assert!(
        out.contains("    NodeName=gpu-2 Gres=gpu:3,shard:2\n"),
        "{out}"
    );
    assert!(
        out.contains("no device-plugin config for any node"),
        "{out}"
    );
    assert!(
        !out.contains("kubectl") && !out.contains("version: v1"),
        "{out}"
    );
    for args in [&[][..], &["--yes"][..]] {
        let (code, out, err) = c.share("apply", args);
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(
            err.contains("no node gets a device-plugin config (why: above): nothing to apply"),
            "{err}"
        );
    }
    assert!(c.kube.requests().is_empty(), "{:?}", c.writes());
}

#[test]
fn unknown_holders_are_said_and_the_scheduler_flag_names_them() {
    let c = Cluster::held(SMALL, |_, _| Holder::Unknown);
    let (code, out, err) = c.share("plan", &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("node gpu-1: no sharing config\n  GPU 0: not shared: the data names no pod or Slurm job holding gpu-1/GPU0 [python3] (holder unknown), gpu-1/GPU1 [python3] (holder unknown), so tessera cannot tell whose sharing applies (give --scheduler kubernetes or --scheduler slurm if you know)"), "{out}");
    assert!(!out.contains("kubectl label"), "{out}");
    let (code, out, err) = c.share("apply", &[]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(c.kube.requests().is_empty());
    // --scheduler kubernetes: the device plugin's configs, as with pods.
    let (code, out, err) = c.share("plan", &["--scheduler", "kubernetes"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(&format!(
            "node gpu-1: mps × 3 (config {})",
            name(Method::Mps, 3)
        )),
        "{out}"
    );
    assert!(out.contains("kubernetes: the holders are not in the data; --scheduler kubernetes says pods hold these GPUs"), "{out}");
    // --scheduler slurm: Slurm's lines.
    let (code, out, err) = c.share("plan", &["--scheduler", "slurm", "--format", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["advice"] == "slurm-gres"),
        "{v}"
    );
    assert_eq!(v["nodes"][0]["hosts"][0]["workloads"][0]["assumed"], true);
}

/// A simulated fleet of three schedulers' nodes (docs/scenarios.md): kube-1's GPUs held by pods,
/// slurm-1's by Slurm jobs, bare-1's by no one named; small, quiet services of one model per
/// node, so that each node's GPUs consolidate among themselves.
const MIXED: &str = r#"
name = "share-mixed"
seed = 48
start = "2026-11-02T00:00:00Z"

[[nodes]]
name = "kube-1"
gpus = [{ model = "H100-80GB", count = 2 }]

[[nodes]]
name = "slurm-1"
gpus = [{ model = "A100-80GB", count = 3 }]

[[nodes]]
name = "bare-1"
gpus = [{ model = "H200-141GB", count = 2 }]
"#;

/// `MIXED` with its workloads, simulated for one day into `dir/hist`; returns the source.
fn mixed_history(dir: &std::path::Path) -> String {
    let mut toml = MIXED.to_string();
    for (name, node, gpu, gib, holder) in [
        (
            "svc-0",
            "kube-1",
            0,
            8.0,
            "namespace = \"serving\"\npod = \"svc-0\"",
        ),
        (
            "svc-1",
            "kube-1",
            1,
            6.0,
            "namespace = \"serving\"\npod = \"svc-1\"",
        ),
        ("job-a", "slurm-1", 0, 8.0, "slurm_job = \"5001\""),
        ("job-b", "slurm-1", 1, 6.0, "slurm_job = \"5002\""),
        ("job-c", "slurm-1", 2, 4.0, "slurm_job = \"5003\""),
        ("bare-a", "bare-1", 0, 8.0, ""),
        ("bare-b", "bare-1", 1, 6.0, ""),
    ] {
        toml.push_str(&format!(
            "\n[[workloads]]\nname = \"{name}\"\nkind = \"inference\"\nnode = \"{node}\"\ngpu = {gpu}\nmemory_gib = {gib}\nbase = 0.1\npeak = 0.1\nnoise = 0.0\n{holder}\n"
        ));
    }
    let scenario = dir.join("mixed.toml");
    std::fs::write(&scenario, toml).unwrap();
    let hist = dir.join("hist");
    let (code, out, err) = super::support::cli::run(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--days",
        "1",
        "--out",
        hist.to_str().unwrap(),
        "--sample-interval",
        "60s",
        "--history.interval",
        "60s",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    format!("history:{}", hist.display())
}

#[test]
fn consolidation_moves_say_who_moves_them_and_share_follows_the_holders() {
    let dir = TempDir::new().unwrap();
    let src = mixed_history(dir.path());
    let plan = dir.path().join("plan.yaml");
    let run = super::support::cli::run;

    // analyze: each move's scheduler and who carries it out, in the action and the evidence.
    let (code, out, err) = run(&[
        "analyze",
        "--source",
        &src,
        "--detector",
        "consolidation",
        "--plan-out",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("kube-1/GPU1 [python3 (serving/svc-1)] → kube-1/GPU0 (by Kubernetes)"),
        "{out}"
    );
    assert!(
        out.contains("slurm-1/GPU1 [python3 (slurm job 5002)] → slurm-1/GPU0 (by Slurm)"),
        "{out}"
    );
    assert!(
        out.contains("bare-1/GPU1 [python3] → bare-1/GPU0 (by its scheduler: holder unknown)"),
        "{out}"
    );
    assert!(out.contains("tessera moves no work"), "{out}");
    let (code, out, err) = run(&[
        "analyze",
        "--source",
        &src,
        "--detector",
        "consolidation",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut seen = Vec::new();
    for f in v["findings"].as_array().unwrap() {
        for g in f["evidence"]["plan"].as_array().unwrap() {
            for w in g["workloads"].as_array().unwrap() {
                let host = w["uuid"] == g["host"]["uuid"];
                assert_eq!(w["moved_by"].is_null(), host, "{w}");
                seen.push((
                    w["node"].as_str().unwrap().to_string(),
                    w["scheduler"].as_str().unwrap().to_string(),
                    w["moved_by"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
    }
    seen.sort();
    assert_eq!(seen.len(), 7, "{seen:?}");
    for (node, scheduler, by) in &seen {
        let (want, says) = match node.as_str() {
            "kube-1" => ("kubernetes", "the Kubernetes scheduler"),
            "slurm-1" => (
                "slurm",
                "Slurm, at the job's next submission (--nodelist=slurm-1",
            ),
            _ => ("unknown", "unknown: the data names no pod or Slurm job"),
        };
        assert_eq!(scheduler, want, "{seen:?}");
        assert!(by.is_empty() || by.starts_with(says), "{seen:?}");
    }

    // report: text and JSON say who moves each.
    let (code, out, err) = run(&["report", "--source", &src]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("move kube-1/GPU1 [python3 (serving/svc-1)] → kube-1/GPU0 — the Kubernetes scheduler, when the pod is next scheduled onto kube-1's shared GPUs; tessera moves no pod"), "{out}");
    assert!(out.contains("move slurm-1/GPU2 [python3 (slurm job 5003)] → slurm-1/GPU0 — Slurm, at the job's next submission"), "{out}");
    let (code, out, err) = run(&["report", "--source", &src, "--format", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut by: Vec<String> = Vec::new();
    for c in v["consolidation"].as_array().unwrap() {
        assert_eq!(
            c["moves"].as_array().unwrap().len(),
            c["moved_by"].as_array().unwrap().len()
        );
        for (m, b) in c["moves"]
            .as_array()
            .unwrap()
            .iter()
            .zip(c["moved_by"].as_array().unwrap())
        {
            assert_eq!(&b["move"], m);
            by.push(b["scheduler"].as_str().unwrap().to_string());
        }
    }
    by.sort();
    assert_eq!(by, ["kubernetes", "slurm", "slurm", "unknown"]);

    // share plan: the device plugin for kube-1, Slurm's lines for slurm-1, bare-1 said.
    let (code, out, err) = run(&[
        "share",
        "plan",
        "--plan",
        plan.to_str().unwrap(),
        "--source",
        &src,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let nodes: Vec<(&str, &str, &str)> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node"].as_str().unwrap(),
                n["scheduler"].as_str().unwrap(),
                n["advice"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        nodes,
        [
            ("bare-1", "unknown", "none"),
            ("kube-1", "kubernetes", "device-plugin"),
            ("slurm-1", "slurm", "slurm-gres"),
        ]
    );
    assert_eq!(v["nodes"][1]["device_plugin"]["replicas"], 2);
    assert_eq!(
        v["nodes"][2]["slurm"]["gres_conf"],
        serde_json::json!([
            "NodeName=slurm-1 Name=shard Count=3 File=/dev/nvidia0",
            "NodeName=slurm-1 Name=shard Count=0 File=/dev/nvidia1",
            "NodeName=slurm-1 Name=shard Count=0 File=/dev/nvidia2",
        ])
    );
    assert_eq!(
        v["nodes"][2]["slurm"]["slurm_conf"][1],
        "NodeName=slurm-1 Gres=gpu:3,shard:3"
    );
    assert!(v["nodes"][2]["device_plugin"].is_null());
}

#[test]
fn the_demo_node_with_a_slurm_job_gets_no_device_plugin_config() {
    // fixtures/demo-history: pods hold lab-a's GPUs 0-2, Slurm job 81234 its GPU 3; the
    // consolidation moves pods onto lab-a/GPU0, but the device plugin would share GPU 3 too.
    let dir = TempDir::new().unwrap();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/demo-history");
    let src = format!("history:{demo}");
    let plan = dir.path().join("plan.yaml");
    let run = super::support::cli::run;
    let (code, out, err) = run(&[
        "analyze",
        "--source",
        &src,
        "--plan-out",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = run(&[
        "share",
        "plan",
        "--plan",
        plan.to_str().unwrap(),
        "--source",
        &src,
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("node lab-a: no sharing config\n  GPU 0: not shared: pods hold it, but Slurm jobs hold other GPUs of lab-a (GPU 3 (slurm job 81234)) and the device plugin shares every GPU of a node alike"), "{out}");
    assert!(!out.contains("kubectl label"), "{out}");
    // apply stops before it connects to any cluster (none is configured here).
    let (code, out, err) = run(&[
        "share",
        "apply",
        "--plan",
        plan.to_str().unwrap(),
        "--source",
        &src,
        "--yes",
    ]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("no node gets a device-plugin config (why: above): nothing to apply"),
        "{err}"
    );
    assert!(
        err.contains("tessera: node lab-a: GPU 0: not shared"),
        "{err}"
    );
}

/// What `slurmd -G` (Slurm's own gres.conf and slurm.conf parser, for node `node`) makes of
/// the lines: `(name, index, count)` of each GRES it lists, or its error.
fn slurmd_gres(
    dir: &std::path::Path,
    node: &str,
    gres_conf: &[String],
    gres_types: &str,
    node_gres: &str,
) -> Result<Vec<(String, u32, u32)>, String> {
    use crate::slurm_real::{Root, SLURMD};
    let root = Root::get();
    let dev = |i: u32| dir.join(format!("nvidia{i}"));
    for i in 0..8 {
        if !dev(i).exists() {
            // Character devices of the NVIDIA major (195): slurmd wants File= to be a device.
            let out = root.run(
                "mknod",
                &[dev(i).to_str().unwrap(), "c", "195", &i.to_string()],
            );
            assert!(out.status.success(), "mknod: {out:?}");
        }
    }
    // The administrator's gpu line, then tessera's, their File= pointing at the stand-ins.
    let mut gres = format!(
        "NodeName={node} Name=gpu File={}/nvidia[0-{}]\n",
        dir.display(),
        node_gres
            .split(',')
            .find_map(|g| g.strip_prefix("gpu:"))
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap()
            - 1
    );
    for l in gres_conf {
        gres.push_str(&l.replace("/dev/nvidia", &format!("{}/nvidia", dir.display())));
        gres.push('\n');
    }
    std::fs::write(dir.join("gres.conf"), gres).unwrap();
    let conf = dir.join("slurm.conf");
    std::fs::write(
        &conf,
        format!(
            "ClusterName=t\nSlurmctldHost={node}(127.0.0.1)\nSelectType=select/cons_tres\n\
             {gres_types}\nNodeName={node} Gres={node_gres} NodeAddr=127.0.0.1 CPUs=1\n\
             PartitionName=p Nodes={node} Default=YES\n"
        ),
    )
    .unwrap();
    let out = root
        .command(SLURMD)
        .args(["-G", "-N", node, "-f", conf.to_str().unwrap()])
        .env("SLURM_CONF", &conf)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() || text.contains("error:") {
        return Err(text);
    }
    let field = |l: &str, k: &str| -> Option<String> {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .map(str::to_string)
    };
    Ok(text
        .lines()
        .filter(|l| l.contains(" Gres Name="))
        .filter_map(|l| {
            Some((
                field(l, "Name=")?,
                field(l, "Index=")?.parse().ok()?,
                field(l, "Count=")?.parse().ok()?,
            ))
        })
        .collect())
}

#[test]
fn slurms_own_parser_reads_the_gres_lines_as_tessera_meant_them() {
    // Every node Slurm's, and gpu-1 Slurm's beside a Kubernetes node: shards and the MPS
    // alternative of each.
    let all = Cluster::held(SMALL, |_, _| Holder::Job);
    let mixed = Cluster::held(SMALL, |node, _| {
        if node == "gpu-1" {
            Holder::Job
        } else {
            Holder::Pod
        }
    });
    let (mut checked, mut mps_checked) = (0, 0);
    for c in [all, mixed] {
        let (code, out, err) = c.share("plan", &["--format", "json"]);
        assert_eq!(code, 0, "{out}\n{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let strings = |x: &serde_json::Value| -> Vec<String> {
            x.as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        };
        for n in v["nodes"].as_array().unwrap() {
            let Some(s) = n.get("slurm").filter(|s| !s.is_null()) else {
                continue;
            };
            let node = n["node"].as_str().unwrap();
            let dir = tempfile::tempdir().unwrap();
            let conf = strings(&s["slurm_conf"]);
            let node_gres = conf[1].split_once(" Gres=").unwrap().1.to_string();
            let parsed = slurmd_gres(
                dir.path(),
                node,
                &strings(&s["gres_conf"]),
                &conf[0],
                &node_gres,
            )
            .unwrap_or_else(|e| panic!("slurmd -G refused tessera's lines for {node}: {e}"));
            // Each GPU's shards as tessera planned them (0 where it shares none).
            for g in 0..s["node_gpus"].as_u64().unwrap() as u32 {
                let planned = s["shards"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| x["gpu"] == g)
                    .map_or(0, |x| x["count"].as_u64().unwrap() as u32);
                assert!(
                    parsed.contains(&("shard".to_string(), g, planned)),
                    "{node} GPU {g}: {planned} shards planned, slurmd -G read {parsed:?}"
                );
                assert!(parsed.contains(&("gpu".to_string(), g, 1)), "{parsed:?}");
            }
            // The MPS alternative, where tessera offers it.
            if let Some(m) = s.get("mps").filter(|m| !m.is_null()) {
                let conf = strings(&m["slurm_conf"]);
                let node_gres = conf[1].split_once(" Gres=").unwrap().1.to_string();
                let mps = slurmd_gres(
                    dir.path(),
                    node,
                    &strings(&m["gres_conf"]),
                    &conf[0],
                    &node_gres,
                )
                .unwrap_or_else(|e| panic!("slurmd -G refused tessera's mps lines: {e}"));
                assert!(
                    mps.iter().any(|(n, _, c)| n == "mps" && *c == 100),
                    "{mps:?}"
                );
                mps_checked += 1;
            }
            // The control: a node total that disagrees with the per-GPU lines is refused.
            let (head, total) = node_gres.rsplit_once(':').unwrap();
            let wrong = format!("{head}:{}", total.parse::<u32>().unwrap() + 1);
            assert!(
                slurmd_gres(
                    dir.path(),
                    node,
                    &strings(&s["gres_conf"]),
                    &conf[0],
                    &wrong
                )
                .is_err(),
                "slurmd -G accepted a wrong total for {node}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 3, "the Slurm nodes of both fleets");
    assert_eq!(
        mps_checked, 3,
        "every Slurm node here has an MPS alternative"
    );
}
