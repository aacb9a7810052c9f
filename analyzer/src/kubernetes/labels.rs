//! The one node-label write of every rollout (`mig apply --via mig-manager`, `share apply`),
//! compare-and-swap end to end:
//!
//! - the node is read, and the labels the change was decided on (`expect`: e.g. the previous
//!   `nvidia.com/mig.config`, or tessera's own value when it puts a node back) must still hold,
//!   or nothing is written ([`Written::Changed`]: another client owns the label now);
//! - the merge patch carries the resourceVersion read, so the API server refuses it (409) when
//!   the node changed in between; a 409 reads the node again and decides again;
//! - a write that got no answer (a timeout, a transport error, a 5xx) is **read back**: when
//!   the node carries the labels, it landed; when it does not, the write is made again with the
//!   node's current resourceVersion. The lost write carried an older resourceVersion, so once
//!   any later write is accepted it can never land late. Only when every attempt is lost is the
//!   outcome unknown ([`LabelError::Unknown`]): the callers keep what the label names and print
//!   the command that puts it back.
//!
//! What it does not do: wait for the node to reach its config (the rollouts' success conditions
//! differ), or write anything but labels.

use std::collections::BTreeMap;
use std::io::Write;

use kube::api::Patch;
use serde_json::json;

use super::KubeError;

/// A JSON merge patch setting each label to its value, or removing it (`None`: JSON null),
/// with `metadata.resourceVersion` = `resource_version` as precondition when given.
pub fn merge_patch(
    labels: &[(&str, Option<&str>)],
    resource_version: Option<&str>,
) -> Patch<serde_json::Value> {
    let map: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                v.map_or(serde_json::Value::Null, |v| json!(v)),
            )
        })
        .collect();
    let mut patch = json!({ "metadata": { "labels": map } });
    if let Some(rv) = resource_version {
        patch["metadata"]["resourceVersion"] = json!(rv);
    }
    Patch::Merge(patch)
}

/// How many reads and writes one label change may take.
pub const ATTEMPTS: u32 = 5;

/// A node's labels and the resourceVersion they were read or written at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeLabels {
    pub labels: BTreeMap<String, String>,
    pub resource_version: String,
}

impl NodeLabels {
    /// Whether every `(key, value)` holds (`None`: the label is absent).
    pub fn has(&self, want: &[(&str, Option<&str>)]) -> bool {
        want.iter()
            .all(|(k, v)| self.labels.get(*k).map(String::as_str) == *v)
    }
}

/// The two calls the write needs; the rollouts' cluster traits provide them.
pub trait LabelApi {
    /// The node's labels, `None` when it is gone.
    fn read_labels(&mut self, node: &str) -> Result<Option<NodeLabels>, KubeError>;
    /// A JSON merge patch of `labels` (`None` removes one) with `metadata.resourceVersion` =
    /// `resource_version` as precondition (409 when the node changed since).
    fn patch_labels_at(
        &mut self,
        node: &str,
        labels: &[(&str, Option<&str>)],
        resource_version: &str,
    ) -> Result<NodeLabels, KubeError>;
}

/// What became of the write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Written: the node carries the labels now (a write whose answer was lost included).
    Done(NodeLabels),
    /// The node carried the labels already: nothing was written.
    Already(NodeLabels),
    /// A label the change was decided on is not what it was: nothing was written. The text
    /// says which label is what now.
    Changed(String),
    /// The node is gone.
    Gone,
}

/// Why the labels could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// Refused (403, 404, 409 every time, a bad request) or unreadable before anything was
    /// written: the node is as it was.
    #[error("{0}")]
    Failed(KubeError),
    /// A write got no answer and the node could not be read back or written again: the write
    /// may still land.
    #[error("{0} (the label write may still land)")]
    Unknown(KubeError),
}

fn show(v: Option<&str>) -> &str {
    v.unwrap_or("(unset)")
}

