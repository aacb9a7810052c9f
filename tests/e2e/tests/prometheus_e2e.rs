//! End to end with a real Prometheus (Debian's `prometheus`; the test fails, never skips, without
//! it — `bash scripts/test.sh` installs it): the exporter runs the monitoring scenario
//! (`fixtures/scenarios/alerting.toml`) on the simulator's accelerated clock (an hour per second)
//! with the MIG plan `fixtures/mig-configs/alerting.yaml`; Prometheus, in a temporary directory on
//! 127.0.0.1, scrapes it every second and evaluates `rules/` every second. Then:
//!
//! - every PromQL expression of `rules/` and `dashboards/` parses and returns data — except the
//!   few listed in [`MAY_BE_EMPTY`] whose condition this scenario does not plant, whose vector
//!   selectors must return data instead;
//! - the planted conditions alert: XIDs 79 and 64, uncorrectable ECC errors, the row-remap
//!   failure (firing; not the merely pending remap), GPU 2's full memory and power cap and GPU 3's MIG drift (pending: their
//!   `for` is longer than the test), and the idle-loaded-model alert fires for the planted idle
//!   model only — not for the busy services, not for the idle 0.8 GiB warm spare;
//! - the analyzer's `prometheus:` source (the `tessera ingest` binary and its library) reads the
//!   same GPUs, MIG instances and processes back, with values in range.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use polars::prelude::*;
use serde_json::Value;
use tessera_core::sim::{Scenario, SimNode};
use tessera_e2e::monitoring::{
    Exporter, Prometheus, dashboard_queries, free_port, rule_files, rules, tool,
};
use tessera_e2e::promql::{selectors, substitute_grafana_variables};
use tessera_e2e::{exporter, repo_root, run, tessera};

/// Expressions that may legitimately return nothing in this scenario (rule alert name, or
/// dashboard file and panel title), and why. Their vector selectors must return data.
const MAY_BE_EMPTY: &[(&str, &str)] = &[
    ("TesseraExporterDown", "the exporter is up"),
    ("TesseraExporterStale", "the exporter keeps sampling"),
    (
        "TesseraExporterBackendDown",
        "the simulated backend never fails here",
    ),
    ("TesseraGpuLost", "no GPU is lost in this scenario"),
    (
        "TesseraGpuThermalThrottling",
        "the simulator never throttles for heat",
    ),
    (
        "TesseraGpuIdleLoaded",
        "every GPU has per-process series (and none is idle)",
    ),
    (
        "TesseraGpuAllocatedUnused",
        "the one device the fake kubelet gives pods (GPU 0, time-sliced) runs processes",
    ),
    (
        "TesseraFleetUnderutilised",
        "the fleet's activity depends on the hour; may be above 30%",
    ),
    (
        "tessera-waste.json Consolidation candidates",
        "no GPU of this busy node stays below 30%",
    ),
    (
        "TesseraWorkPerGpuHourDropped",
        "no week-old work series to compare with",
    ),
];

/// A test server speaking vLLM's and Triton's Prometheus expositions (`/vllm`, `/triton`) with
/// counters growing at planted rates: vLLM 100 generated tokens and 2 successful requests a
/// second, Triton 40 inferences (one request each) a second.
struct ServingFrameworks {
    addr: String,
}

impl ServingFrameworks {
    fn start() -> ServingFrameworks {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let start = Instant::now();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut c) = conn else { continue };
                let mut buf = [0u8; 4096];
                let n = c.read(&mut buf).unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]);
                let t = start.elapsed().as_secs_f64();
                let body = if req.starts_with("GET /vllm") {
                    format!(
                        "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n\
                         # TYPE vllm:generation_tokens_total counter\n\
                         vllm:generation_tokens_total{{model_name=\"chat\"}} {}\n\
                         # HELP vllm:request_success_total Count of successfully processed requests.\n\
                         # TYPE vllm:request_success_total counter\n\
                         vllm:request_success_total{{finished_reason=\"stop\",model_name=\"chat\"}} {}\n",
                        100.0 * t,
                        2.0 * t
                    )
                } else {
                    format!(
                        "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes\n\
                         # TYPE nv_inference_request_success counter\n\
                         nv_inference_request_success{{model=\"embed\",version=\"1\"}} {}\n\
                         # HELP nv_inference_count Number of inferences performed (does not include cached requests)\n\
                         # TYPE nv_inference_count counter\n\
                         nv_inference_count{{model=\"embed\",version=\"1\"}} {}\n",
                        40.0 * t,
                        40.0 * t
                    )
                };
                let _ = write!(
                    c,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        ServingFrameworks { addr }
    }
}

