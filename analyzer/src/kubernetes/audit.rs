//! The local half of the audit trail: one JSON line per change tessera makes to a cluster (the
//! same changes its Kubernetes Events name, [`super::events`]), appended to the audit log
//! (`--audit-log FILE`, default `$XDG_STATE_HOME/tessera/cluster-audit.jsonl`, else
//! `~/.local/state/tessera/cluster-audit.jsonl`; `-`: stderr, a pod's log) and flushed to disk
//! before the command goes on.
//! A line: `at` (RFC 3339), `controller` and `instance` (the host), `reason`, `action`, the
//! object (`api_version`, `kind`, `namespace`, `name`), `note`, `type` (`Normal`, `Warning`).
//!
//! An append-only log, not a replaced file: each record is one `write` of one line to a file
//! opened for appending, so a crash loses at most the line being written and never the ones
//! before it. What it does not do: rotate (use logrotate), or read the log back.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The reporting controller of tessera's Events.
pub const CONTROLLER: &str = "tessera.dev/tessera";

/// The object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regarding {
    pub api_version: String,
    pub kind: String,
    /// `None` for cluster-scoped objects (nodes): their Events go to `default`.
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Option<String>,
}

impl Regarding {
    /// A node.
    pub fn node(name: &str) -> Regarding {
        Regarding {
            api_version: "v1".into(),
            kind: "Node".into(),
            namespace: None,
            name: name.to_string(),
            uid: None,
        }
    }
}

/// One change, as an Event says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change<'a> {
    pub regarding: Regarding,
    /// CamelCase, e.g. `MigConfigLabelled`, `ScaledDown`.
    pub reason: &'a str,
    /// What tessera did, e.g. `Label`, `Scale`.
    pub action: &'a str,
    /// For people: what changed from what to what, and on which evidence.
    pub note: String,
    /// A rollback or a change that did not reach its goal.
    pub warning: bool,
}

/// The user's state folder: `$XDG_STATE_HOME`, else `~/.local/state`; `None` when neither
/// `$XDG_STATE_HOME` nor `$HOME` is set (also where scale-down keeps its journal).
pub fn state_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })
}

/// The default audit log, under the user's state folder ([`state_dir`]).
pub fn default_path() -> Option<PathBuf> {
    state_dir().map(|d| d.join("tessera/cluster-audit.jsonl"))
}

/// The line of `change`, made at `at_ms` from host `instance`.
pub fn line(change: &Change<'_>, at_ms: i64, instance: &str) -> String {
    let r = &change.regarding;
    let v = serde_json::json!({
        "at": crate::evidence::rfc3339(at_ms),
        "controller": CONTROLLER,
        "instance": instance,
        "reason": change.reason,
        "action": change.action,
        "api_version": r.api_version,
        "kind": r.kind,
        "namespace": r.namespace,
        "name": r.name,
        "note": change.note,
        "type": if change.warning { "Warning" } else { "Normal" },
    });
    let mut s = v.to_string();
    s.push('\n');
    s
}

/// Append `change` to the log at `path` (its folder created when missing), flushed to disk;
/// `-` writes the line to stderr instead (a CronJob's pod log, whose root filesystem is
/// read-only).
pub fn append(path: &Path, change: &Change<'_>, at_ms: i64, instance: &str) -> std::io::Result<()> {
    if path.as_os_str() == "-" {
        return std::io::stderr().write_all(line(change, at_ms, instance).as_bytes());
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(line(change, at_ms, instance).as_bytes())?;
    f.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_is_one_json_line_appended_after_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/tessera/cluster-audit.jsonl");
        for (name, note) in [("gpu-1", "a -> b"), ("gpu-2", "with\nnewline \"quoted\"")] {
            let change = Change {
                regarding: Regarding::node(name),
                reason: "SharingConfigLabelled",
                action: "Label",
                note: note.into(),
                warning: false,
            };
            append(&path, &change, 1_795_424_400_000, "host").unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["name"], "gpu-1");
        assert_eq!(lines[0]["at"], "2026-11-23T09:00:00Z");
        assert_eq!(lines[1]["note"], "with\nnewline \"quoted\"");
        assert_eq!(lines[1]["kind"], "Node");
        assert_eq!(lines[1]["namespace"], serde_json::Value::Null);
    }
}
