//! What the monitoring tests share: the rule files and dashboards of the repository as data, the
//! real tools they are checked with (`promtool`, `amtool`, `prometheus`,
//! `prometheus-alertmanager` from Debian's packages; a missing tool fails the test with how to
//! install it, never skips it), and guards that run the exporter and Prometheus on 127.0.0.1 and
//! kill them when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::repo_root;

/// The path of an executable on `PATH`; panics (the test fails) with the Debian package to install.
pub fn tool(name: &str) -> PathBuf {
    let package = match name {
        "promtool" | "prometheus" => "prometheus",
        "amtool" | "prometheus-alertmanager" => "prometheus-alertmanager",
        other => other,
    };
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found on PATH: install Debian's {package} package (`bash scripts/test.sh` installs it)"
            )
        })
}

/// Run a tool; returns (success, stdout + stderr).
pub fn run_tool(name: &str, args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(tool(name))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {name}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `rules/*.yml`: the rule files (not the unit tests under `rules/tests/`).
pub fn rule_files() -> Vec<PathBuf> {
    files(&repo_root().join("rules"), &["yml", "yaml"])
}

/// `rules/tests/*.yml`: promtool unit tests.
pub fn rule_test_files() -> Vec<PathBuf> {
    files(&repo_root().join("rules/tests"), &["yml", "yaml"])
}

/// `dashboards/*.json`.
pub fn dashboard_files() -> Vec<PathBuf> {
    files(&repo_root().join("dashboards"), &["json"])
}

fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| exts.contains(&e))
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no {exts:?} files in {}", dir.display());
    out
}

/// Parse a YAML file into JSON values.
pub fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Parse a JSON file.
pub fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One rule of a rule file.
#[derive(Debug, Clone)]
pub struct Rule {
    pub file: PathBuf,
    pub group: String,
    /// `alert` name, or `None` for a recording rule.
    pub alert: Option<String>,
    /// `record` name of a recording rule.
    pub record: Option<String>,
    pub expr: String,
    pub labels: Value,
    pub annotations: Value,
}

/// Every rule of every rule file.
pub fn rules() -> Vec<Rule> {
    let mut out = Vec::new();
    for file in rule_files() {
        let doc = yaml(&file);
        for group in doc["groups"].as_array().expect("groups") {
            let name = group["name"].as_str().expect("group name").to_string();
            for r in group["rules"].as_array().expect("rules") {
                out.push(Rule {
                    file: file.clone(),
                    group: name.clone(),
                    alert: r["alert"].as_str().map(str::to_string),
                    record: r["record"].as_str().map(str::to_string),
                    expr: r["expr"].as_str().expect("expr").to_string(),
                    labels: r["labels"].clone(),
                    annotations: r["annotations"].clone(),
                });
            }
        }
    }
    out
}

/// One PromQL query of a dashboard: where it is and its expression (with Grafana variables).
#[derive(Debug, Clone)]
pub struct DashboardQuery {
    pub dashboard: String,
    /// `panel "Title" target A` or `variable job`.
    pub place: String,
    pub expr: String,
}

/// Every panel of a dashboard, nested rows included.
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for p in panels.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// Every PromQL expression of every dashboard: panel targets and query variables.
pub fn dashboard_queries() -> Vec<DashboardQuery> {
    let mut out = Vec::new();
    for file in dashboard_files() {
        let d = json(&file);
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for p in panels(&d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push(DashboardQuery {
                        dashboard: name.clone(),
                        place: format!(
                            "panel {:?} target {}",
                            p["title"].as_str().unwrap_or(""),
                            t["refId"].as_str().unwrap_or("?")
                        ),
                        expr: expr.to_string(),
                    });
                }
            }
        }
        for v in d["templating"]["list"].as_array().into_iter().flatten() {
            if v["type"] != "query" {
                continue;
            }
            let q = v["query"]["query"]
                .as_str()
                .or_else(|| v["query"].as_str())
                .unwrap_or_default();
            if let Some(expr) = crate::promql::variable_query_expr(q) {
                out.push(DashboardQuery {
                    dashboard: name.clone(),
                    place: format!("variable {}", v["name"].as_str().unwrap_or("")),
                    expr,
                });
            }
        }
    }
    out
}

