//! `TESSERA_TIMINGS`: when the variable is set (to anything), the analyzer's long steps print how
//! long they took to stderr, one line each, `timings: <what>: <step> <duration>`. One switch and
//! one format for every module that times itself (ingest readers, resampling, the advisor's
//! detectors, the report pass).
//!
//! It measures wall time with [`std::time::Instant`] and prints; it changes no output on stdout
//! and no result.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The environment variable that switches the timings on.
pub const ENV: &str = "TESSERA_TIMINGS";

/// Whether timings are printed (read once per process).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(ENV).is_some())
}

/// A stopwatch for one piece of work: [`Stopwatch::lap`] prints the time since it started.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch {
    what: &'static str,
    start: Instant,
    on: bool,
}

impl Stopwatch {
    /// Start timing `what` (printed only when [`enabled`]).
    pub fn start(what: &'static str) -> Stopwatch {
        Stopwatch {
            what,
            start: Instant::now(),
            on: enabled(),
        }
    }

    /// The line [`Stopwatch::lap`] prints for `step` after `took`.
    pub fn line(&self, step: &str, took: Duration) -> String {
        format!("timings: {}: {step} {took:?}", self.what)
    }

    /// Print the time since the start, labelled `step`, when timings are on.
    pub fn lap(&self, step: &str) {
        if self.on {
            eprintln!("{}", self.line(step, self.start.elapsed()));
        }
    }

    /// Time since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// Print one timing line that was measured elsewhere (per-worker sums), when timings are on.
pub fn report(what: &str, step: &str, took: Duration) {
    if enabled() {
        eprintln!("timings: {what}: {step} {took:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lap_names_the_work_the_step_and_the_duration() {
        let w = Stopwatch::start("resample");
        assert_eq!(
            w.line("sorted", Duration::from_millis(1500)),
            "timings: resample: sorted 1.5s"
        );
    }
}
