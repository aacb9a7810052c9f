//! The simulated scheduler's view: which pod or Slurm job holds each GPU and MIG instance of a
//! node at an instant ([`SimNode::allocation`]), as the kubelet's pod-resources API or Slurm's
//! gres would report it.
//!
//! A workload that names a pod or a Slurm job holds its device while it is loaded (its process
//! exists); an `[[allocations]]` entry holds its device over its window whether or not anything
//! runs there. A node is "scheduled" — its allocation known, so a device nobody holds is free —
//! when any workload or allocation on it names a pod or a Slurm job; on any other node the
//! allocation is unknown (as on a host without a kubelet or Slurm).
//!
//! Pure: a function of the scenario and the instant. It does not model the device plugin's
//! time-slicing replicas or a pod that requested a GPU and was never scheduled.

use std::collections::HashMap;

use super::SimNode;
use super::activity::activity;
use crate::model::{Allocation, Holder};

impl SimNode {
    /// Whether any workload or allocation on this node names a pod or a Slurm job.
    pub fn is_scheduled(&self) -> bool {
        let scenario = self.scenario();
        self.workload_indices().iter().any(|&w| {
            let s = &scenario.workloads[w];
            s.pod.is_some() || s.slurm_job.is_some()
        }) || scenario.allocations.iter().any(|a| a.node == self.name())
    }

    /// The device UUID of GPU `gpu` (or of its MIG instance starting at `mig_start`), if it
    /// exists in the node's current layout.
    fn device_uuid(&self, gpu: u32, mig_start: Option<u32>) -> Option<&str> {
        let g = self.gpus().iter().find(|g| g.index == gpu)?;
        match (&g.mig, mig_start) {
            (Some(insts), Some(start)) => insts
                .iter()
                .find(|i| i.layout.placement.start == start)
                .map(|i| i.uuid.as_str()),
            (None, _) => Some(g.uuid.as_str()),
            (Some(_), None) => None,
        }
    }

