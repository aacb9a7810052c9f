//! Kueue's kinds (`kueue.x-k8s.io/v1beta2`) through kube-rs's dynamic `Api`: discovery with
//! Kueue installed or not, create/get/list/replace/delete of each kind with their 409s, strict
//! decoding (400 naming the dotted path), Kueue's validation (422), LocalQueue's immutable
//! `clusterQueue`, watches, and a scripted conflicting writer.

use std::time::Duration;

use fake_kube::FakeKube;
use futures_util::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

use crate::support::{client, status};

const GROUP: &str = "kueue.x-k8s.io";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1beta2", kind), plural)
}

async fn cluster_queues(kube: &FakeKube) -> Api<DynamicObject> {
    Api::all_with(
        client(kube).await,
        &resource("ClusterQueue", "clusterqueues"),
    )
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

/// A ClusterQueue of one group (cpu, nvidia.com/gpu) with one flavor; `spec` merged over it.
fn cq(name: &str, spec: Value) -> Value {
    let mut obj = json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": { "name": name },
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [{ "name": "a100", "resources": [
                    { "name": "cpu", "nominalQuota": 64 },
                    { "name": "nvidia.com/gpu", "nominalQuota": "8" },
                ] }],
            }],
        },
    });
    if let (Some(base), Some(extra)) = (obj["spec"].as_object_mut(), spec.as_object()) {
        base.extend(extra.clone());
    }
    obj
}

fn lq(ns: &str, name: &str, cluster_queue: &str) -> Value {
    json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "clusterQueue": cluster_queue },
    })
}

fn rf(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": { "name": name },
        "spec": spec,
    })
}

/// The `Status` of a refused create of `obj`.
async fn refused(api: &Api<DynamicObject>, obj: Value) -> kube::core::Status {
    status(
        api.create(&PostParams::default(), &object(obj))
            .await
            .unwrap_err(),
    )
}

#[tokio::test]
async fn discovery_lists_kueue_only_while_it_is_installed() {
    let kube = FakeKube::start();
    let c = client(&kube).await;
    let groups = c.list_api_groups().await.unwrap();
    let g = groups.groups.iter().find(|g| g.name == GROUP).unwrap();
    assert_eq!(
        g.preferred_version.as_ref().unwrap().group_version,
        "kueue.x-k8s.io/v1beta2"
    );
    let list = c
        .list_api_group_resources("kueue.x-k8s.io/v1beta2")
        .await
        .unwrap();
    let mut found: Vec<(String, String, bool)> = list
        .resources
        .iter()
        .map(|r| (r.name.clone(), r.kind.clone(), r.namespaced))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            ("clusterqueues".into(), "ClusterQueue".into(), false),
            ("localqueues".into(), "LocalQueue".into(), true),
            ("resourceflavors".into(), "ResourceFlavor".into(), false),
        ]
    );
    let discovery = kube::Discovery::new(c.clone()).run().await.unwrap();
    assert!(discovery.has_group(GROUP));

    kube.put(cq("team-a", json!({})));
    kube.set_kueue_installed(false);
    let groups = c.list_api_groups().await.unwrap();
    assert!(groups.groups.iter().all(|g| g.name != GROUP));
    assert!(groups.groups.iter().any(|g| g.name == "nvidia.com"));
    let e = status(
        c.list_api_group_resources("kueue.x-k8s.io/v1beta2")
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    let api = cluster_queues(&kube).await;
    for e in [
        api.get("team-a").await.unwrap_err(),
        api.list(&ListParams::default()).await.unwrap_err(),
        api.create(&PostParams::default(), &object(cq("team-b", json!({}))))
            .await
            .unwrap_err(),
    ] {
        let e = status(e);
        assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"), "{e:?}");
        assert_eq!(
            e.message,
            "the server could not find the requested resource"
        );
    }
    let discovery = kube::Discovery::new(c).run().await.unwrap();
    assert!(!discovery.has_group(GROUP));

    kube.set_kueue_installed(true);
    assert_eq!(api.get("team-a").await.unwrap().name_any(), "team-a");
}

