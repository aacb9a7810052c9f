//! The findings document as `tessera scale-down` reads it (the `tessera analyze --format json`
//! document, `docs/findings.md`): only what [`super::idle::idle_pods`] judges, filtered while it
//! is deserialized, so a findings file is read in memory bounded by the findings that count,
//! not by the document.
//!
//! [`FindingsDoc`] deserializes (with `serde_json::from_reader` over a file, or
//! `serde_json::from_value`) into the data's end (`until`) and the findings that count — an
//! `idle_loaded` finding, or an `allocated_unused` one of evidence kind `unused`, whose entity
//! names a namespace and a pod — each with its index in the document's `findings` array, its
//! id and its evidence spans. Each element of `findings` is deserialized into a slim finding
//! (id, detector, entity namespace and pod, evidence kind and spans) and dropped at once when it
//! does not count; every other field, and every other key of the document (`detectors` and
//! their `data` among them), is skipped without being built. Values of an unexpected type read
//! as `serde_json::Value`'s indexing reads them (a detector that is a number is no detector),
//! so [`super::idle`] gives the messages it gave on the whole document.
//!
//! What it does not do: judge idleness or times ([`super::idle`] does), read files or stdin
//! (the command does, bounded), or keep any other field of a finding.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A JSON value where a string is wanted: absent or `null`, a string, or anything else.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Text {
    /// Not there, or `null`.
    #[default]
    Absent,
    Str(String),
    /// A number, a boolean, an array or an object (skipped, not built).
    Other,
}

