//! The work the serving frameworks counted (and the counters `--work-metrics` declares), read
//! from each `prometheus:` source for the report's Work per GPU-hour section
//! (`tessera::ingest::prometheus::work_rows`, docs/work.md), and a Slurm job's work for
//! `tessera job` ([`job_work`]). A source that cannot answer is a warning on stderr, never an
//! error: the section is then left out, the job's work unknown.

use tessera::range::TimeRange;
use tessera::work::{SpanWork, WorkMetric, WorkRow};

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
            Ok((rows, warnings)) => {
                out.extend(rows);
                for w in warnings {
                    eprintln!(
                        "tessera: warning: work per GPU-hour: {}",
                        tessera::output::escape::printable(&w)
                    );
                }
            }
            Err(e) => eprintln!(
                "tessera: warning: work per GPU-hour: {}",
                tessera::output::escape::printable(&e.to_string())
            ),
        }
    }
    out
}

/// The work Slurm job `job` counted in each of its `runs` (`tessera job`), from the
/// `prometheus:` sources: per unit and run, the first source's that has it. `Err` with the
/// reason when no source could be asked (none is `prometheus:`, or every one failed: each
/// failure is also a warning on stderr): the work is then unknown.
pub fn job_work(
    src: &SourceArgs,
    job: &str,
    runs: &[(i64, i64)],
    declared: &[WorkMetric],
) -> Result<Vec<SpanWork>, String> {
    let mut answered = false;
    let mut out: Vec<SpanWork> = Vec::new();
    for s in &src.sources {
        if s.scheme() != "prometheus" {
            continue;
        }
        let opts = src.prometheus_options();
        match tessera::ingest::prometheus::job_work(s.location(), &opts, job, runs, declared) {
            Ok(found) => {
                answered = true;
                for f in found {
                    if !out.iter().any(|o| o.unit == f.unit && o.run == f.run) {
                        out.push(f);
                    }
                }
            }
            Err(e) => eprintln!(
                "tessera: warning: work per GPU-hour: {}",
                tessera::output::escape::printable(&e.to_string())
            ),
        }
    }
    if answered {
        Ok(out)
    } else if src.sources.iter().any(|s| s.scheme() == "prometheus") {
        Err("unknown: no prometheus: source could be read (see the warnings)".into())
    } else {
        if !declared.is_empty() {
            eprintln!(
                "tessera: warning: --work-metrics: no prometheus: source to read the declared counters from"
            );
        }
        Err("unknown: work counters are read from a prometheus: source only (docs/work.md)".into())
    }
}
