//! Pod names from the kubelet, end to end: the real exporter (`--backend sim`, the embedded demo
//! node) with `--kubelet.pod-resources-socket` at a fake kubelet (tessera-fake-kubelet: the
//! pod-resources v1 gRPC server generated from the same vendored proto), scraped over HTTP.
//!
//! - GPU, MIG instance and process series carry `pod`, `namespace`, `container` of the one
//!   container holding their device; a time-sliced GPU's series carry none and its holders are
//!   in `tessera_gpu_pod_info`; a new answer replaces the labels.
//! - No socket: one log line, cgroup pod UIDs as before, no pod labels; when the kubelet comes
//!   back, one line again and the labels appear.
//! - A kubelet answering errors: counted, sampling goes on. A hung kubelet: scrapes answer and
//!   samples advance; the call times out and is counted.
//! - History (version 3) records the holders: each GPU and MIG row says how many pods hold the
//!   device and names the first (0 for a device no pod holds) while the kubelet answers, and
//!   null (unknown, never "free") while it fails.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tessera_core::device::GpuBackend;
use tessera_core::sim::{self, SimBackend, SimClock};
use tessera_fake_kubelet::{FakeKubelet, dra_pod, pod, response};

/// The demo node's GPU UUIDs (by index) and MIG UUIDs (by GPU index and GPU instance id).
struct Demo {
    gpus: Vec<String>,
    migs: BTreeMap<(u32, u32), String>,
    /// The NVIDIA DRA driver's device names of the MIG devices (driver 25.12 form), by GPU index
    /// and GPU instance id, and of the 25.8 form.
    dra_migs: BTreeMap<(u32, u32), (String, String)>,
}

fn demo() -> Demo {
    let scenario = sim::load_scenario(None).unwrap();
    let clock = SimClock::Stepped {
        next_ms: scenario.start.timestamp_millis(),
        step_ms: 1000,
    };
    let inv = SimBackend::new(&scenario, None, clock)
        .unwrap()
        .inventory()
        .unwrap();
    let mut migs = BTreeMap::new();
    let mut dra_migs = BTreeMap::new();
    for g in &inv.gpus {
        let minor = g.minor_number.unwrap();
        for m in &g.mig_instances {
            migs.insert((g.index, m.gpu_instance_id), m.uuid.clone());
            let (pid, start, size) = (m.profile_id, m.placement.start, m.placement.size);
            dra_migs.insert(
                (g.index, m.gpu_instance_id),
                (
                    format!(
                        "gpu-{minor}-mig-{}-{pid}-{start}",
                        m.profile_name.replace('.', "")
                    ),
                    format!("gpu-{minor}-mig-{pid}-{start}-{size}"),
                ),
            );
        }
    }
    Demo {
        gpus: inv.gpus.iter().map(|g| g.uuid.clone()).collect(),
        migs,
        dra_migs,
    }
}

/// A running exporter on 127.0.0.1 (port chosen by the OS), its stderr kept; killed on drop.
struct Exporter {
    child: Child,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The exporter on the simulator, sampling every 100 ms, history off; `kubelet` is the
/// `--kubelet.pod-resources-socket` argument (None: the flag is not given).
fn exporter(kubelet: Option<&Path>) -> Exporter {
    exporter_with(kubelet, None)
}

/// [`exporter`], writing history under `history` (when given) in 1 s intervals of the virtual
/// clock, which runs 10 times as fast as the wall clock (one interval per sample).
fn exporter_with(kubelet: Option<&Path>, history: Option<&Path>) -> Exporter {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera-exporter"));
    cmd.args([
        "--backend",
        "sim",
        "--sample.interval",
        "100ms",
        "--web.listen-address",
        "127.0.0.1:0",
        "--kubelet.timeout",
        "2s",
        "--history.dir",
    ]);
    match history {
        Some(dir) => {
            cmd.arg(dir)
                .args(["--history.interval", "1s", "--sim.speed", "10"]);
        }
        None => {
            cmd.arg("");
        }
    }
    if let Some(socket) = kubelet {
        cmd.arg("--kubelet.pod-resources-socket").arg(socket);
    }
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tessera-exporter");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let log = Arc::new(Mutex::new(Vec::new()));
    let addr = loop {
        let line = lines
            .next()
            .expect("the exporter exited before listening")
            .unwrap();
        log.lock().unwrap().push(line.clone());
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let keep = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            keep.lock().unwrap().push(line);
        }
    });
    Exporter { child, addr, log }
}

