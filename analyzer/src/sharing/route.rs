//! Whose sharing applies to each host of the moves: the scheduler that holds its GPUs.
//!
//! - **Kubernetes** (pods hold the host and every guest): NVIDIA's device plugin, per node
//!   ([`choose`](super::choose), [`rollout`](super::rollout)) — but only on a node where no
//!   GPU is held by a Slurm job: the device plugin shares every GPU of a node alike, so it would
//!   share those too.
//! - **Slurm** (jobs hold them all): `gres/shard` or `gres/mps` ([`slurm`]); tessera prints the
//!   lines, it does not configure Slurm.
//! - **Neither**: a move between a pod's GPU and a job's (no scheduler places work on the
//!   other's GPUs), a GPU both held in the window, or holders the data does not name — said, and
//!   not shared. `assume` (`--scheduler`) names the scheduler of GPUs whose holders are unknown.
//!
//! Pure: the caller measured the moves ([`super::demand`]). Also the JSON of `tessera share
//! plan` ([`PlanJson`], version 1), which names the scheduler of every node, host and workload.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::choose::NodeSharing;
use super::demand::{GpuStats, HostDemand, Role, Workload};
use super::rollout::NodePlan;
use super::slurm::{self, SlurmSharing};
use crate::advisor::scheduler::Scheduler;

/// A node's hosts that get no sharing config, and why.
#[derive(Debug, Clone)]
pub struct NotShared {
    pub node: String,
    pub scheduler: Scheduler,
    pub hosts: Vec<HostDemand>,
    pub reasons: Vec<String>,
}

/// The moves' hosts by whose sharing applies.
#[derive(Debug, Clone, Default)]
pub struct Routed {
    /// Nodes for the device plugin.
    pub kubernetes: Vec<NodePlan>,
    /// Nodes for Slurm's gres/shard or gres/mps.
    pub slurm: Vec<SlurmSharing>,
    /// Hosts no config is proposed for.
    pub not_shared: Vec<NotShared>,
}

/// The scheduler of one workload's GPU (`assume` for an unknown one).
pub fn workload_scheduler(w: &Workload, assume: Option<Scheduler>) -> Scheduler {
    match w.stats.as_ref().map_or(Scheduler::Unknown, |s| s.scheduler) {
        Scheduler::Unknown => assume.unwrap_or(Scheduler::Unknown),
        s => s,
    }
}

/// The scheduler of a move: the one every workload's GPU has; `Unknown` when any is unknown,
/// `Both` when they differ (or a GPU had both).
pub fn host_scheduler(h: &HostDemand, assume: Option<Scheduler>) -> Scheduler {
    let all: BTreeSet<Scheduler> = h
        .workloads
        .iter()
        .map(|w| workload_scheduler(w, assume))
        .collect();
    if all.contains(&Scheduler::Both) {
        Scheduler::Both
    } else if all.contains(&Scheduler::Unknown) {
        Scheduler::Unknown
    } else if all.len() == 1 {
        *all.first().unwrap_or(&Scheduler::Unknown)
    } else {
        Scheduler::Both
    }
}

/// `node/GPUi [label] (slurm job 1)`: a workload with its holders.
fn held_name(w: &Workload, assume: Option<Scheduler>) -> String {
    match w.stats.as_ref().map(|s| s.holders.as_str()) {
        Some(h) if !h.is_empty() => format!("{} ({h})", w.name()),
        _ => format!(
            "{} ({})",
            w.name(),
            match workload_scheduler(w, assume) {
                Scheduler::Unknown => "holder unknown",
                Scheduler::Kubernetes => "kubernetes, as --scheduler says",
                Scheduler::Slurm => "slurm, as --scheduler says",
                Scheduler::Both => "pods and slurm jobs",
            }
        ),
    }
}

/// Why a move of scheduler `s` gets no config.
fn why_not(h: &HostDemand, s: Scheduler, assume: Option<Scheduler>) -> String {
    let names: Vec<String> = h.workloads.iter().map(|w| held_name(w, assume)).collect();
    match s {
        Scheduler::Unknown => format!(
            "GPU {}: not shared: the data names no pod or Slurm job holding {}, so tessera cannot tell whose sharing applies (give --scheduler kubernetes or --scheduler slurm if you know)",
            h.host.gpu,
            names.join(", ")
        ),
        _ => format!(
            "GPU {}: not shared: {} — a move between a pod's GPU and a Slurm job's is made by neither scheduler; not automated",
            h.host.gpu,
            names.join(", ")
        ),
    }
}

