//! A [`Replay`] as a terminal table or Markdown: the verdict and what decided it, the fleet
//! before → after, one line per placement, the workloads not seen, the notes. Unknown figures
//! print as `unknown`, never 0. Values from the data are made printable (`crate::output::escape`).
//!
//! This module computes nothing; `combine` does.

use std::fmt::Write as _;

use super::Replay;
use crate::output::escape::printable;
use crate::output::{Col, Columns, Table};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn gib(v: Option<u64>) -> String {
    v.map_or("unknown".into(), |b| format!("{:.2}", b as f64 / GIB))
}

fn pct(v: Option<f64>) -> String {
    v.map_or("unknown".into(), |x| format!("{:.0}%", x * 100.0))
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or("unknown".into(), |x| format!("{x:.digits$}"))
}

/// Header lines and the fleet's figures, shared by both renderers.
fn summary(r: &Replay) -> Vec<String> {
    let f = &r.fleet;
    let mut l = vec![format!(
        "Replayed {} .. {} ({:.1} h){}",
        r.from,
        r.until,
        f.hours,
        r.plan
            .as_ref()
            .map_or(String::new(), |p| format!(", plan {}", printable(p)))
    )];
    if let Some(t) = &r.trained_on {
        l.push(format!(
            "Out of sample: planned ({}) from {} .. {}, replayed on {} .. {}",
            t.planner, t.from, t.until, r.from, r.until
        ));
    }
    if !r.configs.is_empty() {
        let c: Vec<String> = r
            .configs
            .iter()
            .map(|(k, v)| format!("{} {:.0}% of the time", printable(k), v * 100.0))
            .collect();
        l.push(format!("Configs in force: {}", c.join(", ")));
    }
    l.push(format!(
        "Verdict: {} ({} failed interval(s))",
        r.verdict.to_uppercase(),
        r.failed_intervals
    ));
    l.push(format!(
        "GPUs: {}; GPU-hours {:.1} → {:.1}, freed {:.1} ({:.2} {} at {} {}/GPU-h)",
        crate::mig_planner::GpuCount::new(f.gpus_before, f.gpus_after).text(),
        f.gpu_hours_before,
        f.gpu_hours_after,
        f.gpu_hours_freed,
        f.cost_freed,
        printable(&f.currency),
        f.price_gpu_hour,
        printable(&f.currency)
    ));
    l.push(format!(
        "Allocation {} → {}; work utilization of the plan's GPUs {} → {} (the report's \"GPU-hours of work\" is over every GPU of the fleet)",
        pct(f.allocation_before),
        pct(f.allocation_after),
        pct(f.utilization_before),
        pct(f.utilization_after)
    ));
    l.push(format!(
        "Energy: {} → {} kWh ({}){}",
        num(f.energy_kwh_before, 1),
        num(f.energy_kwh_after, 1),
        f.energy_model,
        match f.energy_coverage {
            Some(c) if c < 1.0 => format!(
                "; over the {:.1}% of the GPUs' rows that have power or energy",
                c * 100.0
            ),
            _ => String::new(),
        }
    ));
    l
}

const HEADER: [&str; 9] = [
    "placement",
    "workloads",
    "capacity GiB",
    "peak GiB",
    "p99",
    "exceeded",
    "contention",
    "slowdown max",
    "verdict",
];

/// The placements' table (cells escaped by the output layer).
fn placements(r: &Replay) -> Table {
    let rows = r
        .placements
        .iter()
        .map(|p| {
            vec![
                p.id.clone(),
                p.workloads.join(", "),
                format!("{:.2}", p.capacity_memory_bytes as f64 / GIB),
                gib(p.peak_memory_bytes),
                pct(p.p99_memory_share),
                format!("{} ({:.2} h)", p.exceeded_intervals, p.exceeded_hours),
                format!("{} ({:.2} h)", p.contention_intervals, p.contention_hours),
                p.slowdown_max.map_or("-".into(), |s| format!("{s:.2}×")),
                p.verdict.unwrap_or("unknown").to_string(),
            ]
        })
        .collect();
    Table {
        header: HEADER.map(String::from).to_vec(),
        rows,
    }
}

/// The notes (workloads not seen, what the plan names without rows).
fn tail(r: &Replay) -> Vec<String> {
    r.notes.iter().map(|n| printable(n).into_owned()).collect()
}

/// The terminal table.
pub fn render_table(r: &Replay) -> String {
    let mut o = String::new();
    for l in summary(r) {
        let _ = writeln!(o, "{l}");
    }
    if !r.deciding.is_empty() {
        let _ = writeln!(o, "\nDecided by:");
        for d in &r.deciding {
            let _ = writeln!(o, "  - {}", printable(d));
        }
    }
    let _ = writeln!(o);
    o.push_str(&placements(r).columns(&Columns {
        indent: "",
        cols: &[Col::fit().after("  "); HEADER.len()],
        trim_end: true,
    }));
    let t = tail(r);
    if !t.is_empty() {
        let _ = writeln!(o, "\nNotes:");
        for n in t {
            let _ = writeln!(o, "  - {n}");
        }
    }
    o
}

/// Markdown.
pub fn render_markdown(r: &Replay) -> String {
    let md = |s: &str| s.replace('|', "\\|");
    let mut o = String::from("# tessera replay\n\n");
    for l in summary(r) {
        let _ = writeln!(o, "- {}", md(&l));
    }
    if !r.deciding.is_empty() {
        o.push_str("\n## Decided by\n\n");
        for d in &r.deciding {
            let _ = writeln!(o, "- {}", md(&printable(d)));
        }
    }
    o.push_str("\n## Placements\n\n");
    o.push_str(&placements(r).pipes());
    let t = tail(r);
    if !t.is_empty() {
        o.push_str("\n## Notes\n\n");
        for n in t {
            let _ = writeln!(o, "- {}", md(&n));
        }
    }
    o
}
