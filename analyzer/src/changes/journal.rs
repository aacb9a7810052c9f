//! The node-local `tessera mig apply` journal (docs/mig-apply.md, "Journal") read beside a
//! history folder, as evidence of a change: each run that ended `applied` becomes a `journal`
//! event on its node at its `begin`.
//!
//! Where: `<history>/<node>/mig-apply.journal` (a journal copied into the node's folder), and on a
//! node's own layout `<history>/../mig-apply.journal` (`/var/lib/tessera/history` and
//! `/var/lib/tessera/mig-apply.journal`) when the history folder holds exactly one node.
//! [`beside`] reads the files (the only I/O of this module); [`runs`] and [`events`] are pure.
//! A journal that does not parse is a warning, not an error: the rows still say what changed.

use std::path::{Path, PathBuf};

use tessera_core::mig::apply::journal::{self, Record};

use super::detect::{Event, EventKind};

/// The journal's file name, on a node and in a node's history folder.
pub const FILE_NAME: &str = "mig-apply.journal";
/// What marks a node folder of a history (its manifest).
const MANIFEST: &str = "tessera-history.json";

/// One `tessera mig apply` run of a journal.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalRun {
    pub node: String,
    /// The journal it came from.
    pub path: String,
    /// `begin`, unix ms.
    pub begin_ms: i64,
    /// The plan file and config label.
    pub plan: Option<String>,
    /// The `end` result (`applied`, `rolled-back`, …); `None` for a run without an end.
    pub result: Option<String>,
    /// Device calls that succeeded.
    pub steps_ok: usize,
}

/// The runs of one journal's records, in order.
pub fn runs(node: &str, path: &str, records: &[Record]) -> Vec<JournalRun> {
    let mut out: Vec<(String, JournalRun)> = Vec::new();
    for r in records {
        let Ok(t) = chrono::DateTime::parse_from_rfc3339(&r.time) else {
            continue;
        };
        match r.event.as_str() {
            "begin" => out.push((
                r.run.clone(),
                JournalRun {
                    node: node.to_string(),
                    path: path.to_string(),
                    begin_ms: t.timestamp_millis(),
                    plan: r.plan.clone(),
                    result: None,
                    steps_ok: 0,
                },
            )),
            "step" => {
                if let Some((_, run)) = out.iter_mut().rev().find(|(id, _)| *id == r.run)
                    && r.result.as_deref() == Some("ok")
                {
                    run.steps_ok += 1;
                }
            }
            "end" => {
                if let Some((_, run)) = out.iter_mut().rev().find(|(id, _)| *id == r.run) {
                    run.result = r.result.clone();
                }
            }
            _ => {}
        }
    }
    out.into_iter().map(|(_, r)| r).collect()
}

/// The `journal` events of the runs that ended `applied` and began in `(since, until]`.
pub fn events(runs: &[JournalRun], (since, until): (i64, i64)) -> Vec<Event> {
    runs.iter()
        .filter(|r| r.result.as_deref() == Some("applied"))
        .filter(|r| r.begin_ms > since && r.begin_ms <= until)
        .map(|r| Event {
            at: r.begin_ms,
            subject: r.node.clone(),
            kind: EventKind::Journal {
                plan: r.plan.clone(),
                steps: r.steps_ok,
            },
        })
        .collect()
}

/// The journals beside the history folder `dir` (a `history:` source's path) and their runs,
/// with a warning for each journal that could not be read.
pub fn beside(dir: &Path) -> (Vec<JournalRun>, Vec<String>) {
    let mut nodes: Vec<PathBuf> = Vec::new();
    if dir.join(MANIFEST).is_file() {
        nodes.push(dir.to_path_buf());
    } else if let Ok(entries) = std::fs::read_dir(dir) {
        nodes.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.join(MANIFEST).is_file()),
        );
    }
    nodes.sort();
    let name = |p: &Path| {
        p.file_name()
            .map_or("?".into(), |n| n.to_string_lossy().into_owned())
    };
    let mut files: Vec<(String, PathBuf)> =
        nodes.iter().map(|n| (name(n), n.join(FILE_NAME))).collect();
    if let ([node], false, Some(parent)) =
        (nodes.as_slice(), dir.join(MANIFEST).is_file(), dir.parent())
    {
        files.push((name(node), parent.join(FILE_NAME)));
    }
    let (mut out, mut warnings) = (Vec::new(), Vec::new());
    for (node, path) in files {
        if !path.is_file() {
            continue;
        }
        match journal::Journal::new(&path).read_bounded(journal::MAX_READ_BYTES) {
            Ok(read) => {
                if read.skipped_bytes > 0 {
                    warnings.push(format!(
                        "{}: only its last {} MiB were read ({} bytes of older records skipped): runs before them are not used as evidence of changes",
                        path.display(),
                        journal::MAX_READ_BYTES >> 20,
                        read.skipped_bytes
                    ));
                }
                out.extend(runs(&node, &path.display().to_string(), &read.records));
            }
            Err(e) => warnings.push(format!("{e}: its runs are not used as evidence of changes")),
        }
    }
    (out, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(time: &str, run: &str, event: &str, result: Option<&str>) -> Record {
        let mut r = journal::Journal::record(run, event);
        r.time = time.into();
        r.result = result.map(str::to_string);
        r
    }

    #[test]
    fn only_applied_runs_in_the_range_are_events() {
        let records = [
            rec("2026-11-04T12:59:30Z", "a", "begin", None),
            rec("2026-11-04T12:59:40Z", "a", "step", Some("ok")),
            rec("2026-11-04T12:59:50Z", "a", "step", Some("ok")),
            rec("2026-11-04T13:00:20Z", "a", "end", Some("applied")),
            rec("2026-11-05T10:00:00Z", "b", "begin", None),
            rec("2026-11-05T10:00:10Z", "b", "end", Some("rolled-back")),
            rec("2026-11-05T11:00:00Z", "c", "begin", None),
        ];
        let r = runs("n", "j", &records);
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].steps_ok, r[2].result.as_deref()), (2, None));
        let at = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .unwrap()
                .timestamp_millis()
        };
        let range = (at("2026-11-02T00:00:00Z"), at("2026-11-06T00:00:00Z"));
        let e = events(&r, range);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].at, at("2026-11-04T12:59:30Z"));
        // Outside the range: none.
        assert!(events(&r, (range.0, at("2026-11-04T00:00:00Z"))).is_empty());
    }
}