/// The hosts of `demands` (only `only`'s when given) by whose sharing applies; `stats`: every
/// GPU measured (a node's other GPUs decide whether the device plugin may share it).
pub fn route(
    demands: Vec<HostDemand>,
    stats: &[GpuStats],
    assume: Option<Scheduler>,
    only: Option<&str>,
) -> Routed {
    #[derive(Default)]
    struct Node {
        kubernetes: Vec<HostDemand>,
        slurm: Vec<HostDemand>,
        other: Vec<(HostDemand, Scheduler, String)>,
    }
    let mut by: BTreeMap<String, Node> = BTreeMap::new();
    for d in demands {
        if only.is_some_and(|n| n != d.host.node) {
            continue;
        }
        let s = host_scheduler(&d, assume);
        let n = by.entry(d.host.node.clone()).or_default();
        match s {
            Scheduler::Kubernetes => n.kubernetes.push(d),
            Scheduler::Slurm => n.slurm.push(d),
            _ => {
                let why = why_not(&d, s, assume);
                n.other.push((d, s, why));
            }
        }
    }
    let mut out = Routed::default();
    for (node, n) in by {
        let gpus: Vec<&GpuStats> = stats.iter().filter(|s| s.node == node).collect();
        let mig = gpus.iter().any(|s| s.mig);
        let mut other = n.other;
        if !n.kubernetes.is_empty() {
            let slurm_held: Vec<String> = gpus
                .iter()
                .filter(|s| matches!(s.scheduler, Scheduler::Slurm | Scheduler::Both))
                .map(|s| format!("GPU {} ({})", s.gpu, s.holders))
                .collect();
            if slurm_held.is_empty() {
                out.kubernetes.push(NodePlan {
                    node: node.clone(),
                    hosts: n.kubernetes,
                    frames_mig: mig,
                });
            } else {
                for h in n.kubernetes {
                    let why = format!(
                        "GPU {}: not shared: pods hold it, but Slurm jobs hold other GPUs of {node} ({}) and the device plugin shares every GPU of a node alike; not automated",
                        h.host.gpu,
                        slurm_held.join(", ")
                    );
                    other.push((h, Scheduler::Both, why));
                }
            }
        }
        if !n.slurm.is_empty() {
            let indices: Vec<u32> = gpus.iter().map(|s| s.gpu).collect();
            let why = mig.then_some("a GPU of the node was in MIG mode in the window");
            out.slurm
                .push(slurm::advise(&node, &n.slurm, &indices, why));
        }
        if !other.is_empty() {
            let scheduler = other
                .iter()
                .map(|o| o.1)
                .reduce(|a, b| if a == b { a } else { Scheduler::Both })
                .unwrap_or(Scheduler::Unknown);
            out.not_shared.push(NotShared {
                node,
                scheduler,
                reasons: other.iter().map(|o| o.2.clone()).collect(),
                hosts: other.into_iter().map(|o| o.0).collect(),
            });
        }
    }
    out
}

/// `tessera share plan --format json` (version 1): one entry per node and advice.
#[derive(Debug, Clone, Serialize)]
pub struct PlanJson {
    pub version: u32,
    pub nodes: Vec<NodeJson>,
}

/// One node's advice.
#[derive(Debug, Clone, Serialize)]
pub struct NodeJson {
    pub node: String,
    /// Who holds the GPUs of these moves: `kubernetes`, `slurm`, `both`, `unknown`.
    pub scheduler: Scheduler,
    /// `device-plugin`, `slurm-gres` or `none`.
    pub advice: &'static str,
    /// Whether tessera can apply it (`tessera share apply`): only the device plugin's.
    pub automated: bool,
    pub reasons: Vec<String>,
    pub hosts: Vec<HostJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_plugin: Option<DevicePluginJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmSharing>,
}

/// The device plugin's config of a node.
#[derive(Debug, Clone, Serialize)]
pub struct DevicePluginJson {
    pub method: super::choose::Method,
    pub replicas: u32,
    pub config_name: String,
    pub config: String,
}

