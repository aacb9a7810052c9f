//! Object and `Status` shapes: the kinds this server knows ([`Kind`]: their `kind`,
//! `apiVersion`, group and resource names; the workloads `tessera scale-down` reads and scales:
//! Deployments, ReplicaSets, StatefulSets with their `autoscaling/v1` `Scale`,
//! HorizontalPodAutoscalers, KServe InferenceServices, KEDA ScaledObjects; Kueue's
//! ResourceFlavors, ClusterQueues and LocalQueues; Volcano's Queues), the Nodes, Pods,
//! Namespaces (labels and annotations: the teams' owners), ConfigMaps and the ClusterPolicy
//! the test helpers create, and the `Status` errors the server
//! answers with (same `reason`, `code`, `message` and `details` shapes as kube-apiserver; a
//! custom resource's 422 names its group, `ClusterQueue.kueue.x-k8s.io "x" is invalid: …`; a
//! denying admission webhook's 400 has no reason, as kube-apiserver answers one whose status
//! has no code).
//!
//! What it does not do: the objects hold only the fields tessera reads (no images, probes,
//! volumes, node addresses or capacity); the messages copy the apiserver's wording for the
//! errors served here, not every error the apiserver can produce.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The kinds this server knows.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub(crate) enum Kind {
    Node,
    Pod,
    ConfigMap,
    ClusterPolicy,
    Deployment,
    ReplicaSet,
    StatefulSet,
    HorizontalPodAutoscaler,
    InferenceService,
    ScaledObject,
    Event,
    Namespace,
    ResourceFlavor,
    ClusterQueue,
    LocalQueue,
    /// Volcano's `scheduling.volcano.sh/v1beta1` Queue (cluster-scoped; `kind` "Queue").
    VolcanoQueue,
}

/// Kueue's API group (`kueue.x-k8s.io`), served only while Kueue is installed.
pub(crate) const KUEUE_GROUP: &str = "kueue.x-k8s.io";

/// Volcano's scheduling API group (`scheduling.volcano.sh`), served only while Volcano is
/// installed.
pub(crate) const VOLCANO_GROUP: &str = "scheduling.volcano.sh";

/// Every kind, for lookups by name.
const ALL: [Kind; 16] = [
    Kind::Node,
    Kind::Pod,
    Kind::ConfigMap,
    Kind::ClusterPolicy,
    Kind::Deployment,
    Kind::ReplicaSet,
    Kind::StatefulSet,
    Kind::HorizontalPodAutoscaler,
    Kind::InferenceService,
    Kind::ScaledObject,
    Kind::Event,
    Kind::Namespace,
    Kind::ResourceFlavor,
    Kind::ClusterQueue,
    Kind::LocalQueue,
    Kind::VolcanoQueue,
];

