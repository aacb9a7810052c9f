//! What the `prometheus:` source finds on the server before it reads rows: whether a family's
//! metrics have samples in the range ([`has_samples`]), the finest scrape interval, the hours
//! that have samples and the nodes with the label naming each ([`scrape_interval`]), and from
//! those the node groups read one partition each ([`node_groups`]) with their label matchers,
//! put into every selector of a query ([`with_matcher`]) or a remote read.
//!
//! It does not choose the family or the recorded series (the caller and `recorded`) and reads
//! no rows.

use std::collections::{BTreeMap, BTreeSet};

use super::catalogue::chunks;
use super::client::{Client, Matrix, err, parse};
use crate::ingest::IngestError;
use crate::ingest::remote_read::LabelMatcher;

/// A series' node ([`node_name`]), the label that names it and that label's value.
fn node_label(m: &BTreeMap<String, String>) -> Option<(String, &'static str, String)> {
    let node = node_name(m)?;
    let label = ["node", "Hostname", "instance"]
        .into_iter()
        .find(|l| m.get(*l).is_some_and(|v| !v.is_empty()))?;
    Some((node, label, m[label].clone()))
}

/// `node`: a `node` label, else dcgm-exporter's `Hostname`, else `instance` without its port.
pub(super) fn node_name(m: &BTreeMap<String, String>) -> Option<String> {
    for l in ["node", "Hostname"] {
        if let Some(v) = m.get(l).filter(|v| !v.is_empty()) {
            return Some(v.clone());
        }
    }
    let inst = m.get("instance").filter(|v| !v.is_empty())?;
    match inst.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => Some(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        ),
        _ => Some(inst.clone()),
    }
}

