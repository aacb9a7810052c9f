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
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Job ids per `sacct` call (its command line stays short).
pub const CHUNK: usize = 200;
/// The most jobs asked about in one run.
pub const MAX_JOBS: usize = 5_000;
/// The most output read of one call (1 MiB).
const MAX_OUTPUT: u64 = 1 << 20;
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

/// `sacct -P` lines (`JobIDRaw|User|Account`) into job → contact; the first line naming a job
/// (its allocation, before its steps) wins.
pub fn parse(out: &str) -> BTreeMap<String, String> {
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
        if let Some(c) = contact(f[1], f[2]) {
            m.entry(job.to_string()).or_insert(c);
        }
    }
    m
}

/// The owners of `jobs` from `program` (`sacct`, searched on PATH); see the module doc.
pub fn owners(program: &Path, jobs: &[String], timeout: Duration) -> SlurmOwners {
    let mut out = SlurmOwners::default();
    let ids: Vec<&String> = jobs
        .iter()
        .filter(|j| !j.is_empty() && j.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .take(MAX_JOBS)
        .collect();
    for chunk in ids.chunks(CHUNK) {
        let list = chunk
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",");
        match run(program, &list, timeout) {
            Ok(text) => {
                for (job, c) in parse(&text) {
                    if chunk.iter().any(|j| **j == job) {
                        out.by_job.insert(job, c);
                    }
                }
            }
            Err(reason) => {
                out.note = Some(format!(
                    "owners: {reason}: the Slurm jobs' users and accounts are unknown (name \
                     them in --owners as \"slurm job N\")"
                ));
                break;
            }
        }
    }
    out
}

/// One `sacct` call: its standard output, or why there is none.
fn run(program: &Path, jobs: &str, timeout: Duration) -> Result<String, String> {
    let name = program.display();
    let mut child = Command::new(program)
        .args([
            "--allusers",
            "-X",
            "-n",
            "-P",
            "-o",
            "JobIDRaw,User,Account",
        ])
        .arg("-j")
        .arg(jobs)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{name} is not on PATH"),
            _ => format!("cannot run {name}: {e}"),
        })?;
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(r) = r {
                let _ = r.take(MAX_OUTPUT).read_to_string(&mut s);
            }
            s
        })
    };
    let stdout = reader(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let stderr = reader(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{name} did not answer in {} s",
                    timeout.as_secs_f64()
                ));
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    };
    let text = stdout.join().unwrap_or_default();
    let err = stderr.join().unwrap_or_default();
    if !status.success() {
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message");
        let last: String = crate::output::escape::printable(last)
            .chars()
            .take(300)
            .collect();
        return Err(format!("{name} failed ({status}): {last}"));
    }
    Ok(text)
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
