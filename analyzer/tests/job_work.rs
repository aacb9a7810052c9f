//! Work per GPU-hour in `tessera job` (issue 60; docs/jobs.md "Work", docs/work.md "Slurm
//! jobs") through a real Prometheus (Debian's; fails, never skips, without it): one simulated
//! day of `fixtures/scenarios/allocated.toml` written as tessera-exporter's series, its Slurm
//! jobs' processes labelled `slurm_job_id` as the exporter labels them, beside counters a job
//! pushes with the label `slurm_job_id` (a Pushgateway grouping key): job 4242 (training on one
//! whole H100) counts `trainer_steps_total` (declared with `--work-metrics`) at 2 steps a second
//! with a counter reset at noon, and vLLM's generated tokens at 30 a second; job 9999, which
//! holds no GPU here, counts steps at 100 a second. The truth, from the planted rates: 7,200
//! steps and 108,000 tokens per GPU-hour for 4242 (one GPU), its steps the planted rate × its
//! span, computed here from the simulated rows; 9999's steps are not 4242's; job 5151, which
//! counts nothing, has "no work metric", never 0; a history source says the work is unknown.

use std::fmt::Write as _;

use serde_json::Value;

use crate::support::cli::tessera;
use crate::support::openmetrics::{self as om, DAY_MS, openmetrics_labelled, rfc3339};
use crate::support::prometheus as prom;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/scenarios/allocated.toml"
);

/// A counter sampled every minute of `(from, to)` (unix ms) and at `to`, counting `rate` a
/// second from `from`; at `reset` (a sample time) it has restarted from 0 just after the sample
/// before, so that the work done is still `rate` × the span. Returns the work done.
fn counter(
    s: &mut String,
    (name, labels): (&str, &str),
    (from, to): (i64, i64),
    rate: f64,
    reset: Option<i64>,
) -> f64 {
    let family = name.strip_suffix("_total").expect("a _total counter");
    writeln!(s, "# TYPE {family} counter").unwrap();
    let mut times: Vec<i64> = (0..)
        .map(|k| from + k * 60_000)
        .take_while(|t| *t < to)
        .collect();
    times.push(to);
    let (mut v, mut last, mut done) = (0.0, from, 0.0);
    for t in times {
        let d = rate * (t - last) as f64 / 1000.0;
        done += d;
        v = if reset == Some(t) { d } else { v + d };
        last = t;
        writeln!(s, "{name}{{{labels}}} {v} {:.3}", t as f64 / 1000.0).unwrap();
    }
    done
}

/// The span of job `id`'s process rows: the first row's start to the last row's end, unix ms.
fn span(process: &polars::prelude::DataFrame, id: &str) -> (i64, i64) {
    let (job, ts, iv) = (
        om::strs(process, "slurm_job_id"),
        om::f64s(process, "ts"),
        om::f64s(process, "interval_ms"),
    );
    let rows: Vec<(i64, i64)> = (0..process.height())
        .filter(|&i| job[i].as_deref() == Some(id))
        .filter_map(|i| Some((ts[i]? as i64 - iv[i]? as i64, ts[i]? as i64)))
        .collect();
    assert!(!rows.is_empty(), "job {id} has process rows");
    (
        rows.iter().map(|r| r.0).min().unwrap(),
        rows.iter().map(|r| r.1).max().unwrap(),
    )
}

