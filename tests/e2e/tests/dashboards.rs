//! The Grafana dashboards (`dashboards/*.json`): importable (the `DS_PROMETHEUS` input and a
//! `datasource` variable that every panel and query uses, unique ids, sane grid), and every
//! PromQL expression of the dashboards and of the rules reads only metrics the exporter really
//! exports — taken from a scrape of the real binary on the simulator (the monitoring scenario,
//! with processes and a MIG plan, so every family is present) — or that the recording rules
//! record. The same scrape checks that every exported family is documented in docs/metrics.md.

use std::collections::BTreeSet;

use serde_json::Value;
use tessera_e2e::monitoring::{
    Exporter, dashboard_files, dashboard_queries, exposed_metric_names, json, panels, rules,
};
use tessera_e2e::{exporter, promql};

const DS: &str = "${datasource}";

fn uses_the_variable(ds: &Value) -> bool {
    ds["type"] == "prometheus" && ds["uid"] == DS
}

#[test]
fn dashboards_are_importable_with_the_datasource_as_a_variable() {
    let mut uids = BTreeSet::new();
    for file in dashboard_files() {
        let name = file.display().to_string();
        let d = json(&file);
        assert!(
            d["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{name}: title"
        );
        let uid = d["uid"].as_str().unwrap_or_default();
        assert!(
            !uid.is_empty() && uids.insert(uid.to_string()),
            "{name}: uid {uid:?} missing or not unique"
        );
        assert!(
            d["schemaVersion"].as_u64().is_some(),
            "{name}: schemaVersion"
        );
        assert!(d["id"].is_null(), "{name}: id must be null for import");
        let inputs = d["__inputs"].as_array().expect("__inputs");
        assert!(
            inputs.iter().any(|i| i["name"] == "DS_PROMETHEUS"
                && i["type"] == "datasource"
                && i["pluginId"] == "prometheus"),
            "{name}: no DS_PROMETHEUS datasource input"
        );
        let vars = d["templating"]["list"].as_array().expect("templating");
        let ds_var = vars
            .iter()
            .find(|v| v["name"] == "datasource")
            .unwrap_or_else(|| panic!("{name}: no datasource variable"));
        assert_eq!(ds_var["type"], "datasource", "{name}");
        assert_eq!(ds_var["query"], "prometheus", "{name}");
        for v in vars.iter().filter(|v| v["type"] == "query") {
            assert!(
                uses_the_variable(&v["datasource"]),
                "{name}: variable {} does not use ${{datasource}}",
                v["name"]
            );
        }
        let mut ids = BTreeSet::new();
        let all = panels(&d);
        assert!(all.len() >= 5, "{name}: only {} panels", all.len());
        for p in all {
            let title = p["title"].as_str().unwrap_or("");
            let id = p["id"]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: {title}: id"));
            assert!(ids.insert(id), "{name}: panel id {id} repeated");
            let g = &p["gridPos"];
            let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
            assert!(
                x + w <= 24 && g["h"].as_u64().unwrap() > 0,
                "{name}: {title}: gridPos"
            );
            if p["type"] == "row" {
                continue;
            }
            assert!(!title.is_empty(), "{name}: panel {id} has no title");
            assert!(
                uses_the_variable(&p["datasource"]),
                "{name}: {title}: datasource is not ${{datasource}}"
            );
            let targets = p["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{name}: {title}: no query");
            let mut refs = BTreeSet::new();
            for t in targets {
                assert!(
                    uses_the_variable(&t["datasource"]),
                    "{name}: {title}: a target's datasource is not ${{datasource}}"
                );
                assert!(
                    refs.insert(t["refId"].as_str().unwrap_or("").to_string()),
                    "{name}: {title}: refId repeated"
                );
                assert!(
                    t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                    "{name}: {title}: empty expr"
                );
            }
        }
    }
    assert_eq!(uids.len(), 3, "fleet, node and waste dashboards");
}

/// Series Prometheus itself makes: the scrape's `up` and the alerts.
const SYNTHETIC: &[&str] = &["up", "ALERTS", "ALERTS_FOR_STATE"];

#[test]
fn every_expression_reads_metrics_the_exporter_exports() {
    let root = tessera_e2e::repo_root();
    // A kubelet that says a pod holds GPU 0 (once the exporter has said its UUID).
    let socket_dir = tempfile::tempdir().unwrap();
    let kubelet = tessera_fake_kubelet::FakeKubelet::start(
        socket_dir.path().join("kubelet.sock"),
        tessera_fake_kubelet::response(vec![]),
    )
    .unwrap();
    let e = Exporter::start(exporter![
        "--backend",
        "sim",
        "--sim.scenario",
        root.join("fixtures/scenarios/alerting.toml"),
        "--sim.time",
        "2026-11-02T08:00:00Z",
        "--mig.config",
        root.join("fixtures/mig-configs/alerting.yaml"),
        "--mig.config-label",
        "inference-node",
        "--sample.interval",
        "100ms",
        "--kubelet.pod-resources-socket",
        kubelet.path(),
    ]);
    let gpu0 = e
        .scrape()
        .lines()
        .find_map(|l| {
            l.strip_prefix("tessera_gpu_info{")
                .filter(|l| l.contains("gpu=\"0\""))
                .and_then(|l| l.split("uuid=\"").nth(1))
                .and_then(|l| l.split('"').next())
                .map(str::to_string)
        })
        .expect("GPU 0's uuid");
    kubelet.set_response(tessera_fake_kubelet::response(vec![
        tessera_fake_kubelet::pod(
            "chat-api-0",
            "serving",
            &[("server", "nvidia.com/gpu", &[gpu0.as_str()])],
        ),
    ]));
    // Idle times and drift are there from the first sample; the pod families from the first
    // sample after the kubelet's answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let body = loop {
        let body = e.scrape();
        if body.contains("tessera_gpu_pod_unused_seconds{") {
            break body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pod families: {body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let exposed = exposed_metric_names(&body);
    for must in [
        "tessera_gpu_pod_info",
        "tessera_gpu_pod_unused_seconds",
        "tessera_process_idle_seconds",
        "tessera_gpu_idle_seconds",
        "tessera_mig_layout_drift",
        "tessera_mig_info",
        "tessera_process_memory_used_bytes",
        "process_resident_memory_bytes",
    ] {
        assert!(
            exposed.contains(must),
            "the scrape lacks {must}: {exposed:?}"
        );
    }
    let recorded: BTreeSet<String> = rules().into_iter().filter_map(|r| r.record).collect();
    let known = |m: &str| exposed.contains(m) || recorded.contains(m) || SYNTHETIC.contains(&m);

    let mut checked = 0;
    let mut unknown = Vec::new();
    for q in dashboard_queries() {
        let names = promql::metric_names(&q.expr);
        assert!(
            !names.is_empty(),
            "{} {}: no metric in {:?}",
            q.dashboard,
            q.place,
            q.expr
        );
        for m in names {
            checked += 1;
            if !known(&m) {
                unknown.push(format!("{} {}: {m} in {:?}", q.dashboard, q.place, q.expr));
            }
        }
    }
    let work_doc = std::fs::read_to_string(root.join("docs/work.md")).unwrap();
    for r in rules() {
        let what = r.alert.or(r.record).unwrap_or_default();
        for m in promql::metric_names(&r.expr) {
            checked += 1;
            // The advisor's rules for dcgm-exporter's series (rules/tessera-advisor.rules.yml).
            if r.group == "tessera.advisor.dcgm" && m.starts_with("DCGM_FI_") {
                continue;
            }
            // The serving frameworks' work counters (rules/tessera-work.rules.yml): each one
            // listed in docs/work.md.
            if r.group == "tessera.work" && !m.starts_with("tessera_") && !known(&m) {
                assert!(
                    work_doc.contains(&format!("| `{m}`")),
                    "rule {what} reads {m}, which docs/work.md does not list"
                );
                continue;
            }
            if !known(&m) {
                unknown.push(format!("rule {what}: {m} in {:?}", r.expr));
            }
        }
    }
    assert!(checked > 80, "only {checked} metric references found");
    assert!(
        unknown.is_empty(),
        "metrics neither exported nor recorded:\n{}",
        unknown.join("\n")
    );
    // Every exported family is documented.
    let docs = std::fs::read_to_string(root.join("docs/metrics.md")).unwrap();
    let undocumented: Vec<&String> = exposed
        .iter()
        .filter(|m| {
            let family = m.strip_suffix("_total").unwrap_or(m);
            !docs.contains(&format!("`{m}`")) && !docs.contains(&format!("`{family}`"))
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "exported but not in docs/metrics.md: {undocumented:?}"
    );
    // And the other way round: no exported tessera GPU family is left off every dashboard.
    let used: BTreeSet<String> = dashboard_queries()
        .iter()
        .flat_map(|q| promql::metric_names(&q.expr))
        .collect();
    let missing: Vec<&String> = exposed
        .iter()
        .filter(|m| {
            (m.starts_with("tessera_gpu_")
                || m.starts_with("tessera_mig_")
                || m.starts_with("tessera_process_"))
                && !used.contains(*m)
                // Counter families appear as their _total samples.
                && !used.contains(&format!("{m}_total"))
                && !(m.ends_with("_total") && used.contains(m.trim_end_matches("_total")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "exported but on no dashboard: {missing:?}"
    );
}
