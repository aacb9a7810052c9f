//! The alerts of `tessera notify`, built from an [`Analysis`] (`docs/notify.md`): one
//! Alertmanager alert per finding, its label set stable across runs (the detector, the finding's
//! stable id, its severity and the entity's names, never a time or a number), its annotations the
//! finding's words and price, `startsAt` the finding's first span, `endsAt` now + the TTL.
//!
//! Values from data (pod and namespace names, node names) are made safe here by one rule
//! ([`label_value`]): control characters escaped as `\n`, `\u{1b}` (never a raw line break), then
//! cut to [`MAX_LABEL_BYTES`] with `…` at a character boundary; empty values are left out (absent,
//! as Alertmanager treats them). Label names are tessera's own, or the operator's `--label` names
//! checked against Prometheus' `[a-zA-Z_][a-zA-Z0-9_]*` ([`check_extra_label`]).
//!
//! Pure: no I/O and no clock (the caller gives "now"); it does not talk to Alertmanager (that is
//! `client`) or decide what to resolve (that is the module's workflow).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::NotifyError;
use crate::advisor::{Analysis, Evidence, Finding, Severity};
use crate::output::escape::{printable, printable_lines};
use crate::times::fmt_ms;

/// The constant label every alert of tessera carries (`source="tessera"`): what `notify` filters
/// on to find its own alerts, and what routes match.
pub const SOURCE_LABEL: (&str, &str) = ("source", "tessera");

/// Longest label value sent, in bytes (Kubernetes names are at most 253).
pub const MAX_LABEL_BYTES: usize = 256;

/// Longest annotation value sent, in bytes.
pub const MAX_ANNOTATION_BYTES: usize = 4096;

/// The labels tessera sets; `--label` may not name them.
pub const TESSERA_LABELS: &[&str] = &[
    "alertname",
    "source",
    "finding_id",
    "detector",
    "severity",
    "team",
    "owner",
    "namespace",
    "pod",
    "slurm_job",
    "node",
    "gpu",
    "gpu_instance",
    "model",
];

/// One alert as Alertmanager's API v2 takes it (`postableAlert`) and, with the fields it adds,
/// answers it (`gettableAlert`: the extra fields are ignored here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// RFC 3339.
    #[serde(rename = "startsAt", default, skip_serializing_if = "String::is_empty")]
    pub starts_at: String,
    /// RFC 3339.
    #[serde(rename = "endsAt", default, skip_serializing_if = "String::is_empty")]
    pub ends_at: String,
    #[serde(
        rename = "generatorURL",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub generator_url: String,
}

/// How findings become alerts.
#[derive(Debug, Clone)]
pub struct AlertOptions {
    /// Findings below this severity are not sent.
    pub min_severity: Severity,
    /// `endsAt` = now + this, ms.
    pub ttl_ms: i64,
    /// `generatorURL`: `{id}` and `{detector}` replaced; `None`: `tessera://finding/<id>`.
    pub generator_url: Option<String>,
    /// Constant labels added to every alert (`--label`), already checked.
    pub extra_labels: BTreeMap<String, String>,
    /// Price of one GPU-hour and its currency, for the `cost` annotation.
    pub gpu_hour_price: f64,
    pub currency: String,
    /// The teams' contacts: each alert of a team with one gets its `owner` label.
    pub owners: crate::owners::Owners,
}

/// `Tessera` and the detector id in CamelCase: `idle_loaded` → `TesseraIdleLoaded`.
pub fn alertname(detector: &str) -> String {
    let mut s = String::from("Tessera");
    for word in detector.split('_') {
        let mut cs = word.chars();
        if let Some(c) = cs.next() {
            s.extend(c.to_uppercase());
            s.push_str(cs.as_str());
        }
    }
    s
}

