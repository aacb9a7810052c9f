//! The work the serving frameworks counted (and the counters `--work-metrics` declares), read
//! from each `prometheus:` source for the report's Work per GPU-hour section
//! (`tessera::ingest::prometheus::work_rows`, docs/work.md). A source that cannot answer is a
//! warning on stderr, never an error: the section is then left out.

use tessera::range::TimeRange;
use tessera::work::{WorkMetric, WorkRow};

use super::SourceArgs;

/// Every `prometheus:` source's work rows over `range`, of the built-in counters and the
/// `declared` ones; a warning when counters are declared and no source can read them.
pub fn work_rows(src: &SourceArgs, range: TimeRange, declared: &[WorkMetric]) -> Vec<WorkRow> {
    if !declared.is_empty() && !src.sources.iter().any(|s| s.scheme() == "prometheus") {
        eprintln!(
            "tessera: warning: --work-metrics: no prometheus: source to read the declared counters from"
        );
    }
    let mut out = Vec::new();
    for s in &src.sources {
        if s.scheme() != "prometheus" {
            continue;
        }
        let opts = src.prometheus_options();
        match tessera::ingest::prometheus::work_rows(
            s.location(),
            &opts,
            (range.since, range.until),
            declared,
        ) {
            Ok(rows) => out.extend(rows),
            Err(e) => eprintln!(
                "tessera: warning: work per GPU-hour: {}",
                tessera::output::escape::printable(&e.to_string())
            ),
        }
    }
    out
}
