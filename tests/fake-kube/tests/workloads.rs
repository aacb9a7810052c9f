//! The workloads `tessera scale-down` reads and scales, through kube-rs's typed `Api`:
//! Deployments with ownerReferences, the `scale` subresource (GET, PATCH, PUT with a stale
//! resourceVersion → 409), HorizontalPodAutoscalers, KServe InferenceServices as dynamic
//! objects, and a 404 for kinds this server does not serve.

use fake_kube::{FakeKube, Fault};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::json;

use crate::support::{client, status};

fn deployment(ns: &str, name: &str, replicas: Option<i64>) -> serde_json::Value {
    let mut d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name, "namespace": ns, "labels": { "app": name } },
        "spec": { "selector": { "matchLabels": { "app": name } } },
        "status": { "replicas": 2 },
    });
    if let Some(r) = replicas {
        d["spec"]["replicas"] = json!(r);
    }
    d
}

#[tokio::test]
async fn deployments_replicasets_and_their_scale() {
    let kube = FakeKube::start();
    let d = kube.put(deployment("ml", "web", Some(2)));
    kube.put(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": { "name": "web-5d8f", "namespace": "ml",
            "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                "uid": d["metadata"]["uid"], "controller": true }] },
        "spec": { "replicas": 2 },
    }));
    // No replicas given: the apiserver's default, 1.
    kube.put(json!({ "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": { "name": "db", "namespace": "ml" }, "spec": {} }));
    let c = client(&kube).await;
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "ml");
    let rs: Api<ReplicaSet> = Api::namespaced(c.clone(), "ml");
    let sts: Api<StatefulSet> = Api::namespaced(c.clone(), "ml");
    let owner = &rs
        .get("web-5d8f")
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Deployment", "web")
    );
    assert_eq!(
        sts.get_scale("db").await.unwrap().spec.unwrap().replicas,
        Some(1)
    );
    let all: Api<Deployment> = Api::all(c.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    let scale = deps.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(
        scale.status.as_ref().unwrap().selector.as_deref(),
        Some("app=web")
    );
    let rv = scale.metadata.resource_version.clone().unwrap();
    let patched = deps
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 0 } })),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().replicas, Some(0));
    let stored = deps.get("web").await.unwrap();
    assert_eq!(stored.spec.unwrap().replicas, Some(0));
    assert_eq!(stored.status.unwrap().replicas, Some(2), "status kept");
    assert_eq!(
        kube.object("deployments", "ml", "web").unwrap()["spec"]["replicas"],
        0
    );
    // A PUT at the version read before the patch: 409.
    let mut stale = scale.clone();
    stale.metadata.resource_version = Some(rv);
    stale.spec.as_mut().unwrap().replicas = Some(5);
    let e = deps
        .replace_scale("web", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert_eq!(status(e).code, 409);
    // At the current version: replaced.
    let mut fresh = deps.get_scale("web").await.unwrap();
    fresh.spec.as_mut().unwrap().replicas = Some(3);
    let r = deps
        .replace_scale("web", &PostParams::default(), &fresh)
        .await
        .unwrap();
    assert_eq!(r.spec.unwrap().replicas, Some(3));
    // A negative count is invalid; a missing object is a 404.
    let e = deps
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": -1 } })),
        )
        .await
        .unwrap_err();
    assert_eq!(status(e).code, 422);
    assert_eq!(status(deps.get_scale("nope").await.unwrap_err()).code, 404);
    // Faults apply to the subresource's own path.
    kube.fail(Fault::leader_changed(
        "PATCH",
        "/apis/apps/v1/namespaces/ml/deployments/web/scale",
        1,
    ));
    let e = deps
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 0 } })),
        )
        .await
        .unwrap_err();
    assert_eq!(status(e).code, 500);
    assert_eq!(
        deps.get_scale("web").await.unwrap().spec.unwrap().replicas,
        Some(3)
    );
}

#[tokio::test]
async fn hpas_inferenceservices_and_unserved_kinds() {
    let kube = FakeKube::start();
    kube.put(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": { "name": "web", "namespace": "ml" },
        "spec": { "scaleTargetRef": { "apiVersion": "apps/v1", "kind": "Deployment", "name": "web" },
                  "minReplicas": 1, "maxReplicas": 4 },
    }));
    kube.put(json!({
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": { "name": "llm", "namespace": "ml" },
        "spec": { "predictor": { "minReplicas": 2, "model": { "modelFormat": { "name": "huggingface" } } } },
    }));
    let c = client(&kube).await;
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(c.clone(), "ml");
    let list = hpas.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        list.items[0].spec.as_ref().unwrap().scale_target_ref.name,
        "web"
    );
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "serving.kserve.io",
        "v1beta1",
        "InferenceService",
    ));
    let isvc: Api<DynamicObject> = Api::namespaced_with(c.clone(), "ml", &ar);
    let patch = json!({ "metadata": { "annotations": { "a": "b" } }, "spec": { "predictor": { "minReplicas": 0 } } });
    let o = isvc
        .patch("llm", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    assert_eq!(o.data["spec"]["predictor"]["minReplicas"], 0);
    assert_eq!(
        o.data["spec"]["predictor"]["model"]["modelFormat"]["name"],
        "huggingface"
    );
    assert_eq!(o.metadata.annotations.unwrap()["a"], "b");
    // A kind this server does not serve (a Kubeflow Notebook): 404, as without its CRD.
    let nb = ApiResource::from_gvk(&GroupVersionKind::gvk("kubeflow.org", "v1", "Notebook"));
    let nbs: Api<DynamicObject> = Api::namespaced_with(c, "ml", &nb);
    assert_eq!(
        status(nbs.list(&ListParams::default()).await.unwrap_err()).code,
        404
    );
}
