//! The work the serving frameworks count (docs/work.md), read through `/api/v1/query_range`:
//! per pod and unit, the counter's `increase` over each whole UTC hour of the range (step 1 h,
//! evaluated at the hours' ends), for the built-in metrics of vLLM, SGLang, TGI and Triton
//! ([`WORK_METRICS`], the same list as `rules/tessera-work.rules.yml`), as
//! [`crate::work::WorkRow`]s. The series need `namespace` and `pod` labels (kube-prometheus'
//! target labels). A server without any of these metrics answers no series: no rows. The user's
//! own counters (`--work-metrics`, [`crate::work::declared`]) are read the same way, each with
//! its unit, after the built-in ones of the same unit.
//!
//! What it does not do: join the work to GPUs (`crate::work` does), parse the declared counters'
//! file, or read Slurm jobs' work.

use super::client::{Client, Matrix, err, parse};
use super::options::PrometheusOptions;
use crate::ingest::IngestError;
use crate::work::{WorkMetric, WorkRow};

/// The built-in work counters and their units (docs/work.md's table).
pub const WORK_METRICS: &[(&str, &str)] = &[
    ("vllm:generation_tokens_total", "tokens"),
    ("sglang:generation_tokens_total", "tokens"),
    ("tgi_request_generated_tokens_sum", "tokens"),
    ("vllm:request_success_total", "requests"),
    ("tgi_request_success", "requests"),
    ("nv_inference_request_success", "requests"),
    ("nv_inference_count", "inferences"),
];

const HOUR_MS: i64 = 3_600_000;
/// The most hours asked in one query (Prometheus' default limit is 11,000 points a series).
const MAX_POINTS: i64 = 10_000;

/// Every counter with its unit: the built-in ones, then the declared ones.
fn counters(declared: &[WorkMetric]) -> Vec<(&str, &str)> {
    WORK_METRICS
        .iter()
        .copied()
        .chain(
            declared
                .iter()
                .map(|m| (m.counter.as_str(), m.unit.as_str())),
        )
        .collect()
}

/// The PromQL of one unit: its counters' hourly increase per pod and model (`model`, or vLLM's
/// and SGLang's `model_name` copied into it), the first counter that a pod counts winning (a pod
/// runs one server; a declared counter of a built-in unit comes after the built-in ones).
fn promql(unit: &str, declared: &[WorkMetric]) -> String {
    counters(declared)
        .iter()
        .filter(|(_, u)| *u == unit)
        .map(|(m, _)| {
            format!(
                "sum by (namespace, pod, model) (label_replace(increase({m}[1h]), \"model\", \"$1\", \"model_name\", \"(.+)\"))"
            )
        })
        .collect::<Vec<_>>()
        .join(" or on (namespace, pod) ")
}

/// The work of every pod in the whole hours of `[since, until)` (unix ms) on the server at
/// `url`, with the source's options, of the built-in counters and the `declared` ones.
pub fn work_rows(
    url: &str,
    opts: &PrometheusOptions,
    (since, until): (i64, i64),
    declared: &[WorkMetric],
) -> Result<Vec<WorkRow>, IngestError> {
    let spec = format!("prometheus:{url}");
    let mut client = Client::new(&spec, url, opts)?;
    // The ends of the whole hours inside the range.
    let first = (since + HOUR_MS - 1).div_euclid(HOUR_MS) * HOUR_MS + HOUR_MS;
    let last = until.div_euclid(HOUR_MS) * HOUR_MS;
    let mut out = Vec::new();
    if first > last {
        return Ok(out);
    }
    let mut units: Vec<&str> = Vec::new();
    for (_, u) in counters(declared) {
        if !units.contains(&u) {
            units.push(u);
        }
    }
    for unit in units {
        let q = promql(unit, declared);
        let mut start = first;
        while start <= last {
            let end = (start + (MAX_POINTS - 1) * HOUR_MS).min(last);
            let what = format!("query {q:?}");
            let (data, _warnings) = client.get(
                "/api/v1/query_range",
                &[
                    ("query", q.clone()),
                    ("start", format!("{:.3}", start as f64 / 1000.0)),
                    ("end", format!("{:.3}", end as f64 / 1000.0)),
                    ("step", "3600".to_string()),
                ],
                &what,
            )?;
            let m: Matrix =
                parse(&data).map_err(|e| err(&spec, format!("{what}: bad answer: {e}")))?;
            for s in m.result {
                let (Some(ns), Some(pod)) = (s.metric.get("namespace"), s.metric.get("pod")) else {
                    continue;
                };
                for (t, v) in &s.values {
                    let Ok(amount) = v.parse::<f64>() else {
                        continue;
                    };
                    if !amount.is_finite() || amount < 0.0 {
                        continue;
                    }
                    out.push(WorkRow {
                        namespace: ns.clone(),
                        pod: pod.clone(),
                        unit: unit.to_string(),
                        model: s.metric.get("model").filter(|m| !m.is_empty()).cloned(),
                        hour_end_ms: (t * 1000.0).round() as i64,
                        amount,
                    });
                }
            }
            start = end + HOUR_MS;
        }
    }
    Ok(out)
}
