//! Replacing a file atomically: every file tessera rewrites (plans, predictions, findings, job
//! summaries, reports, schedules and units, the simulated node's state) goes through
//! [`replace`], so that a failure part way (a full disk, a size limit, a crash) leaves the
//! original untouched, never a truncated file.
//!
//! The new content is written to a temporary file in the same folder (so the rename stays on one
//! file system), flushed to disk, given the permissions of the file it replaces (or `0644` for a
//! new one), and renamed over the target; the folder is then synced so the rename survives a
//! crash. A symbolic link is followed: its target is replaced, the link stays.
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