    /// Who holds each device at `t_ms` (a reading's instant: the second that ends at `t_ms`,
    /// as [`SimNode::read`] counts it). Unknown (`known == false`) on a node that is not
    /// scheduled.
    pub fn allocation(&self, t_ms: i64) -> Allocation {
        if !self.is_scheduled() {
            return Allocation::unknown();
        }
        let scenario = self.scenario();
        let t = (t_ms - 1).div_euclid(1000);
        let mut devices: HashMap<String, Vec<Holder>> = HashMap::new();
        let mut hold = |uuid: Option<&str>, holder: Holder| {
            if let Some(u) = uuid {
                devices.entry(u.to_string()).or_default().push(holder);
            }
        };
        for &w in self.workload_indices() {
            let spec = &scenario.workloads[w];
            if spec.pod.is_none() && spec.slurm_job.is_none() {
                continue;
            }
            let place = spec.place_at(t);
            if place.node != self.name() {
                continue;
            }
            if activity(scenario, w, t).is_some() {
                hold(
                    self.device_uuid(place.gpu, place.mig_start),
                    Holder {
                        namespace: spec.namespace.clone(),
                        pod: spec.pod.clone(),
                        slurm_job_id: spec.slurm_job.clone(),
                    },
                );
            }
        }
        for a in scenario
            .allocations
            .iter()
            .filter(|a| a.node == self.name())
        {
            let after_from = a.from.is_none_or(|f| t >= f.timestamp());
            let before_until = a.until.is_none_or(|u| t < u.timestamp());
            if after_from && before_until {
                hold(
                    self.device_uuid(a.gpu, a.mig_start),
                    Holder {
                        namespace: a.namespace.clone(),
                        pod: a.pod.clone(),
                        slurm_job_id: a.slurm_job.clone(),
                    },
                );
            }
        }
        for holders in devices.values_mut() {
            holders.sort();
            holders.dedup();
        }
        Allocation {
            known: true,
            devices,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Scenario;

    const TEXT: &str = r#"
name = "held"
start = "2026-11-02T00:00:00Z"
[[nodes]]
name = "slurm"
gpus = [{ model = "H100-80GB", count = 4 }]
[[nodes]]
name = "k8s"
gpus = [{ model = "H100-80GB", count = 2 }]
mig = [{ gpu = 1, instances = [{ profile = "3g.40gb", start = 0 }, { profile = "3g.40gb", start = 4 }] }]
[[nodes]]
name = "bare"
gpus = [{ model = "H100-80GB" }]
[[workloads]]
name = "train"
kind = "training"
node = "slurm"
gpu = 0
memory_gib = 30
slurm_job = "4242"
[[workloads]]
name = "plain"
kind = "inference"
node = "bare"
gpu = 0
memory_gib = 10
[[allocations]]
node = "slurm"
gpu = 1
slurm_job = "4242"
[[allocations]]
node = "slurm"
gpu = 2
slurm_job = "4242"
until = "2026-11-02T01:00:00Z"
[[allocations]]
node = "k8s"
gpu = 1
mig_start = 4
namespace = "team-a"
pod = "notebook-0"
from = "2026-11-02T00:30:00Z"
"#;

    fn at(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn workloads_and_allocations_hold_their_devices_over_their_windows() {
        let scenario = Scenario::from_toml(TEXT, "test").unwrap();
        let slurm = SimNode::new(&scenario, "slurm").unwrap();
        let gpu = |n: &SimNode, i: usize| n.gpus()[i].uuid.clone();
        let job = Holder {
            slurm_job_id: Some("4242".into()),
            ..Holder::default()
        };
        let early = slurm.allocation(at("2026-11-02T00:10:00Z"));
        assert!(early.known);
        for i in 0..3 {
            assert_eq!(
                early.holders(&gpu(&slurm, i)),
                Some(&[job.clone()][..]),
                "GPU {i}"
            );
        }
        assert_eq!(
            early.holders(&gpu(&slurm, 3)),
            Some(&[][..]),
            "GPU 3 is free"
        );
        let late = slurm.allocation(at("2026-11-02T02:00:00Z"));
        assert_eq!(
            late.holders(&gpu(&slurm, 2)),
            Some(&[][..]),
            "released at 01:00"
        );
        assert_eq!(late.holders(&gpu(&slurm, 1)), Some(&[job][..]));

        let k8s = SimNode::new(&scenario, "k8s").unwrap();
        let mig = k8s.gpus()[1].mig.as_ref().unwrap();
        let second = mig
            .iter()
            .find(|m| m.layout.placement.start == 4)
            .unwrap()
            .uuid
            .clone();
        assert_eq!(
            k8s.allocation(at("2026-11-02T00:10:00Z")).holders(&second),
            Some(&[][..])
        );
        let held = k8s.allocation(at("2026-11-02T00:30:01Z"));
        assert_eq!(
            held.holders(&second).unwrap()[0].pod.as_deref(),
            Some("notebook-0")
        );
        assert_eq!(
            held.holders(&gpu(&k8s, 1)),
            Some(&[][..]),
            "the GPU itself is not held"
        );

        let bare = SimNode::new(&scenario, "bare").unwrap();
        assert!(!bare.is_scheduled());
        assert_eq!(
            bare.allocation(at("2026-11-02T00:10:00Z"))
                .holders(&gpu(&bare, 0)),
            None
        );
    }

    #[test]
    fn an_allocation_without_a_holder_or_on_a_missing_instance_is_refused() {
        for (extra, expected) in [
            (
                "[[allocations]]\nnode = \"k8s\"\ngpu = 0\n",
                "needs a holder",
            ),
            (
                "[[allocations]]\nnode = \"k8s\"\ngpu = 1\nmig_start = 2\npod = \"p\"\n",
                "no MIG instance starts at slot 2",
            ),
            (
                "[[allocations]]\nnode = \"k8s\"\ngpu = 5\npod = \"p\"\n",
                "GPU 5 does not exist",
            ),
            (
                "[[allocations]]\nnode = \"x\"\ngpu = 0\npod = \"p\"\n",
                "unknown node \"x\"",
            ),
        ] {
            let err = Scenario::from_toml(&format!("{TEXT}{extra}"), "test").unwrap_err();
            assert!(err.to_string().contains(expected), "{err}");
        }
    }
}
