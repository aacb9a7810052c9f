//! What `tessera ingest` prints: per table rows, entities, time range and the null share of key
//! columns, plus the report's skips and warnings, as a text table or JSON.
//!
//! This module collects the frames to count (decoding every column, so that damage anywhere in
//! a file is found); it does not judge the data (detectors do that).

use std::fmt::Write as _;

use polars::prelude::*;
use serde::Serialize;

use super::{IngestError, IngestReport, fmt_ms};
use crate::frames::{Frames, Table};
use crate::output::{Col, Columns};

/// One table's summary.
#[derive(Debug, Clone, Serialize)]
pub struct TableSummary {
    pub table: Table,
    pub rows: u64,
    /// Distinct entities (gpu: node+uuid; mig: node+uuid+instance ids; process: node+uuid+MIG
    /// instance+pid+process name+pod+pod UID, the idle detector's identity).
    pub entities: u64,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// Share of null values in the table's key columns (0–1), in order.
    pub null_share: Vec<(String, f64)>,
}

/// Columns identifying an entity of the table.
pub fn entity_columns(t: Table) -> &'static [&'static str] {
    match t {
        Table::Gpu => &["node", "uuid"],
        Table::Mig => &["node", "uuid", "gpu_instance", "compute_instance"],
        Table::Process => &[
            "node",
            "uuid",
            "gpu_instance",
            "pid",
            "process",
            "pod",
            "pod_uid",
        ],
    }
}

/// Key value columns whose null share is reported.
pub fn key_columns(t: Table) -> &'static [&'static str] {
    match t {
        Table::Gpu => &[
            "busy_mean",
            "sm_active_mean",
            "tensor_active_mean",
            "dram_active_mean",
            "memory_used_max_bytes",
            "power_mean_watts",
        ],
        Table::Mig => &[
            "sm_active_mean",
            "tensor_active_mean",
            "dram_active_mean",
            "memory_used_max_bytes",
        ],
        Table::Process => &["memory_used_max_bytes", "sm_mean", "pod"],
    }
}

/// Summarises every table (collects the frames).
pub fn describe(frames: &Frames, report: &IngestReport) -> Result<Vec<TableSummary>, IngestError> {
    describe_parts(std::slice::from_ref(frames), report)
}

/// Summarises every table over partitions that share no entity (`ingest::ingest_parts`): rows,
/// entities and null counts are computed one partition at a time and added up, so memory stays
/// that of one partition.
pub fn describe_parts(
    parts: &[Frames],
    report: &IngestReport,
) -> Result<Vec<TableSummary>, IngestError> {
    let mut out = Vec::new();
    for t in Table::ALL {
        let (mut rows, mut entities) = (0u64, 0u64);
        let mut nulls = vec![0u64; key_columns(t).len()];
        for frames in parts {
            let lf = frames.table(t).clone();
            let keys: Vec<Expr> = entity_columns(t).iter().map(|c| col(*c)).collect();
            entities += lf.clone().group_by(keys).agg([len()]).collect()?.height() as u64;
            let mut exprs = vec![len().alias("__rows")];
            for c in key_columns(t) {
                exprs.push(col(*c).null_count().alias(*c));
            }
            // Every other column is decoded too (its null count, unused): `tessera ingest` is
            // how a user checks the data, so a corrupt page in any column fails it, named.
            for c in t
                .columns()
                .iter()
                .copied()
                .filter(|c| !key_columns(t).contains(&c.name))
            {
                exprs.push(
                    col(c.name)
                        .is_null()
                        .sum()
                        .alias(format!("__check_{}", c.name)),
                );
            }
            let df = lf.select(exprs).collect()?;
            let count = |name: &str| -> Result<u64, IngestError> {
                let c = df.column(name)?.cast(&DataType::UInt64)?;
                Ok(c.u64()?.get(0).unwrap_or(0))
            };
            rows += count("__rows")?;
            for (n, c) in nulls.iter_mut().zip(key_columns(t)) {
                *n += count(c)?;
            }
        }
        let null_share = key_columns(t)
            .iter()
            .zip(&nulls)
            .map(|(c, &n)| {
                let share = if rows == 0 {
                    0.0
                } else {
                    n as f64 / rows as f64
                };
                ((*c).to_string(), share)
            })
            .collect();
        let stats = report.tables.get(&t).cloned().unwrap_or_default();
        out.push(TableSummary {
            table: t,
            rows,
            entities,
            first_ts: stats.first_ts,
            last_ts: stats.last_ts,
            null_share,
        });
    }
    Ok(out)
}

/// The text table printed on stdout.
pub fn render_table(summaries: &[TableSummary], report: &IngestReport) -> String {
    let mut t = crate::output::Table::with_header(&[
        "table",
        "rows",
        "entities",
        "first",
        "last",
        "null share of key columns",
    ]);
    for x in summaries {
        let nulls: Vec<String> = x
            .null_share
            .iter()
            .map(|(c, v)| format!("{c} {:.0}%", v * 100.0))
            .collect();
        t.push(vec![
            x.table.name().to_string(),
            x.rows.to_string(),
            x.entities.to_string(),
            x.first_ts.map_or_else(|| "-".into(), fmt_ms),
            x.last_ts.map_or_else(|| "-".into(), fmt_ms),
            nulls.join(", "),
        ]);
    }
    let mut s = t.columns(&Columns {
        indent: "",
        cols: &[
            Col::left(8),
            Col::right(10),
            Col::right(9),
            Col::left(24).after("  "),
            Col::left(24),
            Col::left(0).after("  "),
        ],
        trim_end: false,
    });
    let _ = writeln!(s, "files read: {}", report.files);
    for (source, smp) in &report.sampling {
        let period = smp
            .median_period_ms
            .map(|p| format!("; sampled every {} (median)", super::period::fmt_period(p)))
            .unwrap_or_default();
        let maxima = smp
            .maxima
            .as_ref()
            .map(|m| format!("; maxima from {m}"))
            .unwrap_or_default();
        let _ = writeln!(s, "rows of {source}: {}{period}{maxima}", smp.describe());
    }
    if report.skipped.is_empty() {
        let _ = writeln!(s, "skipped rows: 0");
    } else {
        let _ = writeln!(s, "skipped rows: {}", report.skipped_rows());
        let mut t = crate::output::Table::default();
        for (reason, n) in &report.skipped {
            t.push(vec![n.to_string(), reason.clone()]);
        }
        s.push_str(&t.columns(&Columns {
            indent: "  ",
            cols: &[Col::right(8), Col::left(0).after("  ")],
            trim_end: false,
        }));
    }
    s
}

/// The JSON document printed with `--format json`.
pub fn to_json(summaries: &[TableSummary], report: &IngestReport) -> serde_json::Value {
    serde_json::json!({
        "tables": summaries.iter().map(|t| serde_json::json!({
            "table": t.table,
            "rows": t.rows,
            "entities": t.entities,
            "first": t.first_ts.map(fmt_ms),
            "last": t.last_ts.map(fmt_ms),
            "null_share": t.null_share.iter()
                .map(|(c, v)| (c.clone(), serde_json::json!(v)))
                .collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
        "files": report.files,
        "sampling": report.sampling,
        "skipped": report.skipped,
        "torn_lines": report.torn_lines,
        "warnings": report.warnings,
    })
}
