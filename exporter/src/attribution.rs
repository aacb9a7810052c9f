//! Process attribution: which Kubernetes pod, container or Slurm job a GPU process belongs to,
//! read from `/proc/<pid>/cgroup`.
//!
//! NVML reports the host PIDs of the processes using a GPU. This module maps such a PID onto
//! three low-cardinality labels — [`Attribution::pod_uid`], [`Attribution::container_id`] and
//! [`Attribution::slurm_job_id`] — by recognising the cgroup paths that container runtimes, the
//! kubelet and Slurm create:
//!
//! - cgroup v2 (`0::/path`) and v1 (`N:controllers:/path`, including hybrid mode), the kubelet's
//!   systemd driver (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`,
//!   with the `-` of the UID written as `_`) and cgroupfs driver (`/kubepods/burstable/pod<uid>`),
//!   all QoS classes (guaranteed pods have no QoS segment), nested kubelets (kind:
//!   `kubelet.slice/kubelet-kubepods.slice/...`);
//! - containerd (`cri-containerd-<id>.scope`), CRI-O (`crio-<id>.scope`, also with CRI-O's nested
//!   `/container` cgroup; `crio-conmon-<id>.scope` is the monitor, not the container), Docker
//!   (`docker-<id>.scope`, `/docker/<id>`), Podman (`libpod-<id>.scope`) and, with the cgroupfs
//!   driver, a bare 64-hex container id segment;
//! - Slurm (`/system.slice/slurmstepd.scope/job_<n>/step_<s>/...` on v2,
//!   `/slurm/uid_<u>/job_<n>/...` and `/slurm_<node>/uid_<u>/job_<n>/...` on v1);
//! - paths relative to the reader's cgroup namespace (`0::/../../kubepods-...`), which is what a
//!   containerised exporter with a private cgroup namespace sees in the host's `/proc`.
//!
//! Anything else yields an empty [`Attribution`] (all `None`); [`parse_cgroup`] is pure and never
//! panics, whatever the input.
//!
//! [`ProcAttributor`] reads the files under a configurable procfs root (node_exporter's
//! `--path.procfs` convention: `/proc`, or `/host/proc` in a container), caches the result per PID
//! and guards against PID reuse by also keying on the process start time (field 22 of
//! `/proc/<pid>/stat`). Reads that fail (process gone, no permission, a PID from another PID
//! namespace) give an empty attribution and are counted in [`ProcAttributor::failures`]; they are
//! never errors and are not cached, so a later read can succeed.
//!
//! What it does not do: resolve pod names or namespaces (the kubelet's pod-resources API does,
//! per device: [`crate::kubelet`]; or join with kube-state-metrics' `kube_pod_info` on the UID,
//! see `docs/attribution.md`), talk to the container runtime, or translate PIDs between PID
//! namespaces — the exporter must see host PIDs (`hostPID: true`, `--pid=host`).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tessera_core::model::Attribution;

/// Attribute a process from the text of its `/proc/<pid>/cgroup`.
///
/// Every line is examined; the cgroup v2 line (`0::`) is preferred, then the v1 lines in file
/// order, field by field (the first line that knows a field gives it). Garbage gives an empty
/// attribution.
pub fn parse_cgroup(contents: &str) -> Attribution {
    let mut unified = Vec::new();
    let mut legacy = Vec::new();
    for line in contents.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(_controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" {
            unified.push(path);
        } else {
            legacy.push(path);
        }
    }
    let mut out = Attribution::default();
    for path in unified.into_iter().chain(legacy) {
        let found = parse_path(path);
        if out.pod_uid.is_none() {
            out.pod_uid = found.pod_uid;
        }
        if out.container_id.is_none() {
            out.container_id = found.container_id;
        }
        if out.slurm_job_id.is_none() {
            out.slurm_job_id = found.slurm_job_id;
        }
    }
    out
}

/// The Slurm job of one cgroup path (`…/slurmstepd.scope/job_<n>/…` on v2,
/// `/slurm[_<node>]/uid_<u>/job_<n>/…` on v1), by the same rules as [`parse_cgroup`]; the Slurm
/// allocation scan ([`crate::slurm`]) names the job cgroups it finds with it.
pub fn slurm_job_id(path: &str) -> Option<String> {
    parse_path(path).slurm_job_id
}

