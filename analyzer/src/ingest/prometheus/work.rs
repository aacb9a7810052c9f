//! The work the serving frameworks count (docs/work.md), read through `/api/v1/query_range`:
//! per pod and unit, the counter's `increase` over each whole UTC hour of the range (step 1 h,
//! evaluated at the hours' ends), for the built-in metrics of vLLM, SGLang, TGI and Triton
//! ([`WORK_METRICS`], the same list as `rules/tessera-work.rules.yml`), as
//! [`crate::work::WorkRow`]s. The series need `namespace` and `pod` labels (kube-prometheus'
//! target labels). A server without any of these metrics answers no series: no rows. The user's
//! own counters (`--work-metrics`, [`crate::work::declared`]) are read the same way, each with
//! its unit, after the built-in ones of the same unit.
//!
//! A Slurm job's work ([`job_work`], for `tessera job`) is read from the same counters restricted
//! to the job's label (`slurm_job_id="ID"`, [`crate::work::JOB_LABEL`]: a Pushgateway grouping
//! key or a textfile collector's label), as each counter's `increase` over each of the job's
//! runs (one instant query per unit and run, at the run's end, over the run's length).
//!
//! What it does not do: join the work to GPUs (`crate::work` and `crate::jobs` do), parse the
//! declared counters' file, or find a job's runs.

use super::client::{Client, Matrix, err, parse};
use super::options::PrometheusOptions;
use crate::ingest::IngestError;
use crate::work::{JOB_LABEL, SpanWork, WorkMetric, WorkRow};

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
/// `url`, with the source's options, of the built-in counters and the `declared` ones; and a
/// warning for each unit the server would not answer (that unit's work is left out, the others
/// kept: one rejected declared counter does not cost the built-in figures).
pub fn work_rows(
    url: &str,
    opts: &PrometheusOptions,
    (since, until): (i64, i64),
    declared: &[WorkMetric],
) -> Result<(Vec<WorkRow>, Vec<String>), IngestError> {
    let spec = format!("prometheus:{url}");
    let mut client = Client::new(&spec, url, opts)?;
    // The ends of the whole hours inside the range.
    let first = (since + HOUR_MS - 1).div_euclid(HOUR_MS) * HOUR_MS + HOUR_MS;
    let last = until.div_euclid(HOUR_MS) * HOUR_MS;
    let (mut out, mut warnings) = (Vec::new(), Vec::new());
    if first > last {
        return Ok((out, warnings));
    }
    let mut units: Vec<&str> = Vec::new();
    for (_, u) in counters(declared) {
        if !units.contains(&u) {
            units.push(u);
        }
    }
    for unit in units {
        match unit_rows(
            &mut client,
            &spec,
            unit,
            &promql(unit, declared),
            (first, last),
        ) {
            Ok(rows) => out.extend(rows),
            Err(e) => warnings.push(format!("{unit} left out: {e}")),
        }
    }
    Ok((out, warnings))
}

