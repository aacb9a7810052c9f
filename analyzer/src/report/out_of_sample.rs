//! The report's out-of-sample check (`tessera report --out-of-sample`, docs/report.md): for its
//! own kinds of plan (consolidation moves, MIG layouts), a plan made from the previous period
//! and replayed on the reported one (`tessera replay`'s model, docs/replay.md) — "planned from
//! Nov 9–16, replayed on Nov 16–23: safe, 0 failed intervals, p99 memory 81% of the instance".
//!
//! This module holds the figures and their text section; making the plans and replaying them is
//! `crate::replay::train::out_of_sample`'s (the command calls it: the report does not, so the
//! default report costs nothing more).

use serde::Serialize;

use super::render::Section;

/// One out-of-sample check: the plan of one kind made from the previous period and replayed on
/// the report's, or why there was none.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutOfSample {
    /// `mig` or `consolidation`.
    pub kind: &'static str,
    pub trained_from: String,
    pub trained_until: String,
    pub replayed_from: String,
    pub replayed_until: String,
    /// Why no plan or no replay was made (nothing to consolidate, no MIG GPU, no rows); `null`
    /// when there is a replay.
    pub skipped: Option<String>,
    /// `safe`, `tight` or `unsafe`; `null` when skipped.
    pub verdict: Option<&'static str>,
    pub failed_intervals: Option<u64>,
    pub gpus_before: Option<u32>,
    pub gpus_after: Option<u32>,
    pub gpu_hours_freed: Option<f64>,
    /// The largest p99 memory of a placement, as a share of its capacity (where known).
    pub p99_memory_share_max: Option<f64>,
    /// The placements and workloads that decided the verdict.
    pub deciding: Vec<String>,
}

/// `2026-11-09T00:00:00.000Z` → `2026-11-09 00:00`.
fn short(t: &str) -> String {
    t.get(..16).unwrap_or(t).replace('T', " ")
}

/// The text section (table, Markdown and HTML render it), or `None` when not asked for.
pub fn section(checks: Option<&[OutOfSample]>) -> Option<Section> {
    let checks = checks?;
    let mut s = Section {
        title: "Out-of-sample check".into(),
        ..Section::default()
    };
    s.lines.push(
        "Each plan made from the previous period and replayed on this one (`tessera replay`, docs/replay.md):"
            .into(),
    );
    s.header = [
        "plan",
        "planned from",
        "replayed on",
        "verdict",
        "failed",
        "GPUs",
        "freed GPU-h",
        "p99 memory",
    ]
    .iter()
    .map(|h| h.to_string())
    .collect();
    for c in checks {
        let unknown = || "-".to_string();
        s.rows.push(vec![
            c.kind.to_string(),
            format!("{} .. {}", short(&c.trained_from), short(&c.trained_until)),
            format!(
                "{} .. {}",
                short(&c.replayed_from),
                short(&c.replayed_until)
            ),
            c.verdict
                .map_or_else(|| "not replayed".into(), str::to_string),
            c.failed_intervals.map_or_else(unknown, |n| n.to_string()),
            match (c.gpus_before, c.gpus_after) {
                (Some(b), Some(a)) => format!("{b} -> {a}"),
                _ => unknown(),
            },
            c.gpu_hours_freed
                .filter(|v| v.is_finite())
                .map_or_else(unknown, |v| format!("{v:.1}")),
            c.p99_memory_share_max
                .filter(|v| v.is_finite())
                .map_or_else(unknown, |v| format!("{:.0}% of capacity", v * 100.0)),
        ]);
    }
    for c in checks {
        if let Some(why) = &c.skipped {
            s.after.push(format!("{}: {why}", c.kind));
        }
        for d in c.deciding.iter().take(3) {
            s.after
                .push(format!("{} ({}): {d}", c.kind, c.verdict.unwrap_or("-")));
        }
    }
    Some(s)
}
