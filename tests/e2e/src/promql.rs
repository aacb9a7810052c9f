//! Just enough PromQL lexing for the monitoring tests: the vector selectors of an expression (so a
//! test can check that every metric a rule or dashboard uses is one the exporter exports, and can
//! query the selectors of an expression whose result is legitimately empty), and Grafana's
//! template variables replaced by values a plain Prometheus accepts.
//!
//! Not a parser: it skips strings, label matchers, ranges and subqueries, label lists of
//! `by`/`without`/`on`/`ignoring`/`group_left`/`group_right`, functions, aggregations, keywords,
//! numbers and durations; what is left are metric names. Prometheus itself parses every
//! expression in the end-to-end test.

/// One vector selector: the metric name (if written before the braces) and the selector text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub metric: Option<String>,
    pub text: String,
}

const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const LABEL_LIST_KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "offset", "bool", "atan2", "inf", "nan", "start", "end",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Index just past the string literal starting at `i` (a quote character).
fn skip_string(s: &[char], i: usize) -> usize {
    let q = s[i];
    let mut j = i + 1;
    while j < s.len() {
        if s[j] == '\\' && q != '`' {
            j += 2;
            continue;
        }
        if s[j] == q {
            return j + 1;
        }
        j += 1;
    }
    j
}

/// Index just past the bracket group opened at `i`, skipping strings inside.
fn skip_group(s: &[char], i: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut j = i;
    while j < s.len() {
        match s[j] {
            '"' | '\'' | '`' => {
                j = skip_string(s, j);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    j
}

fn next_non_space(s: &[char], mut i: usize) -> Option<(usize, char)> {
    while i < s.len() {
        if !s[i].is_whitespace() {
            return Some((i, s[i]));
        }
        i += 1;
    }
    None
}

/// The vector selectors of a PromQL expression, in order.
pub fn selectors(expr: &str) -> Vec<Selector> {
    let s: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&s, i);
        } else if c == '[' {
            i = skip_group(&s, i, '[', ']');
        } else if c == '{' {
            let end = skip_group(&s, i, '{', '}');
            out.push(Selector {
                metric: None,
                text: s[i..end].iter().collect(),
            });
            i = end;
        } else if c == '$' {
            // A Grafana variable: ${name...} or $name.
            if s.get(i + 1) == Some(&'{') {
                i = skip_group(&s, i + 1, '{', '}');
            } else {
                i += 1;
                while i < s.len() && is_ident(s[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit()
            || (c == '.' && s.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '.' || s[i] == '_') {
                i += 1;
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < s.len() && is_ident(s[i]) {
                i += 1;
            }
            let ident: String = s[start..i].iter().collect();
            let lower = ident.to_ascii_lowercase();
            let next = next_non_space(&s, i);
            if LABEL_LIST_KEYWORDS.contains(&lower.as_str()) {
                if let Some((j, '(')) = next {
                    i = skip_group(&s, j, '(', ')');
                }
            } else if KEYWORDS.contains(&lower.as_str())
                || AGGREGATIONS.contains(&lower.as_str())
                || matches!(next, Some((_, '(')))
            {
                // Keyword, aggregation or function call: not a metric.
            } else if let Some((j, '{')) = next {
                let end = skip_group(&s, j, '{', '}');
                out.push(Selector {
                    metric: Some(ident.clone()),
                    text: format!("{ident}{}", s[j..end].iter().collect::<String>()),
                });
                i = end;
            } else {
                out.push(Selector {
                    metric: Some(ident.clone()),
                    text: ident,
                });
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The metric names an expression reads.
pub fn metric_names(expr: &str) -> Vec<String> {
    selectors(expr)
        .into_iter()
        .filter_map(|s| s.metric)
        .collect()
}

/// The PromQL inside a Grafana variable query: the selector of `label_values(SELECTOR, label)`,
/// the expression of `query_result(EXPR)`, `None` for `label_values(label)` and other functions.
pub fn variable_query_expr(query: &str) -> Option<String> {
    let q = query.trim();
    if let Some(inner) = q
        .strip_prefix("query_result(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return Some(inner.to_string());
    }
    let inner = q
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))?;
    // The last top-level comma separates the selector from the label name.
    let chars: Vec<char> = inner.chars().collect();
    let mut depth = 0i32;
    let mut split = None;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = skip_string(&chars, i);
                continue;
            }
            '(' | '{' | '[' => depth += 1,
            ')' | '}' | ']' => depth -= 1,
            ',' if depth == 0 => split = Some(i),
            _ => {}
        }
        i += 1;
    }
    split.map(|at| chars[..at].iter().collect::<String>().trim().to_string())
}

/// Replace Grafana's template variables with values Prometheus accepts: interval variables with
/// durations, every other variable (used inside regex label matchers) with `.+`.
pub fn substitute_grafana_variables(expr: &str) -> String {
    let mut out = expr.to_string();
    for (var, value) in [
        ("${__rate_interval}", "1m"),
        ("$__rate_interval", "1m"),
        ("${__interval}", "15s"),
        ("$__interval", "15s"),
        ("${__range}", "5m"),
        ("$__range", "5m"),
    ] {
        out = out.replace(var, value);
    }
    let s: Vec<char> = out.chars().collect();
    let mut res = String::with_capacity(out.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == '$' {
            if s.get(i + 1) == Some(&'{') {
                i = skip_group(&s, i + 1, '{', '}');
            } else {
                i += 1;
                while i < s.len() && is_ident(s[i]) {
                    i += 1;
                }
            }
            res.push_str(".+");
        } else {
            res.push(s[i]);
            i += 1;
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_metrics_not_functions_labels_or_keywords() {
        let e = r#"sum by (job, instance) (rate(tessera_gpu_energy_joules_total{job=~"$job", xid!="a{b}"}[5m:1m]))
            / on (job) group_left (name) max without (gpu) (tessera_gpu_info offset 5m) > bool 0.5
            and ignoring(x) instance_gpu:tessera_gpu_activity_ratio:avg5m unless vector(1) or {__name__="up"}
            # a comment with not_a_metric
            + topk(5, tessera_gpu_power_watts @ start()) * 1e3 + count_values("v", up)"#;
        assert_eq!(
            metric_names(e),
            vec![
                "tessera_gpu_energy_joules_total",
                "tessera_gpu_info",
                "instance_gpu:tessera_gpu_activity_ratio:avg5m",
                "tessera_gpu_power_watts",
                "up",
            ]
        );
        let s = selectors(e);
        assert_eq!(
            s[0].text,
            r#"tessera_gpu_energy_joules_total{job=~"$job", xid!="a{b}"}"#
        );
        assert!(
            s.iter()
                .any(|x| x.metric.is_none() && x.text == r#"{__name__="up"}"#)
        );
    }

    #[test]
    fn grafana_variables() {
        assert_eq!(
            variable_query_expr(r#"label_values(tessera_gpu_info{job=~"$job"}, instance)"#)
                .as_deref(),
            Some(r#"tessera_gpu_info{job=~"$job"}"#)
        );
        assert_eq!(variable_query_expr("label_values(instance)"), None);
        assert_eq!(
            substitute_grafana_variables(
                r#"rate(x{job=~"$job", gpu=~"${gpu:regex}"}[$__rate_interval])"#
            ),
            r#"rate(x{job=~".+", gpu=~".+"}[1m])"#
        );
    }
}