fn may_be_empty(key: &str) -> bool {
    MAY_BE_EMPTY.iter().any(|(k, _)| *k == key)
}

/// Poll `f` every 250 ms until it returns `Some`, or fail after `limit` with `what` and the
/// alerts Prometheus has at that moment.
fn wait_for<T>(
    prom: &Prometheus,
    limit: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; alerts now: {:#?}\nprometheus log:\n{}",
            prom.alerts(),
            prom.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn label<'a>(v: &'a Value, name: &str) -> &'a str {
    v["labels"][name].as_str().unwrap_or("")
}

/// Alerts of `name` in `state` (pending, firing) as (gpu, extra label) pairs.
fn alerts_of(alerts: &[Value], name: &str, state: &str, extra: &str) -> BTreeSet<(String, String)> {
    alerts
        .iter()
        .filter(|a| label(a, "alertname") == name && a["state"] == state)
        .map(|a| (label(a, "gpu").to_string(), label(a, extra).to_string()))
        .collect()
}

fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Values of a label over the series of an exposition's family.
fn label_values(exposition: &str, family: &str, label: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| {
            let start = l.find(&format!("{label}=\""))? + label.len() + 2;
            let end = l[start..].find('"')? + start;
            Some(l[start..end].to_string())
        })
        .collect()
}

