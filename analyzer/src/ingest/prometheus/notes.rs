//! The report lines of one `prometheus:` read ([`Notes`]): the family and query step, where
//! the maxima come from, kube-state-metrics' counts, the other families found, the requests,
//! the partitions and bytes received, partial data, splits, server limits and refused values.
//!
//! It reads nothing and decides nothing: the caller hands it what was found.

use std::collections::BTreeSet;

use super::catalogue::{Family, MIB};
use super::client::fmt_size;
use super::options::PrometheusOptions;
use super::plan::Tallies;
use super::recorded::Recorded;
use crate::ingest::{IngestReport, period};

/// The report lines of one read (`spec`: the source they name).
pub(super) struct Notes<'a> {
    pub(super) spec: &'a str,
    pub(super) report: &'a mut IngestReport,
}

impl Notes<'_> {
    /// The family read, the query step and where the maxima come from.
    pub(super) fn reading(
        &mut self,
        family: Family,
        step: i64,
        recorded: Option<&Recorded>,
        raw: Option<f64>,
        why_raw: &str,
    ) {
        let spec = self.spec;
        self.report.warnings.push(format!(
            "{spec}: read {} metrics (query step {}{})",
            family.name(),
            period::fmt_period(step as f64),
            match (recorded, raw) {
                (Some(r), Some(p)) => format!(
                    "; the recorded series come every {}, the finest scrape interval found is {}",
                    period::fmt_period(r.period_ms),
                    period::fmt_period(p)
                ),
                (Some(r), None) => format!(
                    "; the recorded series come every {}, no raw series",
                    period::fmt_period(r.period_ms)
                ),
                (None, Some(p)) => format!(
                    "; the finest scrape interval found is {}",
                    period::fmt_period(p)
                ),
                (None, None) => String::new(),
            }
        ));
        self.report.warnings.push(match recorded {
            Some(r) => format!(
                "{spec}: activity and memory maxima from the advisor's recorded series \
                 (rules/tessera-advisor.rules.yml: {}), recorded every {} at {} s past the minute{}; \
                 other columns from the raw series",
                r.names.join(", "),
                period::fmt_period(r.period_ms),
                r.offset_ms as f64 / 1000.0,
                if r.shift_ms != 0 {
                    format!(
                        "; each row takes the recorded minute ending {} s after it",
                        r.shift_ms as f64 / 1000.0
                    )
                } else {
                    String::new()
                }
            ),
            None => format!("{spec}: activity and memory maxima from the raw series ({why_raw})"),
        });
    }

    /// kube-state-metrics' counts read (`alone`: without a GPU exporter, with their finest
    /// scrape interval), and how.
    pub(super) fn kube(&mut self, step: i64, alone: Option<Option<f64>>, remote: bool) {
        let spec = self.spec;
        self.report.warnings.push(format!(
            "{spec}: {}kube-state-metrics' GPUs held and allocatable per node (query step {}{}): \
             one synthetic row per GPU, held or not, for nodes no GPU exporter covers; which GPU \
             is held, and any use, are not known from these counts",
            if alone.is_some() {
                "no GPU exporter's metrics: read only "
            } else {
                "read "
            },
            period::fmt_period(step as f64),
            alone.flatten().map_or(String::new(), |p| format!(
                "; the finest scrape interval found is {}",
                period::fmt_period(p)
            ))
        ));
        if remote {
            self.report.warnings.push(format!(
                "{spec}: kube-state-metrics' counts were read through /api/v1/query_range: they \
                 join two series, which the remote-read evaluation does not"
            ));
        }
    }

    /// A family read beside the first, on the nodes it does not cover.
    pub(super) fn also(&mut self, family: Family, first: Family, nodes: &BTreeSet<String>) {
        let shown: Vec<&str> = nodes.iter().take(5).map(String::as_str).collect();
        self.report.warnings.push(format!(
            "{}: also read {} metrics on the {} node(s) without {} metrics ({}{})",
            self.spec,
            family.name(),
            nodes.len(),
            first.name(),
            shown.join(", "),
            if nodes.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        ));
    }

    /// A family found beside the first and not read: every node it names is read from an
    /// earlier one, or its nodes cannot be told apart (`why`).
    pub(super) fn not_read(&mut self, family: Family, why: Option<&str>) {
        self.report.warnings.push(format!(
            "{}: also found {} metrics; not read: {}",
            self.spec,
            family.name(),
            why.map_or(
                "every node they name is read from the metrics above".into(),
                |w| { format!("{w}, so the nodes the metrics above read cannot be left out") }
            )
        ));
    }

    /// The requests sent.
    pub(super) fn requests(
        &mut self,
        popts: &PrometheusOptions,
        remote: bool,
        requests: u64,
        chunks: usize,
    ) {
        let spec = self.spec;
        self.report.warnings.push(if remote {
            format!("{spec}: {requests} request(s); one remote read per node group")
        } else {
            format!(
                "{spec}: {} request(s) for {} chunk(s) of at most {} points",
                requests, chunks, popts.max_points
            )
        });
    }

    /// How the nodes were partitioned, and the bytes received.
    pub(super) fn partitions(
        &mut self,
        popts: &PrometheusOptions,
        parts: usize,
        why_one: Option<&str>,
        spilled: bool,
        bytes: u64,
    ) {
        let spec = self.spec;
        self.report.warnings.push(match why_one {
            None => format!(
                "{spec}: queried by node: {} partition(s) of at most {} node(s), {} at once{}; {}",
                parts,
                popts.nodes_per_query,
                popts.concurrency.max(1),
                if spilled {
                    ", each partition's rows spilled to Parquet in the temp folder"
                } else {
                    ""
                },
                fmt_bytes_received(bytes)
            ),
            Some(why) => format!(
                "{spec}: queried as one partition ({why}); {}",
                fmt_bytes_received(bytes)
            ),
        });
    }

    /// Partial data, splits, server limits and refused values, counted.
    pub(super) fn tallies(&mut self, tallies: &Tallies, popts: &PrometheusOptions) {
        let (spec, report) = (self.spec, &mut *self.report);
        for (w, n) in &tallies.prom_warnings {
            report.warnings.push(format!(
                "{spec}: partial data: the server warned in {n} response(s): {w}"
            ));
            *report
                .skipped
                .entry("prometheus: responses with warnings".into())
                .or_default() += n;
        }
        for (promql, n) in &tallies.splits {
            report.warnings.push(format!(
                "{spec}: {n} answer(s) to {promql:?} were larger than {} \
                 (--prometheus.max-response-size) and were asked again for half the range",
                fmt_size(popts.max_response_bytes)
            ));
        }
        for (promql, (n, first)) in &tallies.limits {
            report.warnings.push(format!(
                "{spec}: server limit: {n} quer(ies) {promql:?} were refused and asked again for \
                 half the range (first: {first})"
            ));
        }
        if let Some((n, first)) = &tallies.node_splits {
            report.warnings.push(format!(
                "{spec}: server limit: {n} node group(s) were refused and queried again as two \
                 smaller groups (first: {first})"
            ));
        }
        for (why, (n, example)) in &tallies.refused.0 {
            report.warnings.push(format!(
                "{spec}: refused {n} value(s): {why} (first: {example})"
            ));
            *report
                .skipped
                .entry(format!("prometheus: refused values ({why})"))
                .or_default() += n;
        }
        for (promql, n) in &tallies.gaps {
            report.warnings.push(format!(
                "{spec}: partial data: {n} series of {promql:?} missing from chunks inside their time range"
            ));
            *report
                .skipped
                .entry("prometheus: series with missing chunks".into())
                .or_default() += n;
        }
    }
}

fn fmt_bytes_received(b: u64) -> String {
    format!("{:.1} MiB received", b as f64 / MIB)
}
