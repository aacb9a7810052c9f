//! The observation builder both CSV readers feed: the generic format's canonical metrics and
//! the columns each feeds per kind ([`targets`]), a row's values and labels checked and
//! collected per table and entity ([`Builder::add`]), builders of parts of a file merged in
//! order, and at the end each entity's identity, the warnings about unknown metrics, metrics of
//! another kind and ignored labels, and the observations per table ([`Builder::finish`]).
//!
//! It reads no file and parses no line: `generic`, `smi` and `lines` do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use polars::prelude::*;
use rustc_hash::FxHashMap;

use crate::frames::schema::{ColType, Column as Col, Polars as _, Table};
use crate::ingest::occupancy::{self, NodeCounts};
use crate::ingest::resample::{Agg, Observations, Values};
use crate::ingest::{IngestReport, check_value};

/// The canonical metrics of the generic format.
const METRICS: &[&str] = &[
    "gpu_busy_ratio",
    "sm_active_ratio",
    "sm_ratio",
    "sm_occupancy_ratio",
    "memory_controller_ratio",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_watts",
    "energy_delta_joules",
    "temperature_celsius",
    "xid_count",
    "tensor_active_ratio",
    "dram_active_ratio",
    "fp64_active_ratio",
    "fp32_active_ratio",
    "fp16_active_ratio",
    "integer_active_ratio",
    "nvlink_tx_bytes_per_second",
    "nvlink_rx_bytes_per_second",
    "holders",
];

/// The metrics of `kind=node` rows (per-node counts: `ingest::occupancy`).
const NODE_METRICS: &[&str] = &[occupancy::ALLOCATED, occupancy::TOTAL];

/// (kind, metric) → (is ratio, [(column, aggregation)]).
pub(super) fn targets(
    table: Table,
    metric: &str,
) -> Option<(bool, &'static [(&'static str, Agg)])> {
    use Agg::*;
    Some(match (table, metric) {
        (Table::Gpu, "gpu_busy_ratio") => (true, &[("busy_mean", Mean), ("busy_max", Max)]),
        (Table::Gpu | Table::Mig, "sm_active_ratio") => {
            (true, &[("sm_active_mean", Mean), ("sm_active_max", Max)])
        }
        (Table::Gpu, "sm_occupancy_ratio") => (true, &[("sm_occupancy_mean", Mean)]),
        (Table::Gpu, "memory_controller_ratio") => (true, &[("memory_controller_mean", Mean)]),
        (_, "memory_used_bytes") => (false, &[("memory_used_max_bytes", Max)]),
        (Table::Gpu | Table::Mig, "memory_total_bytes") => (false, &[("memory_total_bytes", Max)]),
        (Table::Gpu, "power_watts") => (false, &[("power_mean_watts", Mean)]),
        (Table::Gpu, "energy_delta_joules") => (false, &[("energy_delta_joules", Sum)]),
        (Table::Gpu, "temperature_celsius") => (false, &[("temperature_max_celsius", Max)]),
        (Table::Gpu, "xid_count") => (false, &[("xid_count", Sum)]),
        (Table::Process, "sm_active_ratio" | "sm_ratio") => {
            (true, &[("sm_mean", Mean), ("sm_max", Max)])
        }
        // GPM's profiling pipes (history format version 2).
        (Table::Gpu, "tensor_active_ratio") => (
            true,
            &[("tensor_active_mean", Mean), ("tensor_active_max", Max)],
        ),
        (Table::Mig, "tensor_active_ratio") => (true, &[("tensor_active_mean", Mean)]),
        (Table::Gpu | Table::Mig, "dram_active_ratio") => (true, &[("dram_active_mean", Mean)]),
        (Table::Gpu, "fp64_active_ratio") => (true, &[("fp64_active_mean", Mean)]),
        (Table::Gpu, "fp32_active_ratio") => (true, &[("fp32_active_mean", Mean)]),
        (Table::Gpu, "fp16_active_ratio") => (true, &[("fp16_active_mean", Mean)]),
        (Table::Gpu, "integer_active_ratio") => (true, &[("integer_active_mean", Mean)]),
        (Table::Gpu, "nvlink_tx_bytes_per_second") => {
            (false, &[("nvlink_tx_mean_bytes_per_second", Mean)])
        }
        (Table::Gpu, "nvlink_rx_bytes_per_second") => {
            (false, &[("nvlink_rx_mean_bytes_per_second", Mean)])
        }
        // Holders by allocation (history format version 3): the most in the row.
        (Table::Gpu | Table::Mig, "holders") => (false, &[("holders", Max)]),
        _ => return None,
    })
}