/// Attribute one cgroup path (the third field of a line of `/proc/<pid>/cgroup`).
fn parse_path(path: &str) -> Attribution {
    let mut out = Attribution::default();
    let mut kubernetes = false;
    let mut slurm = false;
    for segment in path.split('/') {
        // `..`: a path relative to another cgroup namespace, whose kubepods parent may be hidden.
        if segment.contains("kubepods") || segment == ".." {
            kubernetes = true;
        }
        if segment.contains("slurm") {
            slurm = true;
        }
        if kubernetes && let Some(uid) = pod_uid_of(segment) {
            out.pod_uid = Some(uid);
            continue;
        }
        if let Some(id) = container_id_of(segment) {
            // The innermost container wins (Docker in Docker, nested runtimes).
            out.container_id = Some(id);
            continue;
        }
        if slurm
            && out.slurm_job_id.is_none()
            && let Some(job) = segment.strip_prefix("job_").filter(|j| is_digits(j))
        {
            out.slurm_job_id = Some(job.to_string());
        }
    }
    out
}

/// The pod UID of a pod cgroup segment: `pod<uid>` (cgroupfs driver) or
/// `kubepods[-<qos>]-pod<uid_with_underscores>.slice` (systemd driver).
fn pod_uid_of(segment: &str) -> Option<String> {
    let raw = if let Some(slice) = segment.strip_suffix(".slice") {
        // systemd escapes `-` as `_` inside one component of a slice name; `-` separates parents.
        let last = slice.rsplit('-').next()?;
        last.strip_prefix("pod")?
    } else {
        segment.strip_prefix("pod")?
    };
    let uid = raw.replace('_', "-").to_ascii_lowercase();
    // API-server pods have RFC 4122 UIDs (36 chars); static pods use a 32-hex hash.
    let valid = (32..=36).contains(&uid.len())
        && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        && uid.bytes().filter(|b| b.is_ascii_hexdigit()).count() == 32;
    valid.then_some(uid)
}

/// The container id of a segment: `<runtime>-<64hex>.scope` (systemd driver: `cri-containerd-`,
/// `crio-`, `docker-`, `libpod-`, ...) or a bare 64-hex segment (cgroupfs driver, `/docker/<id>`).
/// CRI-O's `crio-conmon-<id>.scope` is the container monitor and gives nothing.
fn container_id_of(segment: &str) -> Option<String> {
    let id = match segment.strip_suffix(".scope") {
        Some(scope) => {
            let (prefix, id) = scope.rsplit_once('-')?;
            if prefix.is_empty() || prefix.contains("conmon") {
                return None;
            }
            id
        }
        None => segment,
    };
    is_container_id(id).then(|| id.to_ascii_lowercase())
}

fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The process start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot).
///
/// The second field, the command name, is in parentheses and may itself contain spaces and
/// parentheses, so the fields are counted from the last `)`. `None` for anything malformed.
pub fn parse_stat_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts at field 3 (state); field 22 is the 20th field after the command name.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// The most this module reads of one procfs file; real ones are far smaller.
const MAX_READ: u64 = 64 * 1024;

fn read_small(path: &Path) -> Option<String> {
    let file = File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_READ).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Attributes PIDs by reading `<procfs root>/<pid>/cgroup`, with a cache keyed on PID and start time.
///
/// Called from one thread (the sampler); not `Sync` by design of its `&mut self` API.
#[derive(Debug)]
pub struct ProcAttributor {
    root: PathBuf,
    cache: HashMap<u32, (u64, Arc<Attribution>)>,
    failures: u64,
    empty: Arc<Attribution>,
}

impl Default for ProcAttributor {
    /// An attributor reading the real `/proc`.
    fn default() -> Self {
        ProcAttributor::new("/proc")
    }
}

impl ProcAttributor {
    /// An attributor reading the procfs mounted at `procfs_root` (`/proc`, or e.g. `/host/proc`
    /// when the host's procfs is mounted into a container).
    pub fn new(procfs_root: impl Into<PathBuf>) -> Self {
        ProcAttributor {
            root: procfs_root.into(),
            cache: HashMap::new(),
            failures: 0,
            empty: Arc::new(Attribution::default()),
        }
    }

