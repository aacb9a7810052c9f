//! GPUs held by Slurm jobs: which job each GPU is allocated to, whether or not anything runs on
//! it, read from Slurm's job cgroups and the environment of the jobs' processes
//! (`docs/attribution.md`, "GPUs held by Slurm jobs"; history's `holders`, issue 32).
//!
//! - [`find_jobs`] lists the job cgroups under a cgroup root: cgroup v2
//!   `system.slice/[<node>_]slurmstepd.scope/job_<id>`, cgroup v1
//!   `<controller>/slurm[_<node>]/uid_<uid>/job_<id>`, each named by
//!   [`crate::attribution::slurm_job_id`] (the rule process attribution uses).
//! - [`job_pids`] lists a few processes of a job's steps: `step_batch` and `step_interactive`
//!   first, then the others by name; never `step_extern` (its processes, the extern step's
//!   sleep and sessions adopted by `pam_slurm_adopt`, do not carry the job's environment) nor
//!   slurmstepd's own `slurm` cgroup. [`parse_procs`] reads one `cgroup.procs`.
//! - [`parse_environ`] reads a process's `environ` (NUL-separated): `SLURM_JOB_GPUS`, every GPU of
//!   the job (set in batch and interactive steps and inherited by their `srun` steps), else
//!   `SLURM_STEP_GPUS`, the GPUs of one step; `SLURM_JOB_ID` tells a task of the job from
//!   another process. [`parse_gpu_list`] reads the value (`0,1,2,3`; ranges `0-3` are accepted).
//!   `CUDA_VISIBLE_DEVICES` is not used: with `ConstrainDevices=yes` it is renumbered from 0
//!   inside each job.
//! - [`allocation`] maps Slurm's GPU numbers onto the inventory by the GPU's device minor number
//!   (Slurm numbers a GPU by its `/dev/nvidia<N>`), by NVML index for a GPU whose minor number
//!   NVML does not report. A GPU in MIG mode makes
//!   the whole answer unknown (Slurm's MIG devices are not mapped), and so does an index the
//!   inventory does not have (the numbering does not hold).
//! - [`SlurmScanner`] puts them together on the sampler thread, once per sample: one listing of
//!   the job cgroups, and for a job not seen before, a few small reads (at most
//!   [`MAX_ENVIRON_READS`] `environ` files of at most [`MAX_ENVIRON_BYTES`] per scan; at most
//!   [`MAX_JOBS`] jobs). A job's GPUs from `SLURM_JOB_GPUS` are kept until its cgroup goes.
//!   Any job whose GPUs cannot be read makes the scan unknown (a GPU it may hold is never called
//!   free); failures are counted and logged once, and again when a scan succeeds.
//!
//! What it does not do: ask slurmctld (`scontrol`, `squeue`), read the devices a job's cgroup
//! allows, map MIG devices, serve anything on `/metrics` (history records it:
//! [`crate::sampler::Snapshot::allocation`]), or panic on any file content.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use tessera_core::model::{Allocation, Holder, Inventory};

use crate::attribution::slurm_job_id;

/// Where the cgroup filesystem is mounted (`--slurm.cgroup-root`).
pub const DEFAULT_CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Jobs one scan accepts; more make it unknown.
pub const MAX_JOBS: usize = 512;
/// `environ` files one scan reads at most (jobs already known cost none).
pub const MAX_ENVIRON_READS: usize = 512;
/// The most read of one `environ`; a larger one without `SLURM_JOB_GPUS` in its first part
/// leaves its job unknown.
pub const MAX_ENVIRON_BYTES: u64 = 64 * 1024;
/// The largest GPU index accepted in `SLURM_JOB_GPUS`.
pub const MAX_GPU_INDEX: u32 = 1023;
/// Processes tried per job (the first task that carries the job's environment settles it).
const MAX_PIDS_PER_JOB: usize = 16;
/// Processes taken from one `cgroup.procs`.
const MAX_PIDS_PER_FILE: usize = 4;
/// Entries read of one directory.
const MAX_DIR_ENTRIES: usize = 4096;
/// The most read of one `cgroup.procs`.
const MAX_PROCS_BYTES: u64 = 64 * 1024;
/// How deep below a step directory processes are looked for (`step_0/user/task_0` on v2).
const MAX_STEP_DEPTH: usize = 3;

/// Why Slurm's allocations could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error(
        "no Slurm job cgroups under {}: neither system.slice/slurmstepd.scope (cgroup v2) nor <controller>/slurm (cgroup v1)",
        root.display()
    )]
    NoHierarchy { root: PathBuf },
    #[error("cannot list {}: {source}", path.display())]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("more than {MAX_JOBS} Slurm jobs under {}", root.display())]
    TooManyJobs { root: PathBuf },
    #[error("{var}={value:?} is not a comma-separated list of GPU indices (0 to {MAX_GPU_INDEX})")]
    BadGpuList { var: &'static str, value: String },
    #[error("the GPUs of Slurm job {job} cannot be read: {reason}")]
    JobUnreadable { job: String, reason: String },
    #[error(
        "GPU {index} of Slurm job {job} is not among this node's {gpus} GPU(s) (Slurm's GPU numbers are device minor numbers, /dev/nvidia<N>)"
    )]
    UnknownIndex {
        job: String,
        index: u32,
        gpus: usize,
    },
    #[error("GPU {index} is in MIG mode: Slurm's MIG devices are not mapped")]
    MigMode { index: u32 },
}

