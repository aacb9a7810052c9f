//! Get, list, create, replace, patch and the `Status` errors, through kube-rs's typed `Api`.
//! Watches are in `watch.rs`, the scripted mig-manager in `mig_manager.rs`.

use std::time::Duration;

use fake_kube::FakeKube;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams,
};
use serde_json::json;

use crate::support::{client, status};

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    items
        .iter()
        .map(|o| o.meta().name.clone().unwrap())
        .collect()
}

fn rv<K: kube::Resource>(o: &K) -> u64 {
    o.meta()
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn nodes_list_and_get_with_selectors() {
    let kube = FakeKube::start();
    kube.add_node(
        "gpu-1",
        &[
            ("nvidia.com/gpu.deploy.mig-manager", "true"),
            ("nvidia.com/mig.config", "all-1g"),
        ],
    );
    kube.add_node("gpu-2", &[("nvidia.com/gpu.present", "true")]);
    let nodes: Api<Node> = Api::all(client(&kube).await);

    let all = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&all.items), ["gpu-1", "gpu-2"]);
    assert_eq!(
        all.metadata.resource_version,
        Some(kube.resource_version().to_string())
    );
    assert!(
        rv(&all.items[0]) < rv(&all.items[1]),
        "one global resourceVersion counter"
    );
    assert!(
        all.items[0].metadata.uid.is_some() && all.items[0].metadata.creation_timestamp.is_some()
    );

    let lp = ListParams::default().labels("nvidia.com/gpu.deploy.mig-manager=true");
    assert_eq!(names(&nodes.list(&lp).await.unwrap().items), ["gpu-1"]);
    let lp = ListParams::default().labels("nvidia.com/gpu.present");
    assert_eq!(names(&nodes.list(&lp).await.unwrap().items), ["gpu-2"]);
    let lp = ListParams::default().fields("metadata.name=gpu-2");
    assert_eq!(names(&nodes.list(&lp).await.unwrap().items), ["gpu-2"]);
    let e = status(
        nodes
            .list(&ListParams::default().fields("spec.nodeName=x"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));

    let n = nodes.get("gpu-1").await.unwrap();
    assert_eq!(
        n.metadata.labels.unwrap()["nvidia.com/mig.config"],
        "all-1g"
    );
    let e = status(nodes.get("gpu-9").await.unwrap_err());
    assert!(e.is_not_found(), "{e:?}");
    assert_eq!(e.message, "nodes \"gpu-9\" not found");
    assert_eq!(nodes.get_opt("gpu-9").await.unwrap(), None);
}

#[tokio::test]
async fn merge_and_strategic_patches_and_415_for_json_patch() {
    let kube = FakeKube::start();
    kube.add_node("gpu-1", &[("keep", "1"), ("drop", "1")]);
    let client = client(&kube).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let before = rv(&nodes.get("gpu-1").await.unwrap());

    let patch = json!({"metadata": {"labels": {"nvidia.com/mig.config": "all-1g", "drop": null}}});
    let n = nodes
        .patch("gpu-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert!(rv(&n) > before);
    let labels = kube.node_labels("gpu-1");
    assert_eq!(
        labels.get("nvidia.com/mig.config").map(String::as_str),
        Some("all-1g")
    );
    assert_eq!(labels.get("keep").map(String::as_str), Some("1"));
    assert!(!labels.contains_key("drop"));
    assert_eq!(
        kube.label_history("gpu-1"),
        [None, Some("all-1g".to_string())]
    );

    // A no-op patch writes nothing, as on the apiserver.
    let same = nodes
        .patch("gpu-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(rv(&same), rv(&n));

    assert!(!kube.node_unschedulable("gpu-1"));
    let cordon = json!({"spec": {"unschedulable": true}});
    nodes
        .patch("gpu-1", &PatchParams::default(), &Patch::Strategic(&cordon))
        .await
        .unwrap();
    assert!(kube.node_unschedulable("gpu-1"));
    let uncordon = json!({"spec": {"unschedulable": null}});
    nodes
        .patch(
            "gpu-1",
            &PatchParams::default(),
            &Patch::Strategic(&uncordon),
        )
        .await
        .unwrap();
    assert!(!kube.node_unschedulable("gpu-1"));

    // JSON patch (kube's `jsonpatch` feature is off: sent by hand) and apply patches: 415.
    let req = http::Request::patch("/api/v1/nodes/gpu-1")
        .header("Content-Type", "application/json-patch+json")
        .body(br#"[{"op":"add","path":"/metadata/labels/x","value":"y"}]"#.to_vec())
        .unwrap();
    let e = status(client.request_text(req).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (415, "UnsupportedMediaType"));
    let apply =
        Patch::Apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}}));
    let e = status(
        nodes
            .patch("gpu-1", &PatchParams::apply("tessera"), &apply)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 415);

    // A stale resourceVersion in a patch is a precondition.
    let stale = json!({"metadata": {"resourceVersion": before.to_string(), "labels": {"x": "y"}}});
    let e = status(
        nodes
            .patch("gpu-1", &PatchParams::default(), &Patch::Merge(&stale))
            .await
            .unwrap_err(),
    );
    assert!(e.is_conflict(), "{e:?}");

    let types: Vec<_> = kube
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.content_type.unwrap_or_default())
        .collect();
    assert_eq!(
        types,
        [
            "application/merge-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/json-patch+json",
            "application/apply-patch+yaml",
            "application/merge-patch+json",
        ]
    );
}

