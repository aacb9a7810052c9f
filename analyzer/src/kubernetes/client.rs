//! [`Kube`]: a kube-rs client from the usual kubeconfig search (`--kubeconfig`, `$KUBECONFIG`,
//! `~/.kube/config`, `--context`) or, when there is none, the in-cluster service account, on a
//! current-thread tokio runtime it owns; every call is bounded by the request timeout, so a
//! silent API server is an error, never a hang; and the mapping of kube-rs errors to
//! [`KubeError`].
//!
//! What it does not do: retry (the callers decide what a failed call means: a read is retried
//! by their loops, a write that got no answer is read back), or watch (see
//! `mig_manager::kube`).

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::{Connection, KubeError};

/// A connected client, its runtime and its request timeout.
pub struct Kube {
    rt: tokio::runtime::Runtime,
    client: Client,
    timeout: Duration,
    /// The command's RBAC file, named in 401/403 errors.
    rbac: &'static str,
    /// The local audit log (`None`: no state folder to put it in).
    audit_log: Option<PathBuf>,
}

/// The [`KubeError`] of a kube-rs error of call `what`; `rbac` is named in 401/403 errors.
pub fn api_error(what: &str, e: kube::Error, rbac: &'static str) -> KubeError {
    match e {
        kube::Error::Api(s) => match s.code {
            409 => KubeError::Conflict(format!("{what}: {}", s.message)),
            404 => KubeError::NotFound(format!("{what}: {}", s.message)),
            401 | 403 => KubeError::Forbidden {
                what: what.to_string(),
                message: s.message.clone(),
                rbac,
            },
            code => KubeError::Other(format!("{what}: {} ({code} {})", s.message, s.reason)),
        },
        other => KubeError::Other(format!("{what}: {other}")),
    }
}

impl Kube {
    /// Connect as `conn` says (or the usual search: `$KUBECONFIG`, `~/.kube/config`, then the
    /// in-cluster config); the connect timeout is the request timeout, at most 10 s. `rbac`
    /// names the command's RBAC file in permission errors.
    pub fn connect(conn: &Connection, rbac: &'static str) -> Result<Kube, KubeError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| KubeError::Other(format!("cannot start the runtime: {e}")))?;
        let context = conn.context.as_deref();
        let opts = KubeConfigOptions {
            context: context.map(str::to_string),
            ..Default::default()
        };
        let mut config = rt.block_on(async {
            match &conn.kubeconfig {
                Some(p) => {
                    let kc = Kubeconfig::read_from(p).map_err(|e| {
                        KubeError::Other(format!("kubeconfig {}: {e}", p.display()))
                    })?;
                    Config::from_custom_kubeconfig(kc, &opts)
                        .await
                        .map_err(|e| KubeError::Other(format!("kubeconfig {}: {e}", p.display())))
                }
                None if context.is_some() => Config::from_kubeconfig(&opts)
                    .await
                    .map_err(|e| KubeError::Other(format!("kubeconfig: {e}"))),
                None => Config::infer().await.map_err(|e| {
                    KubeError::Other(format!(
                        "no Kubernetes configuration: {e} (give --kubeconfig FILE, set KUBECONFIG, or run in a pod with a service account)"
                    ))
                }),
            }
        })?;
        config.connect_timeout = Some(conn.request_timeout.min(Duration::from_secs(10)));
        let client = {
            let _guard = rt.enter();
            Client::try_from(config)
                .map_err(|e| KubeError::Other(format!("Kubernetes client: {e}")))?
        };
        Ok(Kube {
            rt,
            client,
            timeout: conn.request_timeout,
            rbac,
            audit_log: conn.audit_log.clone().or_else(super::audit::default_path),
        })
    }

    /// A handle of the client (cheap: it is reference-counted).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The command's RBAC file.
    pub fn rbac(&self) -> &'static str {
        self.rbac
    }

    /// The local audit log.
    pub fn audit_log(&self) -> Option<&std::path::Path> {
        self.audit_log.as_deref()
    }

    /// The runtime, for what is not one call (mig-manager's watches).
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.rt
    }

    /// The [`KubeError`] of a kube-rs error of call `what`.
    pub fn error(&self, what: &str, e: kube::Error) -> KubeError {
        api_error(what, e, self.rbac)
    }

    /// Run one call within the request timeout.
    pub fn call<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, KubeError> {
        match self
            .rt
            .block_on(async { tokio::time::timeout(self.timeout, f).await })
        {
            Ok(r) => r.map_err(|e| self.error(what, e)),
            Err(_) => Err(KubeError::Other(format!(
                "{what}: no answer from the API server in {} s",
                self.timeout.as_secs_f64()
            ))),
        }
    }
}
