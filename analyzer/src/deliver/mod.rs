//! Delivery of the weekly report (`tessera report --mail-to … --webhook.url-file …`,
//! docs/report.md "Delivering the report"): [`run`] sends a [`Report`] already made and rendered
//! to every target — each mail recipient its own message (`mail`), each team's owner
//! (`--mail-owners`) a message with their teams' part of the report (`team`), each webhook its chat payload
//! (`webhook`, Slack or Teams) — tries each again on failures that may pass (`retry`), and keeps
//! the sent record (`sent`) so that a re-run of the same period sends only what was not
//! delivered: a target already recorded for the report's period (`content::period_key`) is
//! skipped, a delivery
//! is recorded as soon as it succeeded, a failed one never.
//!
//! What it does not do: make or render the report (the caller gives the HTML and the JSON), read
//! flags, or print (the caller prints each [`Delivered`]). Secrets (the SMTP password, webhook
//! URLs) come in through files read by `mail::Mailer::new` and `webhook::Webhook::from_file` and
//! never appear in a message or in the record.

pub mod content;
pub mod mail;
pub mod retry;
pub mod sent;
pub mod team;
pub mod webhook;

use std::path::Path;
use std::time::Duration;

use crate::report::Report;

/// What a delivery run could not do at all.
#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error(transparent)]
    Sent(#[from] sent::SentError),
    #[error(transparent)]
    Mail(#[from] mail::MailError),
    #[error("a team's part of the report: {0}")]
    Json(#[from] crate::output::json::JsonError),
}

impl DeliverError {
    /// Whether something was delivered before the run stopped (a record that could not be
    /// written after a delivery).
    pub fn partly_done(&self) -> bool {
        matches!(self, DeliverError::Sent(sent::SentError::Write { .. }))
    }
}

/// The targets and how to reach them.
pub struct DeliveryRequest<'a> {
    pub mailer: Option<&'a mail::Mailer>,
    pub webhooks: &'a [webhook::Webhook],
    /// The sent record's file.
    pub record: &'a Path,
    pub retry: retry::Retry,
    /// Timeout of each webhook POST (the mailer has its own).
    pub timeout: Duration,
    /// `--link`, `{file}` not yet replaced.
    pub link: Option<&'a str>,
}

/// How one target fared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Sent {
        attempts: u32,
    },
    /// Recorded as delivered for this period by an earlier run, at `at`.
    AlreadySent {
        at: String,
    },
    Failed {
        reason: String,
        attempts: u32,
    },
}

/// One target's outcome; `target` is printable and holds no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub target: String,
    pub outcome: Outcome,
}

/// The plain-text alternative of the mail: the link, then the report in Markdown.
pub fn plain_text(r: &Report, link: Option<&str>) -> String {
    let md = crate::report::render::render_markdown(r);
    match link {
        Some(l) => format!("The report: {l}\n\n{md}"),
        None => md,
    }
}

/// Delivers `r` (its page `html`, its document `json`) to every target of `req` not yet recorded
/// for its period; `now` (RFC 3339) is what the record says. The outcomes in order: mail
/// recipients, the teams' owners (their part: [`team::report`], rendered here), then webhooks.
pub fn run(
    r: &Report,
    html: &str,
    json: &str,
    req: &DeliveryRequest,
    now: &str,
) -> Result<Vec<Delivered>, DeliverError> {
    let mut record = sent::SentRecord::load(req.record)?;
    let link = req.link.map(|l| content::link(l, r));
    let period = content::period_key(r);
    let mut out = Vec::new();
    let mut deliver = |key: String,
                       target: String,
                       send: &mut dyn FnMut() -> Result<(), retry::Failure>|
     -> Result<(), DeliverError> {
        if let Some(e) = record.find(&period, &key) {
            out.push(Delivered {
                target,
                outcome: Outcome::AlreadySent { at: e.at.clone() },
            });
            return Ok(());
        }
        let outcome = match retry::run(req.retry, &mut *send) {
            Ok(((), attempts)) => {
                let entry = sent::SentEntry {
                    period: period.clone(),
                    from: r.from.clone(),
                    until: r.until.clone(),
                    target: key,
                    at: now.to_string(),
                };
                record.add_and_save(entry, req.record)?;
                Outcome::Sent { attempts }
            }
            Err(f) => Outcome::Failed {
                reason: f.reason,
                attempts: f.attempts,
            },
        };
        out.push(Delivered { target, outcome });
        Ok(())
    };
    if let Some(m) = req.mailer {
        let subject = content::subject(r);
        let text = plain_text(r, link.as_deref());
        let json_name = content::json_name(r);
        for (given, to) in &m.to {
            let message = m.message(to, &subject, &text, html, json, &json_name)?;
            let key = format!("mail:{}", to.email.to_string().to_lowercase());
            let target = format!(
                "mail to {} via {}",
                crate::output::escape::printable(given),
                m.server
            );
            deliver(key, target, &mut || m.send(&message))?;
        }
        for o in &m.owners {
            let tr = team::report(r, &o.teams);
            let text = team::plain_text(&tr, &o.teams, link.as_deref());
            let tjson = crate::output::json::document(&tr)?;
            let page = crate::report::html::render_html(&tr);
            let subject = team::subject(&tr, &o.teams);
            let message = m.message(&o.mailbox, &subject, &text, &page, &tjson, &json_name)?;
            let key = format!("mail:{}", o.mailbox.email.to_string().to_lowercase());
            let target = format!(
                "mail to {} (team {}) via {}",
                crate::output::escape::printable(&o.given),
                team::names(&o.teams),
                m.server
            );
            deliver(key, target, &mut || m.send(&message))?;
        }
    }
    for w in req.webhooks {
        let body = w.payload(r, link.as_deref());
        deliver(w.key(), w.display(), &mut || w.post(&body, req.timeout))?;
    }
    Ok(out)
}
