//! The `csv:` source: the generic long format (`timestamp, entity, metric, value, labels…`) and
//! `nvidia-smi --query-gpu=… --format=csv` logs (detected from the header), bucketed into
//! `interval_ms` rows of the canonical `gpu`, `mig` and `process` tables (mean/max/sum as the
//! canonical column wants; `ts` is the bucket's end, `samples` the distinct timestamps in it).
//!
//! Bad lines (wrong field count, bad timestamp or number, ratio outside 0–1, bad label) are errors
//! naming file and line, or counted skips with `skip_bad_rows`. Unknown metrics are counted and
//! warned about, not errors. It does not read time zones from nvidia-smi logs (they carry none:
//! read as UTC, with a warning), and it does not infer the node for nvidia-smi logs (null).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use polars::prelude::*;

use super::schema::{ColType, Table};
use super::{IngestError, IngestOptions, IngestReport};

/// How a canonical metric feeds the canonical columns.
#[derive(Clone, Copy)]
enum Agg {
    Mean,
    Max,
    Sum,
}

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

/// The label that defaults to the entity when absent.
fn entity_column(table: Table) -> &'static str {
    match table {
        Table::Gpu => "uuid",
        Table::Mig => "mig_uuid",
        Table::Process => "pid",
    }
}

#[derive(Default)]
struct MetricAcc {
    sum: f64,
    n: u64,
    max: f64,
}

#[derive(Default)]
struct Bucket {
    timestamps: BTreeSet<i64>,
    metrics: BTreeMap<&'static str, MetricAcc>,
}

#[derive(Default)]
struct Entity {
    labels: BTreeMap<String, String>,
    buckets: BTreeMap<i64, Bucket>,
}

/// Groups values by (table, entity) and bucket end.
struct Aggregator {
    interval_ms: i64,
    entities: BTreeMap<(Table, String), Entity>,
    unknown_metrics: BTreeMap<String, u64>,
    ignored_labels: BTreeSet<String>,
}

