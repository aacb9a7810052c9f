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

use crate::Request;
use crate::hold::Hold;
use crate::objects::Kind;
use crate::shared::Shared;

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
