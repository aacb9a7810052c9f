//! The `prometheus:` source against a fake HTTP server (std `TcpListener` on 127.0.0.1:0 serving
//! canned Prometheus API JSON): errors, retries, timeouts, chunking, auth headers, partial data;
//! and the remote-read API's faults (not served, broken streams). Remote read's results are
//! tested against a real Prometheus (prometheus_real.rs, prometheus_rules.rs).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use polars::prelude::*;
use tessera::ingest::prometheus::Api;
use tessera::ingest::{self, IngestOptions, IngestReport, PrometheusOptions, Source};

/// One request the fake server saw.
#[derive(Debug, Clone)]
pub(super) struct Req {
    pub(super) path: String,
    pub(super) params: BTreeMap<String, String>,
    headers: BTreeMap<String, String>,
}

pub(super) type Handler = dyn Fn(&Req, usize) -> Option<(u16, String)> + Send + Sync;
/// Like [`Handler`], with the answer's content type and bytes.
type RawHandler = dyn Fn(&Req, usize) -> Option<(u16, &'static str, Vec<u8>)> + Send + Sync;

/// Serves `handler(request, index)`; `None` means never answer (hold the connection).
pub(super) struct Fake {
    pub(super) url: String,
    seen: Arc<Mutex<Vec<Req>>>,
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() + 1 => {
                let v = u8::from_str_radix(&s[i + 1..i + 3], 16).expect("hex");
                out.push(v);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).expect("utf8")
}

pub(super) fn serve(handler: Box<Handler>) -> Fake {
    serve_raw(Box::new(move |req, i| {
        handler(req, i).map(|(status, body)| (status, "application/json", body.into_bytes()))
    }))
}

fn serve_raw(handler: Box<RawHandler>) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut headers = BTreeMap::new();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = h.trim().split_once(':') {
                    headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
                }
            }
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            let params = query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect();
            let req = Req {
                path: path.to_string(),
                params,
                headers,
            };
            let index = {
                let mut s = seen2.lock().expect("lock");
                s.push(req.clone());
                s.len() - 1
            };
            let mut stream = stream;
            match handler(&req, index) {
                Some((status, ctype, body)) => {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(&body);
                    let _ = stream.flush();
                    let mut rest = Vec::new();
                    let _ = reader.read_to_end(&mut rest);
                }
                None => held.push(stream),
            }
        }
    });
    Fake { url, seen }
}

impl Fake {
    fn requests(&self) -> Vec<Req> {
        self.seen.lock().expect("lock").clone()
    }
}

pub(super) const BUSY: &str = "tessera_gpu_busy_ratio";

pub(super) fn names_body(names: &[&str]) -> String {
    serde_json::json!({"status": "success", "data": names}).to_string()
}

/// A matrix with one GPU series (value 0.5) for busy and memory queries, empty otherwise;
/// `skip` drops the series from request number `skip` on.
pub(super) fn matrix_for(req: &Req, warnings: &[&str]) -> String {
    let q = req.params.get("query").cloned().unwrap_or_default();
    let start: f64 = req.params["start"].parse().expect("start");
    let end: f64 = req.params["end"].parse().expect("end");
    let step: f64 = req.params["step"].parse().expect("step");
    let mut result = Vec::new();
    if q.contains(BUSY) || q.contains("tessera_gpu_memory_used_bytes") {
        let value = match scrape_window(&q) {
            // The scrape interval query: a sample every 10 s.
            Some(w) => format!("{}", w / 10_000),
            None if q.contains("count_over_time") => "10".to_string(),
            None if q.contains("memory") => "1000".to_string(),
            None => "0.5".to_string(),
        };
        let mut values = Vec::new();
        let mut t = start;
        while t <= end + 1e-9 {
            values.push(serde_json::json!([t, value]));
            t += step;
        }
        result.push(serde_json::json!({
            "metric": {"instance": "node-a:9835", "job": "tessera", "gpu": "0", "uuid": "GPU-a"},
            "values": values,
        }));
    }
    let mut v = serde_json::json!({
        "status": "success",
        "data": {"resultType": "matrix", "result": result},
    });
    if !warnings.is_empty() {
        v["warnings"] = serde_json::json!(warnings);
    }
    v.to_string()
}

/// The window of the source's scrape interval query (`count_over_time(m[Wms])` with W longer
/// than a row), ms.
fn scrape_window(q: &str) -> Option<i64> {
    let w: i64 = q
        .strip_prefix("count_over_time(")?
        .split_once('[')?
        .1
        .strip_suffix("ms])")?
        .parse()
        .ok()?;
    (w >= 60_000).then_some(w)
}

fn tessera_server() -> Fake {
    serve(Box::new(|req, _| {
        Some(if req.path.ends_with("/label/__name__/values") {
            (200, names_body(&[BUSY]))
        } else {
            (200, matrix_for(req, &[]))
        })
    }))
}

/// Options with an explicit 10 s interval: the canned series sit on a 10 s grid (the scrape
/// interval query's answers are tested on their own, below).
fn opts(since: i64, until: i64) -> IngestOptions<'static> {
    IngestOptions {
        since: Some(since),
        until: Some(until),
        interval_ms: Some(10_000),
        prometheus: PrometheusOptions {
            timeout: Duration::from_secs(2),
            backoff: Duration::from_millis(50),
            ..PrometheusOptions::default()
        },
        ..IngestOptions::default()
    }
}

fn run(url: &str, o: &IngestOptions) -> Result<(tessera::frames::Frames, IngestReport), String> {
    let src: Source = format!("prometheus:{url}")
        .parse()
        .map_err(|e| format!("{e}"))?;
    ingest::ingest(&[src], o).map_err(|e| e.to_string())
}

fn run_err(url: &str, o: &IngestOptions) -> String {
    match run(url, o) {
        Ok(_) => panic!("expected an error from {url}"),
        Err(e) => e,
    }
}

const T0: i64 = 1_793_577_600_000; // 2026-11-02T00:00:00Z

/// Work per GPU-hour: a server that refuses one unit's query (a declared counter it rejects)
/// costs that unit only; the built-in counters' work is kept, and the refusal is said.
#[test]
fn a_refused_work_query_costs_its_unit_only() {
    let fake = serve(Box::new(|req, _| {
        let q = req.params.get("query").cloned().unwrap_or_default();
        Some(if q.contains("trainer_steps_total") {
            (
                400,
                r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#.to_string(),
            )
        } else {
            let v = serde_json::json!({
                "status": "success",
                "data": {"resultType": "matrix", "result": [{
                    "metric": {"namespace": "serving", "pod": "api-0", "model_name": "chat", "model": "chat"},
                    "values": [[(T0 + 3_600_000) / 1000, "1000"]],
                }]},
            });
            (200, v.to_string())
        })
    }));
    let declared = [tessera::work::WorkMetric {
        unit: "steps".into(),
        counter: "trainer_steps_total".into(),
    }];
    let (rows, warnings) = tessera::ingest::prometheus::work_rows(
        &fake.url,
        &PrometheusOptions {
            timeout: Duration::from_secs(2),
            backoff: Duration::from_millis(50),
            ..PrometheusOptions::default()
        },
        (T0, T0 + 2 * 3_600_000),
        &declared,
    )
    .expect("the source answers");
    assert!(
        rows.iter()
            .any(|r| r.unit == "tokens" && r.amount == 1000.0),
        "{rows:?}"
    );
    assert!(rows.iter().all(|r| r.unit != "steps"), "{rows:?}");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("steps left out:"), "{warnings:?}");
}

/// A server whose names API lists none of the series its queries answer (Prometheus' answer for
/// samples stored out of order, kept apart from its head's index until compacted): the source
/// asks each family's series before it says there is nothing, and reads the rows.
#[test]
fn series_the_names_api_does_not_list_are_still_found_and_read() {
    let fake = serve(Box::new(|req, _| {
        Some(if req.path.ends_with("/label/__name__/values") {
            (200, names_body(&[]))
        } else {
            (200, matrix_for(req, &[]))
        })
    }));
    let (_, report) = run(&fake.url, &opts(T0 - 10_000, T0 + 50_000)).expect("ingest");
    assert_eq!(
        report.tables[&tessera::frames::Table::Gpu].rows,
        6,
        "{:?}",
        report.warnings
    );
    let asked = fake
        .requests()
        .iter()
        .filter(|r| {
            r.params
                .get("query")
                .is_some_and(|q| q.starts_with("count(count_over_time("))
        })
        .count();
    assert!(asked >= 1, "the family's series were asked");
}

