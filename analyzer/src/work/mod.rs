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
//! The user's own counters (`--work-metrics FILE`) are declared in [`declared`]. A Slurm job's
//! work (`tessera job`) is read as [`SpanWork`]s from counters labelled [`JOB_LABEL`] and joined
//! to the job's own rows by `crate::jobs::work`.
//!
//! Pure over frames and values (but for [`declared::load`] reading its file). What it does not
//! do: query Prometheus (`ingest::prometheus` does), name workloads beyond their pods, or judge
//! a change (the report does).

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::*;
use serde::Serialize;

use crate::frames::Frames;
use crate::frames::columns::ts_ms;

pub mod declared;
pub use declared::WorkMetric;

const HOUR_MS: i64 = 3_600_000;

/// The label that names a Slurm job on its work counter's series (`tessera job`, docs/work.md
/// "Slurm jobs"): a Pushgateway grouping key or a textfile collector's label.
pub const JOB_LABEL: &str = "slurm_job_id";

/// The work a Slurm job counted in one of its runs, in one unit (`tessera job`).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanWork {
    pub unit: String,
    /// The run, `(start, end)` unix ms.
    pub run: (i64, i64),
    pub amount: f64,
}

/// The work one pod counted in one hour, in one unit.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkRow {
    pub namespace: String,
    pub pod: String,
    /// `tokens`, `requests`, `inferences`, or a user's.
    pub unit: String,
    /// The model the counter names (vLLM's and SGLang's `model_name`, Triton's `model`); `None`
    /// for a counter without one (TGI's).
    pub model: Option<String>,
    /// The end of the hour, unix ms (a multiple of an hour).
    pub hour_end_ms: i64,
    pub amount: f64,
}

/// What a pod held in one hour: GPU-hours, and the energy of those devices (`None` where any
/// row of them lacks it, or for MIG instances, whose energy is the GPU's).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HeldHour {
    pub gpu_hours: f64,
    pub kwh: Option<f64>,
}

/// What each pod held per (namespace, pod, hour end, unix ms).
pub type Held = BTreeMap<(String, String, i64), HeldHour>;

/// Adds `h` to `held`'s entry at `key` (energy stays known only where both are).
pub fn add(held: &mut Held, key: (String, String, i64), h: HeldHour) {
    match held.get_mut(&key) {
        None => {
            held.insert(key, h);
        }
        Some(e) => {
            e.gpu_hours += h.gpu_hours;
            e.kwh = e.kwh.zip(h.kwh).map(|(a, b)| a + b);
        }
    }
}

/// What the figures are priced with and the hour of week is read in.
#[derive(Debug, Clone)]
pub struct WorkContext {
    pub gpu_hour_price: f64,
    pub kwh_price: f64,
    pub tz: chrono_tz::Tz,
}

/// One pod's (or team's) work of one unit over the hours both were known.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkFigure {
    pub namespace: String,
    /// `null` for a team's and a workload's figure.
    pub pod: Option<String>,
    /// The pod's workload ([`workload_of`]); `null` for a team's figure.
    pub workload: Option<String>,
    /// A model's figure: the model the counters name; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub unit: String,
    pub work: f64,
    pub gpu_hours: f64,
    /// `work / gpu_hours`; `null` without GPU-hours.
    pub per_gpu_hour: Option<f64>,
    /// The energy of the devices in the hours counted; `null` where unknown (MIG instances,
    /// sources without energy).
    pub kwh: Option<f64>,
    pub per_kwh: Option<f64>,
    /// GPU-hours × the GPU-hour price, plus kWh × the kWh price where the energy is known.
    pub cost: f64,
    /// Work per unit of the report's currency.
    pub per_cost: Option<f64>,
    /// The hours counted.
    pub hours: u32,
    /// A team's work per GPU-hour per hour of the week in the report's time zone (168 slots,
    /// Monday 00:00 first; `null` for a slot without a counted hour); absent for a pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hour_of_week: Option<Vec<Option<f64>>>,
}

