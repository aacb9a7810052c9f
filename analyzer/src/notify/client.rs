//! The HTTP side of `tessera notify`: Alertmanager's API v2 through a blocking `ureq` client (the
//! one the `prometheus:` source uses), one timeout per request (`--alertmanager.timeout`), a
//! bearer token or basic auth read from files, the base URL's path prefix kept
//! (`http://host/alertmanager` → `http://host/alertmanager/api/v2/alerts`).
//!
//! Two calls: [`Client::tessera_alerts`] (`GET /api/v2/alerts` filtered on tessera's labels,
//! silenced, inhibited and unprocessed alerts included) and [`Client::post`] (one
//! `POST /api/v2/alerts`). No retries: a scheduled run is the retry, and every run is idempotent.
//! Each failure says whether the POST may have reached Alertmanager ([`NotifyError::Post`]'s
//! `maybe_applied`). It does not build alerts or decide what to resolve.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::NotifyError;
use super::alerts::Alert;
use crate::text::printable;

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
}

pub struct Client {
    base: String,
    agent: ureq::Agent,
    auth: Option<String>,
}

/// The first 300 characters of a body, printable.
fn snippet(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    let s: String = s.trim().chars().take(300).collect();
    printable(&s).into_owned()
}

impl Client {
    pub fn new(opts: &ClientOptions) -> Result<Client, NotifyError> {
        let url = opts.url.trim_end_matches('/');
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        if rest.is_none_or(|r| r.is_empty() || r.starts_with('/'))
            || url.chars().any(|c| c.is_whitespace() || c.is_control())
            || url.contains(['?', '#'])
        {
            return Err(NotifyError::Url(printable(&opts.url).into_owned()));
        }
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
