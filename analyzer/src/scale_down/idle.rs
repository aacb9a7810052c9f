//! Which pods are idle now, from the advisor's findings (the `tessera analyze` JSON,
//! `docs/findings.md`, as [`super::findings::FindingsDoc`] reads it: the data's end and the
//! findings that count): pure.
//!
//! A finding counts when it is an `idle_loaded` finding, or an `allocated_unused` finding of
//! kind `unused`, and its entity names a namespace and a pod. A pod is **idle now** when every
//! such finding of it has a last idle span (evidence `spans[]`) that
//! - lasts at least the required span (`--idle.min-duration`), and
//! - ends at the data's end (the analysis' `until`), less a tolerance of a few minutes (one row
//!   may end before another entity's: sampling periods differ, and Prometheus' lookback is 5
//!   minutes).
//!
//! So a workload idle last week but busy now is not idle now: its last idle span ended before
//! the data did. What it does not do: know about GPUs of the pod that have no finding (a pod
//! holding one idle and one busy GPU has a finding for the idle one only); the workload check
//! in [`super::plan`] requires every pod of a workload to be idle now, not every GPU.

use std::collections::BTreeMap;

use chrono::DateTime;

use super::findings::{FindingsDoc, Text};

/// Why a findings document cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("findings: {0}")]
pub struct IdleError(String);

/// Why a pod is idle now: its findings and its idle time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdlePod {
    /// The finding ids.
    pub findings: Vec<String>,
    /// The start of the latest of its findings' last spans (unix ms): idle since then at least.
    pub idle_since_ms: i64,
}

/// The pods of the findings: idle now, or with findings but not idle now (and why).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdleSet {
    /// The data's end (unix ms).
    pub data_end_ms: i64,
    /// (namespace, pod) → why it is idle now.
    pub idle: BTreeMap<(String, String), IdlePod>,
    /// (namespace, pod) → why it is not.
    pub not_now: BTreeMap<(String, String), String>,
}

fn ms(v: &Text, what: &str) -> Result<i64, IdleError> {
    let s = v
        .as_str()
        .ok_or_else(|| IdleError(format!("{what}: expected an RFC 3339 time")))?;
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|e| IdleError(format!("{what}: {s:?} is not an RFC 3339 time: {e}")))
}

pub use crate::evidence::rfc3339;

