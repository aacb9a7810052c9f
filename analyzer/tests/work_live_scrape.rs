//! Work per GPU-hour through a real Prometheus that *scrapes* (issue 60's first "done when";
//! docs/work.md): three test servers on 127.0.0.1 speak the expositions Prometheus scrapes in a
//! cluster — tessera-exporter's OpenMetrics (the simulated fleet of
//! `fixtures/scenarios/allocated.toml`, with `tessera_gpu_pod_info` from its pod holders), vLLM's
//! text format (`vllm:generation_tokens_total{model_name}`, as prometheus_client writes it) and
//! Triton's (`nv_inference_count{model,version}`) — and Debian's Prometheus scrapes them every
//! 100 ms, adding `namespace`/`pod` as target labels the way kube-prometheus' pod monitors do.
//!
//! An hour of scraping cannot happen in a test, so each server serves the next minute of the
//! simulated day at each scrape, with the sample's own timestamp (the exposition formats carry
//! one; Prometheus honours it by default, and `storage.tsdb.out_of_order_time_window` lets it
//! store minutes older than its own `up` samples). Everything else is what a scrape does: one
//! sample per series per scrape, the target labels, `honor_labels` for the exporter (its
//! `namespace`/`pod` are the holders', never renamed `exported_*`), counters as the servers count
//! them.
//!
//! Planted: vLLM's tokens of serving/api-0 (a whole H100 the whole time) at 50 a second and
//! Triton's inferences of research/embed-0 (a MIG 3g.40gb instance) at 8 a second. The truth,
//! computed here from the planted rates: 180,000 tokens per GPU-hour and 8 × 3600 ÷ 3/7 = 67,200
//! inferences per GPU-hour (a 3g.40gb instance-hour is 3/7 of a GPU-hour). The range starts on an hour and ends 20 minutes past one (only whole hours
//! count, by design); pods that hold GPUs and count nothing are "no work metric".

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::openmetrics::{self as om, openmetrics_with_holders, rfc3339};
use crate::support::prometheus as prom;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/scenarios/allocated.toml"
);

/// Minutes served (3 h 20 min).
const MINUTES: usize = 200;

/// A scrape target that answers each GET with the next page (one minute of samples) and, past
/// the last, with an empty exposition. `served` counts the pages given.
struct Target {
    addr: String,
    served: Arc<AtomicUsize>,
}

fn serve(pages: Vec<String>, content_type: &'static str) -> Target {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    let empty = if content_type.starts_with("application/openmetrics") {
        "# EOF\n".to_string()
    } else {
        String::new()
    };
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let k = count.load(Ordering::SeqCst);
            let body = pages.get(k).unwrap_or(&empty);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            if stream.write_all(head.as_bytes()).is_ok()
                && stream.write_all(body.as_bytes()).is_ok()
            {
                count.store(k + 1, Ordering::SeqCst);
            }
        }
    });
    Target { addr, served }
}

/// The OpenMetrics text `text` (families of `name{labels} value seconds` lines, as the backfill
/// writes them) cut into one page per minute from `since`: each page holds every family's
/// samples stamped exactly on that minute, families in their order with their `# TYPE` line.
fn pages_per_minute(text: &str, since: i64) -> Vec<String> {
    let mut pages: Vec<String> = vec![String::new(); MINUTES];
    let mut family = "";
    let mut family_started = [false; MINUTES];
    for line in text.lines() {
        if line.starts_with("# TYPE") {
            family = line;
            family_started.iter_mut().for_each(|s| *s = false);
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let Some((_, ts)) = line.rsplit_once(' ') else {
            continue;
        };
        let ms = (ts.parse::<f64>().expect("timestamp") * 1000.0).round() as i64 - since;
        if ms < 0 || ms % 60_000 != 0 || ms / 60_000 >= MINUTES as i64 {
            continue;
        }
        let k = (ms / 60_000) as usize;
        if !family_started[k] {
            pages[k].push_str(family);
            pages[k].push('\n');
            family_started[k] = true;
        }
        pages[k].push_str(line);
        pages[k].push('\n');
    }
    for p in &mut pages {
        p.push_str("# EOF\n");
    }
    pages
}

/// A counter in the Prometheus text format (0.0.4; timestamps in ms), one page a minute at
/// `rate` a second.
fn counter_pages(name: &str, help: &str, labels: &str, since: i64, rate: f64) -> Vec<String> {
    (0..MINUTES)
        .map(|k| {
            format!(
                "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {} {}\n",
                rate * 60.0 * k as f64,
                since + k as i64 * 60_000
            )
        })
        .collect()
}

fn figure<'a>(w: &'a Value, list: &str, namespace: &str, unit: &str) -> &'a Value {
    w[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list}: {w:#}"))
        .iter()
        .find(|f| f["namespace"] == namespace && f["unit"] == unit)
        .unwrap_or_else(|| panic!("no {list} {namespace} {unit}: {w:#}"))
}

