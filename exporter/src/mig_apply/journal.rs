//! The apply journal: JSON Lines, one record per event, appended and flushed to disk (`fsync`)
//! before the next device call, so that a run killed at any point leaves a journal that says
//! what it did.
//!
//! Records of one run share a `run` id: `begin` (with the checkpoint: the node's MIG state before
//! any change), one `step` per device call (`target`, `action`, `result`), `rollback` and
//! `recover` markers, and `end` (`applied`, `rolled-back`, `recovered`, `failed`). A run with a
//! `begin` and no `end` was interrupted: [`Journal::interrupted`] returns its checkpoint so the
//! next run can restore it. A torn last line (a crash while writing) is ignored.
//!
//! The journal is never truncated by tessera; rotate it with logrotate if it grows.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ApplyError;
use crate::mig_control::MigNodeState;

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// RFC 3339 UTC.
    pub time: String,
    pub run: String,
    /// `begin`, `step`, `rollback`, `recover` or `end`.
    pub event: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// What the step acts on (`GPU 0 (GPU-…)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// `ok`, `pending-reset`, `skipped: …`, `error: …`, or the end result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The plan file and config label (on `begin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// The node's state before any change (on `begin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<MigNodeState>,
}

/// An interrupted run found in the journal.
#[derive(Debug, Clone, PartialEq)]
pub struct Interrupted {
    pub run: String,
    pub started: String,
    pub plan: Option<String>,
    pub checkpoint: MigNodeState,
    /// Steps it recorded.
    pub steps: usize,
}

/// An append-only journal file.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
}

impl Journal {
    /// The journal at `path` (created, with its directory, on the first record).
    pub fn new(path: &Path) -> Journal {
        Journal {
            path: path.to_path_buf(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, message: String) -> ApplyError {
        ApplyError::Journal {
            path: self.path.clone(),
            message,
        }
    }

    /// Every readable record, oldest first (a torn last line is skipped; a bad line elsewhere
    /// is an error, since the journal cannot then be trusted).
    pub fn records(&self) -> Result<Vec<Record>, ApplyError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.err(e.to_string())),
        };
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut out = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str::<Record>(line) {
                Ok(r) => out.push(r),
                Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
                Err(e) => {
                    return Err(self.err(format!("line {}: not a journal record: {e}", i + 1)));
                }
            }
        }
        Ok(out)
    }

    /// The last run that began and never ended, if any.
    pub fn interrupted(&self) -> Result<Option<Interrupted>, ApplyError> {
        let records = self.records()?;
        let Some(begin) = records.iter().rev().find(|r| r.event == "begin") else {
            return Ok(None);
        };
        let same: Vec<&Record> = records.iter().filter(|r| r.run == begin.run).collect();
        if same.iter().any(|r| r.event == "end") {
            return Ok(None);
        }
        let checkpoint = begin
            .checkpoint
            .clone()
            .ok_or_else(|| self.err(format!("run {} began without a checkpoint", begin.run)))?;
        Ok(Some(Interrupted {
            run: begin.run.clone(),
            started: begin.time.clone(),
            plan: begin.plan.clone(),
            checkpoint,
            steps: same.iter().filter(|r| r.event == "step").count(),
        }))
    }

    /// Append one record and flush it to disk.
    pub fn append(&self, record: &Record) -> Result<(), ApplyError> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.err(e.to_string()))?;
        }
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.err(e.to_string()))?;
        let mut line = serde_json::to_string(record).map_err(|e| self.err(e.to_string()))?;
        line.push('\n');
        f.write_all(line.as_bytes())
            .map_err(|e| self.err(e.to_string()))?;
        f.sync_data().map_err(|e| self.err(e.to_string()))
    }

    /// A record of `event` for `run`, stamped now.
    pub fn record(run: &str, event: &str) -> Record {
        Record {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            run: run.to_string(),
            event: event.to_string(),
            step: None,
            target: None,
            action: None,
            result: None,
            plan: None,
            checkpoint: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_interrupted_run_and_skips_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&dir.path().join("j/apply.journal"));
        assert_eq!(j.interrupted().unwrap(), None);
        let state = MigNodeState {
            node: "n".into(),
            gpus: vec![],
        };
        let mut b = Journal::record("r1", "begin");
        b.checkpoint = Some(state.clone());
        j.append(&b).unwrap();
        j.append(&Journal::record("r1", "end")).unwrap();
        assert_eq!(j.interrupted().unwrap(), None);
        let mut b = Journal::record("r2", "begin");
        b.checkpoint = Some(state.clone());
        j.append(&b).unwrap();
        let mut s = Journal::record("r2", "step");
        s.step = Some(1);
        j.append(&s).unwrap();
        // A torn write at the end.
        let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
        f.write_all(b"{\"time\":\"2026").unwrap();
        let i = j.interrupted().unwrap().unwrap();
        assert_eq!((i.run.as_str(), i.steps), ("r2", 1));
        assert_eq!(i.checkpoint, state);
        // Garbage in the middle is an error.
        f.write_all(b"\n").unwrap();
        j.append(&Journal::record("r2", "end")).unwrap();
        assert!(j.interrupted().unwrap_err().to_string().contains("line 5"));
    }
}
