//! Replacing a file atomically: every file tessera rewrites (plans, predictions, findings, job
//! summaries, reports, schedules and units, the simulated node's state) goes through
//! [`replace`], so that a failure part way (a full disk, a size limit, a crash) leaves the
//! original untouched, never a truncated file.
//!
//! The new content is written to a temporary file in the same folder (so the rename stays on one
//! file system), flushed to disk, given the permissions of the file it replaces (or `0644` for a
//! new one), and renamed over the target; the folder is then synced so the rename survives a
//! crash. A symbolic link is followed: its target is replaced, the link stays. A target that is
//! not a regular file (a device such as `/dev/null`, a pipe) is written to, not replaced.
//!
//! What it does not do: lock against another writer (the last rename wins), or keep a backup.
//! The history writer has its own atomic steps (`history::files`).

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Why a file could not be replaced; the original is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum ReplaceError {
    #[error("writing {path}: {step}: {source} (the file was not changed)")]
    Io {
        path: PathBuf,
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Replaces `path` with `bytes` atomically (see the module doc).
pub fn replace(path: &Path, bytes: &[u8]) -> Result<(), ReplaceError> {
    let err = |step: &'static str| {
        let path = path.to_path_buf();
        move |source: std::io::Error| ReplaceError::Io { path, step, source }
    };
    // Follow a symbolic link: replace what it points to.
    let target = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).map_err(err("resolving the symbolic link"))?
        }
        _ => path.to_path_buf(),
    };
    // Not a regular file (a device such as /dev/null or /dev/stdout's target, a pipe, a
    // socket): nothing to replace, and renaming over it would remove the device. Write to it.
    if let Ok(m) = std::fs::metadata(&target)
        && !m.is_file()
    {
        if m.is_dir() {
            return Err(err("writing to it")(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "it is a folder",
            )));
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .map_err(err(
                "opening it (not a regular file: written to, not replaced)",
            ))?;
        f.write_all(bytes)
            .map_err(err("writing to it (not a regular file)"))?;
        return Ok(());
    }
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(&dir)
        .map_err(err("creating a temporary file beside it"))?;
    tmp.write_all(bytes)
        .map_err(err("writing the temporary file"))?;
    tmp.as_file()
        .sync_all()
        .map_err(err("flushing the temporary file"))?;
    let permissions = match std::fs::metadata(&target) {
        Ok(m) => Some(m.permissions()),
        Err(_) => new_file_permissions(),
    };
    if let Some(p) = permissions {
        tmp.as_file()
            .set_permissions(p)
            .map_err(err("setting the permissions"))?;
    }
    tmp.persist(&target)
        .map_err(|e| err("renaming the temporary file over it")(e.error))?;
    // The rename is durable once the folder is synced (not every platform can open a folder).
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(unix)]
fn new_file_permissions() -> Option<std::fs::Permissions> {
    use std::os::unix::fs::PermissionsExt as _;
    Some(std::fs::Permissions::from_mode(0o644))
}

#[cfg(not(unix))]
fn new_file_permissions() -> Option<std::fs::Permissions> {
    None
}

#[cfg(test)]
mod tests {
    #[cfg(unix)]
    #[test]
    fn a_pipe_is_written_to_never_replaced() {
        // A FIFO (as /dev/stdout on a pipe, or a device such as /dev/null: not regular files)
        // gets the bytes and stays what it is; a rename over it would have made it a file.
        use std::os::unix::fs::FileTypeExt as _;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(ok.success());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        super::replace(&fifo, b"through the pipe").unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        // A folder is an error, and stays.
        let e = super::replace(dir.path(), b"x").unwrap_err().to_string();
        assert!(e.contains("it is a folder"), "{e}");
    }

    use super::*;

    #[test]
    fn replaces_keeps_permissions_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plan.yaml");
        replace(&p, b"one\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(
                std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
                0o644
            );
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        replace(&p, b"two\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(
                std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["plan.yaml".to_string()]);
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_stays_and_its_target_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.yaml");
        let link = dir.path().join("link.yaml");
        std::fs::write(&real, "old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        replace(&link, b"new").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
    }

    #[test]
    fn a_missing_folder_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("no/such/plan.yaml");
        let e = replace(&p, b"x").unwrap_err().to_string();
        assert!(e.contains("plan.yaml") && e.contains("not changed"), "{e}");
    }
}
