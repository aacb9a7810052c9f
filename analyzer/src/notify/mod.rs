//! `tessera notify` (`docs/notify.md`): the advisor's findings sent to Alertmanager through its
//! API v2, one alert per finding, so that owners hear of them the way they hear of their other
//! alerts.
//!
//! The workflow ([`run`]) over an [`Analysis`] the caller made (the same advisor run as
//! `tessera analyze`):
//! 1. build every alert ([`alerts::alerts`]: labels stable across runs, values from data escaped
//!    and cut) — before anything is sent;
//! 2. `GET /api/v2/alerts` filtered on `source="tessera"` and the `--label`s: tessera's alerts
//!    that Alertmanager holds. If this fails, nothing is sent;
//! 3. the alerts to resolve: those of the detectors that ran whose label set is not among this
//!    run's (their finding is gone, or its severity or names changed), re-sent with
//!    `endsAt` = now;
//! 4. one `POST /api/v2/alerts` with the firing alerts (`endsAt` = now + TTL) and the
//!    resolutions together, so that a run is applied whole or (on a refused POST) not at all.
//!    Alertmanager deduplicates by label set, so a second run renews the same alerts.
//!
//! `--dry-run` stops after step 1 and contacts nothing. The module does not read sources or run
//! detectors (the caller does, through `ingest` and `advisor`).

pub mod alerts;
pub mod client;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

pub use alerts::{Alert, AlertOptions};
pub use client::{Client, ClientOptions};

use crate::advisor::Analysis;
use crate::ingest::fmt_ms;

/// Errors of `tessera notify`.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("bad --label {spec:?}: {reason}")]
    Label { spec: String, reason: String },
    #[error(
        "bad --generator-url {0:?}: expected a URL with a scheme (https://…) and no spaces; {{id}} and {{detector}} are replaced"
    )]
    GeneratorUrl(String),
    #[error(
        "bad --alertmanager.url {0:?}: expected http://HOST[:PORT][/PREFIX] or https://…, without query or fragment"
    )]
    Url(String),
    #[error("cannot read the {what} {}: {reason}", path.display())]
    Auth {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// Reading tessera's alerts failed: nothing was sent.
    #[error(
        "reading tessera's alerts from {url} failed: {reason}; nothing was sent (no alert fired or resolved)"
    )]
    Get { url: String, reason: String },
    /// The one POST failed.
    #[error(
        "sending {firing} firing and {resolved} resolved alert(s) to {url} failed: {reason}; {}",
        if *maybe_applied {
            "Alertmanager may have stored some or all of them; running notify again is safe (alerts are deduplicated by their labels)"
        } else {
            "nothing was stored"
        }
    )]
    Post {
        url: String,
        firing: usize,
        resolved: usize,
        reason: String,
        /// Whether Alertmanager may have stored part of the POST (a timeout after sending, a
        /// 400 or 5xx answer).
        maybe_applied: bool,
    },
}

impl NotifyError {
    /// Whether Alertmanager's state is unknown after this error (the POST may have been applied
    /// in part).
    pub fn maybe_applied(&self) -> bool {
        matches!(
            self,
            NotifyError::Post {
                maybe_applied: true,
                ..
            }
        )
    }
}

/// What [`run`] is asked to do.
#[derive(Debug, Clone)]
pub struct NotifyRequest {
    pub alerts: AlertOptions,
    pub client: ClientOptions,
    /// Build and return the alerts; contact nothing.
    pub dry_run: bool,
}

/// What a run did (or, dry, would do).
#[derive(Debug, Default)]
pub struct Outcome {
    /// The firing alerts sent (or that would be sent).
    pub firing: Vec<Alert>,
    /// How many of them Alertmanager already held (renewed, not new).
    pub renewed: usize,
    /// The resolutions sent.
    pub resolved: Vec<Alert>,
    /// Whether the POST was sent (not on a dry run, nor when there was nothing to send).
    pub sent: bool,
}

impl Outcome {
    /// The alerts as one POST body: firing, then resolved.
    pub fn body(&self) -> Vec<Alert> {
        self.firing.iter().chain(&self.resolved).cloned().collect()
    }
}

/// The label filter that finds tessera's alerts: `source="tessera"` and the `--label`s.
pub fn filter(extra: &BTreeMap<String, String>) -> Vec<(String, String)> {
    std::iter::once((
        alerts::SOURCE_LABEL.0.to_string(),
        alerts::SOURCE_LABEL.1.to_string(),
    ))
    .chain(extra.iter().map(|(k, v)| (k.clone(), v.clone())))
    .collect()
}

