//! Renders a [`Snapshot`] as OpenMetrics text (prometheus-client's encoder): the body of
//! `/metrics`. Every metric is documented in `docs/metrics.md`.
//!
//! One collector per file behind one interface, [`Collector`], in the style of node_exporter:
//! [`gpu`] (per-GPU values and identity), [`mig`] (MIG instances and drift from the planned
//! layout), [`process`] (per-process use
//! with attribution labels), [`exporter`] (self-metrics: collection success, durations, NVML
//! errors, build info) and [`runtime`] (the standard `process_*` metrics of the exporter itself),
//! and [`pods`] (with the kubelet: every container holding each GPU or MIG device). The GPU, MIG,
//! pod and process families are declared once in [`catalog`] (name, help, unit, type,
//! dcgm-exporter's fields), which `docs/metrics.md` is checked against.
//!
//! With the kubelet's pod-resources API (`--kubelet.pod-resources-socket`), the series of a GPU,
//! a MIG instance or a process whose device exactly one container holds also carry `pod`,
//! `namespace` and `container` ([`HolderLabels`]); a device shared by several containers
//! (time-slicing) gets none, its holders are in `tessera_gpu_pod_info`. Without the kubelet the
//! exposition is unchanged.
//!
//! Architecture invariants:
//! - Rendering reads only the snapshot (and `/proc/self` for `process_*`); it never calls NVML.
//! - Absent values produce no series (never a 0 that was not measured); a lost GPU keeps its
//!   identity and status series so alerts see it.
//! - Names follow Prometheus conventions: `tessera_` prefix, base units as suffixes, `_total` on
//!   counters, `_info` gauges with value 1 for identity (gauges, not the OpenMetrics `info` type,
//!   so the output also passes `promtool check metrics`).
//!
//! [`MetricsCache`] renders once per snapshot and serves the same bytes to every scrape until the
//! next snapshot; it does no I/O besides that.

pub mod catalog;
pub mod exporter;
pub mod gpu;
pub mod mig;
pub mod pods;
pub mod process;
pub mod runtime;

use std::fmt;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::kubelet::{Holder, KubeletStats};
use crate::sampler::Snapshot;

/// Content type of the OpenMetrics exposition (served when the scraper accepts it, as
/// Prometheus does).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Content type of the Prometheus text format 0.0.4 (served to clients that do not ask for
/// OpenMetrics, e.g. curl or older tools).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether an `Accept` header asks for OpenMetrics.
pub fn accepts_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// Convert tessera's OpenMetrics exposition to the Prometheus text format 0.0.4: drop `# UNIT`
/// and `# EOF`, and name counter families after their `_total` samples. Exact for what tessera
/// renders (gauges and counters only).
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some(name) = rest.strip_suffix(" counter")
        {
            counters.insert(name.to_string());
        }
    }
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

/// What to render.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// Export per-process metrics (`--[no-]collector.processes`).
    pub processes: bool,
    /// At most this many process series per node (`--collector.processes.max`); the rest are
    /// counted in `tessera_exporter_processes_truncated`.
    pub processes_max: usize,
    /// Include the `process_*` metrics of the exporter itself (off in golden tests: they vary).
    pub runtime: bool,
    /// Exporter version for `tessera_exporter_build_info`.
    pub version: String,
    /// Counters of the history writer, when `--history.dir` is on (no history series otherwise).
    pub history: Option<std::sync::Arc<crate::history_thread::HistoryStats>>,
    /// The planned MIG layout (`--mig.config`), for the drift series (none without it).
    pub mig_plan: Option<std::sync::Arc<tessera_core::mig::parted::PartedConfig>>,
    /// Counters of the kubelet client, when `--kubelet.pod-resources-socket` is on (no kubelet
    /// series otherwise).
    pub kubelet: Option<std::sync::Arc<KubeletStats>>,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            processes: true,
            processes_max: 256,
            runtime: true,
            version: env!("CARGO_PKG_VERSION").to_string(),
            history: None,
            mig_plan: None,
            kubelet: None,
        }
    }
}

