//! The work the serving frameworks counted, read from each `prometheus:` source for the report's
//! Work per GPU-hour section (`tessera::ingest::prometheus::work_rows`, docs/work.md). A source
//! that cannot answer is a warning on stderr, never an error: the section is then left out.

use tessera::range::TimeRange;
use tessera::work::WorkRow;

use super::SourceArgs;

/// Every `prometheus:` source's work rows over `range`.
pub fn work_rows(src: &SourceArgs, range: TimeRange) -> Vec<WorkRow> {
    let mut out = Vec::new();
    for s in &src.sources {
        if s.scheme() != "prometheus" {
            continue;
        }
        let opts = src.prometheus_options();
        match tessera::ingest::prometheus::work_rows(s.location(), &opts, range.since, range.until)
        {
            Ok(rows) => out.extend(rows),
            Err(e) => eprintln!(
                "tessera: warning: work per GPU-hour: {}",
                tessera::output::escape::printable(&e.to_string())
            ),
        }
    }
    out
}
