//! Which scheduler holds each GPU, from the frames: Kubernetes when a pod holds it (`gpu` rows'
//! `holder_pod`, the history's holders; `process` rows' `pod_uid` or `pod`, the processes'
//! cgroups), Slurm when a job does (`holder_slurm_job_id`; `slurm_job_id`), both when the range
//! saw both, unknown when neither (no allocation source, no attributed process: CSV from
//! nvidia-smi, history without holders and with no process seen).
//!
//! tessera shares GPUs and changes layouts; it never moves a pod or a job. [`moved_by`] says, for
//! a consolidation move, who does: the Kubernetes scheduler for a pod, Slurm for a job's next
//! submission, no one for a move between the two (a GPU belongs to one scheduler).
//!
//! Pure over the frames given (one partition: a GPU lives in one partition). Reads only the
//! columns present, so frames built for a test without the holder columns read as unknown.

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::*;
use serde::Serialize;

use super::AdvisorError;
use crate::frames::Frames;
use crate::frames::columns::{self, FastSet};

/// The scheduler that holds a GPU (JSON: `kubernetes`, `slurm`, `both`, `unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    /// Held by Kubernetes pods.
    Kubernetes,
    /// Held by Slurm jobs.
    Slurm,
    /// Pods and Slurm jobs held it in the range.
    Both,
    /// No pod or job named in the data.
    Unknown,
}

impl Scheduler {
    /// Who moves work of a move of this scheduler, in a few words (`by Kubernetes`, …).
    pub fn by(self) -> &'static str {
        match self {
            Scheduler::Kubernetes => "by Kubernetes",
            Scheduler::Slurm => "by Slurm",
            Scheduler::Both => "by neither scheduler: not automated",
            Scheduler::Unknown => "by its scheduler: holder unknown",
        }
    }
}

/// Who held one GPU in the range: the pods (`namespace/pod` or the pod UID) and Slurm jobs
/// named, a few of each (enough for messages).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    pub pods: BTreeSet<String>,
    pub jobs: BTreeSet<String>,
}

/// Names kept per GPU and kind.
const KEEP: usize = 3;

impl Held {
    /// The scheduler these holders belong to.
    pub fn scheduler(&self) -> Scheduler {
        match (self.pods.is_empty(), self.jobs.is_empty()) {
            (true, true) => Scheduler::Unknown,
            (false, true) => Scheduler::Kubernetes,
            (true, false) => Scheduler::Slurm,
            (false, false) => Scheduler::Both,
        }
    }

    /// `pod serving/chat-api, slurm job 81234`: the holders, for messages.
    pub fn names(&self) -> String {
        let pods = self.pods.iter().map(|p| format!("pod {p}"));
        let jobs = self.jobs.iter().map(|j| format!("slurm job {j}"));
        pods.chain(jobs).collect::<Vec<_>>().join(", ")
    }

    fn add(set: &mut BTreeSet<String>, name: &str) {
        if set.len() < KEEP || set.contains(name) {
            set.insert(name.to_string());
        }
    }
}

/// The holders of every GPU the frames name, by (node, UUID) and by (node, index).
#[derive(Debug, Clone, Default)]
pub struct Holders {
    by_uuid: BTreeMap<(String, String), Held>,
    by_index: BTreeMap<(String, u32), Held>,
}

impl Holders {
    /// Who held GPU `gpu` of `node` (by UUID when given and known, else by index).
    pub fn get(&self, node: &str, gpu: Option<u32>, uuid: Option<&str>) -> Option<&Held> {
        uuid.and_then(|u| self.by_uuid.get(&(node.to_string(), u.to_string())))
            .or_else(|| gpu.and_then(|g| self.by_index.get(&(node.to_string(), g))))
    }

    /// The scheduler of GPU `gpu` of `node` ([`Scheduler::Unknown`] when nothing names one).
    pub fn scheduler(&self, node: &str, gpu: Option<u32>, uuid: Option<&str>) -> Scheduler {
        self.get(node, gpu, uuid)
            .map_or(Scheduler::Unknown, Held::scheduler)
    }

    fn add(&mut self, node: &str, gpu: Option<u32>, uuid: Option<&str>, pod: bool, name: &str) {
        let put = |h: &mut Held| {
            Held::add(if pod { &mut h.pods } else { &mut h.jobs }, name);
        };
        if let Some(u) = uuid {
            put(self
                .by_uuid
                .entry((node.to_string(), u.to_string()))
                .or_default());
        }
        if let Some(g) = gpu {
            put(self.by_index.entry((node.to_string(), g)).or_default());
        }
    }

    /// One row's holders: a pod (`namespace/pod`, else the pod's name, else its UID) and a Slurm
    /// job, where named.
    #[allow(clippy::too_many_arguments)]
    pub fn add_row(
        &mut self,
        node: &str,
        gpu: Option<u32>,
        uuid: Option<&str>,
        namespace: Option<&str>,
        pod: Option<&str>,
        pod_uid: Option<&str>,
        job: Option<&str>,
    ) {
        let pod = match (namespace, pod, pod_uid) {
            (Some(ns), Some(p), _) => Some(format!("{ns}/{p}")),
            (None, Some(p), _) => Some(p.to_string()),
            (_, None, Some(uid)) => Some(uid.to_string()),
            _ => None,
        };
        if let Some(p) = pod {
            self.add(node, gpu, uuid, true, &p);
        }
        if let Some(j) = job {
            self.add(node, gpu, uuid, false, j);
        }
    }
}

