//! The apply journal: JSON Lines, one record per event, appended and flushed to disk (`fsync`)
//! before the next device call, so that a run killed at any point leaves a journal that says
//! what it did.
//!
//! Records of one run share a `run` id ([`new_run_id`]): `begin` (with the checkpoint: the node's
//! MIG state before any change), one `step` per device call (`target`, `action`, `result`),
//! `rollback` and `recover` markers, and `end` (`applied`, `rolled-back`, `recovered`, `failed`).
//! A run with a `begin` and no `end` was interrupted: [`Journal::interrupted`] returns its
//! checkpoint so the next run can restore it. A run that stopped before it changed anything
//! (refused, or failed to read its plan or its node) is one `refused` record
//! ([`Journal::refused`]: `plan` as far as it was read, `result` the reason), so a scheduled apply
//! that never applies leaves a trace beside the ones that did.
//!
//! A torn last line (a run killed while writing a record) is ignored when reading, and cut off
//! before anything is appended ([`Journal::repair_tail`], run by the applier once it holds the
//! lock, and by [`Journal::append`] itself): a whole record that only lacks its line end gets it;
//! anything else is moved to `<journal>.torn` (one fragment per line, flushed before the journal
//! is cut). An append that fails half-way is cut back too. So a new record always starts on a
//! line of its own. A line that holds a torn record followed by a whole one (what tessera before
//! this fix wrote after a torn line) is read as the whole one.
//!
//! [`parse`] is the reader: bytes in, records out, or an error naming the file, the line and the
//! column. It never panics, and holds at most the records themselves (no per-line index).
//!
//! Apart from a torn tail, the journal is never truncated by tessera; rotate it with logrotate
//! if it grows.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{ApplyError, ApplyLock};
use crate::mig::control::MigNodeState;

/// A new run id: the start time (UTC, to the millisecond) and the process id.
pub fn new_run_id() -> String {
    format!(
        "{}-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ"),
        std::process::id()
    )
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// RFC 3339 UTC.
    pub time: String,
    pub run: String,
    /// `begin`, `step`, `rollback`, `rollback-step`, `recover`, `recover-step`, `end` or
    /// `refused`.
    pub event: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// What the step acts on (`GPU 0 (GPU-…)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// `ok`, `pending-reset`, `skipped: …`, `error: …`, the end result, or why a run was
    /// refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The plan file and config label (on `begin`; on `refused`, as far as it was read).
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

/// What [`Journal::repair_tail`] did with a torn last line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub journal: PathBuf,
    /// Where the torn line started, in bytes.
    pub offset: u64,
    pub bytes: u64,
    /// Where it was moved; None when it was a whole record that only lacked its line end.
    pub moved_to: Option<PathBuf>,
}

impl std::fmt::Display for TornTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.moved_to {
            Some(aside) => write!(
                f,
                "the journal {} ended in a torn record ({} bytes at byte {}: a run was killed while writing it); moved it to {} and cut it off",
                self.journal.display(),
                self.bytes,
                self.offset,
                aside.display()
            ),
            None => write!(
                f,
                "the journal {}'s last record (at byte {}) lacked its line end (a run was killed while writing it); completed it",
                self.journal.display(),
                self.offset
            ),
        }
    }
}

/// The offset just after the last line end of a file of `len` bytes (0 without one), reading
/// backwards in blocks.
fn last_line_start(file: &File, len: u64) -> std::io::Result<u64> {
    const BLOCK: u64 = 64 * 1024;
    let mut end = len;
    let mut buf = vec![0u8; BLOCK.min(len) as usize];
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// The start of every record serialised by tessera (`time` is its first field).
const RECORD_START: &[u8] = b"{\"time\":";

/// Read a journal's bytes (`source` names it in errors). Blank lines are skipped; a last line
/// without a line end that is not a record is a torn write and skipped; a line holding a torn
/// record followed by a whole one is read as the whole one. Any other line that is not a record
/// is an error naming `source`, the line and the column: the journal cannot then be trusted.
pub fn parse(source: &Path, bytes: &[u8]) -> Result<Vec<Record>, ApplyError> {
    let mut out = Vec::new();
    let mut lines = bytes.split(|&b| b == b'\n').enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let e = match serde_json::from_slice::<Record>(line) {
            Ok(r) => {
                out.push(r);
                continue;
            }
            Err(e) => e,
        };
        if let Some(r) = glued(line) {
            out.push(r);
            continue;
        }
        // The piece after the last line end: unterminated, so a torn write.
        if lines.peek().is_none() {
            break;
        }
        let message = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        return Err(ApplyError::Journal {
            path: source.to_path_buf(),
            message: format!(
                "line {}, column {}: not a journal record: {}",
                i + 1,
                e.column(),
                message.strip_suffix(&suffix).unwrap_or(&message)
            ),
        });
    }
    Ok(out)
}