#[test]
fn reads_a_tessera_gpu_series_into_the_gpu_frame() {
    let fake = tessera_server();
    // Rows ending in (since, until]: the first ends one step after `since`.
    let (frames, report) = run(&fake.url, &opts(T0 - 10_000, T0 + 50_000)).expect("ingest");
    assert_eq!(report.tables[&tessera::frames::Table::Gpu].rows, 6);
    assert_eq!(
        report.tables[&tessera::frames::Table::Gpu].first_ts,
        Some(T0)
    );
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("tessera-exporter")),
        "{:?}",
        report.warnings
    );
    let df = frames.gpu.collect().expect("collect");
    let node = df.column("node").expect("node").str().expect("str").get(0);
    assert_eq!(node, Some("node-a"));
    let busy = df.column("busy_max").expect("c").f64().expect("f").get(0);
    assert_eq!(busy, Some(0.5));
    let mem = df.column("memory_used_max_bytes").expect("c");
    assert_eq!(mem.u64().expect("u").get(0), Some(1000));
    let samples = df.column("samples").expect("c").u32().expect("u").get(0);
    assert_eq!(samples, Some(10));
    // Queries aggregate (ts - step, ts]: a range of step - 1 ms.
    let reqs = fake.requests();
    let q = reqs
        .iter()
        .find_map(|r| r.params.get("query").filter(|q| q.contains(BUSY)))
        .expect("a busy query");
    assert!(q.contains("[9999ms]"), "{q}");
}

#[test]
fn client_error_names_the_query_and_status_without_retrying() {
    let fake = serve(Box::new(|req, _| {
        Some(if req.path.ends_with("/values") {
            (200, names_body(&[BUSY]))
        } else {
            (
                400,
                r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#
                    .to_string(),
            )
        })
    }));
    let e = run_err(&fake.url, &opts(T0, T0 + 60_000));
    assert!(e.contains("HTTP 400"), "{e}");
    assert!(e.contains("parse error at char 3"), "{e}");
    // The first query is the scrape interval's.
    assert!(
        e.contains("count_over_time(tessera_gpu_memory_used_bytes[60000ms])"),
        "{e}"
    );
    assert_eq!(fake.requests().len(), 2, "no retry on 4xx");
}

#[test]
fn server_error_is_retried_then_succeeds() {
    let fake = serve(Box::new(|req, i| {
        Some(if i < 2 {
            (503, "overloaded".to_string())
        } else if req.path.ends_with("/values") {
            (200, names_body(&[BUSY]))
        } else {
            (200, matrix_for(req, &[]))
        })
    }));
    let (_, report) = run(&fake.url, &opts(T0, T0 + 60_000)).expect("retried");
    assert_eq!(report.tables[&tessera::frames::Table::Gpu].rows, 6);
    assert!(
        fake.requests()[..3]
            .iter()
            .all(|r| r.path.ends_with("/values"))
    );
}

#[test]
fn server_error_forever_fails_after_the_attempts() {
    let fake = serve(Box::new(|_, _| Some((500, "boom".to_string()))));
    let e = run_err(&fake.url, &opts(T0, T0 + 60_000));
    assert!(e.contains("failed after 3 attempt(s)"), "{e}");
    assert!(e.contains("HTTP 500: boom"), "{e}");
    assert_eq!(fake.requests().len(), 3);
}

#[test]
fn a_server_that_never_answers_times_out() {
    let fake = serve(Box::new(|_, _| None));
    let mut o = opts(T0, T0 + 60_000);
    o.prometheus.timeout = Duration::from_millis(500);
    let e = run_err(&fake.url, &o);
    // It gave up after three attempts that each timed out (no wall-clock bound: the count of
    // attempts and the error say the timeout worked).
    assert!(e.contains("failed after 3 attempt(s)"), "{e}");
    assert!(e.to_lowercase().contains("timeout"), "{e}");
    assert_eq!(fake.requests().len(), 3);
}

#[test]
fn long_ranges_are_chunked_within_the_point_limit() {
    let fake = tessera_server();
    let mut o = opts(T0, T0 + 1_000 * 10_000);
    o.prometheus.max_points = 300;
    let (_, report) = run(&fake.url, &o).expect("ingest");
    assert_eq!(report.tables[&tessera::frames::Table::Gpu].rows, 1_000);
    let reqs = fake.requests();
    // Without the scrape interval queries (one per table, hourly windows).
    let ranges: Vec<&Req> = reqs
        .iter()
        .filter(|r| r.path.ends_with("/query_range") && scrape_window(&r.params["query"]).is_none())
        .collect();
    let per_query: BTreeMap<&str, usize> = ranges.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.params["query"].as_str()).or_default() += 1;
        m
    });
    // 1000 points in chunks of ≤ 300: 4 requests per query.
    assert!(per_query.values().all(|n| *n == 4), "{per_query:?}");
    for r in &ranges {
        let s: f64 = r.params["start"].parse().expect("s");
        let e: f64 = r.params["end"].parse().expect("e");
        let points = ((e - s) / 10.0).round() as i64 + 1;
        assert!(points <= 300, "{points}");
        assert_eq!(r.params["step"], "10.000");
    }
}

#[test]
fn bearer_and_basic_auth_headers_are_sent() {
    let dir = tempfile::tempdir().expect("tmp");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret-token\n").expect("w");
    let fake = tessera_server();
    let mut o = opts(T0, T0 + 20_000);
    o.prometheus.bearer_token_file = Some(token);
    run(&fake.url, &o).expect("bearer");
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.headers.get("authorization").map(String::as_str)
                == Some("Bearer s3cret-token"))
    );

    let pass = dir.path().join("pass");
    std::fs::write(&pass, "open sesame").expect("w");
    let fake = tessera_server();
    let mut o = opts(T0, T0 + 20_000);
    o.prometheus.basic_auth = Some(("ali".into(), pass));
    run(&fake.url, &o).expect("basic");
    // base64("ali:open sesame")
    let want = "Basic YWxpOm9wZW4gc2VzYW1l";
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.headers.get("authorization").map(String::as_str) == Some(want))
    );

    // user:pass in the URL.
    let fake = tessera_server();
    let url = fake.url.replace("http://", "http://ali:open%20sesame@");
    run(&url, &opts(T0, T0 + 20_000)).expect("url auth");
    assert!(
        fake.requests()
            .iter()
            .all(|r| r.headers.get("authorization").map(String::as_str) == Some(want))
    );
}

#[test]
fn partial_data_is_reported_with_counts() {
    // Server warnings on every range query, and the series missing from the middle chunk.
    let fake = serve(Box::new(|req, _| {
        if req.path.ends_with("/values") {
            return Some((200, names_body(&[BUSY])));
        }
        let start: f64 = req.params["start"].parse().expect("s");
        let ms = (start * 1000.0) as i64;
        let middle = (T0 + 100_000..T0 + 200_000).contains(&ms);
        let body = if middle {
            serde_json::json!({"status": "success", "data": {"resultType": "matrix", "result": []},
                "warnings": ["store gateway 2 unreachable"]})
            .to_string()
        } else {
            matrix_for(req, &["store gateway 2 unreachable"])
        };
        Some((200, body))
    }));
    let mut o = opts(T0, T0 + 300_000);
    o.prometheus.max_points = 10;
    let (_, report) = run(&fake.url, &o).expect("ingest");
    assert_eq!(report.tables[&tessera::frames::Table::Gpu].rows, 20);
    let ranges = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/query_range"))
        .count() as u64;
    let w = report.warnings.join("\n");
    assert!(
        w.contains(&format!(
            "partial data: the server warned in {ranges} response(s): store gateway 2 unreachable"
        )),
        "{w}"
    );
    assert!(
        w.contains(
            "1 series of \"avg_over_time(tessera_gpu_busy_ratio[9999ms])\" missing from chunks"
        ),
        "{w}"
    );
    assert_eq!(
        report.skipped["prometheus: responses with warnings"],
        ranges
    );
    assert!(report.skipped["prometheus: series with missing chunks"] >= 1);
}