impl Kind {
    /// `kind` of one object.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Kind::Node => "Node",
            Kind::Pod => "Pod",
            Kind::ConfigMap => "ConfigMap",
            Kind::ClusterPolicy => "ClusterPolicy",
            Kind::Deployment => "Deployment",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::StatefulSet => "StatefulSet",
            Kind::HorizontalPodAutoscaler => "HorizontalPodAutoscaler",
            Kind::InferenceService => "InferenceService",
            Kind::ScaledObject => "ScaledObject",
            Kind::Event => "Event",
            Kind::Namespace => "Namespace",
            Kind::ResourceFlavor => "ResourceFlavor",
            Kind::ClusterQueue => "ClusterQueue",
            Kind::LocalQueue => "LocalQueue",
            Kind::VolcanoQueue => "Queue",
        }
    }

    /// `apiVersion` (group/version).
    pub(crate) fn api_version(self) -> &'static str {
        match self {
            Kind::ClusterPolicy => "nvidia.com/v1",
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet => "apps/v1",
            Kind::HorizontalPodAutoscaler => "autoscaling/v2",
            Kind::InferenceService => "serving.kserve.io/v1beta1",
            Kind::ScaledObject => "keda.sh/v1alpha1",
            Kind::Event => "events.k8s.io/v1",
            Kind::Node | Kind::Pod | Kind::ConfigMap | Kind::Namespace => "v1",
            Kind::ResourceFlavor | Kind::ClusterQueue | Kind::LocalQueue => {
                "kueue.x-k8s.io/v1beta2"
            }
            Kind::VolcanoQueue => "scheduling.volcano.sh/v1beta1",
        }
    }

    /// Whether the kind is one of Kueue's (validated by [`crate::kueue`], served only while
    /// Kueue is installed).
    pub(crate) fn is_kueue(self) -> bool {
        self.group() == KUEUE_GROUP
    }

    /// The API group ("" for core).
    pub(crate) fn group(self) -> &'static str {
        self.api_version()
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// Whether the kind has the `scale` subresource (`autoscaling/v1` `Scale` of
    /// `spec.replicas`).
    pub(crate) fn has_scale(self) -> bool {
        matches!(
            self,
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet
        )
    }

    /// Whether the status is a subresource (kept across replace and patch of the object).
    pub(crate) fn keeps_status(self) -> bool {
        matches!(
            self,
            Kind::Node
                | Kind::Pod
                | Kind::Deployment
                | Kind::ReplicaSet
                | Kind::StatefulSet
                | Kind::VolcanoQueue
        )
    }

    /// The resource name in URLs.
    pub(crate) fn plural(self) -> &'static str {
        match self {
            Kind::Node => "nodes",
            Kind::Pod => "pods",
            Kind::ConfigMap => "configmaps",
            Kind::ClusterPolicy => "clusterpolicies",
            Kind::Deployment => "deployments",
            Kind::ReplicaSet => "replicasets",
            Kind::StatefulSet => "statefulsets",
            Kind::HorizontalPodAutoscaler => "horizontalpodautoscalers",
            Kind::InferenceService => "inferenceservices",
            Kind::ScaledObject => "scaledobjects",
            Kind::Event => "events",
            Kind::Namespace => "namespaces",
            Kind::ResourceFlavor => "resourceflavors",
            Kind::ClusterQueue => "clusterqueues",
            Kind::LocalQueue => "localqueues",
            Kind::VolcanoQueue => "queues",
        }
    }

    /// Whether objects live in a namespace.
    pub(crate) fn namespaced(self) -> bool {
        !matches!(
            self,
            Kind::Node
                | Kind::ClusterPolicy
                | Kind::Namespace
                | Kind::ResourceFlavor
                | Kind::ClusterQueue
                | Kind::VolcanoQueue
        )
    }

    /// The kind served at `/apis/{group}/{version}/…/{plural}`.
    pub(crate) fn from_group_plural(group: &str, version: &str, plural: &str) -> Option<Kind> {
        ALL.into_iter().find(|k| {
            !k.group().is_empty()
                && k.api_version() == format!("{group}/{version}")
                && k.plural() == plural
        })
    }

    /// The kind of an object by its `apiVersion` and `kind`.
    pub(crate) fn from_object(obj: &Value) -> Option<Kind> {
        ALL.into_iter().find(|k| {
            obj["apiVersion"].as_str() == Some(k.api_version())
                && obj["kind"].as_str() == Some(k.kind())
        })
    }

    /// The kind by its resource name, in any group, or its `kind` (`deployments`, `nodes`,
    /// `clusterqueues` or `ClusterQueue`, `queues` or `Queue`: Volcano's). Names are unique
    /// across the kinds (a test checks).
    pub(crate) fn from_name(name: &str) -> Option<Kind> {
        ALL.into_iter()
            .find(|k| k.plural() == name || k.kind() == name)
    }

    /// The kind from a core/v1 resource name.
    pub(crate) fn from_core_plural(plural: &str) -> Option<Kind> {
        match plural {
            "nodes" => Some(Kind::Node),
            "pods" => Some(Kind::Pod),
            "configmaps" => Some(Kind::ConfigMap),
            "namespaces" => Some(Kind::Namespace),
            _ => None,
        }
    }
}

