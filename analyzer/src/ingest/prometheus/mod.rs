//! The `prometheus:URL` source: any server with the Prometheus HTTP API (Prometheus, Thanos,
//! Mimir, VictoriaMetrics) read through `/api/v1/query_range` into the canonical frames.
//!
//! One range query per canonical column (`avg_over_time(m[R])`, `max_over_time(m[R])`, … with `R`
//! one step minus 1 ms, so each point aggregates the half-open interval `(ts - step, ts]` exactly
//! like a history row, on Prometheus 2 (closed ranges) and 3 (left-open) alike), evaluated at
//! multiples of the step (`IngestOptions::interval_ms`). Queries that several columns share (e.g.
//! dcgm-exporter's `FB_USED` for GPU, MIG and pod rows) are sent once. Long ranges are split into
//! chunks of at most [`PrometheusOptions::max_points`] points per series. The metric family —
//! tessera's own, dcgm-exporter's or nvidia_gpu_exporter's — is detected first through
//! `/api/v1/label/__name__/values` and named in the report; in a mixed fleet each further
//! family is read on the nodes the ones before it do not name (a node is read once).
//!
//! Counters: `energy_delta_joules` is the counter's last value in the interval minus its last
//! value before the interval (within [`LOOKBACK_MS`]), clamped at 0 (a reset counts nothing, like
//! the history writer), and its rise inside the interval for a series' first one; `xid_count`
//! sums the same increase over tessera's and nvidia_gpu_exporter's per-code XID counters, and
//! counts value changes of dcgm-exporter's last-XID gauge (a lower bound). Where a family has no
//! such series the column stays null. dcgm-exporter's `pod`/`namespace` labels (or the old `pod_name`/`pod_namespace`)
//! become `process` rows without a pid: the GPU's (or MIG instance's) memory while the pod held
//! it, so the advisor attributes the GPU to the pod (docs/frames.md).
//!
//! Recorded maxima: where the server has the advisor's recording rules' series
//! (`rules/tessera-advisor.rules.yml`, `gpu:tessera_gpu_sm_active_ratio:max1m`, …) and they cover
//! the range wherever the raw series do, the activity and memory maxima are read from them, at
//! their own period (the rule interval, at least their minute) instead of the scrape interval;
//! each row takes the recorded minute that overlaps it most, given the rule group's evaluation
//! offset. The report says which series the maxima came from (docs/recording-rules.md).
//!
//! Remote read (`--prometheus.api remote-read`, or `auto` where the server answers it): one
//! `POST /api/v1/read` per node group returns the raw samples as compressed chunks
//! ([`super::remote_read`]), and the same PromQL texts are evaluated over them here at the same
//! times (`super::promeval`), into the same cells: no PromQL on the server, ~1 byte per sample
//! on the wire instead of JSON.
//!
//! Transport: a blocking `ureq` client (rustls) with a per-request timeout, retries with
//! exponential backoff on 5xx, timeouts and connection errors, none on 4xx (an error naming the
//! query, the status and Prometheus' message); bearer token or basic auth. Partial data
//! (`warnings` in a response, series missing from chunks in the middle of their life) becomes
//! counted report warnings. This module does not deduplicate HA pairs and does not map
//! dcgm-exporter's `container` label (the canonical schema has no container-name column).
//!
//! Layout (each module uses only those listed before it): `options` (the settings),
//! `catalogue` (families, PromQL templates, chunks), `client` (HTTP), `discovery` (scrape
//! intervals, nodes, groups), `recorded` (recorded maxima or raw), `assembly` (cells into rows,
//! spill, the partitions and their sampling), `holders` (tessera-exporter's kubelet series into the holders' columns), `plan` (what every partition's reads share), `fetch_range` and `fetch_remote` (one
//! group through either API), `fetch` (every group, concurrently), `kube` (kube-state-metrics'
//! GPU counts per node into synthetic rows), `namespaces` (one instant query's series: the
//! namespaces' labels the owners come from), `notes` (the report's lines); `read` here ties
//! them together.
//!
//! Occupancy: where the server has kube-state-metrics' pod GPU requests and node allocatable
//! GPUs, the nodes no GPU exporter covers get synthetic `gpu` rows with `holders`
//! (`crate::ingest::occupancy`), in a partition of their own; a server with those and no
//! GPU exporter is read for them alone.

