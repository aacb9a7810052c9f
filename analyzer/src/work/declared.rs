//! The user's own work counters (`tessera report --work-metrics FILE`, docs/work.md "Other
//! work"): a TOML file of `[[work]]` entries, each a unit (`steps`, `samples`, `batches`) and a
//! counter selector (`trainer_steps_total{job="trainer"}`) whose series carry `namespace` and
//! `pod` labels. [`load`] reads and checks the file into [`WorkMetric`]s; the `prometheus:`
//! source reads them exactly as the built-in counters (each whole hour's `increase` per pod).
//!
//! What it does not do: query a server, accept PromQL expressions other than a selector (the
//! hourly `increase` is taken of it, so it must name a counter's series), or add units together.

use std::path::Path;

use serde::{Deserialize, Serialize};
use tessera_core::input_limits::{self, clip};

/// The largest file read (1 MiB).
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most entries a file may declare (each is one more `or` branch of a query).
pub const MAX_ENTRIES: usize = 64;
/// The longest selector, characters (queries travel in a URL).
pub const MAX_SELECTOR: usize = 1000;
/// The longest unit name.
pub const MAX_UNIT: usize = 32;

/// One declared work counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkMetric {
    /// What one increment of the counter is: `steps`, `samples`, `batches`, … (never added to
    /// another unit's work).
    pub unit: String,
    /// A counter selector: a metric name with optional label matchers.
    pub counter: String,
}

/// What a file must look like, for the errors.
const EXPECTED: &str = "expected [[work]] entries, each with unit = \"steps\" and counter = 'a counter selector whose series carry namespace and pod labels, e.g. trainer_steps_total{job=\"trainer\"}' (docs/work.md, \"Other work\")";

/// Errors of the work metrics file.
#[derive(Debug, thiserror::Error)]
pub enum DeclaredError {
    #[error("reading work metrics file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("bad work metrics file {path}: {reason} ({EXPECTED})")]
    Parse { path: String, reason: String },
    #[error("bad work metrics file {path}: entry {entry} (line {line}): {reason}")]
    Entry {
        path: String,
        /// 1-based.
        entry: usize,
        line: usize,
        reason: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    work: Vec<toml::Spanned<WorkMetric>>,
}

/// The work counters `path` declares, checked (see [`parse`]).
pub fn load(path: &Path) -> Result<Vec<WorkMetric>, DeclaredError> {
    let p = path.display().to_string();
    let text =
        input_limits::read_to_string(path, MAX_FILE_BYTES).map_err(|e| DeclaredError::Read {
            path: p.clone(),
            reason: e.to_string(),
        })?;
    parse(&text, &p)
}

/// The work counters of a file's `text` (`path` names it in errors): at least one and at most
/// [`MAX_ENTRIES`] entries, each unit a name of lower-case letters, digits and `_` (at most
/// [`MAX_UNIT`]), each counter a selector ([`check_selector`]), no entry repeated.
pub fn parse(text: &str, path: &str) -> Result<Vec<WorkMetric>, DeclaredError> {
    let bad = |reason: String| DeclaredError::Parse {
        path: path.to_string(),
        reason,
    };
    let file: File =
        toml::from_str(text).map_err(|e| bad(clip(e.to_string().trim_end()).replace('\n', " ")))?;
    if file.work.is_empty() {
        return Err(bad("no [[work]] entry".into()));
    }
    if file.work.len() > MAX_ENTRIES {
        return Err(bad(format!(
            "{} entries, more than the {MAX_ENTRIES} allowed",
            file.work.len()
        )));
    }
    let mut out: Vec<WorkMetric> = Vec::with_capacity(file.work.len());
    for (i, spanned) in file.work.into_iter().enumerate() {
        let line = text
            .get(..spanned.span().start)
            .map_or(1, |t| t.matches('\n').count() + 1);
        let entry = |reason: String| DeclaredError::Entry {
            path: path.to_string(),
            entry: i + 1,
            line,
            reason,
        };
        let m = spanned.into_inner();
        check_unit(&m.unit).map_err(entry)?;
        check_selector(&m.counter).map_err(|e| {
            entry(format!(
                "counter {}: {e}; expected a counter selector, a metric name with optional label matchers, e.g. trainer_steps_total{{job=\"trainer\"}} (tessera takes its increase over each hour)",
                clip(&format!("{:?}", m.counter))
            ))
        })?;
        if let Some(j) = out.iter().position(|o| *o == m) {
            return Err(entry(format!("repeats entry {}", j + 1)));
        }
        out.push(m);
    }
    Ok(out)
}

fn check_unit(unit: &str) -> Result<(), String> {
    let ok = (1..=MAX_UNIT).contains(&unit.len())
        && unit.starts_with(|c: char| c.is_ascii_lowercase())
        && unit
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "unit {}: expected a name of 1 to {MAX_UNIT} lower-case letters, digits or _, starting with a letter (steps, samples, batches)",
            clip(&format!("{unit:?}"))
        ))
    }
}

/// Words PromQL's parser reads as operators, aggregations or modifiers where a selector's
/// metric name would stand.
const KEYWORDS: &[&str] = &[
    "sum",
    "avg",
    "count",
    "min",
    "max",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "count_values",
    "quantile",
    "limitk",
    "limit_ratio",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
    "atan2",
    "inf",
    "nan",
];

