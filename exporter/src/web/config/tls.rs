//! TLS building: `tls_server_config` turned into a ready rustls [`ServerConfig`] (ring
//! provider): certificate and key from files (read up to [`MAX_FILE_BYTES`], relative to the
//! config's directory) or inline PEM, client certificate modes, protocol versions, cipher suites
//! and curves mapped from Go's names onto rustls's.
//!
//! It does not parse the YAML ([`super`]) nor check users or headers ([`super::entries`]).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::{CryptoProvider, SupportedKxGroup, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme, SupportedCipherSuite,
    SupportedProtocolVersion,
};

use super::{ClientAuth, MAX_FILE_BYTES, RawTls, TlsVersion};
use crate::web::WebError;
use tessera_core::input_limits;

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

pub(super) struct Loader<'a> {
    pub(super) origin: &'a Path,
    pub(super) base_dir: &'a Path,
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
    pub(super) fn tls(
        &self,
        t: RawTls,
        http2: bool,
    ) -> Result<Option<(ServerConfig, ClientAuth)>, WebError> {
        let Some((cert_src, key_src)) = self.cert_and_key_sources(&t)? else {
            return Ok(None);
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
        let provider = Arc::new(self.provider(&t, min)?);
        let (certs, key) = self.certificate_and_key(&t, &cert_src, &key_src, &provider)?;
        let verifier = self.client_verifier(&t, client_auth, &provider)?;

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

    /// Where the certificate and the key come from, `None` when neither is given; the other
    /// settings need both.
    fn cert_and_key_sources(&self, t: &RawTls) -> Result<Option<(Source, Source)>, WebError> {
        let cert_src = self.pick(
            "cert_file",
            t.cert_file.as_deref(),
            "cert",
            t.cert.as_deref(),
        )?;
        let key_src = self.pick("key_file", t.key_file.as_deref(), "key", t.key.as_deref())?;
        match (cert_src, key_src) {
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
                Ok(None)
            }
            (Some(_), None) => Err(self.cfg_err("tls_server_config: key_file (or key) is missing")),
            (None, Some(_)) => {
                Err(self.cfg_err("tls_server_config: cert_file (or cert) is missing"))
            }
            (Some(c), Some(k)) => Ok(Some((c, k))),
        }
    }

    /// The ring provider with the configured cipher suites and curves; with TLS 1.2 allowed
    /// (`min`), a TLS 1.2 cipher suite must be left.
    fn provider(&self, t: &RawTls, min: TlsVersion) -> Result<CryptoProvider, WebError> {
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
        Ok(provider)
    }

    /// The certificate chain and private key, read and checked: a key the provider can use that
    /// matches the certificate.
    fn certificate_and_key(
        &self,
        t: &RawTls,
        cert_src: &Source,
        key_src: &Source,
        provider: &CryptoProvider,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), WebError> {
        let cert_pem = self.read(cert_src, t.cert.as_deref())?;
        let certs = self.certs(cert_src, &cert_pem)?;
        let key_pem = self.read(key_src, t.key.as_deref())?;
        let key = self.key(key_src, &key_pem)?;
        let signing_key = provider
            .key_provider
            .load_private_key(key.clone_key())
            .map_err(|e| self.source_err(key_src, format!("unusable private key: {e}")))?;
        let certified = rustls::sign::CertifiedKey::new(certs.clone(), signing_key);
        match certified.keys_match() {
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                let cert_name = match cert_src {
                    Source::File { path, .. } => path.display().to_string(),
                    Source::Inline { .. } => "cert".to_string(),
                };
                return Err(self.source_err(
                    key_src,
                    format!("private key does not match the certificate in {cert_name}"),
                ));
            }
            Err(e) => {
                return Err(self.source_err(cert_src, format!("unusable certificate: {e}")));
            }
        }
        Ok((certs, key))
    }

    /// The client certificate verifier of the client auth type (`None`: no client
    /// certificate), verifying against `client_ca_file` where the type verifies.
    fn client_verifier(
        &self,
        t: &RawTls,
        client_auth: ClientAuth,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Option<Arc<dyn ClientCertVerifier>>, WebError> {
        let ca_src = t
            .client_ca_file
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|f| Source::File {
                key: "client_ca_file",
                path: self.resolve(f),
            });
        Ok(match (client_auth, &ca_src) {
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
        })
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