mod assembly;
mod catalogue;
mod client;
mod discovery;
mod fetch;
mod fetch_range;
mod fetch_remote;
mod holders;
mod kube;
mod namespaces;
mod notes;
mod options;
mod plan;
mod recorded;
#[cfg(test)]
mod tests;
mod work;

use std::collections::{BTreeMap, BTreeSet};

use polars::prelude::*;

pub use catalogue::{Family, LOOKBACK_MS, RECORDED_WINDOW_MS, chunks};
pub use namespaces::instant_series;
pub use options::{Api, PrometheusOptions};
pub use work::{WORK_METRICS, job_work, work_rows};

use assembly::{Settled, partitions};
use catalogue::{Query, queries, sample_metrics};
use client::{Client, err, parse};
use discovery::{Scan, has_samples, node_groups, scrape_interval};
use fetch::fetch_all;
use fetch_remote::probe_remote_read;
use notes::Notes;
use options::DEFAULT_RANGE_MS;
use plan::{Plan, Tallies, Text};
use recorded::{Recorded, choose_recorded};

use super::promeval::Eval;
use super::resample::{RowSpec, Sampling};
use super::{IngestError, IngestOptions, IngestReport, Partitions, Rows, SourceKind, period};
use crate::frames::schema::Table;

/// `prometheus:URL` ([`SourceKind`]): a server with the Prometheus HTTP API, read by groups of
/// nodes (each its own partition when it is the only source), spilled where the command gives a
/// folder.
pub(super) struct PrometheusKind;

impl SourceKind for PrometheusKind {
    fn scheme(&self) -> &'static str {
        "prometheus"
    }

    fn check(&self, location: &str) -> Result<(), &'static str> {
        if location.starts_with("http://") || location.starts_with("https://") {
            Ok(())
        } else {
            Err("expected prometheus:http(s)://HOST[:PORT]")
        }
    }

    fn spills(&self) -> bool {
        true
    }

    fn read(
        &self,
        location: &str,
        opts: &IngestOptions,
        report: &mut IngestReport,
    ) -> Result<Rows, IngestError> {
        let (parts, sampling) = read(location, opts, report)?;
        Ok(Rows {
            parts,
            sampling: Some((sampling, "scrapes")),
        })
    }
}

/// Reads `prometheus:URL` for the options' time range into rows per table (each entity at its
/// own scrape interval, or an explicit coarser `--interval`) and what was found about the
/// sampling.
/// The rows come in partitions of nodes (`--prometheus.nodes-per-query`), each with its key
/// (the node; `*` when the fleet is read at once), in node order.
/// With [`IngestOptions::spill`] and more than one partition, each partition's rows are written
/// there as Parquet as soon as they are resampled and scanned from there (the files are
/// returned with them); else they stay in memory.
pub(super) fn read(
    url: &str,
    opts: &IngestOptions,
    report: &mut IngestReport,
) -> Result<(Partitions, Sampling), IngestError> {
    let spec = format!("prometheus:{url}");
    let notes = &mut Notes {
        spec: &spec,
        report,
    };
    let watch = crate::timing::Stopwatch::start("prometheus");
    let popts = &opts.prometheus;
    let mut client = Client::new(&spec, url, popts)?;
    let (since, until) = time_range(opts, notes);
    let Some(Families { names, found, kube }) =
        detect_families(&mut client, (since, until), notes)?
    else {
        return Ok((Vec::new(), Sampling::default()));
    };
    if found.is_empty() {
        return occupancy_only(&mut client, opts, (since, until), notes);
    }
    // Each family on the nodes the ones before it do not cover (a fleet half on one exporter,
    // half on another; a node with both is read from the first): one after the other.
    let (mut parts, mut tallies) = (Vec::new(), Tallies::default());
    let mut covered = BTreeSet::new();
    let mut first: Option<FamilyRead> = None;
    let mut chunks_sent = 0;
    let at = Where {
        names: &names,
        opts,
        range: (since, until),
    };
    for &family in &found {
        let later = first.is_some();
        let before = later.then_some(&covered);
        let Some(mut r) = read_family(&mut client, family, &at, before, parts.len(), notes)? else {
            continue;
        };
        if later {
            notes.also(family, found[0], &r.nodes);
        }
        covered.extend(std::mem::take(&mut r.nodes));
        parts.append(&mut r.parts);
        tallies.merge(std::mem::take(&mut r.tallies));
        chunks_sent += r.windows.len();
        first.get_or_insert(r);
    }
    let r = first.expect("the first family is always read");
    watch.lap("fetched");
    if kube {
        let k = kube::KubeRead {
            spec: &spec,
            step: r.step,
            windows: &r.windows,
            row_spec: r.row_spec,
            max_response_bytes: popts.max_response_bytes,
            covered,
        };
        notes.kube(r.step, None, r.remote);
        if let Some((df, s)) = kube::occupancy(&mut client, &k, &mut tallies, notes.report)? {
            // Nodes no GPU exporter covers: a partition of their own (or the fleet's).
            let key = if r.why_one.is_some() { "*" } else { KUBE_PART };
            parts.push((key.into(), vec![(Table::Gpu, Some((df.lazy(), None)), s)]));
        }
    }
    let requests = client.requests + tallies.requests;
    let bytes = client.bytes + tallies.bytes;
    notes.requests(popts, r.remote, requests, chunks_sent);
    notes.partitions(popts, parts.len(), r.why_one.as_deref(), r.spilled, bytes);
    notes.tallies(&tallies, popts);
    let (out, mut sampling) = partitions(parts);
    sampling.maxima = Some(maxima_source(r.recorded.as_ref()));
    Ok((out, sampling))
}

