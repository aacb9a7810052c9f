//! The one Kubernetes layer of every command that talks to a cluster (`mig apply --via
//! mig-manager`, `share apply`, `scale-down`, and the owners of `report`, `notify`, `job` and
//! `analyze`): the connection flags ([`Connection`], one clap
//! `Args` flattened by each command), the client ([`client::Kube`]: kubeconfig or in-cluster
//! config, a current-thread runtime, every call bounded by `--request-timeout`), one error type
//! ([`KubeError`]), the ConfigMap write with its 409 retry ([`configmap`]), the compare-and-swap
//! node-label write that reads a lost answer back ([`labels`]), the ClusterPolicy read
//! ([`policy`]), the namespaces' labels and annotations (the teams' owners: [`namespaces`]),
//! the one frame of the node-label rollouts ([`rollout`]), the batch schedulers' queue objects ([`batch`]), and the audit trail: a Kubernetes Event ([`events`]) and a line in the local audit log
//! ([`audit`]) per change.
//!
//! Architecture invariant: kube-rs clients are constructed here only (a structure test checks);
//! the commands' modules keep their decisions and success conditions and reach the API server
//! through a [`client::Kube`].
//!
//! What it does not do: decide anything (which nodes, which configs, which workloads), watch
//! (mig-manager's node watches stay in `mig_manager::kube`), or impersonate.

pub mod audit;
pub mod batch;
pub mod client;
pub mod configmap;
pub mod events;
pub mod labels;
pub mod namespaces;
pub mod policy;
pub mod rollout;

use std::path::PathBuf;
use std::time::Duration;

pub use client::Kube;

/// The longest one API call (not a watch) may take, by default.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of the Kubernetes API, as the commands distinguish them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeError {
    /// 409: the object changed since it was read (or already exists).
    #[error("{0}")]
    Conflict(String),
    /// 404.
    #[error("{0}")]
    NotFound(String),
    /// 401/403: the credentials or the RBAC do not allow the call; `rbac` names the command's
    /// RBAC file (e.g. `deploy/sharing/rbac.yaml`).
    #[error("{what}: {message} (check the credentials, and the permissions in {rbac})")]
    Forbidden {
        what: String,
        message: String,
        rbac: &'static str,
    },
    /// Anything else: transport errors, timeouts, 5xx, bad responses. A write that fails so
    /// may have been applied (the answer was lost, or it lands later): the caller reads the
    /// object again.
    #[error("{0}")]
    Other(String),
}

impl KubeError {
    /// Whether a write that failed with this error was certainly not applied (409, 404, 401,
    /// 403); otherwise it may have been, and only reading the object again tells.
    pub fn certainly_not_applied(&self) -> bool {
        !matches!(self, KubeError::Other(_))
    }
}

/// How to reach the cluster: the flags every command that talks to one shares (kubectl's
/// names).
#[derive(clap::Args, Debug, Clone)]
pub struct Connection {
    /// kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// kubeconfig context (default: the current one).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The longest one Kubernetes API call may take (kubectl's --request-timeout).
    #[arg(long = "request-timeout", value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// The local audit log: one JSON line per change made to the cluster (default:
    /// $XDG_STATE_HOME/tessera/cluster-audit.jsonl, else ~/.local/state/tessera/...; `-`: stderr,
    /// for a pod's log).
    #[arg(long = "audit-log", value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    tessera_core::units::parse_duration(s)
}