/// The pods of `analysis` (the analyze JSON, its findings that count) that are idle now: a
/// last idle span of at least `min_span_ms` ending no earlier than `tolerance_ms` before the
/// data's end. Messages name a finding by its index in the document (`findings[i]`).
pub fn idle_pods(
    analysis: &FindingsDoc,
    min_span_ms: i64,
    tolerance_ms: i64,
) -> Result<IdleSet, IdleError> {
    if analysis.until == Text::Absent {
        return Err(IdleError(
            "no `until`: the analysis had no data, so nothing can be idle now".into(),
        ));
    }
    let data_end = ms(&analysis.until, "until")?;
    let findings = analysis
        .findings
        .as_ref()
        .ok_or_else(|| IdleError("no `findings` array".into()))?;
    let mut set = IdleSet {
        data_end_ms: data_end,
        ..IdleSet::default()
    };
    // Per pod: Ok(idle since) of each finding, or the first reason it is not idle now.
    let mut per_pod: BTreeMap<(String, String), Result<IdlePod, String>> = BTreeMap::new();
    // Only the findings that count are there (`FindingsDoc` filtered them as it was read).
    for f in &findings.kept {
        let (i, id, ns, pod) = (f.index, f.id.clone(), &f.namespace, &f.pod);
        let spans = f
            .spans
            .as_ref()
            .ok_or_else(|| IdleError(format!("findings[{i}] ({id}): no evidence.spans")))?;
        let mut last: Option<(i64, i64)> = None;
        for (j, s) in spans.iter().enumerate() {
            let start = ms(
                &s.start,
                &format!("findings[{i}].evidence.spans[{j}].start"),
            )?;
            let end = ms(&s.end, &format!("findings[{i}].evidence.spans[{j}].end"))?;
            if last.is_none_or(|(_, e)| end > e) {
                last = Some((start, end));
            }
        }
        let verdict = match last {
            None => Err(format!("{id} has no idle span")),
            Some((_, end)) if end < data_end - tolerance_ms => Err(format!(
                "not idle now: its last idle span ({id}) ended {} before the data's end ({})",
                rfc3339(end),
                rfc3339(data_end)
            )),
            Some((start, end)) if end - start < min_span_ms => Err(format!(
                "idle for {:.1} h only ({id}), less than the required {:.1} h",
                (end - start) as f64 / 3.6e6,
                min_span_ms as f64 / 3.6e6
            )),
            Some((start, _)) => Ok(start),
        };
        let entry = per_pod
            .entry((ns.to_string(), pod.to_string()))
            .or_insert_with(|| {
                Ok(IdlePod {
                    findings: Vec::new(),
                    idle_since_ms: i64::MIN,
                })
            });
        match (entry, verdict) {
            (Ok(p), Ok(start)) => {
                p.findings.push(id);
                p.idle_since_ms = p.idle_since_ms.max(start);
            }
            (e @ Ok(_), Err(why)) => *e = Err(why),
            (Err(_), _) => {}
        }
    }
    for (key, v) in per_pod {
        match v {
            Ok(p) => {
                set.idle.insert(key, p);
            }
            Err(why) => {
                set.not_now.insert(key, why);
            }
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// `idle_pods` on a document built with `json!` (read as a findings file is); its error, or
    /// the document's, as text.
    fn judge(doc: Value, min_span_ms: i64, tolerance_ms: i64) -> Result<IdleSet, String> {
        let doc: FindingsDoc = serde_json::from_value(doc).map_err(|e| e.to_string())?;
        idle_pods(&doc, min_span_ms, tolerance_ms).map_err(|e| e.to_string())
    }

    fn finding(id: &str, detector: &str, pod: &str, spans: &[(&str, &str)]) -> Value {
        json!({
            "id": id, "detector": detector,
            "entity": { "kind": "process", "namespace": "ml", "pod": pod },
            "evidence": {
                "kind": "unused",
                "spans": spans.iter().map(|(s, e)| json!({ "start": s, "end": e })).collect::<Vec<_>>(),
            },
        })
    }

    #[test]
    fn idle_now_means_a_long_enough_last_span_at_the_data_end() {
        let a = json!({
            "until": "2026-11-30T00:00:00Z",
            "findings": [
                finding("a", "idle_loaded", "now", &[("2026-11-29T00:00:00Z", "2026-11-30T00:00:00Z")]),
                // Idle last week, busy since.
                finding("b", "idle_loaded", "last-week", &[("2026-11-22T00:00:00Z", "2026-11-24T00:00:00Z")]),
                // Within the 5-minute tolerance; the earlier span does not matter.
                finding("c", "allocated_unused", "held", &[
                    ("2026-11-20T00:00:00Z", "2026-11-21T00:00:00Z"),
                    ("2026-11-29T12:00:00Z", "2026-11-29T23:57:00Z"),
                ]),
                // Too short.
                finding("d", "idle_loaded", "short", &[("2026-11-29T23:30:00Z", "2026-11-30T00:00:00Z")]),
                // Two findings of one pod: both must be idle now.
                finding("e1", "idle_loaded", "two", &[("2026-11-29T00:00:00Z", "2026-11-30T00:00:00Z")]),
                finding("e2", "idle_loaded", "two", &[("2026-11-25T00:00:00Z", "2026-11-26T00:00:00Z")]),
                // Other detectors and entities without a pod do not count.
                finding("f", "busy_not_working", "busy", &[("2026-11-29T00:00:00Z", "2026-11-30T00:00:00Z")]),
                { "id": "g", "detector": "idle_loaded", "entity": { "kind": "gpu" }, "evidence": {} },
            ],
        });
        let set = judge(a, 3_600_000, 300_000).unwrap();
        let idle: Vec<&str> = set.idle.keys().map(|(_, p)| p.as_str()).collect();
        assert_eq!(idle, ["held", "now"]);
        assert_eq!(set.idle[&("ml".into(), "held".into())].findings, ["c"]);
        let not: Vec<&str> = set.not_now.keys().map(|(_, p)| p.as_str()).collect();
        assert_eq!(not, ["last-week", "short", "two"]);
        assert!(set.not_now[&("ml".into(), "last-week".into())].contains("not idle now"));
        assert!(set.not_now[&("ml".into(), "short".into())].contains("0.5 h only"));
        // A low_use finding of allocated_unused is not idle.
        let mut low = finding(
            "h",
            "allocated_unused",
            "low",
            &[("2026-11-29T00:00:00Z", "2026-11-30T00:00:00Z")],
        );
        low["evidence"]["kind"] = json!("low_use");
        let set = judge(
            json!({ "until": "2026-11-30T00:00:00Z", "findings": [low] }),
            1,
            1,
        )
        .unwrap();
        assert!(set.idle.is_empty() && set.not_now.is_empty());
    }

    #[test]
    fn bad_documents_are_errors() {
        for (doc, want) in [
            (json!([]), "expected the JSON object"),
            (json!({ "until": null, "findings": [] }), "no `until`"),
            (
                json!({ "until": "yesterday", "findings": [] }),
                "not an RFC 3339 time",
            ),
            (json!({ "until": "2026-11-30T00:00:00Z" }), "no `findings`"),
            (
                json!({ "until": 5, "findings": [] }),
                "until: expected an RFC 3339 time",
            ),
            (
                json!({ "until": "2026-11-30T00:00:00Z", "findings": { "a": 1 } }),
                "expected the `findings` array",
            ),
            (
                json!({ "until": "2026-11-30T00:00:00Z", "findings": [
                    { "id": "x", "detector": "idle_loaded", "entity": { "namespace": "a", "pod": "b" }, "evidence": {} }
                ] }),
                "findings[0] (x): no evidence.spans",
            ),
        ] {
            let e = judge(doc, 1, 1).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    /// A malformed span time is named by the finding's index in the document (not among the
    /// findings that count) and the span's.
    #[test]
    fn a_bad_span_time_names_the_finding_and_the_span() {
        let ok = ("2026-11-29T00:00:00Z", "2026-11-30T00:00:00Z");
        let mut bad = finding("bad", "idle_loaded", "p", &[ok, ok]);
        bad["evidence"]["spans"][1]["start"] = json!("yesterday");
        let doc = json!({ "until": "2026-11-30T00:00:00Z", "findings": [
            finding("x", "busy_not_working", "q", &[ok]),
            json!(7),
            finding("y", "idle_loaded", "r", &[ok]),
            bad,
        ] });
        let e = judge(doc.clone(), 1, 1).unwrap_err();
        assert_eq!(
            e,
            "findings: findings[3].evidence.spans[1].start: \"yesterday\" is not an RFC 3339 \
             time: premature end of input"
        );
        let mut doc = doc;
        doc["findings"][3]["evidence"]["spans"][0]["end"] = json!(17);
        let e = judge(doc, 1, 1).unwrap_err();
        assert_eq!(
            e,
            "findings: findings[3].evidence.spans[0].end: expected an RFC 3339 time"
        );
    }
}
