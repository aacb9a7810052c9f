//! The report of a 256-GPU fleet read from the two metric stores tessera meets past one machine
//! (issue 61 item 2, its small version; docs/performance.md "10,240 GPUs through metric
//! stores"): Debian's Prometheus (2.42; blocks built by `promtool tsdb create-blocks-from
//! openmetrics`, read through `query_range` and through remote read) and Debian's
//! VictoriaMetrics (`victoria-metrics` 1.79; samples imported through its
//! `/api/v1/import/prometheus`; `--prometheus.api auto` finds no remote read there and reads
//! through `query_range`). Both tools are required: the test fails, never skips,
//! without them (`scripts/test.sh` installs them).
//!
//! `scripts/gen-fleet.py --gpus 256` (32 nodes, four GPU models, MIG instances, every workload
//! kind) is simulated for a day at 60-s samples and rows; three hours of its rows are written as
//! tessera-exporter's series (two samples per row whose mean and max are the row's), and the
//! report over two of those hours — starting and ending on the half hour — is made from the
//! history, from Prometheus and from VictoriaMetrics. The fleet's, each GPU model's and each
//! team's figures must agree with the history's within 1% (GPU-hours: exactly; energy within
//! 2%). The
//! rows align the same way in all three (60-s steps on whole minutes), so what differs is only
//! what a store does to the samples.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use polars::prelude::*;
use serde_json::Value;
use tessera::ingest::{self, IngestOptions, Source};

use crate::support::openmetrics::{f64s, openmetrics_labelled, rfc3339, strs};
use crate::support::prometheus as prom;

const VICTORIA: &str = "/usr/bin/victoria-metrics";
const HOUR_MS: i64 = 3_600_000;

/// VictoriaMetrics on a free port, killed when dropped.
struct Victoria {
    child: Child,
    url: String,
}

impl Drop for Victoria {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(url: &str) -> Option<String> {
    ureq::get(url)
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
}

/// Starts VictoriaMetrics on a data folder in `dir` (a few tries: the free port is found by
/// binding and letting it go, and a test beside may take it first).
fn victoria(dir: &Path) -> Victoria {
    assert!(
        Path::new(VICTORIA).exists(),
        "{VICTORIA} is missing: install Debian's victoria-metrics package (scripts/test.sh does)"
    );
    for attempt in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let log = std::fs::File::create(dir.join(format!("victoria-{attempt}.log"))).expect("log");
        let child = Command::new(VICTORIA)
            .arg(format!(
                "-storageDataPath={}",
                dir.join("victoria-data").display()
            ))
            .arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            .arg("-retentionPeriod=100y")
            // Samples are old: none is hidden as too recent.
            .arg("-search.latencyOffset=0s")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start victoria-metrics");
        let mut v = Victoria {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        // A guard against a hang, not a bound on speed.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if v.child.try_wait().ok().flatten().is_some() {
                break;
            }
            if get(&format!("{}/health", v.url)).is_some_and(|b| b.trim() == "OK") {
                return v;
            }
            assert!(Instant::now() < deadline, "victoria-metrics not ready");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    panic!("victoria-metrics did not start on any of 5 ports");
}

/// The OpenMetrics text (timestamps in seconds) as the Prometheus text format VictoriaMetrics
/// imports (timestamps in milliseconds), comments left out.
fn prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines().filter(|l| !l.starts_with('#')) {
        let Some((sample, ts)) = line.rsplit_once(' ') else {
            continue;
        };
        let ms = (ts.parse::<f64>().expect("timestamp") * 1000.0).round() as i64;
        out.push_str(sample);
        out.push(' ');
        out.push_str(&ms.to_string());
        out.push('\n');
    }
    out
}

