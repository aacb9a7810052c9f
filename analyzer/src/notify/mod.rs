//! `tessera notify` (`docs/notify.md`): the advisor's findings sent to Alertmanager through its
//! API v2, one alert per finding, so that owners hear of them the way they hear of their other
//! alerts.
//!
//! The workflow ([`run`]) over an [`Analysis`] the caller made (the same advisor run as
//! `tessera analyze`):
//! 1. build every alert ([`alerts::alerts`]: labels stable across runs, values from data escaped
//!    and cut) — before anything is sent; then check the evidence's age ([`check_fresh`]: the
//!    end of the analysed data at most `--evidence.max-age` before now, not in the future), or
//!    send nothing;
//! 2. `GET /api/v2/alerts` filtered on `source="tessera"` and the `--label`s: tessera's alerts
//!    that Alertmanager holds. If this fails, nothing is sent;
//! 3. the alerts to resolve: those whose labels prove them this configuration's ([`is_own`]:
//!    the filter is not trusted) of the detectors that ran, whose label set is not among this
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
pub use client::{Client, ClientOptions, TlsFiles, redact_url};

use crate::advisor::Analysis;
use crate::times::fmt_ms;

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
    /// A URL with `user:password@` (printed redacted).
    #[error(
        "bad --alertmanager.url {0:?}: credentials in the URL (user:password@) are refused, since a URL is printed in messages and logs; give them with --alertmanager.basic-auth USER:PASSWORD_FILE (or a token with --alertmanager.bearer-token-file FILE)"
    )]
    UrlCredentials(String),
    #[error("bad {flag} {}: {reason}", path.display())]
    Tls {
        flag: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error(
        "--alertmanager.tls.* is given but --alertmanager.url {0:?} is not https://: refused rather than sent in clear text"
    )]
    TlsOverHttp(String),
    /// The evidence (the analysed data) ends too long before now, after it, or has no end.
    #[error(
        "{0}; notify fires and resolves alerts only on fresh evidence (a finding missing from old data is not a finding that is gone), so nothing was sent and tessera's alerts expire at their endsAt"
    )]
    Stale(crate::evidence::StaleError),
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

/// The default of `--evidence.max-age`: the oldest end of the analysed data a run acts on.
pub const DEFAULT_MAX_EVIDENCE_AGE_MS: i64 = 3_600_000;

/// What [`run`] is asked to do.
#[derive(Debug, Clone)]
pub struct NotifyRequest {
    pub alerts: AlertOptions,
    pub client: ClientOptions,
    /// Build and return the alerts; contact nothing.
    pub dry_run: bool,
    /// The oldest end of the analysed data (`Analysis::until`) that a run acts on, ms before
    /// now (`--evidence.max-age`); `None`: not checked (`--allow-stale-evidence`).
    pub max_evidence_age_ms: Option<i64>,
}

/// Checks the age of the evidence (the one rule, [`crate::evidence`]): the end of the
/// analysed data (`until`, RFC 3339) is at most `max_ms` before `now_ms` and at most
/// [`crate::evidence::FUTURE_SKEW_MS`] after it.
pub fn check_fresh(until: Option<&str>, max_ms: i64, now_ms: i64) -> Result<(), NotifyError> {
    let end = crate::evidence::end_ms(until, "the analysis").map_err(NotifyError::Stale)?;
    crate::evidence::check(end, now_ms, max_ms).map_err(NotifyError::Stale)
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

/// Whether an alert's labels prove it one this configuration sends, whatever the server did with
/// the filter (an Alertmanager or proxy that ignores `filter` answers every alert it holds):
/// `source="tessera"`; every `--label` with its value; no label but tessera's and the
/// `--label`s; a `detector` label and its `alertname` and a `finding_id` of that detector
/// (`<detector>-` and 16 hex digits, as the advisor makes them).
pub fn is_own(labels: &BTreeMap<String, String>, extra: &BTreeMap<String, String>) -> bool {
    let get = |k: &str| labels.get(k).map(String::as_str);
    let Some(detector) = get("detector") else {
        return false;
    };
    let id_ok = get("finding_id")
        .and_then(|id| id.strip_prefix(detector)?.strip_prefix('-'))
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()));
    get(alerts::SOURCE_LABEL.0) == Some(alerts::SOURCE_LABEL.1)
        && extra.iter().all(|(k, v)| labels.get(k) == Some(v))
        && labels
            .keys()
            .all(|k| alerts::TESSERA_LABELS.contains(&k.as_str()) || extra.contains_key(k))
        && get("alertname") == Some(alerts::alertname(detector).as_str())
        && id_ok
}

