//! Work per GPU-hour around a consolidation the change detector finds itself (issue 60's second
//! "done when"; docs/work.md "Before and after a change"): `fixtures/scenarios/consolidation.toml`
//! moves ten light services from ten whole H100s into 1g.10gb MIG instances of two GPUs
//! (`analyzer/tests/changes.rs` checks the change and its saving). Its history is backfilled into
//! a real Prometheus as tessera-exporter's series, with `tessera_gpu_pod_info` naming the pod on
//! each GPU or instance (from the processes' pods, as the exporter's kubelet source would), beside
//! vLLM's token counters of the ten pods.
//!
//! Planted: every service generates 10 tokens a second before the move; after it, the `search`
//! services keep 10 a second and the `chat` services fall to 0.5. The truth, from those rates and
//! the instances' share of a GPU (1/7): search 36,000 tokens per GPU-hour before and 252,000
//! after (a saving: the same work on a seventh of the GPU time), chat 36,000 before and 12,600
//! after (−65%: flagged, not a plain saving), in the JSON, the text and the HTML report. No
//! `--change-at`: the change is the detector's.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::Value;

use crate::changes::{self, DAYS, INTERVAL_MS};
use crate::support::openmetrics::{f64s, strs};
use crate::support::prometheus as prom;

/// Tokens a second of each team before and after the move.
const RATES: [(&str, f64, f64); 2] = [("search", 10.0, 10.0), ("chat", 10.0, 0.5)];

/// `tessera_gpu_pod_info` from the process rows: the pod on each GPU (whole) or MIG instance at
/// each row's end.
fn pod_info(process: &polars::prelude::DataFrame) -> String {
    let cols = [
        "node",
        "gpu",
        "uuid",
        "gpu_instance",
        "compute_instance",
        "namespace",
        "pod",
    ];
    let v: Vec<Vec<Option<String>>> = cols.iter().map(|c| strs(process, c)).collect();
    let ts = f64s(process, "ts");
    let mut lines = BTreeSet::new();
    for i in 0..process.height() {
        let get = |k: usize| v[k][i].clone().unwrap_or_default();
        let (Some(t), Some(_)) = (ts[i], &v[6][i]) else {
            continue;
        };
        lines.insert((
            t as i64,
            format!(
                "tessera_gpu_pod_info{{instance=\"{}:19435\",gpu=\"{}\",uuid=\"{}\",gpu_instance=\"{}\",\
                 compute_instance=\"{}\",device=\"{}\",resource=\"nvidia.com/gpu\",namespace=\"{}\",\
                 pod=\"{}\",container=\"main\"}} 1 {:.3}",
                get(0),
                get(1),
                get(2),
                get(3),
                get(4),
                get(2),
                get(5),
                get(6),
                t / 1000.0
            ),
        ));
    }
    // One series' samples in time order.
    let mut by_series: Vec<(String, i64, String)> = lines
        .into_iter()
        .map(|(t, l)| (l.split_once('}').unwrap().0.to_string(), t, l))
        .collect();
    by_series.sort();
    let mut s = String::from("# TYPE tessera_gpu_pod_info gauge\n");
    for (_, _, l) in by_series {
        s.push_str(&l);
        s.push('\n');
    }
    s
}

/// vLLM's generated tokens of each service, a sample a minute over the data.
fn tokens(since: i64, change: i64) -> String {
    let mut s = String::from("# TYPE vllm:generation_tokens counter\n");
    for (team, before, after) in RATES {
        let prefix = if team == "search" { "svc-a" } else { "svc-b" };
        for k in 0..5 {
            let mut total = 0.0;
            let mut t = since;
            while t <= since + DAYS * 86_400_000 {
                let _ = writeln!(
                    s,
                    "vllm:generation_tokens_total{{namespace=\"{team}\",pod=\"{prefix}{k}\",model_name=\"m\"}} {total} {:.3}",
                    t as f64 / 1000.0
                );
                total += if t < change { before } else { after } * 60.0;
                t += 60_000;
            }
        }
    }
    s
}

#[test]
fn a_found_consolidation_that_keeps_work_is_a_saving_and_one_that_loses_it_is_flagged() {
    prom::require_tools();
    let tmp = tempfile::tempdir().unwrap();
    let src = changes::simulate(tmp.path());
    let truth = changes::truth();
    let (_, _, process) = changes::frames(&src);
    let scenario = tessera_core::sim::Scenario::from_file(&changes::fixture()).unwrap();
    let since = scenario.start.timestamp_millis();
    let mut text = changes::openmetrics(&src);
    text.truncate(text.len() - "# EOF\n".len());
    text.push_str(&pod_info(&process));
    text.push_str(&tokens(since, truth.change_ms));
    text.push_str("# EOF\n");
    let server = prom::serve(tmp.path(), &text);
    let source = format!("prometheus:{}", server.url);
    let rfc = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339()
    };
    let (from, to) = (rfc(since), rfc(since + DAYS * 86_400_000));
    let range = [
        "--since",
        from.as_str(),
        "--until",
        to.as_str(),
        "--no-replay",
    ];
    let v = changes::report(&source, &range);
    let cc = v["changes"]["changes"].as_array().unwrap();
    assert_eq!(
        cc.len(),
        1,
        "the detector finds the one change: {}",
        v["changes"]
    );
    assert!(
        (changes::change_ms(&cc[0]) - truth.change_ms).abs() <= INTERVAL_MS,
        "{}",
        cc[0]["at"]
    );
    let work = cc[0]["comparison"]["work_per_gpu_hour"]
        .as_array()
        .unwrap_or_else(|| panic!("{:#}", cc[0]));
    let of = |team: &str| -> &Value {
        work.iter()
            .find(|w| w["team"] == team && w["unit"] == "tokens")
            .unwrap_or_else(|| panic!("{team}: {work:#?}"))
    };
    let close = |got: &Value, want: f64, what: &str| {
        let g = got.as_f64().unwrap_or_else(|| panic!("{what}: {got}"));
        assert!(
            (g - want).abs() <= want * 0.01,
            "{what}: {g} vs the planted {want}"
        );
    };
    let (search, chat) = (of("search"), of("chat"));
    close(&search["before"], 10.0 * 3600.0, "search before");
    close(&search["after"], 10.0 * 3600.0 * 7.0, "search after");
    assert_eq!(search["flagged"], false, "{search:#}");
    close(&chat["before"], 10.0 * 3600.0, "chat before");
    close(&chat["after"], 0.5 * 3600.0 * 7.0, "chat after");
    assert_eq!(chat["flagged"], true, "{chat:#}");
    // The change's saving stands beside the flag: the GPUs in use fall by the planted eight.
    let fleet = &cc[0]["comparison"]["fleet"];
    assert_eq!(
        fleet["delta"]["gpus_in_use"].as_f64(),
        Some(truth.after.gpus_in_use as f64 - truth.before.gpus_in_use as f64),
        "{fleet:#}"
    );
    for format in ["table", "html"] {
        let mut args = vec!["report", "--source", source.as_str(), "--format", format];
        args.extend(range);
        let out = changes::ok(&args);
        let line = |team: &str| {
            out.lines()
                .find(|l| l.contains(&format!("Work per GPU-hour, {team} (tokens)")))
                .unwrap_or_else(|| panic!("{format}: no {team} line in\n{out}"))
                .to_string()
        };
        let (s, c) = (line("search"), line("chat"));
        assert!(
            s.contains("36,000 before, 252,") && !s.contains("flagged"),
            "{format}: {s}"
        );
        assert!(
            c.contains("36,000 before, 12,") && c.contains("flagged"),
            "{format}: {c}"
        );
    }
}