/// The report's section: per team, workload and pod (each per unit), and the pods that held
/// GPUs without any work metric.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkSummary {
    pub teams: Vec<WorkFigure>,
    /// Replicas summed: the pods of one workload ([`workload_of`]).
    pub workloads: Vec<WorkFigure>,
    /// Per team and model (the counters' model label), over the hours its pods served that
    /// model alone (a pod's hour serving several models cannot split its GPU time: left out).
    pub models: Vec<WorkFigure>,
    pub pods: Vec<WorkFigure>,
    /// `namespace/pod` of pods that held GPUs in the range and counted no work.
    pub no_work_metric: Vec<String>,
    /// The user's own counters read beside the built-in ones (`--work-metrics`); absent when
    /// none was declared.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub declared: Vec<WorkMetric>,
}

/// The GPU-hours each pod held per hour in one partition: whole GPUs (gpu rows with one holder,
/// of GPUs without MIG instance rows) and MIG instances (mig rows with a holder, by their share
/// of the GPU: a `3g.40gb` hour is 3/7 of a GPU-hour), each device's row length counted once. A device several pods hold (time-slicing) names none of them: its
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
        let energy = if schema.get("energy_delta_joules").is_some() {
            col("energy_delta_joules").cast(DataType::Float64)
        } else {
            lit(NULL).cast(DataType::Float64)
        };
        // A MIG instance's hours count by its share of the GPU (its compute slices of 7).
        let profile = if !whole && schema.get("profile").is_some() {
            col("profile").cast(DataType::String)
        } else {
            lit(NULL).cast(DataType::String)
        };
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
                profile.alias("profile"),
            ])
            .agg([
                col("interval_ms").cast(DataType::Int64).sum().alias("ms"),
                energy.clone().sum().alias("j"),
                energy.null_count().cast(DataType::Int64).alias("j_nulls"),
            ])
            .collect()?;
        let (ns, pod) = (df.column("ns")?.str()?, df.column("pod")?.str()?);
        let (hour, ms) = (df.column("hour")?.i64()?, df.column("ms")?.i64()?);
        let (j, nulls) = (df.column("j")?.f64()?, df.column("j_nulls")?.i64()?);
        let profile = df.column("profile")?.str()?;
        for i in 0..df.height() {
            if let (Some(n), Some(p), Some(h), Some(m)) =
                (ns.get(i), pod.get(i), hour.get(i), ms.get(i))
            {
                let kwh = (whole && nulls.get(i) == Some(0))
                    .then(|| j.get(i))
                    .flatten()
                    .filter(|j| j.is_finite() && *j >= 0.0)
                    .map(|j| j / 3.6e6);
                let share = crate::frames::mig_profile_share(profile.get(i));
                let gpu_hours = m.max(0) as f64 / HOUR_MS as f64 * share;
                add(
                    &mut out,
                    (n.to_string(), p.to_string(), h),
                    HeldHour { gpu_hours, kwh },
                );
            }
        }
    }
    Ok(out)
}

/// Running sums of one figure: work, GPU-hours, kWh (`None` once an hour lacks it), hours.
#[derive(Debug, Clone, Default)]
struct Sums {
    work: f64,
    gpu_hours: f64,
    kwh: Option<f64>,
    hours: BTreeSet<i64>,
    /// Per hour of week: work, GPU-hours.
    week: BTreeMap<usize, (f64, f64)>,
}

impl Sums {
    fn add(&mut self, work: f64, h: HeldHour, hour_end: i64, slot: usize) {
        let first = self.hours.is_empty();
        self.work += work;
        self.gpu_hours += h.gpu_hours;
        // The hour's energy once per hour (a team's several pods add theirs).
        self.kwh = if first {
            h.kwh
        } else {
            self.kwh.zip(h.kwh).map(|(a, b)| a + b)
        };
        self.hours.insert(hour_end);
        let w = self.week.entry(slot).or_default();
        w.0 += work;
        w.1 += h.gpu_hours;
    }
}

fn ratio(a: f64, b: f64, decimals: i32) -> Option<f64> {
    let p = 10f64.powi(decimals);
    (b > 0.0)
        .then(|| a / b)
        .filter(|v| v.is_finite())
        .map(|v| (v * p).round() / p)
}

