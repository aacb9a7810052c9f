//! The `csv:` source: the generic long format (`timestamp, entity, metric, value, labels…`) and
//! `nvidia-smi --query-gpu=… --format=csv` logs (detected from the header), into observations
//! that [`super::resample`] turns into rows of the canonical `gpu`, `mig` and `process` tables at
//! each entity's own sampling period (`--interval auto`), or at an explicit `--interval` when
//! that is coarser.
//!
//! Two readers, one result. A generic file is read first by polars' multi-threaded CSV reader
//! (timestamps and values parsed as numbers while reading) and checked column by column; the
//! moment anything is off — a line polars cannot parse, a bad timestamp, kind, label or ratio,
//! an entity without identity, or `--skip-bad-rows` — the file is read again, line by line, by
//! the `csv` crate, which names the file, line and what was expected (or skips and counts the
//! bad lines). nvidia-smi logs always take the line reader. Both feed the same observation
//! builder, so identity, labels and warnings do not depend on the reader.
//!
//! Identity: a row's `entity` fills the table's key column when no label does (`uuid` for gpu,
//! `mig_uuid` for mig, `pid` for process). On a process row an entity that is not a pid becomes
//! the process name (`process`) when the row has none, so distinct entities stay distinct; a
//! process row with neither a pid, a pod, a pod UID nor a usable entity is an error. A metric of
//! another kind (`gpu_busy_ratio` on a process row) is ignored with a warning that names the
//! kinds that take it and the equivalent (`sm_ratio`). Unknown metrics are counted and warned
//! about. nvidia-smi logs carry no time zone (read as UTC, with a warning) and no node (null).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use polars::prelude::*;
use rustc_hash::FxHashMap;

use super::resample::{self, Agg, Observations, RowSpec, Sampling, Values};
use super::schema::{ColType, Table};
use super::{IngestError, IngestOptions, IngestReport};

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
];

/// (kind, metric) → (is ratio, [(column, aggregation)]).
fn targets(table: Table, metric: &str) -> Option<(bool, &'static [(&'static str, Agg)])> {
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
        _ => return None,
    })
}