/// The resolutions of `held` (the alerts Alertmanager answered to tessera's filter): those this
/// configuration sent ([`is_own`]: another tessera's alerts with another `--label`, and alerts
/// that are not tessera's at all, are left alone) of a detector that ran, whose labels are not
/// among `firing`'s, re-sent with `endsAt` = now (their `startsAt` and annotations kept).
pub fn resolutions(
    held: &[Alert],
    firing: &[Alert],
    detectors: &BTreeSet<&str>,
    extra: &BTreeMap<String, String>,
    now_ms: i64,
) -> Vec<Alert> {
    let live: BTreeSet<&BTreeMap<String, String>> = firing.iter().map(|a| &a.labels).collect();
    let now = fmt_ms(now_ms);
    let mut out: Vec<Alert> = held
        .iter()
        .filter(|a| {
            a.labels
                .get("detector")
                .is_some_and(|d| detectors.contains(d.as_str()))
                && is_own(&a.labels, extra)
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
/// findings (the module's steps 1–4), after checking that the evidence is fresh
/// ([`check_fresh`]; a dry run is not checked). `now_ms`: the time of the run (unix ms).
pub fn run(analysis: &Analysis, req: &NotifyRequest, now_ms: i64) -> Result<Outcome, NotifyError> {
    let firing = alerts::alerts(analysis, &req.alerts, now_ms);
    if req.dry_run {
        return Ok(Outcome {
            firing,
            ..Outcome::default()
        });
    }
    if let Some(max) = req.max_evidence_age_ms {
        check_fresh(analysis.until.as_deref(), max, now_ms)?;
    }
    let client = Client::new(&req.client)?;
    let held = client.tessera_alerts(&filter(&req.alerts.extra_labels))?;
    let detectors: BTreeSet<&str> = analysis.detectors.iter().map(|d| d.id).collect();
    let resolved = resolutions(&held, &firing, &detectors, &req.alerts.extra_labels, now_ms);
    let held_labels: BTreeSet<&BTreeMap<String, String>> = held
        .iter()
        .filter(|a| is_own(&a.labels, &req.alerts.extra_labels))
        .map(|a| &a.labels)
        .collect();
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

    /// An alert of tessera's for `detector` and the finding id ending in `hex`, with `more`
    /// labels (replacing tessera's where named).
    fn alert(detector: &str, hex: &str, more: &[(&str, &str)], starts: &str) -> Alert {
        let mut labels = BTreeMap::from([
            ("source".to_string(), "tessera".to_string()),
            ("alertname".to_string(), alerts::alertname(detector)),
            ("detector".to_string(), detector.to_string()),
            ("finding_id".to_string(), format!("{detector}-{hex:0>16}")),
            ("severity".to_string(), "warning".to_string()),
        ]);
        for (k, v) in more {
            labels.insert(k.to_string(), v.to_string());
        }
        Alert {
            labels,
            annotations: BTreeMap::from([("summary".to_string(), "s".to_string())]),
            starts_at: starts.into(),
            ends_at: "2030-01-01T00:00:00.000Z".into(),
            generator_url: String::new(),
        }
    }

    fn ids(r: &[Alert]) -> Vec<&str> {
        r.iter().map(|a| a.labels["finding_id"].as_str()).collect()
    }

    #[test]
    fn only_gone_alerts_of_detectors_that_ran_are_resolved() {
        let now = 1_800_000_000_000;
        let live = alert("idle_loaded", "a", &[], "");
        let gone = alert("idle_loaded", "b", &[], "2020-01-01T00:00:00.000Z");
        let other_detector = alert("consolidation", "c", &[], "");
        let mut no_detector = alert("idle_loaded", "d", &[], "");
        no_detector.labels.remove("detector");
        let other_tessera = alert("idle_loaded", "e", &[("cluster", "b")], "");
        let changed = alert(
            "idle_loaded",
            "a",
            &[("severity", "info")],
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
        assert_eq!(
            ids(&r),
            [
                "idle_loaded-000000000000000a",
                "idle_loaded-000000000000000b"
            ]
        );
        let now_s = fmt_ms(now);
        assert!(r.iter().all(|a| a.ends_at == now_s));
        // startsAt kept, unless it is after now (a clock ahead of ours).
        assert_eq!(r[1].starts_at, gone.starts_at);
        assert_eq!(r[0].labels, changed.labels);
        assert_eq!(r[0].starts_at, now_s);
        assert_eq!(r[1].annotations["summary"], "s");
        // With --label cluster=b, only the other tessera's alert is ours: the alerts without
        // the label are another configuration's.
        let extra = BTreeMap::from([("cluster".to_string(), "b".to_string())]);
        let r = resolutions(&held, &[live], &ran, &extra, now);
        assert_eq!(ids(&r), ["idle_loaded-000000000000000e"]);
    }

    #[test]
    fn only_alerts_whose_labels_prove_them_own_are_own() {
        let extra = BTreeMap::from([("cluster".to_string(), "a".to_string())]);
        let own = alert("idle_loaded", "1", &[("cluster", "a")], "");
        assert!(is_own(&own.labels, &extra));
        let not = |more: &[(&str, &str)], remove: &str| {
            let mut a = alert("idle_loaded", "1", &[("cluster", "a")], "");
            for (k, v) in more {
                a.labels.insert(k.to_string(), v.to_string());
            }
            a.labels.remove(remove);
            assert!(!is_own(&a.labels, &extra), "{more:?} -{remove}");
        };
        not(&[("cluster", "b")], "");
        not(&[], "cluster");
        not(&[], "source");
        not(&[("source", "tessera2")], "");
        not(&[], "detector");
        not(&[], "alertname");
        not(&[("alertname", "TesseraConsolidation")], "");
        not(&[("finding_id", "consolidation-0000000000000001")], "");
        not(&[("finding_id", "idle_loaded-1")], "");
        not(&[("finding_id", "idle_loaded-000000000000000g")], "");
        not(&[], "finding_id");
        not(&[("job", "x")], "");
    }

    #[test]
    fn evidence_older_than_the_maximum_or_from_the_future_is_refused() {
        let now = 1_800_000_000_000;
        let at = |ms: i64| fmt_ms(ms);
        let h = 3_600_000;
        let skew = crate::evidence::FUTURE_SKEW_MS;
        assert!(check_fresh(Some(&at(now - h)), h, now).is_ok());
        assert!(check_fresh(Some(&at(now + skew)), h, now).is_ok());
        let e = check_fresh(Some(&at(now - h - 1000)), h, now).unwrap_err();
        assert!(
            matches!(
                e,
                NotifyError::Stale(crate::evidence::StaleError::Old { .. })
            ),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("1h old")
                && msg.contains("--evidence.max-age 1h")
                && msg.contains("--allow-stale-evidence")
                && msg.contains("nothing was sent"),
            "{msg}"
        );
        let e = check_fresh(Some(&at(now + 30 * 86_400_000)), h, now).unwrap_err();
        assert!(e.to_string().contains("dated 30d after the clock"), "{e}");
        assert!(matches!(
            check_fresh(None, h, now),
            Err(NotifyError::Stale(crate::evidence::StaleError::Unknown(_)))
        ));
    }

    #[test]
    fn urls_are_printed_without_credentials() {
        for (url, want) in [
            ("http://u:p@h:9093/x", "http://<redacted>@h:9093/x"),
            ("http://u:p/q@h", "http://<redacted>@h"),
            ("u:p@h", "<redacted>@h"),
            ("http://h:9093", "http://h:9093"),
        ] {
            assert_eq!(redact_url(url), want);
        }
        assert!(matches!(
            client::check_url("https://u:secret@h"),
            Err(NotifyError::UrlCredentials(u)) if !u.contains("secret")
        ));
        assert!(client::check_url("https://h/am/").is_ok());
    }
}
