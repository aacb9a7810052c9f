//! Watches through kube-rs's `Api::watch`: replay from a resourceVersion, order, 410 Expired
//! after compaction, server-side close with a bookmark.

use std::time::Duration;

use fake_kube::FakeKube;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::support::client;

async fn label(nodes: &Api<Node>, value: &str) {
    let patch = json!({"metadata": {"labels": {"step": value}}});
    nodes
        .patch("gpu-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_watch_from_a_version_sees_the_patches_in_order() {
    let kube = FakeKube::start();
    kube.add_node("gpu-1", &[]);
    kube.add_node("gpu-2", &[]);
    let nodes: Api<Node> = Api::all(client(&kube).await);
    let from = nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    label(&nodes, "1").await; // before the watch starts: replayed from history
    let wp = WatchParams::default()
        .fields("metadata.name=gpu-1")
        .timeout(10);
    let mut events = nodes.watch(&wp, &from).await.unwrap().boxed();
    label(&nodes, "2").await;
    kube.set_node_labels("gpu-2", &[("step", Some("x"))]); // not selected
    label(&nodes, "3").await;

    let mut seen = Vec::new();
    let mut last_rv = from.parse::<u64>().unwrap();
    while seen.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .unwrap()
            .unwrap();
        match event.unwrap() {
            WatchEvent::Modified(n) => {
                let rv: u64 = n.metadata.resource_version.unwrap().parse().unwrap();
                assert!(rv > last_rv, "versions increase");
                last_rv = rv;
                assert_eq!(n.metadata.name.as_deref(), Some("gpu-1"));
                seen.push(n.metadata.labels.unwrap()["step"].clone());
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["1", "2", "3"]);
    assert!(
        kube.requests()
            .iter()
            .any(|r| r.is_watch() && r.param("resourceVersion") == Some(from.clone()))
    );
}

#[tokio::test]
async fn a_watch_from_zero_starts_with_the_current_objects() {
    let kube = FakeKube::start();
    kube.add_node("gpu-1", &[("a", "1")]);
    kube.add_node("gpu-2", &[]);
    let nodes: Api<Node> = Api::all(client(&kube).await);
    let mut events = nodes
        .watch(&WatchParams::default().labels("a=1"), "0")
        .await
        .unwrap()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), events.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(first, Some(WatchEvent::Added(ref n)) if n.metadata.name.as_deref() == Some("gpu-1"))
    );
    // Stops matching the selector: DELETED, as on the apiserver.
    kube.set_node_labels("gpu-1", &[("a", None)]);
    let next = tokio::time::timeout(Duration::from_secs(5), events.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(next, Some(WatchEvent::Deleted(_))), "{next:?}");
}

#[tokio::test]
async fn a_watch_from_a_compacted_version_gets_410_expired() {
    let kube = FakeKube::start();
    kube.add_node("gpu-1", &[]);
    let nodes: Api<Node> = Api::all(client(&kube).await);
    let old = kube.resource_version();
    label(&nodes, "1").await;
    kube.compact();
    let events: Vec<_> = tokio::time::timeout(
        Duration::from_secs(5),
        nodes
            .watch(&WatchParams::default(), &old.to_string())
            .await
            .unwrap()
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    assert_eq!(events.len(), 1, "one ERROR event, then the end");
    match events.into_iter().next().unwrap().unwrap() {
        WatchEvent::Error(s) => {
            assert_eq!((s.code, s.reason.as_str()), (410, "Expired"));
            assert_eq!(
                s.message,
                format!(
                    "too old resource version: {old} ({})",
                    kube.resource_version()
                )
            );
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    // From the current version it works.
    let now = kube.resource_version().to_string();
    let mut events = nodes
        .watch(&WatchParams::default(), &now)
        .await
        .unwrap()
        .boxed();
    label(&nodes, "2").await;
    let e = tokio::time::timeout(Duration::from_secs(5), events.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(e, Some(WatchEvent::Modified(_))), "{e:?}");
}

#[tokio::test]
async fn the_server_closes_watches_with_a_bookmark() {
    let kube = FakeKube::start();
    kube.add_node("gpu-1", &[]);
    kube.close_watches_after(Duration::from_millis(300));
    let nodes: Api<Node> = Api::all(client(&kube).await);
    let from = kube.resource_version().to_string();
    let stream = nodes.watch(&WatchParams::default(), &from).await.unwrap();
    let events: Vec<_> = tokio::time::timeout(Duration::from_secs(5), stream.collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    match events.into_iter().next().unwrap().unwrap() {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, from),
        other => panic!("expected a bookmark, got {other:?}"),
    }

    // timeoutSeconds alone ends a stream too (no bookmarks asked for: nothing at all).
    let kube = FakeKube::start();
    let nodes: Api<Node> = Api::all(client(&kube).await);
    let wp = WatchParams::default().timeout(1).disable_bookmarks();
    let events: Vec<_> = tokio::time::timeout(
        Duration::from_secs(5),
        nodes.watch(&wp, "0").await.unwrap().collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    assert!(events.is_empty(), "{events:?}");
}
