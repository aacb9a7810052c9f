//! Interleavings a client cannot order itself: another client's write right before one of its
//! requests is handled ([`FakeKube::change_before`](crate::FakeKube::change_before)), and writes
//! that land late ([`FakeKube::hold`](crate::FakeKube::hold)): applied at once with the answer
//! held back, or held and applied only when the test says so, whatever the client did
//! meanwhile (it timed out, it wrote again). No timing is involved: the test releases held
//! requests with [`FakeKube::release`](crate::FakeKube::release), which returns once each was
//! handled, with its status.
//!
//! What it does not do: hold reads or watches apart from any other request (a hold matches what
//! its [`Fault`] matches), or release one held request without the others.

use std::sync::Arc;
use std::sync::mpsc;

use serde_json::Value;
use tokio::sync::watch;

use crate::objects::Kind;
use crate::shared::Shared;
use crate::{Fault, Request};

/// How a held request lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// The write is applied when it arrives; its answer is sent only at
    /// [`FakeKube::release`](crate::FakeKube::release) (a client with a timeout gives up first:
    /// the write landed, the answer was lost).
    AnswerLate,
    /// The request waits and is handled only at [`FakeKube::release`](crate::FakeKube::release),
    /// even when its client has given up and gone (a write that lands after the client moved on).
    ApplyLate,
}

/// What the test scripted: holds, changes before chosen requests, and the release signal.
pub(crate) struct Late {
    holds: Vec<(Fault, Hold)>,
    /// (matcher, how many matching requests to let pass first, objects to write).
    changes: Vec<(Fault, usize, Vec<Value>)>,
    released: watch::Sender<bool>,
    /// Each held request's status once handled; `held` counts them.
    done_tx: mpsc::Sender<u16>,
    done_rx: Option<mpsc::Receiver<u16>>,
    held: usize,
}

impl Late {
    pub(crate) fn new() -> Late {
        let (done_tx, done_rx) = mpsc::channel();
        Late {
            holds: Vec::new(),
            changes: Vec::new(),
            released: watch::channel(false).0,
            done_tx,
            done_rx: Some(done_rx),
            held: 0,
        }
    }

    pub(crate) fn hold(&mut self, fault: Fault, how: Hold) {
        self.holds.push((fault, how));
    }

    pub(crate) fn change_before(&mut self, fault: Fault, skip: usize, objects: Vec<Value>) {
        self.changes.push((fault, skip, objects));
    }
}

/// Writes `obj` as another client would: created when absent, else merged into the stored one
/// (a JSON merge patch of the whole object).
pub(crate) fn apply(shared: &Arc<Shared>, obj: Value) -> Value {
    let kind = Kind::from_object(&obj).unwrap_or_else(|| {
        panic!(
            "fake-kube: unknown kind {} {}",
            obj["apiVersion"], obj["kind"]
        )
    });
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .filter(|_| kind.namespaced())
        .unwrap_or_default()
        .to_string();
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    shared
        .write(|s| match s.get(kind, &ns, &name) {
            None => s.create(kind, obj),
            Some(_) => s.merge_patch(kind, &ns, &name, &obj),
        })
        .unwrap_or_else(|e| panic!("fake-kube: write {ns}/{name}: {}", e.status()))
}

/// Writes the changes scripted before `req`, if any.
pub(crate) fn changes_before(shared: &Arc<Shared>, req: &Request) {
    let objects = {
        let mut store = shared.lock();
        let late = &mut store.late;
        let Some(i) = late.changes.iter().position(|(f, _, _)| f.matches(req)) else {
            return;
        };
        if late.changes[i].1 > 0 {
            late.changes[i].1 -= 1;
            return;
        }
        late.changes.remove(i).2
    };
    for o in objects {
        apply(shared, o);
    }
}

/// The hold `req` falls under, if any (each hold takes one request), and the release signal.
pub(crate) fn held(
    shared: &Arc<Shared>,
    req: &Request,
) -> Option<(Hold, watch::Receiver<bool>, mpsc::Sender<u16>)> {
    let mut store = shared.lock();
    let late = &mut store.late;
    let i = late.holds.iter().position(|(f, _)| f.matches(req))?;
    let (_, how) = late.holds.remove(i);
    late.held += 1;
    Some((how, late.released.subscribe(), late.done_tx.clone()))
}

/// Waits for the release signal.
pub(crate) async fn released(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|r| *r).await;
}

/// Releases every held request and waits until each has been handled; their statuses in the
/// order they were handled.
pub(crate) fn release(shared: &Arc<Shared>) -> Vec<u16> {
    let (rx, n) = {
        let mut store = shared.lock();
        let late = &mut store.late;
        late.released.send_replace(true);
        (late.done_rx.take(), std::mem::take(&mut late.held))
    };
    let rx = rx.expect("fake-kube: release is called once");
    (0..n)
        .map(|_| {
            rx.recv_timeout(std::time::Duration::from_secs(60))
                .expect("fake-kube: a held request was never handled")
        })
        .collect()
}
