//! `--owners FILE` and the namespaces' labels: the teams' contacts for the commands that name
//! them (`report`, `notify`, `job`), as one [`tessera::owners::Owners`]. The file comes first;
//! then, for each `prometheus:` source, kube-state-metrics' `kube_namespace_labels` at the end of
//! the range (a server that cannot answer becomes a note, not an error: the data was read).
//!
//! It decides nothing about owners itself (`tessera::owners` does).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use tessera::owners::{NAMESPACE_LABELS_METRIC, Owners};

use super::SourceArgs;

/// `--owners`: the teams' contacts.
#[derive(Debug, Args, Default)]
pub struct OwnersArgs {
    /// The teams' contacts (TOML: `[owners]` with `team = "contact"` lines; a team is a
    /// namespace or `slurm job N`). They come before the namespaces' labels
    /// (`tessera.io/owner`, `owner`, `team`) that a `prometheus:` source's kube-state-metrics
    /// exports (docs/report.md, "Owners").
    #[arg(long = "owners", value_name = "FILE")]
    pub owners: Option<PathBuf>,
}

impl OwnersArgs {
    /// The owners file's teams (none without `--owners`): read before any data, so that a bad
    /// file fails first.
    pub fn file(&self) -> Result<Owners> {
        Ok(match &self.owners {
            Some(p) => Owners::load(p)?,
            None => Owners::default(),
        })
    }
}

/// Adds to `owners` each `prometheus:` source's namespace labels at `at_ms`; a source that
/// cannot answer leaves a note.
pub fn add_namespace_labels(owners: &mut Owners, src: &SourceArgs, at_ms: i64) {
    for s in &src.sources {
        if s.scheme() != "prometheus" {
            continue;
        }
        let (url, spec) = (s.location(), s.to_string());
        let opts = src.prometheus_options();
        match tessera::ingest::prometheus::instant_series(
            url,
            &opts,
            NAMESPACE_LABELS_METRIC,
            at_ms,
        ) {
            Ok(series) => owners.merge(Owners::from_namespace_labels(&spec, &series)),
            Err(e) => owners.notes.push(format!(
                "owners: cannot read {NAMESPACE_LABELS_METRIC} from {spec}: {e}"
            )),
        }
    }
}