/// Torn records with a whole one appended on the same line: the whole one. It is the line's
/// last `{"time":` (a serialised record holds that only at its start: its strings escape `"`),
/// so one parse of the line's end decides.
fn glued(line: &[u8]) -> Option<Record> {
    let at = line
        .windows(RECORD_START.len())
        .rposition(|w| w == RECORD_START)
        .filter(|&at| at > 0)?;
    serde_json::from_slice::<Record>(&line[at..]).ok()
}

/// The most of a journal that is read ([`Journal::records`]): its last 64 MiB, about 200,000
/// records. Older records are skipped (and said to be), never a reason to fail or to read a
/// file of any size whole.
pub const MAX_READ_BYTES: u64 = 64 << 20;

/// What [`Journal::read_bounded`] read.
#[derive(Debug)]
pub struct JournalRead {
    pub records: Vec<Record>,
    /// Bytes of older records at the start of the file that were not read (0: all read).
    pub skipped_bytes: u64,
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

    /// Every readable record of the journal's last [`MAX_READ_BYTES`], oldest first (see
    /// [`parse`] and [`Journal::read_bounded`]).
    pub fn records(&self) -> Result<Vec<Record>, ApplyError> {
        Ok(self.read_bounded(MAX_READ_BYTES)?.records)
    }