impl Exporter {
    /// The `/metrics` body (Prometheus text format).
    fn scrape(&self) -> String {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        body.to_string()
    }

    /// Scrapes until `ok` holds for a body (20 s at most); that body.
    fn scrape_until(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let body = self.scrape();
            if ok(&body) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "never: {what}\n{}\n--- log:\n{}",
                body,
                self.log().join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Log lines that mention the kubelet's pod-resources API or pod names from it (but the
    /// one hint about DRA, [`dra_hint_lines`](Self::dra_hint_lines)).
    fn kubelet_lines(&self) -> Vec<String> {
        self.log()
            .into_iter()
            .filter(|l| l.contains("pod-resources") || l.contains("kubelet"))
            .filter(|l| !l.contains("KubeletPodResourcesDynamicResources"))
            .collect()
    }

    /// The hint that pods run on GPUs the kubelet names no holder of (DRA not reported).
    fn dra_hint_lines(&self) -> Vec<String> {
        self.log()
            .into_iter()
            .filter(|l| l.contains("KubeletPodResourcesDynamicResources"))
            .collect()
    }
}

type Labels = BTreeMap<String, String>;

/// Every series of `name` in a text-format body: labels and value.
fn series(body: &str, name: &str) -> Vec<(Labels, f64)> {
    let mut out = Vec::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => {
                let (l, v) = r.rsplit_once("} ").unwrap();
                (parse_labels(l), v)
            }
            None if rest.starts_with(' ') => (Labels::new(), rest.trim()),
            None => continue,
        };
        out.push((labels, value.trim().parse().unwrap()));
    }
    out
}

fn parse_labels(text: &str) -> Labels {
    let mut out = Labels::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => value.push(chars.next().map(|(_, c)| c).unwrap_or('\\')),
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').to_string(), value);
        rest = &after[end..];
    }
    out
}