/// One family's partitions, and what the notes and the kube-state-metrics read take from the
/// first family read.
struct FamilyRead {
    parts: Vec<(String, Settled)>,
    tallies: Tallies,
    /// The nodes read.
    nodes: BTreeSet<String>,
    step: i64,
    windows: Vec<(i64, i64)>,
    row_spec: RowSpec,
    remote: bool,
    /// Why the family was read as one partition.
    why_one: Option<String>,
    spilled: bool,
    recorded: Option<Recorded>,
}

/// What every family's read shares: the metric names the server lists, the options and the
/// range.
struct Where<'a> {
    names: &'a BTreeSet<String>,
    opts: &'a IngestOptions<'a>,
    range: (i64, i64),
}

/// Reads `family` on the nodes `covered` leaves out (all of them for the first family, `None`;
/// a later one is read by node groups, so that it reads no covered node: where its nodes cannot be
/// told apart, or all are covered, it is not read, with a warning). `files`: the spill files
/// written so far.
fn read_family(
    client: &mut Client,
    family: Family,
    at: &Where,
    covered: Option<&BTreeSet<String>>,
    files: usize,
    notes: &mut Notes,
) -> Result<Option<FamilyRead>, IngestError> {
    let (opts, (since, until)) = (at.opts, at.range);
    let popts = &opts.prometheus;
    let watch = crate::timing::Stopwatch::start("prometheus");
    let Discovered {
        mut raw,
        recorded,
        why_raw,
        prom_warnings,
    } = discover(client, family, at.names, opts, (since, until))?;
    let later = covered.is_some();
    if let Some(covered) = covered {
        raw.nodes.retain(|n, _| !covered.contains(n));
    }
    // Partitions: groups of nodes, each queried with a label matcher.
    let (groups, why_one) = node_groups(&raw, popts.nodes_per_query, later);
    if later && (raw.nodes.is_empty() || why_one.is_some()) {
        notes.not_read(family, why_one.as_deref().filter(|_| !raw.nodes.is_empty()));
        return Ok(None);
    }
    let step = query_step(opts.interval_ms, recorded.as_ref(), raw.finest);
    notes.reading(family, step, recorded.as_ref(), raw.finest, &why_raw);
    // A counter's previous value is looked for over Prometheus' lookback, or four scrape
    // intervals when they are longer (a missed 5-minute scrape with jitter leaves more than
    // 5 minutes between two samples).
    let lookback = LOOKBACK_MS.max(4 * step);
    // Rows end in (since, until] (crate::range): evaluated at multiples of the step in it.
    let windows = chunks(since + 1, until + 1, step, popts.max_points);
    let texts = query_texts(family, recorded.as_ref(), step, lookback);
    let remote = use_remote(client, popts.api, family, until, &texts, notes)?;
    let plan = Plan {
        spec: notes.spec,
        family,
        step,
        lookback,
        remote,
        windows: &windows,
        texts: &texts,
        row_spec: RowSpec {
            grid_ms: step,
            requested_ms: opts.interval_ms,
            fallback_ms: step as f64,
        },
        max_response_bytes: popts.max_response_bytes,
    };
    let spill = opts.spill.filter(|_| why_one.is_none());
    watch.lap("discovery");
    let (parts, mut tallies) = fetch_all(&plan, client, groups, popts.concurrency, spill, files)?;
    for (w, n) in prom_warnings {
        *tallies.prom_warnings.entry(w).or_default() += n;
    }
    Ok(Some(FamilyRead {
        parts,
        tallies,
        nodes: raw.nodes.into_keys().collect(),
        step,
        row_spec: plan.row_spec,
        windows,
        remote,
        why_one,
        spilled: spill.is_some(),
        recorded,
    }))
}