    /// The records of the journal's last `max_bytes` (from the first line that starts in them):
    /// a journal grown past the bound is read from its end, never whole, and says how many bytes
    /// of older records it skipped. Absent: no records.
    pub fn read_bounded(&self, max_bytes: u64) -> Result<JournalRead, ApplyError> {
        let io = |e: std::io::Error| self.err(e.to_string());
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(JournalRead {
                    records: Vec::new(),
                    skipped_bytes: 0,
                });
            }
            Err(e) => return Err(io(e)),
        };
        let len = file.metadata().map_err(io)?.len();
        let from = len.saturating_sub(max_bytes);
        let window = usize::try_from(len - from).map_err(|e| self.err(e.to_string()))?;
        let mut bytes = vec![0u8; window];
        file.read_exact_at(&mut bytes, from).map_err(io)?;
        // Mid-file, the first piece is the end of an older record: start at the next line.
        let skip = if from == 0 || {
            let mut prev = [0u8; 1];
            file.read_exact_at(&mut prev, from - 1).map_err(io)?;
            prev[0] == b'\n'
        } {
            0
        } else {
            bytes
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |i| i + 1)
        };
        Ok(JournalRead {
            records: parse(&self.path, &bytes[skip..])?,
            skipped_bytes: from + skip as u64,
        })
    }

    /// The `<journal>.torn` file torn tails are moved to.
    pub fn torn_path(&self) -> PathBuf {
        let mut s = self.path.as_os_str().to_owned();
        s.push(".torn");
        PathBuf::from(s)
    }

    /// Cut a torn last line off the journal so that the next record starts a line of its own:
    /// a whole record lacking only its line end is completed; anything else is appended to
    /// [`Journal::torn_path`] (and flushed) before the journal is cut back to its last line end.
    /// Call it holding the apply lock. None when the journal is absent or ends with a line end.
    pub fn repair_tail(&self) -> Result<Option<TornTail>, ApplyError> {
        let file = match OpenOptions::new().read(true).append(true).open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.err(e.to_string())),
        };
        self.repair_open(&file)
    }

    fn repair_open(&self, file: &File) -> Result<Option<TornTail>, ApplyError> {
        let io = |e: std::io::Error| self.err(e.to_string());
        let len = file.metadata().map_err(io)?.len();
        let start = last_line_start(file, len).map_err(io)?;
        if start == len {
            return Ok(None);
        }
        let tail_len = usize::try_from(len - start).map_err(|e| self.err(e.to_string()))?;
        let mut tail = vec![0u8; tail_len];
        file.read_exact_at(&mut tail, start).map_err(io)?;
        if serde_json::from_slice::<Record>(&tail).is_ok() {
            (&*file).write_all(b"\n").map_err(io)?;
            file.sync_data().map_err(io)?;
            return Ok(Some(TornTail {
                journal: self.path.clone(),
                offset: start,
                bytes: len - start,
                moved_to: None,
            }));
        }
        let aside = self.torn_path();
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&aside)
            .map_err(|e| self.err(format!("{}: {e}", aside.display())))?;
        tail.push(b'\n');
        f.write_all(&tail)
            .and_then(|()| f.sync_data())
            .map_err(|e| self.err(format!("{}: {e}", aside.display())))?;
        file.set_len(start).map_err(io)?;
        file.sync_data().map_err(io)?;
        Ok(Some(TornTail {
            journal: self.path.clone(),
            offset: start,
            bytes: len - start,
            moved_to: Some(aside),
        }))
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

    /// Append one record and flush it to disk. A torn tail is cut off first
    /// ([`Journal::repair_tail`]); a write that fails half-way is cut back.
    pub fn append(&self, record: &Record) -> Result<(), ApplyError> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.err(e.to_string()))?;
        }
        let mut f = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.err(e.to_string()))?;
        let mut line = serde_json::to_string(record).map_err(|e| self.err(e.to_string()))?;
        line.push('\n');
        let mut last = [0u8; 1];
        let len = f.metadata().map_err(|e| self.err(e.to_string()))?.len();
        if len > 0 {
            f.read_exact_at(&mut last, len - 1)
                .map_err(|e| self.err(e.to_string()))?;
            if last[0] != b'\n' {
                self.repair_open(&f)?;
            }
        }
        let len = f.metadata().map_err(|e| self.err(e.to_string()))?.len();
        if let Err(e) = f.write_all(line.as_bytes()).and_then(|()| f.sync_data()) {
            // Never leave half a record for the next one to be glued to.
            let _ = f.set_len(len).and_then(|()| f.sync_data());
            return Err(self.err(e.to_string()));
        }
        Ok(())
    }

    /// Record that run `run` stopped before it changed anything: one `refused` record with
    /// `plan` (what it was asked to apply, as far as it was read) and `reason`.
    ///
    /// A refused run may not hold the apply lock, and one refused *because* another apply holds
    /// it must not repair the journal under that holder. So the lock at `lock` is tried first:
    /// held by this call, the record goes through [`Journal::append`] (torn tail cut off first);
    /// held by another process, it is appended as one `write` of a whole line without touching
    /// what is there (the holder's records are whole lines written the same way, and its next
    /// append repairs the tail).
    pub fn refused(
        &self,
        lock: &Path,
        run: &str,
        plan: Option<&str>,
        reason: &str,
    ) -> Result<(), ApplyError> {
        let mut r = Journal::record(run, "refused");
        r.plan = plan.map(str::to_string);
        r.result = Some(reason.to_string());
        match ApplyLock::acquire(lock) {
            Ok(_held) => self.append(&r),
            Err(ApplyError::LockHeld { .. }) => self.append_beside_holder(&r),
            // No lock can be taken there (e.g. its folder is not writable): nobody else holds
            // it either.
            Err(_) => self.append(&r),
        }
    }

    /// Append `record` as one write of a whole line, without reading or repairing the journal
    /// (another process holds the apply lock and may be appending).
    fn append_beside_holder(&self, record: &Record) -> Result<(), ApplyError> {
        let mut line = serde_json::to_string(record).map_err(|e| self.err(e.to_string()))?;
        line.push('\n');
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.err(e.to_string()))?;
        let n = f
            .write(line.as_bytes())
            .map_err(|e| self.err(e.to_string()))?;
        if n != line.len() {
            // The holder's next append cuts the torn line off (`repair_tail`).
            return Err(self.err(format!(
                "wrote {n} of the {} bytes of a record (disk full?)",
                line.len()
            )));
        }
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

    fn begin(run: &str) -> Record {
        let mut b = Journal::record(run, "begin");
        b.checkpoint = Some(MigNodeState {
            node: "n".into(),
            gpus: vec![],
        });
        b
    }

    /// Every line is a whole record, strictly (no torn or glued line left).
    fn strict_lines(path: &Path) -> Vec<Record> {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.is_empty() || text.ends_with('\n'), "{text}");
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Issue 17 item 1: before, the next record was appended to the torn line, and every later
    /// read failed with "line N: not a journal record".
    #[test]
    fn append_after_a_torn_line_moves_the_torn_bytes_aside() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&dir.path().join("apply.journal"));
        j.append(&begin("r1")).unwrap();
        let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
        f.write_all(b"{\"time\":\"2026-11-23T09:00").unwrap();
        assert_eq!(j.records().unwrap().len(), 1);
        j.append(&Journal::record("r1", "recover")).unwrap();
        j.append(&Journal::record("r1", "end")).unwrap();
        let events: Vec<String> = j.records().unwrap().into_iter().map(|r| r.event).collect();
        assert_eq!(events, ["begin", "recover", "end"]);
        assert_eq!(strict_lines(j.path()).len(), 3);
        assert_eq!(
            std::fs::read_to_string(j.torn_path()).unwrap(),
            "{\"time\":\"2026-11-23T09:00\n"
        );
        assert_eq!(j.interrupted().unwrap(), None);
    }

    #[test]
    fn repair_tail_reports_what_it_did() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&dir.path().join("apply.journal"));
        assert_eq!(j.repair_tail().unwrap(), None, "no journal yet");
        j.append(&begin("r1")).unwrap();
        assert_eq!(j.repair_tail().unwrap(), None, "ends with a line end");
        let len = std::fs::metadata(j.path()).unwrap().len();
        // A whole record without its line end is kept and completed.
        let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
        let whole = serde_json::to_string(&Journal::record("r1", "step")).unwrap();
        f.write_all(whole.as_bytes()).unwrap();
        let t = j.repair_tail().unwrap().unwrap();
        assert_eq!((t.offset, t.moved_to.clone()), (len, None));
        assert!(t.to_string().contains("completed it"), "{t}");
        assert_eq!(strict_lines(j.path()).len(), 2);
        assert!(!j.torn_path().exists());
        // A torn one is moved aside, each to a line of its own.
        for torn in ["{\"time\":\"20", "   ", "\u{0}\u{1}garbage"] {
            let len = std::fs::metadata(j.path()).unwrap().len();
            let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
            f.write_all(torn.as_bytes()).unwrap();
            let t = j.repair_tail().unwrap().unwrap();
            assert_eq!(t.offset, len);
            assert_eq!(t.bytes, torn.len() as u64);
            assert_eq!(t.moved_to.as_deref(), Some(j.torn_path().as_path()));
            let msg = t.to_string();
            assert!(
                msg.contains("torn record") && msg.contains(".torn"),
                "{msg}"
            );
            assert_eq!(std::fs::metadata(j.path()).unwrap().len(), len);
        }
        let aside = std::fs::read_to_string(j.torn_path()).unwrap();
        assert_eq!(aside, "{\"time\":\"20\n   \n\u{0}\u{1}garbage\n");
        // A journal that is one torn line becomes empty.
        let j = Journal::new(&dir.path().join("other.journal"));
        std::fs::write(j.path(), "{\"ti").unwrap();
        j.repair_tail().unwrap().unwrap();
        assert_eq!(std::fs::read(j.path()).unwrap(), b"");
        j.append(&begin("r2")).unwrap();
        assert_eq!(j.interrupted().unwrap().unwrap().run, "r2");
    }

    /// A journal written by tessera before the fix: a torn record with the next record glued to
    /// it on the same line. It is read as that record, so such a node is no longer stuck.
    #[test]
    fn a_torn_record_glued_to_a_whole_one_reads_as_the_whole_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apply.journal");
        let b = serde_json::to_string(&begin("r1")).unwrap();
        let s = serde_json::to_string(&Journal::record("r1", "recover")).unwrap();
        let e = serde_json::to_string(&Journal::record("r1", "end")).unwrap();
        let torn = &b[..b.len() / 2];
        std::fs::write(&path, format!("{b}\n{torn}{torn}{s}\n{e}\n")).unwrap();
        let j = Journal::new(&path);
        let events: Vec<String> = j.records().unwrap().into_iter().map(|r| r.event).collect();
        assert_eq!(events, ["begin", "recover", "end"]);
        assert_eq!(j.interrupted().unwrap(), None);
    }

    /// Issue 48 item 4: a run that stops before changing anything is one `refused` record.
    /// With the lock free the torn tail is cut off first; with the lock held by another apply
    /// nothing already there is touched (the record is appended whole, and read back).
    #[test]
    fn a_refused_run_is_one_record_whether_or_not_the_lock_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("apply.lock");
        let j = Journal::new(&dir.path().join("apply.journal"));
        j.append(&begin("r1")).unwrap();
        let mut f = OpenOptions::new().append(true).open(j.path()).unwrap();
        f.write_all(b"{\"time\":\"20").unwrap();
        j.refused(&lock, "r2", Some("plan.yaml config night"), "bad plan")
            .unwrap();
        assert!(j.torn_path().exists(), "the lock was free: tail repaired");
        let records = strict_lines(j.path());
        let r = records.last().unwrap();
        assert_eq!(
            (
                r.run.as_str(),
                r.event.as_str(),
                r.plan.as_deref(),
                r.result.as_deref()
            ),
            (
                "r2",
                "refused",
                Some("plan.yaml config night"),
                Some("bad plan")
            )
        );
        // A refusal is no run left open: r1 still is the interrupted one.
        assert_eq!(j.interrupted().unwrap().unwrap().run, "r1");

        // Another apply holds the lock and is mid-way through a record.
        let held = ApplyLock::acquire(&lock).unwrap();
        f.write_all(b"{\"time\":\"2026").unwrap();
        let before = std::fs::read(j.path()).unwrap();
        let aside = std::fs::read(j.torn_path()).unwrap();
        j.refused(
            &lock,
            "r3",
            None,
            "another tessera mig apply holds the lock",
        )
        .unwrap();
        let after = std::fs::read(j.path()).unwrap();
        assert_eq!(
            &after[..before.len()],
            &before[..],
            "nothing there is touched"
        );
        assert_eq!(std::fs::read(j.torn_path()).unwrap(), aside);
        let r = j.records().unwrap().pop().unwrap();
        assert_eq!((r.run.as_str(), r.event.as_str()), ("r3", "refused"));
        assert_eq!(r.plan, None);
        drop(held);
        // An unknown new run id has the time and the pid.
        assert!(new_run_id().ends_with(&format!("Z-{}", std::process::id())));
    }

    #[test]
    fn errors_name_the_file_line_and_column() {
        let p = Path::new("/var/lib/tessera/mig-apply.journal");
        let b = serde_json::to_string(&begin("r1")).unwrap();
        let e = parse(p, format!("{b}\n\n{{\"time\": 3}}\n{b}\n").as_bytes()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "journal /var/lib/tessera/mig-apply.journal: line 3, column 10: not a journal record: invalid type: integer `3`, expected a string"
        );
        let e = parse(p, b"\xff\xfe\n").unwrap_err().to_string();
        assert!(e.contains("mig-apply.journal: line 1, column 1: "), "{e}");
        // The same bytes unterminated at the end are a torn write.
        assert_eq!(parse(p, b"\xff\xfe").unwrap(), vec![]);
    }

    #[test]
    fn a_journal_past_the_bound_is_read_from_its_end_and_says_what_it_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&dir.path().join("journal.jsonl"));
        for i in 0..50 {
            j.append(&Journal::record(&format!("run-{i:02}"), "begin"))
                .unwrap();
        }
        let all = j.read_bounded(u64::MAX).unwrap();
        assert_eq!((all.records.len(), all.skipped_bytes), (50, 0));
        let line = std::fs::read_to_string(j.path())
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .len() as u64
            + 1;
        // A bound that cuts a record in two: that record is skipped, not misread.
        let some = j.read_bounded(10 * line + line / 2).unwrap();
        assert_eq!(some.records.len(), 10);
        assert_eq!(some.records[0].run, "run-40");
        assert_eq!(some.skipped_bytes, 40 * line);
        // A bound on a line boundary keeps that line.
        let exact = j.read_bounded(10 * line).unwrap();
        assert_eq!(exact.records.len(), 10);
        assert_eq!(exact.records[0].run, "run-40");
    }
}
