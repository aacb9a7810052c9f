//! The report's "Out-of-sample check" section ([`crate::report::out_of_sample`], only with
//! `tessera report --out-of-sample`): one row per kind of plan. Builds a [`Section`] only, like
//! [`super::sections`].

use super::Section;
use crate::report::out_of_sample::OutOfSample;

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
        "Each plan made from the previous period and replayed on this one (as tessera replay does, docs/replay.md):"
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
        let unknown = || "unknown".to_string();
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
