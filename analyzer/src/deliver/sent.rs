//! The sent record of `tessera report`'s delivery (`--sent-record FILE`): a small versioned JSON
//! file that lists, per report period (`period`: `super::content::period_key`, "7d ending
//! 2026-11-09 UTC") and target, when the report was delivered,
//! so that a re-run of the same report (a retried CronJob, a timer caught up at boot) mails and
//! posts only what was not delivered yet. Each delivery is recorded right after it succeeded and
//! the file is replaced atomically (`tessera_core::files::replace`), so a run stopped half-way keeps
//! what it did send.
//!
//! Targets are keyed without secrets: `mail:<address>` (lower case), `slack:<fnv>` and
//! `teams:<fnv>`, where `<fnv>` is the FNV-1a 64 hash of the webhook's URL (the URL is itself a
//! secret and is never written). What it does not do: send, or lock the file against a second
//! run at the same time (the schedules run one at a time: `concurrencyPolicy: Forbid`, a
//! systemd oneshot).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The record's format version.
pub const VERSION: u32 = 1;
/// Entries kept: the newest, older ones dropped when a run adds more (a weekly report to a few
/// targets stays far below it for years).
pub const MAX_ENTRIES: usize = 1000;
/// Largest record read.
const MAX_BYTES: u64 = 4 << 20;

/// The record as the file holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentRecord {
    pub version: u32,
    pub sent: Vec<SentEntry>,
}

/// One delivery.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentEntry {
    /// The key of the report's period (`super::content::period_key`).
    pub period: String,
    /// The delivered report's range, as its JSON's `from` and `until` (for people).
    pub from: String,
    pub until: String,
    /// `mail:<address>`, `slack:<fnv>`, `teams:<fnv>`.
    pub target: String,
    /// When it was delivered, RFC 3339 UTC.
    pub at: String,
}

/// What the record could not do.
#[derive(Debug, thiserror::Error)]
pub enum SentError {
    #[error("--sent-record {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error(
        "--sent-record {path}: not a tessera sent record ({reason}); move it away to deliver every report again"
    )]
    Parse { path: PathBuf, reason: String },
    #[error("--sent-record {path}: version {found}, expected {VERSION}")]
    Version { path: PathBuf, found: u32 },
    #[error(
        "--sent-record {path}: {reason} ({target} was delivered, but not recorded: a re-run delivers it again)"
    )]
    Write {
        path: PathBuf,
        target: String,
        reason: String,
    },
}

/// The FNV-1a 64 hash of `text`, as 16 hex digits: a webhook's key without its URL.
pub fn fnv1a64(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

impl SentRecord {
    /// The record in `path`; empty when the file does not exist.
    pub fn load(path: &Path) -> Result<SentRecord, SentError> {
        let text = match tessera_core::input_limits::read_to_string(path, MAX_BYTES) {
            Ok(t) => t,
            Err(tessera_core::input_limits::ReadError::Io(e))
                if e.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(SentRecord {
                    version: VERSION,
                    sent: Vec::new(),
                });
            }
            Err(e) => {
                return Err(SentError::Read {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                });
            }
        };
        let record: SentRecord = serde_json::from_str(&text).map_err(|e| SentError::Parse {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if record.version != VERSION {
            return Err(SentError::Version {
                path: path.to_path_buf(),
                found: record.version,
            });
        }
        Ok(record)
    }

    /// The delivery of the report of `period` to `target`, if one is recorded.
    pub fn find(&self, period: &str, target: &str) -> Option<&SentEntry> {
        self.sent
            .iter()
            .find(|e| e.period == period && e.target == target)
    }

    /// Records `entry` (the newest [`MAX_ENTRIES`] kept) and replaces the file atomically.
    pub fn add_and_save(&mut self, entry: SentEntry, path: &Path) -> Result<(), SentError> {
        let target = entry.target.clone();
        self.sent.push(entry);
        let extra = self.sent.len().saturating_sub(MAX_ENTRIES);
        self.sent.drain(..extra);
        let fail = |reason: String| SentError::Write {
            path: path.to_path_buf(),
            target: target.clone(),
            reason,
        };
        let json = serde_json::to_string_pretty(self).map_err(|e| fail(e.to_string()))? + "\n";
        tessera_core::files::replace(path, json.as_bytes()).map_err(|e| fail(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(period: &str, target: &str) -> SentEntry {
        SentEntry {
            period: period.into(),
            from: "2026-11-02T00:00:00Z".into(),
            until: "2026-11-09T00:00:00Z".into(),
            target: target.into(),
            at: "2026-11-09T06:00:00Z".into(),
        }
    }

    #[test]
    fn a_missing_record_is_empty_and_a_saved_one_is_found_by_period_and_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sent.json");
        let mut r = SentRecord::load(&path).unwrap();
        assert!(r.sent.is_empty());
        let week = "7d ending 2026-11-08 UTC";
        r.add_and_save(entry(week, "mail:a@example.com"), &path)
            .unwrap();
        let back = SentRecord::load(&path).unwrap();
        assert!(back.find(week, "mail:a@example.com").is_some());
        assert!(
            back.find("7d ending 2026-11-15 UTC", "mail:a@example.com")
                .is_none()
        );
        assert!(back.find(week, "mail:b@example.com").is_none());
    }

    #[test]
    fn only_the_newest_entries_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sent.json");
        let mut r = SentRecord::load(&path).unwrap();
        for i in 0..MAX_ENTRIES + 5 {
            r.sent.push(entry(&format!("u{i}"), "mail:a@example.com"));
        }
        r.add_and_save(entry("last", "mail:a@example.com"), &path)
            .unwrap();
        let back = SentRecord::load(&path).unwrap();
        assert_eq!(back.sent.len(), MAX_ENTRIES);
        assert_eq!(back.sent.last().unwrap().period, "last");
        assert_eq!(back.sent[0].period, "u6");
    }

    #[test]
    fn a_foreign_or_newer_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sent.json");
        std::fs::write(&path, "{\"hello\": 1}").unwrap();
        let e = SentRecord::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("sent.json") && e.contains("not a tessera sent record"),
            "{e}"
        );
        std::fs::write(&path, "{\"version\": 2, \"sent\": []}").unwrap();
        let e = SentRecord::load(&path).unwrap_err().to_string();
        assert!(e.contains("version 2, expected 1"), "{e}");
    }

    #[test]
    fn fnv_is_the_reference_hash() {
        // FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(""), "cbf29ce484222325");
        assert_eq!(fnv1a64("a"), "af63dc4c8601ec8c");
    }
}