/// What one process's environment says about its job's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvGpus {
    /// Not a task of a job (no `SLURM_JOB_ID`): slurmstepd, or a process that entered the job's
    /// cgroup from elsewhere.
    NotATask,
    /// `SLURM_JOB_GPUS`: every GPU of the job (sorted, without duplicates).
    Job(Vec<u32>),
    /// Only `SLURM_STEP_GPUS`: the GPUs of this process's step, a part of the job's.
    Step(Vec<u32>),
    /// A task with neither variable: its step (its job, in a batch or interactive step) holds
    /// no GPU.
    NoGpus,
}

/// The GPU indices of a `SLURM_JOB_GPUS` or `SLURM_STEP_GPUS` value (`var` names it in errors):
/// a comma-separated list of numbers or ranges `a-b`, sorted and without duplicates; empty for
/// an empty value.
pub fn parse_gpu_list(var: &'static str, value: &str) -> Result<Vec<u32>, SlurmError> {
    let bad = || SlurmError::BadGpuList {
        var,
        value: value.chars().take(64).collect(),
    };
    let number = |s: &str| {
        let s = s.trim();
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse::<u32>().ok().filter(|n| *n <= MAX_GPU_INDEX)
    };
    let mut out = BTreeSet::new();
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    for part in value.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (number(a).ok_or_else(bad)?, number(b).ok_or_else(bad)?);
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(number(part).ok_or_else(bad)?);
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// What a process's `environ` (NUL-separated `NAME=value` entries) says about its job's GPUs.
/// The first occurrence of a variable counts. A value that is not a GPU list is an error.
pub fn parse_environ(environ: &[u8]) -> Result<EnvGpus, SlurmError> {
    let (mut task, mut job, mut step) = (false, None, None);
    for entry in environ.split(|b| *b == 0) {
        if let Some(v) = entry.strip_prefix(b"SLURM_JOB_GPUS=") {
            job.get_or_insert(v);
        } else if let Some(v) = entry.strip_prefix(b"SLURM_STEP_GPUS=") {
            step.get_or_insert(v);
        } else if entry.starts_with(b"SLURM_JOB_ID=") || entry.starts_with(b"SLURM_JOBID=") {
            task = true;
        }
    }
    let list = |var: &'static str, v: &[u8]| {
        let text = std::str::from_utf8(v).map_err(|_| SlurmError::BadGpuList {
            var,
            value: String::from_utf8_lossy(&v[..v.len().min(64)]).into_owned(),
        })?;
        parse_gpu_list(var, text)
    };
    Ok(match (job, step) {
        (Some(v), _) => EnvGpus::Job(list("SLURM_JOB_GPUS", v)?),
        (None, Some(v)) => EnvGpus::Step(list("SLURM_STEP_GPUS", v)?),
        (None, None) if task => EnvGpus::NoGpus,
        (None, None) => EnvGpus::NotATask,
    })
}

/// The pids of a `cgroup.procs` (one per line; anything else is skipped), at most `max`.
pub fn parse_procs(text: &str, max: usize) -> Vec<u32> {
    text.lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .filter(|pid| *pid > 0)
        .take(max)
        .collect()
}

/// A job's cgroup directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCgroup {
    /// The Slurm job id (digits).
    pub id: String,
    pub dir: PathBuf,
}

