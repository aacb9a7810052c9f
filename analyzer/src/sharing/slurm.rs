//! What Slurm offers instead of the device plugin for the host GPUs Slurm jobs hold: `gres/shard`
//! (the GPU shared by a count of jobs, nothing fenced: Slurm's time-slicing) and `gres/mps` (a
//! share of 100 per GPU, each job's share its `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`), with the
//! `gres.conf` and `slurm.conf` lines computed from the moves' numbers.
//!
//! Slurm's facts designed with (its `gres.conf(5)`, `slurm.conf(5)` and GRES guide): sharing GRES
//! need `select/cons_tres`; a node's shards are its `Gres=…,shard:N` in slurm.conf and its
//! `Name=shard Count=n File=/dev/nvidiaX` lines in gres.conf (per GPU; a GPU with count 0 is not
//! shared); the type is listed in `GresTypes`; a GPU allocated as `gres/gpu` is not allocatable
//! as `gres/shard` or `gres/mps` at the same time, and the reverse; an `mps` request is served by
//! one GPU; MPS servers of different users take turns on a GPU rather than run together; Slurm
//! caps neither memory nor, with shards, compute.
//!
//! Unlike the device plugin, Slurm shares per GPU: each host GPU gets as many shards as workloads
//! it would run, the other GPUs of the node none. tessera writes no Slurm configuration: these
//! are lines for an administrator. Pure: no frames, no files.

use serde::Serialize;

use super::demand::HostDemand;

const GIB: f64 = (1u64 << 30) as f64;

/// A value of a sharing GRES on one GPU (its shards, or what each MPS job asks for).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PerGpu<T> {
    pub gpu: u32,
    #[serde(flatten)]
    pub value: T,
}

/// The shards of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shards {
    /// The workloads it would run.
    pub count: u32,
}

/// What each job sharing one GPU through MPS asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MpsRequest {
    /// `--gres=mps:P`: P = 100 / the workloads it would run.
    pub job_request: String,
}

/// The `gres/mps` alternative, when the workloads' activity allows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MpsOption {
    /// Lines of the node's gres.conf.
    pub gres_conf: Vec<String>,
    /// Lines of slurm.conf.
    pub slurm_conf: Vec<String>,
    /// Per host GPU: the `--gres=mps:P` each job asks for.
    pub job_requests: Vec<PerGpu<MpsRequest>>,
}

/// Slurm's sharing for one node's host GPUs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlurmSharing {
    pub node: String,
    /// Per host GPU: shards = the workloads it would run.
    pub shards: Vec<PerGpu<Shards>>,
    /// The node's GPUs in the data (its `Gres=gpu:N`).
    pub node_gpus: u32,
    /// Lines of the node's gres.conf (`gres/shard`).
    pub gres_conf: Vec<String>,
    /// Lines of slurm.conf (`gres/shard`).
    pub slurm_conf: Vec<String>,
    /// What each job that shares asks for instead of `--gres=gpu:1`.
    pub job_request: String,
    /// The `gres/mps` alternative, or why not.
    pub mps: Option<MpsOption>,
    pub mps_not: Vec<String>,
    /// What to know, one line each.
    pub notes: Vec<String>,
    /// The hosts and their workloads.
    #[serde(skip)]
    pub hosts: Vec<HostDemand>,
}

/// A gres.conf line giving GPU `gpu` of `node` `count` of `name`.
fn gres_line(node: &str, name: &str, count: u32, gpu: u32) -> String {
    format!("NodeName={node} Name={name} Count={count} File=/dev/nvidia{gpu}")
}