/// What to say about a metric that exists, but not for this kind: the kinds that take it and
/// the equivalent for this kind, if any.
fn other_kind(table: Table, metric: &str) -> Option<String> {
    if NODE_METRICS.contains(&metric) {
        return Some(format!(
            "{metric} is a metric of kind node (GPUs held and GPUs in total per node), not {}",
            table.name()
        ));
    }
    let kinds: Vec<&str> = Table::ALL
        .iter()
        .filter(|t| targets(**t, metric).is_some())
        .map(|t| t.name())
        .collect();
    if kinds.is_empty() {
        return None;
    }
    let equivalent = match (table, metric) {
        (Table::Process, "gpu_busy_ratio" | "sm_occupancy_ratio") => {
            Some("per-process activity is sm_ratio")
        }
        (Table::Mig, "gpu_busy_ratio" | "sm_ratio") => {
            Some("a MIG instance's activity is sm_active_ratio")
        }
        (Table::Gpu, "sm_ratio") => Some("a GPU's SM activity is sm_active_ratio"),
        _ => None,
    };
    Some(format!(
        "{metric} is a metric of kind {}, not {}{}",
        kinds.join(" and "),
        table.name(),
        equivalent.map(|e| format!("; {e}")).unwrap_or_default()
    ))
}

/// The label that defaults to the entity when absent.
fn entity_column(table: Table) -> &'static str {
    match table {
        Table::Gpu => "uuid",
        Table::Mig => "mig_uuid",
        Table::Process => "pid",
    }
}

/// Text from the input as an error message shows it: at most 200 characters.
pub(super) fn short(s: &str) -> String {
    if s.chars().count() > 200 {
        format!(
            "{}… ({} characters)",
            s.chars().take(200).collect::<String>(),
            s.chars().count()
        )
    } else {
        s.to_string()
    }
}

