//! The HTTP side of `tessera notify`: Alertmanager's API v2 through a blocking `ureq` client (the
//! one the `prometheus:` source uses), one timeout per request (`--alertmanager.timeout`), a
//! bearer token or basic auth read from files, TLS with a private CA and a client certificate
//! ([`TlsFiles`], Prometheus' `tls_config` names: `ca_file`, `cert_file`, `key_file`), the base
//! URL's path prefix kept (`http://host/alertmanager` → `http://host/alertmanager/api/v2/alerts`).
//!
//! Two calls: [`Client::tessera_alerts`] (`GET /api/v2/alerts` filtered on tessera's labels,
//! silenced, inhibited and unprocessed alerts included) and [`Client::post`] (one
//! `POST /api/v2/alerts`). No retries: a scheduled run is the retry, and every run is idempotent.
//! Redirects are never followed (a 3xx is an error: a POST followed as a GET, or re-sent to
//! another server, is not a delivery). A URL with credentials (`user:password@`) is refused, and
//! every URL in a message is printed through [`redact_url`]. Each failure says whether the POST
//! may have reached Alertmanager ([`NotifyError::Post`]'s `maybe_applied`). It does not build
//! alerts or decide what to resolve.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::NotifyError;
use super::alerts::Alert;
use crate::output::escape::printable;

/// Largest answer read from `GET /api/v2/alerts`.
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// How to reach Alertmanager.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Base URL (`http://alertmanager:9093`, a path prefix kept).
    pub url: String,
    pub timeout: Duration,
    pub bearer_token_file: Option<PathBuf>,
    /// User and a file holding the password.
    pub basic_auth: Option<(String, PathBuf)>,
    /// TLS: the CA to trust and the client certificate to present.
    pub tls: TlsFiles,
}

/// TLS files of an `https://` Alertmanager, as Prometheus' `tls_config` names them.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    /// PEM certificates of the CAs that sign the server's certificate; given, they replace the
    /// built-in (Mozilla) roots (`--alertmanager.tls.ca-file`).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (its chain after it) to present (`--alertmanager.tls.cert-file`).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate (`--alertmanager.tls.key-file`).
    pub key_file: Option<PathBuf>,
}

impl TlsFiles {
    fn any(&self) -> bool {
        self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some()
    }

    /// ureq's TLS configuration: the CA file's certificates as the only roots (the built-in
    /// roots when none is given), the client certificate and key when given (both or neither).
    pub fn tls_config(&self) -> Result<ureq::tls::TlsConfig, NotifyError> {
        use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
        let read = |flag: &'static str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| NotifyError::Tls {
                flag,
                path: path.clone(),
                reason: e.to_string(),
            })
        };
        let certs = |flag: &'static str,
                     path: &PathBuf|
         -> Result<Vec<Certificate<'static>>, NotifyError> {
            let pem = read(flag, path)?;
            let mut out = Vec::new();
            for item in ureq::tls::parse_pem(&pem) {
                match item {
                    Ok(PemItem::Certificate(c)) => out.push(c),
                    Ok(_) => {}
                    Err(e) => {
                        return Err(NotifyError::Tls {
                            flag,
                            path: path.clone(),
                            reason: format!("not PEM: {e}"),
                        });
                    }
                }
            }
            if out.is_empty() {
                return Err(NotifyError::Tls {
                    flag,
                    path: path.clone(),
                    reason: "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into(),
                });
            }
            Ok(out)
        };
        let mut b = TlsConfig::builder();
        if let Some(p) = &self.ca_file {
            b = b.root_certs(RootCerts::new_with_certs(&certs(
                "--alertmanager.tls.ca-file",
                p,
            )?));
        }
        match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => {
                let chain = certs("--alertmanager.tls.cert-file", c)?;
                let key = PrivateKey::from_pem(&read("--alertmanager.tls.key-file", k)?).map_err(
                    |e| NotifyError::Tls {
                        flag: "--alertmanager.tls.key-file",
                        path: k.clone(),
                        reason: format!("no PEM private key in it ({e})"),
                    },
                )?;
                b = b.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
            }
            (None, None) => {}
            (Some(p), None) | (None, Some(p)) => {
                return Err(NotifyError::Tls {
                    flag: if self.cert_file.is_some() {
                        "--alertmanager.tls.cert-file"
                    } else {
                        "--alertmanager.tls.key-file"
                    },
                    path: p.clone(),
                    reason:
                        "--alertmanager.tls.cert-file and --alertmanager.tls.key-file go together"
                            .into(),
                });
            }
        }
        Ok(b.build())
    }
}

