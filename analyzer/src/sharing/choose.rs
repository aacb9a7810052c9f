//! One sharing config per node from the workloads its host GPUs would run, and why.
//!
//! Rules (docs/sharing.md, "How the config is chosen"):
//! - **Replicas**: the device plugin shares every GPU of a node the same number of ways, so the
//!   node's replicas are the most workloads any of its host GPUs would run (the host's own work
//!   and each guest's). Every GPU of the node is then advertised that many times, the freed
//!   guests' GPUs and GPUs outside the moves too.
//! - **MPS** only when the node is not in MIG mode (MPS does not work with MIG: the frames saw a
//!   MIG-enabled GPU on it, or its labels say so), every workload was measured, each one's peak
//!   memory × (1 + headroom) fits in the GPU's memory ÷ replicas (what MPS gives each client),
//!   and each one's activity quantile fits in 1 ÷ replicas of the SMs (MPS caps each client
//!   there). MPS isolates memory and runs the clients' kernels at once.
//! - **Time-slicing** otherwise: no memory isolation and no cap, each workload gets the GPU in
//!   turns; the reasons say which rule ruled out MPS.
//!
//! Pure: no frames, no cluster. The config text and its name (`tessera-<method>-<replicas>-
//! <hash>`: the hash follows the text, so a changed config is a new label value, the device
//! plugin acting on label changes only) are made here too.

use super::GPU_RESOURCE;
use super::demand::{HostDemand, Role};

const GIB: f64 = (1u64 << 30) as f64;

/// How the GPUs of a node are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    TimeSlicing,
    Mps,
}

impl Method {
    /// The name in output, labels and config names (`time-slicing`, `mps`).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::TimeSlicing => "time-slicing",
            Method::Mps => "mps",
        }
    }

    /// The key under `sharing:` in the device plugin's config.
    fn key(self) -> &'static str {
        match self {
            Method::TimeSlicing => "timeSlicing",
            Method::Mps => "mps",
        }
    }
}

/// Knobs of the choice.
#[derive(Debug, Clone, Copy)]
pub struct ChooseParams {
    /// Memory headroom on each workload's peak for the MPS check (0.1 = 10%).
    pub headroom: f64,
}

impl Default for ChooseParams {
    fn default() -> Self {
        ChooseParams { headroom: 0.1 }
    }
}

/// The config chosen for one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSharing {
    pub node: String,
    pub method: Method,
    pub replicas: u32,
    /// Why this method and this count, one line each.
    pub reasons: Vec<String>,
    /// The device plugin config (YAML).
    pub text: String,
    /// Its key in the ConfigMap and the label value.
    pub name: String,
    pub hosts: Vec<HostDemand>,
}

fn gib(b: f64) -> String {
    format!("{:.1} GiB", b / GIB)
}

/// The device plugin config sharing `nvidia.com/gpu` `replicas` ways with `method`.
pub fn render(method: Method, replicas: u32) -> String {
    format!(
        "version: v1\nsharing:\n  {}:\n    resources:\n      - name: {GPU_RESOURCE}\n        replicas: {replicas}\n",
        method.key()
    )
}

