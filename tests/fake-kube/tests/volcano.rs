//! Volcano's Queue (`scheduling.volcano.sh/v1beta1`) through kube-rs's dynamic `Api`:
//! discovery with Volcano installed or not, the CRD's and the mutating webhook's defaults (on
//! create, not on update), the CRD's 422s, strict decoding (400), the validating webhook's
//! denials (400 without a reason) on create, update and delete, the status kept across
//! writes, and the helpers reading the kind as `Queue`.

use fake_kube::FakeKube;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::support::{client, status};

const GROUP: &str = "scheduling.volcano.sh";

async fn queues(kube: &FakeKube) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, "v1beta1", "Queue");
    Api::all_with(
        client(kube).await,
        &ApiResource::from_gvk_with_plural(&gvk, "queues"),
    )
}

fn queue(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": { "name": name },
        "spec": spec,
    })
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap()
}

async fn create(api: &Api<DynamicObject>, obj: Value) -> Result<DynamicObject, kube::Error> {
    api.create(&PostParams::default(), &object(obj)).await
}

async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) -> kube::Result<DynamicObject> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// Asserts a webhook denial: 400, no reason, `admission webhook … denied the request: why`.
fn denied(e: kube::Error, why: &str) {
    let s = status(e);
    assert_eq!((s.code, s.reason.as_str()), (400, ""), "{s:?}");
    assert_eq!(
        s.message,
        format!("admission webhook \"validatequeue.volcano.sh\" denied the request: {why}")
    );
}