/// Create, 409 AlreadyExists, get, list, replace (409 Conflict when stale), delete, 404.
async fn crud(api: &Api<DynamicObject>, obj: Value, change: impl Fn(&mut DynamicObject)) {
    let name = obj["metadata"]["name"].as_str().unwrap().to_string();
    let created = api
        .create(&PostParams::default(), &object(obj.clone()))
        .await
        .unwrap();
    let e = status(
        api.create(&PostParams::default(), &object(obj))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"), "{e:?}");
    let got = api.get(&name).await.unwrap();
    assert_eq!(
        got.metadata.resource_version,
        created.metadata.resource_version
    );
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let mut first = got.clone();
    change(&mut first);
    let replaced = api
        .replace(&name, &PostParams::default(), &first)
        .await
        .unwrap();
    assert_ne!(
        replaced.metadata.resource_version,
        got.metadata.resource_version
    );
    let mut stale = got;
    change(&mut stale);
    let e = status(
        api.replace(&name, &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"), "{e:?}");
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    let e = status(api.get(&name).await.unwrap_err());
    assert!(e.is_not_found(), "{e:?}");
}

#[tokio::test]
async fn each_kind_is_created_read_replaced_and_deleted() {
    let kube = FakeKube::start();
    let c = client(&kube).await;
    let flavors: Api<DynamicObject> =
        Api::all_with(c.clone(), &resource("ResourceFlavor", "resourceflavors"));
    let labels = json!({ "nodeLabels": { "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB" } });
    crud(&flavors, rf("a100", labels), |o| {
        o.data["spec"]["nodeLabels"]["pool"] = json!("a");
    })
    .await;
    crud(&cluster_queues(&kube).await, cq("team-a", json!({})), |o| {
        o.data["spec"]["stopPolicy"] = json!("Hold");
    })
    .await;
    let queues: Api<DynamicObject> =
        Api::namespaced_with(c, "ml", &resource("LocalQueue", "localqueues"));
    crud(&queues, lq("ml", "team-a", "team-a"), |o| {
        o.data["spec"]["stopPolicy"] = json!("HoldAndDrain");
    })
    .await;
    assert!(kube.objects("LocalQueue").is_empty());
}

#[tokio::test]
async fn defaults_are_set_and_helpers_read_cluster_scoped_kinds() {
    let kube = FakeKube::start();
    let api = cluster_queues(&kube).await;
    let created = api
        .create(&PostParams::default(), &object(cq("team-a", json!({}))))
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["queueingStrategy"], "BestEffortFIFO");
    assert_eq!(created.data["spec"]["stopPolicy"], "None");
    assert_eq!(
        created.data["spec"]["preemption"]["borrowWithinCohort"]["policy"],
        "Never"
    );
    let stored = kube.object("ClusterQueue", "", "team-a").unwrap();
    // fairSharing is defaulted only when given: none is stored (not even a null).
    assert!(stored["spec"].get("fairSharing").is_none(), "{stored}");
    assert_eq!(
        stored,
        kube.object("clusterqueues", "ignored", "team-a").unwrap()
    );
    kube.put(lq("ml", "q", "team-a"));
    kube.put(lq("dev", "q", "team-a"));
    let names: Vec<String> = kube
        .objects("localqueues")
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["dev/q", "ml/q"]);
    assert_eq!(kube.objects("ClusterQueue").len(), 1);
}

#[tokio::test]
async fn unknown_fields_are_refused_with_their_dotted_path() {
    let kube = FakeKube::start();
    let api = cluster_queues(&kube).await;
    let mut obj = cq("team-a", json!({}));
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["foo"] = json!(1);
    let e = refused(&api, obj).await;
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        e.message,
        "ClusterQueue in version \"v1beta2\" cannot be handled as a ClusterQueue: strict decoding error: unknown field \"spec.resourceGroups[0].flavors[0].resources[0].foo\""
    );
    // v1beta1's `cohort` is not a v1beta2 field.
    let e = refused(&api, cq("team-a", json!({ "cohort": "ml" }))).await;
    assert_eq!(e.code, 400);
    assert!(
        e.message.ends_with("unknown field \"spec.cohort\""),
        "{}",
        e.message
    );
    // A merge patch whose result has an unknown field is refused too; nothing is written.
    api.create(&PostParams::default(), &object(cq("team-a", json!({}))))
        .await
        .unwrap();
    let before = kube.object("clusterqueues", "", "team-a");
    let patch = json!({ "spec": { "cohortNmae": "ml" } });
    let e = status(
        api.patch("team-a", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert!(
        e.message.contains("unknown field \"spec.cohortNmae\""),
        "{}",
        e.message
    );
    assert_eq!(kube.object("clusterqueues", "", "team-a"), before);
}

#[tokio::test]
async fn kueue_rules_are_enforced_with_422() {
    let kube = FakeKube::start();
    let api = cluster_queues(&kube).await;
    let group = |flavor: &str, resources: Value| json!({ "coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [{ "name": flavor, "resources": resources }] });
    let quota = |cpu: Value, gpu: Value| json!([{ "name": "cpu", "nominalQuota": cpu }, { "name": "nvidia.com/gpu", "nominalQuota": gpu }]);
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({ "resourceGroups": [group("a100", json!([
                { "name": "nvidia.com/gpu", "nominalQuota": 8 }, { "name": "cpu", "nominalQuota": 64 }]))] }),
            "spec.resourceGroups[0].flavors[0].resources[0].name: Invalid value: \"nvidia.com/gpu\": must match the name in coveredResources",
        ),
        (
            json!({ "resourceGroups": [group("a100", json!([{ "name": "cpu", "nominalQuota": 64 }]))] }),
            "flavors must have the same number of resources as the coveredResources",
        ),
        (
            json!({ "resourceGroups": [
                group("a100", quota(json!(1), json!(1))),
                { "coveredResources": ["memory"], "flavors": [{ "name": "a100", "resources": [{ "name": "memory", "nominalQuota": "1Gi" }] }] },
            ] }),
            "spec.resourceGroups[1].flavors[0].name: Duplicate value: \"a100\"",
        ),
        (
            json!({ "resourceGroups": (0..17).map(|i| json!({ "coveredResources": [format!("r{i}")], "flavors": [{ "name": format!("f{i}"), "resources": [{ "name": format!("r{i}"), "nominalQuota": 1 }] }] })).collect::<Vec<_>>() }),
            "spec.resourceGroups: Too many: 17: must have at most 16 items",
        ),
        (
            json!({ "resourceGroups": [group("a100", json!([{ "name": "cpu" }, { "name": "nvidia.com/gpu", "nominalQuota": 1 }]))] }),
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Required value",
        ),
        (
            json!({ "resourceGroups": [group("a100", quota(json!("-4"), json!(1)))] }),
            "nominalQuota: Invalid value: \"-4\": must be greater than or equal to 0",
        ),
        (
            json!({ "resourceGroups": [group("a100", quota(json!(1), json!("eight")))] }),
            "spec.resourceGroups[0].flavors[0].resources[1].nominalQuota: Invalid value: \"eight\"",
        ),
        (
            json!({ "resourceGroups": [group("a100", json!([
                { "name": "cpu", "nominalQuota": 1, "borrowingLimit": 2 }, { "name": "nvidia.com/gpu", "nominalQuota": 1 }]))] }),
            "spec: Invalid value: \"object\": borrowingLimit must be nil when cohort is empty",
        ),
        (
            json!({ "cohortName": "ml", "resourceGroups": [group("a100", json!([
                { "name": "cpu", "nominalQuota": "500m", "lendingLimit": 1 }, { "name": "nvidia.com/gpu", "nominalQuota": 1 }]))] }),
            "lendingLimit: Invalid value: 1: must be less than or equal to the nominalQuota",
        ),
        (
            json!({ "stopPolicy": "Pause" }),
            "spec.stopPolicy: Unsupported value: \"Pause\": supported values: \"None\", \"Hold\", \"HoldAndDrain\"",
        ),
        (
            json!({ "cohortName": 3 }),
            "spec.cohortName in body must be of type string",
        ),
    ];
    for (i, (spec, message)) in cases.into_iter().enumerate() {
        let e = refused(&api, cq(&format!("cq-{i}"), spec)).await;
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{i}: {e:?}");
        assert!(
            e.message.starts_with(&format!(
                "ClusterQueue.kueue.x-k8s.io \"cq-{i}\" is invalid: "
            )),
            "{i}: {}",
            e.message
        );
        assert!(e.message.contains(message), "{i}: {}", e.message);
    }
    // Borrowing and lending within a cohort are fine.
    let ok = json!({ "cohortName": "ml", "resourceGroups": [group("a100", json!([
        { "name": "cpu", "nominalQuota": 4, "borrowingLimit": "2", "lendingLimit": "4" },
        { "name": "nvidia.com/gpu", "nominalQuota": 1 }]))] });
    api.create(&PostParams::default(), &object(cq("ok", ok)))
        .await
        .unwrap();
    assert!(kube.objects("clusterqueues").len() == 1);

    let c = client(&kube).await;
    let flavors: Api<DynamicObject> =
        Api::all_with(c.clone(), &resource("ResourceFlavor", "resourceflavors"));
    let e = refused(
        &flavors,
        rf("A100", json!({ "nodeLabels": { "bad key": "x" } })),
    )
    .await;
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("metadata.name: Invalid value: \"A100\""),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("spec.nodeLabels: Invalid value: \"bad key\""),
        "{}",
        e.message
    );
    let queues: Api<DynamicObject> =
        Api::namespaced_with(c, "ml", &resource("LocalQueue", "localqueues"));
    let mut missing = lq("ml", "q", "x");
    missing["spec"] = json!({});
    let e = refused(&queues, missing).await;
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("spec.clusterQueue: Required value"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn a_local_queue_keeps_its_cluster_queue() {
    let kube = FakeKube::start();
    let queues: Api<DynamicObject> = Api::namespaced_with(
        client(&kube).await,
        "ml",
        &resource("LocalQueue", "localqueues"),
    );
    let created = queues
        .create(
            &PostParams::default(),
            &object(lq("ml", "team-a", "team-a")),
        )
        .await
        .unwrap();
    let patch = json!({ "spec": { "clusterQueue": "team-b" } });
    let e = status(
        queues
            .patch("team-a", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "LocalQueue.kueue.x-k8s.io \"team-a\" is invalid: spec.clusterQueue: Invalid value: \"string\": field is immutable"
    );
    let mut changed = created.clone();
    changed.data["spec"]["clusterQueue"] = json!("team-b");
    let e = status(
        queues
            .replace("team-a", &PostParams::default(), &changed)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    let stop = json!({ "spec": { "stopPolicy": "Hold" } });
    let patched = queues
        .patch("team-a", &PatchParams::default(), &Patch::Merge(&stop))
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["clusterQueue"], "team-a");
}

#[tokio::test]
async fn a_watch_sees_a_cluster_queue_change() {
    let kube = FakeKube::start();
    let api = cluster_queues(&kube).await;
    let created = api
        .create(&PostParams::default(), &object(cq("team-a", json!({}))))
        .await
        .unwrap();
    let from = created.metadata.resource_version.clone().unwrap();
    let mut events = api
        .watch(&WatchParams::default().timeout(10), &from)
        .await
        .unwrap()
        .boxed();
    let patch = json!({ "spec": { "stopPolicy": "HoldAndDrain" } });
    api.patch("team-a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(5), events.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match event {
        WatchEvent::Modified(o) => {
            assert_eq!(o.name_any(), "team-a");
            assert_eq!(o.data["spec"]["stopPolicy"], "HoldAndDrain");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_scripted_writer_makes_the_next_write_conflict_once() {
    let kube = FakeKube::start();
    let api = cluster_queues(&kube).await;
    api.create(&PostParams::default(), &object(cq("team-a", json!({}))))
        .await
        .unwrap();
    let mut read = api.get("team-a").await.unwrap();
    kube.conflict_next_write("clusterqueues");
    read.data["spec"]["stopPolicy"] = json!("Hold");
    let e = status(
        api.replace("team-a", &PostParams::default(), &read)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    let stored = kube.object("ClusterQueue", "", "team-a").unwrap();
    assert_eq!(
        stored["spec"]["stopPolicy"], "None",
        "the other writer changed nothing else"
    );
    // The client's retry: read again, decide again, write.
    let mut again = api.get("team-a").await.unwrap();
    again.data["spec"]["stopPolicy"] = json!("Hold");
    api.replace("team-a", &PostParams::default(), &again)
        .await
        .unwrap();
    assert_eq!(
        kube.object("clusterqueues", "", "team-a").unwrap()["spec"]["stopPolicy"],
        "Hold"
    );
    // A patch carrying its resourceVersion conflicts the same way.
    let rv = api.get("team-a").await.unwrap().metadata.resource_version;
    kube.conflict_next_write("ClusterQueue");
    let patch = json!({ "metadata": { "resourceVersion": rv }, "spec": { "stopPolicy": "None" } });
    let e = status(
        api.patch("team-a", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
}

#[tokio::test]
async fn resource_flavor_taints_tolerations_and_topology_are_checked() {
    let kube = FakeKube::start();
    let flavors: Api<DynamicObject> = Api::all_with(
        client(&kube).await,
        &resource("ResourceFlavor", "resourceflavors"),
    );
    let bad = json!({
        "nodeTaints": [{ "key": "spot", "value": "true", "effect": "Sometimes" }],
        "tolerations": [{ "operator": "Equal", "value": "x" }],
        "topologyName": "default",
    });
    let e = refused(&flavors, rf("spot", bad)).await;
    assert_eq!(e.code, 422);
    for part in [
        "spec.nodeTaints[0].effect: Unsupported value: \"Sometimes\"",
        "operator must be Exists when 'key' is empty",
        "at least one nodeLabel is required when topology is set",
    ] {
        assert!(e.message.contains(part), "{part}: {}", e.message);
    }
    // A ResourceFlavor has no status.
    let mut with_status = rf("default", json!({}));
    with_status["status"] = json!({});
    let e = refused(&flavors, with_status).await;
    assert_eq!(e.code, 400);
    assert!(
        e.message.ends_with("unknown field \"status\""),
        "{}",
        e.message
    );
    // With a topology, the spec is immutable.
    let tas = json!({ "nodeLabels": { "pool": "tas" }, "topologyName": "default" });
    flavors
        .create(&PostParams::default(), &object(rf("tas", tas)))
        .await
        .unwrap();
    let patch = json!({ "spec": { "nodeLabels": { "pool": "other" } } });
    let e = status(
        flavors
            .patch("tas", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("immutable when topologyName is set"),
        "{}",
        e.message
    );
}
