//! The Helm chart `deploy/helm/tessera`, rendered and linted by the real Helm engine (PyPI
//! `helm-python-sdk`, the Helm Go library, through `support/kube_tools.py`), and every
//! Kubernetes object that `deploy/` ships, validated strictly (unknown fields refused) against
//! the Kubernetes schemas (PyPI `kubernetes-validate`) and, for the Prometheus Operator's kinds,
//! against its CRD schemas (`crd-schemas/`, see its README).
//!
//! One source of truth per object, checked here: the kustomize folders are what the chart must
//! agree with. For the default values and each documented example (`deploy/helm/tessera/examples`)
//! the chart's DaemonSet must equal the one `kubectl kustomize` renders from deploy/kubernetes
//! (or deploy/kubernetes-without-gpu-operator), changed only as each value documents
//! (`expected_daemonset`: a value it does not know fails the test); its Service, ServiceMonitor,
//! CronJobs, PersistentVolumeClaim and RBAC equal those of deploy/kubernetes, deploy/notify,
//! deploy/report and deploy/*/rbac.yaml; its PrometheusRules are the file the rules test
//! generates. Also: one image naming scheme for both images everywhere; every Kubernetes example
//! reads `prometheus:`; names do not depend on values (so `helm upgrade` replaces objects) and
//! every object carries the release's labels (so `helm uninstall` finds them).
//!
//! What it does not do: install the chart into a cluster (no API server here), nor check the
//! `.Capabilities` detection against a cluster that serves monitoring.coreos.com/v1 (offline
//! rendering serves only the built-in APIs: the test checks that those objects are left out by
//! default and rendered with `prometheusOperator.forceApi`). A missing Python package fails the
//! tests (scripts/test.sh installs them); nothing is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_json::{Value as Json, json};
use serde_yaml_ng::Value;

use super::deploy::{deploy, kubectl_kustomize};

const RELEASE: &str = "tessera";
const NAMESPACE: &str = "tessera";

fn chart() -> PathBuf {
    deploy().join("helm/tessera")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml_documents(text: &str, what: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{what}: {e}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

fn to_json(v: &Value) -> Json {
    serde_json::to_value(v).expect("YAML as JSON")
}

fn to_yaml(v: &Json) -> Value {
    serde_yaml_ng::to_value(v).expect("JSON as YAML")
}

/// Runs `support/kube_tools.py ARGS` with `input` as JSON on stdin; its JSON answer. Fails (with
/// the script's message) when Python or a package is missing.
fn kube_tools(args: &[&str], input: &Json) -> Json {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/kube_tools.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("python3: {e} (scripts/test.sh installs what these tests need)")
        });
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(input.to_string().as_bytes())
            .expect("write to kube_tools.py");
    }
    let out = child.wait_with_output().expect("kube_tools.py");
    assert!(
        out.status.success(),
        "kube_tools.py {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("kube_tools.py prints JSON")
}

/// One render of the chart: its objects (in template order) and NOTES.txt.
struct Render {
    objects: Vec<Value>,
    notes: String,
}

/// The chart rendered by the Helm engine with `values` as release `name` in `namespace`;
/// `Err` with Helm's message when it refuses (schema, template error).
fn try_render(values: &Json, name: &str, namespace: &str) -> Result<Render, String> {
    let chart = chart();
    let out = kube_tools(
        &["render", chart.to_str().unwrap(), name, namespace],
        values,
    );
    if let Some(e) = out.get("error") {
        return Err(e.as_str().unwrap_or_default().to_string());
    }
    let manifests = out["manifests"].as_object().expect("manifests");
    let mut objects = Vec::new();
    let mut notes = String::new();
    for (template, text) in manifests {
        let text = text.as_str().unwrap();
        if template.ends_with("NOTES.txt") {
            notes = text.to_string();
        } else {
            objects.extend(yaml_documents(text, template));
        }
    }
    Ok(Render { objects, notes })
}

fn render(values: &Json) -> Render {
    try_render(values, RELEASE, NAMESPACE).unwrap_or_else(|e| panic!("helm render {values}: {e}"))
}

/// Strict validation of `objects`: one line per error.
fn validation_errors(objects: &[Value]) -> Vec<String> {
    let input = Json::Array(objects.iter().map(to_json).collect());
    kube_tools(&["validate"], &input)
        .as_array()
        .expect("a list of errors")
        .iter()
        .map(|e| format!("{}: {}", e["object"], e["error"]))
        .collect()
}

/// `a` with `b` merged in as Helm merges values: maps key by key, anything else replaced.
fn merge(a: &Json, b: &Json) -> Json {
    match (a, b) {
        (Json::Object(a), Json::Object(b)) => {
            let mut out = a.clone();
            for (k, v) in b {
                let merged = match out.get(k) {
                    Some(old) => merge(old, v),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Json::Object(out)
        }
        (_, b) => b.clone(),
    }
}

fn chart_defaults() -> Json {
    to_json(&serde_yaml_ng::from_str(&read(&chart().join("values.yaml"))).expect("values.yaml"))
}

fn app_version() -> String {
    let chart: Value = serde_yaml_ng::from_str(&read(&chart().join("Chart.yaml"))).unwrap();
    chart["appVersion"]
        .as_str()
        .expect("appVersion")
        .to_string()
}

/// The documented values examples, by file name.
fn examples() -> BTreeMap<String, Json> {
    let dir = chart().join("examples");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("deploy/helm/tessera/examples") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".yaml") {
            let v: Value = serde_yaml_ng::from_str(&read(&path)).unwrap();
            out.insert(name, to_json(&v));
        }
    }
    assert!(out.len() >= 3, "examples: {:?}", out.keys());
    out
}

/// Renders the objects of the Prometheus Operator too, as on a cluster that serves its API.
fn forced(values: &Json) -> Json {
    merge(values, &json!({"prometheusOperator": {"forceApi": true}}))
}

fn all_rbac() -> Json {
    json!({"rbac": {"migApply": {"enabled": true}, "sharing": {"enabled": true},
                    "scaleDown": {"enabled": true}}})
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn the<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(objects, kind);
    assert_eq!(found.len(), 1, "one {kind}: {found:?}");
    found[0]
}