    /// The procfs root this attributor reads.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Attribute one host PID. Never fails: a process that cannot be read gets an empty
    /// attribution (counted in [`failures`](Self::failures), not cached).
    ///
    /// A cached result is reused while the process's start time is unchanged, so each call costs
    /// one read of `/proc/<pid>/stat`; a new or reused PID also costs a read of its `cgroup`.
    pub fn attribute(&mut self, pid: u32) -> Arc<Attribution> {
        let dir = self.root.join(pid.to_string());
        let Some(start) = read_small(&dir.join("stat")).and_then(|s| parse_stat_start_time(&s))
        else {
            self.cache.remove(&pid);
            return self.fail();
        };
        if let Some((cached_start, attribution)) = self.cache.get(&pid)
            && *cached_start == start
        {
            return Arc::clone(attribution);
        }
        let Some(contents) = read_small(&dir.join("cgroup")) else {
            self.cache.remove(&pid);
            return self.fail();
        };
        // The PID may have been reused between the two reads: check that it is the same process.
        let again = read_small(&dir.join("stat")).and_then(|s| parse_stat_start_time(&s));
        if again != Some(start) {
            self.cache.remove(&pid);
            return self.fail();
        }
        let attribution = Arc::new(parse_cgroup(&contents));
        self.cache.insert(pid, (start, Arc::clone(&attribution)));
        attribution
    }

    /// Forget every cached PID that is not in `live` (call once per sample with the PIDs seen).
    pub fn retain(&mut self, live: &HashSet<u32>) {
        self.cache.retain(|pid, _| live.contains(pid));
    }