#[tokio::test]
async fn discovery_lists_volcano_only_while_it_is_installed() {
    let kube = FakeKube::start();
    let c = client(&kube).await;
    let groups = c.list_api_groups().await.unwrap();
    let g = groups.groups.iter().find(|g| g.name == GROUP).unwrap();
    assert_eq!(
        g.preferred_version.as_ref().unwrap().group_version,
        "scheduling.volcano.sh/v1beta1"
    );
    let list = c
        .list_api_group_resources("scheduling.volcano.sh/v1beta1")
        .await
        .unwrap();
    let r = &list.resources[0];
    assert_eq!(
        (
            list.resources.len(),
            r.name.as_str(),
            r.kind.as_str(),
            r.namespaced
        ),
        (1, "queues", "Queue", false)
    );
    assert_eq!(r.singular_name, "queue");
    assert_eq!(
        r.short_names.as_deref(),
        Some(&["q".to_string(), "queue-v1beta1".to_string()][..])
    );
    let discovery = kube::Discovery::new(c.clone()).run().await.unwrap();
    assert!(discovery.has_group(GROUP));

    kube.put(queue("team-a", json!({})));
    kube.set_volcano_installed(false);
    let groups = c.list_api_groups().await.unwrap();
    assert!(groups.groups.iter().all(|g| g.name != GROUP));
    assert!(groups.groups.iter().any(|g| g.name == "kueue.x-k8s.io"));
    let api = queues(&kube).await;
    for e in [
        c.list_api_group_resources("scheduling.volcano.sh/v1beta1")
            .await
            .unwrap_err(),
        api.get("team-a").await.unwrap_err(),
        api.list(&ListParams::default()).await.unwrap_err(),
        create(&api, queue("team-b", json!({}))).await.unwrap_err(),
        api.delete("team-a", &DeleteParams::default())
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
    assert!(discovery.has_group("kueue.x-k8s.io"));

    kube.set_volcano_installed(true);
    assert_eq!(api.get("team-a").await.unwrap().name_any(), "team-a");
}

#[tokio::test]
async fn create_defaults_as_the_crd_and_the_mutating_webhook_do_and_update_does_not() {
    let kube = FakeKube::start();
    let api = queues(&kube).await;
    let created = create(&api, queue("team-a", json!({ "weight": 0 })))
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"],
        json!({ "weight": 1, "reclaimable": true, "dequeueStrategy": "traverse" })
    );
    let bare = json!({ "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": { "name": "bare" } });
    let created = create(&api, bare).await.unwrap();
    assert_eq!(created.data["spec"]["reclaimable"], true);
    // An update keeps an absent `reclaimable` absent (the mutating webhook is create-only).
    let patched = merge(&api, "team-a", json!({ "spec": { "reclaimable": null } }))
        .await
        .unwrap();
    assert!(
        patched.data["spec"].get("reclaimable").is_none(),
        "{}",
        patched.data
    );
    assert_eq!(patched.data["spec"]["weight"], 1);
    // A weight of 0 is refused on update (the CRD's minimum), and nothing is written.
    let e = status(
        merge(&api, "team-a", json!({ "spec": { "weight": 0 } }))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "Queue.scheduling.volcano.sh \"team-a\" is invalid: spec.weight: Invalid value: 0: spec.weight in body should be greater than or equal to 1"
    );
    let details = e.details.unwrap();
    assert_eq!(
        (details.group.as_str(), details.kind.as_str()),
        (GROUP, "queues")
    );
    assert_eq!(
        kube.object("Queue", "", "team-a").unwrap()["spec"]["weight"],
        1
    );
    let mut replaced = api.get("team-a").await.unwrap();
    replaced.data["spec"]["weight"] = json!(0);
    let e = status(
        api.replace("team-a", &PostParams::default(), &replaced)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    let e = status(
        create(
            &api,
            queue(
                "team-b",
                json!({ "dequeueStrategy": "lifo", "priority": -1 }),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        e.message,
        "Queue.scheduling.volcano.sh \"team-b\" is invalid: [spec.priority: Invalid value: -1: spec.priority in body should be greater than or equal to 0, spec.dequeueStrategy: Unsupported value: \"lifo\": supported values: \"fifo\", \"traverse\"]"
    );
}

#[tokio::test]
async fn unknown_fields_are_refused_with_their_dotted_path() {
    let kube = FakeKube::start();
    let api = queues(&kube).await;
    let e = status(
        create(&api, queue("team-a", json!({ "foo": 1 })))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        e.message,
        "Queue in version \"v1beta1\" cannot be handled as a Queue: strict decoding error: unknown field \"spec.foo\""
    );
    let mut obj = queue(
        "team-a",
        json!({ "affinity": { "nodeGroupAffinity": { "required": ["a"] } } }),
    );
    obj["spex"] = json!({});
    let e = status(create(&api, obj).await.unwrap_err());
    assert_eq!(
        e.message,
        "Queue in version \"v1beta1\" cannot be handled as a Queue: strict decoding error: unknown field \"spec.affinity.nodeGroupAffinity.required\", unknown field \"spex\""
    );
    // A patch whose result has an unknown field is refused; nothing is written.
    create(&api, queue("team-a", json!({}))).await.unwrap();
    let before = kube.object("queues", "", "team-a");
    let e = status(
        merge(
            &api,
            "team-a",
            json!({ "spec": { "capabilty": { "cpu": 4 } } }),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 400);
    assert!(
        e.message.ends_with("unknown field \"spec.capabilty\""),
        "{}",
        e.message
    );
    assert_eq!(kube.object("queues", "", "team-a"), before);
}

#[tokio::test]
async fn the_webhook_keeps_guarantee_within_deserved_within_capability() {
    let kube = FakeKube::start();
    let api = queues(&kube).await;
    let cases = [
        (
            json!({ "capability": { "cpu": 4, "nvidia.com/gpu": 2 }, "deserved": { "cpu": "8" } }),
            "requestBody.spec.deserved: Invalid value: \"cpu 8000.00, memory 0.00\": deserved should less equal than capability",
        ),
        (
            json!({ "capability": { "cpu": 4 }, "guarantee": { "resource": { "nvidia.com/gpu": 1 } } }),
            "requestBody.spec.guarantee: Invalid value: \"cpu 0.00, memory 0.00, nvidia.com/gpu 1000.00\": guarantee should less equal than capability",
        ),
        (
            json!({ "deserved": { "cpu": 2 }, "guarantee": { "resource": { "cpu": 2, "memory": "1Gi" } } }),
            "requestBody.spec.guarantee: Invalid value: \"cpu 2000.00, memory 1073741824.00\": guarantee should less equal than deserved",
        ),
        (
            json!({ "deserved": { "nvidia.com/gpu": "-1" } }),
            "requestBody.spec.deserved.nvidia.com/gpu: Invalid value: \"-1\": must be greater than or equal to 0",
        ),
    ];
    for (i, (spec, why)) in cases.into_iter().enumerate() {
        denied(
            create(&api, queue(&format!("q-{i}"), spec))
                .await
                .unwrap_err(),
            why,
        );
    }
    assert!(kube.objects("Queue").is_empty());
    // Within bounds, then an update that breaks them.
    let ok = json!({ "capability": { "cpu": 8, "nvidia.com/gpu": 4 }, "deserved": { "cpu": 4, "nvidia.com/gpu": 2 },
        "guarantee": { "resource": { "cpu": "2" } } });
    create(&api, queue("team-a", ok)).await.unwrap();
    denied(
        merge(
            &api,
            "team-a",
            json!({ "spec": { "deserved": { "cpu": 16 } } }),
        )
        .await
        .unwrap_err(),
        "requestBody.spec.deserved: Invalid value: \"cpu 16000.00, memory 0.00, nvidia.com/gpu 2000.00\": deserved should less equal than capability",
    );
    assert_eq!(
        kube.object("Queue", "", "team-a").unwrap()["spec"]["deserved"]["cpu"],
        4
    );
}

#[tokio::test]
async fn a_parent_must_exist_and_a_parent_or_default_cannot_be_deleted() {
    let kube = FakeKube::start();
    let api = queues(&kube).await;
    for name in ["default", "root"] {
        kube.put(queue(name, json!({})));
    }
    denied(
        create(&api, queue("team-a", json!({ "parent": "ml" })))
            .await
            .unwrap_err(),
        "failed to get parent queue of queue team-a: queue.scheduling.volcano.sh \"ml\" not found",
    );
    denied(
        create(&api, queue("ml", json!({ "parent": "ml" })))
            .await
            .unwrap_err(),
        "queue ml cannot use itself as parent",
    );
    create(&api, queue("ml", json!({ "parent": "root" })))
        .await
        .unwrap();
    create(&api, queue("team-b", json!({ "parent": "ml" })))
        .await
        .unwrap();
    create(&api, queue("team-a", json!({ "parent": "ml" })))
        .await
        .unwrap();
    // Moving a queue under a parent that does not exist is refused too.
    denied(
        merge(&api, "team-a", json!({ "spec": { "parent": "dev" } }))
            .await
            .unwrap_err(),
        "failed to get parent queue of queue team-a: queue.scheduling.volcano.sh \"dev\" not found",
    );
    let dp = DeleteParams::default();
    for name in ["default", "root"] {
        denied(
            api.delete(name, &dp).await.unwrap_err(),
            &format!("`{name}` queue can not be deleted"),
        );
    }
    denied(
        api.delete("ml", &dp).await.unwrap_err(),
        "queue ml can not be deleted because it has 2 child queues: team-a, team-b",
    );
    assert!(kube.object("Queue", "", "ml").is_some());
    // A queue that is absent is a 404 before the webhook.
    let e = status(api.delete("gone", &dp).await.unwrap_err());
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "queues.scheduling.volcano.sh \"gone\" not found")
    );
    api.delete("team-a", &dp).await.unwrap();
    api.delete("team-b", &dp).await.unwrap();
    api.delete("ml", &dp).await.unwrap();
    let names: Vec<String> = kube
        .objects("Queue")
        .iter()
        .map(|q| q["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["default", "root"]);
}

#[tokio::test]
async fn the_status_is_kept_across_writes_and_helpers_read_the_kind() {
    let kube = FakeKube::start();
    let api = queues(&kube).await;
    let mut q = queue("team-a", json!({ "weight": 2 }));
    q["status"] = json!({ "state": "Open", "allocated": { "cpu": "2" } });
    let stored = kube.put(q);
    assert_eq!(stored["status"]["state"], "Open");
    assert_eq!(stored["spec"]["reclaimable"], true);
    let patched = merge(
        &api,
        "team-a",
        json!({ "spec": { "weight": 3 }, "status": { "state": "Closed" } }),
    )
    .await
    .unwrap();
    assert_eq!(patched.data["spec"]["weight"], 3);
    assert_eq!(patched.data["status"]["state"], "Open");
    let mut read = api.get("team-a").await.unwrap();
    read.data.as_object_mut().unwrap().remove("status");
    let replaced = api
        .replace("team-a", &PostParams::default(), &read)
        .await
        .unwrap();
    assert_eq!(replaced.data["status"]["allocated"]["cpu"], "2");
    assert_eq!(
        kube.object("queues", "ignored", "team-a"),
        kube.object("Queue", "", "team-a")
    );
    // A scripted writer makes the next write of the kind conflict once.
    let mut read = api.get("team-a").await.unwrap();
    kube.conflict_next_write("Queue");
    read.data["spec"]["weight"] = json!(4);
    let e = status(
        api.replace("team-a", &PostParams::default(), &read)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(kube.objects("Queue").len(), 1);
    // The validating webhook refuses an update while the stored state is not Open or Closed.
    let mut closing = queue("closing", json!({}));
    closing["status"] = json!({ "state": "Closing" });
    kube.put(closing);
    denied(
        merge(&api, "closing", json!({ "spec": { "weight": 2 } }))
            .await
            .unwrap_err(),
        "requestBody.spec.state: Invalid value: \"Closing\": queue state must be in [Open Closed]",
    );
}
