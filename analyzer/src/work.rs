//! Work per GPU-hour (docs/work.md): the work the serving frameworks count (tokens, requests,
//! inferences: [`WorkRow`]s, per pod, unit and hour, read by the `prometheus:` source) joined to
//! the GPU-hours the same pods held in the same hours ([`held_hours`], from the frames'
//! `holder_namespace`/`holder_pod`), per pod and per team (namespace) and unit ([`summarise`]).
//!
//! The join counts an hour of a pod and unit only where both are known: work without a held GPU
//! (the pod's GPU is shared, or its holder unknown) and held GPUs without a work sample (a
//! scrape gap, no work metric) are left out, never counted as 0; a pod with GPU-hours and no
//! work of any unit is listed as "no work metric". Units are never added together; a
//! tensor-parallel pod's work is divided by all its GPUs (its GPU-hours add up); replicas of a
//! team add up.
//!
//! Pure over frames and values. What it does not do: query Prometheus (`ingest::prometheus`
//! does), name workloads beyond their pods, or judge a change (the report does).

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::*;
use serde::Serialize;

use crate::frames::Frames;
use crate::frames::columns::ts_ms;

const HOUR_MS: i64 = 3_600_000;

/// The work one pod counted in one hour, in one unit.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkRow {
    pub namespace: String,
    pub pod: String,
    /// `tokens`, `requests`, `inferences`, or a user's.
    pub unit: String,
    /// The end of the hour, unix ms (a multiple of an hour).
    pub hour_end_ms: i64,
    pub amount: f64,
}

/// GPU-hours held per (namespace, pod, hour end, unix ms).
pub type Held = BTreeMap<(String, String, i64), f64>;

/// One pod's (or team's) work of one unit over the hours both were known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkFigure {
    pub namespace: String,
    /// `null` for a team's figure.
    pub pod: Option<String>,
    pub unit: String,
    pub work: f64,
    pub gpu_hours: f64,
    /// `work / gpu_hours`; `null` without GPU-hours.
    pub per_gpu_hour: Option<f64>,
    /// The hours counted.
    pub hours: u32,
}

/// The report's section: per team and unit, per pod and unit, and the pods that held GPUs
/// without any work metric.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkSummary {
    pub teams: Vec<WorkFigure>,
    pub pods: Vec<WorkFigure>,
    /// `namespace/pod` of pods that held GPUs in the range and counted no work.
    pub no_work_metric: Vec<String>,
}

/// The GPU-hours each pod held per hour in one partition: whole GPUs (gpu rows with one holder,
/// of GPUs without MIG instance rows) and MIG instances (mig rows with a holder), each device's
/// row length counted once. A device several pods hold (time-slicing) names none of them: its
/// hours are left out.
pub fn held_hours(frames: &Frames) -> Result<Held, PolarsError> {
    let mut out = Held::new();
    let mut mig = frames.mig.clone();
    let instances = if mig.collect_schema()?.get("uuid").is_some() {
        Some(
            mig.select([col("node"), col("uuid")])
                .unique(None, UniqueKeepStrategy::Any)
                .with_column(lit(true).alias("_mig")),
        )
    } else {
        None
    };
    for (lf, whole) in [(&frames.gpu, true), (&frames.mig, false)] {
        let mut lf = lf.clone();
        let schema = lf.collect_schema()?;
        if ["holder_namespace", "holder_pod", "interval_ms"]
            .iter()
            .any(|c| schema.get(c).is_none())
        {
            continue;
        }
        if whole {
            if let Some(inst) = &instances {
                lf = lf
                    .join(
                        inst.clone(),
                        [col("node"), col("uuid")],
                        [col("node"), col("uuid")],
                        JoinArgs::new(JoinType::Left),
                    )
                    .filter(col("_mig").is_null());
            }
            if schema.get("holders").is_some() {
                lf = lf.filter(col("holders").cast(DataType::Int64).eq(lit(1i64)));
            }
        }
        let hour_end = (((ts_ms() - lit(1i64)) / lit(HOUR_MS)) + lit(1i64)) * lit(HOUR_MS);
        let df = lf
            .filter(
                col("holder_namespace")
                    .is_not_null()
                    .and(col("holder_pod").is_not_null()),
            )
            .group_by([
                col("holder_namespace").cast(DataType::String).alias("ns"),
                col("holder_pod").cast(DataType::String).alias("pod"),
                hour_end.alias("hour"),
            ])
            .agg([col("interval_ms").cast(DataType::Int64).sum().alias("ms")])
            .collect()?;
        let (ns, pod) = (df.column("ns")?.str()?, df.column("pod")?.str()?);
        let (hour, ms) = (df.column("hour")?.i64()?, df.column("ms")?.i64()?);
        for i in 0..df.height() {
            if let (Some(n), Some(p), Some(h), Some(m)) =
                (ns.get(i), pod.get(i), hour.get(i), ms.get(i))
            {
                *out.entry((n.to_string(), p.to_string(), h)).or_default() +=
                    m.max(0) as f64 / HOUR_MS as f64;
            }
        }
    }
    Ok(out)
}