/// A PromQL instant vector selector: `name`, `name{matchers}` or `{matchers}` with a
/// `__name__="…"` matcher; a matcher is `label op "string"` (`=`, `!=`, `=~`, `!~`; strings in
/// double or single quotes with backslash escapes, or in backticks), separated by commas.
pub fn check_selector(s: &str) -> Result<(), String> {
    if s.chars().count() > MAX_SELECTOR {
        return Err(format!("longer than {MAX_SELECTOR} characters"));
    }
    let b: Vec<char> = s.trim().chars().collect();
    let mut i = 0;
    let ident = |i: &mut usize, colon: bool| {
        let start = *i;
        while *i < b.len()
            && (b[*i].is_ascii_alphanumeric() || b[*i] == '_' || (colon && b[*i] == ':'))
            && !(*i == start && b[*i].is_ascii_digit())
        {
            *i += 1;
        }
        b[start..*i].iter().collect::<String>()
    };
    let skip = |i: &mut usize| {
        while *i < b.len() && b[*i].is_whitespace() {
            *i += 1;
        }
    };
    let name = ident(&mut i, true);
    if KEYWORDS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "{name} is a PromQL keyword, not a metric name (write {{__name__=\"{name}\"}})"
        ));
    }
    let mut named = !name.is_empty();
    skip(&mut i);
    if i < b.len() && b[i] == '{' {
        i += 1;
        loop {
            skip(&mut i);
            if i < b.len() && b[i] == '}' {
                i += 1;
                break;
            }
            let label = ident(&mut i, false);
            if label.is_empty() {
                return Err(format!(
                    "a label name or }} expected at character {}",
                    i + 1
                ));
            }
            skip(&mut i);
            let op: String = b[i..].iter().take(2).collect();
            let op = if op == "!=" || op == "=~" || op == "!~" {
                op
            } else if op.starts_with('=') {
                "=".to_string()
            } else {
                return Err(format!(
                    "=, !=, =~ or !~ expected after {label} at character {}",
                    i + 1
                ));
            };
            i += op.len();
            skip(&mut i);
            let Some(&quote) = b.get(i).filter(|c| matches!(c, '"' | '\'' | '`')) else {
                return Err(format!("a quoted value expected at character {}", i + 1));
            };
            i += 1;
            loop {
                match b.get(i) {
                    None => return Err(format!("the value of {label} is not closed")),
                    Some('\\') if quote != '`' => i += 2,
                    Some(&c) if c == quote => break,
                    Some(_) => i += 1,
                }
            }
            i += 1;
            named |= label == "__name__" && op == "=";
            skip(&mut i);
            match b.get(i) {
                Some(',') => i += 1,
                Some('}') => {}
                _ => return Err(format!(", or }} expected at character {}", i + 1)),
            }
        }
    }
    skip(&mut i);
    if i < b.len() {
        return Err(format!(
            "unexpected {:?} at character {} (an expression, a range or a function is not a selector)",
            b[i],
            i + 1
        ));
    }
    if !named {
        return Err("no metric name".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_entries_is_read_and_bad_ones_name_the_entry() {
        let text = "[[work]]\nunit = \"steps\"\ncounter = 'trainer_steps_total{job=\"trainer\", stage=~\"a|b\"}'\n\n[[work]]\nunit = \"samples\"\ncounter = \"{__name__=\\\"x:samples_total\\\"}\"\n";
        let got = parse(text, "w.toml").unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].unit, "steps");
        assert_eq!(got[1].counter, "{__name__=\"x:samples_total\"}");
        for ok in [
            "a",
            "a_total{}",
            "ns:a_total { job = 'x' , }",
            "a{l=`raw\\`}",
            "a{l=\"q\\\"}\"}",
            "{__name__=\"sum\"}",
            "summary_total",
        ] {
            assert_eq!(check_selector(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "rate(a[5m])",
            "a[1h]",
            "a{job}",
            "a{job=x}",
            "a{job=\"x\"",
            "{job=\"x\"}",
            "a + b",
            "1a",
            "sum",
            "or{job=\"x\"}",
        ] {
            assert!(check_selector(bad).is_err(), "{bad}");
        }
        let err = |t: &str| parse(t, "w.toml").unwrap_err().to_string();
        let e = err(
            "[[work]]\nunit = \"steps\"\ncounter = \"a\"\n[[work]]\nunit = \"steps\"\ncounter = \"rate(a[1h])\"\n",
        );
        assert!(
            e.contains("w.toml: entry 2 (line 4): counter \"rate(a[1h])\"")
                && e.contains("expected a counter selector"),
            "{e}"
        );
        let e = err("[[work]]\nunit = \"Steps/s\"\ncounter = \"a\"\n");
        assert!(
            e.contains("entry 1 (line 1): unit \"Steps/s\": expected"),
            "{e}"
        );
        let e = err("[[work]]\nunit = \"steps\"\n");
        assert!(
            e.contains("bad work metrics file w.toml: ") && e.contains("counter"),
            "{e}"
        );
        assert!(e.contains("expected [[work]] entries"), "{e}");
        assert!(err("work = []\n").contains("no [[work]] entry"));
        assert!(err("[[work]]\nunit = \"s\"\ncounter = \"a\"\nquery = \"b\"\n").contains("query"));
        let e = err(
            "[[work]]\nunit = \"s\"\ncounter = \"a\"\n[[work]]\nunit = \"s\"\ncounter = \"a\"\n",
        );
        assert!(e.contains("entry 2 (line 4): repeats entry 1"), "{e}");
        let many = "[[work]]\nunit = \"s\"\ncounter = \"a\"\n".repeat(MAX_ENTRIES + 1);
        assert!(err(&many).contains("more than the 64 allowed"));
    }
}