/// Whether any of `metrics` has a sample in `[since, until)`: `count(count_over_time(m[W]))`
/// evaluated every W (an hour, or the whole range when shorter).
pub(super) fn has_samples(
    client: &mut Client,
    metrics: &[&str],
    since: i64,
    until: i64,
) -> Result<bool, IngestError> {
    let window = ((until - since).clamp(1_000, 3_600_000)) / 1_000 * 1_000;
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    for m in metrics {
        let promql = format!("count(count_over_time({m}[{}ms]))", window - 1);
        for (s, e) in chunks(since + 1, until + window, window, 11_000) {
            let (data, _) = client.get(
                "/api/v1/query_range",
                &[
                    ("query", promql.clone()),
                    ("start", secs(s)),
                    ("end", secs(e)),
                    ("step", secs(window)),
                ],
                &format!("metric family detection: query {promql:?}"),
            )?;
            let mx: Matrix = parse(&data).map_err(|e| {
                err(
                    &client.spec,
                    format!("metric family detection: query {promql:?}: bad answer: {e}"),
                )
            })?;
            if mx.result.iter().any(|s| !s.values.is_empty()) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The finest scrape interval of any series of the family in `[since, until)`, ms: per series,
/// the most samples it has in any window of an hour (`count_over_time(m[1h])` evaluated hourly;
/// the whole range when shorter), divided into the window. The fullest window is the one with
/// the fewest missed scrapes; jitter moves a count by one at most. `None` when no series has
/// two samples in a window.
pub(super) fn scrape_interval(
    client: &mut Client,
    metrics: &[&str],
    (since, until): (i64, i64),
    max_points: i64,
    warnings: &mut BTreeMap<String, u64>,
) -> Result<Scan, IngestError> {
    let range = (until - since).max(1_000);
    let window = range.min(3_600_000) / 1_000 * 1_000;
    let window = window.max(1_000);
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    let mut finest: Option<f64> = None;
    let mut windows = BTreeSet::new();
    let mut nodes: BTreeMap<String, BTreeMap<&'static str, BTreeSet<String>>> = BTreeMap::new();
    let mut unnamed = 0u64;
    for m in metrics {
        let promql = format!("count_over_time({m}[{window}ms])");
        for (s, e) in chunks(since + 1, until + window, window, max_points) {
            let (data, warns) = client.get(
                "/api/v1/query_range",
                &[
                    ("query", promql.clone()),
                    ("start", secs(s)),
                    ("end", secs(e)),
                    ("step", secs(window)),
                ],
                &format!("scrape interval: query {promql:?}"),
            )?;
            for w in warns {
                *warnings.entry(w).or_default() += 1;
            }
            let mx: Matrix = parse(&data).map_err(|e| {
                err(
                    &client.spec,
                    format!("scrape interval: query {promql:?}: bad answer: {e}"),
                )
            })?;
            for series in mx.result {
                match node_label(&series.metric) {
                    Some((node, label, value)) => {
                        nodes
                            .entry(node)
                            .or_default()
                            .entry(label)
                            .or_default()
                            .insert(value);
                    }
                    None => unnamed += 1,
                }
                for (t, v) in &series.values {
                    if v.parse::<f64>().is_ok_and(|v| v >= 1.0) {
                        windows.insert((t * 1000.0).round() as i64);
                    }
                }
                let most = series
                    .values
                    .iter()
                    .filter_map(|(_, v)| v.parse::<f64>().ok())
                    .fold(0.0, f64::max);
                if most >= 2.0 {
                    let p = window as f64 / most;
                    finest = Some(finest.map_or(p, |f: f64| f.min(p)));
                }
            }
        }
    }
    Ok(Scan {
        finest,
        windows,
        nodes,
        unnamed,
    })
}

/// What [`scrape_interval`] found: the finest period, and the windows (their end, unix ms) in
/// which any series had a sample.
pub(super) struct Scan {
    pub(super) finest: Option<f64>,
    pub(super) windows: BTreeSet<i64>,
    /// Per node ([`node_name`]): the label that names it and that label's values.
    pub(super) nodes: BTreeMap<String, BTreeMap<&'static str, BTreeSet<String>>>,
    /// Series with no node name.
    pub(super) unnamed: u64,
}

/// A group of nodes queried together: their names and the series' label matcher (none: the
/// whole fleet).
#[derive(Clone)]
pub(super) struct Group {
    pub(super) nodes: Vec<String>,
    /// The label naming the nodes and each node's values of it.
    pub(super) label: Option<(&'static str, BTreeMap<String, BTreeSet<String>>)>,
}

impl Group {
    /// The partition's key: the node, the first node and how many more, or `*` for all.
    pub(super) fn key(&self) -> String {
        match (&self.label, self.nodes.as_slice()) {
            (None, _) | (_, []) => "*".to_string(),
            (Some(_), [one]) => one.clone(),
            (Some(_), [first, rest @ ..]) => format!("{first}+{}", rest.len()),
        }
    }

    /// The label matchers selecting exactly the group's series (a node named by a lower label
    /// must not have the higher ones: [`node_name`]'s order).
    pub(super) fn matcher(&self) -> Option<String> {
        let (label, values) = self.label.as_ref()?;
        let vals: BTreeSet<&String> = self
            .nodes
            .iter()
            .filter_map(|n| values.get(n))
            .flatten()
            .collect();
        let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        let sel = if vals.len() == 1 {
            format!("{label}=\"{}\"", quote(vals.iter().next().expect("one")))
        } else {
            let re: Vec<String> = vals.iter().map(|v| regex_escape(v)).collect();
            format!("{label}=~\"{}\"", quote(&re.join("|")))
        };
        Some(match *label {
            "node" => sel,
            "Hostname" => format!("node=\"\",{sel}"),
            _ => format!("node=\"\",Hostname=\"\",{sel}"),
        })
    }

    /// [`Group::matcher`] as remote-read label matchers.
    pub(super) fn label_matchers(&self) -> Vec<LabelMatcher> {
        let Some((label, values)) = self.label.as_ref() else {
            return Vec::new();
        };
        let vals: BTreeSet<&String> = self
            .nodes
            .iter()
            .filter_map(|n| values.get(n))
            .flatten()
            .collect();
        let mut out: Vec<LabelMatcher> = match *label {
            "node" => Vec::new(),
            "Hostname" => vec![LabelMatcher::eq("node", "")],
            _ => vec![
                LabelMatcher::eq("node", ""),
                LabelMatcher::eq("Hostname", ""),
            ],
        };
        out.push(if vals.len() == 1 {
            LabelMatcher::eq(label, vals.iter().next().expect("one"))
        } else {
            let re: Vec<String> = vals.iter().map(|v| regex_escape(v)).collect();
            LabelMatcher::re(label, &re.join("|"))
        });
        out
    }

    /// The group in two halves (for a server's series limit).
    pub(super) fn halves(&self) -> (Group, Group) {
        let mid = self.nodes.len() / 2;
        let half = |nodes: &[String]| Group {
            nodes: nodes.to_vec(),
            label: self.label.clone(),
        };
        (half(&self.nodes[..mid]), half(&self.nodes[mid..]))
    }
}

/// RE2 metacharacters escaped.
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `promql` with `matcher` added to every selector (`m[…]` → `m{matcher}[…]`, `m{l="v"}[…]` →
/// `m{l="v",matcher}[…]`; the source's queries select by name, some with equality matchers
/// whose values hold no braces or quotes).
pub(super) fn with_matcher(promql: &str, matcher: &str) -> String {
    let b = promql.as_bytes();
    let mut out = String::with_capacity(promql.len() + 4 * matcher.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' || c == b':' || c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            out.push_str(&promql[start..i]);
            if !c.is_ascii_digit() && b.get(i) == Some(&b'[') {
                out.push('{');
                out.push_str(matcher);
                out.push('}');
            } else if !c.is_ascii_digit()
                && b.get(i) == Some(&b'{')
                && let Some(close) = promql[i..].find('}').map(|k| i + k)
                && b.get(close + 1) == Some(&b'[')
            {
                out.push_str(&promql[i..close]);
                out.push(',');
                out.push_str(matcher);
                out.push('}');
                i = close + 1;
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

/// The node groups of the fleet found by the scrape interval scan, `per` nodes each, and why
/// the fleet is one partition when it is (`None` when it is partitioned). `named`: each group
/// must select its nodes by their label, never the whole fleet (a family read beside another:
/// a few nodes, or `--prometheus.nodes-per-query 0`, are one group); where the nodes cannot
/// be told apart the groups are none, with the reason.
pub(super) fn node_groups(scan: &Scan, per: usize, named: bool) -> (Vec<Group>, Option<String>) {
    let all = Group {
        nodes: scan.nodes.keys().cloned().collect(),
        label: None,
    };
    let labels: BTreeSet<&'static str> = scan
        .nodes
        .values()
        .flat_map(|v| v.keys())
        .copied()
        .collect();
    let why = if per == 0 && !named {
        Some("--prometheus.nodes-per-query 0".to_string())
    } else if scan.unnamed > 0 {
        Some(format!(
            "{} series have no node, Hostname or instance label",
            scan.unnamed
        ))
    } else if labels.len() > 1 {
        Some(format!(
            "the nodes are named by different labels: {}",
            labels.iter().copied().collect::<Vec<_>>().join(", ")
        ))
    } else if scan.nodes.len() <= per && !named {
        Some(format!("{} node(s)", scan.nodes.len()))
    } else {
        None
    };
    if why.is_some() {
        return (vec![all], why);
    }
    let Some(&label) = labels.iter().next() else {
        return (Vec::new(), Some("no node named".into()));
    };
    let per = if per == 0 { scan.nodes.len() } else { per };
    let values: BTreeMap<String, BTreeSet<String>> = scan
        .nodes
        .iter()
        .map(|(n, v)| (n.clone(), v.get(label).cloned().unwrap_or_default()))
        .collect();
    let groups = all
        .nodes
        .chunks(per)
        .map(|nodes| Group {
            nodes: nodes.to_vec(),
            label: Some((label, values.clone())),
        })
        .collect();
    (groups, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(nodes: &[(&str, &'static str)], unnamed: u64) -> Scan {
        Scan {
            finest: Some(15_000.0),
            windows: BTreeSet::new(),
            nodes: nodes
                .iter()
                .map(|(n, label)| {
                    let values = BTreeSet::from([format!("{n}:9400")]);
                    (n.to_string(), BTreeMap::from([(*label, values)]))
                })
                .collect(),
            unnamed,
        }
    }

    #[test]
    fn a_family_read_beside_another_is_read_by_its_nodes_never_as_the_whole_fleet() {
        let two = scan(&[("a", "instance"), ("b", "instance")], 0);
        // Alone, a fleet of few nodes is one query without a matcher...
        let (groups, why) = node_groups(&two, 4, false);
        assert_eq!(why.as_deref(), Some("2 node(s)"));
        assert_eq!(groups[0].matcher(), None);
        // ...beside another family it is selected by its nodes' label, whatever the group size.
        for per in [0, 1, 4] {
            let (groups, why) = node_groups(&two, per, true);
            assert_eq!(why, None, "per {per}");
            let keys: Vec<String> = groups.iter().map(Group::key).collect();
            let want = if per == 1 {
                vec!["a", "b"]
            } else {
                vec!["a+1"]
            };
            assert_eq!(keys, want, "per {per}");
            assert!(groups.iter().all(|g| g.matcher().is_some()), "per {per}");
        }
        // Nodes that cannot be told apart give no groups, with the reason.
        let (_, why) = node_groups(&scan(&[("a", "instance")], 3), 1, true);
        assert_eq!(
            why.as_deref(),
            Some("3 series have no node, Hostname or instance label")
        );
        let mixed = scan(&[("a", "instance"), ("b", "Hostname")], 0);
        assert!(node_groups(&mixed, 1, true).1.is_some());
        let (groups, why) = node_groups(&scan(&[], 0), 1, true);
        assert!(groups.is_empty() && why.is_some());
    }
}