#[test]
fn dcgm_and_nvidia_smi_families_are_detected_and_scaled() {
    let fake = serve(Box::new(|req, _| {
        if req.path.ends_with("/values") {
            return Some((
                200,
                names_body(&["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"]),
            ));
        }
        let q = &req.params["query"];
        let value = if q.contains("GPU_UTIL") {
            "45"
        } else if q.contains("FB_USED") && q.contains("FB_FREE") {
            "81559"
        } else if q.contains("FB_USED") {
            "1024"
        } else {
            return Some((200, serde_json::json!({"status": "success", "data": {"resultType": "matrix", "result": []}}).to_string()));
        };
        let body = serde_json::json!({"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"gpu": "1", "UUID": "GPU-d", "Hostname": "dgx-7", "modelName": "NVIDIA H100 80GB HBM3", "instance": "10.0.0.7:9400"},
             "values": [[req.params["start"].parse::<f64>().expect("s"), value]]},
            {"metric": {"gpu": "1", "UUID": "GPU-d", "Hostname": "dgx-7", "GPU_I_ID": "2", "GPU_I_PROFILE": "3g.40gb"},
             "values": [[req.params["start"].parse::<f64>().expect("s"), value]]}
        ]}});
        Some((200, body.to_string()))
    }));
    let (frames, report) = run(&fake.url, &opts(T0, T0 + 10_000)).expect("ingest");
    assert!(report.warnings.iter().any(|w| w.contains("dcgm-exporter")));
    let df = frames.gpu.collect().expect("gpu");
    assert_eq!(df.height(), 1);
    let f = |c: &str| {
        df.column(c)
            .expect("c")
            .cast(&DataType::Float64)
            .expect("f")
            .f64()
            .expect("f")
            .get(0)
    };
    assert_eq!(f("busy_mean"), Some(0.45));
    assert_eq!(f("memory_used_max_bytes"), Some(1024.0 * 1_048_576.0));
    assert_eq!(f("memory_total_bytes"), Some(81559.0 * 1_048_576.0));
    let s = |c: &str| {
        df.column(c)
            .expect("c")
            .str()
            .expect("s")
            .get(0)
            .map(str::to_string)
    };
    assert_eq!(s("node").as_deref(), Some("dgx-7"));
    assert_eq!(s("uuid").as_deref(), Some("GPU-d"));
    assert_eq!(s("model").as_deref(), Some("NVIDIA H100 80GB HBM3"));
    let mig = frames.mig.collect().expect("mig");
    assert_eq!(mig.height(), 1);
    let p = mig.column("profile").expect("p").str().expect("s").get(0);
    assert_eq!(p, Some("3g.40gb"));
}

/// What a fake server answers per query: the series (labels, value) present at every step.
type SeriesFn = dyn Fn(&str) -> Vec<(serde_json::Value, &'static str)> + Send + Sync;

/// A server whose metric names are `names` and whose range queries return, at every step of the
/// request, the series `series(query)` gives (an empty list: no series).
fn serve_series(names: &'static [&'static str], series: Box<SeriesFn>) -> Fake {
    serve(Box::new(move |req, _| {
        if req.path.ends_with("/values") {
            return Some((200, names_body(names)));
        }
        let q = &req.params["query"];
        let start: f64 = req.params["start"].parse().expect("start");
        let end: f64 = req.params["end"].parse().expect("end");
        let step: f64 = req.params["step"].parse().expect("step");
        // The scrape interval query: the same series, a sample every 10 s.
        let window = scrape_window(q);
        let q = match window {
            Some(_) => q.replace("count_over_time(", "max_over_time("),
            None => q.clone(),
        };
        let result: Vec<serde_json::Value> = series(&q)
            .into_iter()
            .map(|(metric, value)| {
                let value = match window {
                    Some(w) => format!("{}", w / 10_000),
                    None => value.to_string(),
                };
                let mut values = Vec::new();
                let mut t = start;
                while t <= end + 1e-9 {
                    values.push(serde_json::json!([t, value]));
                    t += step;
                }
                serde_json::json!({"metric": metric, "values": values})
            })
            .collect();
        Some((
            200,
            serde_json::json!({"status": "success",
                "data": {"resultType": "matrix", "result": result}})
            .to_string(),
        ))
    }))
}

fn col_f64(df: &DataFrame, c: &str) -> Vec<Option<f64>> {
    df.column(c)
        .expect("column")
        .cast(&DataType::Float64)
        .expect("cast")
        .f64()
        .expect("f64")
        .iter()
        .collect()
}

fn col_str(df: &DataFrame, c: &str) -> Vec<Option<String>> {
    df.column(c)
        .expect("column")
        .str()
        .expect("str")
        .iter()
        .map(|s| s.map(str::to_string))
        .collect()
}

/// dcgm-exporter with Kubernetes mapping: GPU 0 given to pod `chat-0` (idle, 20 GiB held), GPU 1
/// without a pod, and MIG instance 2 of GPU 1 given to a pod under the old label names.
fn dcgm_pods_server(energy_and_xid: bool) -> Fake {
    serve_series(
        &["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"],
        Box::new(move |q| {
            let gpu0 = serde_json::json!({"gpu": "0", "UUID": "GPU-a", "Hostname": "dgx-1",
                "modelName": "NVIDIA H100 80GB HBM3", "pod": "chat-0", "namespace": "serving",
                "container": "main"});
            // An empty pod label (e.g. left by relabelling) is no pod.
            let gpu1 =
                serde_json::json!({"gpu": "1", "UUID": "GPU-b", "Hostname": "dgx-1", "pod": ""});
            let mig = serde_json::json!({"gpu": "1", "UUID": "GPU-b", "Hostname": "dgx-1",
                "GPU_I_ID": "2", "GPU_I_PROFILE": "3g.40gb", "pod_name": "embed-0",
                "pod_namespace": "research", "container_name": "worker"});
            let all =
                |v: &'static str| vec![(gpu0.clone(), v), (gpu1.clone(), v), (mig.clone(), v)];
            if q.contains("FB_USED") && q.contains("FB_FREE") {
                all("81559")
            } else if q.starts_with("count_over_time(DCGM_FI_DEV_FB_USED") {
                all("2")
            } else if q.starts_with("max_over_time(DCGM_FI_DEV_FB_USED") {
                all("20480")
            } else if q.contains("DCGM_FI_DEV_GPU_UTIL") {
                vec![(gpu0.clone(), "0"), (gpu1.clone(), "0")]
            } else if q.contains("DCGM_FI_PROF_SM_ACTIVE") {
                vec![(mig.clone(), "0")]
            } else if energy_and_xid && q.contains("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") {
                vec![(gpu0.clone(), "2500")]
            } else if energy_and_xid && q.contains("DCGM_FI_DEV_XID_ERRORS") {
                vec![(gpu0.clone(), "1")]
            } else {
                Vec::new()
            }
        }),
    )
}

#[test]
fn dcgm_pod_labels_become_process_rows_and_the_idle_pod_is_one_entity() {
    let fake = dcgm_pods_server(false);
    let (frames, report) = run(&fake.url, &opts(T0, T0 + 2 * 3_600_000)).expect("ingest");
    let steps = 720;
    assert_eq!(report.tables[&tessera::frames::Table::Gpu].rows, 2 * steps);
    assert_eq!(report.tables[&tessera::frames::Table::Mig].rows, steps);
    assert_eq!(
        report.tables[&tessera::frames::Table::Process].rows,
        2 * steps
    );
    let p = frames
        .process
        .clone()
        .sort(["pod", "ts"], SortMultipleOptions::default())
        .collect()
        .expect("process");
    assert_eq!(
        col_str(&p, "pod")[0].as_deref(),
        Some("chat-0"),
        "{:?}",
        col_str(&p, "pod")
    );
    assert_eq!(col_str(&p, "namespace")[0].as_deref(), Some("serving"));
    assert_eq!(col_str(&p, "uuid")[0].as_deref(), Some("GPU-a"));
    assert_eq!(col_f64(&p, "gpu")[0], Some(0.0));
    assert_eq!(col_f64(&p, "gpu_instance")[0], None);
    assert_eq!(col_f64(&p, "pid")[0], None);
    assert_eq!(col_str(&p, "process")[0], None);
    assert_eq!(
        col_f64(&p, "memory_used_max_bytes")[0],
        Some(20480.0 * 1_048_576.0)
    );
    assert_eq!(col_f64(&p, "samples")[0], Some(2.0));
    // dcgm-exporter has no per-process utilisation: null, never a copy of the GPU's.
    assert!(col_f64(&p, "sm_max").iter().all(Option::is_none));
    // The MIG instance's pod, under the old label names.
    let last = p.height() - 1;
    assert_eq!(col_str(&p, "pod")[last].as_deref(), Some("embed-0"));
    assert_eq!(col_str(&p, "namespace")[last].as_deref(), Some("research"));
    assert_eq!(col_f64(&p, "gpu_instance")[last], Some(2.0));
    // No energy or XID series: null, not 0.
    let g = frames.gpu.clone().collect().expect("gpu");
    assert!(
        col_f64(&g, "energy_delta_joules")
            .iter()
            .all(Option::is_none)
    );
    assert!(col_f64(&g, "xid_count").iter().all(Option::is_none));

    // The idle detector sees the pod (GPU 0) and GPU 1 as a whole GPU, not GPU 0 twice.
    let ents = tessera::advisor::idle::idle_entities(
        &frames,
        &tessera::advisor::idle::IdleParams::default(),
    )
    .expect("idle");
    let on_a: Vec<_> = ents
        .iter()
        .filter(|e| e.entity.uuid.as_deref() == Some("GPU-a"))
        .collect();
    assert_eq!(on_a.len(), 1, "{on_a:?}");
    let e = &on_a[0].entity;
    assert_eq!(e.kind, "process");
    assert_eq!(e.pod.as_deref(), Some("chat-0"));
    assert_eq!(e.namespace.as_deref(), Some("serving"));
    assert_eq!(e.pid, None);
    assert_eq!(on_a[0].activity_source, "gpu_busy");
    assert_eq!(on_a[0].spans.len(), 1, "{:?}", on_a[0].spans);
    let mig_pod: Vec<_> = ents
        .iter()
        .filter(|e| e.entity.uuid.as_deref() == Some("GPU-b") && e.entity.gpu_instance == Some(2))
        .collect();
    assert_eq!(mig_pod.len(), 1, "{mig_pod:?}");
    assert_eq!(mig_pod[0].entity.kind, "process");
    assert_eq!(mig_pod[0].entity.pod.as_deref(), Some("embed-0"));
    assert_eq!(mig_pod[0].activity_source, "mig_sm_active");
}

