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

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::io::Read as _;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::header::{HeaderName, HeaderValue};
use rustls::crypto::{SupportedKxGroup, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme, SupportedCipherSuite,
    SupportedProtocolVersion,
};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::WebError;
use tessera_core::input_limits;

/// Largest web config file: 1 MiB (a config with inline certificates is a few kilobytes). Its
/// parse holds at most ~100 bytes per byte (see [`input_limits`]).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The most bytes read from each file the web config names (certificates and keys are a few
/// kilobytes, a system CA bundle a few hundred).
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// bcrypt's cost range (Go's `bcrypt.MinCost`..=`MaxCost`); a hash outside it matches nothing.
const BCRYPT_COSTS: std::ops::RangeInclusive<u32> = 4..=31;

/// How to make a bcrypt hash, for error messages.
const MAKE_A_HASH: &str = "make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`";

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

/// Headers exporter-toolkit allows in `http_server_config.headers` (the others are refused).
const ALLOWED_HEADERS: &[&str] = &[
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

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

/// A YAML map of strings whose entries are checked while they are read, so that an error names
/// the entry's line and column (serde_yaml_ng marks an error raised while a value is read with
/// that value's position): a key given twice (as `R` compares keys), and `R::check`.
#[derive(Debug)]
struct CheckedMap<R> {
    entries: Vec<(String, String)>,
    rule: PhantomData<R>,
}

trait EntryRule {
    /// The form of a key under which two keys are the same entry.
    fn normalize(key: &str) -> String;
    /// What is wrong with a key given more than once.
    fn duplicate(key: &str) -> String;
    /// What is wrong with an entry, if anything.
    fn check(key: &str, value: &str) -> Result<(), String>;
}

/// `basic_auth_users`: user → bcrypt hash.
#[derive(Debug)]
struct UserRule;

impl EntryRule for UserRule {
    fn normalize(key: &str) -> String {
        key.to_string()
    }

    fn duplicate(key: &str) -> String {
        format!("user {key:?} is listed more than once; give each user one hash")
    }

    fn check(user: &str, hash: &str) -> Result<(), String> {
        if user.contains(':') {
            return Err(format!(
                "user name {user:?} contains ':', which basic auth cannot carry"
            ));
        }
        let parts = hash
            .parse::<bcrypt::HashParts>()
            .map_err(|e| format!("not a bcrypt hash ({e}); {MAKE_A_HASH}"))?;
        let cost = parts.get_cost();
        if !BCRYPT_COSTS.contains(&cost) {
            return Err(format!(
                "bcrypt cost {cost} is outside {}..={}, so no password can match this hash; \
                 {MAKE_A_HASH}",
                BCRYPT_COSTS.start(),
                BCRYPT_COSTS.end()
            ));
        }
        Ok(())
    }
}

/// `http_server_config.headers`: exporter-toolkit's allowed headers and values; names compare
/// case-insensitively, as HTTP's do.
#[derive(Debug)]
struct HeaderRule;

impl EntryRule for HeaderRule {
    fn normalize(key: &str) -> String {
        key.to_ascii_lowercase()
    }

    fn duplicate(name: &str) -> String {
        format!("header {name:?} is listed more than once (names are case-insensitive)")
    }

    fn check(name: &str, value: &str) -> Result<(), String> {
        check_header(name, value).map(|_| ())
    }
}

impl<'de, R: EntryRule> Deserialize<'de> for CheckedMap<R> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MapVisitor<R>(PhantomData<R>);

        impl<'de, R: EntryRule> Visitor<'de> for MapVisitor<R> {
            type Value = CheckedMap<R>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of names to strings")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut seen = HashSet::new();
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let duplicate = !seen.insert(R::normalize(&key));
                    let value = map.next_value_seed(EntrySeed::<R> {
                        key: &key,
                        duplicate,
                        rule: PhantomData,
                    })?;
                    entries.push((key, value));
                }
                Ok(CheckedMap {
                    entries,
                    rule: PhantomData,
                })
            }
        }

        d.deserialize_map(MapVisitor(PhantomData))
    }
}

/// Reads one value of a [`CheckedMap`] and raises its errors there, at the value's position.
struct EntrySeed<'k, R> {
    key: &'k str,
    duplicate: bool,
    rule: PhantomData<R>,
}