/// The one series of `name` whose labels include `with`.
fn one(body: &str, name: &str, with: &[(&str, &str)]) -> Labels {
    let found: Vec<Labels> = series(body, name)
        .into_iter()
        .map(|(l, _)| l)
        .filter(|l| {
            with.iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert_eq!(found.len(), 1, "{name} {with:?}: {found:?}");
    found.into_iter().next().unwrap()
}

fn value(body: &str, name: &str) -> Option<f64> {
    series(body, name).first().map(|(_, v)| *v)
}

fn holder(l: &Labels) -> (Option<&str>, Option<&str>, Option<&str>) {
    (
        l.get("pod").map(String::as_str),
        l.get("namespace").map(String::as_str),
        l.get("container").map(String::as_str),
    )
}

fn socket_in(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("kubelet.sock")
}

#[test]
fn pod_names_label_gpu_mig_and_process_series() {
    let d = demo();
    let dir = tempfile::tempdir().unwrap();
    let mig = d.migs[&(3, 1)].clone();
    let fake = FakeKubelet::start(
        socket_in(&dir),
        response(vec![
            pod(
                "train-0",
                "ml",
                &[("main", "nvidia.com/gpu", &[d.gpus[0].as_str()])],
            ),
            pod(
                "infer-1",
                "web",
                &[("server", "nvidia.com/mig-3g.40gb", &[mig.as_str()])],
            ),
            // GPU 1 time-sliced between two pods.
            pod(
                "a",
                "team",
                &[("c", "nvidia.com/gpu", &[&format!("{}::0", d.gpus[1])])],
            ),
            pod(
                "b",
                "team",
                &[("c", "nvidia.com/gpu", &[&format!("{}::1", d.gpus[1])])],
            ),
            // Not a GPU: ignored.
            pod("cpu", "ml", &[("main", "example.com/fpga", &["fpga-0"])]),
        ]),
    )
    .unwrap();
    let e = exporter(Some(fake.path()));
    let body = e.scrape_until("pod labels", |b| b.contains("pod=\"train-0\""));
    let whole = ("train-0".into(), "ml".into(), "main".into());
    let named = |l: &Labels| {
        let (p, n, c) = holder(l);
        (
            p.map(String::from),
            n.map(String::from),
            c.map(String::from),
        )
    };
    let some =
        |(p, n, c): &(String, String, String)| (Some(p.clone()), Some(n.clone()), Some(c.clone()));
    // A whole GPU: its series and its process.
    let gpu0 = [("gpu", "0"), ("uuid", d.gpus[0].as_str())];
    for family in [
        "tessera_gpu_memory_used_bytes",
        "tessera_gpu_info",
        "tessera_gpu_power_watts",
    ] {
        assert_eq!(named(&one(&body, family, &gpu0)), some(&whole), "{family}");
    }
    let p = one(&body, "tessera_process_memory_used_bytes", &[("gpu", "0")]);
    assert_eq!(named(&p), some(&whole));
    assert!(!p["pod_uid"].is_empty(), "the cgroup pod UID stays: {p:?}");
    // A MIG instance: its series and its process.
    let infer = ("infer-1".into(), "web".into(), "server".into());
    let gi1 = [("gpu", "3"), ("gpu_instance", "1")];
    assert_eq!(
        named(&one(&body, "tessera_mig_memory_used_bytes", &gi1)),
        some(&infer)
    );
    assert_eq!(
        named(&one(
            &body,
            "tessera_mig_info",
            &[("mig_uuid", mig.as_str())]
        )),
        some(&infer)
    );
    assert_eq!(
        named(&one(&body, "tessera_process_memory_used_bytes", &gi1)),
        some(&infer)
    );
    // The MIG GPU itself and its other instances are held by nobody.
    let gpu3 = one(&body, "tessera_gpu_memory_used_bytes", &[("gpu", "3")]);
    assert_eq!(holder(&gpu3), (None, None, None));
    let gi13 = [("gpu", "3"), ("gpu_instance", "13")];
    assert_eq!(
        holder(&one(&body, "tessera_process_memory_used_bytes", &gi13)),
        (None, None, None)
    );
    // The time-sliced GPU: no pod labels on its series, both holders in the info metric.
    let gpu1 = one(&body, "tessera_gpu_memory_used_bytes", &[("gpu", "1")]);
    assert_eq!(holder(&gpu1), (None, None, None));
    let p1 = one(&body, "tessera_process_memory_used_bytes", &[("gpu", "1")]);
    assert_eq!(holder(&p1), (None, None, None));
    let shared: Vec<String> = series(&body, "tessera_gpu_pod_info")
        .into_iter()
        .filter(|(l, _)| l["uuid"] == d.gpus[1])
        .map(|(l, v)| {
            assert_eq!(v, 1.0);
            assert_eq!(l["device"], d.gpus[1]);
            format!("{}/{}/{}", l["namespace"], l["pod"], l["container"])
        })
        .collect();
    assert_eq!(shared, ["team/a/c", "team/b/c"]);
    let info = one(&body, "tessera_gpu_pod_info", &[("device", mig.as_str())]);
    assert_eq!(
        (info["gpu"].as_str(), info["gpu_instance"].as_str()),
        ("3", "1")
    );
    assert_eq!(info["resource"], "nvidia.com/mig-3g.40gb");
    assert_eq!(series(&body, "tessera_gpu_pod_info").len(), 4);
    assert_eq!(value(&body, "tessera_exporter_kubelet_up"), Some(1.0));
    assert_eq!(
        value(&body, "tessera_exporter_kubelet_errors_total"),
        Some(0.0)
    );
    // A new answer replaces the labels.
    fake.set_response(response(vec![pod(
        "train-1",
        "ml",
        &[("main", "nvidia.com/gpu", &[d.gpus[0].as_str()])],
    )]));
    let body = e.scrape_until("the new pod", |b| b.contains("pod=\"train-1\""));
    assert!(!body.contains("pod=\"train-0\"") && !body.contains("pod=\"infer-1\""));
    assert_eq!(
        e.kubelet_lines().len(),
        1,
        "one line when the kubelet answers: {:?}",
        e.kubelet_lines()
    );
}

#[test]
fn without_the_socket_the_exporter_says_so_once_and_keeps_cgroup_uids() {
    let d = demo();
    let dir = tempfile::tempdir().unwrap();
    let socket = socket_in(&dir);
    let e = exporter(Some(&socket));
    let body = e.scrape_until("three failed List calls", |b| {
        value(b, "tessera_exporter_kubelet_errors_total").is_some_and(|n| n >= 3.0)
    });
    assert_eq!(value(&body, "tessera_exporter_kubelet_up"), Some(0.0));
    let lines = e.kubelet_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains(&socket.display().to_string()),
        "{lines:?}"
    );
    assert!(lines[0].contains("WARN"), "{lines:?}");
    let procs = series(&body, "tessera_process_memory_used_bytes");
    assert!(!procs.is_empty());
    assert!(
        procs.iter().any(|(l, _)| !l["pod_uid"].is_empty()),
        "cgroup pod UIDs as before: {procs:?}"
    );
    assert!(!body.contains("pod=\""), "no pod names without the kubelet");
    assert!(!body.contains("tessera_gpu_pod_info"));
    // The kubelet comes back: one more line, and the labels.
    let _fake = FakeKubelet::start(
        &socket,
        response(vec![pod(
            "back",
            "ml",
            &[("main", "nvidia.com/gpu", &[d.gpus[0].as_str()])],
        )]),
    )
    .unwrap();
    let body = e.scrape_until("pod labels once the kubelet answers", |b| {
        b.contains("pod=\"back\"")
    });
    assert_eq!(value(&body, "tessera_exporter_kubelet_up"), Some(1.0));
    let lines = e.kubelet_lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].contains("answers"), "{lines:?}");
}

