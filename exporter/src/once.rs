//! Renders one snapshot (inventory + sample) for people (`table`) or programs (`json`).
//!
//! Used by `tessera-exporter --once`. The JSON document is versioned ([`SNAPSHOT_JSON_VERSION`])
//! and is exactly the serde form of [`tessera_core::model`] types, so programs can rely on the field
//! names documented there. The table uses no colour at all (so `NO_COLOR` holds trivially) and
//! marks absent values with `-`, never 0.
//!
//! This module formats; it does not sample or write files.

use std::fmt::Write as _;

use serde::Serialize;

use tessera_core::model::{GpuStatus, Inventory, NodeSample, throttle_reason_names};

/// Version of the `--once --format json` document.
pub const SNAPSHOT_JSON_VERSION: u32 = 1;

#[derive(Serialize)]
struct SnapshotDoc<'a> {
    version: u32,
    backend: &'a str,
    inventory: &'a Inventory,
    sample: &'a NodeSample,
}

/// The snapshot as pretty JSON (one document, trailing newline).
pub fn json(backend: &str, inventory: &Inventory, sample: &NodeSample) -> String {
    let doc = SnapshotDoc {
        version: SNAPSHOT_JSON_VERSION,
        backend,
        inventory,
        sample,
    };
    // Serialising plain data with string keys cannot fail.
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

fn pct(v: Option<f64>) -> String {
    opt(v, |r| format!("{:.0}%", r * 100.0))
}

fn gib(v: Option<u64>) -> String {
    opt(v, |b| format!("{:.1}", b as f64 / (1u64 << 30) as f64))
}

/// Lay out rows as left-aligned columns separated by two spaces.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            if c + 1 < r.len() {
                line.push_str(&" ".repeat(widths[c] - cell.chars().count()));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn status(s: &GpuStatus) -> String {
    match s {
        GpuStatus::Ok => "ok".into(),
        GpuStatus::Degraded => "degraded".into(),
        GpuStatus::Lost => "LOST".into(),
        GpuStatus::Error { .. } => "error".into(),
    }
}

/// The snapshot as plain-text tables: GPUs, MIG instances, processes, then problems.
pub fn table_text(backend: &str, inventory: &Inventory, sample: &NodeSample) -> String {
    let mut out = String::new();
    let time = chrono::DateTime::from_timestamp_millis(sample.timestamp_ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "node {}  backend {}  driver {}  CUDA {}  at {}",
        inventory.node,
        backend,
        inventory.driver_version.as_deref().unwrap_or("-"),
        inventory.cuda_version.as_deref().unwrap_or("-"),
        time
    );
    out.push('\n');
    out.push_str(&table(&gpu_rows(inventory, sample)));

    let mig_rows = mig_rows(inventory, sample);
    if mig_rows.len() > 1 {
        out.push_str("\nMIG instances\n");
        out.push_str(&table(&mig_rows));
    }

    let proc_rows = process_rows(sample);
    if proc_rows.len() > 1 {
        out.push_str("\nProcesses\n");
        out.push_str(&table(&proc_rows));
    }

    let problems = problems(sample);
    if !problems.is_empty() {
        out.push_str("\nProblems\n");
        for p in problems {
            let _ = writeln!(out, "  {p}");
        }
    }
    out
}

/// The GPU table's header and rows: identity, status, load, memory, power, temperature, clock,
/// MIG mode and clock-event reasons.
fn gpu_rows(inventory: &Inventory, sample: &NodeSample) -> Vec<Vec<String>> {
    let mut rows = vec![
        [
            "GPU", "NAME", "STATUS", "BUSY", "SM", "MEM GiB", "POWER W", "TEMP C", "SM MHz", "MIG",
            "THROTTLE",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for g in &sample.gpus {
        let info = inventory.gpus.iter().find(|i| i.index == g.index);
        let mig = match info.and_then(|i| i.mig_mode) {
            None => "n/a".to_string(),
            Some(m) if m.current => format!("on ({})", g.mig.len()),
            Some(m) if m.pending => "off (pending on)".into(),
            Some(_) => "off".into(),
        };
        rows.push(vec![
            g.index.to_string(),
            info.map(|i| i.name.clone()).unwrap_or_default(),
            status(&g.status),
            pct(g.busy_ratio),
            pct(g.sm_active_ratio),
            format!("{}/{}", gib(g.memory_used_bytes), gib(g.memory_total_bytes)),
            opt(g.power_watts, |w| format!("{w:.0}")),
            opt(g.temperature_celsius, |c| format!("{c:.0}")),
            opt(g.sm_clock_hertz, |h| format!("{:.0}", h / 1e6)),
            mig,
            opt(g.throttle_reasons, |m| {
                let names = throttle_reason_names(m);
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(",")
                }
            }),
        ]);
    }
    rows
}

/// The MIG instance table's header and rows (none but the header without MIG instances).
fn mig_rows(inventory: &Inventory, sample: &NodeSample) -> Vec<Vec<String>> {
    let mut mig_rows = vec![
        [
            "GPU",
            "GI",
            "CI",
            "PROFILE",
            "PLACEMENT",
            "SM",
            "MEM GiB",
            "UUID",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for g in &sample.gpus {
        let info = inventory.gpus.iter().find(|i| i.index == g.index);
        for m in &g.mig {
            let inst = info.and_then(|i| {
                i.mig_instances.iter().find(|x| {
                    x.gpu_instance_id == m.gpu_instance_id
                        && x.compute_instance_id == m.compute_instance_id
                })
            });
            mig_rows.push(vec![
                g.index.to_string(),
                m.gpu_instance_id.to_string(),
                m.compute_instance_id.to_string(),
                inst.map(|i| format!("{} (id {})", i.profile_name, i.profile_id))
                    .unwrap_or_else(|| "-".into()),
                inst.map(|i| format!("{}+{}", i.placement.start, i.placement.size))
                    .unwrap_or_else(|| "-".into()),
                pct(m.sm_active_ratio),
                format!("{}/{}", gib(m.memory_used_bytes), gib(m.memory_total_bytes)),
                m.uuid.clone(),
            ]);
        }
    }
    mig_rows
}

/// The process table's header and rows.
fn process_rows(sample: &NodeSample) -> Vec<Vec<String>> {
    let mut proc_rows = vec![
        ["GPU", "PID", "PROCESS", "GI/CI", "SM", "MEM GiB"]
            .map(String::from)
            .to_vec(),
    ];
    for g in &sample.gpus {
        for p in &g.processes {
            proc_rows.push(vec![
                g.index.to_string(),
                p.pid.to_string(),
                p.name.clone().unwrap_or_else(|| "-".into()),
                match (p.gpu_instance_id, p.compute_instance_id) {
                    (Some(gi), Some(ci)) => format!("{gi}/{ci}"),
                    _ => "-".into(),
                },
                pct(p.sm_ratio),
                gib(p.used_memory_bytes),
            ]);
        }
    }
    proc_rows
}

/// The problems of the sample, one line each: GPU errors, lost GPUs, failed reads, XID events,
/// failed or pending row remapping.
fn problems(sample: &NodeSample) -> Vec<String> {
    let mut problems = Vec::new();
    for g in &sample.gpus {
        if let GpuStatus::Error { message } = &g.status {
            problems.push(format!("GPU {}: {message}", g.index));
        }
        if g.status == GpuStatus::Lost {
            problems.push(format!("GPU {}: lost (fell off the bus?)", g.index));
        }
        for e in &g.errors {
            problems.push(format!(
                "GPU {}: reading {} failed: {}",
                g.index, e.field, e.kind
            ));
        }
        for x in &g.xid_events {
            problems.push(format!("GPU {}: XID {}", g.index, x.xid));
        }
        if let Some(r) = g.remapped_rows {
            if r.failure {
                problems.push(format!("GPU {}: row remapping failed", g.index));
            } else if r.pending {
                problems.push(format!(
                    "GPU {}: row remapping pending (reset the GPU)",
                    g.index
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_absent_values_show_a_dash() {
        let t = table(&[
            vec!["A".into(), "BB".into(), "C".into()],
            vec!["long".into(), "-".into(), "x".into()],
        ]);
        assert_eq!(t, "A     BB  C\nlong  -   x\n");
        assert_eq!(pct(None), "-");
        assert_eq!(pct(Some(0.0)), "0%");
    }
}