/// One unit's rows: `q`'s hourly values at the hour ends `first..=last`.
fn unit_rows(
    client: &mut Client,
    spec: &str,
    unit: &str,
    q: &str,
    (first, last): (i64, i64),
) -> Result<Vec<WorkRow>, IngestError> {
    let mut out = Vec::new();
    let mut start = first;
    while start <= last {
        let end = (start + (MAX_POINTS - 1) * HOUR_MS).min(last);
        let what = format!("query {q:?}");
        let (data, _warnings) = client.get(
            "/api/v1/query_range",
            &[
                ("query", q.to_string()),
                ("start", format!("{:.3}", start as f64 / 1000.0)),
                ("end", format!("{:.3}", end as f64 / 1000.0)),
                ("step", "3600".to_string()),
            ],
            &what,
        )?;
        let m: Matrix = parse(&data).map_err(|e| err(spec, format!("{what}: bad answer: {e}")))?;
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
    Ok(out)
}

#[derive(serde::Deserialize)]
struct Vector {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Sample>,
}

#[derive(serde::Deserialize)]
struct Sample {
    value: (f64, String),
}

/// `s` as a PromQL double-quoted string.
fn promql_string(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `selector` (a metric name, `name{…}` or `{…}`, as [`crate::work::declared::check_selector`]
/// accepts) with the matcher `matcher` added.
fn with_matcher(selector: &str, matcher: &str) -> String {
    let s = selector.trim();
    match (s.find('{'), s.strip_suffix('}')) {
        (Some(open), Some(body)) => {
            let inner = body[open + 1..].trim_end();
            let sep = if inner.trim().is_empty() || inner.ends_with(',') {
                ""
            } else {
                ","
            };
            format!("{body}{sep}{matcher}}}")
        }
        _ => format!("{s}{{{matcher}}}"),
    }
}

/// The PromQL of one unit's work of job `job` over a window of `window_ms`: the counters of
/// the unit restricted to the job's label, each series' `increase` summed, the first counter
/// that the job counts winning (as [`promql`]).
fn job_promql(unit: &str, declared: &[WorkMetric], job: &str, window_ms: i64) -> String {
    let matcher = format!("{JOB_LABEL}={}", promql_string(job));
    counters(declared)
        .iter()
        .filter(|(_, u)| *u == unit)
        .map(|(m, _)| {
            format!(
                "sum(increase({}[{window_ms}ms]))",
                with_matcher(m, &matcher)
            )
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

/// The work job `job` counted in each of its `runs` (`(start, end)` unix ms) on the server at
/// `url`: per unit and run, the `increase` of the built-in and `declared` counters whose series
/// carry `slurm_job_id="job"`, over the run (Prometheus' `increase`: counter resets handled,
/// the edges extrapolated from the samples). A unit and run without any such series is absent,
/// never 0.
pub fn job_work(
    url: &str,
    opts: &PrometheusOptions,
    job: &str,
    runs: &[(i64, i64)],
    declared: &[WorkMetric],
) -> Result<Vec<SpanWork>, IngestError> {
    let spec = format!("prometheus:{url}");
    let mut client = Client::new(&spec, url, opts)?;
    let mut units: Vec<&str> = Vec::new();
    for (_, u) in counters(declared) {
        if !units.contains(&u) {
            units.push(u);
        }
    }
    let mut out = Vec::new();
    for unit in units {
        for &(start, end) in runs {
            let window = end - start;
            if window <= 0 {
                continue;
            }
            let q = job_promql(unit, declared, job, window);
            let what = format!("query {q:?}");
            let (data, _warnings) = client.get(
                "/api/v1/query",
                &[
                    ("query", q.clone()),
                    ("time", format!("{:.3}", end as f64 / 1000.0)),
                ],
                &what,
            )?;
            let v: Vector =
                parse(&data).map_err(|e| err(&spec, format!("{what}: bad answer: {e}")))?;
            if v.result_type != "vector" {
                return Err(err(
                    &spec,
                    format!("{what}: expected a vector, got {:?}", v.result_type),
                ));
            }
            let amount = v
                .result
                .first()
                .and_then(|s| s.value.1.parse::<f64>().ok())
                .filter(|a| a.is_finite() && *a >= 0.0);
            if let Some(amount) = amount {
                out.push(SpanWork {
                    unit: unit.to_string(),
                    run: (start, end),
                    amount,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod job_tests {
    use super::*;

    #[test]
    fn the_job_matcher_goes_into_every_form_of_selector() {
        let m = "slurm_job_id=\"81\"";
        assert_eq!(with_matcher("a_total", m), "a_total{slurm_job_id=\"81\"}");
        assert_eq!(
            with_matcher("a_total{job=\"t\"}", m),
            "a_total{job=\"t\",slurm_job_id=\"81\"}"
        );
        assert_eq!(
            with_matcher("a_total{job=\"t\",}", m),
            "a_total{job=\"t\",slurm_job_id=\"81\"}"
        );
        assert_eq!(
            with_matcher("a_total{ }", m),
            "a_total{ slurm_job_id=\"81\"}"
        );
        assert_eq!(
            with_matcher("{__name__=\"a}\"}", m),
            "{__name__=\"a}\",slurm_job_id=\"81\"}"
        );
        assert_eq!(promql_string("8\"1\\\n"), "\"8\\\"1\\\\\\u000a\"");
        let q = job_promql("tokens", &[], "81", 3_600_000);
        assert!(
            q.starts_with(
                "sum(increase(vllm:generation_tokens_total{slurm_job_id=\"81\"}[3600000ms])) or "
            ),
            "{q}"
        );
    }
}