/// A bad line: category (for counting) and detail.
pub(super) struct Bad(pub(super) &'static str, pub(super) String);

/// One table's observations while they are collected.
#[derive(Default)]
struct TableObs {
    /// Entity string → id.
    ids: FxHashMap<String, u32>,
    /// Per entity: label values by label index (first seen per label), the entity string, its
    /// first line.
    labels: Vec<Vec<Option<String>>>,
    names: Vec<String>,
    first_line: Vec<u64>,
    eid: Vec<u32>,
    ts: Vec<i64>,
    metric: Vec<u32>,
    /// NaN: no value.
    value: Vec<f64>,
}

/// Collects observations from either reader.
pub(super) struct Builder {
    /// Label names (the header's columns, or nvidia-smi's label columns), by label index.
    label_names: Vec<String>,
    /// Per table, per label index: the canonical column the label fills, if any.
    label_cols: [Vec<Option<Col>>; 3],
    tables: [TableObs; 3],
    /// Per table: metric names seen → (index in `METRICS` when it feeds the table, is a
    /// ratio). A file has a handful of metrics: a short list beats hashing every row.
    metrics: [Vec<(String, Option<u8>, bool)>; 3],
    /// Per table: the last entity seen and its id (rows of one entity usually follow each
    /// other).
    last_entity: [Option<(String, u32)>; 3],
    /// Rows the file has (the polars reader knows): a table's vectors are reserved for them at
    /// its first row, instead of growing (and faulting in fresh pages) by doubling.
    pub(super) rows_hint: usize,
    unknown_metrics: BTreeMap<String, u64>,
    other_kind: BTreeMap<(Table, String), u64>,
    /// Label indexes that fill no column of some table they were used with.
    ignored_labels: BTreeSet<usize>,
    /// `kind=node` rows: GPUs allocated and in total per node.
    nodes: NodeCounts,
}

/// What a file holds: observations per table, and per-node counts (`kind=node`).
pub(super) struct Parsed {
    pub(super) obs: Vec<Observations>,
    pub(super) nodes: NodeCounts,
}

impl Builder {
    pub(super) fn new(label_names: Vec<String>) -> Builder {
        let cols = |t: Table| -> Vec<Option<Col>> {
            label_names
                .iter()
                .map(|n| {
                    t.column(n)
                        .copied()
                        .filter(|_| !matches!(n.as_str(), "ts" | "samples" | "interval_ms"))
                })
                .collect()
        };
        Builder {
            label_cols: Table::ALL.map(cols),
            label_names,
            tables: Default::default(),
            metrics: Default::default(),
            last_entity: Default::default(),
            rows_hint: 0,
            unknown_metrics: BTreeMap::new(),
            other_kind: BTreeMap::new(),
            ignored_labels: BTreeSet::new(),
            nodes: NodeCounts::default(),
        }
    }

    /// Adds one `kind=node` value: `entity` is the node, `metric` `gpus_allocated` or
    /// `gpus_total`, whole numbers in 0–1024. Labels are not read on node rows.
    pub(super) fn add_node(
        &mut self,
        entity: &str,
        ts_ms: i64,
        metric: &str,
        value: Option<f64>,
        line: u64,
    ) -> Result<(), Bad> {
        if !NODE_METRICS.contains(&metric) {
            if !metric.is_empty() {
                let msg = match targets(Table::Gpu, metric).or(targets(Table::Mig, metric)) {
                    Some(_) => format!("{metric} (a metric of kind gpu or mig) on kind node"),
                    None => metric.to_string(),
                };
                *self.unknown_metrics.entry(msg).or_default() += 1;
            }
            return Ok(());
        }
        if let Some(v) = value {
            check_count(metric, v)?;
        }
        if metric == occupancy::TOTAL {
            if let Some(v) = value {
                self.nodes.add_total(entity, ts_ms, v, line);
            }
        } else {
            self.nodes.add_allocated(entity, ts_ms, 1, value, line);
        }
        Ok(())
    }

    /// The metric's index when it feeds `table`; counts it as unknown or of another kind
    /// otherwise.
    fn metric(&mut self, table: Table, metric: &str) -> (Option<u8>, bool) {
        let known = &mut self.metrics[table as usize];
        let (r, ratio) = match known.iter().position(|(m, _, _)| m == metric) {
            Some(i) => {
                // Move it to the front: files repeat a few metrics in turn.
                if i > 0 {
                    known.swap(0, i);
                }
                (known[0].1, known[0].2)
            }
            None => {
                let t = targets(table, metric);
                let r = t
                    .and_then(|_| METRICS.iter().position(|m| *m == metric))
                    .map(|i| i as u8);
                let ratio = t.is_some_and(|(ratio, _)| ratio);
                known.insert(0, (metric.to_string(), r, ratio));
                (r, ratio)
            }
        };
        if r.is_none() {
            self.count_unknown(table, metric);
        }
        (r, ratio)
    }

    fn count_unknown(&mut self, table: Table, metric: &str) {
        if metric.is_empty() {
            return;
        }
        if other_kind(table, metric).is_some() {
            *self
                .other_kind
                .entry((table, metric.to_string()))
                .or_default() += 1;
        } else {
            *self.unknown_metrics.entry(metric.to_string()).or_default() += 1;
        }
    }

    /// Adds one value (or, with `metric` empty, only the sample time) of `entity`. `labels`:
    /// (label index, value) of the row's non-empty labels.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add<'a>(
        &mut self,
        table: Table,
        entity: &str,
        labels: impl Iterator<Item = (usize, &'a str)> + Clone,
        ts_ms: i64,
        metric: &str,
        value: Option<f64>,
        line: u64,
    ) -> Result<(), Bad> {
        let (m, ratio) = self.metric(table, metric);
        if let (true, Some(_), Some(v)) = (ratio, m, value)
            && !(0.0..=1.0).contains(&v)
        {
            return Err(Bad(
                "ratio out of range",
                format!("{metric} is a ratio and must be within 0–1, got {v}"),
            ));
        }
        if let (Some(mi), Some(v)) = (m, value) {
            for (c, _) in targets(table, METRICS[mi as usize]).map_or(&[][..], |t| t.1) {
                if *c == "holders" {
                    check_count(metric, v)?;
                }
                check_value(c, v).map_err(|why| {
                    Bad(
                        "value out of range",
                        format!("{metric} {v}: {why} (a {} value)", table.name()),
                    )
                })?;
            }
        }
        let cols = &self.label_cols[table as usize];
        for (i, v) in labels.clone() {
            match cols[i] {
                Some(c) => check_label(c.ty, v)
                    .map_err(|e| Bad("bad label", format!("label {}: {e}", self.label_names[i])))?,
                None => {
                    self.ignored_labels.insert(i);
                }
            }
        }
        if m.is_none() && !metric.is_empty() {
            return Ok(());
        }
        let t = &mut self.tables[table as usize];
        if t.eid.is_empty() && self.rows_hint > 0 {
            t.eid.reserve(self.rows_hint);
            t.ts.reserve(self.rows_hint);
            t.metric.reserve(self.rows_hint);
            t.value.reserve(self.rows_hint);
        }
        let last = &mut self.last_entity[table as usize];
        let e = match last {
            Some((name, e)) if name == entity => *e,
            _ => {
                let e = match t.ids.get(entity) {
                    Some(&e) => e,
                    None => {
                        let e = t.names.len() as u32;
                        t.ids.insert(entity.to_string(), e);
                        t.names.push(entity.to_string());
                        t.labels.push(vec![None; self.label_names.len()]);
                        t.first_line.push(line);
                        e
                    }
                };
                match last {
                    Some((name, id)) => {
                        name.clear();
                        name.push_str(entity);
                        *id = e;
                    }
                    None => *last = Some((entity.to_string(), e)),
                }
                e
            }
        };
        let l = &mut t.labels[e as usize];
        for (i, v) in labels {
            if cols[i].is_some() && l[i].is_none() {
                l[i] = Some(v.to_string());
            }
        }
        t.eid.push(e);
        t.ts.push(ts_ms);
        t.metric.push(m.map_or(u32::MAX, u32::from));
        t.value
            .push(value.filter(|_| m.is_some()).unwrap_or(f64::NAN));
        Ok(())
    }

    /// Appends the observations `o` collected from the rows after this builder's (entities
    /// renumbered in order of appearance; labels first seen here win).
    pub(super) fn merge(&mut self, o: Builder) {
        for (t, ot) in self.tables.iter_mut().zip(o.tables) {
            let mut remap: Vec<u32> = Vec::with_capacity(ot.names.len());
            for (e, name) in ot.names.into_iter().enumerate() {
                let id = match t.ids.get(&name) {
                    Some(&id) => {
                        let mine = &mut t.labels[id as usize];
                        for (slot, v) in mine.iter_mut().zip(&ot.labels[e]) {
                            if slot.is_none() {
                                slot.clone_from(v);
                            }
                        }
                        id
                    }
                    None => {
                        let id = t.names.len() as u32;
                        t.ids.insert(name.clone(), id);
                        t.names.push(name);
                        t.labels.push(ot.labels[e].clone());
                        t.first_line.push(ot.first_line[e]);
                        id
                    }
                };
                remap.push(id);
            }
            t.eid.extend(ot.eid.iter().map(|&e| remap[e as usize]));
            t.ts.extend(ot.ts);
            t.metric.extend(ot.metric);
            t.value.extend(ot.value);
        }
        for (k, n) in o.unknown_metrics {
            *self.unknown_metrics.entry(k).or_default() += n;
        }
        for (k, n) in o.other_kind {
            *self.other_kind.entry(k).or_default() += n;
        }
        self.ignored_labels.extend(o.ignored_labels);
        self.nodes.merge(o.nodes);
    }

    /// Identity of every entity; warnings; observations per table. An entity without identity
    /// is an error at its first line (`Err((line, bad))`).
    pub(super) fn finish(
        mut self,
        report: &mut IngestReport,
        path: &Path,
    ) -> Result<Parsed, (u64, Bad)> {
        self.nodes
            .check()
            .map_err(|e| (e.line, Bad("bad node count", e.reason)))?;
        // Per entity: canonical column → value, from its labels.
        let mut by_col: [Vec<BTreeMap<&'static str, String>>; 3] = Default::default();
        for table in Table::ALL {
            let cols = &self.label_cols[table as usize];
            by_col[table as usize] = std::mem::take(&mut self.tables[table as usize].labels)
                .into_iter()
                .map(|l| {
                    l.into_iter()
                        .enumerate()
                        .filter_map(|(i, v)| Some((cols[i]?.name, v?)))
                        .collect()
                })
                .collect();
        }
        for table in Table::ALL {
            let t = &mut self.tables[table as usize];
            for (e, labels) in by_col[table as usize].iter_mut().enumerate() {
                let entity = &t.names[e];
                let key = entity_column(table);
                if labels.contains_key(key) {
                    continue;
                }
                if table != Table::Process || entity.parse::<u32>().is_ok() {
                    labels.insert(key, entity.clone());
                    continue;
                }
                // A process whose entity is a name, not a pid.
                if !labels.contains_key("process") {
                    labels.insert("process", entity.clone());
                } else if !labels.contains_key("pod") && !labels.contains_key("pod_uid") {
                    return Err((
                        t.first_line[e],
                        Bad(
                            "no identity",
                            format!(
                                "column entity: {entity:?} is not a pid, and the row has a \
                                 process label but no pid, pod or pod_uid label: nothing tells \
                                 this process apart from others; give a pid or pod label, or \
                                 use the pid as entity"
                            ),
                        ),
                    ));
                }
            }
        }
        self.warn_left_out(report, path);
        let p = path.display();
        let mut out = Vec::new();
        for table in Table::ALL {
            let t = std::mem::take(&mut self.tables[table as usize]);
            if t.eid.is_empty() {
                continue;
            }
            let h = t.eid.len();
            let df = DataFrame::new(
                h,
                vec![
                    Column::new("__eid".into(), t.eid),
                    Column::new("ts".into(), t.ts),
                    Column::new("__n".into(), vec![1u32; h]),
                    Column::new("__m".into(), t.metric),
                    Column::new("__v".into(), t.value),
                ],
            )
            .map_err(|e| (0, Bad("internal", e.to_string())))?;
            let values = column_feeds(table);
            out.push(Observations {
                table,
                df,
                values: Values::Long(values),
                labels: std::mem::take(&mut by_col[table as usize])
                    .into_iter()
                    .map(|l| l.into_iter().collect())
                    .collect(),
                names: t
                    .names
                    .into_iter()
                    .map(|n| format!("{p}: {} {n}", table.name()))
                    .collect(),
            });
        }
        Ok(Parsed {
            obs: out,
            nodes: self.nodes,
        })
    }

    /// Warns about what the file gave that was left out: values of unknown metrics and of
    /// metrics of another kind (both also counted as skipped), and labels not in the canonical
    /// frames.
    fn warn_left_out(&self, report: &mut IngestReport, path: &Path) {
        let p = path.display();
        if !self.unknown_metrics.is_empty() {
            let n: u64 = self.unknown_metrics.values().sum();
            let names: Vec<&str> = self.unknown_metrics.keys().map(String::as_str).collect();
            *report
                .skipped
                .entry("csv: unknown metric".into())
                .or_default() += n;
            report.warnings.push(format!(
                "{p}: ignored {n} value(s) of unknown metrics: {} (known: {}; kind node: {})",
                names.join(", "),
                METRICS.join(", "),
                NODE_METRICS.join(", ")
            ));
        }
        for ((table, metric), n) in &self.other_kind {
            *report
                .skipped
                .entry("csv: metric of another kind".into())
                .or_default() += n;
            report.warnings.push(format!(
                "{p}: ignored {n} value(s) of {metric} on kind={} rows: {}",
                table.name(),
                other_kind(*table, metric).unwrap_or_default()
            ));
        }
        let ignored: Vec<&str> = self
            .ignored_labels
            .iter()
            .map(|&i| self.label_names[i].as_str())
            .filter(|l| *l != "kind")
            .collect();
        if !ignored.is_empty() {
            report.warnings.push(format!(
                "{p}: labels not in the canonical frames, ignored: {}",
                ignored.join(", ")
            ));
        }
    }
}

/// A count (holders, GPUs allocated or in total) is a whole number in 0–1024.
fn check_count(metric: &str, v: f64) -> Result<(), Bad> {
    if v.fract() != 0.0 || !(0.0..=1024.0).contains(&v) {
        return Err(Bad(
            "bad count",
            format!("{metric} {v}: a count of GPUs or holders is a whole number within 0–1024"),
        ));
    }
    Ok(())
}

fn check_label(ty: ColType, v: &str) -> Result<(), String> {
    let ok = match ty {
        ColType::Utf8 => true,
        ColType::UInt32 => v.parse::<u32>().is_ok(),
        ColType::UInt64 => v.parse::<u64>().is_ok(),
        ColType::Int64 => v.parse::<i64>().is_ok(),
        ColType::Float64 => v.parse::<f64>().is_ok(),
        ColType::Bool => matches!(v, "true" | "false" | "1" | "0"),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{:?} is not {}", short(v), ty.doc_name()))
    }
}

/// Per canonical column of `table`, how it aggregates and the metrics (by index in
/// [`METRICS`]) that feed it (`sm_ratio` and `sm_active_ratio` both feed a process's sm
/// columns).
fn column_feeds(table: Table) -> Vec<(&'static str, Agg, Vec<u32>)> {
    let mut values: Vec<(&'static str, Agg, Vec<u32>)> = Vec::new();
    for (mi, m) in METRICS.iter().enumerate() {
        for (c, agg) in targets(table, m).map(|t| t.1).unwrap_or(&[]) {
            match values.iter_mut().find(|(v, _, _)| v == c) {
                Some((_, _, ids)) => ids.push(mi as u32),
                None => values.push((*c, *agg, vec![mi as u32])),
            }
        }
    }
    values
}
