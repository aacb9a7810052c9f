//! Whether the `prometheus:` source reads the activity and memory maxima from the advisor's
//! recorded series (`rules/tessera-advisor.rules.yml`) instead of the raw ones, and if so at
//! which period, offset within the minute and shift of the evaluation times ([`Recorded`]);
//! if not, why (docs/recording-rules.md).
//!
//! It only decides: the recorded series' names per family are the catalogue's
//! ([`super::catalogue::Family`]), and the queries are rewritten by the caller.

use std::collections::{BTreeMap, BTreeSet};

use super::catalogue::{Family, RECORDED_WINDOW_MS};
use super::client::{Client, Matrix, err, parse};
use super::discovery::{Scan, scrape_interval};
use crate::ingest::{IngestError, fmt_ms, period};

/// Whether the source read the advisor's recorded maxima, and why (for the report).
#[derive(Debug, Clone)]
pub(super) struct Recorded {
    /// Recorded series used for the maxima (their names), empty when the raw series are read.
    pub(super) names: Vec<&'static str>,
    /// Their period (the rule group's evaluation interval, as found), ms.
    pub(super) period_ms: f64,
    /// The evaluations' offset within the minute, ms, and the shift applied to the recorded
    /// queries' evaluation times so that each row takes the recorded minute nearest to it.
    pub(super) offset_ms: i64,
    pub(super) shift_ms: i64,
}

/// Whether to read the activity and memory maxima from the advisor's recorded series
/// (`rules/tessera-advisor.rules.yml`) rather than the raw ones, and if not, why. They are used
/// when the server has them and they cover the range wherever the raw series do (every window
/// of [`scrape_interval`] with a raw sample has a recorded one: rules loaded after `--since`,
/// or a ruler that was down for an hour, leave windows without), they come at least once a
/// minute or as often as the raw samples (a longer rule interval leaves raw samples in no
/// window), and no `--interval` finer than their minute was asked for.
pub(super) fn choose_recorded(
    client: &mut Client,
    family: Family,
    names: &BTreeSet<String>,
    raw: &Scan,
    requested_ms: Option<i64>,
    range: (i64, i64),
    warnings: &mut BTreeMap<String, u64>,
) -> Result<(Option<Recorded>, String), IngestError> {
    let listed: Vec<&'static str> = family
        .recorded()
        .iter()
        .map(|(_, rec)| *rec)
        .filter(|rec| names.contains(*rec))
        .collect();
    let samples: Vec<&str> = family
        .recorded_samples()
        .into_iter()
        .filter(|m| names.contains(*m))
        .collect();
    if family.recorded().is_empty() {
        return Ok((None, format!("no recording rules for {}", family.name())));
    }
    if samples.is_empty() {
        return Ok((
            None,
            "no recorded series of rules/tessera-advisor.rules.yml on the server".into(),
        ));
    }
    if let Some(req) = requested_ms
        && req < RECORDED_WINDOW_MS
    {
        return Ok((
            None,
            format!(
                "--interval {} is finer than the recorded series' minute",
                period::fmt_period(req as f64)
            ),
        ));
    }
    let rec = scrape_interval(client, &samples, range, 11_000, warnings)?;
    let Some(last) = rec.windows.last().copied() else {
        return Ok((None, "no recorded series in the range".into()));
    };
    let missing: Vec<i64> = raw.windows.difference(&rec.windows).copied().collect();
    if let Some(first) = missing.first() {
        return Ok((
            None,
            format!(
                "the recorded series are missing in {} of the {} hour(s) that have raw samples, \
                 the first ending {}",
                missing.len(),
                raw.windows.len(),
                fmt_ms(*first)
            ),
        ));
    }
    let period_ms = rec.finest.unwrap_or(RECORDED_WINDOW_MS as f64);
    let limit = 1.5 * (RECORDED_WINDOW_MS as f64).max(raw.finest.unwrap_or(0.0));
    if period_ms > limit {
        return Ok((
            None,
            format!(
                "the recorded series come every {}: a rule interval longer than their minute \
                 leaves raw samples in no window (set `interval: 1m` on the group)",
                period::fmt_period(period_ms)
            ),
        ));
    }
    let offset_ms = recorded_offset(client, samples[0], last, range)?.unwrap_or(0);
    Ok((
        Some(Recorded {
            names: listed,
            period_ms,
            offset_ms,
            shift_ms: recorded_shift(offset_ms),
        }),
        String::new(),
    ))
}

/// The evaluations' offset within the recorded series' minute, ms: the time of their latest
/// sample (`timestamp()` of a selector is the sample's own time) at a few points of the last
/// window that has them, modulo a minute. `None` when the server answers none.
fn recorded_offset(
    client: &mut Client,
    metric: &str,
    last_window_end: i64,
    (since, until): (i64, i64),
) -> Result<Option<i64>, IngestError> {
    let end = last_window_end.min(until - 1).max(since + 1);
    let start = (end - 3_600_000).max(since + 1);
    let promql = format!("max(timestamp({metric}))");
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    let (data, _) = client.get(
        "/api/v1/query_range",
        &[
            ("query", promql.clone()),
            ("start", secs(start)),
            ("end", secs(end)),
            ("step", secs(600_000)),
        ],
        &format!("recorded series: query {promql:?}"),
    )?;
    let mx: Matrix = parse(&data).map_err(|e| {
        err(
            &client.spec,
            format!("recorded series: query {promql:?}: bad answer: {e}"),
        )
    })?;
    // The most common offset (a sample from a moment the rules were reloaded can differ).
    let mut counts: BTreeMap<i64, u32> = BTreeMap::new();
    for series in &mx.result {
        for (_, v) in &series.values {
            if let Ok(t) = v.parse::<f64>() {
                let ms = (t * 1000.0).round() as i64;
                *counts.entry(ms.rem_euclid(RECORDED_WINDOW_MS)).or_default() += 1;
            }
        }
    }
    Ok(counts
        .into_iter()
        .max_by_key(|(o, n)| (*n, -o))
        .map(|(o, _)| o))
}

/// The shift of the recorded queries' evaluation times for evaluations `offset` ms into each
/// minute: a row ending at `ts` covers `(ts − step, ts]`; the recorded sample at `ts + offset`
/// covers `(ts − 1 min + offset, ts + offset]`, the one before it `(ts − 2 min + offset,
/// ts − 1 min + offset]`. The row takes the one that overlaps it more: evaluated `offset` later
/// when that is at most half a minute (the answers' times are moved back by as much), else at
/// `ts` itself.
fn recorded_shift(offset_ms: i64) -> i64 {
    if offset_ms <= RECORDED_WINDOW_MS / 2 {
        offset_ms
    } else {
        0
    }
}