#[test]
fn dcgm_energy_is_millijoules_and_xid_changes_are_counted() {
    let fake = dcgm_pods_server(true);
    let (frames, _) = run(&fake.url, &opts(T0, T0 + 60_000)).expect("ingest");
    let g = frames
        .gpu
        .clone()
        .sort(["uuid", "ts"], SortMultipleOptions::default())
        .collect()
        .expect("gpu");
    // Counters never make rows of their own: still one row per GPU and step.
    assert_eq!(g.height(), 12);
    let uuid = col_str(&g, "uuid");
    let energy = col_f64(&g, "energy_delta_joules");
    let xid = col_f64(&g, "xid_count");
    for i in 0..g.height() {
        if uuid[i].as_deref() == Some("GPU-a") {
            assert_eq!(energy[i], Some(2.5));
            assert_eq!(xid[i], Some(1.0));
        } else {
            assert_eq!((energy[i], xid[i]), (None, None));
        }
    }
    let reqs = fake.requests();
    let queries: Vec<&str> = reqs
        .iter()
        .filter_map(|r| r.params.get("query").map(String::as_str))
        .collect();
    let energy_q = queries
        .iter()
        .find(|q| q.contains("TOTAL_ENERGY"))
        .expect("energy query");
    assert_eq!(
        *energy_q,
        "clamp_min(last_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[9999ms]) - \
         last_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[300000ms] offset 10000ms), 0) \
         or (max_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[9999ms]) - \
         min_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[9999ms]))"
    );
    let xid_q = queries
        .iter()
        .find(|q| q.contains("XID"))
        .expect("xid query");
    assert_eq!(
        *xid_q,
        "(changes(DCGM_FI_DEV_XID_ERRORS[310000ms]) - changes(DCGM_FI_DEV_XID_ERRORS[300000ms] \
         offset 10000ms)) or changes(DCGM_FI_DEV_XID_ERRORS[9999ms])"
    );
    // FB_USED feeds GPU, MIG and pod rows through one request per chunk.
    let fb = queries
        .iter()
        .filter(|q| q.starts_with("max_over_time(DCGM_FI_DEV_FB_USED"))
        .count();
    assert_eq!(fb, 1);
}

#[test]
fn tessera_energy_and_xid_counters_fill_their_columns() {
    let fake = serve_series(
        &[BUSY],
        Box::new(|q| {
            let l = serde_json::json!({"instance": "node-a:9835", "gpu": "0", "uuid": "GPU-a"});
            if q.contains("tessera_gpu_energy_joules_total") {
                vec![(l, "1234.5")]
            } else if q.contains("tessera_gpu_xid_errors_total") {
                vec![(l, "3")]
            } else if q.contains(BUSY) {
                vec![(l, "0.5")]
            } else {
                Vec::new()
            }
        }),
    );
    let (frames, _) = run(&fake.url, &opts(T0, T0 + 30_000)).expect("ingest");
    let g = frames.gpu.collect().expect("gpu");
    assert_eq!(g.height(), 3);
    assert!(
        col_f64(&g, "energy_delta_joules")
            .iter()
            .all(|v| *v == Some(1234.5))
    );
    assert!(col_f64(&g, "xid_count").iter().all(|v| *v == Some(3.0)));
    let reqs = fake.requests();
    let xid_q = reqs
        .iter()
        .filter_map(|r| r.params.get("query"))
        .find(|q| q.contains("xid"))
        .expect("xid query");
    assert!(xid_q.starts_with("sum without (xid) ("), "{xid_q}");
}

/// One GPU's columns of the gpu frame (sorted by uuid) as (column, values per row).
fn gpu_cols(df: &DataFrame, cols: &[&str], uuid: &str) -> Vec<(String, Vec<Option<f64>>)> {
    let u = col_str(df, "uuid");
    cols.iter()
        .map(|c| {
            let v = col_f64(df, c)
                .into_iter()
                .zip(&u)
                .filter(|(_, x)| x.as_deref() == Some(uuid))
                .map(|(v, _)| v)
                .collect();
            (c.to_string(), v)
        })
        .collect()
}

/// GPM's profiling columns (history format version 2) and the value each fake server gives.
const GPM_COLUMNS: [(&str, f64); 9] = [
    ("tensor_active_mean", 0.02),
    ("tensor_active_max", 0.04),
    ("dram_active_mean", 0.03),
    ("fp64_active_mean", 0.001),
    ("fp32_active_mean", 0.05),
    ("fp16_active_mean", 0.002),
    ("integer_active_mean", 0.2),
    ("nvlink_tx_mean_bytes_per_second", 1_048_576.0),
    ("nvlink_rx_mean_bytes_per_second", 2_097_152.0),
];

/// The GPM columns of the H100 `GPU-h` carry the served values in every row; those of the A100
/// `GPU-a` (no GPM series) are null in every row, never 0; the MIG instance has its tensor and
/// DRAM activity.
fn assert_gpm_columns(frames: &tessera::frames::Frames) {
    let g = frames
        .gpu
        .clone()
        .sort(["uuid", "ts"], SortMultipleOptions::default())
        .collect()
        .expect("gpu");
    let cols: Vec<&str> = GPM_COLUMNS.iter().map(|(c, _)| *c).collect();
    for ((c, got), (_, want)) in gpu_cols(&g, &cols, "GPU-h").into_iter().zip(GPM_COLUMNS) {
        assert!(
            !got.is_empty() && got.iter().all(|v| *v == Some(want)),
            "GPU-h {c}: {got:?}"
        );
    }
    for (c, got) in gpu_cols(&g, &cols, "GPU-a") {
        assert!(
            !got.is_empty() && got.iter().all(Option::is_none),
            "GPU-a {c}: {got:?}"
        );
    }
    let m = frames.mig.clone().collect().expect("mig");
    assert!(m.height() > 0);
    assert!(
        col_f64(&m, "tensor_active_mean")
            .iter()
            .all(|v| *v == Some(0.4))
    );
    assert!(
        col_f64(&m, "dram_active_mean")
            .iter()
            .all(|v| *v == Some(0.5))
    );
}

#[test]
fn gpm_pipes_from_tessera_names_and_null_without_them() {
    let fake = serve_series(
        &[BUSY],
        Box::new(|q| {
            let l = |gpu: &str, uuid: &str| serde_json::json!({"instance": "node-a:9835", "gpu": gpu, "uuid": uuid});
            let (h100, a100) = (l("0", "GPU-h"), l("1", "GPU-a"));
            let mig = serde_json::json!({"instance": "node-a:9835", "gpu": "0", "uuid": "GPU-h",
                "gpu_instance": "1", "compute_instance": "0", "profile": "3g.40gb"});
            let h = |v: &'static str| vec![(h100.clone(), v)];
            let pipe =
                |p: &str| q.contains(&format!("tessera_gpu_pipe_active_ratio{{pipe=\"{p}\""));
            if q.contains("tessera_gpu_memory_used_bytes") {
                let v = if q.starts_with("count") { "10" } else { "1000" };
                vec![(h100.clone(), v), (a100.clone(), v)]
            } else if q.contains(BUSY) {
                vec![(h100.clone(), "0.9"), (a100.clone(), "0.9")]
            } else if q.starts_with("max_over_time(tessera_gpu_tensor_active_ratio") {
                h("0.04")
            } else if q.contains("tessera_gpu_tensor_active_ratio") {
                h("0.02")
            } else if q.contains("tessera_gpu_dram_active_ratio") {
                h("0.03")
            } else if pipe("fp64") {
                h("0.001")
            } else if pipe("fp32") {
                h("0.05")
            } else if pipe("fp16") {
                h("0.002")
            } else if pipe("integer") {
                h("0.2")
            } else if q.contains("tessera_gpu_nvlink_transmit_bytes_per_second") {
                h("1048576")
            } else if q.contains("tessera_gpu_nvlink_receive_bytes_per_second") {
                h("2097152")
            } else if q.contains("tessera_mig_memory_used_bytes") {
                vec![(
                    mig.clone(),
                    if q.starts_with("count") { "10" } else { "1000" },
                )]
            } else if q.contains("tessera_mig_tensor_active_ratio") {
                vec![(mig.clone(), "0.4")]
            } else if q.contains("tessera_mig_dram_active_ratio") {
                vec![(mig.clone(), "0.5")]
            } else {
                Vec::new()
            }
        }),
    );
    let (frames, _) = run(&fake.url, &opts(T0, T0 + 60_000)).expect("ingest");
    assert_gpm_columns(&frames);
    // The non-tensor pipes are one family, selected by its `pipe` label.
    let reqs = fake.requests();
    for p in ["fp64", "fp32", "fp16", "integer"] {
        assert!(
            reqs.iter()
                .filter_map(|r| r.params.get("query"))
                .any(|q| q.starts_with(&format!(
                    "avg_over_time(tessera_gpu_pipe_active_ratio{{pipe=\"{p}\""
                ))),
            "no query for pipe {p}"
        );
    }
}