fn figure(namespace: &str, pod: Option<&str>, unit: &str, sums: (f64, f64, u32)) -> WorkFigure {
    let (work, gpu_hours, hours) = sums;
    WorkFigure {
        namespace: namespace.to_string(),
        pod: pod.map(str::to_string),
        unit: unit.to_string(),
        work: (work * 1000.0).round() / 1000.0,
        gpu_hours: (gpu_hours * 1000.0).round() / 1000.0,
        per_gpu_hour: (gpu_hours > 0.0)
            .then(|| work / gpu_hours)
            .filter(|v| v.is_finite())
            .map(|v| (v * 100.0).round() / 100.0),
        hours,
    }
}

/// Joins `rows` to `held` (see the module doc); `None` when there is no work row at all (the
/// source has no work metric: the report leaves the section out).
pub fn summarise(held: &Held, rows: &[WorkRow]) -> Option<WorkSummary> {
    if rows.is_empty() {
        return None;
    }
    let mut pods: BTreeMap<(String, String, String), (f64, f64, u32)> = BTreeMap::new();
    let mut teams: BTreeMap<(String, String), (f64, f64, u32)> = BTreeMap::new();
    let mut team_hours: BTreeMap<(String, String), BTreeSet<i64>> = BTreeMap::new();
    let mut with_work: BTreeSet<(String, String)> = BTreeSet::new();
    for r in rows
        .iter()
        .filter(|r| r.amount.is_finite() && r.amount >= 0.0)
    {
        with_work.insert((r.namespace.clone(), r.pod.clone()));
        let key = (r.namespace.clone(), r.pod.clone(), r.hour_end_ms);
        let Some(gh) = held.get(&key).copied().filter(|g| *g > 0.0) else {
            continue;
        };
        let p = pods
            .entry((r.namespace.clone(), r.pod.clone(), r.unit.clone()))
            .or_default();
        p.0 += r.amount;
        p.1 += gh;
        p.2 += 1;
        let t = teams
            .entry((r.namespace.clone(), r.unit.clone()))
            .or_default();
        t.0 += r.amount;
        t.1 += gh;
        team_hours
            .entry((r.namespace.clone(), r.unit.clone()))
            .or_default()
            .insert(r.hour_end_ms);
    }
    for (k, t) in &mut teams {
        t.2 = u32::try_from(team_hours.get(k).map_or(0, BTreeSet::len)).unwrap_or(u32::MAX);
    }
    let no_work: BTreeSet<String> = held
        .keys()
        .filter(|(n, p, _)| !with_work.contains(&(n.clone(), p.clone())))
        .map(|(n, p, _)| format!("{n}/{p}"))
        .collect();
    Some(WorkSummary {
        teams: teams
            .into_iter()
            .map(|((n, u), s)| figure(&n, None, &u, s))
            .collect(),
        pods: pods
            .into_iter()
            .map(|((n, p, u), s)| figure(&n, Some(&p), &u, s))
            .collect(),
        no_work_metric: no_work.into_iter().collect(),
    })
}

/// A fall of work per GPU-hour beyond this share, after a change, flags the change: it freed
/// GPUs (or did not) at the cost of throughput, and is not a plain saving.
pub const DROP_FLAGGED: f64 = 0.3;

/// One team's work per GPU-hour of one unit before and after a change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkChange {
    pub team: String,
    pub unit: String,
    /// `null` where the period has no hour with both work and GPUs known.
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// `after / before − 1`; `null` when either is unknown or `before` is 0.
    pub change: Option<f64>,
    /// Fell by more than [`DROP_FLAGGED`].
    pub flagged: bool,
}