/// `url` with anything before an `@` (userinfo: `user:password@`) replaced by `<redacted>`, the
/// scheme kept: the only form in which a URL given to notify is printed.
pub fn redact_url(url: &str) -> String {
    let Some(at) = url.rfind('@') else {
        return printable(url).into_owned();
    };
    let start = url.find("://").map_or(0, |i| i + 3);
    let start = start.min(at);
    printable(&format!("{}<redacted>{}", &url[..start], &url[at..])).into_owned()
}

/// Checks `--alertmanager.url`: `http://` or `https://`, a host, no credentials (any `@`), no
/// query, fragment, space or control character.
pub fn check_url(url: &str) -> Result<(), NotifyError> {
    if url.contains('@') {
        return Err(NotifyError::UrlCredentials(redact_url(url)));
    }
    let trimmed = url.trim_end_matches('/');
    let rest = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"));
    if rest.is_none_or(|r| r.is_empty() || r.starts_with('/'))
        || url.chars().any(|c| c.is_whitespace() || c.is_control())
        || url.contains(['?', '#'])
    {
        return Err(NotifyError::Url(printable(url).into_owned()));
    }
    Ok(())
}

pub struct Client {
    base: String,
    agent: ureq::Agent,
    auth: Option<String>,
}

/// Whether `status` is a redirect (3xx).
fn is_redirect(status: u16) -> bool {
    (300..400).contains(&status)
}

/// The reason of an error for a 3xx answer: where it pointed (credentials redacted, cut), and
/// that it is not followed.
fn redirect<B>(status: u16, resp: &ureq::http::Response<B>) -> String {
    let location = resp
        .headers()
        .get("location")
        .map(|l| {
            let l = redact_url(&String::from_utf8_lossy(l.as_bytes()));
            l.chars().take(300).collect::<String>()
        })
        .unwrap_or_else(|| "(no Location)".into());
    format!(
        "HTTP {status}, a redirect to {location}: tessera does not follow redirects (a POST \
         would be re-sent as a GET or to another server); set --alertmanager.url to the address \
         that answers"
    )
}

/// The first 300 characters of a body, printable.
fn snippet(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    let s: String = s.trim().chars().take(300).collect();
    printable(&s).into_owned()
}

