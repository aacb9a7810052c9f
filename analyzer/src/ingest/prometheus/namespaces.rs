//! The namespaces' labels as kube-state-metrics exports them (`kube_namespace_labels`): one
//! instant query (`/api/v1/query` at a given time), each series' labels returned as they are,
//! for `crate::owners` to find the teams' owners in.
//!
//! It reads no range, makes no rows and decides nothing about owners (which labels count, what a
//! missing label means): the caller does.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::client::{Client, err, parse};
use super::options::PrometheusOptions;
use crate::ingest::IngestError;

/// The most series kept (one per namespace; a cluster has far fewer).
const MAX_SERIES: usize = 100_000;

#[derive(Deserialize)]
struct Vector {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    metric: BTreeMap<String, String>,
}

/// The labels of every series of `metric` (a metric name, or any instant selector) at `at_ms`
/// on the server at `url` (`prometheus:URL`'s URL), with the source's options (auth, timeout,
/// retries, response size).
pub fn instant_series(
    url: &str,
    opts: &PrometheusOptions,
    metric: &str,
    at_ms: i64,
) -> Result<Vec<BTreeMap<String, String>>, IngestError> {
    let spec = format!("prometheus:{url}");
    let mut client = Client::new(&spec, url, opts)?;
    let what = format!("query {metric:?}");
    let (data, _warnings) = client.get(
        "/api/v1/query",
        &[
            ("query", metric.to_string()),
            ("time", format!("{:.3}", at_ms as f64 / 1000.0)),
        ],
        &what,
    )?;
    let v: Vector = parse(&data).map_err(|e| err(&spec, format!("{what}: bad answer: {e}")))?;
    if v.result_type != "vector" {
        return Err(err(
            &spec,
            format!("{what}: expected a vector, got {:?}", v.result_type),
        ));
    }
    Ok(v.result
        .into_iter()
        .take(MAX_SERIES)
        .map(|s| s.metric)
        .collect())
}