#[test]
fn gpm_pipes_from_dcgm_names_and_null_without_them() {
    let fake = serve_series(
        &["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"],
        Box::new(|q| {
            let l = |gpu: &str, uuid: &str| serde_json::json!({"gpu": gpu, "UUID": uuid, "Hostname": "dgx-1"});
            let (h100, a100) = (l("0", "GPU-h"), l("1", "GPU-a"));
            let mig = serde_json::json!({"gpu": "0", "UUID": "GPU-h", "Hostname": "dgx-1",
                "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"});
            let all =
                |v: &'static str| vec![(h100.clone(), v), (a100.clone(), v), (mig.clone(), v)];
            let h = |v: &'static str| vec![(h100.clone(), v)];
            if q.contains("FB_USED") && q.contains("FB_FREE") {
                all("81559")
            } else if q.starts_with("count_over_time(DCGM_FI_DEV_FB_USED") {
                all("2")
            } else if q.contains("DCGM_FI_DEV_FB_USED") {
                all("20480")
            } else if q.contains("DCGM_FI_DEV_GPU_UTIL") {
                vec![(h100.clone(), "90"), (a100.clone(), "90")]
            } else if q.starts_with("max_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") {
                vec![(h100.clone(), "0.04"), (mig.clone(), "0.4")]
            } else if q.contains("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") {
                vec![(h100.clone(), "0.02"), (mig.clone(), "0.4")]
            } else if q.contains("DCGM_FI_PROF_DRAM_ACTIVE") {
                vec![(h100.clone(), "0.03"), (mig.clone(), "0.5")]
            } else if q.contains("DCGM_FI_PROF_PIPE_FP64_ACTIVE") {
                h("0.001")
            } else if q.contains("DCGM_FI_PROF_PIPE_FP32_ACTIVE") {
                h("0.05")
            } else if q.contains("DCGM_FI_PROF_PIPE_FP16_ACTIVE") {
                h("0.002")
            } else if q.contains("DCGM_FI_PROF_PIPE_INT_ACTIVE") {
                h("0.2")
            } else if q.contains("DCGM_FI_PROF_NVLINK_TX_BYTES") {
                h("1048576")
            } else if q.contains("DCGM_FI_PROF_NVLINK_RX_BYTES") {
                h("2097152")
            } else {
                Vec::new()
            }
        }),
    );
    let (frames, report) = run(&fake.url, &opts(T0, T0 + 60_000)).expect("ingest");
    assert!(report.warnings.iter().any(|w| w.contains("dcgm-exporter")));
    assert_gpm_columns(&frames);
    // The instance's tensor and DRAM series are the GPU's names with `GPU_I_ID`: one query
    // feeds both tables.
    let reqs = fake.requests();
    let tensor = reqs
        .iter()
        .filter_map(|r| r.params.get("query"))
        .filter(|q| q.starts_with("avg_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"))
        .count();
    assert_eq!(tensor, 1);
}

#[test]
fn nvidia_gpu_exporter_real_names_and_units() {
    // As nvidia_gpu_exporter writes them (its docs/METRICS.md and integration test data): UUIDs
    // lower case without `GPU-`, ratios 0–1, bytes, the index and name only on nvidia_smi_gpu_info,
    // energy and XIDs as counters (NVML backend), processes with `pid` and `process_name`.
    let fake = serve_series(
        &[
            "nvidia_smi_utilization_gpu_ratio",
            "nvidia_smi_memory_used_bytes",
        ],
        Box::new(|q| {
            let u = serde_json::json!({"uuid": "df6e7a7c-7314-46f8-abc4-b88b36dcf3aa",
                "instance": "ws-3:9835", "job": "nvidia_gpu_exporter"});
            let value = if q.contains("nvidia_smi_gpu_info") {
                let mut info = u.clone();
                info["name"] = "NVIDIA GeForce RTX 2080 SUPER".into();
                info["index"] = "3".into();
                info["driver_version"] = "471.11".into();
                return vec![(info, "1")];
            } else if q.contains("nvidia_smi_compute_app_used_memory_bytes") {
                let mut app = u.clone();
                app["pid"] = "10291".into();
                app["process_name"] = "/root/tools/memhog".into();
                let v = if q.starts_with("count") {
                    "4"
                } else {
                    "2.690646016e+09"
                };
                return vec![(app, v)];
            } else if q.contains("nvidia_smi_utilization_gpu_ratio") {
                "0.42"
            } else if q.contains("nvidia_smi_utilization_memory_ratio") {
                "0.11"
            } else if q.starts_with("count_over_time(nvidia_smi_memory_used_bytes") {
                "4"
            } else if q.contains("nvidia_smi_memory_used_bytes") {
                "7.06740224e+08"
            } else if q.contains("nvidia_smi_memory_total_bytes") {
                "8.589934592e+09"
            } else if q.contains("nvidia_smi_power_draw_watts") {
                "28.07"
            } else if q.contains("nvidia_smi_temperature_gpu") {
                "34"
            } else if q.contains("nvidia_smi_energy_joules_total") {
                "280.7"
            } else {
                return Vec::new();
            };
            vec![(u, value)]
        }),
    );
    let (frames, report) = run(&fake.url, &opts(T0, T0 + 20_000)).expect("ingest");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("read nvidia_gpu_exporter metrics")),
        "{:?}",
        report.warnings
    );
    let g = frames.gpu.collect().expect("gpu");
    assert_eq!(g.height(), 2);
    assert_eq!(
        col_str(&g, "uuid")[0].as_deref(),
        Some("GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa")
    );
    assert_eq!(col_str(&g, "node")[0].as_deref(), Some("ws-3"));
    assert_eq!(col_f64(&g, "gpu")[0], Some(3.0));
    assert_eq!(
        col_str(&g, "model")[0].as_deref(),
        Some("NVIDIA GeForce RTX 2080 SUPER")
    );
    assert_eq!(col_f64(&g, "busy_mean")[0], Some(0.42));
    assert_eq!(col_f64(&g, "busy_max")[0], Some(0.42));
    assert_eq!(col_f64(&g, "memory_controller_mean")[0], Some(0.11));
    assert_eq!(col_f64(&g, "memory_used_max_bytes")[0], Some(706_740_224.0));
    assert_eq!(col_f64(&g, "memory_total_bytes")[0], Some(8_589_934_592.0));
    assert_eq!(col_f64(&g, "power_mean_watts")[0], Some(28.07));
    assert_eq!(col_f64(&g, "temperature_max_celsius")[0], Some(34.0));
    assert_eq!(col_f64(&g, "energy_delta_joules")[0], Some(280.7));
    assert_eq!(col_f64(&g, "samples")[0], Some(4.0));
    // No XID series (no event since the exporter started, or the nvidia-smi backend): null.
    assert_eq!(col_f64(&g, "xid_count")[0], None);
    let p = frames.process.collect().expect("process");
    assert_eq!(p.height(), 2);
    assert_eq!(col_f64(&p, "pid")[0], Some(10291.0));
    assert_eq!(
        col_str(&p, "process")[0].as_deref(),
        Some("/root/tools/memhog")
    );
    assert_eq!(
        col_str(&p, "uuid")[0].as_deref(),
        Some("GPU-df6e7a7c-7314-46f8-abc4-b88b36dcf3aa")
    );
    assert_eq!(
        col_f64(&p, "memory_used_max_bytes")[0],
        Some(2_690_646_016.0)
    );
}