/// The names of the sub-directories of `dir`, sorted (at most [`MAX_DIR_ENTRIES`] read).
fn subdirs(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)?.take(MAX_DIR_ENTRIES) {
        let entry = entry?;
        if entry.file_type().is_ok_and(|t| t.is_dir())
            && let Ok(name) = entry.file_name().into_string()
        {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

fn list(dir: &Path) -> Result<Vec<String>, SlurmError> {
    subdirs(dir).map_err(|source| SlurmError::List {
        path: dir.to_path_buf(),
        source,
    })
}

/// Slurm's job cgroups under `root` (the cgroup filesystem's mount point), v2 and v1 layouts,
/// one per job id (on v1 the `freezer` controller's first, which proctrack/cgroup always
/// uses). An error when no Slurm hierarchy is there at all or one cannot be listed; an empty
/// list when Slurm runs no job.
pub fn find_jobs(root: &Path) -> Result<Vec<JobCgroup>, SlurmError> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    let mut hierarchy = false;
    // cgroup v2: system.slice/slurmstepd.scope (or <node>_slurmstepd.scope, multiple slurmd).
    let system = root.join("system.slice");
    for scope in subdirs(&system).unwrap_or_default() {
        if scope != "slurmstepd.scope" && !scope.ends_with("_slurmstepd.scope") {
            continue;
        }
        hierarchy = true;
        let dir = system.join(&scope);
        for job in list(&dir)? {
            found.push((format!("system.slice/{scope}/{job}"), dir.join(&job)));
        }
    }
    // cgroup v1: <controller>/slurm[_<node>]/uid_<uid>/job_<id>. Not looked for beside a v2
    // hierarchy, nor under v2's slices and scopes.
    let mut controllers = if hierarchy {
        Vec::new()
    } else {
        subdirs(root).unwrap_or_default()
    };
    controllers.retain(|c| !c.ends_with(".slice") && !c.ends_with(".scope"));
    controllers.sort_by_key(|c| (c != "freezer", c.clone()));
    for controller in controllers {
        let dir = root.join(&controller);
        for slurm in subdirs(&dir).unwrap_or_default() {
            if slurm != "slurm" && !slurm.starts_with("slurm_") {
                continue;
            }
            hierarchy = true;
            let dir = dir.join(&slurm);
            for uid in list(&dir)? {
                if !uid.starts_with("uid_") {
                    continue;
                }
                let dir = dir.join(&uid);
                for job in list(&dir)? {
                    found.push((format!("{controller}/{slurm}/{uid}/{job}"), dir.join(&job)));
                }
            }
        }
    }
    if !hierarchy {
        return Err(SlurmError::NoHierarchy {
            root: root.to_path_buf(),
        });
    }
    let mut seen = HashSet::new();
    let mut jobs = Vec::new();
    for (path, dir) in found {
        // Only `job_<digits>` directories under a Slurm segment: the rule of process attribution.
        if path
            .rsplit('/')
            .next()
            .is_some_and(|l| l.starts_with("job_"))
            && let Some(id) = slurm_job_id(&path)
            && seen.insert(id.clone())
        {
            jobs.push(JobCgroup { id, dir });
        }
    }
    Ok(jobs)
}

/// Which step a process was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// `step_batch` or `step_interactive`: their environment has `SLURM_JOB_GPUS` whenever the
    /// job holds a GPU.
    WholeJob,
    /// Any other step (`step_0`, …).
    Step,
}

/// A few processes of a job's steps, whole-job steps first (see the module doc), each with the
/// kind of its step; at most 16.
pub fn job_pids(job_dir: &Path) -> Vec<(StepKind, u32)> {
    let mut steps: Vec<String> = subdirs(job_dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.starts_with("step_") && s != "step_extern")
        .collect();
    let whole = |s: &str| s == "step_batch" || s == "step_interactive";
    steps.sort_by_key(|s| (!whole(s), s.clone()));
    let mut out = Vec::new();
    for step in steps {
        let kind = if whole(&step) {
            StepKind::WholeJob
        } else {
            StepKind::Step
        };
        let mut pids = Vec::new();
        collect_pids(&job_dir.join(&step), MAX_STEP_DEPTH, &mut pids);
        out.extend(pids.into_iter().map(|p| (kind, p)));
        if out.len() >= MAX_PIDS_PER_JOB {
            out.truncate(MAX_PIDS_PER_JOB);
            break;
        }
    }
    out
}

/// The pids of `dir`'s `cgroup.procs` and of its sub-directories' (depth first, by name, not
/// slurmstepd's own `slurm` cgroup), at most [`MAX_PIDS_PER_JOB`].
fn collect_pids(dir: &Path, depth: usize, out: &mut Vec<u32>) {
    if out.len() >= MAX_PIDS_PER_JOB {
        return;
    }
    if let Ok((bytes, _)) = read_bounded(&dir.join("cgroup.procs"), MAX_PROCS_BYTES) {
        out.extend(parse_procs(
            &String::from_utf8_lossy(&bytes),
            MAX_PIDS_PER_FILE,
        ));
    }
    if depth == 0 {
        return;
    }
    for sub in subdirs(dir).unwrap_or_default() {
        if sub != "slurm" {
            collect_pids(&dir.join(sub), depth - 1, out);
        }
    }
}

/// At most `limit` bytes of a file, and whether there was more.
fn read_bounded(path: &Path, limit: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    File::open(path)?.take(limit + 1).read_to_end(&mut bytes)?;
    let more = bytes.len() as u64 > limit;
    bytes.truncate(limit as usize);
    Ok((bytes, more))
}

