//! Routing and the request handlers: the REST paths, verbs, content types and status codes of
//! kube-apiserver for the resources tessera uses.
//!
//! Served: `/version`, discovery (`/api`, `/api/v1`, `/apis`, `/apis/nvidia.com/v1`), Nodes
//! (`/api/v1/nodes[/{name}]`), Pods and ConfigMaps (`/api/v1/{pods,configmaps}` across
//! namespaces, `/api/v1/namespaces/{ns}/{pods,configmaps}[/{name}]`), the GPU Operator's
//! ClusterPolicies (`/apis/nvidia.com/v1/clusterpolicies[/{name}]`), and the kinds of
//! other groups at `/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}]` (Deployments,
//! ReplicaSets, StatefulSets, HorizontalPodAutoscalers, InferenceServices, ScaledObjects,
//! Kueue's cluster-scoped ResourceFlavors and ClusterQueues and namespaced LocalQueues at
//! `kueue.x-k8s.io/v1beta2`, Volcano's cluster-scoped Queues at `scheduling.volcano.sh/v1beta1`:
//! see [`Kind`]; every path under `/apis/kueue.x-k8s.io` or `/apis/scheduling.volcano.sh` is a
//! 404 while that group is not installed), with the `scale` subresource of the `apps` kinds
//! (`…/{name}/scale`: GET, PUT and PATCH of an `autoscaling/v1` `Scale`, whose `spec.replicas`
//! is the object's; a `metadata.resourceVersion` in a PUT or PATCH is a precondition, 409 when
//! stale). Verbs: get, list (label
//! and field selectors), watch (see [`crate::watch`]), create (POST, 201, 409 AlreadyExists),
//! replace (PUT, 409 Conflict on a stale or missing `metadata.resourceVersion`: stricter than
//! the apiserver, which takes a ConfigMap PUT without one as an unconditional update, so that
//! a client that skips optimistic concurrency fails here), patch, delete.
//! A PUT or PATCH of a kind scripted by [`crate::FakeKube::conflict_next_write`] finds the
//! object rewritten by another writer first (a new resourceVersion). Kueue's and Volcano's kinds
//! are decoded strictly and validated ([`crate::kueue`], [`crate::volcano`]).
//! PATCH takes `application/merge-patch+json` (RFC 7386) and
//! `application/strategic-merge-patch+json`; other patch types (JSON patch, apply) get 415.
//! Every request is logged; one without `Authorization: Bearer <token>` gets a 401 `Status`.
//!
//! What it does not do: strategic merge patch is implemented as a JSON merge patch. For the
//! fields tessera patches (labels, annotations, `spec.unschedulable`, ConfigMap `data`: maps
//! and scalars) the two are the same; they differ only on lists with patch merge keys (such as
//! a pod's containers) and `$patch` directives, which this fake does not honour. No pagination
//! (`limit` is ignored and no `continue` token is returned), no `dryRun`, no `fieldManager`
//! bookkeeping (`managedFields`), no YAML or protobuf bodies, no RBAC beyond the token.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Response};
use serde_json::{Value, json};

use crate::Request;
use crate::objects::{ApiError, Kind};
use crate::query::Query;
use crate::selectors::Selector;
use crate::shared::{Body, Shared};
use crate::store::metadata_mut;

fn json_response(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).expect("JSON"))).boxed_unsync())
        .expect("a response")
}

fn error(e: ApiError) -> Response<Body> {
    json_response(e.code, &e.status())
}

