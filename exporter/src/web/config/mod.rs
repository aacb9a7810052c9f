//! The web config file (`--web.config.file`), in the Prometheus exporter-toolkit's format.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # or `cert:` with the PEM inline
//!   key_file: server.key           # or `key:` with the PEM inline
//!   client_auth_type: RequireAndVerifyClientCert
//!   client_ca_file: clients-ca.crt
//!   min_version: TLS12             # TLS12 | TLS13
//!   max_version: TLS13
//!   cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]   # TLS 1.2 only, as in Go
//!   prefer_server_cipher_suites: true
//!   curve_preferences: [X25519, CurveP256]
//! http_server_config:
//!   http2: true
//!   headers:
//!     Strict-Transport-Security: max-age=31536000
//! basic_auth_users:
//!   prometheus: $2y$10$...         # bcrypt hash
//! ```
//!
//! What it does: parses strictly (unknown keys are errors naming the file and the key), resolves
//! relative paths against the config file's directory, and validates everything at load time:
//! files exist and hold the right PEM, the key matches the certificate, the CA file has
//! certificates, bcrypt hashes parse and have a cost bcrypt accepts (4 to 31), no user and no
//! header is listed twice, header names are allowed. Errors name the file, the key and, for
//! `basic_auth_users` and `headers` entries and YAML errors, the line and column; they quote at
//! most [`input_limits::MAX_MESSAGE_CHARS`] characters of input. Before parsing, the file is
//! refused over [`MAX_CONFIG_BYTES`] or nested deeper than [`input_limits::MAX_YAML_DEPTH`]; the
//! files it names are read up to [`MAX_FILE_BYTES`]. The result is a ready rustls
//! [`ServerConfig`] (ring provider) plus the users and headers; building it never panics.
//!
//! What it does not do: reload the file while running, `client_allowed_sans` (rejected as
//! unsupported), TLS 1.0/1.1 or the CBC/RSA-key-exchange cipher suites (rustls has none; listed
//! ones are skipped with a warning), curves other than X25519, P-256 and P-384 (skipped likewise).

mod entries;
mod tls;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::header::{HeaderName, HeaderValue};
use rustls::server::ServerConfig;
use serde::Deserialize;

use super::WebError;
use entries::{CheckedMap, HeaderRule, UserRule, check_header};
use tessera_core::input_limits;
use tls::Loader;

/// Largest web config file: 1 MiB (a config with inline certificates is a few kilobytes). Its
/// parse holds at most ~100 bytes per byte (see [`input_limits`]).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The most bytes read from each file the web config names (certificates and keys are a few
/// kilobytes, a system CA bundle a few hundred).
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// exporter-toolkit's `client_auth_type` (Go's `tls.ClientAuthType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for (the default).
    NoClientCert,
    /// A certificate is asked for, not required and not verified.
    RequestClientCert,
    /// A certificate is required but not verified (only possession of its key is checked).
    RequireAnyClientCert,
    /// A certificate is optional; if given, it must chain to `client_ca_file`.
    VerifyClientCertIfGiven,
    /// A certificate is required and must chain to `client_ca_file`.
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    fn parse(s: &str) -> Option<ClientAuth> {
        Some(match s {
            "" | "NoClientCert" => ClientAuth::NoClientCert,
            "RequestClientCert" => ClientAuth::RequestClientCert,
            // "RequireClientCert" is exporter-toolkit's backwards-compatible alias.
            "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAnyClientCert,
            "VerifyClientCertIfGiven" => ClientAuth::VerifyClientCertIfGiven,
            "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerifyClientCert,
            _ => return None,
        })
    }
}

/// A TLS protocol version of `min_version`/`max_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    tls_server_config: Option<RawTls>,
    #[serde(default)]
    http_server_config: Option<RawHttp>,
    #[serde(default)]
    basic_auth_users: Option<CheckedMap<UserRule>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<String>,
    key_file: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    client_ca_file: Option<String>,
    client_auth_type: Option<String>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    http2: Option<bool>,
    headers: Option<CheckedMap<HeaderRule>>,
}

/// A validated web config: TLS settings ready for rustls, basic auth users, response headers.
#[derive(Clone)]
pub struct WebConfig {
    path: PathBuf,
    tls: Option<Arc<ServerConfig>>,
    client_auth: ClientAuth,
    http2: bool,
    headers: Vec<(HeaderName, HeaderValue)>,
    users: BTreeMap<String, String>,
}

