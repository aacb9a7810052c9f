//! The Prometheus rules (`rules/`), their runbooks (`docs/runbooks.md`) and the example
//! Alertmanager configuration (`deploy/alertmanager/alertmanager.yml`), checked with the real
//! tools: `promtool check rules`, `promtool test rules` (the unit tests in `rules/tests/`),
//! `amtool check-config`, `amtool config routes test`, and a real Alertmanager for inhibition.
//! A missing tool fails these tests (install Debian's `prometheus` and `prometheus-alertmanager`;
//! `bash scripts/test.sh` does).

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tessera_e2e::monitoring::{
    free_port, get, rule_files, rule_test_files, rules, run_tool, tool, yaml,
};
use tessera_e2e::repo_root;

fn path_args(paths: &[std::path::PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.display().to_string()).collect()
}

#[test]
fn promtool_check_rules_accepts_every_rule_file() {
    let files = path_args(&rule_files());
    let mut args = vec!["check", "rules"];
    args.extend(files.iter().map(String::as_str));
    let (ok, out) = run_tool("promtool", &args, &repo_root());
    assert!(ok, "promtool check rules failed:\n{out}");
    // One "SUCCESS: N rules found" per file.
    let n = rules().len();
    let found: usize = out
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("SUCCESS: ")?
                .strip_suffix(" rules found")?
                .parse::<usize>()
                .ok()
        })
        .sum();
    assert_eq!(found, n, "expected {n} rules:\n{out}");
}

#[test]
fn promtool_unit_tests_pass() {
    let files = path_args(&rule_test_files());
    let mut args = vec!["test", "rules"];
    args.extend(files.iter().map(String::as_str));
    let (ok, out) = run_tool("promtool", &args, &repo_root().join("rules/tests"));
    assert!(ok, "promtool test rules failed:\n{out}");
    assert_eq!(
        out.matches("SUCCESS").count(),
        files.len(),
        "one SUCCESS per test file:\n{out}"
    );
}

/// The workspace's `repository` URL (root Cargo.toml): runbook links are relative to it.
fn repository() -> String {
    let text = std::fs::read_to_string(repo_root().join("Cargo.toml")).expect("Cargo.toml");
    text.lines()
        .find_map(|l| {
            let v = l
                .strip_prefix("repository")?
                .trim_start()
                .strip_prefix('=')?;
            Some(v.trim().trim_matches('"').to_string())
        })
        .expect("repository in [workspace.package]")
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to dashes, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_alert_has_severity_summary_description_and_a_runbook_section() {
    let runbooks = std::fs::read_to_string(repo_root().join("docs/runbooks.md")).unwrap();
    let sections: BTreeMap<String, String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(|h| (anchor(h), h.to_string()))
        .collect();
    let base = format!("{}/blob/main/docs/runbooks.md#", repository());
    let alerts: Vec<_> = rules().into_iter().filter(|r| r.alert.is_some()).collect();
    assert!(alerts.len() >= 14, "{} alerts", alerts.len());
    let mut names = BTreeSet::new();
    for r in &alerts {
        let name = r.alert.as_deref().unwrap();
        assert!(names.insert(name), "alert {name} defined twice");
        assert!(
            name.starts_with("Tessera"),
            "{name}: alert names start with Tessera"
        );
        let severity = r.labels["severity"].as_str().unwrap_or("");
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: severity {severity:?} is not critical, warning or info"
        );
        for key in ["summary", "description"] {
            let text = r.annotations[key].as_str().unwrap_or("");
            assert!(
                text.len() >= 20,
                "{name}: annotation {key} is missing or empty"
            );
        }
        let url = r.annotations["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no runbook_url"));
        let a = url
            .strip_prefix(&base)
            .unwrap_or_else(|| panic!("{name}: runbook_url {url} does not start with {base}"));
        assert_eq!(a, anchor(name), "{name}: runbook anchor should be its name");
        assert!(
            sections.contains_key(a),
            "{name}: docs/runbooks.md has no section '## {name}' (anchor #{a})"
        );
    }
    for (a, heading) in &sections {
        assert!(
            alerts
                .iter()
                .any(|r| anchor(r.alert.as_deref().unwrap()) == *a),
            "docs/runbooks.md section '## {heading}' belongs to no alert"
        );
    }
}

