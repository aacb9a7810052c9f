//! The apply lock: an advisory `flock` on a file, so that two `tessera mig apply` never run at
//! once on a node. The kernel releases it when the holder exits, even when it is killed, so a
//! crashed apply never leaves a stale lock behind; the file itself stays and holds the last
//! holder's pid (for people and for the message).
//!
//! The holder's pid in the "lock held" message comes from the kernel's lock table
//! (`/proc/locks`, matched by the file's device and inode): it is right even while the holder has
//! taken the lock but not yet written its pid, when the file is still empty or names the
//! previous holder. Where `/proc/locks` does not name it (another pid namespace, no procfs), the
//! file's first line is read, waiting up to [`PID_WAIT`] for a holder that has not written it
//! yet; the holder writes its pid in one write over the old content (never truncating first), so
//! the file is empty only before its first holder wrote. If still empty: "pid unknown".
//!
//! It does not protect against other tools (nvidia-mig-parted, nvidia-smi) changing MIG state.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::ApplyError;

/// How long the reader waits for a new holder to write its pid into an empty lock file.
pub const PID_WAIT: Duration = Duration::from_millis(200);

/// A held apply lock; released on drop.
#[derive(Debug)]
pub struct ApplyLock {
    file: File,
    path: PathBuf,
}

impl ApplyLock {
    /// Take the lock at `path` (creating the file and its directory) or fail at once with
    /// [`ApplyError::LockHeld`] naming the holder's pid.
    pub fn acquire(path: &Path) -> Result<ApplyLock, ApplyError> {
        let err = |e: std::io::Error| ApplyError::Lock {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(ApplyError::LockHeld {
                    path: path.to_path_buf(),
                    holder: holder(&file),
                });
            }
            Err(TryLockError::Error(e)) => return Err(err(e)),
        }
        // One write over the old content, then cut what is left of a longer old pid: a reader
        // never sees an empty file (only, briefly, the new first line followed by old bytes).
        let line = format!("pid {}\n", std::process::id());
        file.write_all_at(line.as_bytes(), 0).map_err(err)?;
        file.set_len(line.len() as u64).map_err(err)?;
        Ok(ApplyLock {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ApplyLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Who holds the lock on `file`: `pid N` (from the kernel, else from the file), or
/// `pid unknown`.
fn holder(file: &File) -> String {
    match kernel_holder(file) {
        Some(pid) => format!("pid {pid}"),
        None => file_holder(file, PID_WAIT),
    }
}

/// The holder's pid from `/proc/locks`.
fn kernel_holder(file: &File) -> Option<u32> {
    let m = file.metadata().ok()?;
    let table = std::fs::read_to_string("/proc/locks").ok()?;
    flock_holder(&table, m.dev(), m.ino())
}

/// The file's `pid N` line, waiting up to `wait` for a holder that has not written it yet.
fn file_holder(file: &File, wait: Duration) -> String {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(line) = first_line(file) {
            return line;
        }
        if Instant::now() >= deadline {
            return "pid unknown".into();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The file's first line when it is a whole `pid N` line.
fn first_line(file: &File) -> Option<String> {
    let mut buf = [0u8; 64];
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return None,
        }
    }
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let (line, _) = text.split_once('\n')?;
    let pid = line.strip_prefix("pid ")?;
    pid.parse::<u32>().ok().map(|p| format!("pid {p}"))
}

/// The pid of the active `FLOCK ... WRITE` lock on the file `dev`/`ino` in a `/proc/locks`
/// table (`1: FLOCK  ADVISORY  WRITE 1234 fd:00:5496850 0 EOF`; device as hex major:minor,
/// inode in decimal; waiters, `1: -> FLOCK …`, are skipped). None when absent or when the pid is
/// not visible from this pid namespace (shown as 0 or -1).
fn flock_holder(table: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    table.lines().find_map(|line| {
        let mut f = line.split_whitespace().skip(1);
        let (kind, _, mode, pid, id) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        if kind != "FLOCK" || mode != "WRITE" {
            return None;
        }
        let mut id = id.split(':');
        let (ma, mi, i) = (id.next()?, id.next()?, id.next()?);
        let same = u32::from_str_radix(ma, 16).ok()? == major
            && u32::from_str_radix(mi, 16).ok()? == minor
            && i.parse::<u64>().ok()? == ino;
        let pid: i64 = pid.parse().ok()?;
        (same && pid > 0).then(|| u32::try_from(pid).ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_is_refused_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/apply.lock");
        let held = ApplyLock::acquire(&path).unwrap();
        let e = ApplyLock::acquire(&path).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ApplyError::LockHeld { .. }), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        drop(held);
        ApplyLock::acquire(&path).unwrap();
    }

    /// Issue 17 item 13: a holder between taking the flock and writing its pid (the file empty,
    /// or still naming the previous holder) must not give an empty or a wrong holder pid.
    #[test]
    fn the_holder_pid_is_right_while_the_holder_has_not_written_it_yet() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apply.lock");
        for content in ["", "pid 999999999\n"] {
            std::fs::write(&path, content).unwrap();
            // The holder has the flock but has not written its pid yet.
            let holder = File::open(&path).unwrap();
            holder.lock().unwrap();
            let e = ApplyLock::acquire(&path).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("(pid {})", std::process::id())),
                "{content:?}: {msg}"
            );
            drop(holder);
        }
    }

    #[test]
    fn the_holder_overwrites_a_longer_old_pid_in_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apply.lock");
        std::fs::write(&path, "pid 4000000000\nleftover\n").unwrap();
        let _held = ApplyLock::acquire(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("pid {}\n", std::process::id())
        );
    }

    /// The fallback without /proc/locks: an empty file is waited for, a partial line is not
    /// taken, and a holder that never writes is "pid unknown".
    #[test]
    fn the_file_fallback_waits_for_the_holder_to_write_its_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apply.lock");
        std::fs::write(&path, "").unwrap();
        let file = File::open(&path).unwrap();
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                std::fs::write(&path, "pid 4").unwrap();
                std::thread::sleep(Duration::from_millis(30));
                std::fs::write(&path, "pid 4242\n").unwrap();
            })
        };
        assert_eq!(file_holder(&file, Duration::from_secs(10)), "pid 4242");
        writer.join().unwrap();
        std::fs::write(&path, "").unwrap();
        assert_eq!(file_holder(&file, Duration::from_millis(20)), "pid unknown");
    }

    #[test]
    fn proc_locks_lines_are_matched_by_device_and_inode() {
        let dev = libc::makedev(0xfe, 0x01);
        let table = "\
1: POSIX  ADVISORY  WRITE 77 fe:01:1234 0 EOF
2: FLOCK  ADVISORY  READ 78 fe:01:1234 0 EOF
3: -> FLOCK  ADVISORY  WRITE 79 fe:01:1234 0 EOF
4: FLOCK  ADVISORY  WRITE 80 fe:02:1234 0 EOF
5: FLOCK  ADVISORY  WRITE 81 fe:01:12345 0 EOF
6: FLOCK  ADVISORY  WRITE 82 fe:01:1234 0 EOF
";
        assert_eq!(flock_holder(table, dev, 1234), Some(82));
        assert_eq!(flock_holder(table, dev, 12345), Some(81));
        assert_eq!(flock_holder(table, dev, 99), None);
        // A holder outside this pid namespace.
        assert_eq!(
            flock_holder("1: FLOCK  ADVISORY  WRITE 0 fe:01:7 0 EOF\n", dev, 7),
            None
        );
        assert_eq!(flock_holder("garbage\n\n1:\n", dev, 7), None);
    }
}