/// What to say about a metric that exists, but not for this kind: the kinds that take it and
/// the equivalent for this kind, if any.
fn other_kind(table: Table, metric: &str) -> Option<String> {
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

/// Values that read as null (nvidia-smi's `[N/A]`, `[Not Supported]`, … too).
fn is_null_marker(t: &str) -> bool {
    t.is_empty()
        || t == "N/A"
        || t == "NaN"
        || t == "nan"
        || (t.starts_with('[') && t.ends_with(']'))
}

/// The longest header line read (1 MiB).
const MAX_HEADER_BYTES: usize = 1 << 20;

/// Text from the input as an error message shows it: at most 200 characters.
fn short(s: &str) -> String {
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
struct Bad(&'static str, String);

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
struct Builder {
    /// Label names (the header's columns, or nvidia-smi's label columns), by label index.
    label_names: Vec<String>,
    /// Per table, per label index: the canonical column the label fills, if any.
    label_cols: [Vec<Option<super::schema::Col>>; 3],
    tables: [TableObs; 3],
    /// Per table: metric names seen → (index in `METRICS` when it feeds the table, is a
    /// ratio). A file has a handful of metrics: a short list beats hashing every row.
    metrics: [Vec<(String, Option<u8>, bool)>; 3],
    /// Per table: the last entity seen and its id (rows of one entity usually follow each
    /// other).
    last_entity: [Option<(String, u32)>; 3],
    /// Rows the file has (the polars reader knows): a table's vectors are reserved for them at
    /// its first row, instead of growing (and faulting in fresh pages) by doubling.
    rows_hint: usize,
    unknown_metrics: BTreeMap<String, u64>,
    other_kind: BTreeMap<(Table, String), u64>,
    /// Label indexes that fill no column of some table they were used with.
    ignored_labels: BTreeSet<usize>,
}

impl Builder {
    fn new(label_names: Vec<String>) -> Builder {
        let cols = |t: Table| -> Vec<Option<super::schema::Col>> {
            label_names
                .iter()
                .map(|n| {
                    t.column(n)
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
        }
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
    fn add<'a>(
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
                super::check_value(c, v).map_err(|why| {
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
    fn merge(&mut self, o: Builder) {
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
    }

    /// Identity of every entity; warnings; observations per table. An entity without identity
    /// is an error at its first line (`Err((line, bad))`).
    fn finish(
        mut self,
        report: &mut IngestReport,
        path: &Path,
    ) -> Result<Vec<Observations>, (u64, Bad)> {
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
        let p = path.display();
        if !self.unknown_metrics.is_empty() {
            let n: u64 = self.unknown_metrics.values().sum();
            let names: Vec<&str> = self.unknown_metrics.keys().map(String::as_str).collect();
            *report
                .skipped
                .entry("csv: unknown metric".into())
                .or_default() += n;
            report.warnings.push(format!(
                "{p}: ignored {n} value(s) of unknown metrics: {} (known: {})",
                names.join(", "),
                METRICS.join(", ")
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
            // Per canonical column, the metrics that feed it (`sm_ratio` and `sm_active_ratio`
            // both feed a process's sm columns).
            let mut values: Vec<(&'static str, Agg, Vec<u32>)> = Vec::new();
            for (mi, m) in METRICS.iter().enumerate() {
                for (c, agg) in targets(table, m).map(|t| t.1).unwrap_or(&[]) {
                    match values.iter_mut().find(|(v, _, _)| v == c) {
                        Some((_, _, ids)) => ids.push(mi as u32),
                        None => values.push((*c, *agg, vec![mi as u32])),
                    }
                }
            }
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
        Ok(out)
    }
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

/// Counts bad lines, or fails on the first one.
struct BadLines<'a> {
    path: &'a Path,
    skip: bool,
    count: u64,
    first: Option<(u64, String)>,
}

impl BadLines<'_> {
    fn handle(
        &mut self,
        line: u64,
        bad: Bad,
        report: &mut IngestReport,
    ) -> Result<(), IngestError> {
        if !self.skip {
            return Err(IngestError::Line {
                path: self.path.to_path_buf(),
                line,
                reason: bad.1,
            });
        }
        self.count += 1;
        report.skip(format!("csv: {}", bad.0));
        self.first.get_or_insert((line, bad.1));
        Ok(())
    }

    fn finish(self, report: &mut IngestReport) {
        if let Some((line, reason)) = self.first {
            report.warnings.push(format!(
                "{}: skipped {} bad line(s) (--skip-bad-rows); first at line {line}: {reason}",
                self.path.display(),
                self.count
            ));
        }
    }
}

/// Reads one CSV file into per-table rows (history file schema, `ts` as int64 ms) and what was
/// found about its sampling.
pub(super) fn read(
    path: &Path,
    opts: &IngestOptions,
    report: &mut IngestReport,
) -> Result<(Vec<(Table, DataFrame)>, Sampling), IngestError> {
    let io = |e: std::io::Error| IngestError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    if opts.interval_ms.is_some_and(|i| i <= 0) {
        return Err(IngestError::File {
            path: path.to_path_buf(),
            reason: "the bucket interval must be positive".into(),
        });
    }
    let header = {
        // The header is read from the first MiB only: a file whose first line is longer is
        // not a CSV with a header (and is not copied whole into memory and an error message).
        use std::io::Read as _;
        let mut first = Vec::new();
        std::fs::File::open(path)
            .map_err(io)?
            .take(MAX_HEADER_BYTES as u64 + 1)
            .read_to_end(&mut first)
            .map_err(io)?;
        if first.len() > MAX_HEADER_BYTES && !first.contains(&b'\n') {
            return Err(IngestError::Line {
                path: path.to_path_buf(),
                line: 1,
                reason: format!(
                    "the first line is longer than {} KiB: expected a CSV header (timestamp, \
                     entity, metric, value, labels… or nvidia-smi's)",
                    MAX_HEADER_BYTES / 1024
                ),
            });
        }
        let mut rdr = ::csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(::csv::Trim::All)
            .from_reader(first.as_slice());
        match rdr.byte_records().next() {
            Some(Ok(h)) => h
                .iter()
                .map(|f| {
                    String::from_utf8_lossy(f)
                        .trim_start_matches('\u{feff}')
                        .to_string()
                })
                .collect::<Vec<String>>(),
            Some(Err(e)) => {
                return Err(IngestError::Line {
                    path: path.to_path_buf(),
                    line: 1,
                    reason: e.to_string(),
                });
            }
            None => {
                return Err(IngestError::File {
                    path: path.to_path_buf(),
                    reason: "empty file; expected a CSV header".into(),
                });
            }
        }
    };
    let format = detect(&header).ok_or_else(|| IngestError::Line {
        path: path.to_path_buf(),
        line: 1,
        reason: format!(
            "unrecognised header {:?}; expected the generic long format (timestamp, entity, metric, \
             value, labels…) or an nvidia-smi --query-gpu … --format=csv header",
            short(&header.join(","))
        ),
    })?;
    if matches!(format, Format::NvidiaSmi(_)) {
        report.warnings.push(format!(
            "{}: nvidia-smi timestamps carry no time zone; read as UTC; node unknown (null)",
            path.display()
        ));
    }
    let timing = std::env::var_os("TESSERA_TIMINGS").is_some();
    let t0 = std::time::Instant::now();
    // The fast reader works on a copy of the report: a file it gives up on leaves no trace.
    let obs = match &format {
        Format::Generic(idx) if !opts.skip_bad_rows => {
            let mut scratch = report.clone();
            match read_fast(path, &header, *idx, &mut scratch)? {
                Some(obs) => {
                    *report = scratch;
                    obs
                }
                None => read_lines(path, &header, &format, opts, report)?,
            }
        }
        _ => read_lines(path, &header, &format, opts, report)?,
    };
    let spec = RowSpec {
        grid_ms: 1,
        requested_ms: opts.interval_ms,
        fallback_ms: opts.interval_ms.unwrap_or(10_000) as f64,
    };
    if timing {
        eprintln!("timings: csv read {:?}", t0.elapsed());
    }
    let mut out = Vec::new();
    let mut sampling = Sampling::default();
    for o in obs {
        let table = o.table;
        let t = std::time::Instant::now();
        let (df, s) = resample::resample(o, spec)?;
        if timing {
            eprintln!("timings: resample {} {:?}", table.name(), t.elapsed());
        }
        sampling.merge(s);
        if df.height() > 0 {
            out.push((table, df));
        }
    }
    Ok((out, sampling))
}

/// The generic format through polars' CSV reader. `Ok(None)` when the file needs the line
/// reader (anything polars cannot parse or any row that does not check out).
fn read_fast(
    path: &Path,
    header: &[String],
    [ti, ei, mi, vi]: [usize; 4],
    report: &mut IngestReport,
) -> Result<Option<Vec<Observations>>, IngestError> {
    // Duplicate column names: the line reader reports them the way it always has.
    let distinct: BTreeSet<&String> = header.iter().collect();
    if distinct.len() != header.len() {
        return Ok(None);
    }
    let schema: Schema = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let dt = if i == ti || i == vi {
                DataType::Float64
            } else {
                DataType::String
            };
            Field::new(h.as_str().into(), dt)
        })
        .collect();
    // No null-value list (checking every field against it cost a tenth of the read): empty
    // fields are null, `NaN` parses (and is taken as null below), and any other marker (`N/A`,
    // `[Not Supported]`) sends the file to the line reader, which knows them.
    let reader = CsvReadOptions::default()
        .with_has_header(true)
        .with_schema(Some(Arc::new(schema)))
        .try_into_reader_with_file_path(Some(path.to_path_buf()));
    let t0 = std::time::Instant::now();
    let df = match reader.and_then(|r| r.finish()) {
        Ok(df) => df,
        Err(_) => return Ok(None),
    };
    if std::env::var_os("TESSERA_TIMINGS").is_some() {
        eprintln!("timings: polars csv reader {:?}", t0.elapsed());
    }
    if df.width() != header.len() {
        return Ok(None);
    }
    // The reader's chunks are walked in place (a rechunk would copy every string view); when
    // the columns' chunks do not line up, they are rechunked first.
    let mut df = df;
    let lengths: Vec<Vec<usize>> = df
        .columns()
        .iter()
        .map(|c| {
            c.as_materialized_series()
                .chunk_lengths()
                .collect::<Vec<_>>()
        })
        .collect();
    if lengths.windows(2).any(|w| w[0] != w[1]) {
        df.rechunk_mut();
    }
    let cols = df.columns();
    let f64_chunks =
        |i: usize| -> Result<Vec<&polars_arrow::array::PrimitiveArray<f64>>, IngestError> {
            Ok(cols[i].f64()?.downcast_iter().collect())
        };
    let str_chunks = |i: usize| -> Result<Vec<&Utf8ViewArray>, IngestError> {
        Ok(cols[i].str()?.downcast_iter().collect())
    };
    let ts = f64_chunks(ti)?;
    let val = f64_chunks(vi)?;
    let ent = str_chunks(ei)?;
    let met = str_chunks(mi)?;
    let kind_i = header.iter().position(|h| h == "kind");
    let kind = kind_i.map(str_chunks).transpose()?;
    let labels: Vec<(usize, Vec<&Utf8ViewArray>)> = (0..header.len())
        .filter(|i| ![ti, ei, mi, vi].contains(i))
        .map(|i| Ok((i, str_chunks(i)?)))
        .collect::<Result<_, IngestError>>()?;
    // Rows are split into one contiguous range per thread; each builds its observations, and
    // the builders are merged in order (entity ids, first-seen labels and counts come out as
    // one pass over the file would give them).
    let total = df.height();
    // (Unit tests always split, so the merge is tested on any machine.)
    let threads = if cfg!(test) {
        3.min(total.max(1))
    } else {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4)
            .min(total.div_ceil(100_000).max(1))
    };
    let starts: Vec<usize> = {
        let mut at = 0;
        ts.iter()
            .map(|c| {
                let s = at;
                at += c.len();
                s
            })
            .collect()
    };
    let run = |from: usize, to: usize| -> Option<Builder> {
        let mut b = Builder::new(header.to_vec());
        b.rows_hint = to - from;
        for c in 0..ts.len() {
            let (c0, c1) = (starts[c], starts[c] + ts[c].len());
            let (lo, hi) = (from.max(c0), to.min(c1));
            if lo >= hi {
                continue;
            }
            let (tsa, val, ent, met) = (ts[c], val[c], ent[c], met[c]);
            let kind = kind.as_ref().map(|k| k[c]);
            let labels: Vec<(usize, &Utf8ViewArray)> =
                labels.iter().map(|(i, a)| (*i, a[c])).collect();
            let (ts_values, ts_valid) = (tsa.values(), tsa.validity());
            for row in lo - c0..hi - c0 {
                if ts_valid.is_some_and(|v| !v.get_bit(row)) {
                    return None;
                }
                let t = ts_values[row];
                let (Some(e), Some(m)) = (opt(ent, row), opt(met, row)) else {
                    return None;
                };
                let ms = (t * 1000.0).round();
                if !(t.is_finite() && ms.abs() < 9.0e18 && TS_RANGE_MS.contains(&(ms as i64))) {
                    return None;
                }
                let table = match kind.and_then(|k| opt(k, row)) {
                    None | Some("gpu") => Table::Gpu,
                    Some("mig") => Table::Mig,
                    Some("process") => Table::Process,
                    Some(_) => return None,
                };
                let v = val.get(row).filter(|v| v.is_finite());
                let row_labels = labels
                    .iter()
                    .filter_map(|(i, a)| opt(a, row).map(|v| (*i, v)));
                b.add(table, e, row_labels, (t * 1000.0).round() as i64, m, v, 0)
                    .ok()?;
            }
        }
        Some(b)
    };
    let parts: Vec<Option<Builder>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let (from, to) = (total * k / threads, total * (k + 1) / threads);
                scope.spawn(move || run(from, to))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    });
    let mut parts = parts.into_iter();
    let Some(Some(mut b)) = parts.next() else {
        return Ok(None);
    };
    for p in parts {
        match p {
            Some(p) => b.merge(p),
            None => return Ok(None),
        }
    }
    Ok(b.finish(report, path).ok())
}

type Utf8ViewArray = polars_arrow::array::Utf8ViewArray;

/// Row `i` of a string array (`None` when null or empty, as the line reader takes it).
fn opt(a: &Utf8ViewArray, i: usize) -> Option<&str> {
    use polars_arrow::array::Array as _;
    a.is_valid(i).then(|| a.value(i)).filter(|s| !s.is_empty())
}

/// Any format, line by line with the `csv` crate: exact errors (file:line: what was expected)
/// or, with `--skip-bad-rows`, counted skips.
fn read_lines(
    path: &Path,
    header: &[String],
    format: &Format,
    opts: &IngestOptions,
    report: &mut IngestReport,
) -> Result<Vec<Observations>, IngestError> {
    let file = std::fs::File::open(path).map_err(|e| IngestError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    let mut rdr = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(::csv::Trim::All)
        .from_reader(std::io::BufReader::with_capacity(1 << 20, file));
    let mut b = Builder::new(match format {
        Format::Generic(_) => header.to_vec(),
        Format::NvidiaSmi(_) => SMI_LABELS.iter().map(|l| l.to_string()).collect(),
    });
    let mut bad = BadLines {
        path,
        skip: opts.skip_bad_rows,
        count: 0,
        first: None,
    };
    let mut repeated_headers = 0u64;
    let mut rec = ::csv::ByteRecord::new();
    let mut first = true;
    loop {
        match rdr.read_byte_record(&mut rec) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                bad.handle(line, Bad("unreadable line", e.to_string()), report)?;
                continue;
            }
        }
        if std::mem::take(&mut first) {
            continue; // the header
        }
        let line = rec.position().map_or(0, |p| p.line());
        let fields: Result<Vec<&str>, _> = rec.iter().map(std::str::from_utf8).collect();
        let Ok(fields) = fields else {
            bad.handle(
                line,
                Bad("not UTF-8", "the line is not UTF-8 text".into()),
                report,
            )?;
            continue;
        };
        if fields.iter().all(|f| f.is_empty()) {
            continue;
        }
        if fields.iter().zip(header).all(|(f, h)| f == h) && fields.len() == header.len() {
            repeated_headers += 1;
            continue;
        }
        if fields.len() != header.len() {
            bad.handle(
                line,
                Bad(
                    "wrong number of fields",
                    format!(
                        "expected {} fields ({}), found {}",
                        header.len(),
                        short(&header.join(", ")),
                        fields.len()
                    ),
                ),
                report,
            )?;
            continue;
        }
        let res = match format {
            Format::Generic(g) => generic_line(g, header, &fields, &mut b, line),
            Format::NvidiaSmi(cols) => smi_line(cols, &fields, &mut b, line),
        };
        if let Err(e) = res {
            bad.handle(line, e, report)?;
        }
    }
    if repeated_headers > 0 {
        report.warnings.push(format!(
            "{}: {repeated_headers} repeated header line(s) ignored",
            path.display()
        ));
    }
    bad.finish(report);
    b.finish(report, path)
        .map_err(|(line, e)| IngestError::Line {
            path: path.to_path_buf(),
            line,
            reason: e.1,
        })
}

enum Format {
    /// Indexes of timestamp, entity, metric, value.
    Generic([usize; 4]),
    /// Per column: what it feeds.
    NvidiaSmi(Vec<SmiCol>),
}

fn detect(header: &[String]) -> Option<Format> {
    let find = |n: &str| header.iter().position(|h| h == n);
    if let (Some(t), Some(e), Some(m), Some(v)) = (
        find("timestamp"),
        find("entity"),
        find("metric"),
        find("value"),
    ) {
        return Some(Format::Generic([t, e, m, v]));
    }
    let smi = header.first().is_some_and(|h| h == "timestamp")
        && header
            .iter()
            .any(|h| h.contains('.') || h == "index" || h == "uuid");
    smi.then(|| Format::NvidiaSmi(header.iter().map(|h| smi_col(h)).collect()))
}

fn generic_line(
    idx: &[usize; 4],
    header: &[String],
    fields: &[&str],
    b: &mut Builder,
    line: u64,
) -> Result<(), Bad> {
    let [ti, ei, mi, vi] = *idx;
    let ts = parse_generic_ts(fields[ti]).ok_or_else(|| {
        Bad(
            "bad timestamp",
            format!(
                "timestamp {:?}: expected unix seconds or an RFC 3339 time, between 1970 and 9999",
                short(fields[ti])
            ),
        )
    })?;
    let entity = fields[ei];
    if entity.is_empty() {
        return Err(Bad("missing entity", "entity is empty".into()));
    }
    let value = parse_number(fields[vi]).map_err(|e| Bad("bad value", format!("value: {e}")))?;
    let labels = fields
        .iter()
        .enumerate()
        .filter(|(i, f)| ![ti, ei, mi, vi].contains(i) && !is_null_marker(f))
        .map(|(i, f)| (i, *f));
    let kind = header
        .iter()
        .position(|h| h == "kind")
        .map(|k| fields[k])
        .filter(|f| !is_null_marker(f));
    let table = match kind {
        None | Some("gpu") => Table::Gpu,
        Some("mig") => Table::Mig,
        Some("process") => Table::Process,
        Some(other) => {
            return Err(Bad(
                "bad kind",
                format!("kind {other:?}: expected gpu, mig or process"),
            ));
        }
    };
    b.add(table, entity, labels, ts, fields[mi], value, line)
}

/// Timestamps outside 1970-01-01 … 9999-12-31 are not telemetry (a number like
/// 99999999999999999999 would otherwise wrap to the year −292 million).
const TS_RANGE_MS: std::ops::RangeInclusive<i64> = 0..=253_402_300_799_999;

fn parse_generic_ts(s: &str) -> Option<i64> {
    let ms = if let Ok(secs) = s.parse::<f64>() {
        let ms = (secs * 1000.0).round();
        (secs.is_finite() && ms.abs() < 9.0e18).then_some(ms as i64)
    } else {
        chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.timestamp_millis())
    }?;
    TS_RANGE_MS.contains(&ms).then_some(ms)
}

/// Parses a number; empty, `NaN` and bracketed nvidia-smi markers (`[N/A]`) are null.
fn parse_number(s: &str) -> Result<Option<f64>, String> {
    let t = s.trim();
    if is_null_marker(t) {
        return Ok(None);
    }
    let v: f64 = t
        .parse()
        .map_err(|_| format!("{:?} is not a number", short(t)))?;
    Ok(v.is_finite().then_some(v))
}

/// What an nvidia-smi column feeds.
enum SmiCol {
    Timestamp,
    Label(&'static str),
    Metric { metric: &'static str, scale: f64 },
    Ignored,
}

fn smi_col(h: &str) -> SmiCol {
    let (name, unit) = match h.split_once(" [") {
        Some((n, u)) => (n.trim(), u.trim_end_matches(']')),
        None => (h.trim(), ""),
    };
    let unit_scale = match unit {
        "%" => 0.01,
        "MiB" => 1_048_576.0,
        "KiB" => 1024.0,
        "GiB" => 1_073_741_824.0,
        "mW" => 0.001,
        _ => 1.0,
    };
    match name {
        "timestamp" => SmiCol::Timestamp,
        "index" => SmiCol::Label("gpu"),
        "uuid" => SmiCol::Label("uuid"),
        "name" => SmiCol::Label("model"),
        "utilization.gpu" => SmiCol::Metric {
            metric: "gpu_busy_ratio",
            scale: if unit.is_empty() { 0.01 } else { unit_scale },
        },
        "utilization.memory" => SmiCol::Metric {
            metric: "memory_controller_ratio",
            scale: if unit.is_empty() { 0.01 } else { unit_scale },
        },
        "memory.used" => SmiCol::Metric {
            metric: "memory_used_bytes",
            scale: if unit.is_empty() {
                1_048_576.0
            } else {
                unit_scale
            },
        },
        "memory.total" => SmiCol::Metric {
            metric: "memory_total_bytes",
            scale: if unit.is_empty() {
                1_048_576.0
            } else {
                unit_scale
            },
        },
        "power.draw" | "power.draw.average" => SmiCol::Metric {
            metric: "power_watts",
            scale: unit_scale,
        },
        "temperature.gpu" => SmiCol::Metric {
            metric: "temperature_celsius",
            scale: 1.0,
        },
        _ => SmiCol::Ignored,
    }
}

/// Parses an nvidia-smi value like `45 %`, `1024 MiB`, `72.5 W` or `[N/A]`.
fn parse_smi_value(s: &str, header_scale: f64) -> Result<Option<f64>, String> {
    let t = s.trim();
    let mut parts = t.split_whitespace();
    let Some(num) = parts.next() else {
        return Ok(None);
    };
    if num.starts_with('[') || num == "N/A" {
        return Ok(None);
    }
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{t:?} is not a number with an optional unit"))?;
    let scale = match parts.next() {
        None => header_scale,
        Some("%") => 0.01,
        Some("MiB") => 1_048_576.0,
        Some("KiB") => 1024.0,
        Some("GiB") => 1_073_741_824.0,
        Some("W") | Some("C") => 1.0,
        Some("mW") => 0.001,
        Some(u) => return Err(format!("{t:?}: unknown unit {u:?}")),
    };
    Ok(Some(v * scale))
}

/// The label columns of an nvidia-smi log, by label index.
const SMI_LABELS: [&str; 3] = ["gpu", "uuid", "model"];

fn smi_line(cols: &[SmiCol], fields: &[&str], b: &mut Builder, line: u64) -> Result<(), Bad> {
    let mut ts = None;
    let mut labels: Vec<(usize, &str)> = Vec::new();
    let mut metrics = Vec::new();
    for (c, f) in cols.iter().zip(fields) {
        match c {
            SmiCol::Timestamp => {
                let t = chrono::NaiveDateTime::parse_from_str(f, "%Y/%m/%d %H:%M:%S%.f").map_err(
                    |_| {
                        Bad(
                            "bad timestamp",
                            format!("timestamp {f:?}: expected YYYY/MM/DD HH:MM:SS.mmm"),
                        )
                    },
                )?;
                ts = Some(t.and_utc().timestamp_millis());
            }
            SmiCol::Label(l) => {
                if !f.is_empty() && !f.starts_with('[') {
                    let i = SMI_LABELS.iter().position(|n| n == l).expect("a label");
                    labels.push((i, f));
                }
            }
            SmiCol::Metric { metric, scale } => {
                let v = parse_smi_value(f, *scale)
                    .map_err(|e| Bad("bad value", format!("{metric}: {e}")))?;
                metrics.push((*metric, v));
            }
            SmiCol::Ignored => {}
        }
    }
    let ts = ts.ok_or_else(|| Bad("bad timestamp", "no timestamp column".into()))?;
    let entity = labels
        .iter()
        .find(|(k, _)| *k == 1)
        .or_else(|| labels.iter().find(|(k, _)| *k == 0))
        .map(|(_, v)| *v)
        .ok_or_else(|| Bad("missing entity", "neither uuid nor index is set".into()))?;
    // Validate every value first so a bad line contributes nothing.
    for (metric, v) in &metrics {
        if let Some((true, _)) = targets(Table::Gpu, metric)
            && let Some(v) = v
            && !(0.0..=1.0).contains(v)
        {
            return Err(Bad(
                "ratio out of range",
                format!("{metric} must be within 0–100 %, got {} %", v * 100.0),
            ));
        }
    }
    if metrics.is_empty() {
        b.add(
            Table::Gpu,
            entity,
            labels.iter().copied(),
            ts,
            "",
            None,
            line,
        )?;
    }
    for (metric, v) in metrics {
        b.add(
            Table::Gpu,
            entity,
            labels.iter().copied(),
            ts,
            metric,
            v,
            line,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(obs: Vec<Observations>) -> Vec<(Table, DataFrame)> {
        let spec = RowSpec {
            grid_ms: 1,
            requested_ms: None,
            fallback_ms: 10_000.0,
        };
        obs.into_iter()
            .map(|o| {
                let t = o.table;
                let (df, _) = resample::resample(o, spec).expect("resample");
                (t, df)
            })
            .collect()
    }

    fn header(path: &Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).expect("read");
        text.lines()
            .next()
            .expect("header")
            .split(',')
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn fast_reader_takes_clean_files_and_agrees_with_the_line_reader() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("clean.csv");
        // Quoted fields with commas, empty labels and values, null markers, several kinds and
        // labels first seen on a later row.
        let mut text = String::from("timestamp,entity,metric,value,kind,node,uuid,model,pid,pod\n");
        for i in 1..=50i64 {
            let t = 1_793_628_000 + 60 * i;
            text.push_str(&format!(
                "{t},GPU-a,gpu_busy_ratio,{},gpu,n1,,\"NVIDIA H100 80GB HBM3, SXM\",,\n",
                (i % 10) as f64 / 10.0
            ));
            text.push_str(&format!("{t},GPU-a,memory_used_bytes,,gpu,n1,,,,\n"));
            text.push_str(&format!("{t},GPU-a,power_watts,NaN,gpu,n1,,,,\n"));
            text.push_str(&format!(
                "{}.5,7,memory_used_bytes,2e9,process,n1,GPU-a,,,{}\n",
                t - 1,
                if i > 3 { "pod-7" } else { "" }
            ));
            text.push_str(&format!("{t},7,sm_ratio,0,process,n1,GPU-a,,,\n"));
            text.push_str(&format!("{t},svc,fan_ratio,1,gpu,n1,GPU-b,,,\n"));
        }
        std::fs::write(&path, text).expect("write");
        let h = header(&path);
        let Some(Format::Generic(idx)) = detect(&h) else {
            panic!("generic header")
        };
        let mut fast_report = IngestReport::default();
        let fast = read_fast(&path, &h, idx, &mut fast_report)
            .expect("read")
            .expect("the fast reader takes a clean file");
        let mut line_report = IngestReport::default();
        let lines = read_lines(
            &path,
            &h,
            &Format::Generic(idx),
            &IngestOptions::default(),
            &mut line_report,
        )
        .expect("lines");
        assert_eq!(fast_report.warnings, line_report.warnings);
        assert_eq!(fast_report.skipped, line_report.skipped);
        let (a, b) = (rows(fast), rows(lines));
        assert_eq!(a.len(), b.len());
        for ((ta, da), (tb, db)) in a.iter().zip(&b) {
            assert_eq!(ta, tb);
            assert!(da.equals_missing(db), "{ta:?}:\n{da}\n{db}");
            assert!(da.height() > 0);
        }
        // The pod first seen on a later row is the process's.
        let p = &a
            .iter()
            .find(|(t, _)| *t == Table::Process)
            .expect("process")
            .1;
        assert_eq!(
            p.column("pod").expect("pod").str().expect("s").get(0),
            Some("pod-7")
        );

        // An RFC 3339 timestamp, a null marker like N/A (or anything else polars does not parse
        // as a number) goes to the line reader.
        for (name, line) in [
            (
                "rfc3339.csv",
                "2026-11-02T14:00:11Z,GPU-a,gpu_busy_ratio,0.4",
            ),
            ("na.csv", "1793628000,GPU-a,gpu_busy_ratio,N/A"),
        ] {
            let odd = dir.path().join(name);
            std::fs::write(&odd, format!("timestamp,entity,metric,value\n{line}\n"))
                .expect("write");
            let h = header(&odd);
            let Some(Format::Generic(idx)) = detect(&h) else {
                panic!("generic header")
            };
            assert!(
                read_fast(&odd, &h, idx, &mut IngestReport::default())
                    .expect("read")
                    .is_none(),
                "{name}"
            );
        }
    }
}
