//! Holders by allocation from tessera-exporter's kubelet series (history format version 3,
//! issue 32): `tessera_gpu_pod_info` (one series per device and holding container while the
//! exporter's kubelet answers) and `tessera_exporter_kubelet_up` (per exporter) into the
//! `holders`, `holder_namespace` and `holder_pod` columns of the resampled `gpu` and `mig` rows.
//!
//! Per row `(ts − interval_ms, ts]` of a device: `holders` = the distinct pods (namespace, pod)
//! with a `tessera_gpu_pod_info` point in it — for a GPU, those of the GPU and of any of its MIG
//! instances, as the history writer counts them; a pod's containers count once. Where none: `0`
//! when the node's `tessera_exporter_kubelet_up` was 1 at a point of the row (the kubelet
//! answered and listed no holder), else null (unknown: no kubelet, or it did not answer), never
//! 0 by default. `holder_namespace`/`holder_pod`: the first holder (sorted by namespace, pod) of
//! the row's last point that had one.
//!
//! dcgm-exporter (its Kubernetes mapping on): each per-device series with a `pod` (or
//! `pod_name`) label names a holder of its GPU or MIG instance (`GPU_I_ID`) at its points, the
//! same counting; a device with none is free (0) on a node with a pod-labelled series somewhere
//! in the range (the mapping is on there; Prometheus drops empty labels, so "no pod" and
//! "mapping off" look alike on one series), else null.
//!
//! It sends no request and knows no PromQL beyond which columns the queries feed.

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::*;

use super::discovery::node_name;
use crate::frames::schema::Table;

/// The column a `tessera_gpu_pod_info` query feeds (a [`super::catalogue::Query`]'s).
pub(super) const POD_INFO: &str = "holders";
/// The column dcgm-exporter's pod-labelled series feed (any of its per-device queries: each
/// series with a `pod` or `pod_name` label names a holder of its GPU or MIG instance).
pub(super) const DCGM_PODS: &str = "dcgm_pods";
/// The column a `tessera_exporter_kubelet_up` query feeds (no canonical column: it decides
/// whether a device without holders is free or unknown).
pub(super) const KUBELET_UP: &str = "kubelet_up";

/// A device: node, GPU UUID, and the MIG instance (`gpu_instance`, `compute_instance`; empty
/// for the whole GPU).
type Device = (String, String, String, String);

/// The holders' points of one partition while its answers are read.
#[derive(Default)]
pub(super) struct Holders {
    /// Per device, per evaluation time: the pods with a `pod_info` point.
    pods: BTreeMap<Device, BTreeMap<i64, BTreeSet<(String, String)>>>,
    /// Per node: the evaluation times at which its kubelet answered.
    up: BTreeMap<String, BTreeSet<i64>>,
    /// dcgm-exporter: the nodes with a pod-labelled series in the range (its Kubernetes mapping
    /// is on there, so a device without one is held by nobody).
    mapped: BTreeSet<String>,
}

impl Holders {
    /// Takes one answer's series when `column` is one of the holders' ([`POD_INFO`],
    /// [`KUBELET_UP`]): true when it was (its points are then used here only).
    pub(super) fn take(
        &mut self,
        column: &str,
        m: &BTreeMap<String, String>,
        points: impl Iterator<Item = (i64, Option<f64>)>,
    ) -> bool {
        let get = |l: &str| m.get(l).cloned().unwrap_or_default();
        match column {
            POD_INFO => {
                if let Some(node) = node_name(m) {
                    let dev = (
                        node,
                        get("uuid"),
                        get("gpu_instance"),
                        get("compute_instance"),
                    );
                    let holder = (get("namespace"), get("pod"));
                    self.add(
                        dev,
                        holder,
                        points.filter(|p| p.1.is_some_and(|v| v >= 1.0)),
                    );
                }
                true
            }
            DCGM_PODS => {
                let first = |ls: &[&str]| {
                    ls.iter()
                        .filter_map(|l| m.get(*l))
                        .find(|v| !v.is_empty())
                        .cloned()
                        .unwrap_or_default()
                };
                let pod = first(&["pod", "pod_name"]);
                if let Some(node) = node_name(m)
                    && !pod.is_empty()
                {
                    self.mapped.insert(node.clone());
                    let dev = (node, get("UUID"), get("GPU_I_ID"), String::new());
                    let holder = (first(&["namespace", "pod_namespace"]), pod);
                    self.add(dev, holder, points.filter(|p| p.1.is_some()));
                }
                true
            }
            KUBELET_UP => {
                if let Some(node) = node_name(m) {
                    let up = self.up.entry(node).or_default();
                    up.extend(
                        points
                            .filter(|p| p.1.is_some_and(|v| v >= 1.0))
                            .map(|p| p.0),
                    );
                }
                true
            }
            _ => false,
        }
    }

