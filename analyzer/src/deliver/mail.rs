//! Mail delivery (`tessera report --mail-to ADDR`): the report as one MIME message per recipient —
//! `multipart/mixed` of a `multipart/alternative` (the plain text, then the HTML page) and the
//! JSON attached as `tessera-report-<until>.json` — with the subject of [`super::content`], sent
//! over SMTP with `lettre` (blocking, rustls with the webpki roots or `--smtp.tls.ca-file`'s CAs,
//! no OpenSSL): STARTTLS required (default, port 587), TLS from the first byte (465) or, only when
//! asked, none (25). The password is read from a file (`--smtp.password-file`), never taken on
//! the command line, and is refused without TLS.
//!
//! Each failure is classified for [`super::retry`]: SMTP 4xx answers, no connection and timeouts
//! are tried again; 5xx answers (a refused recipient or login), TLS failures and client errors
//! are not. What it does not do: render the report (the caller gives the texts) or decide
//! whether a recipient already has it (the sent record, in `super::run`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::{Attachment, Mailbox, MultiPart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, CertificateStore, Tls, TlsParameters};
use lettre::{Message, SmtpTransport, Transport as _};

use super::retry::Failure;
use crate::output::escape::printable;

/// How the SMTP connection is secured (`--smtp.tls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Plain connection upgraded with STARTTLS, which the server must offer.
    StartTls,
    /// TLS from the first byte (SMTPS).
    Tls,
    /// No TLS (a relay on the same host or network); no password is sent this way.
    None,
}

impl TlsMode {
    /// The port of the mode when `--smtp.port` is not given.
    pub fn default_port(self) -> u16 {
        match self {
            TlsMode::StartTls => 587,
            TlsMode::Tls => 465,
            TlsMode::None => 25,
        }
    }
}

/// What the mail flags say.
#[derive(Debug, Clone)]
pub struct MailOptions {
    pub host: String,
    pub port: Option<u16>,
    pub tls: TlsMode,
    /// PEM CA certificates that replace the built-in roots.
    pub ca_file: Option<PathBuf>,
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    pub from: String,
    pub to: Vec<String>,
    pub timeout: Duration,
}

/// What the mail flags get wrong.
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("bad {flag} {value:?}: {reason}")]
    Address {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("bad --smtp.host {0:?}: expected a host name or address")]
    Host(String),
    #[error("{flag} {path}: {reason}")]
    File {
        flag: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error(
        "--smtp.password-file with --smtp.tls none would send the password in clear: use starttls or tls"
    )]
    PasswordInClear,
    #[error("--smtp.user and --smtp.password-file go together")]
    HalfCredentials,
    #[error("--smtp.tls.ca-file needs --smtp.tls starttls or tls")]
    CaWithoutTls,
    #[error("building the message: {0}")]
    Message(String),
}

/// Largest password or CA file read.
const MAX_SECRET_FILE: u64 = 1 << 20;

/// A configured SMTP sender and its recipients.
pub struct Mailer {
    transport: SmtpTransport,
    from: Mailbox,
    /// Each recipient of the whole report as given and parsed.
    pub to: Vec<(String, Mailbox)>,
    /// The teams' owners (`--mail-owners`), each with the teams whose part of the report they
    /// get ([`super::team`]); none of them is in `to`.
    pub owners: Vec<OwnerMail>,
    /// `host:port (tls)`, for messages.
    pub server: String,
}

