//! The state every connection, watch and mig-manager run shares ([`Shared`]: the store behind
//! its lock, the change signal watches wait on, the server's runtime, the token), and the
//! response body types the handlers answer with.
//!
//! What it does: [`Shared::write`] runs an object write, then wakes the watches and hands each
//! mig-manager trigger of the write to the hook the server gave (outside the lock).
//!
//! What it does not do: no per-object locks (one lock for everything).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Frame;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use crate::store::{Store, Trigger};

/// Every response body: a whole JSON document or a watch stream.
pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A body fed by a channel: each message is sent as it comes (chunked), the body ends when the
/// sender is dropped.
pub(crate) struct ChannelBody(pub(crate) mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

/// What connections, watches and the mig-manager share.
pub(crate) struct Shared {
    store: Mutex<Store>,
    /// The resourceVersion of the last write; watches wait on it.
    pub(crate) changes: watch::Sender<u64>,
    /// The server runtime, for tasks started from the test's thread.
    pub(crate) handle: Handle,
    /// The bearer token every request must carry.
    pub(crate) token: String,
    /// Starts a scripted controller's run for a trigger (mig-manager or the device plugin, given
    /// by the server): called by [`Shared::write`], which does not call up into them.
    on_trigger: fn(Arc<Shared>, Trigger),
}

impl Shared {
    /// An empty store, no write yet, runs started with `on_trigger`.
    pub(crate) fn new(
        handle: Handle,
        token: String,
        on_trigger: fn(Arc<Shared>, Trigger),
    ) -> Shared {
        Shared {
            store: Mutex::new(Store::new()),
            changes: watch::channel(0).0,
            handle,
            token,
            on_trigger,
        }
    }

    /// The store, for reads and for changes that are not object writes.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs an object write: then wakes the watches and starts the mig-manager runs it
    /// triggered, once the lock is released.
    pub(crate) fn write<R>(self: &Arc<Self>, f: impl FnOnce(&mut Store) -> R) -> R {
        let (result, triggers, rv) = {
            let mut store = self.lock();
            let result = f(&mut store);
            (result, std::mem::take(&mut store.triggers), store.rv)
        };
        self.changes.send_replace(rv);
        for trigger in triggers {
            (self.on_trigger)(Arc::clone(self), trigger);
        }
        result
    }
}