/// The object of `kind` whose `app.kubernetes.io/name` label is `name`.
fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = of_kind(objects, kind)
        .into_iter()
        .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} {name}");
    found[0]
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    match v.as_mapping() {
        None => BTreeMap::new(),
        Some(m) => m
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => serde_yaml_ng::to_string(other).unwrap().trim().to_string(),
                };
                (k.as_str().unwrap().to_string(), v)
            })
            .collect(),
    }
}

/// `small`'s labels are all in `big` with the same values.
fn assert_labels_within(small: &Value, big: &Value, what: &str) {
    let (small, big) = (string_map(small), string_map(big));
    for (k, v) in &small {
        assert_eq!(big.get(k), Some(v), "{what}: label {k} (have {big:?})");
    }
}

/// The labels the chart adds to the kustomize folders' selectors and labels; nothing else may
/// differ there.
const CHART_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
];

/// The chart's labels are the kustomize object's plus only the chart's own (and `extra`).
fn assert_same_labels(chart: &Value, kustomize: &Value, extra: &Json, what: &str) {
    assert_labels_within(kustomize, chart, what);
    let kustomize = string_map(kustomize);
    let extra: BTreeSet<String> = extra
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    for k in string_map(chart).keys() {
        assert!(
            kustomize.contains_key(k)
                || CHART_LABELS.contains(&k.as_str())
                || extra.contains(k)
                || k == "app.kubernetes.io/component",
            "{what}: label {k} is neither the kustomize folder's nor the chart's"
        );
    }
}

fn kind_set(objects: &[Value]) -> BTreeSet<(String, String, String)> {
    objects
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_pinned_python_packages_are_installed() {
    let script = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/test.sh"));
    let pin = |var: &str| {
        script
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{var}=")))
            .unwrap_or_else(|| panic!("scripts/test.sh sets {var}"))
            .to_string()
    };
    let versions = kube_tools(&["versions"], &json!(null));
    assert_eq!(
        versions["helm-python-sdk"],
        pin("HELM_PYTHON_SDK_VERSION"),
        "{versions}"
    );
    assert_eq!(
        versions["kubernetes-validate"],
        pin("KUBERNETES_VALIDATE_VERSION"),
        "{versions}"
    );
    assert!(
        versions["helm"].as_str().unwrap().starts_with("v4."),
        "{versions}"
    );
}

#[test]
fn the_chart_lints_clean_and_its_schema_refuses_wrong_values() {
    let chart = chart();
    let mut cases = vec![("defaults".to_string(), json!(null))];
    cases.extend(examples());
    for (name, values) in cases {
        let report = kube_tools(&["lint", chart.to_str().unwrap()], &values);
        assert_eq!(report["total_charts_linted"], 1, "{name}: {report}");
        assert_eq!(
            report["messages"],
            json!([]),
            "helm lint --strict, {name}: {report}"
        );
        assert_eq!(
            report["errors"],
            json!([]),
            "helm lint --strict, {name}: {report}"
        );
    }
    // Lint sees what the schema refuses.
    let report = kube_tools(
        &["lint", chart.to_str().unwrap()],
        &json!({"exporter": {"bogus": true}}),
    );
    assert_ne!(report["errors"], json!([]), "{report}");
    // values.schema.json refuses unknown keys, wrong types and bad settings.
    for (bad, why) in [
        (json!({"exporter": {"gpuOperatr": false}}), "gpuOperatr"),
        (json!({"report": {"keep": "12"}}), "keep"),
        (json!({"image": {"registry": ""}}), "registry"),
        (json!({"prometheus": {"url": "prometheus:9090"}}), "url"),
        (json!({"notify": {"minSeverity": "high"}}), "minSeverity"),
        (json!({"extra": 1}), "extra"),
    ] {
        let err = try_render(&bad, RELEASE, NAMESPACE)
            .err()
            .unwrap_or_else(|| panic!("{bad} was accepted"));
        assert!(err.contains(why), "{bad}: {err}");
    }
}

/// Default values: no ServiceMonitor or PrometheusRule where the API is not served (offline,
/// only built-in APIs are); with `forceApi` they are rendered.
#[test]
fn prometheus_operator_objects_only_where_the_api_is_served_or_forced() {
    let plain = render(&json!({}));
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(of_kind(&plain.objects, kind).is_empty(), "{kind}");
    }
    assert!(
        plain
            .notes
            .contains("does not serve monitoring.coreos.com/v1")
    );
    let with = render(&forced(&json!({})));
    assert_eq!(of_kind(&with.objects, "ServiceMonitor").len(), 1);
    // One PrometheusRule per rule file of rules/ (tessera, advisor, work).
    let rule_files = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../rules"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".rules.yml"))
        })
        .count();
    assert_eq!(rule_files, 3);
    assert_eq!(of_kind(&with.objects, "PrometheusRule").len(), rule_files);
    assert!(
        with.notes.contains("get servicemonitors,prometheusrules"),
        "{}",
        with.notes
    );
    // Switched off, they stay off even where forced.
    let off = render(&forced(
        &json!({"serviceMonitor": {"enabled": false}, "prometheusRules": {"enabled": false}}),
    ));
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(of_kind(&off.objects, kind).is_empty(), "{kind}");
    }
    assert_eq!(kind_set(&plain.objects), kind_set(&off.objects));
}

