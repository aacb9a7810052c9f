//! What a test scripted for [`crate::late`]: the holds ([`Hold`]: writes that land late) and the
//! changes made before chosen requests, kept in the store's state. Data only; the handling is in
//! `late.rs`.

use std::sync::mpsc;

use serde_json::Value;
use tokio::sync::watch;

use crate::Fault;

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
    pub(crate) holds: Vec<(Fault, Hold)>,
    /// (matcher, how many matching requests to let pass first, objects to write).
    pub(crate) changes: Vec<(Fault, usize, Vec<Value>)>,
    pub(crate) released: watch::Sender<bool>,
    /// Each held request's status once handled; `held` counts them.
    pub(crate) done_tx: mpsc::Sender<u16>,
    pub(crate) done_rx: Option<mpsc::Receiver<u16>>,
    pub(crate) held: usize,
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