/// Slurm's sharing for `node`'s hosts; `gpus`: the node's GPU indices in the data (every one,
/// hosts included); `mig`: why the node is in MIG mode, when it is. `hosts` must not be empty.
pub fn advise(node: &str, hosts: &[HostDemand], gpus: &[u32], mig: Option<&str>) -> SlurmSharing {
    let count = |h: &HostDemand| u32::try_from(h.workloads.len()).unwrap_or(u32::MAX);
    let shards: Vec<PerGpu<Shards>> = hosts
        .iter()
        .map(|h| PerGpu {
            gpu: h.host.gpu,
            value: Shards { count: count(h) },
        })
        .collect();
    let mut all: Vec<u32> = gpus.to_vec();
    all.extend(shards.iter().map(|s| s.gpu));
    all.sort_unstable();
    all.dedup();
    let node_gpus = u32::try_from(all.len()).unwrap_or(u32::MAX);
    let lines = |name: &str, per: &dyn Fn(u32) -> u32| -> Vec<String> {
        all.iter()
            .map(|&g| gres_line(node, name, per(g), g))
            .collect()
    };
    let shard_of = |g: u32| {
        shards
            .iter()
            .find(|s| s.gpu == g)
            .map_or(0, |s| s.value.count)
    };
    let total: u32 = shards.iter().map(|s| s.value.count).sum();
    let mut notes = vec![
        "not automated: tessera writes no Slurm configuration; put these lines in the node's gres.conf and in slurm.conf (SelectType=select/cons_tres, which sharing GRES need), keep the node's other NodeName= settings and Gres (a gpu type too), then restart slurmctld and the node's slurmd".to_string(),
        format!(
            "File= is the GPU's device file: tessera writes /dev/nvidia<NVML index>, which is the minor number on most systems (check with `nvidia-smi -q | grep Minor`); NodeName= is the node's Slurm name (tessera writes the data's, {node})"
        ),
        "gres/shard fences neither memory nor compute (like time-slicing), and a GPU given out as shards is not given out as gres/gpu at the same time: the jobs that move ask for --gres=shard:1 instead of --gres=gpu:1".to_string(),
    ];
    for h in hosts {
        let total = h.memory_total_bytes();
        let sum: f64 = h
            .workloads
            .iter()
            .filter_map(|w| w.stats.as_ref()?.peak_memory_bytes)
            .sum();
        if let Some(t) = total
            && sum > t
        {
            notes.push(format!(
                "warning: on GPU {} the workloads' peaks add up to {:.1} GiB of {:.1} GiB (their peaks may not coincide; `tessera replay` checks them interval by interval)",
                h.host.gpu,
                sum / GIB,
                t / GIB
            ));
        }
    }
    let (mps, mps_not) = mps(node, hosts, &all, mig);
    SlurmSharing {
        node: node.to_string(),
        gres_conf: lines("shard", &shard_of),
        slurm_conf: vec![
            "GresTypes=gpu,shard".to_string(),
            format!("NodeName={node} Gres=gpu:{node_gpus},shard:{total}"),
        ],
        job_request: "--gres=shard:1".into(),
        shards,
        node_gpus,
        mps,
        mps_not,
        notes,
        hosts: hosts.to_vec(),
    }
}

/// The `gres/mps` alternative: 100 per host GPU, each job `100 / workloads` percent; only off
/// MIG and when each workload's activity quantile fits its percentage.
fn mps(
    node: &str,
    hosts: &[HostDemand],
    all: &[u32],
    mig: Option<&str>,
) -> (Option<MpsOption>, Vec<String>) {
    let mut against = Vec::new();
    if let Some(why) = mig {
        against.push(format!(
            "the node is in MIG mode ({why}); MPS does not work with MIG"
        ));
    }
    let mut requests = Vec::new();
    for h in hosts {
        let n = u32::try_from(h.workloads.len().max(1)).unwrap_or(u32::MAX);
        let pct = 100 / n;
        for w in &h.workloads {
            match w.stats.as_ref().and_then(|s| s.activity.map(|a| (a, s))) {
                Some((a, s)) if a * 100.0 > f64::from(pct) + 1e-9 => against.push(format!(
                    "{} is active {:.0}% of the time ({} quantile), more than the {pct}% of GPU {}'s SMs its mps share would allow",
                    w.name(),
                    a * 100.0,
                    s.activity_source.unwrap_or("activity"),
                    h.host.gpu
                )),
                Some(_) => {}
                None => against.push(format!("{}: no activity measured", w.name())),
            }
        }
        requests.push(PerGpu {
            gpu: h.host.gpu,
            value: MpsRequest {
                job_request: format!("--gres=mps:{pct}"),
            },
        });
    }
    if !against.is_empty() {
        return (None, against);
    }
    let hosts_n = u32::try_from(hosts.len()).unwrap_or(u32::MAX);
    let is_host = |g: u32| hosts.iter().any(|h| h.host.gpu == g);
    (
        Some(MpsOption {
            gres_conf: all
                .iter()
                .map(|&g| gres_line(node, "mps", if is_host(g) { 100 } else { 0 }, g))
                .collect(),
            slurm_conf: vec![
                "GresTypes=gpu,mps".to_string(),
                format!(
                    "NodeName={node} Gres=gpu:{},mps:{}",
                    all.len(),
                    100 * hosts_n
                ),
            ],
            job_requests: requests,
        }),
        Vec::new(),
    )
}

