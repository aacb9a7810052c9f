//! GPUs held by Slurm jobs, end to end: the real exporter (`--backend sim`, node `slurm-1` of
//! `fixtures/scenarios/allocated.toml`, 5 GPUs) with `--collector.slurm` reading a fake cgroup
//! root (cgroup v2: `system.slice/slurmstepd.scope/job_4242/…`) and a fake procfs root whose
//! task of job 4242 has `SLURM_JOB_GPUS=0,1,2,3`, history read back with core's strict reader.
//!
//! - History (version 3) records job 4242 on GPUs 0-3 and GPU 4 free (holders 0).
//! - The cgroup tree gone: holders are unknown (null), never free, and that is logged.
//! - Without the flag, the same roots give null holders.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tessera_core::history::NodeHistory;

fn scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/scenarios/allocated.toml")
}

/// A fake cgroup root (`<dir>/cgroup`) and procfs root (`<dir>/proc`): job 4242's batch step
/// runs pid 4100 holding GPUs 0-3; slurmstepd (pid 4099) has no job environment.
fn roots(dir: &Path) {
    let job = dir.join("cgroup/system.slice/slurmstepd.scope/job_4242");
    for (cgroup, pid) in [("step_batch/slurm", 4099), ("step_batch/user/task_0", 4100)] {
        std::fs::create_dir_all(job.join(cgroup)).unwrap();
        std::fs::write(job.join(cgroup).join("cgroup.procs"), format!("{pid}\n")).unwrap();
    }
    for (pid, environ) in [
        (4099, &b"PATH=/usr/sbin:/usr/bin\0"[..]),
        (
            4100,
            b"HOME=/home/alice\0SLURM_JOB_ID=4242\0SLURM_JOB_GPUS=0,1,2,3\0CUDA_VISIBLE_DEVICES=0,1,2,3\0",
        ),
    ] {
        let p = dir.join("proc").join(pid.to_string());
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("environ"), environ).unwrap();
    }
}

/// A running exporter, its stderr kept; killed on drop.
struct Exporter {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exporter {
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// The exporter on `slurm-1`, sampling every 100 ms of wall time (1 s virtual: one history
/// interval per sample), reading the fake roots under `fake`, with `--collector.slurm` or not.
fn exporter(fake: &Path, history: &Path, slurm: bool) -> Exporter {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera-exporter"));
    cmd.args(["--backend", "sim", "--sim.scenario"])
        .arg(scenario())
        .args([
            "--sim.node",
            "slurm-1",
            "--sim.speed",
            "10",
            "--sample.interval",
            "100ms",
            "--history.interval",
            "1s",
            "--web.listen-address",
            "127.0.0.1:0",
            "--kubelet.pod-resources-socket",
            "",
            "--history.dir",
        ])
        .arg(history)
        .arg("--path.procfs")
        .arg(fake.join("proc"))
        .arg("--slurm.cgroup-root")
        .arg(fake.join("cgroup"));
    if slurm {
        cmd.arg("--collector.slurm");
    }
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tessera-exporter");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let log = Arc::new(Mutex::new(Vec::new()));
    loop {
        let line = lines
            .next()
            .expect("the exporter exited before listening")
            .unwrap();
        let listening = line.contains("listening on ");
        log.lock().unwrap().push(line);
        if listening {
            break;
        }
    }
    let keep = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            keep.lock().unwrap().push(line);
        }
    });
    Exporter { child, log }
}

