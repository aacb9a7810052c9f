//! Chat delivery (`tessera report --webhook.url-file FILE`): the report's title, summary, headline
//! saving, top actions and link as one JSON POST to an incoming webhook — Slack's (`text` for
//! notifications and for Mattermost, which reads the same payload, and Block Kit `blocks` that
//! Slack shows instead) or a Microsoft Teams Workflows webhook (an Adaptive Card 1.4 in a
//! `message` envelope); docs/report.md, "Delivering the report", has both payloads.
//!
//! The URL is a secret (whoever has it can post): it is read from a file, never taken on the
//! command line, never printed (only its host is) and never recorded (`sent` keys it by a hash).
//! One blocking `ureq` client per POST with the one timeout, redirects not followed (a 3xx is a
//! refusal), answers classified for [`super::retry`]: no connection, a timeout, 429 and 5xx are
//! tried again, any other answer but 2xx is a refusal. What it does not do: decide whether the
//! report was already posted (`super::run` asks the sent record), or read the report itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::content;
use super::retry::Failure;
use crate::output::escape::printable;
use crate::report::Report;

/// Which payload a webhook gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Slack's incoming webhooks (and Mattermost's, which accept the same).
    Slack,
    /// Microsoft Teams through a Workflows "post to a channel when a webhook request is
    /// received" flow.
    Teams,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Slack => "slack",
            Format::Teams => "teams",
        }
    }

    /// The format a URL's host implies: Teams for Power Automate's hosts (`*.logic.azure.com`,
    /// `*.powerplatform.com`, `*.powerautomate.com`), Slack for any other.
    pub fn by_host(host: &str) -> Format {
        let host = host.split(':').next().unwrap_or(host).to_ascii_lowercase();
        let teams = [
            ".logic.azure.com",
            ".powerplatform.com",
            ".powerautomate.com",
        ];
        if teams.iter().any(|t| host.ends_with(t)) {
            Format::Teams
        } else {
            Format::Slack
        }
    }
}

/// What a webhook could not be made from.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("--webhook.url-file {path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error(
        "--webhook.url-file {path}: expected one http:// or https:// URL with a host and no user or password in it ({reason})"
    )]
    Url { path: PathBuf, reason: &'static str },
    #[error(
        "bad --link {0:?}: expected an http:// or https:// URL without spaces, '|', '<' or '>'"
    )]
    Link(String),
}

/// One webhook: its URL (secret), where it came from, and its payload format.
#[derive(Clone)]
pub struct Webhook {
    url: String,
    host: String,
    pub file: PathBuf,
    pub format: Format,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display())
    }
}

/// Largest URL file read.
const MAX_URL_FILE: u64 = 8 << 10;

/// `scheme://host[:port]` of an http(s) URL without userinfo, or why not.
fn check_url(url: &str) -> Result<String, &'static str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or("not http:// or https://")?;
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a space or control character in it");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err("a user or password before '@'");
    }
    if authority.is_empty() {
        return Err("no host");
    }
    Ok(authority.to_string())
}

/// Checks `--link`: http(s), and nothing that would break Slack's `<url|label>`.
pub fn check_link(link: &str) -> Result<(), WebhookError> {
    if check_url(link).is_err() || link.contains(['|', '<', '>']) {
        return Err(WebhookError::Link(printable(link).into_owned()));
    }
    Ok(())
}