    /// The points of `holder` on a device (a MIG instance's count for its GPU too).
    fn add(
        &mut self,
        (node, uuid, gi, ci): Device,
        holder: (String, String),
        points: impl Iterator<Item = (i64, Option<f64>)>,
    ) {
        if holder.1.is_empty() || uuid.is_empty() {
            return;
        }
        let whole: Device = (node.clone(), uuid.clone(), String::new(), String::new());
        let mig = (!gi.is_empty()).then_some((node, uuid, gi, ci));
        for (ts, _) in points {
            for d in std::iter::once(&whole).chain(mig.as_ref()) {
                self.pods
                    .entry(d.clone())
                    .or_default()
                    .entry(ts)
                    .or_default()
                    .insert(holder.clone());
            }
        }
    }

    /// `df` (resampled `gpu` or `mig` rows) with its holders' columns filled (see the module
    /// doc); other tables, and rows of nodes with neither series, as they are.
    pub(super) fn fill(&self, table: Table, df: DataFrame) -> PolarsResult<DataFrame> {
        if table == Table::Process
            || (self.pods.is_empty() && self.up.is_empty() && self.mapped.is_empty())
        {
            return Ok(df);
        }
        let text = |c: &str| -> PolarsResult<StringChunked> {
            Ok(df.column(c)?.cast(&DataType::String)?.str()?.clone())
        };
        let int = |c: &str| -> PolarsResult<Int64Chunked> {
            Ok(df.column(c)?.cast(&DataType::Int64)?.i64()?.clone())
        };
        let (ts, iv) = (int("ts")?, int("interval_ms")?);
        let (node, uuid) = (text("node")?, text("uuid")?);
        let mig = (table == Table::Mig)
            .then(|| Ok::<_, PolarsError>((text("gpu_instance")?, text("compute_instance")?)))
            .transpose()?;
        let h = df.height();
        let (mut n, mut ns, mut pod) = (
            Vec::with_capacity(h),
            Vec::with_capacity(h),
            Vec::with_capacity(h),
        );
        for r in 0..h {
            let s = |c: &StringChunked| c.get(r).unwrap_or_default().to_string();
            let (end, len) = (ts.get(r).unwrap_or(0), iv.get(r).unwrap_or(0));
            let inside = (end - len + 1)..=end;
            let dev: Device = match &mig {
                Some((gi, ci)) => (s(&node), s(&uuid), s(gi), s(ci)),
                None => (s(&node), s(&uuid), String::new(), String::new()),
            };
            let mut all: BTreeSet<&(String, String)> = BTreeSet::new();
            let mut last = None;
            if let Some(points) = self.pods.get(&dev) {
                for (_, set) in points.range(inside.clone()) {
                    all.extend(set);
                    last = set.first().or(last);
                }
            }
            let up = || {
                self.mapped.contains(&dev.0)
                    || self
                        .up
                        .get(&dev.0)
                        .is_some_and(|t| t.range(inside.clone()).next().is_some())
            };
            n.push(if !all.is_empty() {
                Some(all.len() as u32)
            } else if up() {
                Some(0)
            } else {
                None
            });
            ns.push(last.map(|h| h.0.clone()).filter(|s| !s.is_empty()));
            pod.push(last.map(|h| h.1.clone()));
        }
        let mut df = df;
        df.with_column(Column::new("holders".into(), n))?;
        df.with_column(Column::new("holder_namespace".into(), ns))?;
        df.with_column(Column::new("holder_pod".into(), pod))?;
        Ok(df)
    }
}