impl Text {
    /// The string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Text::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text, E> {
                Ok(Text::Str(s.to_string()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text, E> {
                Ok(Text::Str(s))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Text, E> {
                Ok(Text::Absent)
            }
            fn visit_none<E: de::Error>(self) -> Result<Text, E> {
                Ok(Text::Absent)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Text, E> {
                Ok(Text::Other)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Text, E> {
                Ok(Text::Other)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Text, E> {
                Ok(Text::Other)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Text, E> {
                Ok(Text::Other)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Text, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| Text::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Text, A::Error> {
                IgnoredAny.visit_map(map).map(|_| Text::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// An object read as `T`, anything else as `T::default()` (as indexing a `serde_json::Value`
/// that is not an object gives `null`): skipped, not built.
#[derive(Debug, Default)]
struct Obj<T>(T);

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Obj<T>, A::Error> {
                IgnoredAny.visit_seq(seq).map(|_| Obj(T::default()))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Obj<T>, E> {
                Ok(Obj(T::default()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Obj<T>, E> {
                Ok(Obj(T::default()))
            }
            fn visit_none<E: de::Error>(self) -> Result<Obj<T>, E> {
                Ok(Obj(T::default()))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Obj<T>, E> {
                Ok(Obj(T::default()))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Obj<T>, E> {
                Ok(Obj(T::default()))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Obj<T>, E> {
                Ok(Obj(T::default()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Obj<T>, E> {
                Ok(Obj(T::default()))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// One element of `evidence.spans`: its `start` and `end` (RFC 3339, judged by
/// [`super::idle`]); an element that is not an object has neither.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct Span {
    pub start: Text,
    pub end: Text,
}

/// `evidence.spans`: `None` when it is not an array.
#[derive(Debug, Default)]
struct Spans(Option<Vec<Span>>);

impl<'de> Deserialize<'de> for Spans {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Spans;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Spans, A::Error> {
                let mut spans = Vec::new();
                while let Some(Obj(s)) = seq.next_element::<Obj<Span>>()? {
                    spans.push(s);
                }
                Ok(Spans(Some(spans)))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Spans, A::Error> {
                IgnoredAny.visit_map(map).map(|_| Spans(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Spans, E> {
                Ok(Spans(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Spans, E> {
                Ok(Spans(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Spans, E> {
                Ok(Spans(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Spans, E> {
                Ok(Spans(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Spans, E> {
                Ok(Spans(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Spans, E> {
                Ok(Spans(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Spans, E> {
                Ok(Spans(None))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct SlimEntity {
    namespace: Text,
    pod: Text,
}

#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct SlimEvidence {
    kind: Text,
    spans: Spans,
}

/// One element of `findings`, as far as scale-down reads it.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct SlimFinding {
    id: Text,
    detector: Text,
    entity: Obj<SlimEntity>,
    evidence: Obj<SlimEvidence>,
}

/// A finding that counts: an `idle_loaded` finding, or an `allocated_unused` one of evidence
/// kind `unused`, of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counted {
    /// Its index in the document's `findings` array (for messages).
    pub index: usize,
    /// Its id (empty when it has none).
    pub id: String,
    pub namespace: String,
    pub pod: String,
    /// `evidence.spans`; `None` when it is not an array.
    pub spans: Option<Vec<Span>>,
}

impl SlimFinding {
    /// The finding, if it counts.
    fn counted(self, index: usize) -> Option<Counted> {
        let Obj(evidence) = self.evidence;
        let counts = match self.detector.as_str() {
            Some("idle_loaded") => true,
            Some("allocated_unused") => evidence.kind.as_str() == Some("unused"),
            _ => false,
        };
        let Obj(entity) = self.entity;
        match (counts, entity.namespace, entity.pod) {
            (true, Text::Str(namespace), Text::Str(pod)) => Some(Counted {
                index,
                id: match self.id {
                    Text::Str(id) => id,
                    _ => String::new(),
                },
                namespace,
                pod,
                spans: evidence.spans.0,
            }),
            _ => None,
        }
    }
}

/// The findings that count of a `findings` array, filtered as it is read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CountedFindings {
    /// The findings that count, in document order.
    pub kept: Vec<Counted>,
    /// How many findings the array had.
    pub total: usize,
}

impl<'de> Deserialize<'de> for CountedFindings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CountedFindings;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("the `findings` array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = CountedFindings::default();
                while let Some(Obj(f)) = seq.next_element::<Obj<SlimFinding>>()? {
                    out.kept.extend(f.counted(out.total));
                    out.total += 1;
                }
                Ok(out)
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct DocFields {
    until: Text,
    findings: Option<CountedFindings>,
}

/// What `tessera scale-down` reads of a findings document: the data's end and the findings
/// that count. Deserializes from the JSON object `tessera analyze --format json` prints (any
/// other JSON is an error saying so).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FindingsDoc {
    /// `until`: the data's end (RFC 3339; absent or `null` when the analysis had no data).
    pub until: Text,
    /// `findings`, filtered; `None` when there is no such key, or it is `null`.
    pub findings: Option<CountedFindings>,
}

impl<'de> Deserialize<'de> for FindingsDoc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FindingsDoc;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("the JSON object `tessera analyze --format json` prints")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<FindingsDoc, A::Error> {
                let d = DocFields::deserialize(MapAccessDeserializer::new(map))?;
                Ok(FindingsDoc {
                    until: d.until,
                    findings: d.findings,
                })
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn finding(i: usize, detector: &str, pod: Option<&str>, kind: &str) -> Value {
        let mut entity = json!({ "kind": "process", "node": "n1", "gpu": 0, "namespace": "ml" });
        if let Some(pod) = pod {
            entity["pod"] = json!(pod);
        }
        json!({
            "id": format!("{detector}-{i:016x}"), "detector": detector, "severity": "warning",
            "entity": entity,
            // Large fields scale-down never reads.
            "summary": "busy without doing work; ".repeat(200),
            "action": "look at the workload".repeat(50),
            "evidence": {
                "kind": kind, "busy_mean": 0.97,
                "spans": [{ "start": "2026-11-29T00:00:00Z", "end": "2026-11-30T00:00:00Z",
                            "minutes": 1440.0 }],
                "profile": (0..100).map(|h| json!({ "hour": h, "p95": 0.5 })).collect::<Vec<_>>(),
            },
        })
    }

    #[test]
    fn only_the_findings_that_count_are_kept_with_their_index() {
        let mut findings: Vec<Value> = (0..2000)
            .map(|i| match i % 4 {
                0 => finding(i, "busy_not_working", Some("busy"), "busy"),
                1 => finding(i, "consolidation", Some("c"), "unused"),
                // No pod: nothing to scale down.
                2 => finding(i, "idle_loaded", None, ""),
                // Held and used a little: not idle.
                _ => finding(i, "allocated_unused", Some("low"), "low_use"),
            })
            .collect();
        findings[5] = finding(5, "idle_loaded", Some("a"), "");
        findings[999] = finding(999, "allocated_unused", Some("b"), "unused");
        findings[1500] = finding(1500, "idle_loaded", Some("c"), "");
        // Counted without spans: kept, for idle_pods to say so.
        findings[1700] = json!({ "id": "s", "detector": "idle_loaded",
            "entity": { "namespace": "ml", "pod": "d" }, "evidence": "none" });
        // Not objects, or fields of the wrong type: no finding that counts, but indices go on.
        findings[10] = json!(7);
        findings[11] = json!(["idle_loaded"]);
        findings[12] = json!({ "detector": 1, "entity": { "namespace": "ml", "pod": "e" } });
        findings[13] = json!({ "detector": "idle_loaded", "entity": "ml/e" });
        findings[14] =
            json!({ "detector": "idle_loaded", "entity": { "namespace": "ml", "pod": 3 } });
        let doc = json!({
            "version": 1, "from": "2026-11-23T00:00:00Z", "until": "2026-11-30T00:00:00Z",
            "detectors": [{ "id": "offpeak_window", "data": { "profile": vec![json!({ "h": 1 }); 5000] } }],
            "findings": findings,
        });
        let text = serde_json::to_string_pretty(&doc).unwrap();
        assert!(text.len() > 5 << 20, "{}", text.len());
        // As a file is read (through a reader), and as the --source path builds it.
        let read: FindingsDoc = serde_json::from_reader(std::io::Cursor::new(&text)).unwrap();
        let built: FindingsDoc = serde_json::from_value(doc).unwrap();
        assert_eq!(read, built);
        assert_eq!(read.until.as_str(), Some("2026-11-30T00:00:00Z"));
        let counted = read.findings.unwrap();
        assert_eq!(counted.total, 2000);
        let kept: Vec<(usize, &str, &str)> = counted
            .kept
            .iter()
            .map(|c| (c.index, c.id.as_str(), c.pod.as_str()))
            .collect();
        assert_eq!(
            kept,
            [
                (5, "idle_loaded-0000000000000005", "a"),
                (999, "allocated_unused-00000000000003e7", "b"),
                (1500, "idle_loaded-00000000000005dc", "c"),
                (1700, "s", "d"),
            ]
        );
        assert_eq!(
            counted.kept[0].spans,
            Some(vec![Span {
                start: Text::Str("2026-11-29T00:00:00Z".into()),
                end: Text::Str("2026-11-30T00:00:00Z".into()),
            }])
        );
        assert_eq!(counted.kept[0].namespace, "ml");
        assert_eq!(counted.kept[3].spans, None);
    }

    #[test]
    fn fields_read_as_indexing_a_value_reads_them() {
        let doc: FindingsDoc = serde_json::from_str(
            r#"{ "until": null, "findings": [{ "id": 5, "detector": "idle_loaded",
                 "entity": { "namespace": "ml", "pod": "p" },
                 "evidence": { "spans": [7, { "start": [1], "end": null }] } }] }"#,
        )
        .unwrap();
        assert_eq!(doc.until, Text::Absent);
        let f = &doc.findings.unwrap().kept[0];
        assert_eq!(f.id, "");
        let spans = f.spans.as_ref().unwrap();
        assert_eq!(spans[0], Span::default());
        assert_eq!(
            (&spans[1].start, &spans[1].end),
            (&Text::Other, &Text::Absent)
        );
        let doc: FindingsDoc = serde_json::from_str(r#"{ "until": 1 }"#).unwrap();
        assert_eq!((doc.until, doc.findings), (Text::Other, None));
    }

    #[test]
    fn other_json_is_an_error_with_its_position() {
        for (text, want) in [
            (
                "[]",
                "invalid type: sequence, expected the JSON object `tessera analyze --format json` prints at line 1 column 0",
            ),
            (
                "{\n \"findings\": {}\n}",
                "expected the `findings` array at line 2 column 13",
            ),
            (
                "{\n \"findings\": [\n{\"id\": \"a\",",
                "EOF while parsing a value at line 3 column 11",
            ),
        ] {
            let e = serde_json::from_str::<FindingsDoc>(text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