/// A host GPU and what it would run.
#[derive(Debug, Clone, Serialize)]
pub struct HostJson {
    pub gpu: u32,
    pub scheduler: Scheduler,
    pub workloads: Vec<WorkloadJson>,
}

/// One workload of a host.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadJson {
    pub name: String,
    pub node: String,
    pub gpu: u32,
    /// `host` (stays) or `guest` (moves there).
    pub role: &'static str,
    pub scheduler: Scheduler,
    /// Whether `scheduler` is `--scheduler`'s, the data naming no holder.
    pub assumed: bool,
    /// The pods and jobs named (empty when unknown).
    pub holders: String,
    pub peak_memory_gib: Option<f64>,
    pub activity: Option<f64>,
}

fn hosts_json(hosts: &[HostDemand], assume: Option<Scheduler>) -> Vec<HostJson> {
    let r3 = |v: f64| (v * 1000.0).round() / 1000.0;
    hosts
        .iter()
        .map(|h| HostJson {
            gpu: h.host.gpu,
            scheduler: host_scheduler(h, assume),
            workloads: h
                .workloads
                .iter()
                .map(|w| WorkloadJson {
                    name: w.name(),
                    node: w.gpu.node.clone(),
                    gpu: w.gpu.gpu,
                    role: match w.role {
                        Role::Host => "host",
                        Role::Guest => "guest",
                    },
                    scheduler: workload_scheduler(w, assume),
                    assumed: assume.is_some()
                        && w.stats
                            .as_ref()
                            .is_none_or(|s| s.scheduler == Scheduler::Unknown),
                    holders: w
                        .stats
                        .as_ref()
                        .map(|s| s.holders.clone())
                        .unwrap_or_default(),
                    peak_memory_gib: w
                        .stats
                        .as_ref()
                        .and_then(|s| s.peak_memory_bytes)
                        .map(|b| r3(b / (1u64 << 30) as f64)),
                    activity: w.stats.as_ref().and_then(|s| s.activity).map(r3),
                })
                .collect(),
        })
        .collect()
}