/// The kustomize DaemonSet of the variant `values` selects, changed as each value documents.
/// Panics on an exporter value it does not model, so that a new value comes with its check.
fn expected_daemonset(values: &Json) -> Value {
    let ex = &values["exporter"];
    let dir = if ex["gpuOperator"] == true {
        "deploy/kubernetes"
    } else {
        "deploy/kubernetes-without-gpu-operator"
    };
    let rendered = kubectl_kustomize(dir);
    let mut ds = to_json(the(&rendered, "DaemonSet"));
    let tag = values["image"]["tag"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .unwrap_or_else(app_version);
    let registry = values["image"]["registry"].as_str().unwrap();
    let pod = &mut ds["spec"]["template"]["spec"];
    let c = &mut pod["containers"][0];
    c["image"] = json!(format!("{registry}/tessera-exporter:{tag}"));
    if let Some(p) = values["image"]["pullPolicy"]
        .as_str()
        .filter(|p| !p.is_empty())
    {
        c["imagePullPolicy"] = json!(p);
    }
    for (key, value) in ex.as_object().unwrap() {
        let set = |v: &Json| !(v.is_null() || v == "" || v == &json!({}) || v == &json!([]));
        match key.as_str() {
            "enabled" | "gpuOperator" => {}
            "resources" => pod["containers"][0]["resources"] = value.clone(),
            "tolerations" if set(value) => pod["tolerations"] = value.clone(),
            "tolerations" => {
                pod.as_object_mut().unwrap().remove("tolerations");
            }
            "extraArgs" => {
                let args = pod["containers"][0]["args"].as_array_mut().unwrap();
                args.extend(value.as_array().unwrap().iter().cloned());
            }
            "nodeSelector" if set(value) => {
                let selector = pod
                    .as_object_mut()
                    .unwrap()
                    .entry("nodeSelector")
                    .or_insert(json!({}));
                for (k, v) in value.as_object().unwrap() {
                    selector[k] = v.clone();
                }
            }
            "priorityClassName" | "runtimeClassName" if set(value) => {
                pod[key.as_str()] = value.clone();
            }
            "nodeSelector" | "priorityClassName" | "runtimeClassName" => {}
            other => panic!("exporter.{other}: not modelled by expected_daemonset"),
        }
    }
    if let Some(secrets) = values["imagePullSecrets"]
        .as_array()
        .filter(|s| !s.is_empty())
    {
        pod["imagePullSecrets"] = json!(secrets);
    }
    to_yaml(&ds)
}

/// The chart's DaemonSet, Service and ServiceMonitor for the default values and every example
/// agree with what `kubectl kustomize` renders for the same settings.
#[test]
fn the_exporter_objects_agree_with_the_kustomize_folders() {
    let mut cases = vec![("defaults".to_string(), json!({}))];
    cases.extend(examples());
    let base = kubectl_kustomize("deploy/kubernetes");
    for (name, example) in cases {
        let values = merge(&chart_defaults(), &example);
        let objects = render(&forced(&example)).objects;
        let what = format!("{name}: DaemonSet");
        let ds = the(&objects, "DaemonSet");
        let want = expected_daemonset(&values);
        assert_eq!(
            ds["spec"]["template"]["spec"], want["spec"]["template"]["spec"],
            "{what}: pod spec"
        );
        assert_eq!(ds["metadata"]["name"], want["metadata"]["name"], "{what}");
        assert_eq!(ds["spec"]["updateStrategy"], want["spec"]["updateStrategy"]);
        let extra = &values["commonLabels"];
        assert_same_labels(
            &ds["metadata"]["labels"],
            &want["metadata"]["labels"],
            extra,
            &what,
        );
        assert_same_labels(
            &ds["spec"]["template"]["metadata"]["labels"],
            &want["spec"]["template"]["metadata"]["labels"],
            extra,
            &what,
        );
        assert_same_labels(
            &ds["spec"]["selector"]["matchLabels"],
            &want["spec"]["selector"]["matchLabels"],
            &json!({}),
            &what,
        );

        let what = format!("{name}: Service");
        let (svc, want) = (the(&objects, "Service"), the(&base, "Service"));
        let mut have_spec = svc["spec"].clone();
        let mut want_spec = want["spec"].clone();
        assert_same_labels(
            &have_spec["selector"],
            &want_spec["selector"],
            &json!({}),
            &what,
        );
        have_spec.as_mapping_mut().unwrap().remove("selector");
        want_spec.as_mapping_mut().unwrap().remove("selector");
        assert_eq!(have_spec, want_spec, "{what}");
        assert_eq!(svc["metadata"]["name"], want["metadata"]["name"]);

        let what = format!("{name}: ServiceMonitor");
        let (sm, want) = (
            the(&objects, "ServiceMonitor"),
            the(&base, "ServiceMonitor"),
        );
        let mut have_spec = sm["spec"].clone();
        let mut want_spec = want["spec"].clone();
        assert_same_labels(
            &have_spec["selector"]["matchLabels"],
            &want_spec["selector"]["matchLabels"],
            &json!({}),
            &what,
        );
        have_spec.as_mapping_mut().unwrap().remove("selector");
        want_spec.as_mapping_mut().unwrap().remove("selector");
        let endpoint = &mut want_spec["endpoints"][0];
        endpoint["interval"] = to_yaml(&values["serviceMonitor"]["interval"]);
        endpoint["scrapeTimeout"] = to_yaml(&values["serviceMonitor"]["scrapeTimeout"]);
        assert_eq!(have_spec, want_spec, "{what}");
        // The selector finds the Service, the Service the DaemonSet's pods.
        assert_labels_within(
            &sm["spec"]["selector"]["matchLabels"],
            &svc["metadata"]["labels"],
            &what,
        );
        assert_labels_within(
            &svc["spec"]["selector"],
            &ds["spec"]["template"]["metadata"]["labels"],
            &what,
        );
        // deploy/kubernetes's `release` label is the chart's prometheusOperator.labels (the
        // kube-prometheus-stack example sets the same).
        let extra = &values["prometheusOperator"]["labels"];
        let mut want_labels = want["metadata"]["labels"].clone();
        let release = want_labels.as_mapping_mut().unwrap().remove("release");
        assert_eq!(
            release.as_ref().and_then(Value::as_str),
            Some("kube-prometheus-stack")
        );
        assert_same_labels(
            &sm["metadata"]["labels"],
            &want_labels,
            &merge(extra, &values["commonLabels"]),
            &what,
        );
        assert_labels_within(&to_yaml(extra), &sm["metadata"]["labels"], &what);
        if name == "kube-prometheus-stack.yaml" {
            assert_labels_within(
                &want["metadata"]["labels"],
                &sm["metadata"]["labels"],
                &what,
            );
        }
    }
}

/// The kube-prometheus-stack example is the settings of the kustomize folders for the
/// Prometheus Operator (deploy/prometheus-operator's release label, deploy/notify's cluster label
/// and generator URL): with it, the PrometheusRules, the CronJobs and the report's volume are
/// the kustomize folders' objects, and the rule specs are the generated file's.
#[test]
fn rules_cronjobs_and_volume_agree_with_the_kustomize_folders() {
    let example = &examples()["kube-prometheus-stack.yaml"];
    let objects = render(&forced(example)).objects;

    // PrometheusRules: the chart reads its copy of the generated file.
    let generated = read(&deploy().join("prometheus-operator/prometheusrules.yaml"));
    let copy = read(&chart().join("files/prometheusrules.yaml"));
    assert!(
        generated == copy,
        "deploy/helm/tessera/files/prometheusrules.yaml differs from deploy/prometheus-operator/prometheusrules.yaml: regenerate both (TESSERA_REGENERATE=1 cargo test -p tessera-e2e --test tests rules::prometheus_rules)"
    );
    let kustomized = kubectl_kustomize("deploy/prometheus-operator");
    let rules = of_kind(&objects, "PrometheusRule");
    assert_eq!(rules.len(), kustomized.len());
    assert_eq!(
        rules.len(),
        yaml_documents(&generated, "prometheusrules.yaml").len()
    );
    for want in &kustomized {
        let name = &want["metadata"]["name"];
        let have = rules
            .iter()
            .find(|r| &r["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("PrometheusRule {name:?} not rendered"));
        assert_eq!(have["spec"], want["spec"], "{name:?}");
        assert_eq!(have["metadata"]["namespace"], want["metadata"]["namespace"]);
        assert_same_labels(
            &have["metadata"]["labels"],
            &want["metadata"]["labels"],
            &json!({}),
            &format!("PrometheusRule {name:?}"),
        );
    }

    for (dir, component) in [
        ("deploy/notify", "tessera-notify"),
        ("deploy/report", "tessera-report"),
    ] {
        let kustomized = kubectl_kustomize(dir);
        let want = named(&kustomized, "CronJob", component);
        let have = named(&objects, "CronJob", component);
        let what = format!("{dir}: CronJob");
        assert_eq!(have["metadata"]["name"], want["metadata"]["name"], "{what}");
        assert_eq!(have["metadata"]["namespace"], want["metadata"]["namespace"]);
        assert_same_labels(
            &have["metadata"]["labels"],
            &want["metadata"]["labels"],
            &json!({}),
            &what,
        );
        let mut have_spec = have["spec"].clone();
        let mut want_spec = want["spec"].clone();
        let template = |s: &mut Value| {
            s["jobTemplate"]["spec"]["template"]
                .as_mapping_mut()
                .unwrap()
                .remove("metadata")
                .expect("pod template labels")
        };
        let (have_meta, want_meta) = (template(&mut have_spec), template(&mut want_spec));
        assert_same_labels(
            &have_meta["labels"],
            &want_meta["labels"],
            &json!({}),
            &what,
        );
        assert_eq!(have_spec, want_spec, "{what}: spec");
        for claim in of_kind(&kustomized, "PersistentVolumeClaim") {
            let mine = of_kind(&objects, "PersistentVolumeClaim");
            assert_eq!(mine.len(), 1);
            assert_eq!(mine[0]["spec"], claim["spec"], "{dir}: PVC");
            assert_eq!(mine[0]["metadata"]["name"], claim["metadata"]["name"]);
        }
    }
}

/// The optional RBAC is deploy/mig-manager's, deploy/sharing's and deploy/scale-down's, rule for
/// rule (the analyzer's tests prove each rule is used and each call allowed), bound to a
/// ServiceAccount in the chart's namespace, the Roles in the GPU Operator's.
#[test]
fn rbac_is_the_deploy_folders_rules() {
    let objects = render(&all_rbac()).objects;
    let none = render(&json!({})).objects;
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
    ] {
        assert!(of_kind(&none, kind).is_empty(), "{kind} off by default");
    }
    for (file, component) in [
        ("mig-manager/rbac.yaml", "tessera-mig-apply"),
        ("sharing/rbac.yaml", "tessera-share"),
        ("scale-down/rbac.yaml", "tessera-scale-down"),
    ] {
        let docs = yaml_documents(&read(&deploy().join(file)), file);
        for kind in ["ClusterRole", "Role"] {
            let want = of_kind(&docs, kind);
            let have: Vec<&Value> = of_kind(&objects, kind)
                .into_iter()
                .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/name"] == component)
                .collect();
            assert_eq!(have.len(), want.len(), "{file}: {kind}");
            for (h, w) in have.iter().zip(&want) {
                assert_eq!(h["rules"], w["rules"], "{file}: {kind} rules");
                assert_eq!(h["metadata"]["name"], w["metadata"]["name"], "{file}");
                assert_eq!(h["metadata"]["namespace"], w["metadata"]["namespace"]);
            }
        }
        for kind in ["ClusterRoleBinding", "RoleBinding"] {
            for w in of_kind(&docs, kind) {
                let h = of_kind(&objects, kind)
                    .into_iter()
                    .find(|o| o["metadata"]["name"] == w["metadata"]["name"])
                    .unwrap_or_else(|| panic!("{file}: {kind}"));
                assert_eq!(h["roleRef"], w["roleRef"], "{file}: {kind}");
                assert_eq!(h["subjects"], w["subjects"], "{file}: {kind}");
            }
        }
        let sa = named(&objects, "ServiceAccount", component);
        assert_eq!(sa["metadata"]["namespace"], NAMESPACE);
        assert!(render(&all_rbac()).notes.contains(&format!(
            "--as=system:serviceaccount:{NAMESPACE}:{}",
            sa["metadata"]["name"].as_str().unwrap()
        )));
    }
}

/// Every object of `dir` that is not rendered by kustomize (a folder without a
/// kustomization.yaml), as YAML documents with a kind.
fn plain_manifests() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(deploy()).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() || dir.join("kustomization.yaml").exists() || dir.ends_with("helm") {
            continue;
        }
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            let name = path.to_string_lossy().into_owned();
            if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
                continue;
            }
            for doc in yaml_documents(&read(&path), &name) {
                if doc.get("kind").is_some() && doc.get("apiVersion").is_some() {
                    out.push((name.clone(), doc));
                }
            }
        }
    }
    out
}

