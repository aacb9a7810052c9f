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

pub use crate::times::fmt_ms;

/// [`crate::times::parse_time`] with the ingest error.
pub fn parse_time(value: &str, now_ms: i64) -> Result<i64, IngestError> {
    crate::times::parse_time(value, now_ms).map_err(|e| IngestError::Time {
        value: e.value,
        reason: e.reason,
    })
}