impl Webhook {
    /// The webhook whose URL `path` holds (surrounding whitespace ignored), in `format`, or the
    /// format its host implies.
    pub fn from_file(path: &Path, format: Option<Format>) -> Result<Webhook, WebhookError> {
        let text = tessera_core::input_limits::read_to_string(path, MAX_URL_FILE).map_err(|e| {
            WebhookError::File {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        })?;
        let url = text.trim().to_string();
        let host = check_url(&url).map_err(|reason| WebhookError::Url {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(Webhook {
            format: format.unwrap_or_else(|| Format::by_host(&host)),
            url,
            host,
            file: path.to_path_buf(),
        })
    }

    /// The sent record's key: the format and a hash of the URL.
    pub fn key(&self) -> String {
        format!("{}:{}", self.format.name(), super::sent::fnv1a64(&self.url))
    }

    /// How messages name it: the format, the host and the file, never the URL's path.
    pub fn display(&self) -> String {
        printable(&format!(
            "{} webhook at {} (URL from {})",
            self.format.name(),
            self.host,
            self.file.display()
        ))
        .into_owned()
    }

    /// The payload of `r` for this webhook's format.
    pub fn payload(&self, r: &Report, link: Option<&str>) -> Value {
        match self.format {
            Format::Slack => slack_payload(r, link),
            Format::Teams => teams_payload(r, link),
        }
    }

    /// One POST of `body`; a failure says whether another attempt may mend it.
    pub fn post(&self, body: &Value, timeout: Duration) -> Result<(), Failure> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        let resp = agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .send(body.to_string());
        let mut resp = match resp {
            Ok(r) => r,
            Err(e) => return Err(transport_failure(&e)),
        };
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(16 << 10)
            .read_to_string()
            .unwrap_or_default();
        let snippet: String = printable(text.trim()).chars().take(300).collect();
        match status {
            200..=299 => Ok(()),
            300..=399 => Err(Failure::Permanent(format!(
                "HTTP {status}, a redirect: tessera does not follow redirects; put the address that answers in {}",
                self.file.display()
            ))),
            401 | 403 | 404 | 410 => Err(Failure::Permanent(format!(
                "HTTP {status} {snippet}: the webhook refused the post (a revoked or mistyped URL in {}?)",
                self.file.display()
            ))),
            429 | 500..=599 => Err(Failure::Transient(format!("HTTP {status} {snippet}"))),
            _ => Err(Failure::Permanent(format!(
                "HTTP {status} {snippet}: the webhook refused the payload"
            ))),
        }
    }
}

/// A ureq error in words that never carry the URL, and whether to try again.
fn transport_failure(e: &ureq::Error) -> Failure {
    match e {
        ureq::Error::Timeout(t) => Failure::Transient(format!("timed out ({t})")),
        ureq::Error::ConnectionFailed => Failure::Transient("no connection".into()),
        ureq::Error::HostNotFound => Failure::Transient("host not found".into()),
        ureq::Error::Io(io) => Failure::Transient(io.to_string()),
        ureq::Error::Tls(m) => Failure::Permanent(format!("TLS: {m}")),
        ureq::Error::Rustls(e) => Failure::Permanent(format!("TLS: {e}")),
        ureq::Error::BadUri(_) => Failure::Permanent("not a valid URL".into()),
        other => Failure::Transient(
            printable(&other.to_string())
                .chars()
                .take(300)
                .collect::<String>(),
        ),
    }
}

/// Slack's mrkdwn escapes (`&`, `<`, `>`); control characters but line breaks escaped too.
fn mrkdwn(s: &str) -> String {
    crate::output::escape::printable_lines(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `s` cut to `n` characters, "…" marking the cut.
fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n - 1).collect();
    out.push('…');
    out
}

/// The numbered top actions (or that there is nothing to act on), one per line.
fn action_lines(r: &Report) -> Vec<String> {
    let top = content::top_actions(r, content::TOP_ACTIONS);
    if top.is_empty() {
        return vec!["Nothing to act on in this period.".into()];
    }
    let mut lines = top;
    if r.actions.len() > content::TOP_ACTIONS {
        lines.push(format!(
            "… and {} more in the report.",
            r.actions.len() - content::TOP_ACTIONS
        ));
    }
    lines
}

/// Slack (and Mattermost): `text` (the whole message, the notification and Mattermost's body)
/// and `blocks` (header, summary, top actions, link).
pub fn slack_payload(r: &Report, link: Option<&str>) -> Value {
    let title = content::subject(r);
    let summary = format!("{}\n{}", content::summary(r), content::headline_saving(r));
    let actions = action_lines(r);
    let link_text = link.map(|l| format!("<{l}|Open the report>"));
    let mut text = vec![mrkdwn(&title), mrkdwn(&summary), "Top actions:".into()];
    text.extend(actions.iter().map(|a| mrkdwn(a)));
    text.extend(link_text.clone());
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": cut(&title, 150)}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": cut(&mrkdwn(&summary), 3000)}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": cut(&format!(
            "*Top actions*\n{}",
            actions.iter().map(|a| mrkdwn(a)).collect::<Vec<_>>().join("\n")
        ), 3000)}}),
    ];
    if let Some(l) = link_text {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": l}}));
    }
    json!({"text": text.join("\n"), "blocks": blocks})
}

/// Teams (Workflows): an Adaptive Card 1.4 — the title, the summary, the headline saving, the
/// top actions, and an `Action.OpenUrl` to the report — in a `message` envelope.
pub fn teams_payload(r: &Report, link: Option<&str>) -> Value {
    let block = |text: String, bold: bool| {
        let mut b = json!({"type": "TextBlock", "text": text, "wrap": true});
        if bold {
            b["weight"] = json!("Bolder");
        }
        b
    };
    let mut body = vec![
        json!({"type": "TextBlock", "text": content::subject(r), "size": "Large", "weight": "Bolder", "wrap": true}),
        block(content::summary(r), false),
        block(content::headline_saving(r), true),
        block("Top actions".into(), true),
    ];
    body.extend(action_lines(r).into_iter().map(|a| block(a, false)));
    let mut card = json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
    });
    if let Some(l) = link {
        card["actions"] = json!([{"type": "Action.OpenUrl", "title": "Open the report", "url": l}]);
    }
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": card,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_follows_the_host_unless_given() {
        assert_eq!(
            Format::by_host("prod-12.westeurope.logic.azure.com:443"),
            Format::Teams
        );
        assert_eq!(
            Format::by_host("default1234.ab.environment.api.powerplatform.com"),
            Format::Teams
        );
        assert_eq!(Format::by_host("hooks.slack.com"), Format::Slack);
        assert_eq!(Format::by_host("chat.example.org"), Format::Slack);
    }

    #[test]
    fn urls_with_credentials_or_other_schemes_are_refused_without_echoing_them() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("url");
        for (text, why) in [
            ("https://u:secret@hooks.example/x", "user or password"),
            ("ftp://hooks.example/x", "not http"),
            ("https:///x", "no host"),
            ("https://hooks.example/a b", "space"),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = Webhook::from_file(&p, None).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
            assert!(!e.contains("secret") && !e.contains("/x"), "{e}");
        }
        std::fs::write(&p, "  https://hooks.slack.com/services/T0/B0/XYZ\n").unwrap();
        let w = Webhook::from_file(&p, None).unwrap();
        assert_eq!(w.format, Format::Slack);
        assert!(!w.display().contains("XYZ") && !format!("{w:?}").contains("XYZ"));
        assert!(w.key().starts_with("slack:") && !w.key().contains("XYZ"));
    }

    #[test]
    fn links_that_would_break_slack_markup_are_refused() {
        assert!(check_link("https://reports.example/tessera/{file}").is_ok());
        assert!(check_link("https://reports.example/a|b").is_err());
        assert!(check_link("reports.example").is_err());
    }

    #[test]
    fn mrkdwn_escapes_its_three_characters_and_cut_marks_the_cut() {
        assert_eq!(mrkdwn("a<b>&c\nd\u{7}"), "a&lt;b&gt;&amp;c\nd\\u{7}");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
    }
}