/// The kustomize folders under deploy/.
fn kustomize_folders() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(deploy())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("kustomization.yaml").exists())
        .map(|p| format!("deploy/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    out.sort();
    out
}

/// Every object the chart renders (defaults, every example, everything on) and every object of
/// deploy/ validates strictly: the Kubernetes schemas, the Prometheus Operator's CRD schemas.
#[test]
fn every_object_validates_strictly() {
    let mut objects: Vec<(String, Value)> = Vec::new();
    let mut cases = vec![
        ("defaults".to_string(), json!({})),
        (
            "everything".to_string(),
            merge(&forced(&json!({})), &all_rbac()),
        ),
    ];
    cases.extend(examples());
    for (name, values) in &cases {
        for o in render(&forced(values)).objects {
            objects.push((format!("chart {name}"), o));
        }
    }
    let folders = kustomize_folders();
    for dir in [
        "deploy/kubernetes",
        "deploy/mig-manager",
        "deploy/notify",
        "deploy/report",
    ] {
        assert!(folders.iter().any(|f| f == dir), "{dir} in {folders:?}");
    }
    for dir in &folders {
        for o in kubectl_kustomize(dir) {
            objects.push((dir.clone(), o));
        }
    }
    let plain = plain_manifests();
    for file in [
        "scale-down/rbac.yaml",
        "sharing/rbac.yaml",
        "alertmanager/alertmanagerconfig.yaml",
    ] {
        assert!(plain.iter().any(|(n, _)| n.ends_with(file)), "{file}");
    }
    objects.extend(plain);
    let kinds: BTreeSet<&str> = objects
        .iter()
        .map(|(_, o)| o["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "DaemonSet",
        "ServiceMonitor",
        "PrometheusRule",
        "AlertmanagerConfig",
        "CronJob",
        "Namespace",
    ] {
        assert!(kinds.contains(kind), "{kind} in {kinds:?}");
    }
    let docs: Vec<Value> = objects.iter().map(|(_, o)| o.clone()).collect();
    let errors = validation_errors(&docs);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// The validation refuses what it should: an unknown field anywhere (a built-in kind, a CRD's
/// spec, metadata), a wrong type, a kind without a schema.
#[test]
fn strict_validation_refuses_unknown_fields() {
    let objects = render(&forced(&json!({}))).objects;
    let mut ds = to_json(the(&objects, "DaemonSet"));
    ds["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = json!("Always");
    let mut sm = to_json(the(&objects, "ServiceMonitor"));
    sm["spec"]["endpoints"][0]["intervall"] = json!("15s");
    let mut rule = to_json(of_kind(&objects, "PrometheusRule")[0]);
    rule["metadata"]["label"] = json!({"a": "b"});
    let mut svc = to_json(the(&objects, "Service"));
    svc["spec"]["ports"][0]["port"] = json!("19435");
    let unknown = json!({"apiVersion": "example.invalid/v1", "kind": "Gadget",
                         "metadata": {"name": "g"}});
    let bad = [ds, sm, rule, svc, unknown];
    let errors = validation_errors(&bad.iter().map(to_yaml).collect::<Vec<_>>());
    for needle in [
        "imagePullPolcy",
        "intervall",
        "'label' was unexpected",
        "'19435' is not of type 'integer'",
        "no schema for example.invalid/v1",
    ] {
        assert!(
            errors.iter().any(|e| e.contains(needle)),
            "{needle} not refused: {errors:#?}"
        );
    }
    assert_eq!(errors.len(), bad.len(), "{errors:#?}");
}

/// Every container image of every rendered object.
fn images(objects: &[Value]) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Mapping(m) => {
                for (k, v) in m {
                    if k == "containers" || k == "initContainers" {
                        for c in v.as_sequence().into_iter().flatten() {
                            out.push(c["image"].as_str().unwrap_or_default().to_string());
                        }
                    } else {
                        walk(v, out);
                    }
                }
            }
            Value::Sequence(s) => s.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    objects.iter().for_each(|o| walk(o, &mut out));
    out
}

/// One naming scheme for both images, `<registry>/tessera-exporter:<tag>` and
/// `<registry>/tessera:<tag>`: in every kustomize folder (one registry and tag for all), in the
/// chart for each example's `image`, and no bare `tessera:` image in deploy/ or docs/.
#[test]
fn both_images_follow_one_naming_scheme() {
    let mut seen = BTreeSet::new();
    for dir in kustomize_folders() {
        for image in images(&kubectl_kustomize(&dir)) {
            let name = image
                .strip_prefix("registry.example.invalid/tessera/")
                .and_then(|i| i.strip_suffix(&format!(":{}", app_version())))
                .unwrap_or_else(|| panic!("{dir}: {image} is not <registry>/<name>:<tag>"));
            assert!(
                ["tessera-exporter", "tessera"].contains(&name),
                "{dir}: {image}"
            );
            seen.insert(name.to_string());
        }
    }
    assert_eq!(
        seen.len(),
        2,
        "both images in the kustomize folders: {seen:?}"
    );
    let mut cases = vec![json!({}), all_rbac()];
    cases.extend(examples().into_values());
    for example in cases {
        let values = merge(&chart_defaults(), &example);
        let registry = values["image"]["registry"].as_str().unwrap();
        let tag = values["image"]["tag"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .unwrap_or_else(app_version);
        let found: BTreeSet<String> = images(&render(&example).objects).into_iter().collect();
        let want: BTreeSet<String> = ["tessera-exporter", "tessera"]
            .iter()
            .map(|n| format!("{registry}/{n}:{tag}"))
            .collect();
        assert_eq!(found, want, "{example}");
    }
    // No bare image name in the text of deploy/ and docs/ (a kustomize placeholder is
    // replaced above; Docker Hub's library/tessera is not ours).
    let bare = bare_images_in_deploy_and_docs();
    assert!(bare.is_empty(), "bare tessera images: {bare:#?}");
}

/// Lines of deploy/ and docs/ (outside YAML read by kustomize) naming an image `tessera:` or
/// `tessera-exporter:` with no registry before it: `image: tessera:…`, `docker://tessera:…`,
/// `docker run tessera:…`.
fn bare_images_in_deploy_and_docs() -> Vec<String> {
    let root = deploy().join("..");
    let mut files = Vec::new();
    let mut stack = vec![deploy(), root.join("docs")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for path in files {
        let name = path.to_string_lossy().into_owned();
        let in_kustomize = path
            .parent()
            .is_some_and(|d| d.join("kustomization.yaml").exists());
        if in_kustomize && (name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        out.extend(
            bare_images_in(&text)
                .into_iter()
                .map(|l| format!("{name}: {l}")),
        );
    }
    out
}

/// The lines of `text` that reference a bare `tessera` or `tessera-exporter` image to run or
/// push (an `image:` field, a `docker://` destination, a `run`, `push`, `pull` or `-t` command);
/// tables naming the locally built images by size are not references.
fn bare_images_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let commands = [" run ", " push ", " pull ", " -t ", "--tag"];
    for line in text.lines() {
        let command = commands.iter().any(|c| line.contains(c));
        for image in ["tessera:", "tessera-exporter:"] {
            for (at, _) in line.match_indices(image) {
                let before = line[..at].chars().last();
                let after = line[at + image.len()..].chars().next();
                let tagged = after.is_some_and(|c| c.is_ascii_digit() || c == '$' || c == '{');
                let bare = (command && matches!(before, None | Some(' ' | '"' | '\'' | '=')))
                    || line[..at].ends_with("docker://")
                    || line[..at].ends_with("image: ");
                if tagged && bare {
                    out.push(line.trim().to_string());
                }
            }
        }
    }
    out
}

#[test]
fn the_bare_image_check_finds_bare_names() {
    let text = "image: tessera:0.1.0\n\
                skopeo copy x docker://tessera-exporter:0.1.0\n\
                image: registry.example/tessera/tessera:0.1.0\n\
                docker run REGISTRY/tessera-exporter:0.1.0\n\
                podman run --rm tessera:0.1.0 --help\n\
                | `tessera:0.1.0` | 126 MB |\n\
                # tessera: the advisor\n";
    assert_eq!(
        bare_images_in(text),
        [
            "image: tessera:0.1.0",
            "skopeo copy x docker://tessera-exporter:0.1.0",
            "podman run --rm tessera:0.1.0 --help",
        ]
    );
}

/// Every `--source` of a container's arguments (as `--source=X` or `--source X`).
fn container_sources(objects: &[Value]) -> Vec<String> {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Mapping(m) => {
                if let Some(args) = m.get("args").and_then(Value::as_sequence) {
                    let args: Vec<&str> = args.iter().filter_map(Value::as_str).collect();
                    for (i, a) in args.iter().enumerate() {
                        if let Some(s) = a.strip_prefix("--source=") {
                            out.push(s.to_string());
                        } else if *a == "--source" {
                            out.push(args.get(i + 1).unwrap_or(&"").to_string());
                        }
                    }
                }
                m.values().for_each(|v| walk(v, out));
            }
            Value::Sequence(s) => s.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    objects.iter().for_each(|o| walk(o, &mut out));
    out
}

/// In a Markdown text, the `--source` values of the shell blocks for Kubernetes (a block that
/// runs kubectl, helm, `tessera share apply`, `tessera scale-down` or `--via mig-manager`, or
/// one under a heading that names Kubernetes) that do not read `prometheus:`, with their line
/// numbers: on Kubernetes the exporter keeps no history.
fn kubernetes_blocks_not_reading_prometheus(text: &str) -> Vec<(usize, String)> {
    let markers = [
        "kubectl ",
        "helm ",
        "tessera share apply",
        "tessera scale-down",
        "--via mig-manager",
        "--via=mig-manager",
    ];
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut block: Option<Vec<(usize, &str)>> = None;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            match block.take() {
                None => block = Some(Vec::new()),
                Some(lines) => {
                    let kube = heading.to_lowercase().contains("kubernetes")
                        || lines
                            .iter()
                            .any(|(_, l)| markers.iter().any(|m| l.contains(m)));
                    if kube {
                        for (n, l) in lines {
                            for (at, _) in l.match_indices("--source") {
                                let rest = &l[at + "--source".len()..];
                                let Some(value) = rest.strip_prefix(['=', ' ']) else {
                                    continue;
                                };
                                let value = value.split_whitespace().next().unwrap_or("");
                                if !value.starts_with("prometheus:") {
                                    out.push((n + 1, value.to_string()));
                                }
                            }
                        }
                    }
                }
            }
        } else if let Some(lines) = block.as_mut() {
            lines.push((n, line));
        } else if line.starts_with('#') {
            heading = line.to_string();
        }
    }
    out
}

#[test]
fn the_prometheus_source_check_finds_history_in_a_kubernetes_block() {
    let text = "# Bare metal\n```sh\ntessera report --source history:/var/lib/tessera/history\n```\n\
                # Anything\n```sh\nkubectl apply -k deploy/notify\n\
                tessera analyze --source=history:/h --plan-out p\n```\n\
                ## On Kubernetes\n```sh\ntessera report --source prometheus:http://p:9090\n\
                tessera report --source csv:x.csv\n```\n";
    assert_eq!(
        kubernetes_blocks_not_reading_prometheus(text),
        [(8, "history:/h".to_string()), (13, "csv:x.csv".to_string())]
    );
}

/// On Kubernetes the advisor reads Prometheus: every `--source` of every container the chart
/// and the kustomize folders render, and every Kubernetes example in deploy/, docs/ and the
/// README.
#[test]
fn every_kubernetes_example_reads_prometheus() {
    let mut sources = Vec::new();
    for dir in kustomize_folders() {
        sources.extend(
            container_sources(&kubectl_kustomize(&dir))
                .into_iter()
                .map(|s| (dir.clone(), s)),
        );
    }
    for (name, example) in examples() {
        sources.extend(
            container_sources(&render(&example).objects)
                .into_iter()
                .map(|s| (name.clone(), s)),
        );
    }
    assert!(sources.len() >= 4, "{sources:?}");
    for (what, source) in &sources {
        assert!(
            source.starts_with("prometheus:"),
            "{what}: --source={source}"
        );
    }
    let root = deploy().join("..");
    let mut files = vec![root.join("README.md")];
    for dir in [root.join("docs"), deploy()] {
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "md") {
                    files.push(p);
                }
            }
        }
    }
    let mut found = Vec::new();
    for f in files {
        for (line, value) in kubernetes_blocks_not_reading_prometheus(&read(&f)) {
            found.push(format!("{}:{line}: --source {value}", f.display()));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// `helm upgrade` with changed values replaces the same objects (names and the DaemonSet's
/// immutable selector do not depend on values), `helm uninstall` finds every object (each
/// carries the release's labels), and a second release collides with nothing.
#[test]
fn names_depend_on_the_release_only_and_every_object_is_labelled() {
    let everything = |v: &Json| merge(&forced(v), &all_rbac());
    let before = render(&everything(&json!({}))).objects;
    let changed = json!({
        "image": {"registry": "other.example/gpu", "tag": "9.9.9"},
        "exporter": {"gpuOperator": false, "priorityClassName": "system-node-critical"},
        "notify": {"schedule": "*/15 * * * *", "labels": {"cluster": "b"}},
        "report": {"keep": 4, "persistence": {"size": "5Gi"}},
        "prometheusOperator": {"labels": {"release": "prom"}},
        "commonLabels": {"team": "gpu"},
    });
    let after = render(&everything(&changed)).objects;
    assert_eq!(kind_set(&before), kind_set(&after));
    assert_eq!(
        the(&before, "DaemonSet")["spec"]["selector"],
        the(&after, "DaemonSet")["spec"]["selector"]
    );
    for objects in [&before, &after] {
        for o in objects.iter() {
            let labels = &o["metadata"]["labels"];
            let what = format!(
                "{} {:?}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"]
            );
            assert_eq!(labels["app.kubernetes.io/instance"], RELEASE, "{what}");
            assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm", "{what}");
            assert_eq!(labels["app.kubernetes.io/part-of"], "tessera", "{what}");
        }
    }
    for o in &after {
        assert_eq!(o["metadata"]["labels"]["team"], "gpu");
    }
    // Another release in the same cluster: no cluster-scoped name and no namespaced name in the
    // same namespace is shared.
    let other = try_render(&everything(&json!({})), "gpu", NAMESPACE)
        .unwrap()
        .objects;
    let mine = kind_set(&before);
    for key in kind_set(&other) {
        assert!(!mine.contains(&key), "{key:?} is in both releases");
    }
    assert!(
        named(&other, "DaemonSet", "tessera-exporter")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"]
            == "gpu"
    );
}

/// namespace.create: the chart makes the namespace with the Pod Security labels the exporter
/// needs and puts every namespaced object into it, whatever the release's namespace.
#[test]
fn the_created_namespace_allows_the_exporter_and_holds_everything() {
    let values = &examples()["own-namespace.yaml"];
    let objects = try_render(&merge(&forced(values), &all_rbac()), RELEASE, "default")
        .unwrap()
        .objects;
    let ns = the(&objects, "Namespace");
    let want = &yaml_documents(&read(&deploy().join("kubernetes/namespace.yaml")), "ns")[0];
    assert_eq!(ns["metadata"]["name"], want["metadata"]["name"]);
    assert_same_labels(
        &ns["metadata"]["labels"],
        &want["metadata"]["labels"],
        &json!({}),
        "Namespace",
    );
    let cluster_scoped = ["Namespace", "ClusterRole", "ClusterRoleBinding"];
    for o in &objects {
        let kind = o["kind"].as_str().unwrap();
        if cluster_scoped.contains(&kind) {
            assert!(o["metadata"]["namespace"].is_null(), "{kind}");
        } else if kind == "Role" || kind == "RoleBinding" {
            assert_eq!(o["metadata"]["namespace"], "gpu-operator", "{kind}");
        } else {
            assert_eq!(o["metadata"]["namespace"], "tessera", "{kind}");
        }
    }
    // Not created by default.
    assert!(of_kind(&render(&json!({})).objects, "Namespace").is_empty());
}

/// NOTES.txt prints the next checks with the release's names.
#[test]
fn the_notes_print_the_next_checks() {
    let notes = render(&forced(&examples()["kube-prometheus-stack.yaml"])).notes;
    for line in [
        "kubectl -n tessera rollout status daemonset/tessera-exporter",
        "kubectl -n tessera port-forward daemonset/tessera-exporter 19435",
        "kubectl -n tessera get servicemonitors,prometheusrules -l app.kubernetes.io/instance=tessera",
        "up{job=\"tessera-exporter\"}",
        "release=kube-prometheus-stack",
        "kubectl -n tessera create job --from=cronjob/tessera-notify",
        "kubectl -n tessera create job --from=cronjob/tessera-report",
    ] {
        assert!(notes.contains(line), "NOTES lack {line}:\n{notes}");
    }
}

/// The report CronJob's delivery and owners values (docs/report.md, "Delivering the report",
/// "Owners"): the args name the mounted Secret's files and the owners file, the sent record is in
/// the reports volume, the Secret and the chart's owners ConfigMap are mounted read-only, the
/// owners' API reading gets a token and a ServiceAccount allowed to list namespaces only, each
/// flag is one `tessera report` declares, and every object validates; by default none of it.
#[test]
fn report_delivery_and_owners_values_render_args_mounts_and_rbac() {
    let owners = "[owners]\nserving = \"ml-serving@example.com\"\n";
    let values = json!({"report": {
        "delivery": {
            "secretName": "tessera-report-delivery",
            "mail": {
                "to": ["gpu-owners@example.com", "Platform <platform@example.com>"],
                "from": "tessera@example.com",
                "owners": true,
                "smtp": {"host": "smtp.example.com", "port": 587, "user": "tessera",
                         "passwordKey": "smtp-password"},
            },
            "webhooks": [{"urlKey": "slack-webhook"}],
            "webhookFormat": "slack",
            "link": "https://reports.example/gpu/{file}",
        },
        "owners": {"file": owners, "kubernetes": true},
    }});
    let objects = render(&values).objects;
    let cron = named(&objects, "CronJob", "tessera-report");
    let pod = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for want in [
        "--archive=/var/lib/tessera/reports",
        "--mail-to=gpu-owners@example.com",
        "--mail-to=Platform <platform@example.com>",
        "--mail-from=tessera@example.com",
        "--mail-owners",
        "--smtp.host=smtp.example.com",
        "--smtp.port=587",
        "--smtp.tls=starttls",
        "--smtp.user=tessera",
        "--smtp.password-file=/etc/tessera/delivery/smtp-password",
        "--webhook.url-file=/etc/tessera/delivery/slack-webhook",
        "--webhook.format=slack",
        "--link=https://reports.example/gpu/{file}",
        "--sent-record=/var/lib/tessera/reports/tessera-sent.json",
        "--delivery.timeout=30s",
        "--delivery.retries=2",
        "--owners=/etc/tessera/owners/owners.toml",
        "--owners.kubernetes",
    ] {
        assert!(args.contains(&want), "{want:?} not in {args:?}");
    }
    // Every flag is one the CLI declares (report's, the sources', the delivery's, the owners'):
    // `long = "flag"`, or a field of that name under `#[arg(long`.
    let cli = ["report.rs", "source.rs", "source/owners.rs"]
        .map(|f| read(&chart().join("../../../analyzer/src/cli").join(f)))
        .join("\n");
    for a in &args[1..] {
        let flag = a.trim_start_matches("--").split('=').next().unwrap();
        let field = flag.replace(['-', '.'], "_");
        let declared = cli.contains(&format!("long = \"{flag}\""))
            || cli.contains(&format!("\n    {field}: "))
            || cli.contains(&format!("\n    pub {field}: "));
        assert!(declared, "--{flag} is not a flag of tessera report");
    }
    let mounts = container["volumeMounts"].as_sequence().unwrap();
    let mount = |name: &str| {
        mounts
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no mount {name}: {mounts:?}"))
    };
    assert_eq!(mount("delivery")["mountPath"], "/etc/tessera/delivery");
    assert_eq!(mount("delivery")["readOnly"], true);
    assert_eq!(mount("owners")["mountPath"], "/etc/tessera/owners");
    assert_eq!(mount("owners")["readOnly"], true);
    assert_eq!(mount("reports")["mountPath"], "/var/lib/tessera/reports");
    let volumes = pod["volumes"].as_sequence().unwrap();
    let volume = |name: &str| volumes.iter().find(|v| v["name"] == name).unwrap();
    assert_eq!(
        volume("delivery")["secret"]["secretName"],
        "tessera-report-delivery"
    );
    assert_eq!(volume("delivery")["secret"]["defaultMode"], 0o400);
    assert_eq!(
        volume("owners")["configMap"]["name"],
        "tessera-report-owners"
    );
    let cm = of_kind(&objects, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "tessera-report-owners")
        .expect("the owners ConfigMap");
    assert_eq!(cm["data"]["owners.toml"], owners);
    // The token and the ServiceAccount that may list namespaces, nothing more.
    assert_eq!(pod["serviceAccountName"], "tessera-report");
    assert_eq!(pod["automountServiceAccountToken"], true);
    let role = named(&objects, "ClusterRole", "tessera-report");
    assert_eq!(
        to_json(&role["rules"]),
        json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}])
    );
    let binding = named(&objects, "ClusterRoleBinding", "tessera-report");
    assert_eq!(
        to_json(&binding["subjects"]),
        json!([{"kind": "ServiceAccount", "name": "tessera-report", "namespace": NAMESPACE}])
    );
    assert_eq!(
        named(&objects, "ServiceAccount", "tessera-report")["metadata"]["namespace"],
        NAMESPACE
    );
    let errors = validation_errors(&objects);
    assert!(errors.is_empty(), "{errors:#?}");

    // An existing ConfigMap instead of the file: mounted, none made.
    let existing = render(&json!({"report": {"owners": {"configMap": "team-owners"}}})).objects;
    let cron = named(&existing, "CronJob", "tessera-report");
    let pod = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert!(
        pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|v| v["configMap"]["name"] == "team-owners")
    );
    assert!(
        of_kind(&existing, "ConfigMap")
            .iter()
            .all(|c| c["metadata"]["name"] != "tessera-report-owners")
    );
    assert_eq!(
        pod["automountServiceAccountToken"], false,
        "no API access without kubernetes"
    );

    // By default: no delivery, no owners, no token, no RBAC.
    let plain = render(&json!({})).objects;
    let cron = named(&plain, "CronJob", "tessera-report");
    let pod = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    let text = serde_yaml_ng::to_string(pod).unwrap();
    for absent in [
        "--mail",
        "--webhook",
        "--sent-record",
        "--owners",
        "/etc/tessera",
        "serviceAccountName",
    ] {
        assert!(!text.contains(absent), "{absent} by default:\n{text}");
    }
    assert!(of_kind(&plain, "ClusterRole").is_empty());

    // Half-set mail and a secret key without the Secret are refused, naming the values.
    let e = try_render(
        &json!({"report": {"delivery": {"mail": {"to": ["a@example.com"]}}}}),
        RELEASE,
        NAMESPACE,
    )
    .err()
    .expect("mail.to without from and host refused");
    assert!(e.contains("mail.from") && e.contains("smtp.host"), "{e}");
    let e = try_render(
        &json!({"report": {"delivery": {"webhooks": [{"urlKey": "hook"}]}}}),
        RELEASE,
        NAMESPACE,
    )
    .err()
    .expect("a webhook key without the Secret refused");
    assert!(e.contains("secretName"), "{e}");
    let e = try_render(
        &json!({"report": {"delivery": {"mail": {"smtp": {"tls": "ssl"}}}}}),
        RELEASE,
        NAMESPACE,
    )
    .err()
    .expect("the schema refuses an unknown TLS mode");
    assert!(e.contains("tls"), "{e}");
}