/// `s` cut to at most `max` bytes at a character boundary, ending in `…` when cut.
fn cut(s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A label value from data: control characters escaped (one line), at most
/// [`MAX_LABEL_BYTES`]; `None` when empty (absent).
pub fn label_value(s: &str) -> Option<String> {
    if s.is_empty() {
        return None;
    }
    Some(cut(printable(s).into_owned(), MAX_LABEL_BYTES))
}

fn one_line(s: &str) -> String {
    cut(printable(s).into_owned(), MAX_ANNOTATION_BYTES)
}

/// Whether `name` is a label name Alertmanager accepts everywhere (`[a-zA-Z_][a-zA-Z0-9_]*`).
pub fn valid_label_name(name: &str) -> bool {
    let mut cs = name.chars();
    matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

/// Checks one `--label NAME=VALUE`: a valid name that is not tessera's, a non-empty value of at
/// most [`MAX_LABEL_BYTES`] without control characters (it is part of the filter that finds
/// tessera's alerts, so it is refused rather than changed).
pub fn check_extra_label(spec: &str) -> Result<(String, String), NotifyError> {
    let bad = |reason: String| NotifyError::Label {
        spec: printable(spec).into_owned(),
        reason,
    };
    let Some((name, value)) = spec.split_once('=') else {
        return Err(bad("expected NAME=VALUE".into()));
    };
    if !valid_label_name(name) {
        return Err(bad(format!(
            "the name {:?} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)",
            printable(name)
        )));
    }
    if TESSERA_LABELS.contains(&name) {
        return Err(bad(format!(
            "{name} is one of tessera's own labels ({})",
            TESSERA_LABELS.join(", ")
        )));
    }
    if value.is_empty() || value.len() > MAX_LABEL_BYTES || value.chars().any(char::is_control) {
        return Err(bad(format!(
            "the value must be 1 to {MAX_LABEL_BYTES} bytes without control characters"
        )));
    }
    Ok((name.to_string(), value.to_string()))
}

/// Checks `--generator-url`: a scheme (`https:`), no whitespace or control character.
pub fn check_generator_url(url: &str) -> Result<(), NotifyError> {
    let scheme_ok = url.split_once(':').is_some_and(|(s, _)| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    if !scheme_ok || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(NotifyError::GeneratorUrl(printable(url).into_owned()));
    }
    Ok(())
}

/// The GPU-hours a finding prices (what the report prices it at), if it prices any: idle-loaded
/// reclaimable GPU-hours, allocated-but-unused wasted GPU-hours, busy-not-working hours,
/// consolidation GPU-hours freed, the off-peak baseline's GPU-hours per period. Off-peak windows
/// are an opportunity, not a cost: none.
pub fn gpu_hours(f: &Finding) -> Option<f64> {
    use crate::advisor::evidence::OffpeakEvidence;
    match &f.evidence {
        Evidence::IdleLoaded(e) => Some(e.reclaimable_gpu_hours),
        Evidence::Allocated(e) => Some(e.wasted_gpu_hours),
        Evidence::BusyNotWorking(e) => Some(e.hours),
        Evidence::Consolidation(e) => Some(e.gpu_hours_freed),
        Evidence::Offpeak(OffpeakEvidence::Baseline(e)) => Some(e.gpu_hours_per_period as f64),
        Evidence::Offpeak(_) => None,
    }
}

/// The start of the finding's first span (RFC 3339), where its evidence has spans.
fn first_seen(f: &Finding) -> Option<String> {
    let starts: Vec<&String> = match &f.evidence {
        Evidence::IdleLoaded(e) => e.spans.iter().map(|s| &s.start).collect(),
        Evidence::Allocated(e) => e.spans.iter().map(|s| &s.start).collect(),
        Evidence::BusyNotWorking(e) => e.spans.iter().map(|s| &s.start).collect(),
        _ => Vec::new(),
    };
    starts.into_iter().min().cloned()
}

/// The team of a finding: its namespace (Kubernetes); Slurm jobs carry `slurm_job` and no team.
pub fn team(f: &Finding) -> Option<&str> {
    f.entity.namespace.as_deref()
}

/// The label set of one finding's alert (stable across runs: no time, no number but the GPU's
/// index and its MIG instance); `owner` when `owners` knows the finding's team
/// (`crate::owners::team_of`: its namespace, else its Slurm job).
pub fn labels(
    f: &Finding,
    extra: &BTreeMap<String, String>,
    owners: &crate::owners::Owners,
) -> BTreeMap<String, String> {
    let mut l = extra.clone();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v.as_deref().and_then(label_value) {
            l.insert(k.to_string(), v);
        }
    };
    put("alertname", Some(alertname(f.detector)));
    put(SOURCE_LABEL.0, Some(SOURCE_LABEL.1.to_string()));
    put("finding_id", Some(f.id.clone()));
    put("detector", Some(f.detector.to_string()));
    put("severity", Some(severity(f.severity).to_string()));
    let e = &f.entity;
    put("team", team(f).map(str::to_string));
    put(
        "owner",
        owners
            .of(e.namespace.as_deref(), e.slurm_job.as_deref())
            .map(str::to_string),
    );
    put("namespace", e.namespace.clone());
    put("pod", e.pod.clone());
    put("slurm_job", e.slurm_job.clone());
    put("node", e.node.clone());
    put("gpu", e.gpu.map(|g| g.to_string()));
    put("gpu_instance", e.gpu_instance.map(|g| g.to_string()));
    if e.node.is_none() {
        put("model", e.model.clone());
    }
    l
}

/// `info`, `warning` or `critical`.
pub fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Critical => "critical",
    }
}

