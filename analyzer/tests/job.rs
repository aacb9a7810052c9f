//! `tessera job ID`: a Slurm job's GPUs, activity, memory peak, idle-loaded spans and verdict,
//! on simulated history whose processes carry `slurm_job_id` (a busy training job, a job that
//! holds memory and does nothing, a job on a MIG instance), and the errors of an unknown job.

use std::path::Path;

use serde_json::Value;

use crate::support::cli::tessera;
use crate::support::slurm_jobs::history;

fn job(h: &Path, id: &str) -> Value {
    let src = format!("history:{}", h.display());
    let out = tessera(&["job", id, "--source", &src, "--format", "json"]);
    assert!(
        out.status.success(),
        "tessera job {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("job JSON")
}

#[test]
fn a_busy_job_an_idle_job_and_a_mig_job_get_their_verdicts() {
    let tmp = tempfile::tempdir().unwrap();
    let h = history(tmp.path());

    let busy = job(&h, "500");
    assert_eq!(busy["version"], 1);
    assert_eq!(busy["job"], "500");
    assert_eq!(busy["devices"].as_array().unwrap().len(), 1, "{busy:#}");
    assert_eq!(busy["devices"][0]["gpu"], 0);
    assert!(
        (busy["duration_hours"].as_f64().unwrap() - 20.0).abs() < 0.5,
        "{busy:#}"
    );
    assert!(busy["activity_mean"].as_f64().unwrap() >= 0.5, "{busy:#}");
    assert!(busy["memory_peak_gib"].as_f64().unwrap() > 60.0, "{busy:#}");
    assert_eq!(busy["rating"], "good", "{busy:#}");
    assert_eq!(busy["idle_spans"].as_array().unwrap().len(), 0, "{busy:#}");
    assert_eq!(busy["idle_hours"].to_string(), "0.0", "not -0.0: {busy:#}");

    let idle = job(&h, "501");
    assert_eq!(idle["rating"], "idle", "{idle:#}");
    assert!(idle["activity_mean"].as_f64().unwrap() < 0.1, "{idle:#}");
    assert!(
        !idle["idle_spans"].as_array().unwrap().is_empty(),
        "{idle:#}"
    );
    assert!(idle["idle_hours"].as_f64().unwrap() > 12.0, "{idle:#}");
    let verdict = idle["verdict"].to_string();
    assert!(verdict.contains("mostly idle"), "{verdict}");
    assert!(
        verdict.contains("held GPU memory while doing nothing"),
        "{verdict}"
    );
    assert!(
        verdict.contains("MIG instance"),
        "12 GiB of 80 GiB: {verdict}"
    );

    let mig = job(&h, "502");
    assert_eq!(mig["devices"][0]["gpu_instance"], 1, "{mig:#}");
    assert!(
        mig["devices"][0]["memory_total_gib"].as_f64().unwrap() < 45.0,
        "{mig:#}"
    );
    assert_ne!(mig["rating"], "good", "{mig:#}");
}

#[test]
fn the_table_is_one_screen_and_an_unknown_job_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let h = history(tmp.path());
    let src = format!("history:{}", h.display());
    let out = tessera(&["job", "501", "--source", &src]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("Slurm job 501\n"), "{text}");
    assert!(text.contains("Verdict: idle"), "{text}");
    assert!(text.lines().count() < 25, "{text}");

    let out = tessera(&["job", "999", "--source", &src]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no rows of Slurm job 999"), "{err}");
}

#[test]
fn the_slurm_epilog_stores_the_summary_and_never_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let h = history(tmp.path());
    let jobs = tmp.path().join("jobs");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/slurm/epilog.sh");
    let epilog = |id: &str| {
        std::process::Command::new("sh")
            .arg(&script)
            .env("SLURM_JOB_ID", id)
            .env("TESSERA", env!("CARGO_BIN_EXE_tessera"))
            .env("TESSERA_SOURCE", format!("history:{}", h.display()))
            .env("TESSERA_JOB_DIR", &jobs)
            .env("TESSERA_JOB_SINCE", "3650d")
            .output()
            .expect("run the epilog")
    };
    let out = epilog("501");
    assert!(out.status.success());
    let stored: Value =
        serde_json::from_slice(&std::fs::read(jobs.join("501.json")).expect("stored")).unwrap();
    assert_eq!(stored["job"], "501");
    assert_eq!(stored["rating"], "idle");
    // An unknown job and a hostile id: exit 0 (a failing epilog drains the node), nothing
    // stored, no temporary file left, the reason on stderr.
    for id in ["999", "1; rm -rf /", ""] {
        let out = epilog(id);
        assert!(out.status.success(), "{id:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty(), "{id:?}");
    }
    let mut names: Vec<String> = std::fs::read_dir(&jobs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["501.json"]);
}

/// Issue 27: with the source on a FIFO nobody writes, `tessera job` blocked forever inside the
/// epilog and left `.JOB.json.tmp` behind. The epilog bounds it (TESSERA_JOB_TIMEOUT), exits 0,
/// says why, and leaves no file.
#[test]
fn the_epilog_bounds_a_source_that_never_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("source.csv");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let jobs = tmp.path().join("jobs");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/slurm/epilog.sh");
    let out = std::process::Command::new("sh")
        .arg(&script)
        .env("SLURM_JOB_ID", "777")
        .env("TESSERA", env!("CARGO_BIN_EXE_tessera"))
        .env("TESSERA_SOURCE", format!("csv:{}", fifo.display()))
        .env("TESSERA_JOB_DIR", &jobs)
        .env("TESSERA_JOB_TIMEOUT", "2")
        .output()
        .expect("run the epilog");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tessera job did not finish in 2s (TESSERA_JOB_TIMEOUT)"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&jobs).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn report_by_job_lists_the_worst_jobs_first() {
    let tmp = tempfile::tempdir().unwrap();
    let h = history(tmp.path());
    let src = format!("history:{}", h.display());
    let out = tessera(&[
        "report", "--by", "job", "--source", &src, "--format", "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["by"], "job");
    assert_eq!(v["jobs_seen"], 3, "{v:#}");
    let order: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job"].as_str().unwrap())
        .collect();
    // The idle job wastes all its GPU-hours, the MIG job most of its own, the training job none.
    assert_eq!(order, ["501", "502", "500"], "{v:#}");
    let unused: Vec<f64> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["unused_gpu_hours"].as_f64().unwrap())
        .collect();
    assert!(unused.windows(2).all(|w| w[0] >= w[1]), "{unused:?}");

    let out = tessera(&["report", "--by", "job", "--source", &src, "--top", "1"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("3 job(s)"), "{text}");
    assert!(
        text.contains("\n501 ") && !text.contains("\n500 "),
        "{text}"
    );

    let out = tessera(&[
        "report", "--by", "job", "--source", &src, "--format", "html",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not HTML"));
}

#[test]
fn a_job_without_an_activity_signal_is_unknown_and_never_ranked_worst() {
    // One node: job 600 trains on GPU 0 (busy), job 601 runs on GPU 1 whose driver gives no
    // utilisation, GPM or per-process utilisation (no activity signal at all).
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("s.toml");
    std::fs::write(
        &scenario,
        r#"
name = "no-signal"
seed = 3
start = "2026-11-02T00:00:00Z"
utc_offset_hours = 0

[[nodes]]
name = "hpc-2"
gpus = [{ model = "H100-80GB", count = 2 }]

[[workloads]]
name = "train"
kind = "training"
node = "hpc-2"
gpu = 0
memory_gib = 40.0
peak = 0.9
start_hour = 0.0
duration_hours = 6.0
process = "torchrun"
slurm_job = "600"

[[workloads]]
name = "blind"
kind = "training"
node = "hpc-2"
gpu = 1
memory_gib = 40.0
peak = 0.2
start_hour = 0.0
duration_hours = 6.0
process = "torchrun"
slurm_job = "601"

[[faults]]
kind = "not_supported"
node = "hpc-2"
gpu = 1
field = "utilization"

[[faults]]
kind = "not_supported"
node = "hpc-2"
gpu = 1
field = "gpm"

[[faults]]
kind = "not_supported"
node = "hpc-2"
gpu = 1
field = "process_utilization"
"#,
    )
    .unwrap();
    let h = tmp.path().join("h");
    let out = tessera(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--days",
        "1",
        "--sample-interval",
        "30s",
        "--history.interval",
        "5m",
        "--out",
        h.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let blind = job(&h, "601");
    assert_eq!(blind["rating"], "unknown", "{blind:#}");
    assert!(blind["activity_mean"].is_null(), "{blind:#}");
    assert!(
        blind["unused_gpu_hours"].is_null(),
        "unknown, not all unused: {blind:#}"
    );
    let verdict = blind["verdict"].to_string();
    assert!(
        verdict.contains("Unknown: no activity was measured"),
        "{verdict}"
    );
    assert_eq!(job(&h, "600")["rating"], "good");
    // report --by job: the judged job first, the unknown one after it.
    let src = format!("history:{}", h.display());
    let out = tessera(&[
        "report", "--by", "job", "--source", &src, "--format", "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let order: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["600", "601"], "{v:#}");
    let out = tessera(&["report", "--by", "job", "--source", &src]);
    let text = String::from_utf8(out.stdout).unwrap();
    let row = text
        .lines()
        .find(|l| l.starts_with("601 "))
        .expect("a row of 601");
    assert!(row.contains("unknown"), "{row}");
}

#[test]
fn the_epilogs_look_back_reaching_past_the_data_is_not_warned() {
    // The Slurm epilog asks `tessera job ID --since 30d`: a search window, not a period to count.
    let tmp = tempfile::tempdir().unwrap();
    let h = history(tmp.path());
    let src = format!("history:{}", h.display());
    let out = tessera(&[
        "job",
        "500",
        "--source",
        &src,
        "--since",
        "2026-10-01T00:00:00Z",
        "--format",
        "json",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("reaches past the data"), "{err}");
    // A report over the same window does say it.
    let out = tessera(&[
        "report",
        "--source",
        &src,
        "--since",
        "2026-10-01T00:00:00Z",
        "--format",
        "json",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("reaches past the data"));
}