/// Per team and unit, work per GPU-hour over the hours ending in `(before.0, before.1]` and in
/// `(after.0, after.1]` (unix ms).
pub fn compare(
    held: &Held,
    rows: &[WorkRow],
    before: (i64, i64),
    after: (i64, i64),
) -> Vec<WorkChange> {
    let within = |(a, b): (i64, i64)| {
        let held: Held = held
            .iter()
            .filter(|(k, _)| k.2 > a && k.2 <= b)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let rows: Vec<WorkRow> = rows
            .iter()
            .filter(|r| r.hour_end_ms > a && r.hour_end_ms <= b)
            .cloned()
            .collect();
        summarise(&held, &rows).map(|s| s.teams).unwrap_or_default()
    };
    let (b, a) = (within(before), within(after));
    let mut keys: BTreeSet<(String, String)> = BTreeSet::new();
    keys.extend(
        b.iter()
            .chain(&a)
            .map(|f| (f.namespace.clone(), f.unit.clone())),
    );
    keys.into_iter()
        .map(|(team, unit)| {
            let of = |v: &[WorkFigure]| {
                v.iter()
                    .find(|f| f.namespace == team && f.unit == unit)
                    .and_then(|f| f.per_gpu_hour)
            };
            let (before, after) = (of(&b), of(&a));
            let change = match (before, after) {
                (Some(x), Some(y)) if x > 0.0 => Some(((y / x - 1.0) * 1000.0).round() / 1000.0),
                _ => None,
            };
            WorkChange {
                team,
                unit,
                before,
                after,
                change,
                flagged: change.is_some_and(|c| c < -DROP_FLAGGED),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ns: &str, pod: &str, unit: &str, hour: i64, amount: f64) -> WorkRow {
        WorkRow {
            namespace: ns.into(),
            pod: pod.into(),
            unit: unit.into(),
            hour_end_ms: hour * HOUR_MS,
            amount,
        }
    }

    #[test]
    fn work_is_joined_hour_by_hour_and_unknown_stays_out() {
        let mut held = Held::new();
        // chat-0: one GPU in hours 1 and 2; chat-1: two GPUs in hour 1; train-0: one GPU, no
        // work metric.
        for (pod, h, g) in [("chat-0", 1, 1.0), ("chat-0", 2, 1.0), ("chat-1", 1, 2.0)] {
            held.insert(("chat".into(), pod.into(), h * HOUR_MS), g);
        }
        held.insert(("train".into(), "train-0".into(), HOUR_MS), 1.0);
        let rows = [
            row("chat", "chat-0", "tokens", 1, 36_000.0),
            // Hour 2 of chat-0 has no sample (a scrape gap): its GPU-hour is not counted.
            row("chat", "chat-1", "tokens", 1, 72_000.0),
            // Work in an hour without a held GPU: left out.
            row("chat", "chat-1", "tokens", 3, 99_999.0),
            row("chat", "chat-0", "requests", 1, 1_800.0),
        ];
        let s = summarise(&held, &rows).unwrap();
        let team = |u: &str| s.teams.iter().find(|t| t.unit == u).unwrap();
        assert_eq!(team("tokens").per_gpu_hour, Some(36_000.0));
        assert_eq!(team("tokens").gpu_hours, 3.0);
        assert_eq!(team("tokens").hours, 1);
        assert_eq!(team("requests").per_gpu_hour, Some(1_800.0));
        let pod = |p: &str| {
            s.pods
                .iter()
                .find(|x| x.pod.as_deref() == Some(p) && x.unit == "tokens")
                .unwrap()
        };
        assert_eq!(pod("chat-0").per_gpu_hour, Some(36_000.0));
        assert_eq!(pod("chat-1").per_gpu_hour, Some(36_000.0), "two GPUs");
        assert_eq!(s.no_work_metric, ["train/train-0"]);
        assert!(summarise(&held, &[]).is_none());
        // Before hour 1, after hour 2: chat-0's tokens halve on the same GPU.
        let rows = [
            row("chat", "chat-0", "tokens", 1, 36_000.0),
            row("chat", "chat-0", "tokens", 2, 18_000.0),
        ];
        let c = compare(&held, &rows, (0, HOUR_MS), (HOUR_MS, 2 * HOUR_MS));
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].before, c[0].after), (Some(36_000.0), Some(18_000.0)));
        assert_eq!(c[0].change, Some(-0.5));
        assert!(c[0].flagged);
        let kept = [
            row("chat", "chat-0", "tokens", 1, 36_000.0),
            row("chat", "chat-0", "tokens", 2, 35_000.0),
        ];
        assert!(!compare(&held, &kept, (0, HOUR_MS), (HOUR_MS, 2 * HOUR_MS))[0].flagged);
    }
}