#[test]
fn without_the_flag_and_the_standard_socket_it_is_off_and_says_so_once() {
    if Path::new(tessera_exporter::kubelet::DEFAULT_SOCKET).exists() {
        eprintln!("skipped: this machine has a kubelet socket");
        return;
    }
    let e = exporter(None);
    let body = e.scrape_until("two samples", |b| {
        value(b, "tessera_exporter_last_sample_timestamp_seconds").is_some()
    });
    assert!(!body.contains("tessera_exporter_kubelet"));
    assert!(!body.contains("pod=\""));
    let lines = e.kubelet_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("off"), "{lines:?}");
}

#[test]
fn a_kubelet_answering_errors_is_counted_and_sampling_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeKubelet::start(socket_in(&dir), response(vec![])).unwrap();
    fake.fail(tonic::Code::Internal, "kubelet is broken");
    let e = exporter(Some(fake.path()));
    let first = e.scrape_until("a sample", |b| {
        value(b, "tessera_exporter_last_sample_timestamp_seconds").is_some()
    });
    let t0 = value(&first, "tessera_exporter_last_sample_timestamp_seconds").unwrap();
    let body = e.scrape_until("two failed calls and later samples", |b| {
        value(b, "tessera_exporter_kubelet_errors_total").is_some_and(|n| n >= 2.0)
            && value(b, "tessera_exporter_last_sample_timestamp_seconds").unwrap() > t0
    });
    assert_eq!(value(&body, "tessera_exporter_kubelet_up"), Some(0.0));
    assert!(fake.calls() >= 2);
    let lines = e.kubelet_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("kubelet is broken"), "{lines:?}");
}

