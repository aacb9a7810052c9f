//! Occupancy from kube-state-metrics: GPUs held and GPUs in total per node, read fleet-wide
//! through `/api/v1/query_range` and made into synthetic `gpu` rows by
//! [`crate::ingest::occupancy::NodeCounts`], for the nodes no GPU exporter covers (issue 32).
//!
//! Per query step (`R` = step − 1 ms, so a point at `ts` holds `(ts − step, ts]`):
//! - **held** ([`allocated_promql`]): the GPUs requested (`kube_pod_container_resource_requests`,
//!   `resource="nvidia_com_gpu"`) by the containers of pods that were `Running` at some sample
//!   of the interval (`kube_pod_status_phase{phase="Running"}`, joined on `namespace`, `pod`: the
//!   phase series has no `node` label), summed by `node`; `0` for a node whose allocatable GPUs
//!   are known at that time and that no running pod holds. A finished pod's requests linger in
//!   kube-state-metrics until the pod is deleted; its `Running` phase is 0 then, so it holds
//!   nothing. Duplicate series (two kube-state-metrics replicas) count once (`max by`).
//! - **in total** ([`total_promql`]): `kube_node_status_allocatable{resource="nvidia_com_gpu"}`,
//!   the most in the interval.
//!
//! The queries join two series, which remote read's evaluator ([`crate::ingest::promeval`])
//! does not do, so this part always goes through `query_range` (a warning says so when the rest
//! is read by remote read). It does not choose the step (the caller does, from the GPU series or
//! [`scrape_step`]), and reads no GPU exporter's series.

use std::collections::{BTreeMap, BTreeSet};

use super::client::{Answer, Client, Matrix, err, fmt_size, parse};
use super::discovery::{has_samples, scrape_interval};
use super::plan::Tallies;
use crate::ingest::occupancy::NodeCounts;
use crate::ingest::resample::{RowSpec, Sampling};
use crate::ingest::{IngestError, IngestReport, fmt_ms};
use polars::prelude::DataFrame;

/// The metric names kube-state-metrics' counts need (looked for with the GPU families').
pub(super) const MARKERS: [&str; 3] = [
    "kube_pod_container_resource_requests",
    "kube_node_status_allocatable",
    "kube_pod_status_phase",
];

/// The node's allocatable GPUs (the device plugin's whole GPUs; MIG resources such as
/// `nvidia_com_mig_1g_10gb` are not counted).
const ALLOCATABLE: &str = "kube_node_status_allocatable{resource=\"nvidia_com_gpu\"}";

/// GPUs held on each node in `(ts − step, ts]` (`R`: the range, e.g. `899999ms`).
pub(super) fn allocated_promql(r: &str) -> String {
    format!(
        "sum by (node) (max by (node, namespace, pod, container) \
         (max_over_time(kube_pod_container_resource_requests{{resource=\"nvidia_com_gpu\"}}[{r}])) \
         * on (namespace, pod) group_left max by (namespace, pod) \
         (max_over_time(kube_pod_status_phase{{phase=\"Running\"}}[{r}]))) \
         or 0 * max by (node) (max_over_time({ALLOCATABLE}[{r}]))"
    )
}

/// GPUs each node has in `(ts − step, ts]`.
pub(super) fn total_promql(r: &str) -> String {
    format!("max by (node) (max_over_time({ALLOCATABLE}[{r}]))")
}

/// Whether the server has kube-state-metrics' GPU counts in the range: the three metrics
/// listed, and a node's allocatable GPUs with a sample in it.
pub(super) fn present(
    client: &mut Client,
    names: &BTreeSet<String>,
    (since, until): (i64, i64),
) -> Result<bool, IngestError> {
    if !MARKERS.iter().all(|m| names.contains(*m)) {
        return Ok(false);
    }
    has_samples(client, &[ALLOCATABLE], since, until)
}

/// The finest scrape interval of kube-state-metrics' allocatable series, ms (the step of a
/// server with no GPU exporter).
pub(super) fn scrape_step(
    client: &mut Client,
    range: (i64, i64),
    max_points: i64,
    warnings: &mut BTreeMap<String, u64>,
) -> Result<Option<f64>, IngestError> {
    Ok(scrape_interval(client, &[ALLOCATABLE], range, max_points, warnings)?.finest)
}

/// What [`occupancy`] needs of the read.
pub(super) struct KubeRead<'a> {
    pub(super) spec: &'a str,
    pub(super) step: i64,
    /// The evaluation chunks, unix ms.
    pub(super) windows: &'a [(i64, i64)],
    pub(super) row_spec: RowSpec,
    pub(super) max_response_bytes: u64,
    /// The nodes a GPU exporter's series name (their counts are dropped).
    pub(super) covered: BTreeSet<String>,
}