impl<'de, R: EntryRule> DeserializeSeed<'de> for EntrySeed<'_, R> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_string(self)
    }
}

impl<'de, R: EntryRule> Visitor<'de> for EntrySeed<'_, R> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
        if self.duplicate {
            return Err(E::custom(R::duplicate(self.key)));
        }
        R::check(self.key, value).map_err(E::custom)?;
        Ok(value.to_string())
    }
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

/// A header of `http_server_config.headers`, checked against exporter-toolkit's rules.
fn check_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let Some(canonical) = ALLOWED_HEADERS
        .iter()
        .find(|h| h.eq_ignore_ascii_case(name))
    else {
        return Err(format!(
            "header {name:?} cannot be configured (allowed: {})",
            ALLOWED_HEADERS.join(", ")
        ));
    };
    let lower = value.to_ascii_lowercase();
    match *canonical {
        "X-Content-Type-Options" if lower != "nosniff" => {
            return Err(format!(
                "X-Content-Type-Options must be \"nosniff\", not {value:?}"
            ));
        }
        "X-Frame-Options" if lower != "deny" && lower != "sameorigin" => {
            return Err(format!(
                "X-Frame-Options must be \"deny\" or \"sameorigin\", not {value:?}"
            ));
        }
        _ => {}
    }
    let header_value = HeaderValue::from_str(value)
        .map_err(|_| format!("{canonical}: invalid header value {value:?}"))?;
    let header_name = HeaderName::from_bytes(canonical.as_bytes())
        .map_err(|_| format!("invalid header name {name:?}"))?;
    Ok((header_name, header_value))
}

/// A file's bytes, at most [`MAX_FILE_BYTES`] of them (so a config naming `/dev/zero` or a huge
/// file is an error, not an endless read).
fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "larger than {} MiB, too large for this file",
            MAX_FILE_BYTES >> 20
        ));
    }
    Ok(bytes)
}

/// Where a PEM comes from: a file named under a key, or inline text under a key.
enum Source {
    File { key: &'static str, path: PathBuf },
    Inline { key: &'static str },
}

struct Loader<'a> {
    origin: &'a Path,
    base_dir: &'a Path,
}

impl Loader<'_> {
    fn cfg_err(&self, message: impl Into<String>) -> WebError {
        WebError::Config {
            path: self.origin.to_path_buf(),
            message: input_limits::clip(&message.into()),
        }
    }

    fn source_err(&self, source: &Source, message: impl Into<String>) -> WebError {
        match source {
            Source::File { key, path } => WebError::ConfigFile {
                config: self.origin.to_path_buf(),
                key: format!("tls_server_config.{key}"),
                file: path.clone(),
                message: input_limits::clip(&message.into()),
            },
            Source::Inline { key } => {
                self.cfg_err(format!("tls_server_config.{key}: {}", message.into()))
            }
        }
    }

    fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }

    /// The PEM bytes of a file or inline value.
    fn read(&self, source: &Source, inline: Option<&str>) -> Result<Vec<u8>, WebError> {
        match source {
            Source::File { path, .. } => {
                read_bounded(path).map_err(|message| self.source_err(source, message))
            }
            Source::Inline { .. } => Ok(inline.unwrap_or_default().as_bytes().to_vec()),
        }
    }

    fn pick(
        &self,
        file_key: &'static str,
        file: Option<&str>,
        inline_key: &'static str,
        inline: Option<&str>,
    ) -> Result<Option<Source>, WebError> {
        let file = file.filter(|s| !s.is_empty());
        let inline = inline.filter(|s| !s.is_empty());
        match (file, inline) {
            (Some(_), Some(_)) => Err(self.cfg_err(format!(
                "tls_server_config: {file_key} and {inline_key} are both set; use one"
            ))),
            (Some(f), None) => Ok(Some(Source::File {
                key: file_key,
                path: self.resolve(f),
            })),
            (None, Some(_)) => Ok(Some(Source::Inline { key: inline_key })),
            (None, None) => Ok(None),
        }
    }

    fn certs(&self, source: &Source, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, WebError> {
        let mut certs = Vec::new();
        for item in CertificateDer::pem_slice_iter(pem) {
            certs.push(item.map_err(|e| self.source_err(source, format!("bad PEM: {e}")))?);
        }
        if certs.is_empty() {
            return Err(self.source_err(
                source,
                "no certificate in it (expected PEM \"-----BEGIN CERTIFICATE-----\" blocks)",
            ));
        }
        Ok(certs)
    }

    fn key(&self, source: &Source, pem: &[u8]) -> Result<PrivateKeyDer<'static>, WebError> {
        PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => self.source_err(
                source,
                "no private key in it (expected a PEM PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE \
                 KEY block)",
            ),
            other => self.source_err(source, format!("bad PEM: {other}")),
        })
    }

    /// The rustls config, or `None` when neither a certificate nor a key is given (plain HTTP,
    /// as exporter-toolkit does).
    fn tls(&self, t: RawTls, http2: bool) -> Result<Option<(ServerConfig, ClientAuth)>, WebError> {
        let cert_src = self.pick(
            "cert_file",
            t.cert_file.as_deref(),
            "cert",
            t.cert.as_deref(),
        )?;
        let key_src = self.pick("key_file", t.key_file.as_deref(), "key", t.key.as_deref())?;
        let (cert_src, key_src) = match (cert_src, key_src) {
            (None, None) => {
                let other_settings = t.client_ca_file.is_some()
                    || t.client_auth_type.is_some()
                    || t.min_version.is_some()
                    || t.max_version.is_some()
                    || t.cipher_suites.is_some()
                    || t.curve_preferences.is_some();
                if other_settings {
                    return Err(self.cfg_err(
                        "tls_server_config: TLS settings without cert_file and key_file (or cert \
                         and key)",
                    ));
                }
                return Ok(None);
            }
            (Some(_), None) => {
                return Err(self.cfg_err("tls_server_config: key_file (or key) is missing"));
            }
            (None, Some(_)) => {
                return Err(self.cfg_err("tls_server_config: cert_file (or cert) is missing"));
            }
            (Some(c), Some(k)) => (c, k),
        };
        if t.client_allowed_sans.is_some() {
            return Err(self.cfg_err(
                "tls_server_config.client_allowed_sans is not supported by this exporter",
            ));
        }

        let client_auth_name = t.client_auth_type.as_deref().unwrap_or("");
        let client_auth = ClientAuth::parse(client_auth_name).ok_or_else(|| {
            self.cfg_err(format!(
                "tls_server_config.client_auth_type: unknown value {client_auth_name:?} \
                 (expected NoClientCert, RequestClientCert, RequireAnyClientCert, \
                 VerifyClientCertIfGiven or RequireAndVerifyClientCert)"
            ))
        })?;
        let min = self.version("min_version", t.min_version.as_deref())?;
        let max = self.version("max_version", t.max_version.as_deref())?;
        let (min, max) = (
            min.unwrap_or(TlsVersion::Tls12),
            max.unwrap_or(TlsVersion::Tls13),
        );
        if min > max {
            return Err(self.cfg_err("tls_server_config: min_version is above max_version"));
        }

        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(names) = &t.cipher_suites {
            provider.cipher_suites = self.cipher_suites(names)?;
        }
        if let Some(names) = &t.curve_preferences {
            provider.kx_groups = self.curves(names)?;
        }
        if min == TlsVersion::Tls12
            && !provider
                .cipher_suites
                .iter()
                .any(|s| matches!(s, SupportedCipherSuite::Tls12(_)))
        {
            return Err(self.cfg_err(
                "tls_server_config.cipher_suites: no TLS 1.2 cipher suite left that rustls \
                 supports; list one of TLS_ECDHE_{ECDSA,RSA}_WITH_{AES_128_GCM_SHA256,\
                 AES_256_GCM_SHA384,CHACHA20_POLY1305_SHA256} or set min_version: TLS13",
            ));
        }
        let provider = Arc::new(provider);

        // Certificate and key.
        let cert_pem = self.read(&cert_src, t.cert.as_deref())?;
        let certs = self.certs(&cert_src, &cert_pem)?;
        let key_pem = self.read(&key_src, t.key.as_deref())?;
        let key = self.key(&key_src, &key_pem)?;
        let signing_key = provider
            .key_provider
            .load_private_key(key.clone_key())
            .map_err(|e| self.source_err(&key_src, format!("unusable private key: {e}")))?;
        let certified = rustls::sign::CertifiedKey::new(certs.clone(), signing_key);
        match certified.keys_match() {
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                let cert_name = match &cert_src {
                    Source::File { path, .. } => path.display().to_string(),
                    Source::Inline { .. } => "cert".to_string(),
                };
                return Err(self.source_err(
                    &key_src,
                    format!("private key does not match the certificate in {cert_name}"),
                ));
            }
            Err(e) => {
                return Err(self.source_err(&cert_src, format!("unusable certificate: {e}")));
            }
        }

        // Client certificates.
        let ca_src = t
            .client_ca_file
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|f| Source::File {
                key: "client_ca_file",
                path: self.resolve(f),
            });
        let verifier: Option<Arc<dyn ClientCertVerifier>> = match (client_auth, &ca_src) {
            (ClientAuth::NoClientCert, Some(_)) => {
                return Err(self.cfg_err(
                    "tls_server_config: client_ca_file is set but client_auth_type is \
                     NoClientCert (set client_auth_type, e.g. RequireAndVerifyClientCert)",
                ));
            }
            (ClientAuth::NoClientCert, None) => None,
            (ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert, _) => {
                Some(Arc::new(AnyClientCert {
                    mandatory: client_auth == ClientAuth::RequireAnyClientCert,
                    algorithms: provider.signature_verification_algorithms,
                }))
            }
            (
                ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert,
                None,
            ) => {
                return Err(self.cfg_err(format!(
                    "tls_server_config: client_auth_type {client_auth:?} needs client_ca_file"
                )));
            }
            (
                ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert,
                Some(src),
            ) => {
                let pem = self.read(src, None)?;
                let mut roots = RootCertStore::empty();
                for cert in self.certs(src, &pem)? {
                    roots.add(cert).map_err(|e| {
                        self.source_err(src, format!("unusable CA certificate: {e}"))
                    })?;
                }
                let builder =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
                let builder = if client_auth == ClientAuth::VerifyClientCertIfGiven {
                    builder.allow_unauthenticated()
                } else {
                    builder
                };
                Some(builder.build().map_err(|e| {
                    self.source_err(src, format!("cannot build a client verifier: {e}"))
                })?)
            }
        };

        let versions: Vec<&'static SupportedProtocolVersion> = [
            (TlsVersion::Tls13, &rustls::version::TLS13),
            (TlsVersion::Tls12, &rustls::version::TLS12),
        ]
        .into_iter()
        .filter(|(v, _)| (min..=max).contains(v))
        .map(|(_, p)| p)
        .collect();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| self.cfg_err(format!("tls_server_config: {e}")))?;
        let builder = match verifier {
            Some(v) => builder.with_client_cert_verifier(v),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| self.source_err(&cert_src, format!("unusable certificate: {e}")))?;
        // exporter-toolkit's default for prefer_server_cipher_suites is true.
        config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
        config.alpn_protocols = if http2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Ok(Some((config, client_auth)))
    }

    fn version(&self, key: &str, value: Option<&str>) -> Result<Option<TlsVersion>, WebError> {
        match value {
            None | Some("") => Ok(None),
            Some("TLS13") => Ok(Some(TlsVersion::Tls13)),
            Some("TLS12") => Ok(Some(TlsVersion::Tls12)),
            Some(v @ ("TLS10" | "TLS11")) => Err(self.cfg_err(format!(
                "tls_server_config.{key}: {v} is not supported (rustls speaks TLS12 and TLS13)"
            ))),
            Some(v) => Err(self.cfg_err(format!(
                "tls_server_config.{key}: unknown TLS version {v:?} (expected TLS12 or TLS13)"
            ))),
        }
    }

    /// Go's cipher suite names: TLS 1.2 ones that rustls has are kept in the given order; TLS 1.3
    /// suites are always on (Go does not configure them either); the others are skipped with a
    /// warning.
    fn cipher_suites(&self, names: &[String]) -> Result<Vec<SupportedCipherSuite>, WebError> {
        use rustls::crypto::ring::cipher_suite as cs;
        let mut tls12 = Vec::new();
        for name in names {
            let suite = match name.as_str() {
                "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => {
                    Some(cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
                }
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => {
                    Some(cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
                }
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
                | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
                    Some(cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)
                }
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => {
                    Some(cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)
                }
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => {
                    Some(cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384)
                }
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"
                | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
                    Some(cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256)
                }
                "TLS_AES_128_GCM_SHA256"
                | "TLS_AES_256_GCM_SHA384"
                | "TLS_CHACHA20_POLY1305_SHA256" => {
                    log::info!(
                        "{}: cipher suite {name} is TLS 1.3, always enabled",
                        self.origin.display()
                    );
                    None
                }
                n if GO_UNSUPPORTED_SUITES.contains(&n) => {
                    log::warn!(
                        "{}: cipher suite {name} is not supported by rustls; skipped",
                        self.origin.display()
                    );
                    None
                }
                _ => {
                    return Err(self.cfg_err(format!(
                        "tls_server_config.cipher_suites: unknown cipher suite {name:?}"
                    )));
                }
            };
            if let Some(s) = suite
                && !tls12.contains(&s)
            {
                tls12.push(s);
            }
        }
        let mut suites: Vec<SupportedCipherSuite> = rustls::crypto::ring::ALL_CIPHER_SUITES
            .iter()
            .copied()
            .filter(|s| matches!(s, SupportedCipherSuite::Tls13(_)))
            .collect();
        suites.extend(tls12);
        Ok(suites)
    }

    fn curves(&self, names: &[String]) -> Result<Vec<&'static dyn SupportedKxGroup>, WebError> {
        use rustls::crypto::ring::kx_group;
        let mut groups: Vec<&'static dyn SupportedKxGroup> = Vec::new();
        for name in names {
            let group = match name.as_str() {
                "X25519" => kx_group::X25519,
                "CurveP256" => kx_group::SECP256R1,
                "CurveP384" => kx_group::SECP384R1,
                "CurveP521" | "X25519MLKEM768" => {
                    log::warn!(
                        "{}: curve {name} is not supported by this exporter's TLS provider; \
                         skipped",
                        self.origin.display()
                    );
                    continue;
                }
                _ => {
                    return Err(self.cfg_err(format!(
                        "tls_server_config.curve_preferences: unknown curve {name:?} (expected \
                         X25519, CurveP256, CurveP384, CurveP521 or X25519MLKEM768)"
                    )));
                }
            };
            if !groups.iter().any(|g| g.name() == group.name()) {
                groups.push(group);
            }
        }
        if groups.is_empty() {
            return Err(self.cfg_err(
                "tls_server_config.curve_preferences: none of the listed curves is supported \
                 (supported: X25519, CurveP256, CurveP384)",
            ));
        }
        Ok(groups)
    }
}