/// The rows of `lf` (its present columns of `cols`) where any of `any` is not null.
fn held_rows(lf: &LazyFrame, cols: &[&str], any: &[&str]) -> Result<DataFrame, AdvisorError> {
    let schema = lf.clone().collect_schema()?;
    let has = |c: &&str| schema.contains(c);
    let present: Vec<&str> = cols.iter().copied().filter(has).collect();
    let wanted: Vec<&str> = any.iter().copied().filter(has).collect();
    let Some(filter) = wanted
        .iter()
        .map(|c| col(*c).is_not_null())
        .reduce(|a, b| a.or(b))
    else {
        return Ok(DataFrame::empty());
    };
    if !present.contains(&"node") {
        return Ok(DataFrame::empty());
    }
    let select: Vec<Expr> = present
        .iter()
        .map(|&c| {
            if c == "gpu" {
                col(c).cast(DataType::Int64)
            } else {
                col(c)
            }
        })
        .collect();
    Ok(lf.clone().filter(filter).select(select).collect()?)
}

/// A string column of `df`, when present.
fn strs_if(df: &DataFrame, name: &str) -> Result<Option<columns::Strs>, AdvisorError> {
    if df.get_column_index(name).is_none() {
        return Ok(None);
    }
    Ok(Some(columns::strs(df, name)?))
}

/// The holders of each GPU in `frames`: the `gpu` table's holder columns and the `process`
/// table's attribution. Rows are walked in Rust, each distinct combination of strings read once.
pub fn holders(frames: &Frames) -> Result<Holders, AdvisorError> {
    let mut out = Holders::default();
    let tables: [(&LazyFrame, [&str; 4], &[&str]); 2] = [
        (
            &frames.gpu,
            ["holder_namespace", "holder_pod", "holder_slurm_job_id", ""],
            &["holder_pod", "holder_slurm_job_id"],
        ),
        (
            &frames.process,
            ["namespace", "pod", "slurm_job_id", "pod_uid"],
            &["pod", "pod_uid", "slurm_job_id"],
        ),
    ];
    for (lf, [ns_col, pod_col, job_col, uid_col], any) in tables {
        let cols = ["node", "gpu", "uuid", ns_col, pod_col, job_col, uid_col];
        let df = held_rows(lf, &cols, any)?;
        if df.height() == 0 {
            continue;
        }
        let gpu = match df.get_column_index("gpu") {
            Some(_) => Some(columns::i64s(&df, "gpu")?),
            None => None,
        };
        let strs = [
            strs_if(&df, "node")?,
            strs_if(&df, "uuid")?,
            strs_if(&df, ns_col)?,
            strs_if(&df, pod_col)?,
            strs_if(&df, job_col)?,
            strs_if(&df, uid_col)?,
        ];
        let ids: Vec<Option<columns::Ids>> = strs
            .iter()
            .map(|s| s.as_ref().map(columns::Strs::ids))
            .collect();
        let at = |c: usize, i: usize| ids[c].as_ref().and_then(|s| s.get(i));
        let mut seen: FastSet<([Option<u32>; 6], Option<i64>)> = FastSet::default();
        for i in 0..df.height() {
            let g = gpu.as_ref().and_then(|g| g.get(i));
            let key = std::array::from_fn(|c| ids[c].as_ref().and_then(|s| s.at(i)));
            if !seen.insert((key, g)) {
                continue;
            }
            let Some(n) = at(0, i) else { continue };
            let g = g.and_then(|g| u32::try_from(g).ok());
            out.add_row(n, g, at(1, i), at(2, i), at(3, i), at(5, i), at(4, i));
        }
    }
    Ok(out)
}

/// Who carries out a consolidation move of a workload held by `guest` on `guest_node` onto a
/// GPU held by `host` on `host_node`: the scheduler of the move and one short sentence.
pub fn moved_by(
    guest: Scheduler,
    host: Scheduler,
    guest_node: &str,
    host_node: &str,
) -> (Scheduler, String) {
    use Scheduler::*;
    match (guest, host) {
        (Kubernetes, Kubernetes) if guest_node == host_node => (
            Kubernetes,
            format!(
                "the Kubernetes scheduler, when the pod is next scheduled onto {host_node}'s shared GPUs; tessera moves no pod"
            ),
        ),
        (Kubernetes, Kubernetes) => (
            Kubernetes,
            format!(
                "the Kubernetes scheduler, when the pod is next scheduled onto {host_node} (node affinity, or cordon and drain {guest_node}); tessera moves no pod"
            ),
        ),
        (Slurm, Slurm) => (
            Slurm,
            format!(
                "Slurm, at the job's next submission (--nodelist={host_node} --gres=shard:1 once the GPU is shared); tessera moves no job"
            ),
        ),
        (Both, _) | (_, Both) => (
            Both,
            "no one: pods and Slurm jobs both held these GPUs in the range; not automated".into(),
        ),
        (Unknown, _) | (_, Unknown) => (
            Unknown,
            "unknown: the data names no pod or Slurm job holding these GPUs; their scheduler moves the work, tessera does not".into(),
        ),
        (Kubernetes, Slurm) | (Slurm, Kubernetes) => (
            Both,
            format!(
                "no one: a {} would move onto a GPU a {} holds, and neither scheduler places work on the other's GPUs; not automated",
                if guest == Slurm { "Slurm job" } else { "pod" },
                if host == Slurm { "Slurm job" } else { "pod" },
            ),
        ),
    }
}

