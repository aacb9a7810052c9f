//! tessera's local journal of the workloads it scaled down (`--journal`, `docs/scale-down.md`):
//! one JSON document (`kind: tessera-scale-down-journal`, version 1) with an entry per workload
//! whose record tessera wrote — kind, namespace, name, uid, the count it recorded and when. It
//! is the workload's recorded history `--undo` checks a record against (a record whose count
//! differs from the journal's is refused), and the local trail of what tessera changed.
//!
//! The entry is written before the first write to the cluster and removed only once the
//! workload was read back without tessera's record (put back as it was, or restored by
//! `--undo`). Every change replaces the file atomically (`tessera_core::files::replace`: a
//! temporary file in the same folder, written, fsynced, renamed over the old one, then the
//! folder fsynced): a reader sees the old journal or the new one, never a part, and a failed
//! write leaves the old one in place.
//!
//! What it does not do: lock the file against a second tessera writing it at the same time (the
//! last rename wins), or keep entries of workloads it no longer has a record on.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Kind;

/// The journal's `kind`.
pub const JOURNAL_KIND: &str = "tessera-scale-down-journal";
/// The largest journal read.
const MAX_BYTES: u64 = 16 << 20;

/// One workload tessera wrote a record on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// `Deployment`, `StatefulSet`, `InferenceService`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The object's `metadata.uid` (a workload deleted and made again under the name is
    /// another one).
    pub uid: String,
    /// The count recorded (`tessera.io/scaled-down-from`).
    pub from: String,
    /// When (RFC 3339 UTC).
    pub at: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    kind: String,
    version: u32,
    entries: Vec<Entry>,
}

/// The journal cannot be read or written.
#[derive(Debug, thiserror::Error)]
#[error("journal {path}: {message}")]
pub struct JournalError {
    path: String,
    message: String,
}

/// The journal: its entries, kept in `path` (none: in memory, for tests).
#[derive(Debug, Default)]
pub struct Journal {
    path: Option<PathBuf>,
    entries: Vec<Entry>,
}

impl Journal {
    /// The journal at `path`; a file that does not exist is an empty journal.
    pub fn open(path: &Path) -> Result<Journal, JournalError> {
        let err = |message: String| JournalError {
            path: path.display().to_string(),
            message,
        };
        let entries = match tessera_core::input_limits::read_to_string(path, MAX_BYTES) {
            Ok(text) => {
                let doc: Document = serde_json::from_str(&text)
                    .map_err(|e| err(format!("not a {JOURNAL_KIND} document: {e}")))?;
                if doc.kind != JOURNAL_KIND || doc.version != 1 {
                    return Err(err(format!(
                        "kind {:?} version {}: expected {JOURNAL_KIND} version 1",
                        crate::output::escape::printable(&doc.kind),
                        doc.version
                    )));
                }
                doc.entries
            }
            Err(tessera_core::input_limits::ReadError::Io(e))
                if e.kind() == std::io::ErrorKind::NotFound =>
            {
                Vec::new()
            }
            Err(e) => return Err(err(e.to_string())),
        };
        Ok(Journal {
            path: Some(path.to_path_buf()),
            entries,
        })
    }

    /// A journal kept in memory only.
    pub fn in_memory() -> Journal {
        Journal::default()
    }

    /// Where it is kept.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The entries.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry of one workload.
    pub fn find(&self, kind: Kind, namespace: &str, name: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.kind == kind.kind() && e.namespace == namespace && e.name == name)
    }

    /// Adds `entry` (replacing the workload's entry) and saves.
    pub fn record(&mut self, entry: Entry) -> Result<(), JournalError> {
        self.entries.retain(|e| {
            (&e.kind, &e.namespace, &e.name) != (&entry.kind, &entry.namespace, &entry.name)
        });
        self.entries.push(entry);
        self.save()
    }

    /// Removes the workload's entry, if any, and saves.
    pub fn forget(&mut self, kind: Kind, namespace: &str, name: &str) -> Result<(), JournalError> {
        let before = self.entries.len();
        self.entries
            .retain(|e| !(e.kind == kind.kind() && e.namespace == namespace && e.name == name));
        if self.entries.len() == before {
            return Ok(());
        }
        self.save()
    }

    fn save(&self) -> Result<(), JournalError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let doc = Document {
            kind: JOURNAL_KIND.into(),
            version: 1,
            entries: self.entries.clone(),
        };
        let mut bytes = serde_json::to_vec_pretty(&doc).map_err(|e| JournalError {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        bytes.push(b'\n');
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| JournalError {
                path: path.display().to_string(),
                message: format!("making its folder: {e}"),
            })?;
        }
        tessera_core::files::replace(path, &bytes).map_err(|e| JournalError {
            path: path.display().to_string(),
            message: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, from: &str) -> Entry {
        Entry {
            kind: "Deployment".into(),
            namespace: "ml".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            from: from.into(),
            at: "2026-11-30T00:05:00Z".into(),
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_journal_round_trips_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/journal.json");
        let mut j = Journal::open(&path).unwrap();
        assert!(j.entries().is_empty());
        j.record(entry("web", "2")).unwrap();
        j.record(entry("db", "3")).unwrap();
        j.record(entry("web", "4")).unwrap();
        let again = Journal::open(&path).unwrap();
        assert_eq!(again.entries(), [entry("db", "3"), entry("web", "4")]);
        assert_eq!(
            again
                .find(Kind::Deployment, "ml", "web")
                .map(|e| &e.from[..]),
            Some("4")
        );
        assert_eq!(again.find(Kind::StatefulSet, "ml", "web"), None);
        j.forget(Kind::Deployment, "ml", "db").unwrap();
        assert_eq!(Journal::open(&path).unwrap().entries(), [entry("web", "4")]);
        assert_eq!(files(path.parent().unwrap()), ["journal.json"]);
    }

    #[test]
    fn a_journal_that_cannot_be_written_is_an_error_and_the_old_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let mut j = Journal::open(&path).unwrap();
        j.record(entry("web", "2")).unwrap();
        let before = std::fs::read_to_string(&path).unwrap();
        // A folder where the temporary file would be renamed to: the rename fails.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("x"), "").unwrap();
        let mut k = Journal {
            path: Some(blocked.clone()),
            entries: Vec::new(),
        };
        let e = k.record(entry("db", "3")).unwrap_err().to_string();
        assert!(e.contains("blocked") && e.contains("not changed"), "{e}");
        assert!(blocked.is_dir());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
        assert_eq!(
            files(dir.path()),
            ["blocked", "journal.json"],
            "no temporary file"
        );
    }

    #[test]
    fn a_journal_that_is_not_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        for (text, want) in [
            ("{", "not a tessera-scale-down-journal document"),
            (
                r#"{"kind":"other","version":1,"entries":[]}"#,
                "expected tessera-scale-down-journal version 1",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = Journal::open(&path).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("journal.json"), "{e}");
        }
    }
}