#[test]
fn a_scraping_prometheus_gives_the_report_the_planted_work_per_gpu_hour() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let toml = std::fs::read_to_string(FIXTURE).unwrap();
    let (gpu, mig, process, since) = om::simulate(tmp.path(), &toml, "allocated");
    let exporter_pages = pages_per_minute(
        &openmetrics_with_holders(&gpu, &mig, &process, &["k8s-1", "mig-1"]),
        since,
    );
    let exporter = serve(
        exporter_pages,
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
    );
    let text = "text/plain; version=0.0.4; charset=utf-8";
    let vllm = serve(
        counter_pages(
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            "model_name=\"chat\"",
            since,
            50.0,
        ),
        text,
    );
    let triton = serve(
        counter_pages(
            "nv_inference_count",
            "Number of inferences performed (does not include cached requests)",
            "model=\"embed\",version=\"1\"",
            since,
            8.0,
        ),
        text,
    );
    // Out-of-order ingestion reaches back to the simulated day (plus a margin).
    let days_back = (chrono::Utc::now().timestamp_millis() - since) / 86_400_000 + 2;
    let (e, v, t) = (&exporter.addr, &vllm.addr, &triton.addr);
    let config = format!(
        "global:
  scrape_interval: 100ms
  scrape_timeout: 100ms
storage:
  tsdb:
    out_of_order_time_window: {days_back}d
scrape_configs:
- job_name: tessera-exporter
  honor_labels: true
  static_configs:
  - targets: ['{e}']
- job_name: vllm
  static_configs:
  - targets: ['{v}']
    labels: {{namespace: serving, pod: api-0}}
- job_name: triton
  static_configs:
  - targets: ['{t}']
    labels: {{namespace: research, pod: embed-0}}
"
    );
    let data = tmp.path().join("tsdb");
    let server = prom::start_with_config(tmp.path(), &data, &config);
    // Wait (a guard against a hang, not a bound on speed) until every page was scraped and the
    // last minute of each target is queryable.
    let last = since + (MINUTES as i64 - 1) * 60_000;
    let deadline = Instant::now() + Duration::from_secs(600);
    let stored = |q: &str| -> bool {
        let url = format!(
            "{}/api/v1/query?query={}&time={:.3}",
            server.url,
            q,
            last as f64 / 1000.0
        );
        ureq::get(&url)
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| {
                v["data"]["result"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty())
            })
    };
    loop {
        let done = [&exporter, &vllm, &triton]
            .iter()
            .all(|t| t.served.load(Ordering::SeqCst) >= MINUTES);
        if done
            && [
                "vllm:generation_tokens_total",
                "nv_inference_count",
                "tessera_gpu_pod_info",
            ]
            .iter()
            .all(|m| stored(&format!("timestamp({m})%3E%3D{}", last / 1000)))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the targets were not all scraped (served {:?}): {}",
            [&exporter, &vllm, &triton].map(|t| t.served.load(Ordering::SeqCst)),
            std::fs::read_to_string(tmp.path().join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let src = format!("prometheus:{}", server.url);
    let until = since + MINUTES as i64 * 60_000;
    let range = (rfc3339(since), rfc3339(until));
    let run =
        |format: &str| crate::support::cli::report(&src, (&range.0, &range.1), "60s", format, &[]);
    let r: Value = serde_json::from_str(&run("json")).unwrap();
    let w = &r["work"];
    let close = |f: &Value, want: f64| {
        let got = f["per_gpu_hour"]
            .as_f64()
            .unwrap_or_else(|| panic!("{f:#}"));
        assert!(
            (got - want).abs() <= want * 0.005,
            "{got} vs the planted {want}: {f:#}"
        );
        // Whole hours only: 3 h 20 min hold at most 3, and the first needs a sample before it.
        let hours = f["hours"].as_u64().unwrap_or_else(|| panic!("{f:#}"));
        assert!((2..=3).contains(&hours), "{hours} hours: {f:#}");
    };
    let serving = figure(w, "teams", "serving", "tokens");
    close(serving, 50.0 * 3600.0);
    assert!(
        (serving["gpu_hours"].as_f64().unwrap() - serving["hours"].as_f64().unwrap()).abs() < 0.05,
        "one GPU held the whole time: {serving:#}"
    );
    close(figure(w, "pods", "serving", "tokens"), 50.0 * 3600.0);
    close(
        figure(w, "teams", "research", "inferences"),
        8.0 * 3600.0 * 7.0 / 3.0,
    );
    // Per workload: api-0 and embed-0 are StatefulSet pods of `api` and `embed`.
    let workload = |name: &str| -> &Value {
        w["workloads"]
            .as_array()
            .unwrap_or_else(|| panic!("no workloads: {w:#}"))
            .iter()
            .find(|f| f["workload"] == name)
            .unwrap_or_else(|| panic!("no workload {name}: {w:#}"))
    };
    close(workload("api"), 50.0 * 3600.0);
    close(workload("embed"), 8.0 * 3600.0 * 7.0 / 3.0);
    // Per model: vLLM's `model_name` and Triton's `model`, each served by one pod alone.
    let model = |name: &str| -> &Value {
        w["models"]
            .as_array()
            .unwrap_or_else(|| panic!("no models: {w:#}"))
            .iter()
            .find(|f| f["model"] == name)
            .unwrap_or_else(|| panic!("no model {name}: {w:#}"))
    };
    close(model("chat"), 50.0 * 3600.0);
    assert_eq!(model("chat")["namespace"], "serving");
    close(model("embed"), 8.0 * 3600.0 * 7.0 / 3.0);
    let text_report = run("table");
    assert!(
        text_report.contains("Work per GPU-hour") && text_report.contains("serving/chat (model)"),
        "the section and its model rows are in the text report:\n{text_report}"
    );
    let no_work = &w["no_work_metric"];
    assert!(
        no_work
            .as_array()
            .is_some_and(|l| l.iter().any(|p| p == "notebooks/nb-alice")),
        "nb-alice holds a GPU and counts nothing: {no_work:?}"
    );
    assert!(
        w["teams"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["namespace"] != "notebooks"),
        "no work is never 0 work: {w:#}"
    );
}
