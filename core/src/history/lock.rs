//! The history lock: an advisory `flock` on `<node>/tessera-history.lock`, taken by
//! [`super::HistoryWriter::open`], so that two writers (two exporters, or an exporter and
//! `tessera simulate`) never write one node folder at once. The kernel releases it when the holder
//! exits, also when it is killed, so a crash never leaves a stale lock; the file stays and holds
//! the last holder's pid, for the error message only.
//!
//! `flock` locks belong to an open file, so a second writer in the same process is refused too.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::files::{HistoryError, io};

/// The lock file's name in a node folder.
pub const LOCK_FILE: &str = "tessera-history.lock";

/// A held history lock; released when dropped (or when the process ends, however it ends).
#[derive(Debug)]
pub struct HistoryLock {
    _file: File,
    path: PathBuf,
}

impl HistoryLock {
    /// Take the lock of node folder `dir` (which must exist), or fail at once with
    /// [`HistoryError::Locked`] naming the folder and the holder's pid.
    pub fn acquire(dir: &Path) -> Result<HistoryLock, HistoryError> {
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(HistoryError::Locked {
                    dir: dir.to_path_buf(),
                    holder: holder(&file),
                    lock: path,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        // The pid is written over the previous one and only then cut to length, so a reader
        // never sees an empty file once any holder wrote one. It is informational: a failure to
        // write it (a full disk) does not give up the lock.
        let text = format!("pid {}\n", std::process::id());
        if let Err(e) = file
            .write_all_at(text.as_bytes(), 0)
            .and_then(|()| file.set_len(text.len() as u64))
        {
            log::debug!("history: cannot record the pid in {}: {e}", path.display());
        }
        Ok(HistoryLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The holder's pid as its lock file says (`None` when it has not written it yet, or could not).
fn holder(file: &File) -> Option<u32> {
    // A holder that has just taken the lock writes its pid right after: look a few times.
    for attempt in 0..5 {
        let mut buf = [0u8; 64];
        let n = file.read_at(&mut buf, 0).unwrap_or(0);
        let text = String::from_utf8_lossy(&buf[..n]);
        let pid = text
            .lines()
            .next()
            .and_then(|l| l.trim().strip_prefix("pid "))
            .and_then(|p| p.trim().parse().ok());
        if pid.is_some() {
            return pid;
        }
        if attempt < 4 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_is_refused_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let held = HistoryLock::acquire(dir.path()).unwrap();
        let e = HistoryLock::acquire(dir.path()).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(&e, HistoryError::Locked { holder: Some(p), .. } if *p == std::process::id()),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        drop(held);
        HistoryLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn a_longer_old_pid_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), "pid 4294967295\nmore\n").unwrap();
        let held = HistoryLock::acquire(dir.path()).unwrap();
        let text = std::fs::read_to_string(held.path()).unwrap();
        assert_eq!(text, format!("pid {}\n", std::process::id()));
    }
}