#[test]
fn nvidia_gpu_exporter_mig_instances_and_mode() {
    // The NVML backend's per-GPU-instance series (its docs/METRICS.md): memory and activity
    // labelled `uuid`, `gpu_instance_id`; identity on `nvidia_smi_mig_info`.
    let fake = serve_series(
        &["nvidia_smi_memory_used_bytes"],
        Box::new(|q| {
            let u = serde_json::json!({"uuid": "aa11bb22-0000-1111-2222-333344445555",
                "instance": "h100-1:9835"});
            let mut gi = u.clone();
            gi["gpu_instance_id"] = "1".into();
            let value = if q.contains("nvidia_smi_mig_info") {
                let mut info = gi.clone();
                info["mig_uuid"] = "MIG-0d5a8c2e-1111-2222-3333-444455556666".into();
                info["compute_instance_id"] = "0".into();
                info["profile"] = "3g.40gb".into();
                return vec![(info, "1")];
            } else if q.starts_with("count_over_time(nvidia_smi_mig_memory_used_bytes") {
                "3"
            } else if q.contains("nvidia_smi_mig_memory_used_bytes") {
                "1.073741824e+10"
            } else if q.contains("nvidia_smi_mig_memory_total_bytes") {
                "4.0e+10"
            } else if q.contains("nvidia_smi_mig_sm_activity_ratio") {
                "0.25"
            } else if q.contains("nvidia_smi_mig_mode_current") {
                return vec![(u, "1")];
            } else if q.contains("nvidia_smi_memory_used_bytes") {
                return vec![(u, "2.147483648e+10")];
            } else {
                return Vec::new();
            };
            vec![(gi, value)]
        }),
    );
    let (frames, _) = run(&fake.url, &opts(T0, T0 + 20_000)).expect("ingest");
    let g = frames.gpu.collect().expect("gpu");
    assert_eq!(g.height(), 2);
    let mig_enabled: Vec<Option<bool>> = g
        .column("mig_enabled")
        .expect("c")
        .bool()
        .expect("bool")
        .iter()
        .collect();
    assert_eq!(mig_enabled, vec![Some(true), Some(true)]);
    let m = frames.mig.collect().expect("mig");
    assert_eq!(m.height(), 2);
    assert_eq!(
        col_str(&m, "uuid")[0].as_deref(),
        Some("GPU-aa11bb22-0000-1111-2222-333344445555")
    );
    assert_eq!(col_f64(&m, "gpu_instance")[0], Some(1.0));
    assert_eq!(col_f64(&m, "compute_instance")[0], Some(0.0));
    assert_eq!(col_str(&m, "profile")[0].as_deref(), Some("3g.40gb"));
    assert_eq!(
        col_str(&m, "mig_uuid")[0].as_deref(),
        Some("MIG-0d5a8c2e-1111-2222-3333-444455556666")
    );
    assert_eq!(
        col_f64(&m, "memory_used_max_bytes")[0],
        Some(10_737_418_240.0)
    );
    assert_eq!(col_f64(&m, "memory_total_bytes")[0], Some(40_000_000_000.0));
    assert_eq!(col_f64(&m, "sm_active_max")[0], Some(0.25));
    assert_eq!(col_f64(&m, "samples")[0], Some(3.0));
}

/// Two pods given GPU 0 one after the other (pid-less dcgm-exporter rows): two idle entities,
/// each named by its pod, not one span across both.
#[test]
fn pods_that_follow_each_other_on_a_gpu_are_separate_idle_entities() {
    let switch = (T0 / 1000 + 2 * 3600) as f64;
    let fake = serve(Box::new(move |req, _| {
        if req.path.ends_with("/values") {
            return Some((
                200,
                names_body(&["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"]),
            ));
        }
        let q = &req.params["query"];
        let start: f64 = req.params["start"].parse().expect("start");
        let end: f64 = req.params["end"].parse().expect("end");
        let step: f64 = req.params["step"].parse().expect("step");
        let value = if q.contains("FB_USED") && q.contains("FB_FREE") {
            "81559"
        } else if q.starts_with("count_over_time(DCGM_FI_DEV_FB_USED") {
            "2"
        } else if q.starts_with("max_over_time(DCGM_FI_DEV_FB_USED") {
            "20480"
        } else if q.contains("DCGM_FI_DEV_GPU_UTIL") {
            "0"
        } else {
            return Some((
                200,
                serde_json::json!({"status": "success",
                    "data": {"resultType": "matrix", "result": []}})
                .to_string(),
            ));
        };
        let mut result = Vec::new();
        for (pod, from, to) in [("a-0", start, switch), ("b-0", switch, end + 1.0)] {
            let mut values = Vec::new();
            let mut t = start;
            while t <= end + 1e-9 {
                if t > from && t <= to {
                    values.push(serde_json::json!([t, value]));
                }
                t += step;
            }
            if !values.is_empty() {
                result.push(serde_json::json!({"metric": {"gpu": "0", "UUID": "GPU-a",
                    "Hostname": "dgx-1", "pod": pod, "namespace": "serving"},
                    "values": values}));
            }
        }
        Some((
            200,
            serde_json::json!({"status": "success",
                "data": {"resultType": "matrix", "result": result}})
            .to_string(),
        ))
    }));
    let (frames, _) = run(&fake.url, &opts(T0, T0 + 6 * 3_600_000)).expect("ingest");
    let ents = tessera::advisor::idle::idle_entities(
        &frames,
        &tessera::advisor::idle::IdleParams::default(),
    )
    .expect("idle");
    let mut pods: Vec<(String, usize, i64)> = ents
        .iter()
        .map(|e| {
            (
                e.entity.pod.clone().unwrap_or_default(),
                e.spans.len(),
                e.spans.iter().map(|s| s.end_ms - s.start_ms).sum::<i64>() / 60_000,
            )
        })
        .collect();
    pods.sort();
    assert_eq!(pods.len(), 2, "{pods:?}");
    assert_eq!((pods[0].0.as_str(), pods[0].1), ("a-0", 1), "{pods:?}");
    assert_eq!((pods[1].0.as_str(), pods[1].1), ("b-0", 1), "{pods:?}");
    // Pod a-0 held the GPU for 2 h, b-0 for 4 h: neither span runs across the switch.
    assert!(pods[0].2 <= 120, "{pods:?}");
    assert!(pods[1].2 <= 240 && pods[1].2 >= 200, "{pods:?}");
}

/// Impossible values from a server — NaN, ±Inf, 1e308 bytes, negative or > 1 ratios, text that
/// is not a number, a `gpu` label that is not an index — are refused, counted by reason and named
/// in the warnings (never silently dropped or passed on: issue 17).
#[test]
fn impossible_values_are_refused_counted_and_named() {
    let fake = serve(Box::new(|req, _| {
        if req.path.ends_with("/values") {
            return Some((200, names_body(&[BUSY])));
        }
        let q = req.params["query"].clone();
        let start: f64 = req.params["start"].parse().expect("start");
        let step: f64 = req.params["step"].parse().expect("step");
        let good = serde_json::json!({"instance": "node-a:9835", "gpu": "0", "uuid": "GPU-a"});
        let bad_gpu =
            serde_json::json!({"instance": "node-a:9835", "gpu": "notanumber", "uuid": "GPU-b"});
        let series = |metric: &serde_json::Value, values: &[&str]| {
            serde_json::json!({"metric": metric, "values": values.iter().enumerate()
                .map(|(i, v)| serde_json::json!([start + i as f64 * step, v]))
                .collect::<Vec<_>>()})
        };
        let result = if let Some(w) = scrape_window(&q) {
            vec![series(&good, &[&format!("{}", w / 10_000)])]
        } else if q.starts_with("max_over_time(tessera_gpu_busy_ratio") {
            vec![
                series(&good, &["0.5", "NaN", "+Inf", "-0.2", "1.5", "abc"]),
                series(&bad_gpu, &["0.5"]),
            ]
        } else if q.starts_with("max_over_time(tessera_gpu_memory_used_bytes") {
            vec![series(
                &good,
                &["1000", "1e308", "-5", "1000", "1000", "1000"],
            )]
        } else {
            Vec::new()
        };
        Some((
            200,
            serde_json::json!({"status": "success",
                "data": {"resultType": "matrix", "result": result}})
            .to_string(),
        ))
    }));
    let (frames, report) = run(&fake.url, &opts(T0, T0 + 60_000)).expect("ingest");
    let skipped = &report.skipped;
    let count = |why: &str| {
        skipped
            .get(&format!("prometheus: refused values ({why})"))
            .copied()
    };
    assert_eq!(count("NaN"), Some(1), "{skipped:?}");
    assert_eq!(count("infinite"), Some(1), "{skipped:?}");
    assert_eq!(count("ratio outside 0–1"), Some(2), "{skipped:?}");
    assert_eq!(count("not a number"), Some(1), "{skipped:?}");
    assert_eq!(count("memory outside 0–2^60 bytes"), Some(2), "{skipped:?}");
    assert_eq!(
        count("an identity label that is not a number where one is expected"),
        Some(1),
        "{skipped:?}"
    );
    let w = report.warnings.join("\n");
    assert!(
        w.contains("refused 2 value(s): ratio outside 0–1 (first: -0.2 from"),
        "{w}"
    );
    assert!(w.contains("gpu=\"notanumber\""), "{w}");
    let g = frames.gpu.collect().expect("gpu");
    let busy = g
        .column("busy_max")
        .expect("busy")
        .f64()
        .expect("f64")
        .clone();
    assert!(busy.iter().flatten().all(|b| (0.0..=1.0).contains(&b)));
    let mem = g
        .column("memory_used_max_bytes")
        .expect("mem")
        .u64()
        .expect("u64")
        .clone();
    assert!(mem.iter().flatten().all(|m| m == 1000));
    let uuids = g.column("uuid").expect("uuid").str().expect("str").clone();
    assert!(uuids.iter().all(|u| u == Some("GPU-a")));
}

