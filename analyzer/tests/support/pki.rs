//! A private PKI in a temporary folder, made with rcgen as the exporter's web tests make theirs:
//! `ca.crt` (a CA no system trusts), `server.crt`/`server.key` (127.0.0.1 and localhost, signed
//! by the CA), `client.crt`/`client.key` (a client certificate signed by the CA) and
//! `rogue.crt`/`rogue.key` (a self-signed client certificate).

#![allow(dead_code)] // each test module uses part of it

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

pub struct Pki {
    pub dir: tempfile::TempDir,
}

impl Pki {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The path of `name` as a string (for flags).
    pub fn p(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |n: &str, text: &str| std::fs::write(dir.path().join(n), text).expect("write");

        let ca_key = KeyPair::generate().expect("ca key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "tessera test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
        write("ca.crt", &ca_cert.pem());
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |names: Vec<String>, eku: ExtendedKeyUsagePurpose, cn: &str| {
            let mut params = CertificateParams::new(names).expect("params");
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![eku];
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params
        };
        let server_key = KeyPair::generate().expect("server key");
        let server_cert = leaf(
            vec!["localhost".into(), "127.0.0.1".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            "localhost",
        )
        .signed_by(&server_key, &issuer)
        .expect("server cert");
        write("server.crt", &server_cert.pem());
        write("server.key", &server_key.serialize_pem());

        let client_key = KeyPair::generate().expect("client key");
        let client_cert = leaf(
            vec!["client.test".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            "client",
        )
        .signed_by(&client_key, &issuer)
        .expect("client cert");
        write("client.crt", &client_cert.pem());
        write("client.key", &client_key.serialize_pem());

        let rogue_key = KeyPair::generate().expect("rogue key");
        let rogue_cert = leaf(
            vec!["client.test".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            "client",
        )
        .self_signed(&rogue_key)
        .expect("rogue cert");
        write("rogue.crt", &rogue_cert.pem());
        write("rogue.key", &rogue_key.serialize_pem());
        Pki { dir }
    }

    /// A ureq agent of the tests that trusts the CA and presents the client certificate.
    pub fn client_agent(&self) -> ureq::Agent {
        use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};
        let read = |n: &str| std::fs::read(self.path(n)).expect("read pki file");
        let ca = Certificate::from_pem(&read("ca.crt")).expect("ca pem");
        let cert = Certificate::from_pem(&read("client.crt")).expect("client pem");
        let key = PrivateKey::from_pem(&read("client.key")).expect("key pem");
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&[ca]))
            .client_cert(Some(ClientCert::new_with_certs(&[cert], key)))
            .build();
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(30)))
            .tls_config(tls)
            .build()
            .into()
    }
}
