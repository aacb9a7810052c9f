//! Where telemetry comes from and when: `--source` specs ([`Source`], parsed and printed as
//! `SCHEME:LOCATION`), the seam every kind of source implements ([`SourceKind`]; the kinds are
//! registered in `ingest::KINDS`: `history:DIR`, `csv:FILE`, `prometheus:URL`),
//! `--since`/`--until` values ([`parse_time`]) and unix ms as reports print them ([`fmt_ms`]).
//!
//! It checks the spec's form only; it opens no file and contacts no server (the kinds' `read`
//! does, called by the driver, `parts`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use polars::prelude::LazyFrame;

use super::error::IngestError;
use super::resample::Sampling;
use super::{IngestOptions, IngestReport, KINDS, WorkItem};
use crate::frames::schema::Table;

/// One kind of source: its scheme, what a location must look like, and how it is read into the
/// canonical rows. A new source is a module implementing this and its line in `ingest::KINDS`.
pub(super) trait SourceKind: Sync {
    /// The scheme before the colon (`history`).
    fn scheme(&self) -> &'static str;

    /// Why `location` (the text after `scheme:`, not empty) is not one of this kind's; checked
    /// when the spec is parsed.
    fn check(&self, _location: &str) -> Result<(), &'static str> {
        Ok(())
    }

    /// Whether the reader wants a spill folder ([`IngestOptions::spill`]) from the command.
    fn spills(&self) -> bool {
        false
    }

    /// The work items of `source`: by default the source read whole by [`SourceKind::read`];
    /// history overrides it with its files (the driver scans them lazily, with duplicate
    /// checks). A source with a read item puts every row in one partition unless it is the only
    /// work item (then its own partitions stand).
    fn items(
        &self,
        source: &Source,
        _report: &mut IngestReport,
    ) -> Result<Vec<WorkItem>, IngestError> {
        Ok(vec![WorkItem::Read(source.clone())])
    }

    /// Reads `location` over the options' range into rows. The default reads nothing: a kind
    /// whose [`SourceKind::items`] are files has no rows of its own.
    fn read(
        &self,
        _location: &str,
        _opts: &IngestOptions,
        _report: &mut IngestReport,
    ) -> Result<Rows, IngestError> {
        Ok(Rows::default())
    }
}

/// A source's rows in partitions: each partition's key (a node, or `*`), its tables' rows (the
/// history file schema, `ts` as int64 ms) and the Parquet files they are scanned from (spilled).
pub(super) type Partitions = Vec<(String, Vec<(Table, LazyFrame)>, Vec<PathBuf>)>;

/// What [`SourceKind::read`] gives: the rows in partitions, and what was found about the
/// sampling for the report's note.
#[derive(Default)]
pub(super) struct Rows {
    pub(super) parts: Partitions,
    /// The sampling found and the word for what was sampled (`samples`, `scrapes`).
    pub(super) sampling: Option<(Sampling, &'static str)>,
}

/// Where telemetry comes from (`--source`): a kind of `ingest::KINDS` and its location.
#[derive(Clone)]
pub struct Source {
    kind: &'static dyn SourceKind,
    location: String,
}

impl Source {
    fn of(scheme: &str, location: String) -> Source {
        let kind = KINDS
            .iter()
            .find(|k| k.scheme() == scheme)
            .copied()
            .unwrap_or(KINDS[0]);
        Source { kind, location }
    }

    /// `history:DIR`: a folder of node folders, one node folder, or a glob of either.
    pub fn history(spec: impl Into<String>) -> Source {
        Source::of("history", spec.into())
    }

    /// `csv:FILE`: the generic long format or an `nvidia-smi --format=csv` log.
    pub fn csv(path: impl AsRef<Path>) -> Source {
        Source::of("csv", path.as_ref().display().to_string())
    }

    /// `prometheus:URL`: a server with the Prometheus HTTP API (`query_range`).
    pub fn prometheus(url: impl Into<String>) -> Source {
        Source::of("prometheus", url.into())
    }

    /// The scheme (`history`, `csv`, `prometheus`).
    pub fn scheme(&self) -> &'static str {
        self.kind.scheme()
    }

    /// The location after the scheme (a folder or glob, a file, a URL).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Whether reading it wants a spill folder ([`IngestOptions::spill`]).
    pub fn spills(&self) -> bool {
        self.kind.spills()
    }

    pub(super) fn kind(&self) -> &'static dyn SourceKind {
        self.kind
    }
}

impl PartialEq for Source {
    fn eq(&self, other: &Source) -> bool {
        self.scheme() == other.scheme() && self.location == other.location
    }
}

impl Eq for Source {}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Source").field(&self.to_string()).finish()
    }
}

/// The schemes as errors name them: `history, csv or prometheus`.
fn schemes() -> String {
    let names: Vec<&str> = KINDS.iter().map(|k| k.scheme()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

impl FromStr for Source {
    type Err = IngestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| IngestError::SourceSpec {
            spec: s.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = s.split_once(':').ok_or_else(|| {
            bad(&format!(
                "expected SCHEME:LOCATION with scheme {}",
                schemes()
            ))
        })?;
        if rest.is_empty() {
            return Err(bad("the location after the scheme is empty"));
        }
        let kind = KINDS.iter().find(|k| k.scheme() == scheme).ok_or_else(|| {
            bad(&format!(
                "unknown scheme {scheme:?}; expected {}",
                schemes()
            ))
        })?;
        kind.check(rest).map_err(bad)?;
        Ok(Source {
            kind: *kind,
            location: rest.to_string(),
        })
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.scheme(), self.location)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_print_and_fail_as_before_the_seam() {
        for spec in ["history:/d/*", "csv:a b.csv", "prometheus:https://p:9090/x"] {
            let s: Source = spec.parse().unwrap();
            assert_eq!(s.to_string(), spec);
        }
        assert_eq!(Source::csv("f.csv"), "csv:f.csv".parse().unwrap());
        assert_eq!(Source::history("d").scheme(), "history");
        assert!(Source::prometheus("http://p").spills() && !Source::history("d").spills());
        let err = |s: &str| s.parse::<Source>().unwrap_err().to_string();
        assert!(
            err("nope").contains("expected SCHEME:LOCATION with scheme history, csv or prometheus")
        );
        assert!(err("x:y").contains("unknown scheme \"x\"; expected history, csv or prometheus"));
        assert!(err("csv:").contains("the location after the scheme is empty"));
        assert!(err("prometheus:p:9090").contains("expected prometheus:http(s)://HOST[:PORT]"));
    }
}