/// Print one node's Slurm sharing (`tessera share plan`).
pub fn describe(s: &SlurmSharing, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let shards: Vec<String> = s
        .shards
        .iter()
        .map(|s| format!("GPU {} × {}", s.gpu, s.value.count))
        .collect();
    writeln!(
        out,
        "node {}: Slurm jobs hold its GPUs: gres/shard ({}), not the device plugin",
        s.node,
        shards.join(", ")
    )?;
    for n in &s.notes {
        writeln!(out, "  {n}")?;
    }
    for h in &s.hosts {
        writeln!(out, "  {}", super::rollout::would_run(h))?;
    }
    writeln!(out, "  gres.conf (node {}):", s.node)?;
    for l in &s.gres_conf {
        writeln!(out, "    {l}")?;
    }
    writeln!(out, "  slurm.conf:")?;
    for l in &s.slurm_conf {
        writeln!(out, "    {l}")?;
    }
    writeln!(out, "  jobs that share: {}", s.job_request)?;
    match &s.mps {
        Some(m) => {
            writeln!(
                out,
                "  or gres/mps (jobs run at once with an SM share each; MPS servers of different users take turns; the MPS server started by a prolog, Slurm's etc/prolog.example):"
            )?;
            for l in m.gres_conf.iter().chain(&m.slurm_conf) {
                writeln!(out, "    {l}")?;
            }
            let r: Vec<String> = m
                .job_requests
                .iter()
                .map(|r| format!("GPU {}: {}", r.gpu, r.value.job_request))
                .collect();
            writeln!(out, "    jobs that share: {}", r.join(", "))?;
        }
        None => writeln!(out, "  not gres/mps: {}", s.mps_not.join("; "))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advisor::scheduler::Scheduler;
    use crate::sharing::demand::{GpuStats, Role, Workload};
    use tessera_core::mig::plan_sections::GpuRef;

    fn w(role: Role, gpu: u32, peak_gib: f64, act: f64) -> Workload {
        Workload {
            role,
            gpu: GpuRef {
                node: "n".into(),
                gpu,
                uuid: None,
                label: None,
            },
            stats: Some(GpuStats {
                node: "n".into(),
                gpu,
                uuid: None,
                model: None,
                peak_memory_bytes: Some(peak_gib * GIB),
                memory_total_bytes: Some(80.0 * GIB),
                activity: Some(act),
                activity_source: Some("sm_active"),
                rows: 10,
                mig: false,
                scheduler: Scheduler::Slurm,
                holders: "slurm job 1".into(),
            }),
        }
    }

    fn host(ws: Vec<Workload>) -> HostDemand {
        HostDemand {
            model: "H100".into(),
            host: ws[0].gpu.clone(),
            workloads: ws,
        }
    }

    #[test]
    fn shards_per_host_gpu_and_the_node_lines_from_the_moves() {
        let hosts = vec![
            host(vec![
                w(Role::Host, 0, 10.0, 0.2),
                w(Role::Guest, 1, 10.0, 0.1),
            ]),
            host(vec![
                w(Role::Host, 2, 10.0, 0.1),
                w(Role::Guest, 3, 10.0, 0.2),
                w(Role::Guest, 4, 10.0, 0.3),
            ]),
        ];
        let s = advise("n", &hosts, &[0, 1, 2, 3, 4, 5], None);
        let shards: Vec<(u32, u32)> = s.shards.iter().map(|s| (s.gpu, s.value.count)).collect();
        assert_eq!(shards, [(0, 2), (2, 3)]);
        assert_eq!(
            s.gres_conf,
            [
                "NodeName=n Name=shard Count=2 File=/dev/nvidia0",
                "NodeName=n Name=shard Count=0 File=/dev/nvidia1",
                "NodeName=n Name=shard Count=3 File=/dev/nvidia2",
                "NodeName=n Name=shard Count=0 File=/dev/nvidia3",
                "NodeName=n Name=shard Count=0 File=/dev/nvidia4",
                "NodeName=n Name=shard Count=0 File=/dev/nvidia5",
            ]
        );
        assert_eq!(
            s.slurm_conf,
            ["GresTypes=gpu,shard", "NodeName=n Gres=gpu:6,shard:5"]
        );
        let m = s.mps.expect("quiet workloads: mps is an option");
        let requests: Vec<(u32, &str)> = m
            .job_requests
            .iter()
            .map(|r| (r.gpu, r.value.job_request.as_str()))
            .collect();
        assert_eq!(requests, [(0, "--gres=mps:50"), (2, "--gres=mps:33")]);
        assert_eq!(m.slurm_conf[1], "NodeName=n Gres=gpu:6,mps:200");
        assert!(m.gres_conf[0].ends_with("Name=mps Count=100 File=/dev/nvidia0"));
    }

    #[test]
    fn busy_workloads_or_mig_rule_out_mps_and_big_peaks_warn() {
        let hosts = vec![host(vec![
            w(Role::Host, 0, 50.0, 0.7),
            w(Role::Guest, 1, 40.0, 0.1),
        ])];
        let s = advise("n", &hosts, &[0, 1], Some("x"));
        assert!(s.mps.is_none());
        assert!(s.mps_not[0].contains("MIG mode"), "{:?}", s.mps_not);
        assert!(s.mps_not[1].contains("active 70%"), "{:?}", s.mps_not);
        assert!(
            s.notes
                .iter()
                .any(|n| n.contains("add up to 90.0 GiB of 80.0 GiB")),
            "{:?}",
            s.notes
        );
        assert!(s.notes[0].starts_with("not automated"));
    }
}