#[tokio::test]
async fn pods_by_node_and_phase() {
    let kube = FakeKube::start();
    kube.add_node("gpu-1", &[]);
    kube.add_pod(
        "ml",
        "train",
        "gpu-1",
        &[("nvidia.com/mig-1g.10gb", "1")],
        "Running",
    );
    kube.add_pod(
        "ml",
        "done",
        "gpu-1",
        &[("nvidia.com/gpu", "1")],
        "Succeeded",
    );
    kube.add_pod(
        "web",
        "other",
        "gpu-2",
        &[("nvidia.com/gpu", "2")],
        "Running",
    );
    let client = client(&kube).await;

    let all: Api<Pod> = Api::all(client.clone());
    let lp = ListParams::default()
        .fields("spec.nodeName=gpu-1,status.phase!=Succeeded,status.phase!=Failed");
    let pods = all.list(&lp).await.unwrap();
    assert_eq!(names(&pods.items), ["train"]);
    let pod = &pods.items[0];
    assert_eq!(pod.metadata.namespace.as_deref(), Some("ml"));
    let limits = pod.spec.as_ref().unwrap().containers[0]
        .resources
        .as_ref()
        .unwrap()
        .limits
        .clone()
        .unwrap();
    assert_eq!(limits["nvidia.com/mig-1g.10gb"].0, "1");
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );

    let lp = ListParams::default().fields("spec.nodeName==gpu-1");
    assert_eq!(
        names(&all.list(&lp).await.unwrap().items),
        ["done", "train"]
    );
    let web: Api<Pod> = Api::namespaced(client, "web");
    assert_eq!(
        names(&web.list(&ListParams::default()).await.unwrap().items),
        ["other"]
    );
}

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

