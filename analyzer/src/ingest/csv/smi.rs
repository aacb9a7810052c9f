//! `nvidia-smi --query-gpu=… --format=csv` logs: what each header column feeds ([`smi_col`],
//! units from the header or the value) and one line into the builder ([`smi_line`]: GPU rows,
//! timestamps without a time zone read as UTC).
//!
//! It does not read the file (the line reader, `lines`) and knows no other format.

use super::builder::{Bad, Builder, targets};
use crate::frames::schema::Table;

/// What an nvidia-smi column feeds.
pub(super) enum SmiCol {
    Timestamp,
    Label(&'static str),
    Metric { metric: &'static str, scale: f64 },
    Ignored,
}

pub(super) fn smi_col(h: &str) -> SmiCol {
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
pub(super) const SMI_LABELS: [&str; 3] = ["gpu", "uuid", "model"];

pub(super) fn smi_line(
    cols: &[SmiCol],
    fields: &[&str],
    b: &mut Builder,
    line: u64,
) -> Result<(), Bad> {
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