/// The partition of kube-state-metrics' synthetic rows when the GPU exporter's nodes are read
/// by groups.
const KUBE_PART: &str = "kube-state-metrics";

/// A server with kube-state-metrics' GPU counts and no GPU exporter: the synthetic rows of its
/// nodes, one partition.
fn occupancy_only(
    client: &mut Client,
    opts: &IngestOptions,
    (since, until): (i64, i64),
    notes: &mut Notes,
) -> Result<(Partitions, Sampling), IngestError> {
    let popts = &opts.prometheus;
    let mut tallies = Tallies::default();
    let finest = kube::scrape_step(
        client,
        (since, until),
        popts.max_points,
        &mut tallies.prom_warnings,
    )?;
    let step = query_step(opts.interval_ms, None, finest);
    let windows = chunks(since + 1, until + 1, step, popts.max_points);
    notes.kube(step, Some(finest), popts.api != Api::QueryRange);
    let k = kube::KubeRead {
        spec: notes.spec,
        step,
        windows: &windows,
        row_spec: RowSpec {
            grid_ms: step,
            requested_ms: opts.interval_ms,
            fallback_ms: step as f64,
        },
        max_response_bytes: popts.max_response_bytes,
        covered: BTreeSet::new(),
    };
    let rows = kube::occupancy(client, &k, &mut tallies, notes.report)?;
    notes.requests(popts, false, client.requests, windows.len());
    notes.tallies(&tallies, popts);
    let parts = rows
        .map(|(df, s)| {
            vec![(
                "*".to_string(),
                vec![(Table::Gpu, Some((df.lazy(), None)), s)],
            )]
        })
        .unwrap_or_default();
    Ok(partitions(parts))
}

/// The range read, unix ms: the options', by default the last 7 days (with a warning).
fn time_range(opts: &IngestOptions, notes: &mut Notes) -> (i64, i64) {
    let until = opts
        .until
        .unwrap_or_else(|| chrono::Utc::now().timestamp_millis());
    let since = opts.since.unwrap_or(until - DEFAULT_RANGE_MS);
    if opts.since.is_none() {
        notes.report.warnings.push(format!(
            "{}: no --since given; read the last 7 days before {}",
            notes.spec,
            super::fmt_ms(until)
        ));
    }
    (since, until)
}

/// What [`detect_families`] found.
struct Families {
    /// The metric names the server lists.
    names: BTreeSet<String>,
    /// The families with samples in the range, the one read first (none: occupancy only).
    found: Vec<Family>,
    /// Whether kube-state-metrics' GPU counts have samples in the range ([`kube::present`]).
    kube: bool,
}

