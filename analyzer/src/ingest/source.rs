//! Where telemetry comes from and when: `--source` specs ([`Source`], parsed and printed as
//! `history:DIR`, `csv:FILE`, `prometheus:URL`), `--since`/`--until` values ([`parse_time`]) and
//! unix ms as reports print them ([`fmt_ms`]).
//!
//! It checks the spec's form only; it opens no file and contacts no server.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use super::error::IngestError;

/// Where telemetry comes from (`--source`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `history:DIR`: a folder of node folders, one node folder, or a glob of either.
    History(String),
    /// `csv:FILE`: the generic long format or an `nvidia-smi --format=csv` log.
    Csv(PathBuf),
    /// `prometheus:URL`: a server with the Prometheus HTTP API (`query_range`).
    Prometheus(String),
}

impl FromStr for Source {
    type Err = IngestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| IngestError::SourceSpec {
            spec: s.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = s.split_once(':').ok_or_else(|| {
            bad("expected SCHEME:LOCATION with scheme history, csv or prometheus")
        })?;
        if rest.is_empty() {
            return Err(bad("the location after the scheme is empty"));
        }
        match scheme {
            "history" => Ok(Source::History(rest.to_string())),
            "csv" => Ok(Source::Csv(PathBuf::from(rest))),
            "prometheus" => {
                if !(rest.starts_with("http://") || rest.starts_with("https://")) {
                    return Err(bad("expected prometheus:http(s)://HOST[:PORT]"));
                }
                Ok(Source::Prometheus(rest.to_string()))
            }
            other => Err(bad(&format!(
                "unknown scheme {other:?}; expected history, csv or prometheus"
            ))),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::History(d) => write!(f, "history:{d}"),
            Source::Csv(p) => write!(f, "csv:{}", p.display()),
            Source::Prometheus(u) => write!(f, "prometheus:{u}"),
        }
    }
}

/// Parses `--since`/`--until`: a duration back from `now_ms` (`90s`, `30m`, `12h`, `7d`, `2w`),
/// an RFC 3339 time, or a date (`2026-11-02`, midnight UTC). Returns unix ms.
pub fn parse_time(value: &str, now_ms: i64) -> Result<i64, IngestError> {
    let err = |reason: &str| IngestError::Time {
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let v = value.trim();
    if v.starts_with(|c: char| c.is_ascii_digit())
        && v.ends_with(|c: char| c.is_ascii_alphabetic())
        && !v.contains(['-', ':', 'T'])
    {
        // A duration back from now, through the one duration parser (`0s` is now).
        if v.trim_start_matches(['0', '.'])
            .starts_with(|c: char| c.is_ascii_alphabetic())
        {
            return Ok(now_ms);
        }
        let d = tessera_core::units::parse_duration(v).map_err(|e| err(&e))?;
        let ms = i64::try_from(d.as_millis()).map_err(|_| err("duration too long"))?;
        return Ok(now_ms.saturating_sub(ms));
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(t.timestamp_millis());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
        && let Some(t) = d.and_hms_opt(0, 0, 0)
    {
        return Ok(t.and_utc().timestamp_millis());
    }
    Err(err(
        "expected a duration like 7d or 12h, an RFC 3339 time, or a date YYYY-MM-DD",
    ))
}

/// Formats unix ms as RFC 3339 UTC (for reports).
pub fn fmt_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}