/// The synthetic `gpu` rows of the nodes kube-state-metrics counts and no GPU exporter covers
/// (`None` when none), what resampling found, the counts for the report, and warnings.
pub(super) fn occupancy(
    client: &mut Client,
    k: &KubeRead,
    tallies: &mut Tallies,
    report: &mut IngestReport,
) -> Result<Option<(DataFrame, Sampling)>, IngestError> {
    let spec = k.spec;
    let r = format!("{}ms", (k.step - 1).max(1));
    let mut counts = NodeCounts::default();
    let mut with_total = BTreeSet::new();
    let mut with_allocated = BTreeSet::new();
    for (promql, total) in [(total_promql(&r), true), (allocated_promql(&r), false)] {
        for (node, ts, v) in query(client, k, &promql, tallies)? {
            if total {
                with_total.insert(node.clone());
                counts.add_total(&node, ts, v, 0);
            } else {
                with_allocated.insert(node.clone());
                counts.add_allocated(&node, ts, 1, Some(v), 0);
            }
        }
    }
    let ksm_nodes: BTreeSet<String> = with_total.union(&with_allocated).cloned().collect();
    let covered: BTreeSet<&str> = k.covered.iter().map(String::as_str).collect();
    let dropped = counts.drop_nodes(&covered);
    if !dropped.is_empty() {
        report.warnings.push(format!(
            "{spec}: kube-state-metrics' GPU counts of {} node(s) ignored ({}): the GPU \
             exporter gives their GPUs one by one, which are read instead",
            dropped.len(),
            dropped.join(", ")
        ));
    } else if !k.covered.is_empty() && !ksm_nodes.is_empty() {
        report.warnings.push(format!(
            "{spec}: no node of kube-state-metrics ({}) is one the GPU exporter's series name \
             ({}); if they are the same machines, their GPUs are counted twice: relabel the \
             exporter's series with a `node` label holding the Kubernetes node name",
            short_list(&ksm_nodes),
            short_list(&k.covered)
        ));
    }
    let no_total: BTreeSet<&str> = with_allocated
        .difference(&with_total)
        .map(String::as_str)
        .filter(|n| !covered.contains(n))
        .collect();
    let gone = counts.drop_nodes(&no_total);
    if !gone.is_empty() {
        report.warnings.push(format!(
            "{spec}: {} node(s) have pods holding GPUs but no allocatable GPUs \
             (kube_node_status_allocatable{{resource=\"nvidia_com_gpu\"}}) in the range: their \
             GPU count is unknown, and not guessed; no rows ({})",
            gone.len(),
            gone.join(", ")
        ));
    }
    let clamped = counts.clamp_to_totals();
    if !clamped.is_empty() {
        let n: u64 = clamped.values().sum();
        report.warnings.push(format!(
            "{spec}: {n} count(s) of GPUs held exceeded the node's allocatable GPUs and were \
             taken as all of them (pods that ended and started within one step; first nodes: {})",
            short_list(&clamped.keys().cloned().collect())
        ));
    }
    if counts.is_empty() {
        return Ok(None);
    }
    counts.check().map_err(|e| err(spec, e.reason))?;
    let (df, s) = counts
        .into_rows(k.row_spec, &format!("{spec}: kube-state-metrics node"))
        .map_err(|e| err(spec, e.to_string()))?;
    Ok((df.height() > 0).then_some((df, s)))
}

/// At most five names, and how many more.
fn short_list(names: &BTreeSet<String>) -> String {
    let mut s: Vec<&str> = names.iter().take(5).map(String::as_str).collect();
    let more = names.len().saturating_sub(5);
    let more = format!("{more} more");
    if names.len() > 5 {
        s.push(&more);
    }
    s.join(", ")
}

/// One query over every chunk (a chunk too large, or refused for a server limit, asked again in
/// halves): (node, time, value) of every point; values that are not whole numbers in 0–1024
/// are refused and counted.
fn query(
    client: &mut Client,
    k: &KubeRead,
    promql: &str,
    t: &mut Tallies,
) -> Result<Vec<(String, i64, f64)>, IngestError> {
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    let step = k.step;
    let mut out = Vec::new();
    let mut todo: std::collections::VecDeque<(i64, i64)> = k.windows.iter().copied().collect();
    while let Some((s, e)) = todo.pop_front() {
        let answer = client.get_bounded(
            "/api/v1/query_range",
            &[
                ("query", promql.to_string()),
                ("start", secs(s)),
                ("end", secs(e)),
                ("step", secs(step)),
            ],
            &format!("query {promql:?}"),
        )?;
        let (data, warns) = match answer {
            Answer::Data(d, w) => (d, w),
            Answer::TooLarge | Answer::Limit(..) if e > s => {
                let mid = s + ((e - s) / step / 2) * step;
                todo.push_front((mid + step, e));
                todo.push_front((s, mid));
                *t.splits.entry(promql.to_string()).or_default() += 1;
                continue;
            }
            Answer::TooLarge => {
                return Err(err(
                    k.spec,
                    format!(
                        "query {promql:?}: the answer for one point at {} is larger than {} \
                         (--prometheus.max-response-size)",
                        fmt_ms(s),
                        fmt_size(k.max_response_bytes)
                    ),
                ));
            }
            Answer::Limit(_, message) => {
                return Err(err(
                    k.spec,
                    format!(
                        "query {promql:?}: the server refuses even one point at {}: {message}",
                        fmt_ms(s)
                    ),
                ));
            }
        };
        for w in warns {
            *t.prom_warnings.entry(w).or_default() += 1;
        }
        let m: Matrix =
            parse(&data).map_err(|e| err(k.spec, format!("query {promql:?}: bad answer: {e}")))?;
        for series in m.result {
            // `sum by (node)` of pods with no node (never scheduled, never running) has none.
            let Some(node) = series.metric.get("node").filter(|n| !n.is_empty()) else {
                continue;
            };
            for (ts, v) in &series.values {
                let x = v.parse::<f64>().unwrap_or(f64::NAN);
                if x.fract() != 0.0 || !(0.0..=1024.0).contains(&x) {
                    t.refused.add(
                        "a GPU count that is not a whole number within 0–1024",
                        promql,
                        v,
                    );
                    continue;
                }
                out.push((node.clone(), (ts * 1000.0).round() as i64, x));
            }
        }
    }
    Ok(out)
}
