//! Scenario tooling for users and tests: a readable summary of a scenario, and the ground-truth
//! file of the conditions it plants over a range of days.
//!
//! This module computes and writes one JSON file; it does not simulate samples into history
//! (that is `tessera simulate`, a later issue).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use tessera_core::sim::Scenario;
use tessera_core::sim::truth::GroundTruth;

/// Errors writing a ground-truth file.
#[derive(Debug, thiserror::Error)]
pub enum TruthError {
    #[error("--days must be between 1 and 366, got {0}")]
    Days(u32),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A short human summary: nodes, GPUs, MIG layouts, workloads by kind, faults.
pub fn summary(s: &Scenario) -> String {
    let mut out = String::new();
    let gpus: usize = s.nodes.iter().map(|n| s.node_models(n).len()).sum();
    let _ = writeln!(
        out,
        "scenario {} (seed {}, start {}): {} node(s), {} GPU(s), {} workload(s), {} fault(s)",
        s.name,
        s.seed,
        s.start.to_rfc3339(),
        s.nodes.len(),
        gpus,
        s.workloads.len(),
        s.faults.len()
    );
    for n in &s.nodes {
        let models: Vec<_> = s.node_models(n).iter().map(|m| m.key).collect();
        let _ = writeln!(out, "  {}: {}", n.name, models.join(", "));
        for m in &n.mig {
            let profiles: Vec<_> = m
                .instances
                .iter()
                .map(|i| format!("{}@{}", i.profile, i.start))
                .collect();
            let window = match (m.from, m.until) {
                (None, None) => String::new(),
                (f, u) => format!(
                    " (from {} until {})",
                    f.map_or("the start".into(), |t| t.to_rfc3339()),
                    u.map_or("the end".into(), |t| t.to_rfc3339())
                ),
            };
            let _ = writeln!(out, "    GPU {} MIG{window}: {}", m.gpu, profiles.join(" "));
        }
    }
    for w in &s.workloads {
        let _ = writeln!(
            out,
            "  workload {} ({:?}) on {} GPU {}{}: {:.1} GiB",
            w.name,
            w.kind,
            w.node,
            w.gpu,
            w.mig_start.map(|s| format!(" MIG@{s}")).unwrap_or_default(),
            w.memory_gib
        );
        for p in w.places().skip(1) {
            let at = p
                .from
                .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
                .map_or("?".into(), |t| t.to_rfc3339());
            let _ = writeln!(
                out,
                "    moves at {at} to {} GPU {}{}",
                p.node,
                p.gpu,
                p.mig_start.map(|s| format!(" MIG@{s}")).unwrap_or_default()
            );
        }
    }
    out
}

/// The ground truth of `days` days from the scenario's start.
pub fn truth(s: &Scenario, days: u32) -> Result<GroundTruth, TruthError> {
    if !(1..=366).contains(&days) {
        return Err(TruthError::Days(days));
    }
    Ok(GroundTruth::compute(
        s,
        s.start,
        s.start + chrono::Duration::days(days as i64),
    ))
}

/// Write the ground truth as pretty JSON to `path`.
pub fn write_truth(truth: &GroundTruth, path: &Path) -> Result<(), TruthError> {
    let mut text = serde_json::to_string_pretty(truth).unwrap_or_default();
    text.push('\n');
    tessera_core::files::replace(path, text.as_bytes()).map_err(|e| match e {
        tessera_core::files::ReplaceError::Io { source, .. } => TruthError::Write {
            path: path.to_path_buf(),
            source,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_every_node_and_workload() {
        let s = tessera_core::sim::load_scenario(None).unwrap();
        let text = summary(&s);
        for n in &s.nodes {
            assert!(text.contains(&n.name));
        }
        assert!(text.contains("embeddings-forgotten"));
        assert!(text.contains("MIG: 3g.40gb@0"));
    }

    #[test]
    fn days_out_of_range_are_refused() {
        let s = tessera_core::sim::load_scenario(None).unwrap();
        assert!(matches!(truth(&s, 0), Err(TruthError::Days(0))));
        assert_eq!(
            truth(&s, 1).unwrap().end,
            s.start + chrono::Duration::days(1)
        );
    }
}