/// Everything a collector may read.
pub struct Context<'a> {
    pub snapshot: &'a Snapshot,
    pub options: &'a RenderOptions,
}

/// One group of metrics rendered from a snapshot.
pub trait Collector: Send + Sync {
    /// Short name (for docs and debugging).
    fn name(&self) -> &'static str;
    /// Encode this collector's metric families.
    fn collect(&self, ctx: &Context<'_>, enc: &mut DescriptorEncoder<'_>) -> fmt::Result;
}

/// Every collector, in output order.
pub fn collectors() -> Vec<Box<dyn Collector>> {
    vec![
        Box::new(gpu::GpuCollector),
        Box::new(mig::MigCollector),
        Box::new(pods::PodsCollector),
        Box::new(process::ProcessCollector),
        Box::new(exporter::ExporterCollector),
        Box::new(runtime::RuntimeCollector),
    ]
}

/// The kubelet's `pod`, `namespace` and `container` labels of one device, appended to a series'
/// own labels (`(labels, HolderLabels)` is a label set): present when exactly one container
/// holds the device, no label at all otherwise.
#[derive(Debug, Clone, Copy, Default)]
pub struct HolderLabels<'a>(pub Option<&'a Holder>);

impl EncodeLabelSet for HolderLabels<'_> {
    fn encode(&self, encoder: &mut prometheus_client::encoding::LabelSetEncoder) -> fmt::Result {
        match self.0 {
            Some(h) => [
                ("pod", h.pod.as_str()),
                ("namespace", h.namespace.as_str()),
                ("container", h.container.as_str()),
            ]
            .encode(encoder),
            None => Ok(()),
        }
    }
}

/// The holder labels of `device` (a GPU or MIG UUID) in a snapshot.
pub(crate) fn held<'a>(snapshot: &'a Snapshot, device: &str) -> HolderLabels<'a> {
    HolderLabels(snapshot.holders.sole(device))
}

/// Encode one metric family if it has any series.
pub(crate) fn family<L: EncodeLabelSet, V: prometheus_client::encoding::EncodeGaugeValue>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    series: Vec<(L, V)>,
) -> fmt::Result {
    if series.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
    for (labels, v) in &series {
        m.encode_family(labels)?.encode_gauge(v)?;
    }
    Ok(())
}

/// Encode one counter family if it has any series. `name` excludes the unit and `_total`.
pub(crate) fn counter_family<
    L: EncodeLabelSet,
    V: prometheus_client::encoding::EncodeCounterValue,
>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    series: Vec<(L, V)>,
) -> fmt::Result {
    if series.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
    for (labels, v) in &series {
        m.encode_family(labels)?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, f64>(v, None)?;
    }
    Ok(())
}

/// Encode a family of one series without labels (`name value`).
pub(crate) fn single<V: prometheus_client::encoding::EncodeGaugeValue>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: V,
) -> fmt::Result {
    enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?
        .encode_gauge(&value)
}

/// Encode a counter of one series without labels (`name_total value`).
pub(crate) fn single_counter<V: prometheus_client::encoding::EncodeCounterValue>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: V,
) -> fmt::Result {
    enc.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?
        .encode_counter::<prometheus_client::encoding::NoLabelSet, _, f64>(&value, None)
}

/// Encode a declared gauge family ([`catalog`]) if it has any series.
pub(crate) fn gauge<L: EncodeLabelSet, V: prometheus_client::encoding::EncodeGaugeValue>(
    enc: &mut DescriptorEncoder<'_>,
    desc: &catalog::MetricDesc,
    series: Vec<(L, V)>,
) -> fmt::Result {
    debug_assert_eq!(
        desc.kind,
        catalog::Kind::Gauge,
        "{} is not a gauge",
        desc.name
    );
    family(
        enc,
        desc.name,
        desc.help,
        desc.unit.map(|u| u.encoded()),
        series,
    )
}