impl Client {
    pub fn new(opts: &ClientOptions) -> Result<Client, NotifyError> {
        check_url(&opts.url)?;
        let url = opts.url.trim_end_matches('/');
        if opts.tls.any() && !url.starts_with("https://") {
            return Err(NotifyError::TlsOverHttp(url.to_string()));
        }
        let tls = opts.tls.tls_config()?;
        let read = |p: &PathBuf, what: &'static str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .map_err(|e| NotifyError::Auth {
                    what,
                    path: p.clone(),
                    reason: e.to_string(),
                })
        };
        let auth = if let Some(p) = &opts.bearer_token_file {
            Some(format!("Bearer {}", read(p, "bearer token file")?))
        } else if let Some((user, p)) = &opts.basic_auth {
            let pass = read(p, "basic auth password file")?;
            Some(format!("Basic {}", BASE64.encode(format!("{user}:{pass}"))))
        } else {
            None
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(opts.timeout))
            .http_status_as_error(false)
            // A 3xx is answered as it is, and is an error (`redirect`).
            .max_redirects(0)
            .tls_config(tls)
            .build()
            .into();
        Ok(Client {
            base: url.to_string(),
            agent,
            auth,
        })
    }

    fn alerts_url(&self) -> String {
        format!("{}/api/v2/alerts", self.base)
    }

    /// The alerts Alertmanager holds whose labels match every `(name, value)` of `filter`
    /// (active, silenced, inhibited and unprocessed; resolved alerts are not returned).
    pub fn tessera_alerts(&self, filter: &[(String, String)]) -> Result<Vec<Alert>, NotifyError> {
        let url = self.alerts_url();
        let fail = |reason: String| NotifyError::Get {
            url: url.clone(),
            reason,
        };
        let mut req = self.agent.get(&url);
        for (k, v) in [
            ("active", "true"),
            ("silenced", "true"),
            ("inhibited", "true"),
            ("unprocessed", "true"),
        ] {
            req = req.query(k, v);
        }
        for (name, value) in filter {
            let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
            req = req.query("filter", format!("{name}=\"{escaped}\""));
        }
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let mut resp = req.call().map_err(|e| fail(e.to_string()))?;
        let status = resp.status().as_u16();
        if is_redirect(status) {
            return Err(fail(redirect(status, &resp)));
        }
        let body = match resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()
        {
            Ok(b) => b,
            Err(ureq::Error::BodyExceedsLimit(_)) => {
                return Err(fail(format!(
                    "the answer is larger than {} MiB",
                    MAX_ANSWER_BYTES >> 20
                )));
            }
            Err(e) => return Err(fail(format!("HTTP {status}, reading the body: {e}"))),
        };
        if status != 200 {
            return Err(fail(format!("HTTP {status}: {}", snippet(&body))));
        }
        serde_json::from_slice(&body).map_err(|e| {
            fail(format!(
                "not an Alertmanager API v2 list of alerts ({e}): {}",
                snippet(&body)
            ))
        })
    }

    /// One `POST /api/v2/alerts` of `alerts` (`firing` of them new or renewed, the rest
    /// resolutions, for the message).
    pub fn post(&self, alerts: &[Alert], firing: usize) -> Result<(), NotifyError> {
        let url = self.alerts_url();
        let body = serde_json::to_string(alerts).map_err(|e| NotifyError::Post {
            url: url.clone(),
            firing,
            resolved: alerts.len() - firing,
            reason: format!("encoding the alerts: {e}"),
            maybe_applied: false,
        })?;
        let fail = |reason: String, maybe_applied: bool| NotifyError::Post {
            url: url.clone(),
            firing,
            resolved: alerts.len() - firing,
            reason,
            maybe_applied,
        };
        let mut req = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json");
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let mut resp = match req.send(body) {
            Ok(r) => r,
            // Nothing reached Alertmanager: no connection was made.
            Err(
                e @ (ureq::Error::ConnectionFailed
                | ureq::Error::HostNotFound
                | ureq::Error::BadUri(_)),
            ) => return Err(fail(e.to_string(), false)),
            // A timeout or a broken connection after the request may have been read.
            Err(e) => return Err(fail(e.to_string(), true)),
        };
        let status = resp.status().as_u16();
        if status == 200 {
            return Ok(());
        }
        // A redirect from a proxy or an ingress: the alerts did not reach Alertmanager.
        if is_redirect(status) {
            return Err(fail(redirect(status, &resp), false));
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(64 << 10)
            .read_to_vec()
            .unwrap_or_default();
        // 400: Alertmanager checked each alert and kept the valid ones of the batch; 5xx: not
        // known. Other answers (401, 403, 404, 422 from the API's schema check) stored nothing.
        let maybe_applied = status == 400 || status >= 500;
        Err(fail(
            format!("HTTP {status}: {}", snippet(&body)),
            maybe_applied,
        ))
    }
}