impl fmt::Debug for WebConfig {
    // By hand: never print password hashes or key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .field("client_auth", &self.client_auth)
            .field("http2", &self.http2)
            .field("headers", &self.headers)
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl WebConfig {
    /// Read and validate a web config file; relative paths in it are relative to its directory.
    pub fn from_file(path: impl AsRef<Path>) -> Result<WebConfig, WebError> {
        let path = path.as_ref();
        let text =
            input_limits::read_to_string(path, MAX_CONFIG_BYTES).map_err(|e| WebError::Config {
                path: path.to_path_buf(),
                message: format!("cannot read: {e}"),
            })?;
        let base = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        WebConfig::from_yaml(&text, path, &base)
    }

    /// Validate a web config given as text. `origin` names it in errors; relative paths in it are
    /// resolved against `base_dir`.
    pub fn from_yaml(text: &str, origin: &Path, base_dir: &Path) -> Result<WebConfig, WebError> {
        let cfg_err = |message: String| WebError::Config {
            path: origin.to_path_buf(),
            message: input_limits::clip(&message),
        };
        input_limits::check_yaml_with(text, MAX_CONFIG_BYTES, input_limits::MAX_YAML_DEPTH)
            .map_err(|e| cfg_err(e.to_string()))?;
        // An empty file (or only comments) is a valid config with nothing in it. The messages
        // start with the YAML path and end with the line and column.
        // `yaml_error` has clipped what quotes the input and put the position after it: not
        // clipped again, which could cut the position off.
        let raw: RawConfig = serde_yaml_ng::from_str::<Option<RawConfig>>(text)
            .map_err(|e| WebError::Config {
                path: origin.to_path_buf(),
                message: input_limits::yaml_error(&e),
            })?
            .unwrap_or_default();
        let loader = Loader { origin, base_dir };

        let (http2, headers) = match raw.http_server_config {
            None => (true, Vec::new()),
            Some(h) => {
                let mut headers = Vec::new();
                for (name, value) in h.headers.map(|m| m.entries).unwrap_or_default() {
                    headers.push(
                        check_header(&name, &value)
                            .map_err(|m| cfg_err(format!("http_server_config.headers: {m}")))?,
                    );
                }
                (h.http2.unwrap_or(true), headers)
            }
        };
        // Checked while read (UserRule): no duplicates, valid hashes.
        let users: BTreeMap<String, String> = raw
            .basic_auth_users
            .map(|m| m.entries.into_iter().collect())
            .unwrap_or_default();

        let (tls, client_auth) = match raw.tls_server_config {
            None => (None, ClientAuth::NoClientCert),
            Some(t) => match loader.tls(t, http2)? {
                None => (None, ClientAuth::NoClientCert),
                Some((config, auth)) => (Some(Arc::new(config)), auth),
            },
        };
        Ok(WebConfig {
            path: origin.to_path_buf(),
            tls,
            client_auth,
            http2,
            headers,
            users,
        })
    }

    /// The file this config came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the server speaks TLS (`cert_file`/`key_file` or `cert`/`key` are set).
    pub fn tls_enabled(&self) -> bool {
        self.tls.is_some()
    }

    /// The client certificate mode (`NoClientCert` without TLS).
    pub fn client_auth(&self) -> ClientAuth {
        self.client_auth
    }

    /// `http_server_config.http2` (default true).
    pub fn http2(&self) -> bool {
        self.http2
    }

    /// Whether `basic_auth_users` has at least one user (then every path needs auth).
    pub fn basic_auth_enabled(&self) -> bool {
        !self.users.is_empty()
    }

    pub(crate) fn tls_config(&self) -> Option<Arc<ServerConfig>> {
        self.tls.clone()
    }

    pub(crate) fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    pub(crate) fn users(&self) -> &BTreeMap<String, String> {
        &self.users
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<WebConfig, WebError> {
        WebConfig::from_yaml(text, Path::new("/etc/web.yml"), Path::new("/nonexistent"))
    }

    #[test]
    fn empty_file_is_plain_http_without_auth() {
        for text in ["", "# nothing\n", "{}"] {
            let c = parse(text).expect(text);
            assert!(!c.tls_enabled());
            assert!(!c.basic_auth_enabled());
            assert!(c.http2());
        }
    }

    #[test]
    fn unknown_keys_name_the_file_and_key() {
        let e = parse("tls_server_config:\n  cert_fil: x\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/etc/web.yml"), "{e}");
        assert!(e.contains("cert_fil"), "{e}");
        let e = parse("basic_auth: {}\n").unwrap_err().to_string();
        assert!(e.contains("basic_auth"), "{e}");
    }

    #[test]
    fn bad_bcrypt_hash_is_an_error() {
        let e = parse("basic_auth_users:\n  alice: notahash\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("basic_auth_users.alice"), "{e}");
        assert!(e.contains("bcrypt"), "{e}");
    }

    #[test]
    fn good_bcrypt_hash_is_accepted() {
        let hash = bcrypt::hash("secret", 4).expect("hash");
        let c = parse(&format!("basic_auth_users:\n  alice: '{hash}'\n")).expect("config");
        assert!(c.basic_auth_enabled());
        assert!(
            !format!("{c:?}").contains(&hash),
            "Debug must not print hashes"
        );
    }

    #[test]
    fn user_with_colon_is_refused() {
        let hash = bcrypt::hash("secret", 4).expect("hash");
        let e = parse(&format!("basic_auth_users:\n  'a:b': '{hash}'\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("':'"), "{e}");
    }

    #[test]
    fn headers_follow_exporter_toolkit_rules() {
        let c = parse(
            "http_server_config:\n  headers:\n    x-frame-options: deny\n    \
             Strict-Transport-Security: max-age=31536000\n",
        )
        .expect("config");
        assert_eq!(c.headers().len(), 2);
        let e = parse("http_server_config:\n  headers:\n    X-Frame-Options: allow\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("X-Frame-Options"), "{e}");
        let e = parse("http_server_config:\n  headers:\n    Server: mine\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be configured"), "{e}");
    }

    #[test]
    fn tls_settings_without_cert_or_only_one_half() {
        let e = parse("tls_server_config:\n  min_version: TLS13\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("without cert_file"), "{e}");
        let e = parse("tls_server_config:\n  cert_file: a.crt\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("key_file"), "{e}");
        let e = parse("tls_server_config:\n  key_file: a.key\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cert_file"), "{e}");
        // Both empty: plain HTTP, as exporter-toolkit does.
        let c = parse("tls_server_config:\n  cert_file: ''\n  key_file: ''\n").expect("config");
        assert!(!c.tls_enabled());
    }

    #[test]
    fn missing_cert_file_names_the_resolved_path() {
        let e = parse("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls_server_config.cert_file"), "{e}");
        assert!(e.contains("/nonexistent/a.crt"), "{e}");
    }
}