/// An error answered as a `Status` object with the matching HTTP code.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) code: u16,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    pub(crate) details: Option<Value>,
}

impl ApiError {
    /// A scripted failure ([`crate::Fault`]): `code` with a reason kube-apiserver gives it.
    pub(crate) fn injected(code: u16, message: &str) -> ApiError {
        ApiError {
            code,
            reason: match code {
                409 => "Conflict",
                410 => "Expired",
                429 => "TooManyRequests",
                503 => "ServiceUnavailable",
                504 => "Timeout",
                _ => "InternalError",
            },
            message: message.to_string(),
            details: None,
        }
    }

    fn details(kind: Kind, name: &str) -> Value {
        let mut d = json!({ "name": name, "kind": kind.plural() });
        if !kind.group().is_empty() {
            d["group"] = json!(kind.group());
        }
        d
    }

    fn resource(kind: Kind) -> String {
        if kind.group().is_empty() {
            kind.plural().to_string()
        } else {
            format!("{}.{}", kind.plural(), kind.group())
        }
    }

    /// 404 NotFound for one object.
    pub(crate) fn not_found(kind: Kind, name: &str) -> ApiError {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", Self::resource(kind)),
            details: Some(Self::details(kind, name)),
        }
    }

    /// 404 NotFound for a path this server does not serve.
    pub(crate) fn no_route() -> ApiError {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
            details: Some(
                json!({ "causes": [{ "reason": "UnexpectedServerResponse", "message": "404 page not found" }] }),
            ),
        }
    }

    /// 409 AlreadyExists on create.
    pub(crate) fn already_exists(kind: Kind, name: &str) -> ApiError {
        ApiError {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} \"{name}\" already exists", Self::resource(kind)),
            details: Some(Self::details(kind, name)),
        }
    }

    /// 409 Conflict on a stale resourceVersion.
    pub(crate) fn conflict(kind: Kind, name: &str) -> ApiError {
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                Self::resource(kind)
            ),
            details: Some(Self::details(kind, name)),
        }
    }

    /// 422 Invalid.
    pub(crate) fn invalid(kind: Kind, name: &str, why: &str) -> ApiError {
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!("{} \"{name}\" is invalid: {why}", kind.kind()),
            details: Some(Self::details(kind, name)),
        }
    }

    /// 422 Invalid with one cause per field error (`field: message`), worded as the apiserver
    /// words it for a custom resource: `ClusterQueue.kueue.x-k8s.io "name" is invalid: …`, the
    /// errors in brackets when there are several.
    pub(crate) fn invalid_fields(kind: Kind, name: &str, errors: &[(String, String)]) -> ApiError {
        let all: Vec<String> = errors.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let joined = match all.as_slice() {
            [one] => one.clone(),
            _ => format!("[{}]", all.join(", ")),
        };
        let mut details = Self::details(kind, name);
        details["causes"] = errors
            .iter()
            .map(|(f, m)| json!({ "reason": "FieldValueInvalid", "message": m, "field": f }))
            .collect();
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!(
                "{}.{} \"{name}\" is invalid: {joined}",
                kind.kind(),
                kind.group()
            ),
            details: Some(details),
        }
    }

    /// What kube-apiserver answers when the admission webhook `webhook` denies a request with a
    /// status that has no code (Volcano's: `Result: {Message: err.Error()}`): 400, no reason,
    /// no details, `admission webhook "NAME" denied the request: MESSAGE`.
    pub(crate) fn webhook_denied(webhook: &str, message: &str) -> ApiError {
        ApiError {
            code: 400,
            reason: "",
            message: format!("admission webhook \"{webhook}\" denied the request: {message}"),
            details: None,
        }
    }

    /// 400 BadRequest.
    pub(crate) fn bad_request(message: &str) -> ApiError {
        ApiError {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
            details: None,
        }
    }

    /// 401 Unauthorized.
    pub(crate) fn unauthorized() -> ApiError {
        ApiError {
            code: 401,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
            details: None,
        }
    }

    /// 405 MethodNotAllowed.
    pub(crate) fn method_not_allowed() -> ApiError {
        ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: "the server does not allow this method on the requested resource".into(),
            details: None,
        }
    }

    /// 415 UnsupportedMediaType.
    pub(crate) fn unsupported_media_type(accepted: &str) -> ApiError {
        ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}"
            ),
            details: None,
        }
    }

    /// 410 Expired: a watch from a compacted resourceVersion.
    pub(crate) fn expired(requested: u64, oldest: u64) -> ApiError {
        ApiError {
            code: 410,
            reason: "Expired",
            message: format!("too old resource version: {requested} ({oldest})"),
            details: None,
        }
    }

    /// The `Status` object.
    pub(crate) fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty() {
            // `omitempty`, as the apiserver writes a `Status`.
            if let Some(o) = s.as_object_mut() {
                o.remove("reason");
            }
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

fn string_map(pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect()
}

/// A Ready node with these labels.
pub(crate) fn node(name: &str, labels: &[(&str, &str)]) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name, "labels": string_map(labels) },
        "spec": {},
        "status": {
            "conditions": [{ "type": "Ready", "status": "True", "reason": "KubeletReady" }],
        },
    })
}