/// Handles one request (never fails: errors are `Status` responses).
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: hyper::Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let authorized = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.strip_prefix("Bearer ") == Some(shared.token.as_str()));
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    // This request as logged (kept here: another connection may log one right after it).
    let logged = Request {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        content_type: content_type.clone(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    shared.lock().requests.push(logged.clone());
    if !authorized {
        return Ok(error(ApiError::unauthorized()));
    }
    // The API server gone (`FakeKube::down_after`): every request after the trigger gets 500
    // (not 503, which kube-rs retries until its timeout).
    if shared.lock().down {
        return Ok(error(ApiError::injected(500, "the API server is gone")));
    }
    // Another client's write right before this request (`FakeKube::change_before`), and
    // requests held to land late (`FakeKube::hold`).
    crate::late::changes_before(&shared, &logged);
    if let Some((how, released, done)) = crate::late::held(&shared, &logged) {
        return Ok(match how {
            crate::hold::Hold::AnswerLate => {
                let a = answer(
                    &shared,
                    &logged,
                    &method,
                    &path,
                    &query,
                    content_type.as_deref(),
                    &body,
                );
                let _ = done.send(a.status().as_u16());
                crate::late::released(released).await;
                a
            }
            crate::hold::Hold::ApplyLate => {
                let s = Arc::clone(&shared);
                let task = shared.handle.spawn(async move {
                    crate::late::released(released).await;
                    let a = answer(
                        &s,
                        &logged,
                        &method,
                        &path,
                        &query,
                        content_type.as_deref(),
                        &body,
                    );
                    let _ = done.send(a.status().as_u16());
                    a
                });
                task.await
                    .unwrap_or_else(|_| error(ApiError::injected(500, "the held request was lost")))
            }
        });
    }
    // Scripted failures (`FakeKube::fail`): answered before the request is handled.
    let injected = {
        let mut store = shared.lock();
        store
            .faults
            .iter_mut()
            .find(|f| f.times > 0 && f.matches(&logged))
            .map(|f| {
                f.times -= 1;
                (
                    f.delay,
                    (f.code != 0).then(|| ApiError::injected(f.code, &f.message)),
                )
            })
    };
    if let Some((delay, e)) = injected {
        tokio::time::sleep(delay).await;
        if let Some(e) = e {
            return Ok(error(e));
        }
    }
    Ok(answer(
        &shared,
        &logged,
        &method,
        &path,
        &query,
        content_type.as_deref(),
        &body,
    ))
}

/// Handles a request that is not failed: routes it, then goes down when `down_after` says so.
fn answer(
    shared: &Arc<Shared>,
    logged: &Request,
    method: &Method,
    path: &str,
    query: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Response<Body> {
    let query = Query::parse(query);
    let answer = route(shared, method, path, &query, content_type, body).unwrap_or_else(error);
    let mut store = shared.lock();
    if store.down_after.as_ref().is_some_and(|f| f.matches(logged)) {
        store.down = true;
    }
    answer
}

/// What a path addresses.
struct Target {
    kind: Kind,
    /// The namespace in the path (None: cluster-scoped, or all namespaces).
    ns: Option<String>,
    name: Option<String>,
    /// The `scale` subresource of the object.
    scale: bool,
}

fn target(segs: &[&str]) -> Option<Target> {
    let t = |kind: Kind, ns: Option<&str>, name: Option<&str>| Target {
        kind,
        ns: ns.map(str::to_string),
        name: name.map(str::to_string),
        scale: false,
    };
    match segs {
        ["api", "v1", plural] => Kind::from_core_plural(plural).map(|k| t(k, None, None)),
        ["api", "v1", plural, name] => Kind::from_core_plural(plural)
            .filter(|k| !k.namespaced())
            .map(|k| t(k, None, Some(name))),
        ["api", "v1", "namespaces", ns, plural] => Kind::from_core_plural(plural)
            .filter(|k| k.namespaced())
            .map(|k| t(k, Some(ns), None)),
        ["api", "v1", "namespaces", ns, plural, name] => Kind::from_core_plural(plural)
            .filter(|k| k.namespaced())
            .map(|k| t(k, Some(ns), Some(name))),
        ["apis", group, version, plural] => {
            Kind::from_group_plural(group, version, plural).map(|k| t(k, None, None))
        }
        ["apis", group, version, plural, name] => Kind::from_group_plural(group, version, plural)
            .filter(|k| !k.namespaced())
            .map(|k| t(k, None, Some(name))),
        ["apis", group, version, "namespaces", ns, plural] => {
            Kind::from_group_plural(group, version, plural)
                .filter(|k| k.namespaced())
                .map(|k| t(k, Some(ns), None))
        }
        ["apis", group, version, "namespaces", ns, plural, name] => {
            Kind::from_group_plural(group, version, plural)
                .filter(|k| k.namespaced())
                .map(|k| t(k, Some(ns), Some(name)))
        }
        [
            "apis",
            group,
            version,
            "namespaces",
            ns,
            plural,
            name,
            "scale",
        ] => Kind::from_group_plural(group, version, plural)
            .filter(|k| k.has_scale())
            .map(|k| Target {
                scale: true,
                ..t(k, Some(ns), Some(name))
            }),
        _ => None,
    }
}

/// The `autoscaling/v1` `Scale` of an object with `spec.replicas`.
fn scale_of(obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let selector = obj["spec"]["selector"]["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": { "replicas": obj["spec"]["replicas"].as_i64().unwrap_or(0) },
        "status": {
            "replicas": obj["status"]["replicas"].as_i64().unwrap_or(0),
            "selector": selector,
        },
    })
}

/// GET, PUT or PATCH of `…/{name}/scale`.
fn scale(
    shared: &Arc<Shared>,
    method: &Method,
    kind: Kind,
    ns: &str,
    name: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    if method == Method::GET {
        let store = shared.lock();
        let obj = store
            .get(kind, ns, name)
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        return Ok(json_response(200, &scale_of(obj)));
    }
    let is_put = match *method {
        Method::PUT => {
            require_json(content_type)?;
            true
        }
        Method::PATCH => {
            require_patch(content_type)?;
            false
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    let input = parse_body(body)?;
    let written = shared.write(|s| {
        let obj = s
            .get(kind, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        let mut wanted = scale_of(&obj);
        if is_put {
            wanted = input.clone();
        } else {
            crate::store::merge_patch(&mut wanted, &input);
        }
        let expected = input["metadata"]["resourceVersion"]
            .as_str()
            .filter(|v| !v.is_empty())
            .map(str::to_string);
        let Some(replicas) = wanted["spec"]["replicas"].as_i64().filter(|r| *r >= 0) else {
            return Err(ApiError::invalid(
                kind,
                name,
                "spec.replicas: Invalid value: must be a non-negative integer",
            ));
        };
        let mut new = obj;
        new["spec"]["replicas"] = json!(replicas);
        s.replace(kind, ns, name, new, expected.as_deref(), false)
    })?;
    Ok(json_response(200, &scale_of(&written)))
}

fn require_patch(content_type: Option<&str>) -> Result<(), ApiError> {
    match media_type(content_type) {
        // Strategic merge patch = merge patch for the maps and scalars tessera patches
        // (labels, annotations, spec.unschedulable, data, replicas); see the module docs.
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => Ok(()),
        _ => Err(ApiError::unsupported_media_type(
            "application/merge-patch+json, application/strategic-merge-patch+json",
        )),
    }
}

/// The media type of a Content-Type header, without parameters.
fn media_type(content_type: Option<&str>) -> &str {
    content_type
        .and_then(|c| c.split(';').next())
        .map(str::trim)
        .unwrap_or("")
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(&format!("the request body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(value)
}

fn route(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    query: &Query,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let uninstalled = shared.lock().uninstalled.clone();
    if let ["apis", group, ..] = segs.as_slice()
        && uninstalled.contains(group)
    {
        // An API group that is not installed: the apiserver's 404 for an unknown path.
        return Err(ApiError::no_route());
    }
    if let Some(doc) = crate::discovery::document(&segs, |g| !uninstalled.contains(g)) {
        return if method == Method::GET {
            Ok(json_response(200, &doc))
        } else {
            Err(ApiError::method_not_allowed())
        };
    }
    let Some(Target {
        kind,
        ns,
        name,
        scale: subresource,
    }) = target(&segs)
    else {
        return Err(ApiError::no_route());
    };
    let ns_key = ns.clone().unwrap_or_default();
    if subresource {
        let name = name.unwrap_or_default();
        return scale(shared, method, kind, &ns_key, &name, content_type, body);
    }
    match (method, name) {
        (&Method::GET, Some(name)) => {
            let store = shared.lock();
            let obj = store
                .get(kind, &ns_key, &name)
                .ok_or_else(|| ApiError::not_found(kind, &name))?;
            Ok(json_response(200, obj))
        }
        (&Method::GET, None) if matches!(query.get("watch"), Some("true" | "1")) => {
            crate::watch::serve(shared, kind, ns, query)
        }
        (&Method::GET, None) => {
            let selector =
                Selector::parse(kind, query.get("labelSelector"), query.get("fieldSelector"))?;
            let store = shared.lock();
            let items: Vec<Value> = store
                .list(kind, ns.as_deref())
                .into_iter()
                .filter(|o| selector.matches(kind, o))
                .collect();
            Ok(json_response(
                200,
                &json!({
                    "kind": format!("{}List", kind.kind()),
                    "apiVersion": kind.api_version(),
                    "metadata": { "resourceVersion": store.rv.to_string() },
                    "items": items,
                }),
            ))
        }
        (&Method::POST, None) if ns.is_some() || !kind.namespaced() => {
            require_json(content_type)?;
            let mut obj = parse_body(body)?;
            check_namespace(kind, &mut obj, ns.as_deref())?;
            let meta = metadata_mut(&mut obj);
            meta.remove("resourceVersion");
            meta.remove("uid");
            let created = shared.write(|s| s.create(kind, obj))?;
            Ok(json_response(201, &created))
        }
        (&Method::PUT, Some(name)) => {
            require_json(content_type)?;
            let mut obj = parse_body(body)?;
            check_namespace(kind, &mut obj, ns.as_deref())?;
            let body_name = obj["metadata"]["name"].as_str().unwrap_or_default();
            if body_name != name {
                return Err(ApiError::bad_request(&format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            let expected = obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let replaced = shared.write(|s| {
                s.other_writer_first(kind, &ns_key, &name)?;
                if kind == Kind::ConfigMap && std::mem::take(&mut s.conflict_next_put) {
                    // Another writer got there first: same content, a new resourceVersion.
                    if let Some(current) = s.get(kind, &ns_key, &name).cloned() {
                        s.replace(kind, &ns_key, &name, current, None, true)?;
                    }
                }
                s.replace(kind, &ns_key, &name, obj, Some(&expected), false)
            })?;
            Ok(json_response(200, &replaced))
        }
        (&Method::PATCH, Some(name)) => {
            require_patch(content_type)?;
            let patch = parse_body(body)?;
            let patched = shared.write(|s| {
                s.other_writer_first(kind, &ns_key, &name)?;
                s.merge_patch(kind, &ns_key, &name, &patch)
            })?;
            Ok(json_response(200, &patched))
        }
        (&Method::DELETE, Some(name)) => {
            let deleted = shared.write(|s| s.delete(kind, &ns_key, &name))?;
            Ok(json_response(200, &deleted))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn require_json(content_type: Option<&str>) -> Result<(), ApiError> {
    match media_type(content_type) {
        "" | "application/json" | "*/*" => Ok(()),
        _ => Err(ApiError::unsupported_media_type("application/json")),
    }
}

/// Fills in the path's namespace; a different one in the body is a 400, as on the apiserver.
fn check_namespace(kind: Kind, obj: &mut Value, ns: Option<&str>) -> Result<(), ApiError> {
    let Some(ns) = ns.filter(|_| kind.namespaced()) else {
        return Ok(());
    };
    let meta = metadata_mut(obj);
    match meta.get("namespace").and_then(Value::as_str) {
        None | Some("") => {
            meta.insert("namespace".into(), json!(ns));
            Ok(())
        }
        Some(n) if n == ns => Ok(()),
        Some(_) => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_by_scope() {
        assert!(target(&["api", "v1", "nodes", "n"]).is_some());
        assert!(target(&["api", "v1", "configmaps", "c"]).is_none());
        let t = target(&["api", "v1", "namespaces", "ns", "configmaps", "c"]).unwrap();
        assert_eq!(
            (t.kind, t.ns.as_deref(), t.name.as_deref()),
            (Kind::ConfigMap, Some("ns"), Some("c"))
        );
        assert!(target(&["api", "v1", "namespaces", "ns", "nodes"]).is_none());
        let t = target(&["apis", "nvidia.com", "v1", "clusterpolicies", "p"]).unwrap();
        assert_eq!(
            (t.kind, t.name.as_deref()),
            (Kind::ClusterPolicy, Some("p"))
        );
        let d = [
            "apis",
            "apps",
            "v1",
            "namespaces",
            "ml",
            "deployments",
            "web",
            "scale",
        ];
        let t = target(&d).unwrap();
        assert_eq!(
            (t.kind, t.ns.as_deref(), t.name.as_deref(), t.scale),
            (Kind::Deployment, Some("ml"), Some("web"), true)
        );
        // No scale subresource for InferenceServices (KServe scales through minReplicas).
        let i = [
            "apis",
            "serving.kserve.io",
            "v1beta1",
            "namespaces",
            "ml",
            "inferenceservices",
            "llm",
            "scale",
        ];
        assert!(target(&i).is_none());
        assert!(target(&["apis", "apps", "v1", "deployments", "web"]).is_none());
    }
}
