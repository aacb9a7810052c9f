//! The weekly report kept on a schedule (`tessera report --archive DIR --keep N`): one run writes
//! its HTML page and its JSON into `DIR` as `tessera-report-<until>.html` and `.json` (`until` =
//! the end of the report's data, UTC, `YYYY-MM-DDTHHMMZ`, so names sort by time), each replaced
//! atomically, then removes the oldest reports beyond the newest `keep`. The CronJob
//! (`deploy/report/`) and the systemd timer (`deploy/systemd/`) run it; delivery (mail, chat) is
//! `crate::deliver`'s.
//!
//! What it does not do: touch any file of `DIR` that is not one of its own reports, or render
//! (the caller gives the texts).

use std::path::{Path, PathBuf};

/// What the archive was asked and could not do.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("--archive {dir}: {reason}")]
    Dir { dir: String, reason: String },
    #[error("--keep 0: keep at least the report just written")]
    KeepNone,
    #[error("the report's end {0:?} is not an RFC 3339 time")]
    Time(String),
}

/// What one run wrote and removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archived {
    pub html: PathBuf,
    pub json: PathBuf,
    /// The older reports removed (both files of each).
    pub removed: Vec<PathBuf>,
}

const PREFIX: &str = "tessera-report-";

/// The file stem of a report whose data ends at `until` (RFC 3339).
pub fn stem(until: &str) -> Result<String, ArchiveError> {
    let t = chrono::DateTime::parse_from_rfc3339(until)
        .map_err(|_| ArchiveError::Time(until.to_string()))?
        .with_timezone(&chrono::Utc);
    Ok(format!("{PREFIX}{}", t.format("%Y-%m-%dT%H%MZ")))
}

/// The stem of one of the archive's own files (`tessera-report-<time>.html|json`).
fn own_stem(name: &str) -> Option<&str> {
    let stem = name
        .strip_suffix(".html")
        .or_else(|| name.strip_suffix(".json"))?;
    let time = stem.strip_prefix(PREFIX)?;
    // YYYY-MM-DDTHHMMZ: 16 characters of digits, dashes, T and Z.
    (time.len() == 16
        && time
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '-' | 'T' | 'Z')))
    .then_some(stem)
}

/// Write `html` and `json` of the report ending at `until` into `dir` (created when missing) and
/// keep the newest `keep` reports.
pub fn write(
    dir: &Path,
    until: &str,
    html: &str,
    json: &str,
    keep: usize,
) -> Result<Archived, ArchiveError> {
    if keep == 0 {
        return Err(ArchiveError::KeepNone);
    }
    let err = |reason: String| ArchiveError::Dir {
        dir: dir.display().to_string(),
        reason,
    };
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    let stem = stem(until)?;
    let html_path = dir.join(format!("{stem}.html"));
    let json_path = dir.join(format!("{stem}.json"));
    tessera_core::files::replace(&json_path, json.as_bytes()).map_err(|e| err(e.to_string()))?;
    tessera_core::files::replace(&html_path, html.as_bytes()).map_err(|e| err(e.to_string()))?;
    let mut stems: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| err(e.to_string()))?
        .filter_map(Result::ok)
        .filter_map(|e| own_stem(&e.file_name().to_string_lossy()).map(str::to_string))
        .collect();
    stems.sort();
    stems.dedup();
    let mut removed = Vec::new();
    let old = stems.len().saturating_sub(keep);
    for s in &stems[..old] {
        for ext in ["html", "json"] {
            let p = dir.join(format!("{s}.{ext}"));
            if p.exists() {
                std::fs::remove_file(&p).map_err(|e| err(format!("{}: {e}", p.display())))?;
                removed.push(p);
            }
        }
    }
    Ok(Archived {
        html: html_path,
        json: json_path,
        removed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_named_by_their_end_and_only_the_newest_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.html"), "mine").unwrap();
        std::fs::write(dir.path().join("tessera-report-latest.html"), "mine too").unwrap();
        for (i, day) in ["01", "08", "15", "22"].iter().enumerate() {
            let until = format!("2026-11-{day}T00:00:00+01:00");
            let a = write(dir.path(), &until, "<html/>", "{}", 2).unwrap();
            assert_eq!(
                a.html.file_name().unwrap().to_string_lossy(),
                format!("tessera-report-2026-{}Z.html", {
                    let t = chrono::DateTime::parse_from_rfc3339(&until).unwrap();
                    t.with_timezone(&chrono::Utc).format("%m-%dT%H%M")
                })
            );
            assert_eq!(a.removed.len(), if i >= 2 { 2 } else { 0 }, "{a:?}");
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "notes.html",
                "tessera-report-2026-11-14T2300Z.html",
                "tessera-report-2026-11-14T2300Z.json",
                "tessera-report-2026-11-21T2300Z.html",
                "tessera-report-2026-11-21T2300Z.json",
                "tessera-report-latest.html",
            ],
            "the newest two kept, other files untouched"
        );
        assert!(matches!(
            write(dir.path(), "2026-11-29T00:00:00Z", "", "", 0),
            Err(ArchiveError::KeepNone)
        ));
        assert!(matches!(
            write(dir.path(), "last week", "", "", 1),
            Err(ArchiveError::Time(_))
        ));
    }
}