/// A bad line: category (for counting) and detail.
struct Bad(&'static str, String);

impl Aggregator {
    fn add(
        &mut self,
        table: Table,
        entity: &str,
        labels: &BTreeMap<String, String>,
        ts_ms: i64,
        metric: &str,
        value: Option<f64>,
    ) -> Result<(), Bad> {
        let tgt = targets(table, metric);
        if let (Some((true, _)), Some(v)) = (tgt, value)
            && !(0.0..=1.0).contains(&v)
        {
            return Err(Bad(
                "ratio out of range",
                format!("{metric} is a ratio and must be within 0–1, got {v}"),
            ));
        }
        for (k, v) in labels {
            if table.column(k).is_none() || k == "ts" || k == "samples" || k == "interval_ms" {
                self.ignored_labels.insert(k.clone());
                continue;
            }
            if let Some(c) = table.column(k) {
                check_label(c.ty, v).map_err(|e| Bad("bad label", format!("label {k}: {e}")))?;
            }
        }
        if tgt.is_none() && !metric.is_empty() {
            *self.unknown_metrics.entry(metric.to_string()).or_default() += 1;
            return Ok(());
        }
        let e = self
            .entities
            .entry((table, entity.to_string()))
            .or_default();
        for (k, v) in labels {
            e.labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let end = (ts_ms.div_euclid(self.interval_ms)
            + i64::from(ts_ms.rem_euclid(self.interval_ms) != 0))
            * self.interval_ms;
        let b = e.buckets.entry(end).or_default();
        b.timestamps.insert(ts_ms);
        match (tgt, value) {
            (None, _) => {}
            (Some((_, cols)), Some(v)) => {
                for (c, _) in cols {
                    let acc = b.metrics.entry(c).or_default();
                    acc.max = if acc.n == 0 { v } else { acc.max.max(v) };
                    acc.sum += v;
                    acc.n += 1;
                }
            }
            (Some(_), None) => {}
        }
        Ok(())
    }

    fn finish(
        self,
        report: &mut IngestReport,
        path: &Path,
    ) -> Result<Vec<(Table, DataFrame)>, IngestError> {
        if !self.unknown_metrics.is_empty() {
            let n: u64 = self.unknown_metrics.values().sum();
            let names: Vec<&str> = self.unknown_metrics.keys().map(String::as_str).collect();
            *report
                .skipped
                .entry("csv: unknown metric".into())
                .or_default() += n;
            report.warnings.push(format!(
                "{}: ignored {n} value(s) of unknown metrics: {}",
                path.display(),
                names.join(", ")
            ));
        }
        let ignored: Vec<&str> = self
            .ignored_labels
            .iter()
            .map(String::as_str)
            .filter(|l| *l != "kind")
            .collect();
        if !ignored.is_empty() {
            report.warnings.push(format!(
                "{}: labels not in the canonical frames, ignored: {}",
                path.display(),
                ignored.join(", ")
            ));
        }
        let mut out = Vec::new();
        for table in Table::ALL {
            let mut bufs: Vec<ColBuf> = table
                .columns()
                .map(|c| (c, Vec::new(), Vec::new()))
                .collect();
            let mut rows = 0usize;
            for ((t, entity), e) in &self.entities {
                if *t != table {
                    continue;
                }
                let ent_col = entity_column(table);
                for (end, b) in &e.buckets {
                    rows += 1;
                    for (c, strs, nums) in bufs.iter_mut() {
                        let (s, v): (Option<String>, Option<f64>) = match c.name {
                            "ts" => (None, Some(*end as f64)),
                            "interval_ms" => (None, Some(self.interval_ms as f64)),
                            "samples" => (None, Some(b.timestamps.len() as f64)),
                            name => {
                                if let Some(acc) = b.metrics.get(name) {
                                    let agg = targets_agg(table, name);
                                    let v = match agg {
                                        Agg::Mean => acc.sum / acc.n as f64,
                                        Agg::Max => acc.max,
                                        Agg::Sum => acc.sum,
                                    };
                                    (None, Some(v))
                                } else if let Some(l) = e.labels.get(name) {
                                    (Some(l.clone()), None)
                                } else if name == ent_col {
                                    (Some(entity.clone()), None)
                                } else {
                                    (None, None)
                                }
                            }
                        };
                        strs.push(s);
                        nums.push(v);
                    }
                }
            }
            if rows == 0 {
                continue;
            }
            let mut columns = Vec::new();
            for (c, strs, nums) in bufs {
                columns.push(build_column(c.name, c.ty, strs, nums)?);
            }
            out.push((table, DataFrame::new(rows, columns)?));
        }
        Ok(out)
    }
}

/// A column being built: the column, label values, numeric values.
type ColBuf = (super::schema::Col, Vec<Option<String>>, Vec<Option<f64>>);

/// The aggregation of a canonical column fed by a metric.
fn targets_agg(table: Table, column: &str) -> Agg {
    const METRICS: &[&str] = &[
        "gpu_busy_ratio",
        "sm_active_ratio",
        "sm_occupancy_ratio",
        "memory_controller_ratio",
        "memory_used_bytes",
        "memory_total_bytes",
        "power_watts",
        "energy_delta_joules",
        "temperature_celsius",
        "xid_count",
    ];
    METRICS
        .iter()
        .filter_map(|m| targets(table, m))
        .flat_map(|(_, cols)| cols.iter())
        .find(|(c, _)| *c == column)
        .map_or(Agg::Mean, |(_, a)| *a)
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
        Err(format!("{v:?} is not {}", ty.doc_name()))
    }
}

pub(super) fn build_column(
    name: &str,
    ty: ColType,
    strs: Vec<Option<String>>,
    nums: Vec<Option<f64>>,
) -> Result<Column, IngestError> {
    let name: PlSmallStr = name.into();
    let pick = |i: usize| -> Option<f64> {
        nums[i].or_else(|| strs[i].as_deref().and_then(|s| s.parse::<f64>().ok()))
    };
    let len = nums.len();
    Ok(match ty {
        ColType::Utf8 => Column::new(name, strs),
        ColType::Bool => Column::new(
            name,
            strs.iter()
                .map(|s| s.as_deref().map(|s| s == "true" || s == "1"))
                .collect::<Vec<_>>(),
        ),
        ColType::Float64 => Column::new(name, (0..len).map(pick).collect::<Vec<_>>()),
        ColType::Int64 => Column::new(
            name,
            (0..len)
                .map(|i| pick(i).map(|v| v.round() as i64))
                .collect::<Vec<_>>(),
        ),
        ColType::UInt32 => Column::new(
            name,
            (0..len)
                .map(|i| pick(i).map(|v| v.round().clamp(0.0, u32::MAX as f64) as u32))
                .collect::<Vec<_>>(),
        ),
        ColType::UInt64 => Column::new(
            name,
            (0..len)
                .map(|i| pick(i).map(|v| v.round().max(0.0) as u64))
                .collect::<Vec<_>>(),
        ),
    })
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

/// Reads one CSV file into per-table frames with the file schema (`ts` as int64 ms).
pub(super) fn read(
    path: &Path,
    opts: &IngestOptions,
    report: &mut IngestReport,
) -> Result<Vec<(Table, DataFrame)>, IngestError> {
    let bytes = std::fs::read(path).map_err(|e| IngestError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    if opts.interval_ms <= 0 {
        return Err(IngestError::File {
            path: path.to_path_buf(),
            reason: "the bucket interval must be positive".into(),
        });
    }
    let mut rdr = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(::csv::Trim::All)
        .from_reader(bytes.as_slice());
    let mut records = rdr.byte_records();
    let header = match records.next() {
        Some(Ok(h)) => h,
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
    };
    let header: Vec<String> = header
        .iter()
        .map(|f| {
            String::from_utf8_lossy(f)
                .trim_start_matches('\u{feff}')
                .to_string()
        })
        .collect();
    let mut agg = Aggregator {
        interval_ms: opts.interval_ms,
        entities: BTreeMap::new(),
        unknown_metrics: BTreeMap::new(),
        ignored_labels: BTreeSet::new(),
    };
    let mut bad = BadLines {
        path,
        skip: opts.skip_bad_rows,
        count: 0,
        first: None,
    };
    let format = detect(&header).ok_or_else(|| IngestError::Line {
        path: path.to_path_buf(),
        line: 1,
        reason: format!(
            "unrecognised header {:?}; expected the generic long format (timestamp, entity, metric, \
             value, labels…) or an nvidia-smi --query-gpu … --format=csv header",
            header.join(",")
        ),
    })?;
    if matches!(format, Format::NvidiaSmi(_)) {
        report.warnings.push(format!(
            "{}: nvidia-smi timestamps carry no time zone; read as UTC; node unknown (null)",
            path.display()
        ));
    }
    let mut repeated_headers = 0u64;
    for rec in records {
        let (line, fields) = match rec {
            Ok(r) => {
                let line = r.position().map_or(0, |p| p.line());
                let fields: Result<Vec<&str>, _> = r.iter().map(std::str::from_utf8).collect();
                match fields {
                    Ok(f) => (line, f.into_iter().map(str::to_string).collect::<Vec<_>>()),
                    Err(_) => {
                        bad.handle(
                            line,
                            Bad("not UTF-8", "the line is not UTF-8 text".into()),
                            report,
                        )?;
                        continue;
                    }
                }
            }
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                bad.handle(line, Bad("unreadable line", e.to_string()), report)?;
                continue;
            }
        };
        if fields.iter().all(String::is_empty) {
            continue;
        }
        if fields == header {
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
                        header.join(", "),
                        fields.len()
                    ),
                ),
                report,
            )?;
            continue;
        }
        let res = match &format {
            Format::Generic(g) => generic_line(g, &header, &fields, &mut agg),
            Format::NvidiaSmi(cols) => smi_line(cols, &fields, &mut agg),
        };
        if let Err(b) = res {
            bad.handle(line, b, report)?;
        }
    }
    if repeated_headers > 0 {
        report.warnings.push(format!(
            "{}: {repeated_headers} repeated header line(s) ignored",
            path.display()
        ));
    }
    bad.finish(report);
    agg.finish(report, path)
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
    fields: &[String],
    agg: &mut Aggregator,
) -> Result<(), Bad> {
    let [ti, ei, mi, vi] = *idx;
    let ts = parse_generic_ts(&fields[ti]).ok_or_else(|| {
        Bad(
            "bad timestamp",
            format!(
                "timestamp {:?}: expected unix seconds or an RFC 3339 time",
                fields[ti]
            ),
        )
    })?;
    let entity = &fields[ei];
    if entity.is_empty() {
        return Err(Bad("missing entity", "entity is empty".into()));
    }
    let value = parse_number(&fields[vi]).map_err(|e| Bad("bad value", format!("value: {e}")))?;
    let mut labels = BTreeMap::new();
    for (i, (h, f)) in header.iter().zip(fields).enumerate() {
        if [ti, ei, mi, vi].contains(&i) || f.is_empty() {
            continue;
        }
        labels.insert(h.clone(), f.clone());
    }
    let table = match labels.get("kind").map(String::as_str) {
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
    agg.add(table, entity, &labels, ts, &fields[mi], value)
}

fn parse_generic_ts(s: &str) -> Option<i64> {
    if let Ok(secs) = s.parse::<f64>() {
        return secs.is_finite().then(|| (secs * 1000.0).round() as i64);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Parses a number; empty, `NaN` and bracketed nvidia-smi markers (`[N/A]`) are null.
fn parse_number(s: &str) -> Result<Option<f64>, String> {
    let t = s.trim();
    if t.is_empty() || t == "N/A" || (t.starts_with('[') && t.ends_with(']')) {
        return Ok(None);
    }
    let v: f64 = t.parse().map_err(|_| format!("{t:?} is not a number"))?;
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

fn smi_line(cols: &[SmiCol], fields: &[String], agg: &mut Aggregator) -> Result<(), Bad> {
    let mut ts = None;
    let mut labels = BTreeMap::new();
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
                    labels.insert((*l).to_string(), f.clone());
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
        .get("uuid")
        .or_else(|| labels.get("gpu"))
        .cloned()
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
        agg.add(Table::Gpu, &entity, &labels, ts, "", None)?;
    }
    for (metric, v) in metrics {
        agg.add(Table::Gpu, &entity, &labels, ts, metric, v)?;
    }
    Ok(())
}