/// The workload a pod belongs to, from the names Kubernetes' controllers give their pods (the
/// metrics carry no owner reference): a Deployment's `<name>-<ReplicaSet hash>-<suffix>`, a
/// StatefulSet's `<name>-<ordinal>`, a DaemonSet's or Job's `<name>-<suffix>` (the suffixes of
/// Kubernetes' safe alphabet); any other name is its own workload.
pub fn workload_of(pod: &str) -> String {
    let safe = |p: &str, lens: std::ops::RangeInclusive<usize>| {
        lens.contains(&p.len()) && p.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
    };
    let parts: Vec<&str> = pod.rsplitn(3, '-').collect();
    match parts.as_slice() {
        [suffix, hash, name] if safe(suffix, 5..=5) && safe(hash, 6..=10) && !name.is_empty() => {
            (*name).to_string()
        }
        [last, rest @ ..] if !rest.is_empty() => {
            let name = &pod[..pod.len() - last.len() - 1];
            if last.chars().all(|c| c.is_ascii_digit()) || safe(last, 5..=5) {
                name.to_string()
            } else {
                pod.to_string()
            }
        }
        _ => pod.to_string(),
    }
}

fn figure(
    namespace: &str,
    (pod, workload, model): (Option<&str>, Option<&str>, Option<&str>),
    unit: &str,
    s: &Sums,
    ctx: &WorkContext,
) -> WorkFigure {
    let r3 = |v: f64| (v * 1000.0).round() / 1000.0;
    let cost = s.gpu_hours * ctx.gpu_hour_price + s.kwh.map_or(0.0, |k| k * ctx.kwh_price);
    WorkFigure {
        namespace: namespace.to_string(),
        pod: pod.map(str::to_string),
        workload: workload.map(str::to_string),
        model: model.map(str::to_string),
        unit: unit.to_string(),
        work: r3(s.work),
        gpu_hours: r3(s.gpu_hours),
        per_gpu_hour: ratio(s.work, s.gpu_hours, 2),
        kwh: s.kwh.map(r3),
        per_kwh: s.kwh.and_then(|k| ratio(s.work, k, 2)),
        cost: (cost * 100.0).round() / 100.0,
        per_cost: ratio(s.work, cost, 2),
        hours: u32::try_from(s.hours.len()).unwrap_or(u32::MAX),
        hour_of_week: (workload.is_none() && model.is_none()).then(|| {
            (0..168)
                .map(|i| s.week.get(&i).and_then(|(w, g)| ratio(*w, *g, 2)))
                .collect()
        }),
    }
}

/// The hour-of-week slot (Monday 00:00 = 0) of the hour that ends at `hour_end` in `tz`.
fn slot(hour_end: i64, tz: chrono_tz::Tz) -> usize {
    use chrono::{Datelike, Timelike};
    let start = chrono::DateTime::from_timestamp_millis(hour_end - HOUR_MS)
        .unwrap_or_default()
        .with_timezone(&tz);
    start.weekday().num_days_from_monday() as usize * 24 + start.hour() as usize
}