#[test]
fn a_hung_kubelet_stalls_neither_scrapes_nor_samples() {
    let d = demo();
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeKubelet::start(
        socket_in(&dir),
        response(vec![pod(
            "p",
            "n",
            &[("c", "nvidia.com/gpu", &[d.gpus[0].as_str()])],
        )]),
    )
    .unwrap();
    let e = exporter(Some(fake.path()));
    e.scrape_until("pod labels", |b| b.contains("pod=\"p\""));
    fake.hang();
    let hung_from = fake.calls();
    // While a call hangs (from the moment it reached the fake until --kubelet.timeout, 2 s,
    // ends it and the error is counted), scrapes answer and samples go on: neither waits for
    // the kubelet. No time is asserted: only that samples advanced inside that window.
    let mut last = 0.0;
    let mut advanced = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let body = loop {
        assert!(Instant::now() < deadline, "the hung call never timed out");
        let body = e.scrape();
        let t = value(&body, "tessera_exporter_last_sample_timestamp_seconds").unwrap();
        let errors = value(&body, "tessera_exporter_kubelet_errors_total").unwrap_or(0.0);
        if errors >= 1.0 {
            break body;
        }
        if fake.calls() > hung_from && t > last {
            if last > 0.0 {
                advanced += 1;
            }
            last = t;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        advanced >= 2,
        "samples advanced {advanced} times while the kubelet call hung"
    );
    let body = if body.contains("pod=\"p\"") {
        e.scrape_until("no pod labels", |b| !b.contains("pod=\"p\""))
    } else {
        body
    };
    assert_eq!(value(&body, "tessera_exporter_kubelet_up"), Some(0.0));
    assert!(
        e.kubelet_lines()
            .iter()
            .any(|l| l.contains("no answer within 2s")),
        "{:?}",
        e.kubelet_lines()
    );
}

/// The history rows of the demo node under `root` (its one node folder), once `ok` holds for
/// them (30 s at most).
fn history_until(
    root: &Path,
    e: &Exporter,
    what: &str,
    ok: impl Fn(&tessera_core::history::NodeHistory) -> bool,
) -> tessera_core::history::NodeHistory {
    let node = root.join("gpu-node-1");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The open segment may end in a line being written: the reader skips it.
        if let Ok(h) = tessera_core::history::reader::read_node_dir(&node)
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

/// (holders, namespace, pod, Slurm job) of a history row.
type Held = (Option<u32>, Option<String>, Option<String>, Option<String>);

fn held(
    holders: Option<u32>,
    ns: &Option<String>,
    pod: &Option<String>,
    job: &Option<String>,
) -> Held {
    (holders, ns.clone(), pod.clone(), job.clone())
}

fn pod_held(n: u32, ns: &str, pod: &str) -> Held {
    (Some(n), Some(ns.into()), Some(pod.into()), None)
}

const FREE: Held = (Some(0), None, None, None);
const UNKNOWN: Held = (None, None, None, None);

#[test]
fn history_records_the_kubelets_holders_and_null_while_it_fails() {
    let d = demo();
    let dir = tempfile::tempdir().unwrap();
    let history = tempfile::tempdir().unwrap();
    let mig = d.migs[&(3, 1)].clone();
    let fake = FakeKubelet::start(
        socket_in(&dir),
        response(vec![
            pod(
                "train-0",
                "ml",
                &[("main", "nvidia.com/gpu", &[d.gpus[0].as_str()])],
            ),
            pod(
                "infer-1",
                "web",
                &[("server", "nvidia.com/mig-3g.40gb", &[mig.as_str()])],
            ),
            // GPU 1 time-sliced between two pods: each counts once.
            pod(
                "a",
                "team",
                &[("c", "nvidia.com/gpu", &[&format!("{}::0", d.gpus[1])])],
            ),
            pod(
                "b",
                "team",
                &[
                    ("c", "nvidia.com/gpu", &[&format!("{}::1", d.gpus[1])]),
                    ("d", "nvidia.com/gpu", &[&format!("{}::2", d.gpus[1])]),
                ],
            ),
        ]),
    )
    .unwrap();
    let e = exporter_with(Some(fake.path()), Some(history.path()));
    // Intervals after the first answer: every GPU row known.
    let known_since = |h: &tessera_core::history::NodeHistory| {
        h.gpu
            .iter()
            .find(|r| r.uuid == d.gpus[0] && r.holders.is_some())
            .map(|r| r.ts)
    };
    let h = history_until(history.path(), &e, "5 intervals with holders", |h| {
        known_since(h)
            .is_some_and(|t0| h.gpu.iter().filter(|r| r.ts > t0 && r.gpu == 0).count() >= 5)
    });
    let t0 = known_since(&h).unwrap();
    let gpu_rows: Vec<_> = h.gpu.iter().filter(|r| r.ts > t0).collect();
    assert!(gpu_rows.len() >= 5 * 4, "{}", gpu_rows.len());
    for r in &gpu_rows {
        let got = held(
            r.holders,
            &r.holder_namespace,
            &r.holder_pod,
            &r.holder_slurm_job_id,
        );
        let want = match r.gpu {
            0 => pod_held(1, "ml", "train-0"),
            // Two pods (pod b's two containers are one holder); the first sorted is named.
            1 => pod_held(2, "team", "a"),
            // The MIG GPU is held because one of its instances is.
            3 => pod_held(1, "web", "infer-1"),
            _ => FREE,
        };
        assert_eq!(got, want, "GPU {} at {}", r.gpu, r.ts);
    }
    let mig_rows: Vec<_> = h.mig.iter().filter(|r| r.ts > t0).collect();
    assert!(mig_rows.iter().any(|r| r.gpu_instance == 1));
    assert!(mig_rows.iter().any(|r| r.gpu_instance != 1));
    for r in &mig_rows {
        let got = held(
            r.holders,
            &r.holder_namespace,
            &r.holder_pod,
            &r.holder_slurm_job_id,
        );
        let want = if r.mig_uuid == mig {
            pod_held(1, "web", "infer-1")
        } else {
            FREE
        };
        assert_eq!(got, want, "MIG {} at {}", r.mig_uuid, r.ts);
    }

    // The kubelet fails: holders become unknown (null), not free.
    fake.fail(tonic::Code::Unavailable, "kubelet restarting");
    let unknown_since = |h: &tessera_core::history::NodeHistory| {
        h.gpu
            .iter()
            .find(|r| r.ts > t0 && r.uuid == d.gpus[0] && r.holders.is_none())
            .map(|r| r.ts)
    };
    let h = history_until(history.path(), &e, "5 intervals without holders", |h| {
        unknown_since(h)
            .is_some_and(|t1| h.gpu.iter().filter(|r| r.ts > t1 && r.gpu == 0).count() >= 5)
    });
    let t1 = unknown_since(&h).unwrap();
    let after: Vec<_> = h.gpu.iter().filter(|r| r.ts >= t1).collect();
    assert!(after.len() >= 5 * 4);
    for r in after {
        let got = held(
            r.holders,
            &r.holder_namespace,
            &r.holder_pod,
            &r.holder_slurm_job_id,
        );
        assert_eq!(got, UNKNOWN, "GPU {} at {}", r.gpu, r.ts);
    }
    let after: Vec<_> = h.mig.iter().filter(|r| r.ts >= t1).collect();
    assert!(!after.is_empty());
    for r in after {
        let got = held(
            r.holders,
            &r.holder_namespace,
            &r.holder_pod,
            &r.holder_slurm_job_id,
        );
        assert_eq!(got, UNKNOWN, "MIG {} at {}", r.mig_uuid, r.ts);
    }
}

#[test]
fn held_devices_that_nothing_uses_count_unused_seconds_per_holder() {
    let d = demo();
    let dir = tempfile::tempdir().unwrap();
    // Demo node: GPU 0 and MIG instance 3/1 run a process; GPU 2 runs none (but works at some
    // hours of the wall-clock day this test runs at); MIG instance 3/5 never runs anything.
    let (busy_mig, empty_mig) = (d.migs[&(3, 1)].clone(), d.migs[&(3, 5)].clone());
    let fake = FakeKubelet::start(
        socket_in(&dir),
        response(vec![
            pod(
                "train-0",
                "ml",
                &[("main", "nvidia.com/gpu", &[d.gpus[0].as_str()])],
            ),
            pod(
                "stuck",
                "ml",
                &[("main", "nvidia.com/gpu", &[d.gpus[2].as_str()])],
            ),
            pod(
                "infer-1",
                "web",
                &[("server", "nvidia.com/mig-3g.40gb", &[busy_mig.as_str()])],
            ),
            pod(
                "spare",
                "web",
                &[("server", "nvidia.com/mig-2g.20gb", &[empty_mig.as_str()])],
            ),
        ]),
    )
    .unwrap();
    let e = exporter(Some(fake.path()));
    let unused = |body: &str, pod: &str| {
        let found: Vec<(Labels, f64)> = series(body, "tessera_gpu_pod_unused_seconds")
            .into_iter()
            .filter(|(l, _)| l["pod"] == pod)
            .collect();
        assert_eq!(found.len(), 1, "{pod}: {found:?}");
        found.into_iter().next().unwrap()
    };
    let body = e.scrape_until("unused time on the idle devices", |b| {
        series(b, "tessera_gpu_pod_unused_seconds")
            .iter()
            .any(|(l, v)| l["pod"] == "spare" && *v >= 0.3)
            && b.contains("pod=\"stuck\"")
    });
    // One series per holder, with tessera_gpu_pod_info's labels.
    let info: Vec<Labels> = series(&body, "tessera_gpu_pod_info")
        .into_iter()
        .map(|(l, _)| l)
        .collect();
    let held: Vec<Labels> = series(&body, "tessera_gpu_pod_unused_seconds")
        .into_iter()
        .map(|(l, _)| l)
        .collect();
    assert_eq!(held, info);
    assert_eq!(held.len(), 4);
    // Used devices: 0.
    assert_eq!(unused(&body, "train-0").1, 0.0);
    assert_eq!(unused(&body, "infer-1").1, 0.0);
    let (stuck, _) = unused(&body, "stuck");
    assert_eq!(
        (stuck["gpu"].as_str(), stuck["gpu_instance"].as_str()),
        ("2", "")
    );
    let (spare, _) = unused(&body, "spare");
    assert_eq!(
        (
            spare["gpu"].as_str(),
            spare["gpu_instance"].as_str(),
            spare["device"].as_str()
        ),
        ("3", "5", empty_mig.as_str())
    );
    // It grows while nothing changes...
    let before = unused(&body, "spare").1;
    let body = e.scrape_until("more unused time", |b| unused(b, "spare").1 > before);
    // ... and a holder the kubelet no longer lists is forgotten: back, it starts again.
    fake.set_response(response(vec![]));
    e.scrape_until("no holders", |b| {
        !b.contains("tessera_gpu_pod_unused_seconds")
    });
    let grown = unused(&body, "spare").1;
    fake.set_response(response(vec![pod(
        "spare",
        "web",
        &[("server", "nvidia.com/mig-2g.20gb", &[empty_mig.as_str()])],
    )]));
    let body = e.scrape_until("the holder back", |b| {
        b.contains("tessera_gpu_pod_unused_seconds")
    });
    assert!(
        unused(&body, "spare").1 < grown,
        "restarted from 0: {} < {grown}",
        unused(&body, "spare").1
    );
}

/// Issue 50: GPUs and MIG devices allocated through DRA (NVIDIA's DRA driver, both of its MIG
/// device name forms) and a device plugin's index id are attributed like UUIDs: in /metrics, in
/// history holders and in the unused time of held devices; a claim shared by two pods is two
/// holders; a DRA device that matches no device of the node is said once and attributed to
/// nobody; another DRA driver's devices are not GPUs.
#[test]
fn dra_claims_and_index_ids_name_their_pods_everywhere() {
    let d = demo();
    let dir = tempfile::tempdir().unwrap();
    let history = tempfile::tempdir().unwrap();
    let (busy_mig, empty_mig) = (d.migs[&(3, 1)].clone(), d.migs[&(3, 5)].clone());
    let (busy_new, _) = d.dra_migs[&(3, 1)].clone();
    let (_, empty_old) = d.dra_migs[&(3, 5)].clone();
    let gpu = "gpu.nvidia.com";
    let shared: &[&str] = &["gpu-0"];
    let fake = FakeKubelet::start(
        socket_in(&dir),
        response(vec![
            dra_pod(
                "p1",
                "ml",
                "gpu-node-1",
                &[("main", "ml", "shared-gpu", gpu, shared)],
            ),
            dra_pod(
                "p2",
                "ml",
                "gpu-node-1",
                &[("main", "ml", "shared-gpu", gpu, shared)],
            ),
            dra_pod(
                "infer-1",
                "web",
                "gpu-node-1",
                &[("server", "web", "mig-claim", gpu, &[busy_new.as_str()])],
            ),
            dra_pod(
                "spare",
                "web",
                "gpu-node-1",
                &[("server", "web", "spare-claim", gpu, &[empty_old.as_str()])],
            ),
            dra_pod(
                "ghost",
                "ml",
                "gpu-node-1",
                &[("main", "ml", "ghost", gpu, &["gpu-99"])],
            ),
            dra_pod(
                "imex",
                "ml",
                "gpu-node-1",
                &[(
                    "main",
                    "ml",
                    "cd",
                    "compute-domain.nvidia.com",
                    &["channel-0"],
                )],
            ),
            pod("idx", "ml", &[("main", "nvidia.com/gpu", &["2"])]),
        ]),
    )
    .unwrap();
    let e = exporter_with(Some(fake.path()), Some(history.path()));
    let body = e.scrape_until("DRA holders and unused time", |b| {
        b.contains("pod=\"p2\"")
            && series(b, "tessera_gpu_pod_unused_seconds")
                .iter()
                .any(|(l, v)| l["pod"] == "spare" && *v > 0.0)
    });
    let info: Vec<(String, String, String, String)> = series(&body, "tessera_gpu_pod_info")
        .into_iter()
        .map(|(l, _)| {
            (
                l["device"].clone(),
                format!("{}/{}", l["namespace"], l["pod"]),
                l["resource"].clone(),
                l["gpu_instance"].clone(),
            )
        })
        .collect();
    let claim = |ns: &str, c: &str| format!("gpu.nvidia.com claim {ns}/{c}");
    let want: std::collections::BTreeSet<(String, String, String, String)> = [
        (
            d.gpus[0].clone(),
            "ml/p1".into(),
            claim("ml", "shared-gpu"),
            String::new(),
        ),
        (
            d.gpus[0].clone(),
            "ml/p2".into(),
            claim("ml", "shared-gpu"),
            String::new(),
        ),
        (
            d.gpus[2].clone(),
            "ml/idx".into(),
            "nvidia.com/gpu".into(),
            String::new(),
        ),
        (
            busy_mig.clone(),
            "web/infer-1".into(),
            claim("web", "mig-claim"),
            "1".into(),
        ),
        (
            empty_mig.clone(),
            "web/spare".into(),
            claim("web", "spare-claim"),
            "5".into(),
        ),
    ]
    .into();
    assert_eq!(info.len(), want.len(), "{info:?}");
    assert_eq!(
        info.into_iter().collect::<std::collections::BTreeSet<_>>(),
        want
    );
    assert!(!body.contains("pod=\"ghost\"") && !body.contains("pod=\"imex\""));
    // A whole GPU held by two pods has no sole holder; the MIG device and GPU 2 have one.
    assert_eq!(
        holder(&one(
            &body,
            "tessera_gpu_memory_used_bytes",
            &[("gpu", "0")]
        )),
        (None, None, None)
    );
    assert_eq!(
        holder(&one(
            &body,
            "tessera_mig_memory_used_bytes",
            &[("gpu", "3"), ("gpu_instance", "1")]
        )),
        (Some("infer-1"), Some("web"), Some("server"))
    );
    assert_eq!(
        holder(&one(
            &body,
            "tessera_gpu_memory_used_bytes",
            &[("gpu", "2")]
        )),
        (Some("idx"), Some("ml"), Some("main"))
    );
    let ghost: Vec<String> = e
        .log()
        .into_iter()
        .filter(|l| l.contains("matches no GPU"))
        .collect();
    assert_eq!(ghost.len(), 1, "{ghost:?}");
    assert!(
        ghost[0].contains("gpu-99") && ghost[0].contains("ml/ghost"),
        "{ghost:?}"
    );
    // History: the shared GPU has two holders, the MIG device and its GPU one.
    let h = history_until(history.path(), &e, "rows with DRA holders", |h| {
        h.gpu
            .iter()
            .any(|r| r.uuid == d.gpus[0] && r.holders == Some(2))
            && h.mig
                .iter()
                .any(|r| r.mig_uuid == busy_mig && r.holders == Some(1))
    });
    let r = h
        .gpu
        .iter()
        .rev()
        .find(|r| r.uuid == d.gpus[0] && r.holders.is_some())
        .unwrap();
    assert_eq!(
        held(
            r.holders,
            &r.holder_namespace,
            &r.holder_pod,
            &r.holder_slurm_job_id
        ),
        pod_held(2, "ml", "p1")
    );
    let r = h.mig.iter().rev().find(|r| r.mig_uuid == busy_mig).unwrap();
    assert_eq!(
        held(
            r.holders,
            &r.holder_namespace,
            &r.holder_pod,
            &r.holder_slurm_job_id
        ),
        pod_held(1, "web", "infer-1")
    );
}

/// Issue 50: a kubelet that reports no DRA devices (its `dynamic_resources` off) while pods'
/// processes run on GPUs it names no holder of is said once — not once per sample — and sampling
/// goes on with the cgroup pod UIDs.
#[test]
fn pods_on_gpus_the_kubelet_names_no_holder_of_are_said_once() {
    let dir = tempfile::tempdir().unwrap();
    // The kubelet answers, but lists no device: the demo's pods run on GPUs all the same.
    let fake = FakeKubelet::start(socket_in(&dir), response(vec![])).unwrap();
    let e = exporter(Some(fake.path()));
    // The kubelet's answer and the first sample with processes come in either order: wait for
    // both (the cgroup pod UIDs stay).
    let first = e.scrape_until(
        "the kubelet answered and the pods' processes were sampled",
        |b| value(b, "tessera_exporter_kubelet_up") == Some(1.0) && b.contains("pod_uid=\""),
    );
    assert!(first.contains("pod_uid=\""), "cgroup pod UIDs stay");
    // Many samples later (100 ms each), still one line.
    let calls = fake.calls();
    e.scrape_until("more kubelet answers", |_| fake.calls() >= calls + 10);
    let hint = e.dra_hint_lines();
    assert_eq!(hint.len(), 1, "{hint:?}");
    assert!(
        hint[0].contains("name no holder of it") && hint[0].contains("a process of pod "),
        "{hint:?}"
    );
}