    /// How many attributions failed because `/proc/<pid>/stat` or `/proc/<pid>/cgroup` could not
    /// be read (or was malformed) since this attributor was created.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Number of cached PIDs.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    fn fail(&mut self) -> Arc<Attribution> {
        self.failures += 1;
        Arc::clone(&self.empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b5c4a5e-2b0e-4b8a-9d6a-8f0c2f1e3d4c";
    const UID_: &str = "0b5c4a5e_2b0e_4b8a_9d6a_8f0c2f1e3d4c";
    const CID: &str = "3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f";

    fn attr(pod: Option<&str>, container: Option<&str>, job: Option<&str>) -> Attribution {
        Attribution {
            pod_uid: pod.map(str::to_string),
            container_id: container.map(str::to_string),
            slurm_job_id: job.map(str::to_string),
            ..Attribution::default()
        }
    }

    fn check(contents: &str, pod: Option<&str>, container: Option<&str>, job: Option<&str>) {
        assert_eq!(
            parse_cgroup(contents),
            attr(pod, container, job),
            "{contents}"
        );
    }

    #[test]
    fn kubernetes_v2_systemd_every_qos_class_and_runtime() {
        for qos in ["burstable", "besteffort"] {
            for runtime in ["cri-containerd", "crio", "docker"] {
                let line = format!(
                    "0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{UID_}.slice/{runtime}-{CID}.scope\n"
                );
                check(&line, Some(UID), Some(CID), None);
            }
        }
        // Guaranteed pods have no QoS slice.
        check(
            &format!("0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"),
            Some(UID),
            Some(CID),
            None,
        );
    }

    #[test]
    fn kubernetes_cgroupfs_driver() {
        check(
            &format!("0::/kubepods/burstable/pod{UID}/{CID}\n"),
            Some(UID),
            Some(CID),
            None,
        );
        check(
            &format!("11:memory:/kubepods/pod{UID}/{CID}\n"),
            Some(UID),
            Some(CID),
            None,
        );
        // The pause container's or the pod's own cgroup: pod only.
        check(
            &format!("0::/kubepods/besteffort/pod{UID}\n"),
            Some(UID),
            None,
            None,
        );
    }

    #[test]
    fn crio_nested_container_cgroup_and_conmon() {
        check(
            &format!(
                "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{CID}.scope/container\n"
            ),
            Some(UID),
            Some(CID),
            None,
        );
        check(
            &format!(
                "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-conmon-{CID}.scope\n"
            ),
            Some(UID),
            None,
            None,
        );
    }

    #[test]
    fn docker_and_podman_outside_kubernetes() {
        check(
            &format!("0::/system.slice/docker-{CID}.scope\n"),
            None,
            Some(CID),
            None,
        );
        check(&format!("12:pids:/docker/{CID}\n"), None, Some(CID), None);
        check(
            &format!(
                "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope\n"
            ),
            None,
            Some(CID),
            None,
        );
        // Docker in Docker: the innermost container.
        let inner = "a".repeat(64);
        check(
            &format!("0::/docker/{CID}/docker/{inner}\n"),
            None,
            Some(&inner),
            None,
        );
    }

    #[test]
    fn slurm_v1_and_v2() {
        check(
            "0::/system.slice/slurmstepd.scope/job_12345/step_0/user/task_0\n",
            None,
            None,
            Some("12345"),
        );
        check(
            "0::/system.slice/node01_slurmstepd.scope/job_42/step_batch/user/task_0\n",
            None,
            None,
            Some("42"),
        );
        check(
            "10:memory:/slurm/uid_1000/job_12345/step_batch/task_0\n",
            None,
            None,
            Some("12345"),
        );
        check(
            "4:devices:/slurm_node01/uid_1000/job_777/step_0\n",
            None,
            None,
            Some("777"),
        );
        // `job_` outside a Slurm hierarchy is not a Slurm job.
        check("0::/system.slice/job_12345.service\n", None, None, None);
        check("0::/user.slice/job_12345/step_0\n", None, None, None);
    }

    #[test]
    fn relative_paths_from_another_cgroup_namespace() {
        check(
            &format!(
                "0::/../../../kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
            ),
            Some(UID),
            Some(CID),
            None,
        );
        // cgroupfs driver, exporter in the same QoS class as the target: no kubepods segment left.
        check(
            &format!("0::/../../pod{UID}/{CID}\n"),
            Some(UID),
            Some(CID),
            None,
        );
    }

    #[test]
    fn hybrid_prefers_unified_then_first_legacy_line() {
        let contents = format!(
            "12:memory:/kubepods/burstable/pod{UID}/{CID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n0::/\n"
        );
        check(&contents, Some(UID), Some(CID), None);
    }

    #[test]
    fn host_processes_and_garbage_are_empty() {
        for contents in [
            "",
            "\n\n",
            "0::/\n",
            "0::/init.scope\n",
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "0::/system.slice/nvidia-persistenced.service\n",
            "garbage",
            "0:/kubepods/podnot-a-uid\n",
            "0::/kubepods/burstable/podxyz/123\n",
            "0::/pod0b5c4a5e-2b0e-4b8a-9d6a-8f0c2f1e3d4c\n",
            "0::/system.slice/-.scope\n",
            "0::/kubepods.slice/kubepods-pod.slice/.scope\n",
        ] {
            assert!(parse_cgroup(contents).is_empty(), "{contents:?}");
        }
    }

    #[test]
    fn static_pod_uid_is_a_32_hex_hash() {
        let hash = "6f1e3c0bd3d5c1e1a7a9b0c2d4e6f801";
        check(
            &format!("0::/kubepods/burstable/pod{hash}/{CID}\n"),
            Some(hash),
            Some(CID),
            None,
        );
    }

    #[test]
    fn upper_case_is_normalised() {
        let upper = CID.to_ascii_uppercase();
        check(&format!("0::/docker/{upper}\n"), None, Some(CID), None);
    }

    #[test]
    fn stat_start_time_counts_from_the_last_parenthesis() {
        let fields = "S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 12345678 100";
        assert_eq!(
            parse_stat_start_time(&format!("1234 (python3) {fields}")),
            Some(987654)
        );
        assert_eq!(
            parse_stat_start_time(&format!("1234 (a b) (c)) {fields}")),
            Some(987654)
        );
        assert_eq!(
            parse_stat_start_time(&format!("1234 ()) {fields}")),
            Some(987654)
        );
        assert_eq!(parse_stat_start_time("1234 (x) S 1 2"), None);
        assert_eq!(parse_stat_start_time("no parenthesis 1 2 3"), None);
        assert_eq!(parse_stat_start_time(""), None);
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
    fn random_bytes_never_panic() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..5_000 {
            let len = (rng.next() % 300) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let text = String::from_utf8_lossy(&bytes);
            let _ = parse_cgroup(&text);
            let _ = parse_stat_start_time(&text);
        }
    }

    #[test]
    fn random_token_soup_never_panics() {
        let tokens = [
            "0",
            "1",
            ":",
            "::",
            "/",
            "\n",
            "-",
            "_",
            ".slice",
            ".scope",
            "kubepods",
            "pod",
            "job_",
            "slurm",
            "crio-",
            "conmon",
            "docker",
            UID,
            UID_,
            CID,
            "é",
            "\u{1F600}",
            "..",
            ")",
            "(",
            " ",
            "12345",
        ];
        let mut rng = Rng(42);
        for _ in 0..20_000 {
            let n = (rng.next() % 24) as usize;
            let text: String = (0..n)
                .map(|_| tokens[(rng.next() % tokens.len() as u64) as usize])
                .collect();
            let found = parse_cgroup(&text);
            if let Some(uid) = &found.pod_uid {
                assert!(uid.len() >= 32 && uid.len() <= 36, "{text:?} -> {uid}");
            }
            if let Some(id) = &found.container_id {
                assert_eq!(id.len(), 64, "{text:?}");
            }
            let _ = parse_stat_start_time(&text);
        }
    }
}