fn read_file(flag: &'static str, path: &Path) -> Result<String, MailError> {
    tessera_core::input_limits::read_to_string(path, MAX_SECRET_FILE).map_err(|e| MailError::File {
        flag,
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn mailbox(flag: &'static str, value: &str) -> Result<Mailbox, MailError> {
    value
        .parse()
        .map_err(|e: lettre::address::AddressError| MailError::Address {
            flag,
            value: printable(value).into_owned(),
            reason: format!("{e}; expected name@domain or \"Name <name@domain>\""),
        })
}

/// An owner's mail: the address as given and parsed, and the teams it owns.
#[derive(Debug, Clone)]
pub struct OwnerMail {
    pub given: String,
    pub mailbox: Mailbox,
    pub teams: Vec<String>,
}

impl Mailer {
    /// Adds `team`'s owner (`--mail-owners`) as the recipient of that team's part of the report:
    /// `Ok(false)` when the address already gets the whole report (`--mail-to`), an error when it
    /// is not a mail address; an owner of several teams gets one mail with all of them.
    pub fn add_owner(&mut self, addr: &str, team: &str) -> Result<bool, MailError> {
        if self.to.iter().any(|(a, _)| a == addr) {
            return Ok(false);
        }
        let mb = mailbox("a team's owner", addr)?;
        if self.to.iter().any(|(_, m)| m.email == mb.email) {
            return Ok(false);
        }
        match self.owners.iter_mut().find(|o| o.mailbox.email == mb.email) {
            Some(o) if o.teams.iter().any(|t| t == team) => {}
            Some(o) => o.teams.push(team.to_string()),
            None => self.owners.push(OwnerMail {
                given: addr.to_string(),
                mailbox: mb,
                teams: vec![team.to_string()],
            }),
        }
        Ok(true)
    }

    /// Checks every flag and reads the files; nothing is contacted.
    pub fn new(opts: &MailOptions) -> Result<Mailer, MailError> {
        let from = mailbox("--mail-from", &opts.from)?;
        let to = opts
            .to
            .iter()
            .map(|t| Ok((t.clone(), mailbox("--mail-to", t)?)))
            .collect::<Result<Vec<_>, MailError>>()?;
        let host = opts.host.trim();
        if host.is_empty()
            || host
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '/')
        {
            return Err(MailError::Host(printable(&opts.host).into_owned()));
        }
        let port = opts.port.unwrap_or(opts.tls.default_port());
        let mut b = SmtpTransport::builder_dangerous(host)
            .port(port)
            .timeout(Some(opts.timeout));
        match (&opts.user, &opts.password_file) {
            (Some(user), Some(p)) => {
                if opts.tls == TlsMode::None {
                    return Err(MailError::PasswordInClear);
                }
                let password = read_file("--smtp.password-file", p)?;
                let password = password.trim_end_matches(['\r', '\n']).to_string();
                b = b.credentials(Credentials::new(user.clone(), password));
            }
            (None, None) => {}
            _ => return Err(MailError::HalfCredentials),
        }
        if opts.tls == TlsMode::None {
            if opts.ca_file.is_some() {
                return Err(MailError::CaWithoutTls);
            }
        } else {
            let params = tls_parameters(host, opts.ca_file.as_deref())?;
            b = b.tls(match opts.tls {
                TlsMode::Tls => Tls::Wrapper(params),
                _ => Tls::Required(params),
            });
        }
        let mode = match opts.tls {
            TlsMode::StartTls => "STARTTLS",
            TlsMode::Tls => "TLS",
            TlsMode::None => "no TLS",
        };
        Ok(Mailer {
            transport: b.build(),
            from,
            to,
            owners: Vec::new(),
            server: printable(&format!("{host}:{port} ({mode})")).into_owned(),
        })
    }

    /// The message to `to`: subject, the plain text and the HTML as alternatives, the JSON
    /// attached as `json_name`.
    pub fn message(
        &self,
        to: &Mailbox,
        subject: &str,
        text: &str,
        html: &str,
        json: &str,
        json_name: &str,
    ) -> Result<Message, MailError> {
        Message::builder()
            .from(self.from.clone())
            .to(to.clone())
            .subject(subject)
            .date_now()
            .multipart(
                MultiPart::mixed()
                    .multipart(MultiPart::alternative_plain_html(
                        text.to_string(),
                        html.to_string(),
                    ))
                    .singlepart(
                        Attachment::new(json_name.to_string()).body(
                            json.to_string(),
                            ContentType::parse("application/json")
                                .map_err(|e| MailError::Message(e.to_string()))?,
                        ),
                    ),
            )
            .map_err(|e| MailError::Message(e.to_string()))
    }

    /// One SMTP transaction of `message`; a failure says whether another attempt may mend it.
    pub fn send(&self, message: &Message) -> Result<(), Failure> {
        self.transport.send(message).map(|_| ()).map_err(|e| {
            let reason = printable(&error_chain(&e)).into_owned();
            if e.is_permanent() || e.is_tls() || e.is_client() {
                Failure::Permanent(reason)
            } else {
                Failure::Transient(reason)
            }
        })
    }
}

/// An error with its sources, "a: b: c".
fn error_chain(e: &lettre::transport::smtp::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// rustls parameters for `host`: the webpki roots, or only the CAs of `ca_file`.
fn tls_parameters(host: &str, ca_file: Option<&Path>) -> Result<TlsParameters, MailError> {
    let mut b = TlsParameters::builder(host.to_string());
    if let Some(p) = ca_file {
        let pem = read_file("--smtp.tls.ca-file", p)?;
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(MailError::File {
                flag: "--smtp.tls.ca-file",
                path: p.to_path_buf(),
                reason: "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into(),
            });
        }
        let cert = Certificate::from_pem(pem.as_bytes()).map_err(|e| MailError::File {
            flag: "--smtp.tls.ca-file",
            path: p.to_path_buf(),
            reason: format!("not PEM certificates: {e}"),
        })?;
        b = b
            .certificate_store(CertificateStore::None)
            .add_root_certificate(cert);
    } else {
        b = b.certificate_store(CertificateStore::WebpkiRoots);
    }
    b.build_rustls().map_err(|e| MailError::File {
        flag: "--smtp.tls.ca-file",
        path: ca_file.map(Path::to_path_buf).unwrap_or_default(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> MailOptions {
        MailOptions {
            host: "smtp.example".into(),
            port: None,
            tls: TlsMode::StartTls,
            ca_file: None,
            user: None,
            password_file: None,
            from: "tessera@example.com".into(),
            to: vec!["ops@example.com".into(), "Lead <lead@example.com>".into()],
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn flags_are_checked_before_anything_is_contacted() {
        let m = Mailer::new(&opts()).unwrap();
        assert_eq!(m.server, "smtp.example:587 (STARTTLS)");
        assert_eq!(m.to.len(), 2);
        let bad = MailOptions {
            to: vec!["not an address".into()],
            ..opts()
        };
        let e = Mailer::new(&bad).err().unwrap().to_string();
        assert!(
            e.contains("--mail-to") && e.contains("not an address"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let pw = dir.path().join("pw");
        std::fs::write(&pw, "hunter2\n").unwrap();
        let clear = MailOptions {
            tls: TlsMode::None,
            user: Some("u".into()),
            password_file: Some(pw.clone()),
            ..opts()
        };
        assert!(matches!(
            Mailer::new(&clear),
            Err(MailError::PasswordInClear)
        ));
        let half = MailOptions {
            user: Some("u".into()),
            ..opts()
        };
        assert!(matches!(
            Mailer::new(&half),
            Err(MailError::HalfCredentials)
        ));
        let missing = MailOptions {
            user: Some("u".into()),
            password_file: Some(dir.path().join("nope")),
            ..opts()
        };
        let e = Mailer::new(&missing).err().unwrap().to_string();
        assert!(
            e.contains("--smtp.password-file") && e.contains("nope"),
            "{e}"
        );
        let not_pem = dir.path().join("ca.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let e = Mailer::new(&MailOptions {
            ca_file: Some(not_pem),
            ..opts()
        })
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("no PEM certificate"), "{e}");
    }
}