/// One sentence on who carries out moves of these schedulers: tessera shares GPUs (`tessera
/// share plan`), it never moves a pod or a job.
pub fn who_moves(schedulers: &BTreeSet<Scheduler>) -> String {
    let mut s =
        vec!["tessera moves no work (tessera share plan shares the hosts' GPUs)".to_string()];
    for k in schedulers {
        s.push(match k {
            Scheduler::Kubernetes => "the Kubernetes scheduler moves pods when they are next scheduled (node affinity, or cordon and drain the node they leave)".into(),
            Scheduler::Slurm => "Slurm moves a job at its next submission (--nodelist, --gres=shard:1)".into(),
            Scheduler::Both => "a move between a pod's GPU and a Slurm job's is made by neither scheduler: not automated".into(),
            Scheduler::Unknown => "where the data names no pod or Slurm job, the work's own scheduler moves it".into(),
        });
    }
    s.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames() -> Frames {
        let gpu = df!(
            "node" => ["a", "a", "a", "b", "b"],
            "gpu" => [0i64, 1, 1, 0, 1],
            "uuid" => ["GPU-a0", "GPU-a1", "GPU-a1", "GPU-b0", "GPU-b1"],
            "holder_namespace" => [Some("ns"), None, None, None, None],
            "holder_pod" => [Some("p0"), None, None, None, None],
            "holder_slurm_job_id" => [None, Some("81234"), Some("81234"), None, None],
        )
        .unwrap();
        let process = df!(
            "node" => ["a", "b", "b"],
            "gpu" => [0i64, 0, 0],
            "uuid" => ["GPU-a0", "GPU-b0", "GPU-b0"],
            "namespace" => [None::<&str>, None, None],
            "pod" => [None::<&str>, None, None],
            "pod_uid" => [Some("uid-1"), None, Some("uid-2")],
            "slurm_job_id" => [None, Some("7"), None],
        )
        .unwrap();
        Frames {
            gpu: gpu.lazy(),
            mig: DataFrame::empty().lazy(),
            process: process.lazy(),
        }
    }

    #[test]
    fn holders_from_gpu_rows_and_processes() {
        let h = holders(&frames()).unwrap();
        let a0 = h.get("a", Some(0), Some("GPU-a0")).unwrap();
        assert_eq!(a0.pods.iter().collect::<Vec<_>>(), ["ns/p0", "uid-1"]);
        assert_eq!(a0.scheduler(), Scheduler::Kubernetes);
        assert_eq!(h.scheduler("a", Some(1), None), Scheduler::Slurm);
        assert_eq!(h.scheduler("b", None, Some("GPU-b0")), Scheduler::Both);
        assert_eq!(
            h.scheduler("b", Some(1), Some("GPU-b1")),
            Scheduler::Unknown
        );
        assert_eq!(
            h.get("a", Some(1), None).unwrap().names(),
            "slurm job 81234"
        );
    }

    #[test]
    fn frames_without_the_columns_are_unknown() {
        let gpu = df!("node" => ["a"], "gpu" => [0i64], "uuid" => ["GPU-a0"]).unwrap();
        let f = Frames {
            gpu: gpu.lazy(),
            mig: DataFrame::empty().lazy(),
            process: DataFrame::empty().lazy(),
        };
        let h = holders(&f).unwrap();
        assert_eq!(
            h.scheduler("a", Some(0), Some("GPU-a0")),
            Scheduler::Unknown
        );
    }

    #[test]
    fn each_move_names_who_makes_it() {
        use Scheduler::*;
        let (s, t) = moved_by(Kubernetes, Kubernetes, "b", "a");
        assert_eq!(s, Kubernetes);
        assert!(t.contains("cordon and drain b"), "{t}");
        let (s, t) = moved_by(Slurm, Slurm, "a", "a");
        assert_eq!(s, Slurm);
        assert!(t.contains("--nodelist=a"), "{t}");
        let (s, t) = moved_by(Slurm, Kubernetes, "a", "a");
        assert_eq!(s, Both);
        assert!(t.starts_with("no one: a Slurm job"), "{t}");
        assert_eq!(moved_by(Unknown, Slurm, "a", "a").0, Unknown);
    }
}