/// The plan's JSON: the device plugin's configs (`chosen`, one per node of `routed.kubernetes`),
/// Slurm's lines and the hosts not shared, by node.
pub fn plan_json(chosen: &[NodeSharing], routed: &Routed, assume: Option<Scheduler>) -> PlanJson {
    let mut nodes = Vec::new();
    for s in chosen {
        nodes.push(NodeJson {
            node: s.node.clone(),
            scheduler: Scheduler::Kubernetes,
            advice: "device-plugin",
            automated: true,
            reasons: s.reasons.clone(),
            hosts: hosts_json(&s.hosts, assume),
            device_plugin: Some(DevicePluginJson {
                method: s.method,
                replicas: s.replicas,
                config_name: s.name.clone(),
                config: s.text.clone(),
            }),
            slurm: None,
        });
    }
    for s in &routed.slurm {
        nodes.push(NodeJson {
            node: s.node.clone(),
            scheduler: Scheduler::Slurm,
            advice: "slurm-gres",
            automated: false,
            reasons: s.notes.clone(),
            hosts: hosts_json(&s.hosts, assume),
            device_plugin: None,
            slurm: Some(s.clone()),
        });
    }
    for n in &routed.not_shared {
        nodes.push(NodeJson {
            node: n.node.clone(),
            scheduler: n.scheduler,
            advice: "none",
            automated: false,
            reasons: n.reasons.clone(),
            hosts: hosts_json(&n.hosts, assume),
            device_plugin: None,
            slurm: None,
        });
    }
    nodes.sort_by(|a, b| a.node.cmp(&b.node).then(a.advice.cmp(b.advice)));
    PlanJson { version: 1, nodes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::mig::plan_sections::GpuRef;

    fn stats(node: &str, gpu: u32, scheduler: Scheduler, holders: &str) -> GpuStats {
        GpuStats {
            node: node.into(),
            gpu,
            uuid: None,
            model: None,
            peak_memory_bytes: Some(1e9),
            memory_total_bytes: Some(8e10),
            activity: Some(0.1),
            activity_source: Some("sm_active"),
            rows: 10,
            mig: false,
            scheduler,
            holders: holders.into(),
        }
    }

    fn host(node: &str, gpus: &[(u32, &str)], all: &[GpuStats]) -> HostDemand {
        let workloads = gpus
            .iter()
            .enumerate()
            .map(|(i, (g, n))| Workload {
                role: if i == 0 { Role::Host } else { Role::Guest },
                gpu: GpuRef {
                    node: n.to_string(),
                    gpu: *g,
                    uuid: None,
                    label: None,
                },
                stats: all.iter().find(|s| s.node == *n && s.gpu == *g).cloned(),
            })
            .collect::<Vec<_>>();
        HostDemand {
            model: "H100".into(),
            host: GpuRef {
                node: node.into(),
                gpu: gpus[0].0,
                uuid: None,
                label: None,
            },
            workloads,
        }
    }

    #[test]
    fn each_host_gets_the_sharing_of_its_scheduler() {
        use Scheduler::*;
        let all = vec![
            stats("k", 0, Kubernetes, "pod a/p0"),
            stats("k", 1, Kubernetes, "pod a/p1"),
            stats("s", 0, Slurm, "slurm job 1"),
            stats("s", 1, Slurm, "slurm job 2"),
            stats("s", 2, Kubernetes, "pod a/p2"),
            stats("m", 0, Kubernetes, "pod a/p3"),
            stats("m", 1, Kubernetes, "pod a/p4"),
            stats("m", 2, Slurm, "slurm job 3"),
            stats("u", 0, Unknown, ""),
            stats("u", 1, Unknown, ""),
        ];
        let demands = vec![
            host("k", &[(0, "k"), (1, "k")], &all),
            host("s", &[(0, "s"), (1, "s")], &all),
            // A pod onto a job's GPU: neither scheduler.
            host("s", &[(1, "s"), (2, "s")], &all),
            // Pods on a node where a job holds another GPU: not the device plugin.
            host("m", &[(0, "m"), (1, "m")], &all),
            host("u", &[(0, "u"), (1, "u")], &all),
        ];
        let r = route(demands.clone(), &all, None, None);
        assert_eq!(r.kubernetes.len(), 1);
        assert_eq!(r.kubernetes[0].node, "k");
        assert_eq!(r.slurm.len(), 1);
        assert_eq!(r.slurm[0].node, "s");
        let why: Vec<(&str, Scheduler, &str)> = r
            .not_shared
            .iter()
            .flat_map(|n| {
                n.reasons
                    .iter()
                    .map(move |w| (n.node.as_str(), n.scheduler, w.as_str()))
            })
            .collect();
        assert_eq!(why.len(), 3, "{why:?}");
        assert!(
            why[0].0 == "m"
                && why[0]
                    .2
                    .contains("Slurm jobs hold other GPUs of m (GPU 2 (slurm job 3))"),
            "{why:?}"
        );
        assert!(
            why[1].0 == "s" && why[1].1 == Both && why[1].2.contains("neither scheduler"),
            "{why:?}"
        );
        assert!(
            why[2].0 == "u" && why[2].1 == Unknown && why[2].2.contains("--scheduler"),
            "{why:?}"
        );

        // --scheduler names the unknown ones only; --node keeps one node.
        let r = route(demands.clone(), &all, Some(Slurm), None);
        assert_eq!(
            r.slurm.iter().map(|s| s.node.as_str()).collect::<Vec<_>>(),
            ["s", "u"]
        );
        let r = route(demands, &all, Some(Kubernetes), Some("u"));
        assert_eq!(r.kubernetes.len(), 1);
        assert!(r.slurm.is_empty() && r.not_shared.is_empty());
        let chosen: Vec<_> = r
            .kubernetes
            .iter()
            .map(|p| crate::sharing::rollout::offline(p, Default::default()))
            .collect();
        let json = plan_json(&chosen, &r, Some(Kubernetes));
        let v = serde_json::to_value(&json).unwrap();
        assert_eq!(v["nodes"][0]["scheduler"], "kubernetes");
        assert_eq!(v["nodes"][0]["advice"], "device-plugin");
        assert_eq!(v["nodes"][0]["hosts"][0]["workloads"][1]["assumed"], true);
    }
}
