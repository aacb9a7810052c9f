//! One node group read through `/api/v1/query_range`: every PromQL text (with the group's
//! matcher) over every evaluation chunk, a chunk whose answer is too large or refused for a
//! server limit asked again in halves, the answers' series into the cells, then the group's
//! rows per table. Missing chunks and server warnings are counted.
//!
//! It does not split node groups (`fetch`) or read through the remote-read API
//! (`fetch_remote`).

use std::collections::{BTreeMap, BTreeSet};

use super::assembly::{Entity, Key, PartTables, observations};
use super::client::{Answer, Client, Limit, Matrix, err, fmt_size, parse};
use super::discovery::{Group, with_matcher};
use super::holders::Holders;
use super::plan::{FetchErr, Plan, Tallies, Text, absorb};
use crate::ingest::{fmt_ms, resample};

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
    let step = plan.step;
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
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
        let mut todo: std::collections::VecDeque<(usize, i64, i64)> = plan
            .windows
            .iter()
            .enumerate()
            .map(|(ci, (s, e))| (ci, *s, *e))
            .collect();
        while let Some((ci, s, e)) = todo.pop_front() {
            let answer = client.get_bounded(
                "/api/v1/query_range",
                &[
                    ("query", promql.clone()),
                    ("start", secs(s + shift)),
                    ("end", secs(e + shift)),
                    ("step", format!("{:.3}", step as f64 / 1000.0)),
                ],
                &format!("query {promql:?}"),
            )?;
            let (data, warns) = match answer {
                Answer::Data(d, w) => (d, w),
                Answer::TooLarge if e > s => {
                    let mid = s + ((e - s) / step / 2) * step;
                    todo.push_front((ci, mid + step, e));
                    todo.push_front((ci, s, mid));
                    *t.splits.entry(text.clone()).or_default() += 1;
                    continue;
                }
                Answer::TooLarge => {
                    return Err(FetchErr::Fatal(err(
                        spec,
                        format!(
                            "query {promql:?}: the answer for one point at {} is larger than {} \
                             (--prometheus.max-response-size)",
                            fmt_ms(s),
                            fmt_size(plan.max_response_bytes)
                        ),
                    )));
                }
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
                    let mid = s + ((e - s) / step / 2) * step;
                    todo.push_front((ci, mid + step, e));
                    todo.push_front((ci, s, mid));
                    t.limits.entry(text.clone()).or_insert((0, message)).0 += 1;
                    continue;
                }
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
        let gapped = seen
            .values()
            .filter(|c| match (c.first(), c.last()) {
                (Some(a), Some(b)) => b - a + 1 != c.len(),
                _ => false,
            })
            .count() as u64;
        if gapped > 0 {
            *gaps.entry(text.clone()).or_default() += gapped;
        }
    }
    t.gaps = gaps;
    let mut out = Vec::new();
    for o in observations(entities, attrs, spec)? {
        let table = o.table;
        let (df, s) = resample::resample(o, plan.row_spec)?;
        let df = holders.fill(table, df)?;
        out.push((table, (df.height() > 0).then_some(df), s));
    }
    tallies.merge(t);
    Ok(out)
}
