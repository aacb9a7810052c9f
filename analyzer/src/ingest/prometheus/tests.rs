//! Unit tests of the `prometheus:` source's pure parts: every query template evaluates under
//! remote read, chunks, URL userinfo, node names and matchers, server limits.

use std::collections::{BTreeMap, BTreeSet};

use super::catalogue::{Family, chunks, queries};
use super::client::{Limit, server_limit, split_userinfo};
use super::discovery::{Group, node_name, with_matcher};
use crate::ingest::promeval::{Eval, counter_delta};

#[test]
fn every_query_template_is_evaluated_by_remote_read() {
    for family in [Family::Tessera, Family::Dcgm, Family::NvidiaSmi] {
        let mut templates: Vec<String> = queries(family).into_iter().map(|q| q.promql).collect();
        // The recorded maxima's form too.
        templates.extend(
            family
                .recorded()
                .iter()
                .map(|(_, rec)| format!("max_over_time({rec}[{{R}}])")),
        );
        for t in templates {
            let e = Eval::parse(&t).unwrap_or_else(|| panic!("{family:?}: {t:?}"));
            // Every metric the template selects is one the evaluation reads.
            for m in e.metrics() {
                assert!(
                    t.contains(&format!("{m}[")) || t.contains(&format!("{m}{{")),
                    "{t:?} reads {m}"
                );
            }
        }
    }
    assert_eq!(
        Eval::parse("avg_over_time(a[{R}]) + avg_over_time(b[{R}])"),
        Some(Eval::Sum(
            super::super::promeval::Func::Avg,
            "a".into(),
            super::super::promeval::Func::Avg,
            "b".into()
        ))
    );
    assert_eq!(Eval::parse("rate(a[{R}])"), None);
    assert_eq!(Eval::parse("max_over_time(a[5m])"), None);
}

#[test]
fn chunks_cover_the_range_within_the_point_limit() {
    let c = chunks(5, 100_001, 10, 1000);
    assert_eq!(c.first().map(|c| c.0), Some(10));
    assert_eq!(c.last().map(|c| c.1), Some(100_000));
    for (s, e) in &c {
        assert!((e - s) / 10 < 1000);
    }
    for w in c.windows(2) {
        assert_eq!(w[0].1 + 10, w[1].0);
    }
    assert!(chunks(10, 10, 10, 5).is_empty());
}

#[test]
fn userinfo_and_node() {
    let (u, a) = split_userinfo("http://al%40x:p%3Aw@host:9090/prom");
    assert_eq!(u, "http://host:9090/prom");
    assert_eq!(a, Some(("al@x".into(), "p:w".into())));
    let m: BTreeMap<String, String> = [("instance".to_string(), "n1:9400".to_string())]
        .into_iter()
        .collect();
    assert_eq!(node_name(&m).as_deref(), Some("n1"));
}

#[test]
fn node_matchers_go_into_every_selector() {
    let q = counter_delta("tessera_gpu_energy_joules_total")
        .replace("{R}", "9999ms")
        .replace("{L}", "300000ms")
        .replace("{S}", "10000ms");
    let m = with_matcher(&q, "node=\"a\"");
    assert_eq!(
        m.matches("tessera_gpu_energy_joules_total{node=\"a\"}[")
            .count(),
        4
    );
    assert!(!m.contains("ms{"), "{m}");
    let x = with_matcher(
        "sum without (xid) (last_over_time(gpu:m:max1m[9999ms]) or x)",
        "n=\"1\"",
    );
    assert_eq!(
        x,
        "sum without (xid) (last_over_time(gpu:m:max1m{n=\"1\"}[9999ms]) or x)"
    );
    // A selector with matchers of its own gets the node's beside them.
    assert_eq!(
        with_matcher(
            "avg_over_time(tessera_gpu_pipe_active_ratio{pipe=\"fp64\"}[9999ms])",
            "node=\"a\""
        ),
        "avg_over_time(tessera_gpu_pipe_active_ratio{pipe=\"fp64\",node=\"a\"}[9999ms])"
    );
    let values: BTreeMap<String, BTreeSet<String>> = [
        ("10.0.0.1".to_string(), ["10.0.0.1:9400".to_string()].into()),
        ("b".to_string(), ["b:9400".to_string()].into()),
    ]
    .into_iter()
    .collect();
    let g = Group {
        nodes: vec!["10.0.0.1".into(), "b".into()],
        label: Some(("instance", values)),
    };
    assert_eq!(
        g.matcher().as_deref(),
        Some(r#"node="",Hostname="",instance=~"10\\.0\\.0\\.1:9400|b:9400""#)
    );
    assert_eq!(g.key(), "10.0.0.1+1");
    let (a, b) = g.halves();
    assert_eq!(
        a.matcher().as_deref(),
        Some(r#"node="",Hostname="",instance="10.0.0.1:9400""#)
    );
    assert_eq!(b.key(), "b");
}

#[test]
fn server_limits_are_told_apart() {
    let l = |s, m| server_limit(s, m);
    assert_eq!(
        l(
            422,
            "query processing would load too many samples into memory in query execution"
        ),
        Some(Limit::Samples)
    );
    assert_eq!(
        l(
            400,
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"
        ),
        Some(Limit::Samples)
    );
    assert_eq!(
        l(
            422,
            "expanding series: the query hit the max number of series limit (limit: 100000 series)"
        ),
        Some(Limit::Series)
    );
    assert_eq!(
        l(
            422,
            "cannot select more than -search.maxUniqueTimeseries=300000 time series"
        ),
        Some(Limit::Series)
    );
    assert_eq!(l(400, "parse error: unexpected character"), None);
    assert_eq!(l(401, "unauthorized"), None);
    assert_eq!(
        l(
            422,
            "found duplicate series for the match group {gpu=\"0\"} on the right hand-side"
        ),
        None
    );
    assert_eq!(
        l(422, "the query exceeded the per-query fetch limit"),
        Some(Limit::Samples)
    );
}