/// Which metric families the server has in the range (the one read first), whether it has
/// kube-state-metrics' GPU counts, and the metric names it lists; `None`, with a warning, when it
/// has neither.
fn detect_families(
    client: &mut Client,
    (since, until): (i64, i64),
    notes: &mut Notes,
) -> Result<Option<Families>, IngestError> {
    let spec = notes.spec;
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    let all = [Family::Tessera, Family::Dcgm, Family::NvidiaSmi];
    let pattern = all
        .iter()
        .flat_map(|f| f.markers().iter().copied())
        .collect::<Vec<_>>()
        .join("|");
    // The advisor's recorded maxima are looked for too: a store may keep them longer than the
    // raw series.
    let rec_pattern = all
        .iter()
        .flat_map(|f| f.recorded().iter().map(|(_, rec)| *rec))
        .collect::<Vec<_>>()
        .join("|");
    let name_pattern = format!("{pattern}|{rec_pattern}|{}", kube::MARKERS.join("|"));
    let (data, _) = client.get(
        "/api/v1/label/__name__/values",
        &[
            ("match[]", format!("{{__name__=~\"{name_pattern}\"}}")),
            ("start", secs(since - LOOKBACK_MS)),
            ("end", secs(until)),
        ],
        "metric family detection",
    )?;
    let names: BTreeSet<String> =
        parse(&data).map_err(|e| err(spec, format!("metric family detection: bad answer: {e}")))?;
    let mut found: Vec<Family> = all
        .into_iter()
        .filter(|f| {
            f.markers().iter().any(|m| names.contains(*m))
                || f.recorded_samples().iter().any(|m| names.contains(*m))
        })
        .collect();
    // The names API answers per TSDB block (two hours, or days after compaction), so a family
    // seen only beside the range can be listed: with several, keep those with samples in it.
    if found.len() > 1 {
        let mut present = Vec::new();
        for f in &found {
            let mut markers: Vec<&str> = f.markers().to_vec();
            markers.extend(f.recorded_samples());
            if has_samples(client, &markers, since, until)? {
                present.push(*f);
            }
        }
        if !present.is_empty() {
            found = present;
        }
    }
    // The names API can also miss samples a server stores out of order (Prometheus keeps them
    // apart from its head's index until they are compacted): before saying there is nothing,
    // each family's own series are asked.
    if found.is_empty() {
        for f in all {
            let mut markers: Vec<&str> = f.markers().to_vec();
            markers.extend(f.recorded_samples());
            if has_samples(client, &markers, since, until)? {
                found.push(f);
            }
        }
    }
    let kube = kube::present(client, &names, (since, until))?;
    if found.is_empty() && !kube {
        notes.report.warnings.push(format!(
            "{spec}: none of the known GPU metrics ({pattern}), nor kube-state-metrics' GPU \
             counts, between {} and {}; no rows",
            super::fmt_ms(since),
            super::fmt_ms(until)
        ));
        return Ok(None);
    }
    Ok(Some(Families { names, found, kube }))
}

/// What [`discover`] found.
struct Discovered {
    /// The scrape intervals and nodes of the family's raw series.
    raw: Scan,
    /// The recorded maxima, or why the raw series are read.
    recorded: Option<Recorded>,
    why_raw: String,
    /// The server's warnings so far, counted.
    prom_warnings: BTreeMap<String, u64>,
}

/// The family's scrape intervals and nodes, and whether its maxima are read from the advisor's
/// recorded series.
fn discover(
    client: &mut Client,
    family: Family,
    names: &BTreeSet<String>,
    opts: &IngestOptions,
    range: (i64, i64),
) -> Result<Discovered, IngestError> {
    // The query step: the finest scrape interval of any series (each entity is then resampled
    // to its own), or an explicit coarser --interval.
    let mut prom_warnings: BTreeMap<String, u64> = BTreeMap::new();
    let raw = scrape_interval(
        client,
        sample_metrics(family),
        range,
        opts.prometheus.max_points,
        &mut prom_warnings,
    )?;
    let (recorded, why_raw) = choose_recorded(
        client,
        family,
        names,
        &raw,
        opts.interval_ms,
        range,
        &mut prom_warnings,
    )?;
    Ok(Discovered {
        raw,
        recorded,
        why_raw,
        prom_warnings,
    })
}

