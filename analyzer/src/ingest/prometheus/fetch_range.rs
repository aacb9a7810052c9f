//! One node group read through `/api/v1/query_range`: every PromQL text (with the group's
//! matcher) over every evaluation chunk, a chunk whose answer is too large or refused for a
//! server limit asked again in halves, the answers' series into the cells, then the group's
//! rows per table. Missing chunks and server warnings are counted.
//!
//! It does not split node groups (`fetch`) or read through the remote-read API
//! (`fetch_remote`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::assembly::{Entity, Key, PartTables};
use super::client::{Answer, Client, Data, Limit, Matrix, err, fmt_size, parse};
use super::discovery::{Group, with_matcher};
use super::holders::Holders;
use super::plan::{FetchErr, Plan, Tallies, Text, absorb, group_tables};
use crate::ingest::fmt_ms;

/// Reads one group of nodes: every query over every chunk, then its rows per table.
pub(super) fn fetch_group(
    plan: &Plan,
    client: &mut Client,
    group: &Group,
    tallies: &mut Tallies,
) -> Result<PartTables, FetchErr> {
    // Counted once the group is read (a group split for a limit counts its halves only).
    let mut t = Tallies::default();
    let spec = plan.spec;
    let matcher = group.matcher();
    let several = group.label.is_some() && group.nodes.len() > 1;
    let mut entities: BTreeMap<Key, Entity> = BTreeMap::new();
    let mut attrs: BTreeMap<Key, BTreeMap<&'static str, String>> = BTreeMap::new();
    let mut gaps: BTreeMap<String, u64> = BTreeMap::new();
    let mut holders = Holders::default();
    for Text {
        promql: text,
        shift,
        columns,
        ..
    } in plan.texts
    {
        let shift = *shift;
        let promql = match &matcher {
            Some(m) => with_matcher(text, m),
            None => text.clone(),
        };
        // Per series fingerprint: chunks it appeared in.
        let mut seen: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
        // A chunk whose answer is too large, or that the server refuses for a limit, is asked
        // again in halves, down to one point.
        let mut todo: VecDeque<(usize, i64, i64)> = plan
            .windows
            .iter()
            .enumerate()
            .map(|(ci, (s, e))| (ci, *s, *e))
            .collect();
        while let Some((ci, s, e)) = todo.pop_front() {
            let Some((data, warns)) = ask_chunk(
                plan,
                client,
                (text, &promql, shift),
                (ci, s, e),
                several,
                &mut todo,
                &mut t,
            )?
            else {
                continue;
            };
            for w in warns {
                *t.prom_warnings.entry(w).or_default() += 1;
            }
            let m: Matrix = parse(&data)
                .map_err(|e| err(spec, format!("query {promql:?}: bad answer: {e}")))?;
            if m.result_type != "matrix" {
                return Err(FetchErr::Fatal(err(
                    spec,
                    format!("query {promql:?}: expected a matrix, got {}", m.result_type),
                )));
            }
            for mut series in m.result {
                if shift != 0 {
                    for (t, _) in &mut series.values {
                        *t -= shift as f64 / 1000.0;
                    }
                }
                let fp = format!("{:?}", series.metric);
                seen.entry(fp).or_default().insert(ci);
                let values = || {
                    series.values.iter().map(|(t, v)| {
                        let ts = (t * 1000.0).round() as i64;
                        (ts, v.parse::<f64>().map_err(|_| v.as_str()))
                    })
                };
                absorb(
                    plan,
                    columns,
                    &promql,
                    &series.metric,
                    values,
                    &mut entities,
                    &mut attrs,
                    &mut t.refused,
                    &mut holders,
                );
            }
        }
        let gapped = gapped(&seen);
        if gapped > 0 {
            *gaps.entry(text.clone()).or_default() += gapped;
        }
    }
    t.gaps = gaps;
    let out = group_tables(plan, entities, attrs, &holders)?;
    tallies.merge(t);
    Ok(out)
}

/// Asks chunk `ci` (`s`..`e`) of `promql` (the text `text`, evaluation times shifted by
/// `shift`): its data and the server's warnings, or `None` when the chunk is too large or
/// refused for a limit and is asked again in halves (queued in `todo`, counted in `t`). One point
/// too large or refused is fatal; a limit on a group of several nodes splits the group instead.
fn ask_chunk(
    plan: &Plan,
    client: &mut Client,
    (text, promql, shift): (&String, &str, i64),
    (ci, s, e): (usize, i64, i64),
    several: bool,
    todo: &mut VecDeque<(usize, i64, i64)>,
    t: &mut Tallies,
) -> Result<Option<(Data, Vec<String>)>, FetchErr> {
    let spec = plan.spec;
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    let answer = client.get_bounded(
        "/api/v1/query_range",
        &[
            ("query", promql.to_string()),
            ("start", secs(s + shift)),
            ("end", secs(e + shift)),
            ("step", format!("{:.3}", plan.step as f64 / 1000.0)),
        ],
        &format!("query {promql:?}"),
    )?;
    match answer {
        Answer::Data(d, w) => Ok(Some((d, w))),
        Answer::TooLarge if e > s => {
            let mid = s + ((e - s) / plan.step / 2) * plan.step;
            todo.push_front((ci, mid + plan.step, e));
            todo.push_front((ci, s, mid));
            *t.splits.entry(text.clone()).or_default() += 1;
            Ok(None)
        }
        Answer::TooLarge => Err(FetchErr::Fatal(err(
            spec,
            format!(
                "query {promql:?}: the answer for one point at {} is larger than {} \
                 (--prometheus.max-response-size)",
                fmt_ms(s),
                fmt_size(plan.max_response_bytes)
            ),
        ))),
        Answer::Limit(kind, message) => {
            if several && (kind == Limit::Series || e <= s) {
                return Err(FetchErr::Nodes(message));
            }
            if e <= s {
                return Err(FetchErr::Fatal(err(
                    spec,
                    format!(
                        "query {promql:?}: the server refuses even one point at {}: \
                         {message}",
                        fmt_ms(s)
                    ),
                )));
            }
            let mid = s + ((e - s) / plan.step / 2) * plan.step;
            todo.push_front((ci, mid + plan.step, e));
            todo.push_front((ci, s, mid));
            t.limits.entry(text.clone()).or_insert((0, message)).0 += 1;
            Ok(None)
        }
    }
}

/// How many series of a text are missing from a chunk between their first and last.
fn gapped(seen: &BTreeMap<String, BTreeSet<usize>>) -> u64 {
    seen.values()
        .filter(|c| match (c.first(), c.last()) {
            (Some(a), Some(b)) => b - a + 1 != c.len(),
            _ => false,
        })
        .count() as u64
}
