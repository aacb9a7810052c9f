//! One node group read through the remote-read API (`POST /api/v1/read`): one query per metric
//! name the texts select, each series evaluated as it arrives ([`TextEval`]) at the evaluation
//! times of the `query_range` path, into the same cells; and the probe that tells whether a
//! server answers the API at all.
//!
//! The protocol is [`crate::ingest::remote_read`], the evaluation [`crate::ingest::promeval`];
//! this module only wires them to the plan and the cells.

use std::collections::BTreeMap;

use super::assembly::{Entity, Key, PartTables};
use super::catalogue::Family;
use super::client::{Client, RemoteAnswer, err};
use super::discovery::Group;
use super::holders::Holders;
use super::plan::{FetchErr, Plan, Tallies, absorb, group_tables};
use crate::ingest::promeval::{Buckets, Grid, Labels, Points, TextEval};
use crate::ingest::remote_read::{self, LabelMatcher};

/// The rows of one group of nodes read through the remote-read API: one request with a query
/// per metric name the texts select (the group's label matcher added), each series evaluated
/// as it arrives ([`TextEval`]) at the evaluation times of the query-range path, into the same
/// cells; then its rows per table, as [`super::fetch_range::fetch_group`].
pub(super) fn fetch_group_remote(
    plan: &Plan,
    client: &mut Client,
    group: &Group,
    tallies: &mut Tallies,
) -> Result<PartTables, FetchErr> {
    let mut t = Tallies::default();
    let spec = plan.spec;
    let step = plan.step;
    let mut entities: BTreeMap<Key, Entity> = BTreeMap::new();
    let mut attrs: BTreeMap<Key, BTreeMap<&'static str, String>> = BTreeMap::new();
    let (Some(&(first, _)), Some(&(_, last))) = (plan.windows.first(), plan.windows.last()) else {
        return Ok(Vec::new());
    };
    let grid = Grid {
        first,
        step,
        n: (last - first) / step + 1,
        lookback: plan.lookback,
    };
    let mut evals: Vec<TextEval> = plan
        .texts
        .iter()
        .map(|x| TextEval::new(x.eval.clone().expect("checked by read"), x.shift))
        .collect();
    let (names, readers) = metric_names(&evals);
    let queries = remote_queries(plan, group, &names, (first, last));
    let what = format!(
        "remote read of {} metric(s) for {}",
        names.len(),
        match &group.label {
            Some(_) => format!("node(s) {}", group.key()),
            None => "the fleet".to_string(),
        }
    );
    let mut out = Vec::new();
    let mut holders = Holders::default();
    // Evaluated series of text `i` into the cells.
    let mut absorb_out = |i: usize, out: &mut Vec<(Labels, Points)>| {
        let text = &plan.texts[i];
        for (metric, points) in out.drain(..) {
            absorb(
                plan,
                &text.columns,
                &text.promql,
                &metric,
                || points.iter().map(|&(t, v)| (t, Ok(v))),
                &mut entities,
                &mut attrs,
                &mut t.refused,
                &mut holders,
            );
        }
    };
    // A series' buckets, shared by the templates that read it.
    let mut bk = Buckets::default();
    let answer = client.remote_read(queries, &what, |series| {
        let name = &names[series.query];
        bk.clear();
        for &i in &readers[series.query] {
            evals[i].feed(
                name,
                &series.labels,
                &series.ts,
                &series.vals,
                &grid,
                &mut bk,
                &mut out,
            );
            absorb_out(i, &mut out);
        }
        Ok(())
    })?;
    settle_answer(answer, group, spec, &what, &mut t.prom_warnings)?;
    for (i, e) in evals.iter_mut().enumerate() {
        e.finish(&mut out);
        absorb_out(i, &mut out);
    }
    let tables = group_tables(plan, entities, attrs, &holders)?;
    tallies.merge(t);
    Ok(tables)
}

/// The metric names the texts read, each once in order of first use, and per name the texts
/// (by index) that read it.
fn metric_names(evals: &[TextEval]) -> (Vec<String>, Vec<Vec<usize>>) {
    let mut names: Vec<String> = Vec::new();
    for e in evals {
        for m in e.eval.metrics() {
            if !names.iter().any(|n| n == m) {
                names.push(m.to_string());
            }
        }
    }
    // Readers of each name: (text index).
    let readers: Vec<Vec<usize>> = names
        .iter()
        .map(|n| {
            (0..evals.len())
                .filter(|&i| evals[i].eval.metrics().contains(&n.as_str()))
                .collect()
        })
        .collect();
    (names, readers)
}

/// One remote-read query per metric name, the group's label matchers added, over the range the
/// evaluation times `first`..`last` need (the lookback and the texts' shifts included).
fn remote_queries(
    plan: &Plan,
    group: &Group,
    names: &[String],
    (first, last): (i64, i64),
) -> Vec<remote_read::Query> {
    let shifts = plan.texts.iter().map(|x| x.shift);
    let start = first - plan.step - plan.lookback + shifts.clone().min().unwrap_or(0).min(0);
    let end = last + shifts.max().unwrap_or(0).max(0);
    let matchers = group.label_matchers();
    names
        .iter()
        .map(|n| {
            let mut m = vec![LabelMatcher::eq("__name__", n)];
            m.extend(matchers.iter().cloned());
            remote_read::Query {
                start_timestamp_ms: start,
                end_timestamp_ms: end,
                matchers: m,
            }
        })
        .collect()
}

/// What the server's remote-read answer means for the group: skipped histogram chunks counted
/// in `prom_warnings`; a limit splits a group of several nodes, else it is fatal, as is no support.
fn settle_answer(
    answer: RemoteAnswer,
    group: &Group,
    spec: &str,
    what: &str,
    prom_warnings: &mut BTreeMap<String, u64>,
) -> Result<(), FetchErr> {
    match answer {
        RemoteAnswer::Done(stats) => {
            if stats.skipped_chunks > 0 {
                *prom_warnings
                    .entry("remote read: chunks of a histogram encoding skipped".into())
                    .or_default() += stats.skipped_chunks;
            }
            Ok(())
        }
        RemoteAnswer::Limit(message) => {
            if group.label.is_some() && group.nodes.len() > 1 {
                return Err(FetchErr::Nodes(message));
            }
            Err(FetchErr::Fatal(err(
                spec,
                format!(
                    "{what}: the server refuses it for a limit: {message} \
                     (--prometheus.api query-range reads the range in chunks)"
                ),
            )))
        }
        RemoteAnswer::Unsupported(why) => Err(FetchErr::Fatal(err(spec, format!("{what}: {why}")))),
    }
}

/// Whether the server answers the remote-read API: one small read (the family's first marker
/// over the last millisecond of the range); why not when it does not.
pub(super) fn probe_remote_read(
    client: &mut Client,
    family: Family,
    until: i64,
) -> Result<(), String> {
    let q = remote_read::Query {
        start_timestamp_ms: until - 1,
        end_timestamp_ms: until,
        matchers: vec![LabelMatcher::eq("__name__", family.markers()[0])],
    };
    match client.remote_read(vec![q], "remote-read probe", |_| Ok(())) {
        Ok(RemoteAnswer::Done(_)) => Ok(()),
        Ok(RemoteAnswer::Unsupported(why)) | Ok(RemoteAnswer::Limit(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}
