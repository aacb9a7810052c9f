//! Watches: `GET <collection>?watch=true`, a 200 chunked `application/json` stream of one JSON
//! event per line (`{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{…}}`).
//!
//! What it does, as kube-apiserver does:
//! - `resourceVersion` unset or "0": ADDED for every current object first, then live events;
//!   `resourceVersion=RV`: the stored events after RV first, then live events;
//! - RV older than the compaction point ([`crate::FakeKube::compact`]): a 200 stream whose only
//!   event is an ERROR `Status` (410, reason `Expired`, "too old resource version: RV (C)"),
//!   then the end;
//! - `sendInitialEvents=true`: ADDED for every current object, then a BOOKMARK annotated
//!   `k8s.io/initial-events-end: "true"` (streaming lists);
//! - label and field selectors, with the transitions: an object that starts matching arrives
//!   as ADDED, one that stops matching as DELETED;
//! - `timeoutSeconds` (and [`crate::FakeKube::close_watches_after`], for watches opened after
//!   it is called) end the stream cleanly, after a BOOKMARK at the last version sent when
//!   `allowWatchBookmarks=true`.
//!
//! What it does not do: no periodic bookmarks, no "too large resource version" wait (a future
//! RV is watched from), no protobuf, no `resourceVersionMatch` checks.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Response;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::objects::{ApiError, Kind};
use crate::query::Query;
use crate::selectors::Selector;
use crate::shared::{Body, ChannelBody, Shared};
use crate::store::{EventType, Store};

/// What one watch selects.
struct Scope {
    kind: Kind,
    ns: Option<String>,
    selector: Selector,
}

impl Scope {
    fn matches(&self, obj: &Value) -> bool {
        let in_ns = self
            .ns
            .as_deref()
            .is_none_or(|ns| obj["metadata"]["namespace"].as_str() == Some(ns));
        in_ns && self.selector.matches(self.kind, obj)
    }

    /// The events after `cursor` this watch sees, and the new cursor; Err when the history
    /// after `cursor` was compacted away.
    fn collect(&self, store: &Store, cursor: u64) -> Result<(Vec<Bytes>, u64), ApiError> {
        if cursor < store.compacted {
            return Err(ApiError::expired(cursor, store.compacted));
        }
        let mut lines = Vec::new();
        for e in store
            .history
            .iter()
            .filter(|e| e.rv > cursor && e.kind == self.kind)
        {
            let now = self.matches(&e.object);
            let etype = match (e.etype, e.prev.as_ref().map(|p| self.matches(p))) {
                (EventType::Modified, Some(true)) if now => "MODIFIED",
                (EventType::Modified, Some(true)) => "DELETED",
                (EventType::Modified, _) if now => "ADDED",
                (EventType::Added | EventType::Deleted, _) if now => e.etype.wire(),
                _ => continue,
            };
            lines.push(event_line(etype, &e.object));
        }
        Ok((lines, store.rv.max(cursor)))
    }
}

fn event_line(etype: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({ "type": etype, "object": object })).expect("JSON");
    line.push(b'\n');
    Bytes::from(line)
}

fn bookmark(kind: Kind, rv: u64, initial_events_end: bool) -> Bytes {
    let mut meta = json!({ "resourceVersion": rv.to_string() });
    if initial_events_end {
        meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    event_line(
        "BOOKMARK",
        &json!({ "kind": kind.kind(), "apiVersion": kind.api_version(), "metadata": meta }),
    )
}

/// Answers a watch request on `kind` (in `ns`, or all namespaces).
pub(crate) fn serve(
    shared: &Arc<Shared>,
    kind: Kind,
    ns: Option<String>,
    query: &Query,
) -> Result<Response<Body>, ApiError> {
    let selector = Selector::parse(kind, query.get("labelSelector"), query.get("fieldSelector"))?;
    let scope = Scope { kind, ns, selector };
    let rv = match query.get("resourceVersion").unwrap_or("") {
        "" | "0" => None,
        v => Some(
            v.parse::<u64>()
                .map_err(|_| ApiError::bad_request(&format!("invalid resource version: {v}")))?,
        ),
    };
    let bookmarks = query.get("allowWatchBookmarks") == Some("true");
    let initial_events = query.get("sendInitialEvents") == Some("true");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);

    let mut changes = shared.changes.subscribe();
    changes.borrow_and_update();
    let (mut first, cursor, close_after) = {
        let mut store = shared.lock();
        let close_after = store.close_watches_after;
        // `expire_next_watches`: this version is gone, as after a restart of the watch cache.
        let expired = rv.is_some() && store.expire_watches > 0;
        if expired {
            store.expire_watches -= 1;
        }
        match rv {
            Some(rv) if expired => (
                vec![event_line(
                    "ERROR",
                    &ApiError::expired(rv, store.rv).status(),
                )],
                u64::MAX,
                close_after,
            ),
            Some(rv) if !initial_events => match scope.collect(&store, rv) {
                Ok((lines, cursor)) => (lines, cursor, close_after),
                Err(e) => (
                    vec![event_line("ERROR", &e.status())],
                    u64::MAX,
                    close_after,
                ),
            },
            _ => {
                let mut lines: Vec<Bytes> = store
                    .list(kind, scope.ns.as_deref())
                    .iter()
                    .filter(|o| scope.matches(o))
                    .map(|o| event_line("ADDED", o))
                    .collect();
                if initial_events {
                    lines.push(bookmark(kind, store.rv, true));
                }
                (lines, store.rv, close_after)
            }
        }
    };
    let deadline = [timeout, close_after]
        .into_iter()
        .flatten()
        .min()
        .map(|d| Instant::now() + d);

    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let handle = shared.handle.clone();
    let shared = Arc::clone(shared);
    handle.spawn(async move {
        for line in first.drain(..) {
            if tx.send(line).await.is_err() {
                return;
            }
        }
        if cursor == u64::MAX {
            return; // the 410 ERROR event was the whole stream
        }
        let mut cursor = cursor;
        loop {
            let woke = tokio::select! {
                changed = changes.changed() => changed.is_ok(),
                _ = sleep_until(deadline) => false,
                _ = tx.closed() => return,
            };
            if !woke {
                if bookmarks {
                    let _ = tx.send(bookmark(kind, cursor, false)).await;
                }
                return;
            }
            changes.borrow_and_update();
            let collected = scope.collect(&shared.lock(), cursor);
            match collected {
                Ok((lines, next)) => {
                    for line in lines {
                        if tx.send(line).await.is_err() {
                            return;
                        }
                    }
                    cursor = next;
                }
                Err(e) => {
                    let _ = tx.send(event_line("ERROR", &e.status())).await;
                    return;
                }
            }
        }
    });
    Ok(Response::builder()
        .status(200)
        .header(CONTENT_TYPE, "application/json")
        .header(CACHE_CONTROL, "no-cache, private")
        .body(ChannelBody(rx).boxed_unsync())
        .expect("a response"))
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