/// A body larger than `--prometheus.max-response-size` is not read whole: the range is asked
/// again in halves, down to one point, with a named warning; if one point is still too large, the
/// error names the query and the limit (issue 17: 27 × 38 MB answers reached 6 GB).
#[test]
fn oversized_answers_are_split_or_refused() {
    // The busy series, padded: every answer is 120 bytes per point plus the envelope.
    let fake = serve(Box::new(|req, _| {
        if req.path.ends_with("/values") {
            return Some((200, names_body(&[BUSY])));
        }
        let q = req.params["query"].clone();
        let start: f64 = req.params["start"].parse().expect("start");
        let end: f64 = req.params["end"].parse().expect("end");
        let step: f64 = req.params["step"].parse().expect("step");
        let mut values = Vec::new();
        let mut t = start;
        while t <= end + 1e-9 {
            let v = match scrape_window(&q) {
                Some(w) => format!("{}", w / 10_000),
                None => "0.5".to_string(),
            };
            values.push(serde_json::json!([t, v]));
            t += step;
        }
        let metric = serde_json::json!({"instance": "node-a:9835", "gpu": "0", "uuid": "GPU-a",
            "padding": "x".repeat(if q.contains(BUSY) { 120 * values.len() } else { 0 })});
        let result = if q.contains(BUSY) || scrape_window(&q).is_some() {
            vec![serde_json::json!({"metric": metric, "values": values})]
        } else {
            Vec::new()
        };
        Some((
            200,
            serde_json::json!({"status": "success",
                "data": {"resultType": "matrix", "result": result}})
            .to_string(),
        ))
    }));
    let mut o = opts(T0, T0 + 100 * 10_000);
    o.prometheus.max_response_bytes = 4_000;
    let (frames, report) = run(&fake.url, &o).expect("split answers");
    let g = frames.gpu.collect().expect("gpu");
    assert_eq!(g.height(), 100, "every point read, in smaller ranges");
    let w = report.warnings.join("\n");
    assert!(
        w.contains(
            "were larger than 4000 bytes (--prometheus.max-response-size) and were asked again \
             for half the range"
        ),
        "{w}"
    );
    // One point that is still too large: an error naming the query and the limit.
    o.prometheus.max_response_bytes = 200;
    let e = run_err(&fake.url, &o);
    assert!(
        e.contains("larger than 200 bytes") && e.contains("tessera_gpu_busy_ratio"),
        "{e}"
    );
}

/// The nodes a query's label matcher selects among `nodes` (`node="a"`, `node=~"a|b"`; no
/// matcher: all), as Prometheus would.
fn selected<'a>(q: &str, nodes: &[&'a str]) -> Vec<&'a str> {
    if let Some(rest) = q.split("node=~\"").nth(1) {
        let re = rest.split('"').next().expect("regex");
        let alts: Vec<&str> = re.split('|').collect();
        nodes.iter().copied().filter(|n| alts.contains(n)).collect()
    } else if let Some(rest) = q.split("node=\"").nth(1) {
        let v = rest.split('"').next().expect("value");
        nodes.iter().copied().filter(|n| *n == v).collect()
    } else {
        nodes.to_vec()
    }
}

/// `refuse(query, points, nodes selected)`: an error answer, or none.
type Refuse = dyn Fn(&str, usize, usize) -> Option<(u16, String)> + Send + Sync;

/// A server of one tessera GPU on each of `nodes` (label `node`, busy 0.5) that honours node
/// matchers; `refuse(query, points, nodes selected)` answers an error instead when it says so.
fn nodes_server(nodes: &'static [&'static str], refuse: Box<Refuse>) -> Fake {
    serve(Box::new(move |req, _| {
        if req.path.ends_with("/values") {
            return Some((200, names_body(&[BUSY])));
        }
        let q = req.params["query"].clone();
        let start: f64 = req.params["start"].parse().expect("start");
        let end: f64 = req.params["end"].parse().expect("end");
        let step: f64 = req.params["step"].parse().expect("step");
        let points = ((end - start) / step + 1e-9).floor() as usize + 1;
        let chosen = selected(&q, nodes);
        if scrape_window(&q).is_none()
            && let Some(refusal) = refuse(&q, points, chosen.len())
        {
            return Some(refusal);
        }
        let mut result = Vec::new();
        if q.contains(BUSY) || q.contains("tessera_gpu_memory_used_bytes") {
            for n in chosen {
                let value = match scrape_window(&q) {
                    Some(w) => format!("{}", w / 10_000),
                    None if q.contains("count_over_time") => "10".to_string(),
                    None if q.contains("memory") => "1000".to_string(),
                    None => "0.5".to_string(),
                };
                let values: Vec<serde_json::Value> = (0..points)
                    .map(|i| serde_json::json!([start + i as f64 * step, value]))
                    .collect();
                result.push(serde_json::json!({
                    "metric": {"node": n, "instance": format!("{n}:9835"), "gpu": "0",
                        "uuid": format!("GPU-{n}")},
                    "values": values,
                }));
            }
        }
        Some((
            200,
            serde_json::json!({"status": "success",
                "data": {"resultType": "matrix", "result": result}})
            .to_string(),
        ))
    }))
}

fn node_col(df: &DataFrame) -> Vec<String> {
    col_str(df, "node").into_iter().flatten().collect()
}

#[test]
fn each_node_is_its_own_partition_queried_with_a_matcher() {
    let fake = nodes_server(&["a", "b", "c.x"], Box::new(|_, _, _| None));
    let o = opts(T0, T0 + 300_000);
    let src: Source = format!("prometheus:{}", fake.url).parse().expect("source");
    let (parts, report) = ingest::ingest_parts(std::slice::from_ref(&src), &o).expect("ingest");
    let keys: Vec<&str> = parts.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c.x"]);
    for p in &parts {
        let g = p.frames.gpu.clone().collect().expect("gpu");
        assert_eq!(g.height(), 30, "{}", p.key);
        assert!(node_col(&g).iter().all(|n| *n == p.key), "{}", p.key);
    }
    let w = report.warnings.join("\n");
    assert!(
        w.contains("queried by node: 3 partition(s) of at most 1 node(s), 4 at once"),
        "{w}"
    );
    // Every range query selects one node; the dot is escaped in a regex, not in an equality.
    let qs: Vec<String> = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/query_range"))
        .filter_map(|r| r.params.get("query").cloned())
        .filter(|q| scrape_window(q).is_none())
        .collect();
    assert!(
        qs.iter()
            .any(|q| q.contains(r#"tessera_gpu_busy_ratio{node="c.x"}[9999ms]"#)),
        "{qs:?}"
    );
    // (A selector with matchers of its own, `{pipe="fp64",node="a"}`, gets the node's beside.)
    assert!(
        qs.iter()
            .all(|q| q.contains("{node=") || q.contains(",node=")),
        "{qs:?}"
    );

    // Two nodes per query: two partitions; 0: the whole fleet at once, as before.
    let mut o2 = opts(T0, T0 + 300_000);
    o2.prometheus.nodes_per_query = 2;
    let (parts, _) = ingest::ingest_parts(std::slice::from_ref(&src), &o2).expect("ingest");
    assert_eq!(
        parts.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(),
        ["a+1", "c.x"]
    );
    let g = parts[0].frames.gpu.clone().collect().expect("gpu");
    assert_eq!(g.height(), 60);
    let mut o0 = opts(T0, T0 + 300_000);
    o0.prometheus.nodes_per_query = 0;
    let (parts, report) = ingest::ingest_parts(std::slice::from_ref(&src), &o0).expect("ingest");
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].key, "*");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("queried as one partition (--prometheus.nodes-per-query 0)")),
        "{:?}",
        report.warnings
    );
    let all = parts[0].frames.gpu.clone().collect().expect("gpu");
    assert_eq!(all.height(), 90);
}