/// Slurm's GPU numbers by job mapped onto the inventory's GPUs (by minor number, else NVML
/// index): every GPU a job
/// holds has a [`Holder`] with its `slurm_job_id`; `known` (a GPU not listed is free). Fails on
/// a GPU in MIG mode and on an index the inventory lacks.
pub fn allocation(
    jobs: &BTreeMap<String, Vec<u32>>,
    inventory: &Inventory,
) -> Result<Allocation, SlurmError> {
    if let Some(g) = inventory
        .gpus
        .iter()
        .find(|g| g.mig_mode.is_some_and(|m| m.current))
    {
        return Err(SlurmError::MigMode { index: g.index });
    }
    // Slurm's number is the device file's minor number; NVML's index stands in for a GPU whose
    // minor number the inventory lacks.
    let uuids: HashMap<u32, &str> = inventory
        .gpus
        .iter()
        .map(|g| (g.minor_number.unwrap_or(g.index), g.uuid.as_str()))
        .collect();
    let mut devices: HashMap<String, Vec<Holder>> = HashMap::new();
    for (job, indices) in jobs {
        for index in indices {
            let uuid = uuids.get(index).ok_or_else(|| SlurmError::UnknownIndex {
                job: job.clone(),
                index: *index,
                gpus: inventory.gpus.len(),
            })?;
            devices.entry(uuid.to_string()).or_default().push(Holder {
                namespace: None,
                pod: None,
                slurm_job_id: Some(job.clone()),
            });
        }
    }
    for holders in devices.values_mut() {
        holders.sort();
        holders.dedup();
    }
    Ok(Allocation {
        known: true,
        devices,
    })
}

/// Reads Slurm's allocations under a cgroup root and a procfs root (`--slurm.cgroup-root`,
/// `--path.procfs`), keeping each job's GPUs from `SLURM_JOB_GPUS` while its cgroup exists.
/// Used from one thread (the sampler's).
#[derive(Debug)]
pub struct SlurmScanner {
    cgroup_root: PathBuf,
    proc_root: PathBuf,
    /// Jobs whose GPUs are settled (`SLURM_JOB_GPUS`, or a whole-job step without GPUs).
    settled: HashMap<String, Vec<u32>>,
    failures: u64,
    /// Whether the last scan succeeded (`None` before the first): a change is logged.
    up: Option<bool>,
}

/// One job's GPUs as one scan read them.
enum JobGpus {
    /// Final for the job's life.
    Settled(Vec<u32>),
    /// The union of its steps' (read again next scan).
    Steps(Vec<u32>),
}

impl SlurmScanner {
    pub fn new(cgroup_root: impl Into<PathBuf>, proc_root: impl Into<PathBuf>) -> SlurmScanner {
        SlurmScanner {
            cgroup_root: cgroup_root.into(),
            proc_root: proc_root.into(),
            settled: HashMap::new(),
            failures: 0,
            up: None,
        }
    }

    /// Every job's GPU indices (job id → indices), or why they cannot all be read.
    pub fn scan(&mut self) -> Result<BTreeMap<String, Vec<u32>>, SlurmError> {
        let jobs = find_jobs(&self.cgroup_root)?;
        if jobs.len() > MAX_JOBS {
            return Err(SlurmError::TooManyJobs {
                root: self.cgroup_root.clone(),
            });
        }
        let live: HashSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        self.settled.retain(|id, _| live.contains(id.as_str()));
        let mut budget = MAX_ENVIRON_READS;
        let mut out = BTreeMap::new();
        for job in &jobs {
            let gpus = match self.settled.get(&job.id) {
                Some(gpus) => gpus.clone(),
                None => match self.read_job(job, &mut budget)? {
                    JobGpus::Settled(gpus) => {
                        self.settled.insert(job.id.clone(), gpus.clone());
                        gpus
                    }
                    JobGpus::Steps(gpus) => gpus,
                },
            };
            out.insert(job.id.clone(), gpus);
        }
        Ok(out)
    }

