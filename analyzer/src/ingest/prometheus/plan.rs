//! What every partition's reads share: the [`Plan`] (family, step, evaluation chunks, the PromQL
//! [`Text`]s and the columns they feed), the counts for the report ([`Tallies`]), a partition's
//! failure ([`FetchErr`]), and [`absorb`], which puts one answer's series into the cells of
//! every column its query feeds — the same for `query_range` answers and remote-read
//! evaluations.
//!
//! It sends no request (the `fetch*` modules do) and builds no rows (`assembly`).

use std::collections::BTreeMap;

use polars::prelude::PolarsError;

use super::assembly::{
    Entity, Key, PartTables, Refused, bad_label, collect, identity, observations,
};
use super::catalogue::{Family, Query};
use super::holders::Holders;
use crate::ingest::IngestError;
use crate::ingest::promeval::Eval;
use crate::ingest::resample::{self, RowSpec};

/// What every partition's queries share.
pub(super) struct Plan<'a> {
    pub(super) spec: &'a str,
    pub(super) family: Family,
    pub(super) step: i64,
    /// The evaluation chunks (start, end), unix ms.
    pub(super) windows: &'a [(i64, i64)],
    /// `{L}`, ms.
    pub(super) lookback: i64,
    /// Read through the remote-read API ([`super::fetch_remote::fetch_group_remote`]).
    pub(super) remote: bool,
    /// The PromQL texts without a node matcher, the shift of their evaluation times, and the
    /// columns they feed.
    pub(super) texts: &'a [Text],
    pub(super) row_spec: RowSpec,
    pub(super) max_response_bytes: u64,
}

/// One PromQL text the source evaluates (sent once, feeding every column that uses it).
pub(super) struct Text {
    /// Without a node matcher.
    pub(super) promql: String,
    /// The shift of its evaluation times (recorded maxima: [`super::recorded::recorded_shift`]).
    pub(super) shift: i64,
    pub(super) columns: Vec<Query>,
    /// The same, evaluated over raw samples (remote read); `None` for a form
    /// [`Eval::parse`] does not know.
    pub(super) eval: Option<Eval>,
}

/// Counts of one or more partitions' queries, for the report.
#[derive(Default)]
pub(super) struct Tallies {
    pub(super) requests: u64,
    pub(super) bytes: u64,
    pub(super) prom_warnings: BTreeMap<String, u64>,
    pub(super) splits: BTreeMap<String, u64>,
    /// Queries refused for a server limit and asked again for half the range: how many, and
    /// the first refusal.
    pub(super) limits: BTreeMap<String, (u64, String)>,
    /// Node groups refused for a server limit and split.
    pub(super) node_splits: Option<(u64, String)>,
    pub(super) refused: Refused,
    pub(super) gaps: BTreeMap<String, u64>,
}

impl Tallies {
    pub(super) fn merge(&mut self, o: Tallies) {
        self.requests += o.requests;
        self.bytes += o.bytes;
        for (k, v) in o.prom_warnings {
            *self.prom_warnings.entry(k).or_default() += v;
        }
        for (k, v) in o.splits {
            *self.splits.entry(k).or_default() += v;
        }
        for (k, (n, first)) in o.limits {
            self.limits.entry(k).or_insert((0, first)).0 += n;
        }
        if let Some((n, first)) = o.node_splits {
            self.node_splits.get_or_insert((0, first)).0 += n;
        }
        for (why, (n, ex)) in o.refused.0 {
            self.refused.0.entry(why).or_insert((0, ex)).0 += n;
        }
        for (k, v) in o.gaps {
            *self.gaps.entry(k).or_default() += v;
        }
    }
}

/// A partition's failure: fatal, or a server's limit that fewer nodes may ease.
pub(super) enum FetchErr {
    Fatal(IngestError),
    Nodes(String),
}

impl From<IngestError> for FetchErr {
    fn from(e: IngestError) -> Self {
        FetchErr::Fatal(e)
    }
}

impl From<PolarsError> for FetchErr {
    fn from(e: PolarsError) -> Self {
        FetchErr::Fatal(e.into())
    }
}

/// One answer's series into the cells of every column its query feeds (the holders' series into
/// `holders`).
#[allow(clippy::too_many_arguments)]
pub(super) fn absorb<'v, I: Iterator<Item = (i64, Result<f64, &'v str>)>>(
    plan: &Plan,
    columns: &[Query],
    promql: &str,
    metric: &BTreeMap<String, String>,
    values: impl Fn() -> I,
    entities: &mut BTreeMap<Key, Entity>,
    attrs: &mut BTreeMap<Key, BTreeMap<&'static str, String>>,
    refused: &mut Refused,
    holders: &mut Holders,
) {
    for query in columns {
        if holders.take(query.column, metric, values().map(|(t, v)| (t, v.ok()))) {
            continue;
        }
        let Some(id) = identity(query.table, plan.family, metric) else {
            continue;
        };
        let key = (query.table, id);
        if let Some(bad) = bad_label(&key) {
            let why = "an identity label that is not a number where one is expected";
            refused.add(why, promql, &bad);
            continue;
        }
        collect(
            query,
            promql,
            metric,
            values(),
            &key,
            entities,
            attrs,
            refused,
        );
    }
}

/// A group's rows per table from its cells: the observations resampled to the rows asked for,
/// the holder columns filled in (a table without rows: `None`).
pub(super) fn group_tables(
    plan: &Plan,
    entities: BTreeMap<Key, Entity>,
    attrs: BTreeMap<Key, BTreeMap<&'static str, String>>,
    holders: &Holders,
) -> Result<PartTables, FetchErr> {
    let mut out = Vec::new();
    for o in observations(entities, attrs, plan.spec)? {
        let table = o.table;
        let (df, s) = resample::resample(o, plan.row_spec)?;
        let df = holders.fill(table, df)?;
        out.push((table, (df.height() > 0).then_some(df), s));
    }
    Ok(out)
}