/// What [`openmetrics_labelled`] leaves out and the report reads: each GPU's model (`tessera_gpu_info`'s
/// `name`), MIG mode, and energy counter (the history's deltas added up, one sample per row).
fn gpu_series(gpu: &DataFrame) -> String {
    use std::fmt::Write as _;
    let (node, g, uuid, model) = (
        strs(gpu, "node"),
        strs(gpu, "gpu"),
        strs(gpu, "uuid"),
        strs(gpu, "model"),
    );
    let (ts, mig, joules) = (
        f64s(gpu, "ts"),
        f64s(gpu, "mig_enabled"),
        f64s(gpu, "energy_delta_joules"),
    );
    let mut rows: Vec<usize> = (0..gpu.height()).filter(|&i| ts[i].is_some()).collect();
    rows.sort_by(|&a, &b| {
        (&node[a], &g[a], ts[a].map(|t| t as i64)).cmp(&(&node[b], &g[b], ts[b].map(|t| t as i64)))
    });
    let label = |i: usize| {
        format!(
            "instance=\"{}:19435\",gpu=\"{}\",uuid=\"{}\"",
            node[i].as_deref().unwrap_or(""),
            g[i].as_deref().unwrap_or(""),
            uuid[i].as_deref().unwrap_or("")
        )
    };
    let mut info = String::from("# TYPE tessera_gpu_info gauge\n");
    let mut mode = String::from("# TYPE tessera_gpu_mig_enabled gauge\n");
    let mut energy = String::from("# TYPE tessera_gpu_energy_joules counter\n");
    let mut total = 0.0;
    let mut last: Option<String> = None;
    for i in rows {
        let (l, t) = (label(i), ts[i].unwrap_or(0.0) / 1000.0);
        if let Some(m) = &model[i] {
            let _ = writeln!(info, "tessera_gpu_info{{{l},name=\"{m}\"}} 1 {t:.3}");
        }
        if let Some(v) = mig[i] {
            let _ = writeln!(mode, "tessera_gpu_mig_enabled{{{l}}} {v} {t:.3}");
        }
        if last.as_deref() != Some(l.as_str()) {
            total = 1.0e6;
            last = Some(l.clone());
        }
        if let Some(j) = joules[i] {
            total += j;
            let _ = writeln!(
                energy,
                "tessera_gpu_energy_joules_total{{{l}}} {total} {t:.3}"
            );
        }
    }
    format!("{info}{mode}{energy}")
}

