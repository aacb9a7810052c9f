//! The owners of Slurm jobs from Slurm's accounting: `sacct --allusers -X -n -P -o
//! JobIDRaw,User,Account -j ID,…` run once per [`CHUNK`] jobs, each job's user and account
//! becoming the contact of its team (`slurm job N`: "alice (account physics)").
//!
//! Never an error: `sacct` not on PATH, a `sacct` that fails (no slurmdbd: "accounting storage
//! is disabled", no configuration) or that does not answer within the timeout leaves the jobs'
//! owners unknown and says so in one note ([`SlurmOwners::note`]); a job `sacct` does not list
//! is unknown. Lines are parsed leniently: a line without three `|`-separated fields, or with
//! neither a user nor an account, names no one; job steps (`81234.batch`) and array tasks are
//! matched by their raw job id.
//!
//! What it does not do: read the jobs' environment (the history keeps only the job id, not
//! `SLURM_JOB_USER` or `SLURM_JOB_ACCOUNT`), or guess a mail address from a user name.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Job ids per `sacct` call (its command line stays short).
pub const CHUNK: usize = 200;
/// The most jobs asked about in one run.
pub const MAX_JOBS: usize = 5_000;
/// How long one `sacct` call may take.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Job id → contact, and the one note when `sacct` could not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmOwners {
    pub by_job: BTreeMap<String, String>,
    pub note: Option<String>,
}

/// The contact of one job: user and account as `sacct` gives them.
pub fn contact(user: &str, account: &str) -> Option<String> {
    match (user.trim(), account.trim()) {
        ("", "") => None,
        (u, "") => Some(u.to_string()),
        ("", a) => Some(format!("account {a}")),
        (u, a) => Some(format!("{u} (account {a})")),
    }
}

/// `sacct -P` lines (`JobIDRaw|User|Account`) as `(job, user, account)`, trimmed; the first
/// line naming a job (its allocation, before its steps) wins.
fn rows(out: &str) -> BTreeMap<String, (String, String)> {
    let mut m = BTreeMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.trim().split('|').collect();
        if f.len() < 3 {
            continue;
        }
        let job = f[0].trim().split(['.', '+']).next().unwrap_or_default();
        if job.is_empty() || !job.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        m.entry(job.to_string())
            .or_insert((f[1].trim().to_string(), f[2].trim().to_string()));
    }
    m
}

/// `sacct -P` lines (`JobIDRaw|User|Account`) into job → contact.
pub fn parse(out: &str) -> BTreeMap<String, String> {
    rows(out)
        .into_iter()
        .filter_map(|(job, (u, a))| Some((job, contact(&u, &a)?)))
        .collect()
}

/// `(user, account)` of each of `jobs` that `program` lists, and why it could not say (then
/// what it said of the earlier chunks is kept).
fn query(
    program: &Path,
    jobs: &[String],
    timeout: Duration,
) -> (BTreeMap<String, (String, String)>, Option<String>) {
    let ids: Vec<&String> = jobs
        .iter()
        .filter(|j| !j.is_empty() && j.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .take(MAX_JOBS)
        .collect();
    let mut out = BTreeMap::new();
    for chunk in ids.chunks(CHUNK) {
        let list = chunk
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",");
        match run(program, &list, timeout) {
            Ok(text) => out.extend(
                rows(&text)
                    .into_iter()
                    .filter(|(job, _)| chunk.contains(&job)),
            ),
            Err(reason) => return (out, Some(reason)),
        }
    }
    (out, None)
}

/// The owners of `jobs` from `program` (`sacct`, searched on PATH); see the module doc.
pub fn owners(program: &Path, jobs: &[String], timeout: Duration) -> SlurmOwners {
    let (found, why) = query(program, jobs, timeout);
    SlurmOwners {
        by_job: found
            .into_iter()
            .filter_map(|(job, (u, a))| Some((job, contact(&u, &a)?)))
            .collect(),
        note: why.map(|reason| {
            format!(
                "owners: {reason}: the Slurm jobs' users and accounts are unknown (name \
                 them in --owners as \"slurm job N\")"
            )
        }),
    }
}

/// The Slurm account of each of `jobs` that `program` names one for, and the note when it could
/// not say (the queue plan's teams of Slurm-held GPUs: docs/queues.md, "Slurm").
pub fn accounts(
    program: &Path,
    jobs: &[String],
    timeout: Duration,
) -> (BTreeMap<String, String>, Option<String>) {
    let (found, why) = query(program, jobs, timeout);
    let m = found
        .into_iter()
        .filter(|(_, (_, a))| !a.is_empty())
        .map(|(job, (_, a))| (job, a))
        .collect();
    let note = why.map(|reason| {
        format!("accounts: {reason}: the Slurm jobs' accounts are unknown (their GPUs count for no team)")
    });
    (m, note)
}

/// One `sacct` call: its standard output, or why there is none.
fn run(program: &Path, jobs: &str, timeout: Duration) -> Result<String, String> {
    let args = [
        "--allusers",
        "-X",
        "-n",
        "-P",
        "-o",
        "JobIDRaw,User,Account",
        "-j",
        jobs,
    ];
    crate::process::run(program, &args, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_parsed_leniently() {
        let out = "81234|alice|physics\n81234.batch|alice|physics\n\
                   900|bob|\n901||chem\n902||\nbroken line\n903|carol|ml|extra\n\
                   ../x|eve|evil\n";
        let m = parse(out);
        assert_eq!(m["81234"], "alice (account physics)");
        assert_eq!(m["900"], "bob");
        assert_eq!(m["901"], "account chem");
        assert!(!m.contains_key("902"), "neither user nor account");
        assert_eq!(m["903"], "carol (account ml)");
        assert_eq!(m.len(), 4, "{m:?}");
    }

    #[test]
    fn an_absent_program_is_one_note() {
        let o = owners(
            Path::new("/nonexistent/sacct"),
            &["1".into(), "2".into()],
            TIMEOUT,
        );
        assert!(o.by_job.is_empty());
        let note = o.note.expect("a note");
        assert!(note.contains("is not on PATH"), "{note}");
    }
}
