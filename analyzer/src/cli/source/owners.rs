//! `--owners FILE` and the namespaces' labels: the teams' contacts for the commands that name
//! them (`report`, `notify`, `job`, `analyze`), as one [`tessera::owners::Owners`]. The file
//! comes first; then, with cluster access (`--owners.kubernetes`, `--kubeconfig`, `--context`:
//! `tessera::kubernetes::Connection`), the namespaces' labels and annotations from the API
//! (one bounded list; a refused or failed list becomes a note); then, for each `prometheus:` source, kube-state-metrics' `kube_namespace_labels` at the end of
//! the range (a server that cannot answer becomes a note, not an error: the data was read);
//! then the Slurm jobs' users and accounts from `sacct` on PATH, for the jobs the sources hold
//! that no earlier source named (`tessera::owners::sacct`: absent or failing is one note).
//!
//! It decides nothing about owners itself (`tessera::owners` does).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use tessera::kubernetes::{Connection, Kube, KubeError, namespaces};
use tessera::owners::{NAMESPACE_LABELS_METRIC, Owners, sacct};

use super::SourceArgs;

/// `--owners`: the teams' contacts.
#[derive(Debug, Args)]
pub struct OwnersArgs {
    /// The teams' contacts (TOML: `[owners]` with `team = "contact"` lines; a team is a
    /// namespace or `slurm job N`). They come before the namespaces' labels
    /// (`tessera.io/owner`, `owner`, `team`) that a `prometheus:` source's kube-state-metrics
    /// exports (docs/report.md, "Owners").
    #[arg(long = "owners", value_name = "FILE")]
    pub owners: Option<PathBuf>,
    /// Read the teams' owners from the Kubernetes API: the namespaces' labels and annotations
    /// (`tessera.io/owner`, `owner`, `team`), after --owners. Also on with --kubeconfig or
    /// --context; in a pod, the service account's (it may list namespaces).
    #[arg(long = "owners.kubernetes")]
    pub kubernetes: bool,
    #[command(flatten)]
    pub kube: Connection,
}

/// Where a permission error sends the user: the chart's RBAC of the owners' read.
const RBAC: &str = "deploy/helm/tessera/templates/rbac.yaml (list namespaces)";

impl OwnersArgs {
    /// The owners file's teams (none without `--owners`): read before any data, so that a bad
    /// file fails first.
    /// With cluster access, the API's namespaces come after the file: a configuration that
    /// cannot connect is an error, a list the server refuses or fails is a note.
    pub fn file(&self) -> Result<Owners> {
        let mut owners = match &self.owners {
            Some(p) => Owners::load(p)?,
            None => Owners::default(),
        };
        if self.kubernetes || self.kube.kubeconfig.is_some() || self.kube.context.is_some() {
            let k = Kube::connect(&self.kube, RBAC)?;
            let cluster = match &self.kube.context {
                Some(c) => format!("the Kubernetes API (context {c})"),
                None => "the Kubernetes API".to_string(),
            };
            match namespaces::list(&k) {
                Ok(list) => owners.merge(Owners::from_namespaces(&cluster, &list)),
                Err(e) => owners.notes.push(kube_note(&cluster, &e)),
            }
        }
        Ok(owners)
    }
}

fn kube_note(cluster: &str, e: &KubeError) -> String {
    format!("owners: cannot list the namespaces of {cluster}: {e}")
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

/// Adds the owners `sacct` gives of the Slurm jobs in `jobs` that `owners` does not name yet
/// (`sacct` not run when there are none); what it could not say is one note.
pub fn add_slurm_accounts(owners: &mut Owners, jobs: impl IntoIterator<Item = String>) {
    let unnamed: Vec<String> = jobs
        .into_iter()
        .filter(|j| owners.of(None, Some(j)).is_none())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if unnamed.is_empty() {
        return;
    }
    let found = sacct::owners(std::path::Path::new("sacct"), &unnamed, sacct::TIMEOUT);
    owners.merge(Owners::from_slurm(found));
}

/// The Slurm jobs of the partitions (`tessera::jobs::ids`); a partition that cannot be read
/// adds a note to `owners` and no job.
pub fn slurm_jobs(owners: &mut Owners, frames: &[&tessera::frames::Frames]) -> Vec<String> {
    let mut out = Vec::new();
    for f in frames {
        match tessera::jobs::ids(f) {
            Ok(ids) => out.extend(ids),
            Err(e) => {
                owners
                    .notes
                    .push(format!("owners: cannot list the Slurm jobs: {e}"));
                break;
            }
        }
    }
    out
}

/// The accounts `sacct` gives of the Slurm jobs in the partitions (the queue plan's teams of
/// Slurm-held GPUs); what it could not say is a note on stderr, never an error.
pub fn job_accounts(
    frames: &[&tessera::frames::Frames],
) -> std::collections::BTreeMap<String, String> {
    let mut notes = Owners::default();
    let jobs = slurm_jobs(&mut notes, frames);
    let (found, note) = sacct::accounts(std::path::Path::new("sacct"), &jobs, sacct::TIMEOUT);
    for n in notes.notes.iter().chain(&note) {
        eprintln!("tessera: note: {}", tessera::output::escape::printable(n));
    }
    found
}