#[test]
fn every_alert_is_unit_tested_firing_and_not_firing_and_every_recording_rule_evaluated() {
    let mut firing = BTreeSet::new();
    let mut silent = BTreeSet::new();
    let mut exprs = Vec::new();
    for file in rule_test_files() {
        let doc = yaml(&file);
        for t in doc["tests"].as_array().expect("tests") {
            for a in t["alert_rule_test"].as_array().into_iter().flatten() {
                let name = a["alertname"].as_str().expect("alertname").to_string();
                match a["exp_alerts"].as_array() {
                    Some(v) if !v.is_empty() => firing.insert(name),
                    _ => silent.insert(name),
                };
            }
            for e in t["promql_expr_test"].as_array().into_iter().flatten() {
                exprs.push(e["expr"].as_str().unwrap_or("").to_string());
            }
        }
    }
    for r in rules() {
        if let Some(name) = &r.alert {
            assert!(
                firing.contains(name),
                "{name}: no promtool test where it fires"
            );
            assert!(
                silent.contains(name),
                "{name}: no promtool test where it does not fire"
            );
        } else {
            let record = r.record.as_deref().unwrap();
            assert!(
                exprs.iter().any(|e| e.contains(record)),
                "recording rule {record} is evaluated by no promql_expr_test"
            );
        }
    }
}