/// Go cipher suite names that rustls does not implement (CBC, RSA key exchange, RC4, 3DES).
const GO_UNSUPPORTED_SUITES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// `RequestClientCert` / `RequireAnyClientCert`: any certificate is accepted without chain
/// verification (as in Go), but the handshake signature is still checked, so the client must hold
/// the certificate's private key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
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

    #[test]
    fn client_auth_and_version_values_are_checked() {
        let loader = Loader {
            origin: Path::new("/etc/web.yml"),
            base_dir: Path::new("/"),
        };
        assert!(loader.version("min_version", Some("TLS11")).is_err());
        assert!(loader.version("min_version", Some("tls12")).is_err());
        assert_eq!(
            loader.version("min_version", Some("TLS13")).expect("ok"),
            Some(TlsVersion::Tls13)
        );
        assert_eq!(
            ClientAuth::parse("RequireClientCert"),
            Some(ClientAuth::RequireAnyClientCert)
        );
        assert_eq!(ClientAuth::parse("Require"), None);
    }

    #[test]
    fn cipher_suites_and_curves_map_onto_rustls() {
        let loader = Loader {
            origin: Path::new("/etc/web.yml"),
            base_dir: Path::new("/"),
        };
        let suites = loader
            .cipher_suites(&[
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384".into(),
                "TLS_RSA_WITH_AES_128_CBC_SHA".into(),
                "TLS_AES_128_GCM_SHA256".into(),
            ])
            .expect("suites");
        let tls12: Vec<_> = suites
            .iter()
            .filter(|s| matches!(s, SupportedCipherSuite::Tls12(_)))
            .collect();
        assert_eq!(tls12.len(), 1);
        assert!(loader.cipher_suites(&["TLS_FOO".into()]).is_err());
        assert_eq!(
            loader
                .curves(&["CurveP521".into(), "X25519".into()])
                .expect("curves")
                .len(),
            1
        );
        assert!(loader.curves(&["CurveP521".into()]).is_err());
        assert!(loader.curves(&["P256".into()]).is_err());
    }
}