    fn read_job(&self, job: &JobCgroup, budget: &mut usize) -> Result<JobGpus, SlurmError> {
        let unreadable = |reason: String| SlurmError::JobUnreadable {
            job: job.id.clone(),
            reason,
        };
        let mut steps: Option<BTreeSet<u32>> = None;
        let mut problem = None;
        for (kind, pid) in job_pids(&job.dir) {
            if *budget == 0 {
                return Err(unreadable(format!(
                    "this scan read {MAX_ENVIRON_READS} environments already"
                )));
            }
            *budget -= 1;
            let path = self.proc_root.join(pid.to_string()).join("environ");
            let (bytes, more) = match read_bounded(&path, MAX_ENVIRON_BYTES) {
                Ok(read) => read,
                // The process ended since its cgroup was read: try the next.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    problem = Some(format!("{}: {e}", path.display()));
                    continue;
                }
            };
            // A cut environment: only its complete entries count, and only SLURM_JOB_GPUS in
            // them settles anything (what is missing may be in the rest).
            let complete = match (more, bytes.iter().rposition(|b| *b == 0)) {
                (false, _) => &bytes[..],
                (true, Some(end)) => &bytes[..end],
                (true, None) => &[][..],
            };
            match parse_environ(complete).map_err(|e| unreadable(e.to_string()))? {
                EnvGpus::Job(gpus) => return Ok(JobGpus::Settled(gpus)),
                _ if more => {
                    problem = Some(format!(
                        "{} is larger than {MAX_ENVIRON_BYTES} bytes",
                        path.display()
                    ));
                }
                EnvGpus::NotATask => {}
                EnvGpus::NoGpus if kind == StepKind::WholeJob => {
                    return Ok(JobGpus::Settled(Vec::new()));
                }
                EnvGpus::NoGpus => {
                    steps.get_or_insert_default();
                }
                EnvGpus::Step(gpus) => steps.get_or_insert_default().extend(gpus),
            }
        }
        match steps {
            Some(gpus) => Ok(JobGpus::Steps(gpus.into_iter().collect())),
            None => Err(unreadable(problem.unwrap_or_else(|| {
                "no process of its batch, interactive or numbered steps carries its environment"
                    .into()
            }))),
        }
    }

    /// The allocation of this scan for `inventory`: known when every job's GPUs were read and
    /// mapped, else unknown (counted in [`failures`](Self::failures); logged when the state
    /// changes). Never fails.
    pub fn allocation(&mut self, inventory: &Inventory) -> Allocation {
        let result = self
            .scan()
            .and_then(|jobs| Ok((jobs.len(), allocation(&jobs, inventory)?)));
        match result {
            Ok((jobs, allocation)) => {
                if self.up != Some(true) {
                    log::info!(
                        "Slurm allocations read from {} ({jobs} job(s), {} GPU(s) held): history records the job holding each GPU",
                        self.cgroup_root.display(),
                        allocation.devices.len()
                    );
                }
                self.up = Some(true);
                allocation
            }
            Err(e) => {
                self.failures += 1;
                if self.up != Some(false) {
                    log::warn!(
                        "Slurm allocations unknown ({e}): history records holders as unknown; retrying every sample (logged again when it reads them)"
                    );
                }
                self.up = Some(false);
                Allocation::unknown()
            }
        }
    }

    /// Scans that ended unknown since this scanner was created.
    pub fn failures(&self) -> u64 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::model::{GpuInfo, MigMode};

    fn list(value: &str) -> Result<Vec<u32>, SlurmError> {
        parse_gpu_list("SLURM_JOB_GPUS", value)
    }

    #[test]
    fn gpu_lists_are_comma_separated_indices() {
        assert_eq!(list("0,1,2,3").unwrap(), [0, 1, 2, 3]);
        assert_eq!(list("3,1, 1 ,0").unwrap(), [0, 1, 3]);
        assert_eq!(list("7").unwrap(), [7]);
        assert_eq!(list("").unwrap(), Vec::<u32>::new());
        // Not what Slurm writes today, but unambiguous: ranges.
        assert_eq!(list("0-3,6").unwrap(), [0, 1, 2, 3, 6]);
        assert_eq!(list("1023").unwrap(), [1023]);
        for bad in [
            "a",
            "1,,2",
            "1,",
            "3-1",
            "1024",
            "-1",
            "0-",
            "N/A",
            "NoDevFiles",
            "1 2",
            "+1",
            "0-4294967296",
        ] {
            let e = list(bad).unwrap_err();
            assert!(matches!(e, SlurmError::BadGpuList { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("SLURM_JOB_GPUS="), "{e}");
        }
    }

    fn env(entries: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in entries {
            out.extend_from_slice(e.as_bytes());
            out.push(0);
        }
        out
    }

    #[test]
    fn the_environment_says_the_jobs_gpus_else_the_steps() {
        let parse = |e: &[&str]| parse_environ(&env(e)).unwrap();
        assert_eq!(
            parse(&[
                "PATH=/usr/bin",
                "SLURM_JOB_ID=4242",
                "SLURM_JOB_GPUS=0,1,2,3",
                "SLURM_STEP_GPUS=1",
                "CUDA_VISIBLE_DEVICES=0",
            ]),
            EnvGpus::Job(vec![0, 1, 2, 3])
        );
        assert_eq!(
            parse(&["SLURM_JOBID=7", "SLURM_STEP_GPUS=2,5"]),
            EnvGpus::Step(vec![2, 5])
        );
        // A task of a job without GPUs; CUDA_VISIBLE_DEVICES is never read.
        assert_eq!(
            parse(&["SLURM_JOB_ID=7", "CUDA_VISIBLE_DEVICES=0,1"]),
            EnvGpus::NoGpus
        );
        // slurmstepd, or a process without the job's environment.
        assert_eq!(parse(&["PATH=/usr/bin", "HOME=/root"]), EnvGpus::NotATask);
        assert_eq!(parse(&[]), EnvGpus::NotATask);
        // The first occurrence counts; an empty value holds none; names must match exactly.
        assert_eq!(
            parse(&["SLURM_JOB_GPUS=1", "SLURM_JOB_GPUS=2"]),
            EnvGpus::Job(vec![1])
        );
        assert_eq!(parse(&["SLURM_JOB_GPUS="]), EnvGpus::Job(vec![]));
        assert_eq!(
            parse(&["XSLURM_JOB_GPUS=1", "SLURM_JOB_GPUS_X=2"]),
            EnvGpus::NotATask
        );
        assert!(parse_environ(&env(&["SLURM_JOB_GPUS=gpu:a100:2"])).is_err());
        assert!(parse_environ(b"SLURM_JOB_GPUS=\xff\0").is_err());
    }

    #[test]
    fn cgroup_procs_lists_pids() {
        assert_eq!(parse_procs("12\n13\n\n14\n", 8), [12, 13, 14]);
        assert_eq!(parse_procs("12\n13\n14\n", 2), [12, 13]);
        assert_eq!(parse_procs("x\n0\n-1\n 5 \n", 8), [5]);
        assert!(parse_procs("", 8).is_empty());
    }

    /// A fake cgroup root and procfs root in one temporary folder.
    struct Roots {
        dir: tempfile::TempDir,
    }

    impl Roots {
        fn new() -> Roots {
            Roots {
                dir: tempfile::tempdir().unwrap(),
            }
        }
        fn cgroup(&self) -> PathBuf {
            self.dir.path().join("cgroup")
        }
        fn proc(&self) -> PathBuf {
            self.dir.path().join("proc")
        }
        /// `cgroup.procs` at `path` (relative to the cgroup root) listing `pids`.
        fn procs(&self, path: &str, pids: &[u32]) {
            let dir = self.cgroup().join(path);
            std::fs::create_dir_all(&dir).unwrap();
            let text: String = pids.iter().map(|p| format!("{p}\n")).collect();
            std::fs::write(dir.join("cgroup.procs"), text).unwrap();
        }
        fn environ(&self, pid: u32, entries: &[&str]) {
            self.environ_bytes(pid, &env(entries));
        }
        fn environ_bytes(&self, pid: u32, bytes: &[u8]) {
            let dir = self.proc().join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("environ"), bytes).unwrap();
        }
        fn scanner(&self) -> SlurmScanner {
            SlurmScanner::new(self.cgroup(), self.proc())
        }
    }

    const V2: &str = "system.slice/slurmstepd.scope";

    /// Job 4242 (batch, 4 GPUs, slurmstepd and an extern step beside), job 5151 (one srun step
    /// on GPU 4), job 6000 (batch, no GPU).
    fn v2_node() -> Roots {
        let r = Roots::new();
        r.procs(&format!("{V2}/system"), &[10]);
        r.procs(
            &format!("{V2}/job_4242/step_extern/user/task_special"),
            &[98],
        );
        r.procs(&format!("{V2}/job_4242/step_batch/slurm"), &[99]);
        r.procs(
            &format!("{V2}/job_4242/step_batch/user/task_0"),
            &[100, 101],
        );
        r.procs(&format!("{V2}/job_5151/step_0/slurm"), &[199]);
        r.procs(&format!("{V2}/job_5151/step_0/user/task_0"), &[200]);
        r.procs(&format!("{V2}/job_6000/step_batch/user/task_0"), &[300]);
        for pid in [10, 98, 99, 199] {
            r.environ(pid, &["PATH=/usr/sbin"]);
        }
        r.environ(
            100,
            &[
                "SLURM_JOB_ID=4242",
                "SLURM_JOB_GPUS=0,1,2,3",
                "HOME=/home/a",
            ],
        );
        r.environ(200, &["SLURM_JOB_ID=5151", "SLURM_STEP_GPUS=4"]);
        r.environ(300, &["SLURM_JOB_ID=6000"]);
        r
    }

    fn jobs(pairs: &[(&str, &[u32])]) -> BTreeMap<String, Vec<u32>> {
        pairs
            .iter()
            .map(|(j, g)| (j.to_string(), g.to_vec()))
            .collect()
    }

    #[test]
    fn a_cgroup_v2_node_gives_each_jobs_gpus() {
        let r = v2_node();
        let found = find_jobs(&r.cgroup()).unwrap();
        let ids: Vec<&str> = found.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["4242", "5151", "6000"]);
        // Whole-job steps first; neither the extern step nor slurmstepd's own cgroup.
        assert_eq!(
            job_pids(&found[0].dir),
            [(StepKind::WholeJob, 100), (StepKind::WholeJob, 101)]
        );
        assert_eq!(job_pids(&found[1].dir), [(StepKind::Step, 200)]);
        let mut s = r.scanner();
        let want = jobs(&[("4242", &[0, 1, 2, 3]), ("5151", &[4]), ("6000", &[])]);
        assert_eq!(s.scan().unwrap(), want);

        // Settled jobs are not read again; a step-only job is, every scan.
        std::fs::remove_file(r.proc().join("100/environ")).unwrap();
        std::fs::remove_file(r.proc().join("300/environ")).unwrap();
        assert_eq!(s.scan().unwrap(), want);
        std::fs::remove_file(r.proc().join("200/environ")).unwrap();
        let e = s.scan().unwrap_err();
        assert!(
            matches!(&e, SlurmError::JobUnreadable { job, .. } if job == "5151"),
            "{e}"
        );
        // A job whose cgroup went is forgotten: its id back is read again.
        std::fs::remove_dir_all(r.cgroup().join(V2).join("job_5151")).unwrap();
        std::fs::remove_dir_all(r.cgroup().join(V2).join("job_4242")).unwrap();
        assert_eq!(s.scan().unwrap(), jobs(&[("6000", &[])]));
        r.procs(&format!("{V2}/job_4242/step_batch/user/task_0"), &[100]);
        assert!(
            s.scan().is_err(),
            "4242 read again, and its environ is gone"
        );
    }

    #[test]
    fn a_cgroup_v1_node_and_multiple_slurmd_names() {
        let r = Roots::new();
        // The same job in two controllers: one job, the freezer's cgroup.
        r.procs("memory/slurm/uid_1000/job_77/step_batch/task_0", &[700]);
        r.procs("freezer/slurm/uid_1000/job_77/step_batch/task_0", &[701]);
        r.procs("freezer/slurm/uid_1000/job_77/step_batch", &[]);
        r.procs("cpuset/slurm_node01/uid_2000/job_88/step_0/task_0", &[800]);
        r.procs("cpuset/slurm_node01/uid_2000/not_a_job", &[1]);
        r.procs("cpuset/other/uid_2000/job_99/step_0/task_0", &[900]);
        r.environ(701, &["SLURM_JOB_ID=77", "SLURM_JOB_GPUS=1"]);
        r.environ(800, &["SLURM_JOB_ID=88", "SLURM_STEP_GPUS=0,2"]);
        r.environ(900, &["SLURM_JOB_ID=99", "SLURM_JOB_GPUS=3"]);
        let found = find_jobs(&r.cgroup()).unwrap();
        let ids: Vec<(&str, bool)> = found
            .iter()
            .map(|j| (j.id.as_str(), j.dir.starts_with(r.cgroup().join("freezer"))))
            .collect();
        assert_eq!(ids, [("77", true), ("88", false)]);
        assert_eq!(
            r.scanner().scan().unwrap(),
            jobs(&[("77", &[1]), ("88", &[0, 2])])
        );
    }

    #[test]
    fn no_hierarchy_is_an_error_and_no_job_is_an_empty_answer() {
        let r = Roots::new();
        std::fs::create_dir_all(r.cgroup().join("system.slice/ssh.service")).unwrap();
        let e = r.scanner().scan().unwrap_err();
        assert!(matches!(e, SlurmError::NoHierarchy { .. }), "{e}");
        assert!(
            SlurmScanner::new(r.dir.path().join("absent"), r.proc())
                .scan()
                .is_err()
        );
        std::fs::create_dir_all(
            r.cgroup()
                .join("system.slice/node7_slurmstepd.scope/system"),
        )
        .unwrap();
        assert!(r.scanner().scan().unwrap().is_empty());
    }

    #[test]
    fn a_job_whose_gpus_cannot_be_read_leaves_the_scan_unknown() {
        // Only the extern step (salloc between two sruns): nothing says which GPUs it holds.
        let r = Roots::new();
        r.procs(&format!("{V2}/job_1/step_extern/user/task_special"), &[10]);
        r.environ(10, &["SLURM_JOB_ID=1", "SLURM_JOB_GPUS=0"]);
        let e = r.scanner().scan().unwrap_err();
        assert!(e.to_string().contains("Slurm job 1"), "{e}");

        // Processes without the job's environment (adopted, or slurmstepd).
        let r = Roots::new();
        r.procs(&format!("{V2}/job_2/step_0/user/task_0"), &[20, 21]);
        r.environ(20, &["PATH=/bin"]);
        assert!(r.scanner().scan().is_err());
        // ... until one task has it (21 had no environ file at all: gone).
        r.environ(21, &["SLURM_JOB_ID=2", "SLURM_STEP_GPUS=1"]);
        assert_eq!(r.scanner().scan().unwrap(), jobs(&[("2", &[1])]));

        // A bad value.
        let r = Roots::new();
        r.procs(&format!("{V2}/job_3/step_batch/user/task_0"), &[30]);
        r.environ(30, &["SLURM_JOB_ID=3", "SLURM_JOB_GPUS=x"]);
        let e = r.scanner().scan().unwrap_err();
        assert!(
            e.to_string().contains("job 3") && e.to_string().contains("\"x\""),
            "{e}"
        );
    }

    #[test]
    fn a_large_environment_is_read_in_part() {
        let r = Roots::new();
        r.procs(&format!("{V2}/job_1/step_batch/user/task_0"), &[10]);
        r.procs(&format!("{V2}/job_2/step_batch/user/task_0"), &[20]);
        let big = format!("BIG={}", "x".repeat(MAX_ENVIRON_BYTES as usize));
        // SLURM_JOB_GPUS before the cut: read.
        r.environ(10, &["SLURM_JOB_ID=1", "SLURM_JOB_GPUS=0,1", &big]);
        // After it: unknown, not "no GPU".
        r.environ(20, &["SLURM_JOB_ID=2", &big, "SLURM_JOB_GPUS=2"]);
        let e = r.scanner().scan().unwrap_err();
        assert!(
            e.to_string().contains("job 2") && e.to_string().contains("larger than"),
            "{e}"
        );
        std::fs::remove_dir_all(r.cgroup().join(V2).join("job_2")).unwrap();
        assert_eq!(r.scanner().scan().unwrap(), jobs(&[("1", &[0, 1])]));
    }

    fn inventory(gpus: u32) -> Inventory {
        Inventory {
            node: "n".into(),
            driver_version: None,
            cuda_version: None,
            gpus: (0..gpus)
                .map(|i| GpuInfo {
                    index: i,
                    minor_number: None,
                    uuid: format!("GPU-{i}"),
                    name: "NVIDIA H100 80GB HBM3".into(),
                    pci_bus_id: String::new(),
                    memory_total_bytes: None,
                    power_limit_watts: None,
                    mig_mode: Some(MigMode {
                        current: false,
                        pending: false,
                    }),
                    mig_instances: vec![],
                })
                .collect(),
        }
    }

    fn job(id: &str) -> Holder {
        Holder {
            namespace: None,
            pod: None,
            slurm_job_id: Some(id.into()),
        }
    }

    #[test]
    fn indices_map_onto_the_inventory_by_nvml_index() {
        let a = allocation(
            &jobs(&[("4242", &[0, 1]), ("5", &[1]), ("6", &[])]),
            &inventory(3),
        )
        .unwrap();
        assert!(a.known);
        assert_eq!(a.holders("GPU-0"), Some(&[job("4242")][..]));
        assert_eq!(a.holders("GPU-1"), Some(&[job("4242"), job("5")][..]));
        assert_eq!(a.holders("GPU-2"), Some(&[][..]));
        assert_eq!(a.devices.len(), 2);

        let e = allocation(&jobs(&[("9", &[3])]), &inventory(3)).unwrap_err();
        assert!(e.to_string().contains("GPU 3 of Slurm job 9"), "{e}");
        // Minor numbers, where NVML reports them, are what Slurm's numbers mean.
        let mut shuffled = inventory(2);
        shuffled.gpus[0].minor_number = Some(1);
        shuffled.gpus[1].minor_number = Some(0);
        let a = allocation(&jobs(&[("7", &[0])]), &shuffled).unwrap();
        assert_eq!(a.holders("GPU-1"), Some(&[job("7")][..]));
        assert_eq!(a.holders("GPU-0"), Some(&[][..]));
        let mut mig = inventory(2);
        mig.gpus[1].mig_mode = Some(MigMode {
            current: true,
            pending: true,
        });
        let e = allocation(&jobs(&[]), &mig).unwrap_err();
        assert!(matches!(e, SlurmError::MigMode { index: 1 }), "{e}");
    }

    #[test]
    fn the_scanners_allocation_is_unknown_while_it_fails() {
        let r = v2_node();
        let mut s = r.scanner();
        let a = s.allocation(&inventory(5));
        assert!(a.known && a.holders("GPU-4") == Some(&[job("5151")][..]));
        assert_eq!(s.failures(), 0);
        // GPU 4 missing from the inventory: the numbering does not hold.
        assert_eq!(s.allocation(&inventory(4)), Allocation::unknown());
        assert_eq!(s.failures(), 1);
        std::fs::remove_dir_all(r.cgroup()).unwrap();
        assert_eq!(s.allocation(&inventory(5)), Allocation::unknown());
        assert_eq!(s.failures(), 2);
    }

    /// xorshift64*: deterministic pseudo-random input without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn random_environments_never_panic() {
        let tokens: [&[u8]; 12] = [
            b"SLURM_JOB_GPUS=",
            b"SLURM_STEP_GPUS=",
            b"SLURM_JOB_ID=",
            b"\0",
            b",",
            b"-",
            b"0",
            b"9",
            b"1023",
            b"99999999999",
            b" ",
            b"\xff",
        ];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let n = (rng.next() % 16) as usize;
            let bytes: Vec<u8> = (0..n)
                .flat_map(|_| {
                    tokens[(rng.next() % tokens.len() as u64) as usize]
                        .iter()
                        .copied()
                })
                .collect();
            if let Ok(EnvGpus::Job(g) | EnvGpus::Step(g)) = parse_environ(&bytes) {
                assert!(g.iter().all(|i| *i <= MAX_GPU_INDEX));
                assert!(g.windows(2).all(|w| w[0] < w[1]), "{g:?}");
            }
            let _ = parse_procs(&String::from_utf8_lossy(&bytes), 4);
        }
    }
}