#[test]
fn recording_rules_are_named_level_metric_operations() {
    for r in rules() {
        let Some(name) = r.record else { continue };
        let parts: Vec<&str> = name.split(':').collect();
        assert_eq!(parts.len(), 3, "{name}: expected level:metric:operations");
        // The advisor's rules (rules/tessera-advisor.rules.yml) keep every label of the raw
        // series: their level is the table they feed, their metric part the exporter's own
        // name, dcgm-exporter's in upper case.
        let advisor = r.file.ends_with("tessera-advisor.rules.yml");
        let lower = |p: &str| {
            p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        assert!(
            parts.iter().all(|p| !p.is_empty())
                && lower(parts[0])
                && lower(parts[2])
                && (lower(parts[1]) || (advisor && parts[1].starts_with("DCGM_FI_"))),
            "{name}: lower case, digits and _ only"
        );
        assert!(
            parts[1].starts_with("tessera_") || (advisor && parts[1].starts_with("DCGM_FI_")),
            "{name}: the metric part names a tessera metric"
        );
        // The work rules (rules/tessera-work.rules.yml) keep the pod's labels.
        let work = r.file.ends_with("tessera-work.rules.yml");
        let levels: &[&str] = if advisor {
            &["gpu", "mig", "process"]
        } else if work {
            &["namespace_pod", "namespace_pod_unit", "namespace_unit"]
        } else {
            &["job", "instance", "instance_gpu"]
        };
        assert!(
            levels.contains(&parts[0]),
            "{name}: level {} is not one of {levels:?}",
            parts[0]
        );
        if advisor {
            assert!(
                name.ends_with(":max1m") && r.expr.starts_with("max_over_time("),
                "{name}: the advisor's rules are 1-minute maxima"
            );
        }
    }
}

fn alertmanager_config() -> String {
    repo_root()
        .join("deploy/alertmanager/alertmanager.yml")
        .display()
        .to_string()
}

#[test]
fn amtool_accepts_the_alertmanager_config_and_routes_by_severity() {
    let config = alertmanager_config();
    let (ok, out) = run_tool("amtool", &["check-config", &config], &repo_root());
    assert!(ok, "amtool check-config failed:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
    let severities: BTreeSet<String> = rules()
        .iter()
        .filter_map(|r| r.labels["severity"].as_str().map(str::to_string))
        .collect();
    let receivers = [
        ("critical", "gpu-oncall-pager"),
        ("warning", "gpu-team"),
        ("info", "gpu-efficiency-report"),
    ];
    for s in &severities {
        assert!(
            receivers.iter().any(|(sev, _)| sev == s),
            "severity {s} of the rules has no route"
        );
    }
    for (severity, receiver) in receivers {
        let label = format!("severity={severity}");
        let verify = format!("--verify.receivers={receiver}");
        let (ok, out) = run_tool(
            "amtool",
            &[
                "config",
                "routes",
                "test",
                &format!("--config.file={config}"),
                &verify,
                "alertname=TesseraSomething",
                &label,
            ],
            &repo_root(),
        );
        assert!(ok, "severity {severity} should go to {receiver}:\n{out}");
    }
}

/// A real Alertmanager on 127.0.0.1 (clustering off); killed on drop.
struct Alertmanager {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn post_alerts(url: &str, alerts: &Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .post(format!("{url}/api/v2/alerts"))
        .header("Content-Type", "application/json")
        .send(alerts.to_string())
        .expect("POST alerts");
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    assert_eq!(status, 200, "POST /api/v2/alerts: {body}");
}

#[test]
fn alertmanager_inhibits_a_nodes_gpu_alerts_while_its_exporter_is_down() {
    // The inhibition's targets name every GPU-level alert of the rules.
    let config = yaml(std::path::Path::new(&alertmanager_config()));
    let exporter_rule = &config["inhibit_rules"][0];
    let targets: String = exporter_rule["target_matchers"][0]
        .as_str()
        .unwrap()
        .to_string();
    for r in rules() {
        let Some(name) = r.alert else { continue };
        let gpu_level = r.group == "tessera.gpu"
            || (r.group == "tessera.waste" && r.expr.contains("tessera_process_"))
            || (r.group == "tessera.waste" && r.expr.contains("tessera_gpu_idle_seconds"));
        if gpu_level {
            assert!(
                targets
                    .trim_start_matches("alertname=~\"")
                    .trim_end_matches('"')
                    .split('|')
                    .any(|t| t == name),
                "GPU alert {name} is not inhibited while its exporter is down: {targets}"
            );
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = Command::new(tool("prometheus-alertmanager"))
        .arg(format!("--config.file={}", alertmanager_config()))
        .arg(format!("--storage.path={}", dir.path().display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting prometheus-alertmanager");
    let am = Alertmanager {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&format!("{}/-/ready", am.url)).0 != 200 {
        assert!(Instant::now() < deadline, "alertmanager never became ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    let alert = |name: &str, instance: &str, severity: &str, uuid: Option<&str>| {
        let mut labels = json!({
            "alertname": name, "instance": instance, "job": "tessera-exporter", "severity": severity,
        });
        if let Some(u) = uuid {
            labels["uuid"] = json!(u);
        }
        json!({ "labels": labels, "annotations": { "summary": name } })
    };
    post_alerts(
        &am.url,
        &json!([
            alert("TesseraExporterDown", "n1:19435", "warning", None),
            alert(
                "TesseraGpuCriticalXid",
                "n1:19435",
                "critical",
                Some("GPU-a")
            ),
            alert("TesseraIdleLoadedModel", "n1:19435", "info", Some("GPU-a")),
            alert(
                "TesseraGpuCriticalXid",
                "n2:19435",
                "critical",
                Some("GPU-b")
            ),
            alert("TesseraGpuLost", "n2:19435", "critical", Some("GPU-c")),
            alert(
                "TesseraGpuMemoryNearlyFull",
                "n2:19435",
                "warning",
                Some("GPU-c")
            ),
            alert(
                "TesseraGpuMemoryNearlyFull",
                "n2:19435",
                "warning",
                Some("GPU-b")
            ),
        ]),
    );
    let state = |deadline: Instant| loop {
        let (status, body) = get(&format!("{}/api/v2/alerts", am.url));
        assert_eq!(status, 200, "{body}");
        let all: Vec<Value> = serde_json::from_str(&body).unwrap();
        let by: BTreeMap<(String, String, String), String> = all
            .iter()
            .map(|a| {
                (
                    (
                        a["labels"]["alertname"].as_str().unwrap_or("").to_string(),
                        a["labels"]["instance"].as_str().unwrap_or("").to_string(),
                        a["labels"]["uuid"].as_str().unwrap_or("").to_string(),
                    ),
                    a["status"]["state"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        if by.len() == 7 || Instant::now() > deadline {
            return by;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let by = state(Instant::now() + Duration::from_secs(10));
    let s = |name: &str, instance: &str, uuid: &str| {
        by.get(&(name.into(), instance.into(), uuid.into()))
            .cloned()
            .unwrap_or_else(|| panic!("{name} {instance} {uuid} not in Alertmanager: {by:?}"))
    };
    assert_eq!(s("TesseraExporterDown", "n1:19435", ""), "active");
    // n1's exporter is down: its GPU alerts are held back.
    assert_eq!(
        s("TesseraGpuCriticalXid", "n1:19435", "GPU-a"),
        "suppressed"
    );
    assert_eq!(
        s("TesseraIdleLoadedModel", "n1:19435", "GPU-a"),
        "suppressed"
    );
    // n2's exporter is up: its alerts go out, except the warning on the lost GPU.
    assert_eq!(s("TesseraGpuCriticalXid", "n2:19435", "GPU-b"), "active");
    assert_eq!(s("TesseraGpuLost", "n2:19435", "GPU-c"), "active");
    assert_eq!(
        s("TesseraGpuMemoryNearlyFull", "n2:19435", "GPU-c"),
        "suppressed"
    );
    assert_eq!(
        s("TesseraGpuMemoryNearlyFull", "n2:19435", "GPU-b"),
        "active"
    );
}

/// The documents of a multi-document YAML text (split at `---` lines; empty ones left out).
fn yaml_documents(text: &str) -> Vec<Value> {
    let mut docs = Vec::new();
    let mut cur = String::new();
    for line in text.lines().chain(std::iter::once("---")) {
        if line.trim_end() == "---" {
            let v: Value = serde_yaml_ng::from_str(&cur).unwrap_or(Value::Null);
            if !v.is_null() {
                docs.push(v);
            }
            cur.clear();
        } else {
            cur.push_str(line);
            cur.push('\n');
        }
    }
    docs
}

/// Where the PrometheusRule objects of `rules/` are (Prometheus Operator users).
fn prometheus_rules_path() -> std::path::PathBuf {
    repo_root().join("deploy/prometheus-operator/prometheusrules.yaml")
}

/// The Helm chart's copy of the same file (its PrometheusRule template reads it; a chart can
/// read only files inside its folder). Regenerated with it; `exporter/tests/helm.rs` checks the
/// two are identical and that the chart renders each spec unchanged.
fn chart_prometheus_rules_path() -> std::path::PathBuf {
    repo_root().join("deploy/helm/tessera/files/prometheusrules.yaml")
}

/// `deploy/prometheus-operator/prometheusrules.yaml` as generated from `rules/*.yml`: one
/// PrometheusRule per rule file (named after it), its groups exactly the file's.
fn prometheus_rules() -> String {
    let mut out = String::from(
        "# Generated from rules/*.yml by tests/e2e/tests/rules.rs (TESSERA_REGENERATE=1 cargo test -p\n\
         # tessera-e2e --test tests rules::prometheus_rules): do not edit; edit rules/ and regenerate.\n",
    );
    for file in rule_files() {
        let stem = file.file_name().unwrap().to_string_lossy().into_owned();
        let name = stem
            .trim_end_matches(".yml")
            .trim_end_matches(".yaml")
            .trim_end_matches(".rules")
            .to_string();
        let groups = yaml(&file)["groups"].clone();
        let doc = json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {
                "name": name,
                "labels": {
                    "app.kubernetes.io/name": "tessera",
                    "app.kubernetes.io/part-of": "tessera",
                },
            },
            "spec": { "groups": groups },
        });
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&doc).unwrap());
    }
    out
}

/// Issue 52 item 2: the PrometheusRule objects are generated from `rules/` (the files promtool
/// checks and unit-tests above), not copied by hand: the committed file is what the generator
/// writes, each object holds exactly its file's groups, and kustomize renders them into the
/// `tessera` namespace with the label kube-prometheus-stack selects rules by.
#[test]
fn prometheus_rules_are_the_rule_files_groups() {
    let want = prometheus_rules();
    for path in [prometheus_rules_path(), chart_prometheus_rules_path()] {
        if std::env::var_os("TESSERA_REGENERATE").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is not what rules/ generates: regenerate it (TESSERA_REGENERATE=1 cargo test -p tessera-e2e --test tests rules::prometheus_rules)",
            path.display()
        );
    }
    let have = std::fs::read_to_string(prometheus_rules_path()).unwrap();
    // Its objects, parsed back, hold each file's groups.
    let docs = yaml_documents(&have);
    assert_eq!(docs.len(), rule_files().len());
    for (doc, file) in docs.iter().zip(rule_files()) {
        assert_eq!(doc["kind"], "PrometheusRule");
        assert_eq!(
            doc["spec"]["groups"],
            yaml(&file)["groups"],
            "{}",
            file.display()
        );
    }
    // kustomize renders them, namespaced and labelled.
    let kubectl = std::env::var("TESSERA_KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(repo_root().join("deploy/prometheus-operator"))
        .output()
        .unwrap_or_else(|e| panic!("{kubectl}: {e} (scripts/test.sh installs kubectl)"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = yaml_documents(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(rendered.len(), docs.len());
    for r in &rendered {
        assert_eq!(r["metadata"]["namespace"], "tessera");
        assert_eq!(r["metadata"]["labels"]["release"], "kube-prometheus-stack");
        let name = r["metadata"]["name"].as_str().unwrap();
        let src = docs.iter().find(|d| d["metadata"]["name"] == name).unwrap();
        assert_eq!(r["spec"], src["spec"], "{name}");
    }
}