#[tokio::test]
async fn configmaps_create_replace_and_conflicts() {
    let kube = FakeKube::start();
    let cms: Api<ConfigMap> = Api::namespaced(client(&kube).await, "gpu-operator");
    let pp = PostParams::default();

    assert!(status(cms.get("custom-mig-config").await.unwrap_err()).is_not_found());
    let created = cms
        .create(&pp, &cm("custom-mig-config", &[("config.yaml", "a")]))
        .await
        .unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some("gpu-operator"));
    let e = status(
        cms.create(&pp, &cm("custom-mig-config", &[]))
            .await
            .unwrap_err(),
    );
    assert!(e.is_already_exists(), "{e:?}");
    assert_eq!(e.message, "configmaps \"custom-mig-config\" already exists");

    // Replace with the current resourceVersion works, with a stale one is a 409 Conflict.
    let mut next = created.clone();
    next.data = Some([("config.yaml".to_string(), "b".to_string())].into());
    let replaced = cms.replace("custom-mig-config", &pp, &next).await.unwrap();
    assert!(rv(&replaced) > rv(&created));
    assert_eq!(
        kube.configmap("gpu-operator", "custom-mig-config").unwrap()["config.yaml"],
        "b"
    );
    next.data = Some([("config.yaml".to_string(), "c".to_string())].into());
    let e = status(
        cms.replace("custom-mig-config", &pp, &next)
            .await
            .unwrap_err(),
    );
    assert!(e.is_conflict(), "{e:?}");
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on configmaps \"custom-mig-config\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(
        kube.configmap("gpu-operator", "custom-mig-config").unwrap()["config.yaml"],
        "b"
    );

    // Another writer between our read and our write.
    let mut current = cms.get("custom-mig-config").await.unwrap();
    kube.conflict_next_configmap_write();
    current.data = Some([("config.yaml".to_string(), "d".to_string())].into());
    assert!(
        status(
            cms.replace("custom-mig-config", &pp, &current)
                .await
                .unwrap_err()
        )
        .is_conflict()
    );
    let reread = cms.get("custom-mig-config").await.unwrap();
    assert!(rv(&reread) > rv(&current));
    assert_eq!(
        reread.data.as_ref().unwrap()["config.yaml"],
        "b",
        "the other writer changed nothing else"
    );
    current.metadata.resource_version = reread.metadata.resource_version.clone();
    cms.replace("custom-mig-config", &pp, &current)
        .await
        .unwrap();
    assert_eq!(
        kube.configmap("gpu-operator", "custom-mig-config").unwrap()["config.yaml"],
        "d"
    );

    // Merge patch of data.
    let patch = json!({"data": {"extra": "1"}});
    cms.patch(
        "custom-mig-config",
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .unwrap();
    assert_eq!(
        kube.configmap("gpu-operator", "custom-mig-config")
            .unwrap()
            .len(),
        2
    );
    let puts = kube
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .count();
    assert_eq!(puts, 4);
}

#[tokio::test]
async fn requests_without_the_token_get_401() {
    let kube = FakeKube::start();
    kube.add_node("gpu-1", &[]);
    let config = kube::Config::new(kube.url().parse().unwrap());
    let anonymous: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());
    let e = status(anonymous.get("gpu-1").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (401, "Unauthorized"));
    let authorized: Api<Node> = Api::all(client(&kube).await);
    authorized.get("gpu-1").await.unwrap();
    assert!(
        kube.requests()
            .iter()
            .all(|r| r.path == "/api/v1/nodes/gpu-1")
    );
}

#[tokio::test]
async fn cluster_policy_names_the_mig_manager_configmap() {
    let kube = FakeKube::start();
    let client = client(&kube).await;
    let gvk = GroupVersionKind::gvk("nvidia.com", "v1", "ClusterPolicy");
    let policies: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let name = |p: &DynamicObject| {
        p.data["spec"]["migManager"]["config"]["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        name(&policies.get("cluster-policy").await.unwrap()),
        "custom-mig-config"
    );
    kube.set_mig_manager_configmap("gpu-operator", "tessera-mig");
    let list = policies.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(name(&list.items[0]), "tessera-mig");

    // Discovery finds the kinds served here.
    assert_eq!(client.apiserver_version().await.unwrap().minor, "33");
    let discovery = kube::Discovery::new(client).run().await.unwrap();
    assert!(discovery.has_group("nvidia.com"));
    let (ar, _) = discovery.resolve_gvk(&gvk).unwrap();
    assert_eq!(ar.plural, "clusterpolicies");
}

#[tokio::test]
async fn drop_stops_the_server() {
    let kube = FakeKube::start();
    let url = kube.url();
    let client = client(&kube).await;
    drop(kube);
    let nodes: Api<Node> = Api::all(client);
    let r = tokio::time::timeout(Duration::from_secs(5), nodes.list(&ListParams::default())).await;
    assert!(matches!(r, Ok(Err(_))), "{url} still answers: {r:?}");
}
