//! The one freshness rule of every command that acts on evidence — `scale-down` (the findings),
//! `notify` (the analysis), `share apply` and `mig apply` from a tessera plan (the window the
//! plan was made from): the data must end at most `--evidence.max-age` before the clock and not
//! more than [`FUTURE_SKEW_MS`] after it, or the command refuses before it changes anything.
//! Each command has its own default maximum (how fast what it acts on goes stale); the flags are
//! the same everywhere ([`EvidenceArgs`]: `--evidence.max-age`, `--allow-stale-evidence`), and
//! so are the messages and the one duration format ([`age`]).
//!
//! Pure: the caller gives "now" (the clock, or a `--now` for replays and tests). What it does not
//! do: re-measure the evidence (scale-down re-reads the workloads before each write; the other
//! commands act on a plan whose data it checks here).

use chrono::DateTime;

pub use crate::range::{FUTURE_SKEW_MS, Freshness, freshness};

/// The evidence flags every acting command flattens.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EvidenceArgs {
    /// The oldest evidence the command acts on: the data it decides from must end at most this
    /// long before now (default: the command's own; see its docs).
    #[arg(long = "evidence.max-age", value_name = "DURATION", value_parser = parse_ms)]
    pub max_age_ms: Option<i64>,
    /// Act on evidence of any age (no --evidence.max-age check): for old data replayed on
    /// purpose, after checking that what it says still holds.
    #[arg(long = "allow-stale-evidence")]
    pub allow_stale: bool,
}

fn parse_ms(s: &str) -> Result<i64, String> {
    let d = tessera_core::units::parse_duration(s)?;
    i64::try_from(d.as_millis()).map_err(|_| format!("{s:?}: too long"))
}

impl EvidenceArgs {
    /// The maximum age to check against (`default_ms` unless `--evidence.max-age` is given);
    /// `None` with `--allow-stale-evidence`.
    pub fn max_age(&self, default_ms: i64) -> Option<i64> {
        (!self.allow_stale).then(|| self.max_age_ms.unwrap_or(default_ms))
    }
}

/// Evidence too old, dated after the clock, or without an end to judge by.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StaleError {
    #[error(
        "the evidence is {age} old: the data ends {end} and it is {now} now, more than --evidence.max-age {max} (check that the sources are current; --evidence.max-age DURATION or --allow-stale-evidence acts on older data)"
    )]
    Old {
        age: String,
        end: String,
        now: String,
        max: String,
    },
    #[error(
        "the evidence is dated {ahead} after the clock: the data ends {end} and it is {now} now (more than {skew} ahead: this machine's clock or the data is wrong; --allow-stale-evidence acts on it anyway)"
    )]
    Future {
        ahead: String,
        end: String,
        now: String,
        skew: String,
    },
    #[error("the evidence's age is unknown: {0} (--allow-stale-evidence acts on it anyway)")]
    Unknown(String),
}

/// A duration for messages: `30d 4h`, `2h 5m`, `45m`, `12s`.
pub fn age(ms: i64) -> String {
    let s = ms.unsigned_abs() / 1000;
    let (d, h, m) = (s / 86_400, s / 3600 % 24, s / 60 % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h {m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) => format!("{d}d {h}h"),
    }
}

/// RFC 3339 UTC, seconds.
pub fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// The end of the data as an RFC 3339 time (`what` names it in the error).
pub fn end_ms(until: Option<&str>, what: &str) -> Result<i64, StaleError> {
    let s = until.ok_or_else(|| StaleError::Unknown(format!("{what} has no end time")))?;
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|e| StaleError::Unknown(format!("{what}: {s:?} is not an RFC 3339 time ({e})")))
}

/// The rule: data ending at `data_end_ms` is fresh at `now_ms` when it ends at most
/// `max_age_ms` before it and at most [`FUTURE_SKEW_MS`] after it.
pub fn check(data_end_ms: i64, now_ms: i64, max_age_ms: i64) -> Result<(), StaleError> {
    match freshness(data_end_ms, now_ms, max_age_ms) {
        Freshness::Fresh => Ok(()),
        Freshness::Old { age_ms } => Err(StaleError::Old {
            age: age(age_ms),
            end: rfc3339(data_end_ms),
            now: rfc3339(now_ms),
            max: age(max_age_ms),
        }),
        Freshness::Future { ahead_ms } => Err(StaleError::Future {
            ahead: age(ahead_ms),
            end: rfc3339(data_end_ms),
            now: rfc3339(now_ms),
            skew: age(FUTURE_SKEW_MS),
        }),
    }
}

/// The rule applied to a plan file's evidence: the end (`until`) of the data window it was made
/// from, named "the window of PATH" in the error.
pub fn check_plan_window(
    until: &str,
    path: &std::path::Path,
    now_ms: i64,
    max_age_ms: i64,
) -> Result<(), StaleError> {
    let what = format!("the window of {}", path.display());
    check(end_ms(Some(until), &what)?, now_ms, max_age_ms)
}

/// The clock, in unix ms.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_future_and_unknown_evidence_say_what_and_how_to_override() {
        let end = 1_790_000_000_000;
        let min = 60_000;
        assert_eq!(check(end, end + 15 * min, 15 * min), Ok(()));
        assert_eq!(check(end, end - 5 * min, 15 * min), Ok(()));
        let old = check(end, end + 30 * 86_400_000 + 4 * 3_600_000, 15 * min)
            .unwrap_err()
            .to_string();
        assert!(
            old.contains("30d 4h old")
                && old.contains("--evidence.max-age 15m")
                && old.contains("--allow-stale-evidence"),
            "{old}"
        );
        let ahead = check(end, end - 6 * min, 15 * min).unwrap_err().to_string();
        assert!(ahead.contains("dated 6m after the clock"), "{ahead}");
        let unknown = end_ms(None, "the plan's window").unwrap_err().to_string();
        assert!(
            unknown.contains("the plan's window has no end time"),
            "{unknown}"
        );
        assert!(end_ms(Some("yesterday"), "until").is_err());
        assert_eq!(
            end_ms(Some("2026-11-23T09:00:00Z"), "x"),
            Ok(1_795_424_400_000)
        );
    }

    #[test]
    fn the_flags_give_the_command_default_or_nothing_to_check() {
        let a = EvidenceArgs::default();
        assert_eq!(a.max_age(900_000), Some(900_000));
        let a = EvidenceArgs {
            max_age_ms: Some(60_000),
            allow_stale: false,
        };
        assert_eq!(a.max_age(900_000), Some(60_000));
        let a = EvidenceArgs {
            max_age_ms: Some(60_000),
            allow_stale: true,
        };
        assert_eq!(a.max_age(900_000), None);
        assert_eq!(age(12_000), "12s");
        assert_eq!(age(2 * 3_600_000 + 5 * 60_000), "2h 5m");
    }
}