/// The resolutions of `held` (tessera's alerts in Alertmanager): those this configuration could
/// have sent — of a detector that ran, with no label but tessera's and `extra`'s (another
/// tessera's alerts with another `--label` are left alone) — whose labels are not among
/// `firing`'s, re-sent with `endsAt` = now (their `startsAt` and annotations kept).
pub fn resolutions(
    held: &[Alert],
    firing: &[Alert],
    detectors: &BTreeSet<&str>,
    extra: &BTreeMap<String, String>,
    now_ms: i64,
) -> Vec<Alert> {
    let live: BTreeSet<&BTreeMap<String, String>> = firing.iter().map(|a| &a.labels).collect();
    let ours =
        |name: &String| alerts::TESSERA_LABELS.contains(&name.as_str()) || extra.contains_key(name);
    let now = fmt_ms(now_ms);
    let mut out: Vec<Alert> = held
        .iter()
        .filter(|a| {
            a.labels
                .get("detector")
                .is_some_and(|d| detectors.contains(d.as_str()))
                && a.labels.keys().all(ours)
                && !live.contains(&a.labels)
        })
        .map(|a| Alert {
            labels: a.labels.clone(),
            annotations: a.annotations.clone(),
            starts_at: if a.starts_at.is_empty() || a.starts_at > now {
                now.clone()
            } else {
                a.starts_at.clone()
            },
            ends_at: now.clone(),
            generator_url: a.generator_url.clone(),
        })
        .collect();
    out.sort_by(|a, b| a.labels.cmp(&b.labels));
    out.dedup_by(|a, b| a.labels == b.labels);
    out
}

/// Sends `analysis`'s findings as alerts and resolves tessera's alerts that are no longer
/// findings (the module's steps 1–4). `now_ms`: the time of the run (unix ms).
pub fn run(analysis: &Analysis, req: &NotifyRequest, now_ms: i64) -> Result<Outcome, NotifyError> {
    let firing = alerts::alerts(analysis, &req.alerts, now_ms);
    if req.dry_run {
        return Ok(Outcome {
            firing,
            ..Outcome::default()
        });
    }
    let client = Client::new(&req.client)?;
    let held = client.tessera_alerts(&filter(&req.alerts.extra_labels))?;
    let detectors: BTreeSet<&str> = analysis.detectors.iter().map(|d| d.id).collect();
    let resolved = resolutions(&held, &firing, &detectors, &req.alerts.extra_labels, now_ms);
    let held_labels: BTreeSet<&BTreeMap<String, String>> = held.iter().map(|a| &a.labels).collect();
    let renewed = firing
        .iter()
        .filter(|a| held_labels.contains(&a.labels))
        .count();
    let mut outcome = Outcome {
        firing,
        renewed,
        resolved,
        sent: false,
    };
    let body = outcome.body();
    if !body.is_empty() {
        client.post(&body, outcome.firing.len())?;
        outcome.sent = true;
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(labels: &[(&str, &str)], starts: &str) -> Alert {
        Alert {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations: BTreeMap::from([("summary".to_string(), "s".to_string())]),
            starts_at: starts.into(),
            ends_at: "2030-01-01T00:00:00.000Z".into(),
            generator_url: String::new(),
        }
    }

    #[test]
    fn only_gone_alerts_of_detectors_that_ran_are_resolved() {
        let now = 1_800_000_000_000;
        let live = alert(&[("detector", "idle_loaded"), ("finding_id", "a")], "");
        let gone = alert(
            &[("detector", "idle_loaded"), ("finding_id", "b")],
            "2020-01-01T00:00:00.000Z",
        );
        let other_detector = alert(&[("detector", "consolidation"), ("finding_id", "c")], "");
        let no_detector = alert(&[("finding_id", "d")], "");
        let other_tessera = alert(
            &[
                ("detector", "idle_loaded"),
                ("finding_id", "e"),
                ("cluster", "b"),
            ],
            "",
        );
        let changed = alert(
            &[
                ("detector", "idle_loaded"),
                ("finding_id", "a"),
                ("severity", "info"),
            ],
            "2999-01-01T00:00:00.000Z",
        );
        let held = vec![
            live.clone(),
            gone.clone(),
            other_detector,
            no_detector,
            other_tessera,
            changed.clone(),
        ];
        let ran = BTreeSet::from(["idle_loaded"]);
        let r = resolutions(
            &held,
            std::slice::from_ref(&live),
            &ran,
            &BTreeMap::new(),
            now,
        );
        let ids: Vec<&str> = r.iter().map(|a| a.labels["finding_id"].as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        let now_s = fmt_ms(now);
        assert!(r.iter().all(|a| a.ends_at == now_s));
        // startsAt kept, unless it is after now (a clock ahead of ours).
        assert_eq!(r[1].starts_at, gone.starts_at);
        assert_eq!(r[0].labels, changed.labels);
        assert_eq!(r[0].starts_at, now_s);
        assert_eq!(r[1].annotations["summary"], "s");
        // With --label cluster=b, the other tessera's alert is ours.
        let extra = BTreeMap::from([("cluster".to_string(), "b".to_string())]);
        let r = resolutions(&held, &[live], &ran, &extra, now);
        assert_eq!(r.len(), 3);
    }
}