/// A pod on `node` with one container whose limits (and requests, equal, as extended
/// resources require) are `limits`.
pub(crate) fn pod(
    namespace: &str,
    name: &str,
    node: &str,
    limits: &[(&str, &str)],
    phase: &str,
) -> Value {
    let limits = string_map(limits);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "main",
                "image": "registry.invalid/workload:latest",
                "resources": { "limits": limits.clone(), "requests": limits },
            }],
        },
        "status": { "phase": phase },
    })
}

/// A ConfigMap with this data.
pub(crate) fn configmap(namespace: &str, name: &str, data: &[(&str, &str)]) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": namespace },
        "data": string_map(data),
    })
}

/// The GPU Operator's ClusterPolicy `cluster-policy`, its mig-manager reading `configmap`, the
/// device plugin without a config (the operator's default).
pub(crate) fn cluster_policy(configmap: &str) -> Value {
    json!({
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": { "name": "cluster-policy" },
        "spec": {
            "mig": { "strategy": "mixed" },
            "migManager": {
                "enabled": true,
                "config": { "name": configmap, "default": "all-disabled" },
                "env": [{ "name": "WITH_REBOOT", "value": "false" }],
            },
            "devicePlugin": { "enabled": true },
        },
    })
}

/// The current time as RFC 3339 (seconds, UTC), as `creationTimestamp` carries it.
pub(crate) fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 20, "{t}");
        assert!(
            t.starts_with("20") && t.ends_with('Z') && &t[10..11] == "T",
            "{t}"
        );
    }

    #[test]
    fn names_find_one_kind_each() {
        for k in ALL {
            for name in [k.kind(), k.plural()] {
                let found: Vec<Kind> = ALL
                    .into_iter()
                    .filter(|o| o.kind() == name || o.plural() == name)
                    .collect();
                assert_eq!(found, [k], "{name}");
            }
        }
        assert_eq!(Kind::from_name("Queue"), Some(Kind::VolcanoQueue));
        assert_eq!(Kind::from_name("queues"), Some(Kind::VolcanoQueue));
    }

    #[test]
    fn a_webhook_denial_has_no_reason() {
        let s = ApiError::webhook_denied("v.example.com", "no").status();
        assert_eq!(s["code"], 400);
        assert_eq!(
            s["message"],
            "admission webhook \"v.example.com\" denied the request: no"
        );
        assert!(
            s.get("reason").is_none() && s.get("details").is_none(),
            "{s}"
        );
    }

    #[test]
    fn conflict_message_matches_the_apiserver() {
        let s = ApiError::conflict(Kind::ConfigMap, "cfg").status();
        assert_eq!(
            s["message"],
            "Operation cannot be fulfilled on configmaps \"cfg\": the object has been modified; please apply your changes to the latest version and try again"
        );
        assert_eq!(s["details"], json!({"name": "cfg", "kind": "configmaps"}));
        assert_eq!(s["code"], 409);
    }
}