/// The query step: the data's (recorded maxima: their period, never finer than their minute,
/// so that each point holds whole recorded minutes; else the finest scrape interval) or an
/// explicit coarser `--interval`.
fn query_step(requested: Option<i64>, recorded: Option<&Recorded>, raw: Option<f64>) -> i64 {
    // `samples` still counts the raw samples.
    let finest = match recorded {
        Some(r) => Some(r.period_ms.max(RECORDED_WINDOW_MS as f64)),
        None => raw,
    };
    let data_step = finest.map(|p| period::bucket_for(p, 1, 0));
    match (requested, data_step) {
        (Some(req), Some(d)) => req.max(d),
        (Some(req), None) => req,
        (None, Some(d)) => d,
        (None, None) => 60_000,
    }
    .max(1)
}

/// Every query's PromQL text for `step`, each text once with the columns it feeds; the
/// activity and memory maxima read from the recorded series where they are used.
fn query_texts(family: Family, recorded: Option<&Recorded>, step: i64, lookback: i64) -> Vec<Text> {
    let range = format!("{}ms", (step - 1).max(1));
    let dur = |ms: i64| format!("{ms}ms");
    // Queries sharing a PromQL text are sent once and feed every column that uses them.
    let mut texts: Vec<(String, Vec<Query>, Option<Eval>)> = Vec::new();
    for mut query in queries(family) {
        if let Some(r) = recorded {
            for (raw, rec) in family.recorded() {
                if query.promql == format!("max_over_time({raw}[{{R}}])") && r.names.contains(rec) {
                    query.promql = format!("max_over_time({rec}[{{R}}])");
                }
            }
        }
        let promql = query
            .promql
            .replace("{R}", &range)
            .replace("{SL}", &dur(step + lookback))
            .replace("{S}", &dur(step))
            .replace("{L}", &dur(lookback));
        match texts.iter_mut().find(|(p, _, _)| *p == promql) {
            Some((_, g, _)) => g.push(query),
            None => {
                let eval = Eval::parse(&query.promql);
                texts.push((promql, vec![query], eval))
            }
        }
    }
    // Recorded maxima are evaluated `shift` later and their answers moved back by as much
    // ([`recorded_shift`]).
    texts
        .into_iter()
        .map(|(promql, columns, eval)| {
            let shift = match recorded {
                Some(r) if r.names.iter().any(|n| promql.contains(&format!("({n}["))) => r.shift_ms,
                _ => 0,
            };
            Text {
                promql,
                shift,
                columns,
                eval,
            }
        })
        .collect()
}

/// Whether to read through the remote-read API: where asked for (an error where the server
/// does not answer it), or where the server answers it (`auto`).
fn use_remote(
    client: &mut Client,
    api: Api,
    family: Family,
    until: i64,
    texts: &[Text],
    notes: &mut Notes,
) -> Result<bool, IngestError> {
    let spec = notes.spec;
    let remote = match api {
        Api::QueryRange => false,
        Api::RemoteRead => {
            if let Err(why) = probe_remote_read(client, family, until) {
                return Err(err(
                    spec,
                    format!(
                        "--prometheus.api remote-read: the server does not answer the \
                         remote-read API: {why}"
                    ),
                ));
            }
            true
        }
        Api::Auto => match probe_remote_read(client, family, until) {
            Ok(()) => true,
            Err(why) => {
                notes.report.warnings.push(format!(
                    "{spec}: read through /api/v1/query_range: the server does not answer the \
                     remote-read API ({why})"
                ));
                false
            }
        },
    };
    if remote {
        if let Some(t) = texts.iter().find(|t| t.eval.is_none()) {
            return Err(err(
                spec,
                format!("remote read cannot evaluate {:?} (a bug)", t.promql),
            ));
        }
        notes.report.warnings.push(format!(
            "{spec}: read raw samples through the remote-read API (/api/v1/read), \
             reduced per row here"
        ));
    }
    Ok(remote)
}

/// Where the maxima came from, for the report.
fn maxima_source(recorded: Option<&Recorded>) -> String {
    match recorded {
        Some(r) => format!(
            "recorded 1-minute series ({})",
            r.names
                .iter()
                .map(|n| n.split(':').nth(1).unwrap_or(n))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "raw series".to_string(),
    }
}
