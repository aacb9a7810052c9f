//! Bounded runs of the external programs tessera asks (Slurm's `sacct` for owners, `sacctmgr`
//! for the queue plan's QOS): one call's standard output, or why there is none, worded for a
//! user ("sacctmgr is not on PATH", "did not answer in 30 s", "failed (exit status: 1): the
//! last line of its stderr"). At most 1 MiB of each stream is read; a program that outlives
//! the timeout is killed.
//!
//! What it does not do: use a shell (arguments are passed as they are), retry, or decide what a
//! failure means (the callers do).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The most output read of one stream of one call (1 MiB).
const MAX_OUTPUT: u64 = 1 << 20;

/// Run `program ARGS` (searched on PATH when it has no `/`) with no stdin, for at most
/// `timeout`: its stdout when it exits 0.
pub fn run<S: AsRef<std::ffi::OsStr>>(
    program: &Path,
    args: &[S],
    timeout: Duration,
) -> Result<String, String> {
    let name = program.display();
    let mut child = Command::new(program)
        .args(args)
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