/// Set `set` on `node` if `expect` still holds; see the module docs.
pub fn write(
    c: &mut dyn LabelApi,
    node: &str,
    expect: &[(&str, Option<&str>)],
    set: &[(&str, Option<&str>)],
    err: &mut dyn Write,
) -> Result<Written, LabelError> {
    let mut lost: Option<KubeError> = None;
    let mut last: Option<KubeError> = None;
    for _ in 0..ATTEMPTS {
        let now = match c.read_labels(node) {
            Ok(Some(n)) => n,
            Ok(None) => return Ok(Written::Gone),
            Err(e) if lost.is_some() => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(LabelError::Failed(e)),
        };
        if now.has(set) {
            let Some(e) = &lost else {
                return Ok(Written::Already(now));
            };
            let _ = writeln!(
                err,
                "tessera: node {node}: the label write got no answer ({e}), but the node carries the labels: it landed"
            );
            return Ok(Written::Done(now));
        }
        if let Some((k, v)) = expect
            .iter()
            .find(|(k, v)| now.labels.get(*k).map(String::as_str) != *v)
        {
            return Ok(Written::Changed(format!(
                "{k} is {} now, not {} as when tessera decided",
                show(now.labels.get(*k).map(String::as_str)),
                show(*v)
            )));
        }
        match c.patch_labels_at(node, set, &now.resource_version) {
            Ok(n) => return Ok(Written::Done(n)),
            Err(KubeError::Conflict(_)) => continue,
            Err(e) if e.certainly_not_applied() => {
                return Err(match lost {
                    Some(l) => LabelError::Unknown(l),
                    None => LabelError::Failed(e),
                });
            }
            Err(e) => {
                let _ = writeln!(
                    err,
                    "tessera: node {node}: the label write got no answer ({e}); reading the node back"
                );
                last = Some(e.clone());
                lost = Some(e);
            }
        }
    }
    Err(match lost {
        Some(l) => LabelError::Unknown(last.unwrap_or(l)),
        None => LabelError::Failed(KubeError::Conflict(format!(
            "node {node} changed {ATTEMPTS} times while tessera wrote its labels"
        ))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    type Owned = Vec<(String, Option<String>)>;

    /// A node on a server that can lose answers (the write applies, the answer is lost) and
    /// hold writes to land later.
    #[derive(Default)]
    struct Server {
        node: NodeLabels,
        rv: u64,
        /// Per write: `Some(true)` apply and lose the answer, `Some(false)` hold it (lands at
        /// the next read), `None` answer normally.
        faults: Vec<Option<bool>>,
        held: Vec<(Owned, String)>,
        reads_fail: u32,
        writes: u32,
    }

    impl Server {
        fn apply(&mut self, labels: &[(String, Option<String>)], rv: &str) -> bool {
            if rv != self.node.resource_version {
                return false;
            }
            for (k, v) in labels {
                match v {
                    Some(v) => self.node.labels.insert(k.clone(), v.clone()),
                    None => self.node.labels.remove(k),
                };
            }
            self.rv += 1;
            self.node.resource_version = self.rv.to_string();
            true
        }
    }

    impl LabelApi for Server {
        fn read_labels(&mut self, _: &str) -> Result<Option<NodeLabels>, KubeError> {
            if self.reads_fail > 0 {
                self.reads_fail -= 1;
                return Err(KubeError::Other("read: timeout".into()));
            }
            for (l, rv) in std::mem::take(&mut self.held) {
                self.apply(&l, &rv);
            }
            Ok(Some(self.node.clone()))
        }
        fn patch_labels_at(
            &mut self,
            _: &str,
            labels: &[(&str, Option<&str>)],
            rv: &str,
        ) -> Result<NodeLabels, KubeError> {
            self.writes += 1;
            let owned: Vec<(String, Option<String>)> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
                .collect();
            match self.faults.first().copied().flatten() {
                Some(lose) => {
                    self.faults.remove(0);
                    if lose {
                        self.apply(&owned, rv);
                    } else {
                        self.held.push((owned, rv.to_string()));
                    }
                    Err(KubeError::Other("label node: no answer in 30 s".into()))
                }
                None => {
                    if !self.faults.is_empty() {
                        self.faults.remove(0);
                    }
                    if self.apply(&owned, rv) {
                        Ok(self.node.clone())
                    } else {
                        Err(KubeError::Conflict("the object has been modified".into()))
                    }
                }
            }
        }
    }

    fn server(label: Option<&str>) -> Server {
        let mut s = Server::default();
        if let Some(l) = label {
            s.node.labels.insert("cfg".into(), l.into());
        }
        s.node.resource_version = "0".into();
        s
    }

    #[test]
    fn a_lost_answer_that_landed_is_read_back_as_written() {
        let mut s = server(Some("old"));
        s.faults = vec![Some(true)];
        let mut err = Vec::new();
        let r = write(
            &mut s,
            "n1",
            &[("cfg", Some("old"))],
            &[("cfg", Some("new"))],
            &mut err,
        );
        assert!(
            matches!(&r, Ok(Written::Done(n)) if n.labels["cfg"] == "new"),
            "{r:?}"
        );
        assert_eq!(s.writes, 1, "not written twice");
        assert!(String::from_utf8(err).unwrap().contains("it landed"));
    }

    #[test]
    fn a_write_held_past_the_answer_cannot_land_over_a_later_decision() {
        // The first write is held by the server; tessera writes again with the current version;
        // the held one then carries a stale version and is refused.
        let mut s = server(Some("old"));
        s.faults = vec![Some(false)];
        let r = write(
            &mut s,
            "n1",
            &[("cfg", Some("old"))],
            &[("cfg", Some("new"))],
            &mut Vec::new(),
        );
        assert!(matches!(r, Ok(Written::Done(_))), "{r:?}");
        // Now put it back; the stale held write (if any were left) must not undo that.
        let r = write(
            &mut s,
            "n1",
            &[("cfg", Some("new"))],
            &[("cfg", Some("old"))],
            &mut Vec::new(),
        );
        assert!(matches!(r, Ok(Written::Done(_))), "{r:?}");
        for (l, rv) in std::mem::take(&mut s.held) {
            assert!(!s.apply(&l, &rv), "a late write landed");
        }
        assert_eq!(s.node.labels["cfg"], "old");
    }

    #[test]
    fn a_label_changed_since_the_decision_is_not_overwritten() {
        let mut s = server(Some("someone-elses"));
        let r = write(
            &mut s,
            "n1",
            &[("cfg", Some("old"))],
            &[("cfg", Some("new"))],
            &mut Vec::new(),
        );
        assert!(
            matches!(&r, Ok(Written::Changed(m)) if m.contains("someone-elses")),
            "{r:?}"
        );
        assert_eq!(s.writes, 0);
        assert_eq!(s.node.labels["cfg"], "someone-elses");
    }

    #[test]
    fn every_answer_lost_and_nothing_landed_is_unknown_and_a_refusal_is_failed() {
        let mut s = server(None);
        s.faults = vec![Some(false); ATTEMPTS as usize];
        let r = write(
            &mut s,
            "n1",
            &[("cfg", None)],
            &[("cfg", Some("new"))],
            &mut Vec::new(),
        );
        // Each held write lands at the next read: the second read sees it.
        assert!(matches!(r, Ok(Written::Done(_))), "{r:?}");

        struct Silent;
        impl LabelApi for Silent {
            fn read_labels(&mut self, _: &str) -> Result<Option<NodeLabels>, KubeError> {
                Ok(Some(NodeLabels::default()))
            }
            fn patch_labels_at(
                &mut self,
                _: &str,
                _: &[(&str, Option<&str>)],
                _: &str,
            ) -> Result<NodeLabels, KubeError> {
                Err(KubeError::Other("no answer".into()))
            }
        }
        let r = write(
            &mut Silent,
            "n1",
            &[],
            &[("cfg", Some("new"))],
            &mut Vec::new(),
        );
        assert!(matches!(r, Err(LabelError::Unknown(_))), "{r:?}");

        struct Refuses;
        impl LabelApi for Refuses {
            fn read_labels(&mut self, _: &str) -> Result<Option<NodeLabels>, KubeError> {
                Ok(Some(NodeLabels::default()))
            }
            fn patch_labels_at(
                &mut self,
                _: &str,
                _: &[(&str, Option<&str>)],
                _: &str,
            ) -> Result<NodeLabels, KubeError> {
                Err(KubeError::Forbidden {
                    what: "label node n1".into(),
                    message: "forbidden".into(),
                    rbac: "deploy/x/rbac.yaml",
                })
            }
        }
        let r = write(
            &mut Refuses,
            "n1",
            &[],
            &[("cfg", Some("new"))],
            &mut Vec::new(),
        );
        assert!(
            matches!(r, Err(LabelError::Failed(KubeError::Forbidden { .. }))),
            "{r:?}"
        );
    }
}