#[test]
fn too_many_samples_asks_again_for_half_the_range_with_a_warning() {
    // Prometheus' 422 for too many samples (and Mimir's wording) above 8 points per request.
    let fake = nodes_server(
        &["a", "b"],
        Box::new(|_, points, _| {
            (points > 8).then(|| {
                (
                    422,
                    serde_json::json!({"status": "error", "errorType": "execution",
                        "error": "query processing would load too many samples into memory in query execution"})
                    .to_string(),
                )
            })
        }),
    );
    let o = opts(T0, T0 + 300_000);
    let (frames, report) = run(&fake.url, &o).expect("ingest in smaller ranges");
    let g = frames.gpu.collect().expect("gpu");
    assert_eq!(g.height(), 60, "no hole");
    let w = report.warnings.join("\n");
    assert!(
        w.contains("server limit:")
            && w.contains("were refused and asked again for half the range")
            && w.contains("too many samples"),
        "{w}"
    );
    // A server that refuses even one point: an error naming the query and the server's words.
    let fake = nodes_server(
        &["a"],
        Box::new(|_, _, _| {
            Some((
                422,
                serde_json::json!({"status": "error", "errorType": "execution",
                    "error": "too many samples"})
                .to_string(),
            ))
        }),
    );
    let e = run_err(&fake.url, &o);
    assert!(
        e.contains("refuses even one point") && e.contains("too many samples"),
        "{e}"
    );
}

#[test]
fn a_series_limit_splits_the_node_group() {
    // Mimir's series limit: more than one node per query is refused.
    let fake = nodes_server(
        &["a", "b", "c", "d"],
        Box::new(|_, _, nodes| {
            (nodes > 1).then(|| {
                (
                    422,
                    serde_json::json!({"status": "error", "errorType": "execution",
                        "error": "expanding series: the query hit the max number of series limit (limit: 1 series)"})
                    .to_string(),
                )
            })
        }),
    );
    let mut o = opts(T0, T0 + 300_000);
    o.prometheus.nodes_per_query = 4;
    // Four nodes in one group of 4: the whole fleet, with no matcher, is refused too (a
    // series limit without node groups is an error).
    let e = run_err(&fake.url, &o);
    assert!(e.contains("max number of series"), "{e}");
    o.prometheus.nodes_per_query = 2;
    let src: Source = format!("prometheus:{}", fake.url).parse().expect("source");
    let (parts, report) = ingest::ingest_parts(std::slice::from_ref(&src), &o).expect("ingest");
    assert_eq!(
        parts.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c", "d"]
    );
    for p in &parts {
        assert_eq!(p.frames.gpu.clone().collect().expect("gpu").height(), 30);
    }
    let w = report.warnings.join("\n");
    assert!(
        w.contains(
            "server limit: 2 node group(s) were refused and queried again as two smaller groups"
        ),
        "{w}"
    );
}

const STREAMED: &str = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse";

/// The canned tessera server, whose `/api/v1/read` answers `read(index)`: the first remote read
/// is the source's probe.
fn remote_read_server(
    read: impl Fn(usize) -> (u16, &'static str, Vec<u8>) + Send + Sync + 'static,
) -> Fake {
    let reads = Arc::new(Mutex::new(0usize));
    serve_raw(Box::new(move |req, _| {
        Some(if req.path.ends_with("/api/v1/read") {
            let n = {
                let mut r = reads.lock().expect("lock");
                *r += 1;
                *r - 1
            };
            read(n)
        } else if req.path.ends_with("/label/__name__/values") {
            (200, "application/json", names_body(&[BUSY]).into_bytes())
        } else {
            (200, "application/json", matrix_for(req, &[]).into_bytes())
        })
    }))
}

fn with_api(mut o: IngestOptions<'static>, api: Api) -> IngestOptions<'static> {
    o.prometheus.api = api;
    o
}

#[test]
fn auto_falls_back_to_query_range_where_remote_read_is_not_served() {
    let server = remote_read_server(|_| (404, "text/plain", b"404 page not found".to_vec()));
    let (frames, report) =
        run(&server.url, &with_api(opts(T0, T0 + 600_000), Api::Auto)).expect("auto");
    let w = report.warnings.join("\n");
    assert!(
        w.contains("read through /api/v1/query_range: the server does not answer the remote-read API (HTTP 404"),
        "{w}"
    );
    assert!(frames.gpu.collect().expect("gpu").height() > 0);
    // The request was a remote-read one: POST, snappy protobuf, the version header.
    let read = server
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/api/v1/read"))
        .expect("a remote read");
    assert_eq!(read.headers["content-encoding"], "snappy");
    assert_eq!(read.headers["content-type"], "application/x-protobuf");
    assert_eq!(read.headers["x-prometheus-remote-read-version"], "0.1.0");
    // Asked for explicitly, it is an error that says why.
    let e = run_err(
        &server.url,
        &with_api(opts(T0, T0 + 600_000), Api::RemoteRead),
    );
    assert!(
        e.contains(
            "--prometheus.api remote-read: the server does not answer the remote-read API: HTTP 404"
        ),
        "{e}"
    );
    // A server that answers JSON there (a query API without remote read) is not taken for one.
    let json = remote_read_server(|_| (200, "application/json", b"{}".to_vec()));
    let (_, report) = run(&json.url, &with_api(opts(T0, T0 + 600_000), Api::Auto)).expect("auto");
    assert!(
        report
            .warnings
            .join("\n")
            .contains("not remote-read protobuf"),
        "{:?}",
        report.warnings
    );
}

#[test]
fn broken_remote_read_streams_are_named_errors() {
    // Each answer after the probe (an empty, valid stream) is broken in one way.
    let cases: [(&str, Vec<u8>); 4] = [
        // A 5-byte frame whose checksum is wrong.
        ("checksum mismatch", vec![5, 0, 0, 0, 0, 1, 2, 3, 4, 5]),
        // The stream ends inside a frame.
        ("ends inside a frame", vec![40, 0, 0]),
        // A frame that says it is 1 TiB long: refused before anything is allocated.
        ("more than the", vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x20]),
        // A valid checksum over bytes that are not a ChunkedReadResponse.
        ("bad protobuf message", {
            let body = [0xffu8, 0xff, 0xff];
            let mut b = vec![3];
            b.extend(crc32c(&body).to_be_bytes());
            b.extend(body);
            b
        }),
    ];
    for (want, bytes) in cases {
        let server = remote_read_server(move |n| {
            (
                200,
                STREAMED,
                if n == 0 { Vec::new() } else { bytes.clone() },
            )
        });
        let e = run_err(
            &server.url,
            &with_api(opts(T0, T0 + 600_000), Api::RemoteRead),
        );
        assert!(e.contains(want), "want {want:?}: {e}");
        assert!(e.contains("remote read of"), "{e}");
    }
}

/// CRC-32C (Castagnoli), bit by bit: the checksum the stream's frames carry.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// `prompb` messages of a `SAMPLES` answer, written here from the published `.proto` (the
/// source's own are private): what a server that does not stream sends.
mod prompb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ReadResponse {
        #[prost(message, repeated, tag = "1")]
        pub results: Vec<QueryResult>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct QueryResult {
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(double, tag = "1")]
        pub value: f64,
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }
}

#[test]
fn a_samples_answer_is_read_like_a_stream() {
    use prost::Message as _;
    // The first query of tessera's family reads the busy ratio: one GPU series, every 10 s.
    let label = |n: &str, v: &str| prompb::Label {
        name: n.into(),
        value: v.into(),
    };
    let resp = prompb::ReadResponse {
        results: vec![prompb::QueryResult {
            timeseries: vec![prompb::TimeSeries {
                labels: vec![
                    label("__name__", BUSY),
                    label("gpu", "0"),
                    label("instance", "node-a:9835"),
                    label("uuid", "GPU-a"),
                ],
                samples: (0..6)
                    .map(|k| prompb::Sample {
                        value: if k % 2 == 0 { 0.25 } else { 0.75 },
                        timestamp: T0 + k * 10_000,
                    })
                    .collect(),
            }],
        }],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&resp.encode_to_vec())
        .expect("snappy");
    let server = remote_read_server(move |_| (200, "application/x-protobuf", body.clone()));
    let (frames, report) = run(
        &server.url,
        &with_api(opts(T0 - 10_000, T0 + 50_000), Api::RemoteRead),
    )
    .expect("ingest");
    let w = report.warnings.join("\n");
    assert!(
        w.contains("read raw samples through the remote-read API"),
        "{w}"
    );
    let df = frames
        .gpu
        .sort(["ts"], SortMultipleOptions::default())
        .collect()
        .expect("collect");
    assert_eq!(df.height(), 6, "{df}");
    let busy: Vec<Option<f64>> = df
        .column("busy_max")
        .expect("c")
        .f64()
        .expect("f")
        .iter()
        .collect();
    assert_eq!(
        busy,
        [0.25, 0.75, 0.25, 0.75, 0.25, 0.75].map(Some).to_vec(),
        "one sample per 10-s row, each in its own row"
    );
    let node = df.column("node").expect("node").str().expect("str").get(0);
    assert_eq!(node, Some("node-a"));
}