/// FNV-1a of `text`, 32 bits.
fn fnv32(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The config's key and label value: `tessera-<method>-<replicas>-<hash of text>`.
pub fn config_name(method: Method, replicas: u32, text: &str) -> String {
    format!(
        "{}{}-{replicas}-{:08x}",
        super::CONFIG_PREFIX,
        method.as_str(),
        fnv32(text)
    )
}

/// Whether the ConfigMap entry `key` = `value` is one tessera wrote: its value is exactly a
/// config tessera renders and its key is that config's name (method, replicas and the hash of
/// the value). A user's entry, also one whose key starts with `tessera-`, is never tessera's: it
/// is never pruned.
pub fn is_own(key: &str, value: &str) -> bool {
    [Method::TimeSlicing, Method::Mps].into_iter().any(|m| {
        let Some(rest) = key
            .strip_prefix(super::CONFIG_PREFIX)
            .and_then(|r| r.strip_prefix(m.as_str()))
            .and_then(|r| r.strip_prefix('-'))
        else {
            return false;
        };
        let Some(replicas) = rest.split('-').next().and_then(|r| r.parse::<u32>().ok()) else {
            return false;
        };
        value == render(m, replicas) && key == config_name(m, replicas, value)
    })
}

/// The config for `node` from the hosts of the moves on it; `mig`: why the node is in MIG mode
/// (from the frames or its labels), when it is. `hosts` must not be empty.
pub fn choose(
    node: &str,
    hosts: Vec<HostDemand>,
    mig: Option<&str>,
    p: ChooseParams,
) -> NodeSharing {
    let busiest = hosts
        .iter()
        .max_by_key(|h| h.workloads.len())
        .expect("a node with hosts");
    let replicas = u32::try_from(busiest.workloads.len().max(1)).unwrap_or(u32::MAX);
    let mut reasons = vec![format!(
        "replicas {replicas}: the most workloads one GPU of the node would run (GPU {}: its own and {} moved there); the device plugin shares every GPU of a node alike, so each of its GPUs is advertised {replicas} times",
        busiest.host.gpu,
        busiest.workloads.len() - 1
    )];
    let mut against: Vec<String> = Vec::new();
    if let Some(why) = mig {
        against.push(format!(
            "the node is in MIG mode ({why}); MPS does not work with MIG"
        ));
    }
    for h in &hosts {
        weigh_host(h, replicas, p, &mut against, &mut reasons);
    }
    let roles = |r: Role| {
        hosts
            .iter()
            .flat_map(|h| &h.workloads)
            .filter(|w| w.role == r)
            .count()
    };
    let method = if against.is_empty() {
        reasons.insert(
            0,
            format!(
                "mps: not in MIG mode, and each of the {} workload(s) fits in 1/{replicas} of its GPU's memory (+{:.0}% headroom) and of its SMs; MPS isolates memory and runs them at once",
                roles(Role::Host) + roles(Role::Guest),
                p.headroom * 100.0
            ),
        );
        Method::Mps
    } else {
        reasons.insert(0, format!("time-slicing, not MPS: {}", against.join("; ")));
        Method::TimeSlicing
    };
    let text = render(method, replicas);
    NodeSharing {
        node: node.to_string(),
        method,
        replicas,
        reasons,
        name: config_name(method, replicas, &text),
        text,
        hosts,
    }
}

/// Checks one host GPU's workloads against MPS with `replicas` clients: a workload unmeasured,
/// too large for its memory slot (with headroom) or too active for its share of the SMs is
/// pushed to `against`; peaks adding up past the GPU's memory add a warning to `reasons`.
fn weigh_host(
    h: &HostDemand,
    replicas: u32,
    p: ChooseParams,
    against: &mut Vec<String>,
    reasons: &mut Vec<String>,
) {
    let share = 1.0 / f64::from(replicas);
    let total = h.memory_total_bytes();
    let mut sum = 0.0;
    for w in &h.workloads {
        let Some(s) = &w.stats else {
            against.push(format!(
                "{} has no rows in the window: its memory and activity are unknown",
                w.name()
            ));
            continue;
        };
        match (s.peak_memory_bytes, total) {
            (Some(peak), Some(total)) => {
                sum += peak;
                let need = peak * (1.0 + p.headroom);
                let slot = total * share;
                if need > slot {
                    against.push(format!(
                        "{} peaks at {} (+{:.0}%: {}), more than {} / {replicas} = {} that MPS gives each client",
                        w.name(),
                        gib(peak),
                        p.headroom * 100.0,
                        gib(need),
                        gib(total),
                        gib(slot)
                    ));
                }
            }
            _ => against.push(format!("{}: no memory measured", w.name())),
        }
        match s.activity {
            Some(a) if a > share + 1e-9 => against.push(format!(
                "{} is active {:.0}% of the time ({} quantile), more than the 1/{replicas} of the SMs MPS caps each client at",
                w.name(),
                a * 100.0,
                s.activity_source.unwrap_or("activity")
            )),
            Some(_) => {}
            None => against.push(format!("{}: no activity measured", w.name())),
        }
    }
    if let Some(total) = total
        && sum > total
    {
        reasons.push(format!(
            "warning: on GPU {} the workloads' peaks add up to {} of {} (their peaks may not coincide; tessera replay checks them interval by interval)",
            h.host.gpu,
            gib(sum),
            gib(total)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharing::demand::{GpuStats, Workload};
    use tessera_core::mig::plan_sections::GpuRef;

    fn w(role: Role, gpu: u32, peak_gib: Option<f64>, act: f64) -> Workload {
        Workload {
            role,
            gpu: GpuRef {
                node: "a".into(),
                gpu,
                uuid: None,
                label: None,
            },
            stats: peak_gib.map(|p| GpuStats {
                node: "a".into(),
                gpu,
                uuid: None,
                model: None,
                peak_memory_bytes: Some(p * GIB),
                memory_total_bytes: Some(80.0 * GIB),
                activity: Some(act),
                activity_source: Some("sm_active"),
                rows: 10,
                mig: false,
                scheduler: crate::advisor::scheduler::Scheduler::Kubernetes,
                holders: String::new(),
            }),
        }
    }

    fn host(gpu: u32, ws: Vec<Workload>) -> HostDemand {
        let mut h = HostDemand {
            model: "H100".into(),
            host: ws[0].gpu.clone(),
            workloads: ws,
        };
        h.host.gpu = gpu;
        h
    }

    #[test]
    fn small_workloads_get_mps_with_the_most_workloads_as_replicas() {
        let hosts = vec![
            host(
                0,
                vec![
                    w(Role::Host, 0, Some(10.0), 0.2),
                    w(Role::Guest, 1, Some(12.0), 0.1),
                ],
            ),
            host(
                2,
                vec![
                    w(Role::Host, 2, Some(5.0), 0.1),
                    w(Role::Guest, 3, Some(20.0), 0.3),
                    w(Role::Guest, 4, Some(15.0), 0.05),
                ],
            ),
        ];
        let s = choose("a", hosts, None, ChooseParams::default());
        assert_eq!((s.method, s.replicas), (Method::Mps, 3));
        assert!(s.reasons[0].starts_with("mps:"), "{:?}", s.reasons);
        assert!(s.text.contains("  mps:\n") && s.text.contains("replicas: 3"));
        assert!(s.name.starts_with("tessera-mps-3-"), "{}", s.name);
    }

    #[test]
    fn a_workload_too_big_for_its_mps_share_gets_time_slicing() {
        // 80 GiB / 2 = 40 GiB per client; 38 GiB + 10% = 41.8 GiB does not fit.
        let hosts = vec![host(
            0,
            vec![
                w(Role::Host, 0, Some(38.0), 0.2),
                w(Role::Guest, 1, Some(2.0), 0.1),
            ],
        )];
        let s = choose("a", hosts, None, ChooseParams::default());
        assert_eq!((s.method, s.replicas), (Method::TimeSlicing, 2));
        assert!(
            s.reasons[0].contains("a/GPU0 peaks at 38.0 GiB"),
            "{:?}",
            s.reasons
        );
        assert!(s.text.contains("timeSlicing:"));
        // Without headroom it fits.
        let hosts = vec![host(
            0,
            vec![
                w(Role::Host, 0, Some(38.0), 0.2),
                w(Role::Guest, 1, Some(2.0), 0.1),
            ],
        )];
        let s = choose("a", hosts, None, ChooseParams { headroom: 0.0 });
        assert_eq!(s.method, Method::Mps);
    }

    #[test]
    fn mig_mode_busy_or_unmeasured_workloads_rule_out_mps() {
        let small = || {
            vec![host(
                0,
                vec![
                    w(Role::Host, 0, Some(1.0), 0.1),
                    w(Role::Guest, 1, Some(1.0), 0.1),
                ],
            )]
        };
        let s = choose(
            "a",
            small(),
            Some("nvidia.com/mig.config=all-1g.10gb"),
            ChooseParams::default(),
        );
        assert_eq!(s.method, Method::TimeSlicing);
        assert!(s.reasons[0].contains("MIG mode"), "{:?}", s.reasons);
        let busy = vec![host(
            0,
            vec![
                w(Role::Host, 0, Some(1.0), 0.7),
                w(Role::Guest, 1, Some(1.0), 0.1),
            ],
        )];
        let s = choose("a", busy, None, ChooseParams::default());
        assert_eq!(s.method, Method::TimeSlicing);
        assert!(s.reasons[0].contains("active 70%"), "{:?}", s.reasons);
        let unknown = vec![host(
            0,
            vec![
                w(Role::Host, 0, Some(1.0), 0.1),
                w(Role::Guest, 1, None, 0.0),
            ],
        )];
        let s = choose("a", unknown, None, ChooseParams::default());
        assert_eq!(s.method, Method::TimeSlicing);
        assert!(s.reasons[0].contains("no rows"), "{:?}", s.reasons);
    }

    #[test]
    fn names_follow_the_text() {
        let a = render(Method::Mps, 2);
        assert_ne!(
            config_name(Method::Mps, 2, &a),
            config_name(Method::Mps, 2, &format!("{a}#\n"))
        );
        assert_ne!(render(Method::Mps, 2), render(Method::TimeSlicing, 2));
    }
}