/// The node's history once `ok` holds for it (30 s at most).
fn history_until(
    root: &Path,
    e: &Exporter,
    what: &str,
    ok: impl Fn(&NodeHistory) -> bool,
) -> NodeHistory {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The open segment may end in a line being written: the reader skips it.
        if let Ok(h) = tessera_core::history::reader::read_node_dir(&root.join("slurm-1"))
            && ok(&h)
        {
            return h;
        }
        assert!(
            Instant::now() < deadline,
            "never: {what}\n--- log:\n{}",
            e.log().join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (holders, Slurm job) of a GPU row; the pod columns must be null.
fn held(r: &tessera_core::history::GpuRow) -> (Option<u32>, Option<String>) {
    assert_eq!((&r.holder_namespace, &r.holder_pod), (&None, &None));
    (r.holders, r.holder_slurm_job_id.clone())
}

/// The timestamp of the first row of GPU 0 for which `pick` holds, after `after`.
fn first(h: &NodeHistory, after: i64, pick: impl Fn(Option<u32>) -> bool) -> Option<i64> {
    h.gpu
        .iter()
        .find(|r| r.ts > after && r.gpu == 0 && pick(r.holders))
        .map(|r| r.ts)
}

/// Rows of every GPU after `t`, at least five intervals of GPU 0.
fn five_after(h: &NodeHistory, t: i64) -> bool {
    h.gpu.iter().filter(|r| r.ts > t && r.gpu == 0).count() >= 5
}

#[test]
fn history_records_the_slurm_job_holding_each_gpu_and_null_once_it_cannot_be_read() {
    let fake = tempfile::tempdir().unwrap();
    let history = tempfile::tempdir().unwrap();
    roots(fake.path());
    let e = exporter(fake.path(), history.path(), true);
    let h = history_until(history.path(), &e, "5 intervals with holders", |h| {
        first(h, i64::MIN, |n| n.is_some()).is_some_and(|t0| five_after(h, t0))
    });
    let t0 = first(&h, i64::MIN, |n| n.is_some()).unwrap();
    let rows: Vec<_> = h.gpu.iter().filter(|r| r.ts > t0).collect();
    assert!(rows.len() >= 5 * 5, "{}", rows.len());
    for r in &rows {
        let want = match r.gpu {
            0..=3 => (Some(1), Some("4242".to_string())),
            _ => (Some(0), None),
        };
        assert_eq!(held(r), want, "GPU {} at {}", r.gpu, r.ts);
    }
    assert!(rows.iter().any(|r| r.gpu == 4));
    assert!(
        e.log()
            .iter()
            .any(|l| l.contains("Slurm allocations read from") && l.contains("1 job(s)")),
        "{:?}",
        e.log()
    );

    // The job cgroups cannot be read any more: unknown, never free.
    std::fs::remove_dir_all(fake.path().join("cgroup")).unwrap();
    let last_known = h.gpu.iter().map(|r| r.ts).max().unwrap();
    let h = history_until(history.path(), &e, "5 intervals without holders", |h| {
        first(h, last_known, |n| n.is_none()).is_some_and(|t1| five_after(h, t1))
    });
    let t1 = first(&h, last_known, |n| n.is_none()).unwrap();
    let after: Vec<_> = h.gpu.iter().filter(|r| r.ts >= t1).collect();
    assert!(after.len() >= 5 * 5);
    for r in after {
        assert_eq!(held(r), (None, None), "GPU {} at {}", r.gpu, r.ts);
    }
    let warned: Vec<String> = e
        .log()
        .into_iter()
        .filter(|l| l.contains("Slurm allocations unknown"))
        .collect();
    assert_eq!(warned.len(), 1, "logged once: {warned:?}");
    assert!(
        warned[0].contains("no Slurm job cgroups under"),
        "{warned:?}"
    );
}

#[test]
fn without_the_flag_holders_are_null() {
    let fake = tempfile::tempdir().unwrap();
    let history = tempfile::tempdir().unwrap();
    roots(fake.path());
    let e = exporter(fake.path(), history.path(), false);
    let h = history_until(history.path(), &e, "5 intervals", |h| {
        five_after(h, i64::MIN)
    });
    assert!(h.gpu.len() >= 5 * 5);
    for r in &h.gpu {
        assert_eq!(held(r), (None, None), "GPU {} at {}", r.gpu, r.ts);
    }
    assert!(
        !e.log().iter().any(|l| l.contains("Slurm")),
        "{:?}",
        e.log()
    );
}
