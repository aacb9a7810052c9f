//! Data quality: which rows came from which `--source` ([`source_matches`]) and the report's
//! data-quality notes ([`data_quality`]): sources without GPU rows, per-GPU notes and gaps, the
//! activity signal, teams, ingest warnings and skips, and the advisor's notes.
//!
//! This module does not find gaps or per-GPU problems (the tallies gather them) and reads no
//! data itself.

use std::collections::BTreeSet;
use std::path::Path;

use super::model::{QualityNote, ReportInput, Teams};

/// Whether a row's `source` column (`history:<node folder>`, `csv:<file>`,
/// `prometheus:<url>`) came from the `--source` spec `spec` (a history spec may be a folder of node
/// folders, one node folder, or a glob of either).
pub fn source_matches(spec: &str, row_source: &str) -> bool {
    match (
        spec.strip_prefix("history:"),
        row_source.strip_prefix("history:"),
    ) {
        (Some(loc), Some(node)) => {
            let node = Path::new(node);
            if loc.contains(['*', '?', '[']) {
                glob::Pattern::new(loc).is_ok_and(|p| {
                    p.matches_path(node) || node.parent().is_some_and(|d| p.matches_path(d))
                })
            } else {
                node.starts_with(Path::new(loc))
            }
        }
        (None, None) => spec == row_source,
        _ => false,
    }
}

/// The data-quality notes: sources without GPU rows, the per-GPU notes and gaps the tally
/// gathered ([`super::tally`]), then the activity signal, teams, ingest warnings and skips, and the
/// advisor's notes.
pub(super) fn data_quality(
    gpu_sources: &BTreeSet<String>,
    gpu_notes: Vec<QualityNote>,
    mut gaps: Vec<(String, usize, f64)>,
    input: &ReportInput,
    signal: &str,
    teams: &Teams,
) -> Vec<QualityNote> {
    let mut notes = Vec::new();
    let mut note = |kind: &str, message: String| {
        notes.push(QualityNote {
            kind: kind.into(),
            message,
        })
    };
    // Sources that contributed no GPU rows (or whose rows all repeated another source's: the
    // first copy of a duplicate row is kept).
    let duplicates = input
        .ingest
        .skipped
        .keys()
        .any(|k| k.starts_with("duplicate "));
    for s in &input.sources {
        if !gpu_sources.iter().any(|g| source_matches(s, g)) {
            let why = if duplicates {
                " (or only rows that another source holds too, counted once there)"
            } else {
                ""
            };
            note(
                "source_missing",
                format!("source {s} has no GPU rows in the reported range{why}"),
            );
        }
    }
    // Per-GPU status notes and GPUs that stopped reporting, in GPU order; then gaps, longest
    // first.
    for n in gpu_notes {
        note(&n.kind, n.message);
    }
    gaps.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    for (label, n, h) in &gaps {
        note(
            "gap",
            format!("{label}: {n} gap(s) in its rows, {h:.1} h missing"),
        );
    }
    match signal {
        "busy" => note(
            "signal",
            "activity is NVML's busy ratio (utilization.gpu: share of time a kernel ran), which overstates use; SM activity needs Hopper+ or DCGM profiling".into(),
        ),
        "none" => note("signal", "no activity signal in the data".into()),
        "sm_active, else busy" => note(
            "signal",
            "activity is SM activity where the GPU reports it, else the busy ratio (which overstates use)".into(),
        ),
        _ => {}
    }
    if teams.dimension == "none" {
        note(
            "no_rows",
            "no process rows with a namespace or Slurm job: no team breakdown".into(),
        );
    }
    for w in &input.ingest.warnings {
        note("ingest", w.clone());
    }
    let skipped = input.ingest.skipped_rows();
    if skipped > 0 {
        note(
            "ingest",
            format!(
                "{skipped} row(s) skipped at ingest (bad or duplicate; by reason in the ingest summary)"
            ),
        );
    }
    for d in &input.analysis.detectors {
        for n in &d.notes {
            note("advisor", format!("{}: {n}", d.title));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_match_their_rows() {
        let row = "history:/data/hist/gpu-node-1";
        assert!(source_matches("history:/data/hist", row));
        assert!(source_matches("history:/data/hist/", row));
        assert!(source_matches("history:/data/hist/gpu-node-1", row));
        assert!(source_matches("history:/data/*/gpu-node-*", row));
        assert!(source_matches("history:/data/h*", row));
        assert!(!source_matches("history:/data/other", row));
        assert!(!source_matches(
            "history:/data/hist-2",
            "history:/data/hist/x"
        ));
        assert!(source_matches("csv:a.csv", "csv:a.csv"));
        assert!(!source_matches("csv:a.csv", "csv:b.csv"));
        assert!(!source_matches("csv:a.csv", row));
        assert!(source_matches(
            "prometheus:http://p:9090",
            "prometheus:http://p:9090"
        ));
    }
}