/// One alert per finding of `a` at or above the minimum severity, firing from its first span (or
/// `now`) until `now` + TTL.
pub fn alerts(a: &Analysis, opts: &AlertOptions, now_ms: i64) -> Vec<Alert> {
    let range = match (&a.from, &a.until) {
        (Some(f), Some(u)) => format!("{f} – {u}"),
        _ => "the analysed range".to_string(),
    };
    a.findings
        .iter()
        .filter(|f| f.severity >= opts.min_severity)
        .map(|f| {
            let mut ann = BTreeMap::new();
            ann.insert("summary".to_string(), one_line(&f.summary));
            // The one recommendation for the finding's workload (crate::actions), else the
            // finding's own suggestion.
            let action =
                crate::actions::alert_action(&a.actions, &f.id).unwrap_or_else(|| f.action.clone());
            ann.insert("action".to_string(), one_line(&action));
            if let Some(h) = gpu_hours(f) {
                ann.insert("gpu_hours".to_string(), format!("{h:.1}"));
                ann.insert(
                    "cost".to_string(),
                    one_line(&format!(
                        "{:.2} {} ({h:.1} GPU-hours at {:.2} per GPU-hour) in {range}",
                        h * opts.gpu_hour_price,
                        opts.currency,
                        opts.gpu_hour_price,
                    )),
                );
            }
            let description = format!(
                "{}: {}\n{}\nSuggested: {}\nFinding {} of {}, analysed over {range} from {}.",
                f.detector,
                f.entity.label(),
                f.summary,
                action,
                f.id,
                alertname(f.detector),
                a.sources.join(", "),
            );
            ann.insert(
                "description".to_string(),
                cut(
                    printable_lines(&description).into_owned(),
                    MAX_ANNOTATION_BYTES,
                ),
            );
            let generator_url = match &opts.generator_url {
                Some(t) => t.replace("{id}", &f.id).replace("{detector}", f.detector),
                None => format!("tessera://finding/{}", f.id),
            };
            let now = fmt_ms(now_ms);
            let starts_at = first_seen(f).filter(|s| *s <= now).unwrap_or(now);
            Alert {
                labels: labels(f, &opts.extra_labels, &opts.owners),
                annotations: ann,
                starts_at,
                ends_at: fmt_ms(now_ms.saturating_add(opts.ttl_ms)),
                generator_url,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alertnames_are_camel_case_detector_ids() {
        assert_eq!(alertname("idle_loaded"), "TesseraIdleLoaded");
        assert_eq!(alertname("allocated_unused"), "TesseraAllocatedUnused");
        assert_eq!(alertname("offpeak_window"), "TesseraOffpeakWindow");
    }

    #[test]
    fn hostile_values_are_escaped_and_cut_at_a_character_boundary() {
        assert_eq!(label_value(""), None);
        assert_eq!(label_value("a\"b").as_deref(), Some("a\"b"));
        assert_eq!(label_value("a\nb\u{1b}").as_deref(), Some("a\\nb\\u{1b}"));
        let long = "é".repeat(1000);
        let v = label_value(&long).unwrap();
        assert!(v.len() <= MAX_LABEL_BYTES, "{}", v.len());
        assert!(v.ends_with('…') && v.starts_with("éé"));
        let exact = "x".repeat(MAX_LABEL_BYTES);
        assert_eq!(label_value(&exact).as_deref(), Some(exact.as_str()));
    }

    #[test]
    fn extra_labels_are_checked() {
        assert_eq!(
            check_extra_label("cluster=prod-1").unwrap(),
            ("cluster".into(), "prod-1".into())
        );
        for bad in [
            "cluster",
            "1x=a",
            "a-b=c",
            "__name__=x",
            "team=x",
            "source=x",
            "c=",
            "c=a\nb",
        ] {
            assert!(check_extra_label(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn generator_urls_need_a_scheme_and_no_spaces() {
        assert!(check_generator_url("https://x.example/r.html#{id}").is_ok());
        assert!(check_generator_url("tessera://finding/{id}").is_ok());
        for bad in ["x.example/{id}", "https://x y", "://x", "ht tp://x"] {
            assert!(check_generator_url(bad).is_err(), "{bad:?} accepted");
        }
    }
}