fn report(source: &str, since: i64, until: i64, api: &str) -> Value {
    let out = crate::support::cli::tessera(&[
        "report",
        "--prometheus.api",
        api,
        "--source",
        source,
        "--since",
        &rfc3339(since),
        "--until",
        &rfc3339(until),
        "--interval",
        "60s",
        "--format",
        "json",
        "--no-replay",
        "--trend.weeks",
        "0",
    ]);
    assert!(
        out.status.success(),
        "report from {source}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `got` within `rel` of `want` (both numbers), naming `what`.
fn near(got: &Value, want: &Value, rel: f64, what: &str) {
    let (g, w) = (
        got.as_f64().unwrap_or_else(|| panic!("{what}: {got}")),
        want.as_f64().unwrap_or_else(|| panic!("{what}: {want}")),
    );
    assert!(
        (g - w).abs() <= rel * w.abs().max(1e-9),
        "{what}: {g} from the store vs {w} from the history"
    );
}

/// The store's report agrees with the history's: the fleet, each GPU model, each team.
fn agree(store: &Value, hist: &Value, name: &str) {
    let fleet = (&store["fleet"], &hist["fleet"]);
    assert_eq!(fleet.0["gpus"], fleet.1["gpus"], "{name}: GPUs");
    for k in [
        "gpu_hours_observed",
        "gpu_hours_available",
        "cost_gpu_hours",
    ] {
        near(
            &fleet.0[k],
            &fleet.1[k],
            1e-9,
            &format!("{name}: fleet {k}"),
        );
    }
    for k in ["gpu_hours_busy", "activity_mean", "memory_peak_gib"] {
        near(
            &fleet.0[k],
            &fleet.1[k],
            0.01,
            &format!("{name}: fleet {k}"),
        );
    }
    near(
        &fleet.0["energy_kwh"],
        &fleet.1["energy_kwh"],
        0.02,
        &format!("{name}: fleet energy"),
    );
    let models = |r: &Value| -> Vec<(String, Value)> {
        r["by_model"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["key"].as_str().unwrap().to_string(), m.clone()))
            .collect()
    };
    let (sm, hm) = (models(store), models(hist));
    assert_eq!(
        sm.iter().map(|m| &m.0).collect::<Vec<_>>(),
        hm.iter().map(|m| &m.0).collect::<Vec<_>>(),
        "{name}: GPU models"
    );
    for ((key, s), (_, h)) in sm.iter().zip(&hm) {
        near(
            &s["gpu_hours_observed"],
            &h["gpu_hours_observed"],
            1e-9,
            &format!("{name}: {key} GPU-hours"),
        );
        near(
            &s["gpu_hours_busy"],
            &h["gpu_hours_busy"],
            0.01,
            &format!("{name}: {key} busy"),
        );
    }
    let teams = |r: &Value| -> Vec<(String, f64)> {
        r["teams"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["team"].as_str().unwrap().to_string(),
                    t["gpu_hours"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let (st, ht) = (teams(store), teams(hist));
    assert_eq!(
        st.iter().map(|t| &t.0).collect::<Vec<_>>(),
        ht.iter().map(|t| &t.0).collect::<Vec<_>>(),
        "{name}: teams"
    );
    for ((team, s), (_, h)) in st.iter().zip(&ht) {
        assert!(
            (s - h).abs() <= 0.01 * h.max(1e-9),
            "{name}: team {team}: {s} GPU-hours from the store vs {h} from the history"
        );
    }
}

#[test]
fn a_256_gpu_report_is_the_same_from_prometheus_and_victoria_metrics() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let (hist, start) = crate::support::fleet::simulate(tmp.path(), 256, 61, 1);
    // Three hours written to the stores; the report over two, on the half hours inside them.
    let (from, to) = (start + HOUR_MS, start + 4 * HOUR_MS);
    let (since, until) = (start + 3 * HOUR_MS / 2, start + 7 * HOUR_MS / 2);
    let (frames, _) = ingest::ingest(
        &[Source::history(hist.to_string_lossy().into_owned())],
        &IngestOptions {
            since: Some(from),
            until: Some(to),
            ..IngestOptions::default()
        },
    )
    .expect("ingest history");
    let collect = |lf: LazyFrame| lf.collect().expect("collect");
    let gpu = collect(frames.gpu);
    // The exporter labels a Slurm job's processes with its id (the teams "slurm job N").
    let mut text = openmetrics_labelled(
        &gpu,
        &collect(frames.mig),
        &collect(frames.process),
        &["slurm_job_id"],
    );
    text.truncate(text.len() - "# EOF\n".len());
    text.push_str(&gpu_series(&gpu));
    text.push_str("# EOF\n");

    let history = report(
        &format!("history:{}", hist.display()),
        since,
        until,
        "query-range",
    );
    assert_eq!(history["fleet"]["gpus"], 256, "{}", history["fleet"]);

    let server = prom::serve(tmp.path(), &text);
    let from_prometheus = report(
        &format!("prometheus:{}", server.url),
        since,
        until,
        "query-range",
    );
    agree(&from_prometheus, &history, "Prometheus");
    let by_remote_read = report(&format!("prometheus:{}", server.url), since, until, "auto");
    agree(&by_remote_read, &history, "Prometheus (remote read)");
    drop(server);

    let vm = victoria(tmp.path());
    let body = prometheus_text(&text);
    let mut answer = ureq::post(format!("{}/api/v1/import/prometheus", vm.url))
        .send(body.as_bytes())
        .expect("import");
    let msg = answer.body_mut().read_to_string().unwrap_or_default();
    assert!(answer.status().is_success(), "import: {msg}");
    // Imported samples are searchable once flushed; wait (a guard, not a bound) until every
    // GPU's busy series answers (MIG-enabled GPUs have none).
    let _ = get(&format!("{}/internal/force_flush", vm.url));
    let busy_series: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("tessera_gpu_busy_ratio{"))
        .filter_map(|l| l.split_once('}').map(|(k, _)| k))
        .collect();
    let want = busy_series.len().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let q = format!(
            "{}/api/v1/query?query=count(last_over_time(tessera_gpu_busy_ratio%5B1h%5D))&time={}",
            vm.url,
            to / 1000
        );
        let n = get(&q)
            .and_then(|b| serde_json::from_str::<Value>(&b).ok())
            .and_then(|v| {
                v["data"]["result"][0]["value"][1]
                    .as_str()
                    .map(str::to_string)
            });
        if n.as_deref() == Some(want.as_str()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "VictoriaMetrics holds {n:?} GPUs' series"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let from_victoria = report(&format!("prometheus:{}", vm.url), since, until, "auto");
    agree(&from_victoria, &history, "VictoriaMetrics");
    // `auto` reads Prometheus by remote read and VictoriaMetrics (no remote read) through
    // query_range, as the report's notes say.
    let said = |r: &Value, what: &str| {
        r["data_quality"].as_array().is_some_and(|n| {
            n.iter()
                .any(|m| m["message"].as_str().is_some_and(|m| m.contains(what)))
        })
    };
    assert!(
        said(&by_remote_read, "one remote read per node group"),
        "{}",
        by_remote_read["data_quality"]
    );
    assert!(
        said(&from_victoria, "read through /api/v1/query_range"),
        "{}",
        from_victoria["data_quality"]
    );
}