/// A free TCP port on 127.0.0.1 (bound and released; a race with other processes is possible
/// but harmless in tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// A running `tessera-exporter` on 127.0.0.1 (port chosen by the OS); killed on drop.
pub struct Exporter {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Exporter {
    /// Start `cmd` (a `tessera-exporter` command) listening on 127.0.0.1 with history off, and
    /// wait until it listens and has published its first sample.
    pub fn start(cmd: Command) -> Exporter {
        Exporter::start_on(cmd, "127.0.0.1:0")
    }

    /// [`Exporter::start`] on a given address (when a scraper must know it beforehand).
    pub fn start_on(mut cmd: Command, listen: &str) -> Exporter {
        cmd.args(["--web.listen-address", listen, "--history.dir", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("starting tessera-exporter");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let mut seen = Vec::new();
        let addr = loop {
            let Some(line) = lines.next() else {
                let _ = child.kill();
                panic!(
                    "tessera-exporter exited before listening:\n{}",
                    seen.join("\n")
                );
            };
            let line = line.expect("stderr line");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().expect("address").to_string();
            }
            seen.push(line);
        };
        std::thread::spawn(move || for _ in lines {});
        let exporter = Exporter { child, addr };
        let deadline = Instant::now() + Duration::from_secs(20);
        while get(&format!("http://{}/-/ready", exporter.addr)).0 != 200 {
            assert!(Instant::now() < deadline, "exporter never became ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        exporter
    }

    /// One scrape of `/metrics` (Prometheus text format).
    pub fn scrape(&self) -> String {
        let (status, body) = get(&format!("http://{}/metrics", self.addr));
        assert_eq!(status, 200, "scrape failed: {body}");
        body
    }
}

/// Metric names in an exposition (`# TYPE` families and sample names, so both `x` and
/// `x_total` of a counter).
pub fn exposed_metric_names(exposition: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.split_whitespace().next() {
                out.insert(name.to_string());
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            out.insert(line[..end].to_string());
        }
    }
    out
}

/// GET a URL; (status, body). Transport errors are status 0.
pub fn get(url: &str) -> (u16, String) {
    get_with(url, &[])
}

/// GET a URL with query parameters; (status, body). Transport errors are status 0.
pub fn get_with(url: &str, params: &[(&str, &str)]) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.get(url);
    for (k, v) in params {
        req = req.query(*k, *v);
    }
    match req.call() {
        Ok(mut r) => {
            let status = r.status().as_u16();
            let body = r
                .body_mut()
                .with_config()
                .limit(u64::MAX)
                .read_to_string()
                .unwrap_or_default();
            (status, body)
        }
        Err(e) => (0, e.to_string()),
    }
}

/// A real Prometheus on 127.0.0.1 in a temporary directory; killed on drop.
pub struct Prometheus {
    child: Child,
    pub url: String,
    pub dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Start Prometheus with `config` (the text of prometheus.yml, which may name files under
    /// the returned directory via the `{dir}` placeholder) and wait until it is ready.
    pub fn start(config: &str) -> Prometheus {
        let bin = tool("prometheus");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = config.replace("{dir}", &dir.path().display().to_string());
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write prometheus.yml");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting prometheus");
        let p = Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while get(&format!("{}/-/ready", p.url)).0 != 200 {
            assert!(
                Instant::now() < deadline,
                "prometheus not ready after 60 s: {}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// Prometheus' log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query; `Ok(result vector)` or `Err(Prometheus' error)`.
    pub fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let (status, body) = get_with(&format!("{}/api/v1/query", self.url), &[("query", expr)]);
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
        if v["status"] != "success" {
            return Err(format!(
                "HTTP {status}: {}: {}",
                v["errorType"].as_str().unwrap_or("?"),
                v["error"].as_str().unwrap_or(&body)
            ));
        }
        Ok(match &v["data"]["result"] {
            Value::Array(a) => a.clone(),
            // Scalars and strings: one result.
            Value::Null => Vec::new(),
            other => vec![other.clone()],
        })
    }

    /// `/api/v1/alerts`: pending and firing alerts.
    pub fn alerts(&self) -> Vec<Value> {
        let (status, body) = get(&format!("{}/api/v1/alerts", self.url));
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).expect("alerts JSON");
        v["data"]["alerts"].as_array().cloned().unwrap_or_default()
    }
}