/// Encode a declared counter family ([`catalog`]) if it has any series.
pub(crate) fn counter<L: EncodeLabelSet, V: prometheus_client::encoding::EncodeCounterValue>(
    enc: &mut DescriptorEncoder<'_>,
    desc: &catalog::MetricDesc,
    series: Vec<(L, V)>,
) -> fmt::Result {
    debug_assert_eq!(
        desc.kind,
        catalog::Kind::Counter,
        "{} is not a counter",
        desc.name
    );
    counter_family(
        enc,
        desc.name,
        desc.help,
        desc.unit.map(|u| u.encoded()),
        series,
    )
}

struct All {
    snapshot: Arc<Snapshot>,
    options: RenderOptions,
}

impl fmt::Debug for All {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tessera collectors")
    }
}

impl prometheus_client::collector::Collector for All {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let ctx = Context {
            snapshot: &self.snapshot,
            options: &self.options,
        };
        for c in collectors() {
            c.collect(&ctx, &mut encoder)?;
        }
        Ok(())
    }
}

/// Render a snapshot as an OpenMetrics document (ending in `# EOF`).
pub fn render(snapshot: Arc<Snapshot>, options: &RenderOptions) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(All {
        snapshot,
        options: options.clone(),
    }));
    let mut out = String::with_capacity(64 * 1024);
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// One snapshot rendered in both formats (reference-counted: a scrape clones no bytes).
#[derive(Debug)]
pub struct Bodies {
    pub openmetrics: bytes::Bytes,
    pub text: bytes::Bytes,
}

/// Renders each snapshot once and serves the cached bytes to every scrape until the next one.
pub struct MetricsCache {
    options: RenderOptions,
    cached: Mutex<Option<(u64, Arc<Bodies>)>>,
}

impl MetricsCache {
    pub fn new(options: RenderOptions) -> MetricsCache {
        MetricsCache {
            options,
            cached: Mutex::new(None),
        }
    }

    /// The exposition of `snapshot` in both formats, rendered at most once per snapshot sequence.
    pub fn get(&self, snapshot: Arc<Snapshot>) -> Arc<Bodies> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seq, body)) = cached.as_ref()
            && *seq == snapshot.sequence
        {
            return body.clone();
        }
        let seq = snapshot.sequence;
        let openmetrics = render(snapshot, &self.options);
        let text = to_prometheus_text(&openmetrics);
        let body = Arc::new(Bodies {
            openmetrics: openmetrics.into(),
            text: text.into(),
        });
        *cached = Some((seq, body.clone()));
        body
    }
}

/// The telemetry path of the HTTP server: the latest snapshot, rendered once per sample, in the
/// format the scraper asks for.
pub struct MetricsExposition {
    handle: crate::sampler::SnapshotHandle,
    cache: MetricsCache,
    /// Shown before the first snapshot: no GPU series, backend not up.
    empty: Arc<Snapshot>,
}

impl MetricsExposition {
    pub fn new(
        handle: crate::sampler::SnapshotHandle,
        options: RenderOptions,
    ) -> MetricsExposition {
        MetricsExposition {
            handle,
            cache: MetricsCache::new(options),
            empty: Arc::new(Snapshot::empty()),
        }
    }
}

impl crate::web::Exposition for MetricsExposition {
    fn render(&self, accept: Option<&str>) -> crate::web::Rendered {
        let snapshot = self.handle.latest().unwrap_or_else(|| self.empty.clone());
        let bodies = self.cache.get(snapshot);
        if accepts_openmetrics(accept) {
            crate::web::Rendered {
                content_type: CONTENT_TYPE,
                body: bodies.openmetrics.clone(),
            }
        } else {
            crate::web::Rendered {
                content_type: TEXT_CONTENT_TYPE,
                body: bodies.text.clone(),
            }
        }
    }

    fn ready(&self) -> bool {
        self.handle.latest().is_some()
    }
}