#[test]
fn a_slurm_jobs_counter_gives_its_work_per_gpu_hour_and_unknown_stays_unknown() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let toml = std::fs::read_to_string(FIXTURE).unwrap();
    let (gpu, mig, process, since) = om::simulate(tmp.path(), &toml, "allocated");
    let (start, end) = span(&process, "4242");
    let mut text = openmetrics_labelled(&gpu, &mig, &process, &["slurm_job_id"]);
    text.truncate(text.len() - "# EOF\n".len());
    // The Pushgateway's series of the job's group (`honor_labels: true` keeps its labels).
    let noon = start + (end - start) / 2 / 60_000 * 60_000;
    let steps = counter(
        &mut text,
        (
            "trainer_steps_total",
            "job=\"trainer\",slurm_job_id=\"4242\",instance=\"\"",
        ),
        (start, end),
        2.0,
        Some(noon),
    );
    let tokens = counter(
        &mut text,
        (
            "vllm:generation_tokens_total",
            "job=\"trainer\",slurm_job_id=\"4242\",instance=\"\"",
        ),
        (start, end),
        30.0,
        None,
    );
    counter(
        &mut text,
        (
            "trainer_steps_total",
            "job=\"trainer\",slurm_job_id=\"9999\",instance=\"\"",
        ),
        (since, since + DAY_MS),
        100.0,
        None,
    );
    text.push_str("# EOF\n");
    let server = prom::serve(tmp.path(), &text);
    let declared = tmp.path().join("work.toml");
    std::fs::write(
        &declared,
        "[[work]]\nunit = \"steps\"\ncounter = 'trainer_steps_total{job=\"trainer\"}'\n",
    )
    .unwrap();
    let src = format!("prometheus:{}", server.url);
    let (from, to) = (rfc3339(since), rfc3339(since + DAY_MS));
    let run = |id: &str, src: &str, format: &str| {
        let out = tessera(&[
            "job",
            id,
            "--source",
            src,
            "--since",
            &from,
            "--until",
            &to,
            "--interval",
            "10s",
            "--work-metrics",
            declared.to_str().unwrap(),
            "--format",
            format,
        ]);
        assert!(
            out.status.success(),
            "tessera job {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let j: Value = serde_json::from_str(&run("4242", &src, "json")).unwrap();
    let work = j["work"].as_array().unwrap_or_else(|| panic!("{j:#}"));
    assert_eq!(work.len(), 2, "steps and tokens, never added: {work:#?}");
    let unit = |u: &str| {
        work.iter()
            .find(|w| w["unit"] == u)
            .unwrap_or_else(|| panic!("no {u}: {work:#?}"))
    };
    let hours = (end - start) as f64 / 3_600_000.0;
    for (u, done, per) in [
        ("steps", steps, 2.0 * 3600.0),
        ("tokens", tokens, 30.0 * 3600.0),
    ] {
        let w = unit(u);
        let got = w["work"].as_f64().unwrap();
        assert!(
            (got - done).abs() <= done * 0.002,
            "{u}: {got} vs the planted {done} (the reset counted by increase): {w:#}"
        );
        // One whole GPU all the job's span.
        let gh = w["gpu_hours"].as_f64().unwrap();
        assert!(
            (gh - hours).abs() <= hours * 0.005,
            "{gh} vs {hours}: {w:#}"
        );
        let p = w["per_gpu_hour"].as_f64().unwrap();
        assert!((p - per).abs() <= per * 0.005, "{u}: {p} vs {per}: {w:#}");
    }
    assert!(j.get("work_note").is_none(), "{j:#}");
    let table = run("4242", &src, "table");
    let line = table
        .lines()
        .find(|l| l.contains("steps per GPU-hour"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(line.trim_start().starts_with("Work"), "{line}");
    assert!(line.contains(" steps, 7,"), "{line}");
    assert!(table.contains(" tokens per GPU-hour"), "{table}");

    // 5151 counts nothing (9999's steps carry another id): no work metric, never 0.
    let j: Value = serde_json::from_str(&run("5151", &src, "json")).unwrap();
    assert!(j["work"].is_null(), "{j:#}");
    assert_eq!(
        j["work_note"],
        "no work metric (push a counter with slurm_job_id=5151: docs/work.md)"
    );
    let table = run("5151", &src, "table");
    assert!(
        table.contains(
            "  Work      no work metric (push a counter with slurm_job_id=5151: docs/work.md)"
        ),
        "{table}"
    );
    assert!(!table.contains("0 steps"), "{table}");

    // `report --by job` gives each job the work `tessera job` gives it.
    let by = [
        "--by",
        "job",
        "--work-metrics",
        declared.to_str().unwrap(),
        "--top",
        "100",
    ];
    let json = crate::support::cli::report(&src, (&from, &to), "10s", "json", &by);
    let by_job: Value = serde_json::from_str(&json).unwrap();
    let listed = |id: &str| {
        by_job["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no job {id}: {by_job:#}"))
    };
    for id in ["4242", "5151"] {
        let alone: Value = serde_json::from_str(&run(id, &src, "json")).unwrap();
        let listed = listed(id);
        assert_eq!(listed["work"], alone["work"], "job {id}");
        assert_eq!(listed["work_note"], alone["work_note"], "job {id}");
    }
    assert!(listed("4242")["work"].is_array());

    // A history source holds no counters: unknown, never 0.
    let hist = format!("history:{}", tmp.path().join("history").display());
    let j: Value = serde_json::from_str(&run("4242", &hist, "json")).unwrap();
    assert!(j["work"].is_null(), "{j:#}");
    let note = j["work_note"].as_str().unwrap();
    assert!(note.starts_with("unknown"), "{note}");
}

/// One node: job 700 serves on a MIG 3g.40gb instance all day; job 800 trains on a whole GPU
/// twice under one id (00:00-04:00 and 12:00-16:00, a daily job resubmitted).
const MIG_AND_RUNS: &str = r#"
name = "job-work"
seed = 11
start = "2026-11-02T00:00:00Z"
utc_offset_hours = 0

[[nodes]]
name = "hpc-1"
gpus = [{ model = "H100-80GB", count = 2 }]
mig = [{ gpu = 1, instances = [{ profile = "3g.40gb", start = 0 }] }]

[[workloads]]
name = "serve"
kind = "inference"
node = "hpc-1"
gpu = 1
mig_start = 0
memory_gib = 6.0
peak = 0.3
process = "server"
slurm_job = "700"

[[workloads]]
name = "train-a"
kind = "training"
node = "hpc-1"
gpu = 0
memory_gib = 40.0
peak = 0.9
start_hour = 0.0
duration_hours = 4.0
process = "torchrun"
slurm_job = "800"

[[workloads]]
name = "train-b"
kind = "training"
node = "hpc-1"
gpu = 0
memory_gib = 40.0
peak = 0.9
start_hour = 12.0
duration_hours = 4.0
process = "torchrun"
slurm_job = "800"
"#;

#[test]
fn a_mig_instance_hour_counts_by_its_share_and_a_reused_ids_runs_add_up() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let (gpu, mig, process, since) = om::simulate(tmp.path(), MIG_AND_RUNS, "job-work");
    let mut text = openmetrics_labelled(&gpu, &mig, &process, &["slurm_job_id"]);
    text.truncate(text.len() - "# EOF\n".len());
    let (start, end) = span(&process, "700");
    counter(
        &mut text,
        (
            "vllm:request_success_total",
            "job=\"serve\",slurm_job_id=\"700\",instance=\"\"",
        ),
        (start, end),
        4.0,
        None,
    );
    // Job 800's two runs: the second starts counting from 0 again (a reset); in between, the
    // Pushgateway serves the first run's last value (flat).
    let (job, ts, iv) = (
        om::strs(&process, "slurm_job_id"),
        om::f64s(&process, "ts"),
        om::f64s(&process, "interval_ms"),
    );
    let runs: Vec<(i64, i64)> = [(0, 6), (10, 18)]
        .iter()
        .map(|&(a, b)| {
            let (lo, hi) = (since + a * 3_600_000, since + b * 3_600_000);
            let rows: Vec<(i64, i64)> = (0..process.height())
                .filter(|&i| job[i].as_deref() == Some("800"))
                .filter_map(|i| Some((ts[i]? as i64 - iv[i]? as i64, ts[i]? as i64)))
                .filter(|r| r.1 > lo && r.1 <= hi)
                .collect();
            (
                rows.iter().map(|r| r.0).min().expect("a run"),
                rows.iter().map(|r| r.1).max().expect("a run"),
            )
        })
        .collect();
    writeln!(text, "# TYPE trainer_steps counter").unwrap();
    let labels = "job=\"train\",slurm_job_id=\"800\",instance=\"\"";
    let mut done = 0.0;
    for (k, &(a, b)) in runs.iter().enumerate() {
        let mut t = a;
        while t <= b {
            let v = 5.0 * (t - a) as f64 / 1000.0;
            writeln!(
                text,
                "trainer_steps_total{{{labels}}} {v} {:.3}",
                t as f64 / 1000.0
            )
            .unwrap();
            t += 60_000;
        }
        done += 5.0 * (b - a) as f64 / 1000.0;
        // Between the runs, the last value pushed, until the next run starts.
        if let Some(&(next, _)) = runs.get(k + 1) {
            let last = 5.0 * ((t - 60_000) - a) as f64 / 1000.0;
            let mut u = t;
            while u < next {
                writeln!(
                    text,
                    "trainer_steps_total{{{labels}}} {last} {:.3}",
                    u as f64 / 1000.0
                )
                .unwrap();
                u += 60_000;
            }
        }
    }
    text.push_str("# EOF\n");
    let server = prom::serve(tmp.path(), &text);
    let declared = tmp.path().join("work.toml");
    std::fs::write(
        &declared,
        "[[work]]\nunit = \"steps\"\ncounter = \"trainer_steps_total\"\n",
    )
    .unwrap();
    let src = format!("prometheus:{}", server.url);
    let (from, to) = (rfc3339(since), rfc3339(since + DAY_MS));
    let job = |id: &str| -> Value {
        let out = tessera(&[
            "job",
            id,
            "--source",
            &src,
            "--since",
            &from,
            "--until",
            &to,
            "--interval",
            "10s",
            "--work-metrics",
            declared.to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert!(
            out.status.success(),
            "tessera job {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // 700: 4 requests a second on 3/7 of a GPU: 4 × 3600 × 7/3 per GPU-hour.
    let j = job("700");
    let w = &j["work"][0];
    assert_eq!(w["unit"], "requests", "{j:#}");
    let hours = (end - start) as f64 / 3_600_000.0;
    let gh = w["gpu_hours"].as_f64().unwrap();
    assert!(
        (gh - hours * 3.0 / 7.0).abs() <= hours * 0.005,
        "{gh} vs {hours} × 3/7: {w:#}"
    );
    let want = 4.0 * 3600.0 * 7.0 / 3.0;
    let p = w["per_gpu_hour"].as_f64().unwrap();
    assert!((p - want).abs() <= want * 0.005, "{p} vs {want}: {w:#}");
    // 800: two runs of the id, their work summed over their own hours (not the gap between).
    let j = job("800");
    assert_eq!(j["runs"].as_array().unwrap().len(), 2, "{j:#}");
    let w = &j["work"][0];
    assert_eq!(w["unit"], "steps", "{j:#}");
    let got = w["work"].as_f64().unwrap();
    assert!((got - done).abs() <= done * 0.002, "{got} vs {done}: {w:#}");
    let run_hours: f64 = runs.iter().map(|(a, b)| (b - a) as f64 / 3_600_000.0).sum();
    let gh = w["gpu_hours"].as_f64().unwrap();
    assert!(
        (gh - run_hours).abs() <= run_hours * 0.005,
        "{gh} vs {run_hours}: {w:#}"
    );
    let p = w["per_gpu_hour"].as_f64().unwrap();
    assert!(
        (p - 5.0 * 3600.0).abs() <= 5.0 * 3600.0 * 0.005,
        "{p}: {w:#}"
    );
}

#[test]
fn a_bad_work_metrics_file_fails_before_any_data_is_read() {
    let tmp = tempfile::tempdir().expect("tmp");
    let bad = tmp.path().join("work.toml");
    std::fs::write(&bad, "[[work]]\nunit = \"Steps\"\ncounter = \"x_total\"\n").unwrap();
    let missing = format!("history:{}", tmp.path().join("none").display());
    let out = tessera(&[
        "job",
        "4242",
        "--source",
        &missing,
        "--work-metrics",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad work metrics file") && err.contains("entry 1 (line 1)"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}
