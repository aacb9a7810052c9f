//! The apply lock: an advisory `flock` on a file, so that two `tessera mig apply` never run at
//! once on a node. The kernel releases it when the holder exits, even when it is killed, so a
//! crashed apply never leaves a stale lock behind; the file itself stays and holds the last
//! holder's pid (for the message only).
//!
//! It does not protect against other tools (nvidia-mig-parted, nvidia-smi) changing MIG state.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::ApplyError;

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
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(ApplyError::LockHeld {
                    path: path.to_path_buf(),
                    holder: holder.trim().to_string(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(err(e)),
        }
        file.set_len(0).map_err(err)?;
        file.seek(SeekFrom::Start(0)).map_err(err)?;
        writeln!(file, "pid {}", std::process::id()).map_err(err)?;
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
}