#[test]
fn prometheus_scrapes_evaluates_rules_and_dashboards_and_the_analyzer_reads_it_back() {
    tool("prometheus");
    let root = repo_root();
    let scenario = Scenario::from_file(&root.join("fixtures/scenarios/alerting.toml")).unwrap();
    let pid_of = |name: &str| {
        let w = scenario
            .workloads
            .iter()
            .position(|w| w.name == name)
            .unwrap_or_else(|| panic!("no workload {name}"));
        SimNode::pid(w).to_string()
    };
    let idle_model = pid_of("embeddings-forgotten");
    let warm_spare = pid_of("warm-spare");

    // Prometheus first, so it has scraped the counters at 0 before the faults planted 29 virtual
    // hours (29 seconds) after the exporter's start.
    let port = free_port();
    let rule_list: Vec<String> = rule_files()
        .iter()
        .map(|p| format!("  - {}", p.display()))
        .collect();
    // The serving frameworks of the two pods that will hold GPU 0: vLLM's and Triton's
    // expositions, with the `namespace` and `pod` target labels kube-prometheus would add.
    let serving = ServingFrameworks::start();
    let prom = Prometheus::start(&format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n{}\n\
         scrape_configs:\n  - job_name: tessera-exporter\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n\
         \x20 - job_name: vllm\n    metrics_path: /vllm\n    static_configs:\n      - targets: ['{s}']\n        labels: {{namespace: serving, pod: chat-api-0}}\n\
         \x20 - job_name: triton\n    metrics_path: /triton\n    static_configs:\n      - targets: ['{s}']\n        labels: {{namespace: research, pod: embed-test-0}}\n",
        rule_list.join("\n"),
        s = serving.addr
    ));
    // A kubelet that says two pods share GPU 0 (once the exporter has said its UUID).
    let socket_dir = tempfile::tempdir().unwrap();
    let kubelet = tessera_fake_kubelet::FakeKubelet::start(
        socket_dir.path().join("kubelet.sock"),
        tessera_fake_kubelet::response(vec![]),
    )
    .unwrap();
    let e = Exporter::start_on(
        exporter![
            "--kubelet.pod-resources-socket",
            kubelet.path(),
            "--backend",
            "sim",
            "--sim.scenario",
            root.join("fixtures/scenarios/alerting.toml"),
            "--sim.time",
            "2026-11-02T04:00:00Z",
            "--sim.speed",
            "3600",
            "--sample.interval",
            "250ms",
            "--mig.config",
            root.join("fixtures/mig-configs/alerting.yaml"),
            "--mig.config-label",
            "inference-node",
        ],
        &format!("127.0.0.1:{port}"),
    );
    let exposition = e.scrape();
    let uuids = label_values(&exposition, "tessera_gpu_info", "uuid");
    let mig_uuids = label_values(&exposition, "tessera_mig_info", "mig_uuid");
    let pids = label_values(&exposition, "tessera_process_memory_used_bytes", "pid");
    assert_eq!(
        (uuids.len(), mig_uuids.len(), pids.len()),
        (4, 3, 7),
        "4 GPUs, 3 MIG instances, 7 processes"
    );
    assert!(pids.contains(&idle_model) && pids.contains(&warm_spare));
    let gpu0 = exposition
        .lines()
        .find_map(|l| {
            l.strip_prefix("tessera_gpu_info{")
                .filter(|l| l.contains("gpu=\"0\""))
                .and_then(|l| l.split("uuid=\"").nth(1))
                .and_then(|l| l.split('"').next())
                .map(str::to_string)
        })
        .expect("GPU 0's uuid");
    // Time-sliced between two pods, so that no series of GPU 0 changes its labels (a shared
    // device's series carry no pod labels): the analyzer below reads the same 7 processes.
    let (a, b) = (format!("{gpu0}::0"), format!("{gpu0}::1"));
    kubelet.set_response(tessera_fake_kubelet::response(vec![
        tessera_fake_kubelet::pod(
            "chat-api-0",
            "serving",
            &[("server", "nvidia.com/gpu", &[a.as_str()])],
        ),
        tessera_fake_kubelet::pod(
            "embed-test-0",
            "research",
            &[("main", "nvidia.com/gpu", &[b.as_str()])],
        ),
    ]));

    // A few scrapes, the rules evaluated, and the faults (an hour in) alerting.
    wait_for(
        &prom,
        Duration::from_secs(60),
        "4 GPUs scraped 3 times",
        || {
            let r = prom
                .query("count(count_over_time(tessera_gpu_info[1m]) >= 3)")
                .ok()?;
            (r.first()?["value"][1] == "4").then_some(())
        },
    );
    wait_for(
        &prom,
        Duration::from_secs(60),
        "the XID and ECC alerts to fire",
        || {
            let a = prom.alerts();
            (alerts_of(&a, "TesseraGpuCriticalXid", "firing", "xid").len() == 2
                && !alerts_of(&a, "TesseraGpuUncorrectableEccErrors", "firing", "type").is_empty())
            .then_some(())
        },
    );

    wait_for(
        &prom,
        Duration::from_secs(60),
        "the pod families scraped",
        || {
            let r = prom.query("tessera_gpu_pod_unused_seconds").ok()?;
            (!r.is_empty()).then_some(())
        },
    );

    // Work per GPU-hour (rules/tessera-work.rules.yml): each pod's units joined to the one device
    // it holds; the planted ratio of vLLM's tokens to its requests (50) and of Triton's
    // inferences to its requests (1) survives the join (the planted rates themselves are
    // checked by rules/tests/work.test.yml: an hour's rate needs an hour of scrapes).
    let per_gpu_hour = wait_for(&prom, Duration::from_secs(60), "work per GPU-hour", || {
        let r = prom
            .query("namespace_pod_unit:tessera_work_per_gpu_hour:rate1h")
            .ok()?;
        (r.len() == 4).then_some(r)
    });
    let of = |pod: &str, unit: &str| -> f64 {
        per_gpu_hour
            .iter()
            .find(|v| v["metric"]["pod"] == pod && v["metric"]["unit"] == unit)
            .and_then(|v| v["value"][1].as_str()?.parse().ok())
            .unwrap_or_else(|| panic!("no {unit} of {pod}: {per_gpu_hour:?}"))
    };
    let ratio = of("chat-api-0", "tokens") / of("chat-api-0", "requests");
    assert!((ratio - 50.0).abs() < 0.5, "tokens per request {ratio}");
    let ratio = of("embed-test-0", "inferences") / of("embed-test-0", "requests");
    assert!((ratio - 1.0).abs() < 0.01, "inferences per request {ratio}");
    let held = prom.query("namespace_pod:tessera_gpus_held:count").unwrap();
    assert_eq!(held.len(), 2, "{held:?}");
    assert!(held.iter().all(|v| v["value"][1] == "1"), "{held:?}");

    // Every expression parses and returns data.
    // (The advisor's rules for dcgm-exporter's series have nothing to read here; they are
    // tested by rules/tests/advisor.test.yml.)
    let mut exprs: Vec<(String, String)> = rules()
        .into_iter()
        .filter(|r| r.group != "tessera.advisor.dcgm")
        .map(|r| (r.alert.or(r.record).unwrap_or_default(), r.expr))
        .collect();
    for q in dashboard_queries() {
        let title = q
            .place
            .strip_prefix("panel ")
            .and_then(|p| p.split(" target ").next())
            .map(|t| t.trim_matches('"').to_string())
            .unwrap_or(q.place.clone());
        exprs.push((format!("{} {title}", q.dashboard), q.expr));
    }
    assert!(exprs.len() > 70, "{} expressions", exprs.len());
    let mut failures = Vec::new();
    let mut empty = Vec::new();
    for (key, expr) in &exprs {
        let expr = substitute_grafana_variables(expr);
        match prom.query(&expr) {
            Err(e) => failures.push(format!("{key}: {expr:?}: {e}")),
            Ok(r) if !r.is_empty() => {}
            Ok(_) if may_be_empty(key) => {
                empty.push(key.clone());
                for s in selectors(&expr) {
                    match prom.query(&s.text) {
                        Ok(r) if !r.is_empty() => {}
                        other => failures.push(format!(
                            "{key}: selector {} of an empty expression returns {other:?}",
                            s.text
                        )),
                    }
                }
            }
            Ok(_) => failures.push(format!("{key}: {expr:?} returned no data")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} expressions failed:\n{}\nprometheus log:\n{}",
        failures.len(),
        exprs.len(),
        failures.join("\n"),
        prom.log()
    );
    eprintln!(
        "{} expressions returned data; legitimately empty here: {empty:?}",
        exprs.len() - empty.len()
    );

    // The warm spare is just as idle as the planted model, so only its 0.8 GiB keeps it quiet.
    let spare_idle = prom
        .query(&format!(
            "tessera_process_idle_seconds{{pid=\"{warm_spare}\"}}"
        ))
        .unwrap();
    let secs: f64 = spare_idle[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(secs >= 3600.0, "the warm spare has been idle {secs} s");

    // The idle-loaded alert fires (after its `for: 1m`) for the planted idle model only.
    let alerts = wait_for(
        &prom,
        Duration::from_secs(150),
        "TesseraIdleLoadedModel to fire",
        || {
            let a = prom.alerts();
            (!alerts_of(&a, "TesseraIdleLoadedModel", "firing", "pid").is_empty()).then_some(a)
        },
    );
    let idle: BTreeSet<String> = alerts
        .iter()
        .filter(|a| label(a, "alertname") == "TesseraIdleLoadedModel")
        .map(|a| label(a, "pid").to_string())
        .collect();
    assert_eq!(
        idle,
        BTreeSet::from([idle_model.clone()]),
        "pending or firing for the idle model only"
    );
    let firing = alerts
        .iter()
        .find(|a| label(a, "alertname") == "TesseraIdleLoadedModel")
        .unwrap();
    assert_eq!(label(firing, "severity"), "info");
    assert!(
        firing["annotations"]["runbook_url"]
            .as_str()
            .unwrap()
            .ends_with("#tesseraidleloadedmodel")
    );
    // The other planted conditions.
    assert_eq!(
        alerts_of(&alerts, "TesseraGpuCriticalXid", "firing", "xid"),
        set(&[("1", "64"), ("2", "79")])
    );
    // XID 64 and NVML's failure flag of GPU 1 make one alert; GPU 0's pending remap none.
    assert_eq!(
        alerts_of(&alerts, "TesseraGpuRowRemapFailure", "firing", "uuid").len(),
        1
    );
    assert_eq!(
        alerts_of(&alerts, "TesseraGpuRowRemapFailure", "firing", "xid"),
        set(&[("1", "")])
    );
    assert_eq!(
        alerts_of(
            &alerts,
            "TesseraGpuUncorrectableEccErrors",
            "firing",
            "type"
        ),
        set(&[("3", "uncorrected")])
    );
    assert_eq!(
        alerts_of(
            &alerts,
            "TesseraGpuMemoryNearlyFull",
            "pending",
            "gpu_instance"
        ),
        set(&[("2", "")])
    );
    assert_eq!(
        alerts_of(&alerts, "TesseraMigLayoutDrift", "pending", "config"),
        set(&[("3", "inference-node")])
    );
    assert_eq!(
        alerts_of(&alerts, "TesseraGpuPowerThrottling", "pending", "reason"),
        set(&[("2", "sw_power_cap")])
    );
    for quiet in [
        "TesseraGpuLost",
        "TesseraExporterStale",
        "TesseraGpuIdleLoaded",
        "TesseraGpuAllocatedUnused",
    ] {
        assert!(
            !alerts.iter().any(|a| label(a, "alertname") == quiet),
            "{quiet} should not be pending or firing"
        );
    }

    // The analyzer reads the same series back: the binary's summary...
    let (out, stdout, stderr) = run(tessera![
        "ingest",
        "--source",
        format!("prometheus:{}", prom.url),
        "--since",
        "2m",
        "--interval",
        "5s",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "tessera ingest failed: {stderr}");
    let summary: Value = serde_json::from_str(&stdout).expect("ingest JSON");
    let entities = |table: &str| {
        summary["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["table"] == table)
            .map(|t| (t["entities"].as_u64().unwrap(), t["rows"].as_u64().unwrap()))
            .unwrap_or_else(|| panic!("no {table} table in {summary}"))
    };
    for (table, n) in [("gpu", 4), ("mig", 3), ("process", 7)] {
        let (ents, rows) = entities(table);
        assert_eq!(ents, n, "{table} entities: {summary}");
        assert!(rows >= 2 * n, "{table}: {rows} rows");
    }
    // ... and, through the library, the same identities and values in range.
    let now = chrono_now_ms();
    let source: tessera::ingest::Source = format!("prometheus:{}", prom.url).parse().unwrap();
    let (frames, _) = tessera::ingest::ingest(
        &[source],
        &tessera::ingest::IngestOptions {
            since: Some(now - 120_000),
            until: Some(now),
            interval_ms: Some(5_000),
            ..Default::default()
        },
    )
    .expect("ingest from prometheus");
    let gpu = frames.gpu.collect().unwrap();
    let strs = |df: &DataFrame, c: &str| -> BTreeSet<String> {
        df.column(c)
            .unwrap()
            .str()
            .unwrap()
            .iter()
            .flatten()
            .map(str::to_string)
            .collect()
    };
    let f64s = |df: &DataFrame, c: &str| -> Vec<f64> {
        df.column(c)
            .unwrap()
            .cast(&DataType::Float64)
            .unwrap()
            .f64()
            .unwrap()
            .iter()
            .flatten()
            .collect()
    };
    assert_eq!(strs(&gpu, "uuid"), uuids, "same GPUs");
    for c in ["busy_mean", "busy_max", "sm_active_mean", "sm_active_max"] {
        let v = f64s(&gpu, c);
        assert!(
            !v.is_empty() && v.iter().all(|x| (0.0..=1.0).contains(x)),
            "{c}: {v:?}"
        );
    }
    let used = f64s(&gpu, "memory_used_max_bytes");
    let total = f64s(&gpu, "memory_total_bytes");
    assert!(!used.is_empty() && used.len() == total.len());
    assert!(used.iter().zip(&total).all(|(u, t)| u <= t && *u > 0.0));
    assert!(
        f64s(&gpu, "power_mean_watts")
            .iter()
            .all(|w| *w > 0.0 && *w <= 700.0)
    );
    let mig = frames.mig.collect().unwrap();
    assert_eq!(strs(&mig, "mig_uuid"), mig_uuids, "same MIG instances");
    let process = frames.process.collect().unwrap();
    let got_pids: BTreeSet<String> = f64s(&process, "pid")
        .iter()
        .map(|p| (*p as u32).to_string())
        .collect();
    assert_eq!(got_pids, pids, "same processes");
    drop(e);
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