/// Joins `rows` to `held` (see the module doc); `None` when there is no work row at all (the
/// source has no work metric: the report leaves the section out).
pub fn summarise(held: &Held, rows: &[WorkRow], ctx: &WorkContext) -> Option<WorkSummary> {
    if rows.is_empty() {
        return None;
    }
    // One amount per pod, unit and hour (a pod's models added), with the models counted.
    type Hour = (f64, BTreeMap<Option<String>, f64>);
    let mut by_hour: BTreeMap<(String, String, String, i64), Hour> = BTreeMap::new();
    let mut with_work: BTreeSet<(String, String)> = BTreeSet::new();
    for r in rows
        .iter()
        .filter(|r| r.amount.is_finite() && r.amount >= 0.0)
    {
        with_work.insert((r.namespace.clone(), r.pod.clone()));
        let e = by_hour
            .entry((
                r.namespace.clone(),
                r.pod.clone(),
                r.unit.clone(),
                r.hour_end_ms,
            ))
            .or_default();
        e.0 += r.amount;
        *e.1.entry(r.model.clone()).or_default() += r.amount;
    }
    let mut pods: BTreeMap<(String, String, String), Sums> = BTreeMap::new();
    let mut workloads: BTreeMap<(String, String, String), Sums> = BTreeMap::new();
    let mut models: BTreeMap<(String, String, String), Sums> = BTreeMap::new();
    let mut teams: BTreeMap<(String, String), Sums> = BTreeMap::new();
    for ((ns, pod, unit, hour), (amount, by_model)) in &by_hour {
        let key = (ns.clone(), pod.clone(), *hour);
        let Some(h) = held.get(&key).copied().filter(|h| h.gpu_hours > 0.0) else {
            continue;
        };
        let at = slot(*hour, ctx.tz);
        pods.entry((ns.clone(), pod.clone(), unit.clone()))
            .or_default()
            .add(*amount, h, *hour, at);
        workloads
            .entry((ns.clone(), workload_of(pod), unit.clone()))
            .or_default()
            .add(*amount, h, *hour, at);
        if let [(Some(model), _)] = by_model.iter().collect::<Vec<_>>().as_slice() {
            models
                .entry((ns.clone(), model.clone(), unit.clone()))
                .or_default()
                .add(*amount, h, *hour, at);
        }
        teams
            .entry((ns.clone(), unit.clone()))
            .or_default()
            .add(*amount, h, *hour, at);
    }
    let no_work: BTreeSet<String> = held
        .keys()
        .filter(|(n, p, _)| !with_work.contains(&(n.clone(), p.clone())))
        .map(|(n, p, _)| format!("{n}/{p}"))
        .collect();
    Some(WorkSummary {
        teams: teams
            .iter()
            .map(|((n, u), s)| figure(n, (None, None, None), u, s, ctx))
            .collect(),
        workloads: workloads
            .iter()
            .map(|((n, w, u), s)| figure(n, (None, Some(w), None), u, s, ctx))
            .collect(),
        models: models
            .iter()
            .map(|((n, m, u), s)| figure(n, (None, None, Some(m)), u, s, ctx))
            .collect(),
        pods: pods
            .iter()
            .map(|((n, p, u), s)| figure(n, (Some(p), Some(&workload_of(p)), None), u, s, ctx))
            .collect(),
        no_work_metric: no_work.into_iter().collect(),
        declared: Vec::new(),
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
    ctx: &WorkContext,
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
        summarise(&held, &rows, ctx)
            .map(|s| s.teams)
            .unwrap_or_default()
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
            model: None,
            hour_end_ms: hour * HOUR_MS,
            amount,
        }
    }

    #[test]
    fn models_count_the_hours_a_pod_served_one_model_and_a_pod_counts_its_gpu_once() {
        let mut held = Held::new();
        for pod in ["tri-0", "tri-1"] {
            for h in [1, 2] {
                held.insert(
                    ("ml".into(), pod.into(), h * HOUR_MS),
                    HeldHour {
                        gpu_hours: 1.0,
                        kwh: None,
                    },
                );
            }
        }
        let ctx = WorkContext {
            gpu_hour_price: 1.0,
            kwh_price: 0.0,
            tz: chrono_tz::Tz::UTC,
        };
        let m = |pod: &str, model: &str, hour: i64, amount: f64| WorkRow {
            model: Some(model.into()),
            ..row("ml", pod, "inferences", hour, amount)
        };
        // tri-0 serves `embed` alone; tri-1 serves `embed` and `rank` in hour 1, `rank` in hour 2.
        let rows = [
            m("tri-0", "embed", 1, 100.0),
            m("tri-0", "embed", 2, 300.0),
            m("tri-1", "embed", 1, 10.0),
            m("tri-1", "rank", 1, 20.0),
            m("tri-1", "rank", 2, 50.0),
        ];
        let s = summarise(&held, &rows, &ctx).unwrap();
        let pod = |p: &str| s.pods.iter().find(|x| x.pod.as_deref() == Some(p)).unwrap();
        // tri-1's two models in hour 1 add up over its one GPU-hour, counted once.
        assert_eq!(pod("tri-1").work, 80.0);
        assert_eq!(pod("tri-1").gpu_hours, 2.0);
        let model = |name: &str| {
            s.models
                .iter()
                .find(|x| x.model.as_deref() == Some(name))
                .unwrap()
        };
        // embed: tri-0's two hours; tri-1's shared hour 1 is left out.
        assert_eq!(model("embed").work, 400.0);
        assert_eq!(model("embed").per_gpu_hour, Some(200.0));
        // rank: tri-1's hour 2 alone.
        assert_eq!(model("rank").gpu_hours, 1.0);
        assert_eq!(model("rank").per_gpu_hour, Some(50.0));
        assert!(model("rank").hour_of_week.is_none());
        assert_eq!(s.teams[0].gpu_hours, 4.0);
    }

    #[test]
    fn work_is_joined_hour_by_hour_and_unknown_stays_out() {
        let mut held = Held::new();
        // chat-0: one GPU in hours 1 and 2; chat-1: two GPUs in hour 1; train-0: one GPU, no
        // work metric.
        for (pod, h, g) in [("chat-0", 1, 1.0), ("chat-0", 2, 1.0), ("chat-1", 1, 2.0)] {
            held.insert(
                ("chat".into(), pod.into(), h * HOUR_MS),
                HeldHour {
                    gpu_hours: g,
                    kwh: Some(0.7 * g),
                },
            );
        }
        held.insert(
            ("train".into(), "train-0".into(), HOUR_MS),
            HeldHour {
                gpu_hours: 1.0,
                kwh: None,
            },
        );
        let ctx = WorkContext {
            gpu_hour_price: 2.0,
            kwh_price: 0.1,
            tz: chrono_tz::Tz::UTC,
        };
        let rows = [
            row("chat", "chat-0", "tokens", 1, 36_000.0),
            // Hour 2 of chat-0 has no sample (a scrape gap): its GPU-hour is not counted.
            row("chat", "chat-1", "tokens", 1, 72_000.0),
            // Work in an hour without a held GPU: left out.
            row("chat", "chat-1", "tokens", 3, 99_999.0),
            row("chat", "chat-0", "requests", 1, 1_800.0),
        ];
        let s = summarise(&held, &rows, &ctx).unwrap();
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
        // Energy: 0.7 kWh per GPU-hour here; cost: 2 a GPU-hour + 0.1 a kWh.
        let t = team("tokens");
        assert_eq!(t.kwh, Some(2.1));
        assert_eq!(
            t.per_kwh,
            Some(108_000.0 / 2.1_f64).map(|v| (v * 100.0).round() / 100.0)
        );
        assert_eq!(t.cost, 6.21);
        // Hour 1 ends at 01:00 UTC on 1970-01-01, a Thursday: slot 3 × 24 + 0.
        let week = t.hour_of_week.as_ref().unwrap();
        assert_eq!(week.len(), 168);
        assert_eq!(week[72], Some(36_000.0));
        assert_eq!(week.iter().flatten().count(), 1);
        assert!(pod("chat-0").hour_of_week.is_none());
        // chat-0 and chat-1 are replicas of the StatefulSet chat: summed.
        let w = &s.workloads.iter().find(|w| w.unit == "tokens").unwrap();
        assert_eq!((w.workload.as_deref(), w.gpu_hours), (Some("chat"), 3.0));
        for (pod, workload) in [
            ("chat-api-7d9f8c5b6-x2k4p", "chat-api"),
            ("chat-api-7d9f8c5b6-x2k4", "chat-api-7d9f8c5b6-x2k4"),
            ("trainer-0", "trainer"),
            ("node-agent-q7k2x", "node-agent"),
            ("notebook", "notebook"),
            ("my-pod-name", "my-pod-name"),
        ] {
            assert_eq!(workload_of(pod), workload, "{pod}");
        }
        assert!(summarise(&held, &[], &ctx).is_none());
        // Before hour 1, after hour 2: chat-0's tokens halve on the same GPU.
        let rows = [
            row("chat", "chat-0", "tokens", 1, 36_000.0),
            row("chat", "chat-0", "tokens", 2, 18_000.0),
        ];
        let c = compare(&held, &rows, (0, HOUR_MS), (HOUR_MS, 2 * HOUR_MS), &ctx);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].before, c[0].after), (Some(36_000.0), Some(18_000.0)));
        assert_eq!(c[0].change, Some(-0.5));
        assert!(c[0].flagged);
        let kept = [
            row("chat", "chat-0", "tokens", 1, 36_000.0),
            row("chat", "chat-0", "tokens", 2, 35_000.0),
        ];
        assert!(!compare(&held, &kept, (0, HOUR_MS), (HOUR_MS, 2 * HOUR_MS), &ctx)[0].flagged);
    }
}
