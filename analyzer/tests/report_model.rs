//! The report model's arithmetic on hand-made rows (a generic long-format CSV, 5-minute buckets,
//! one hour), through the library: `ingest` → `advisor::analyze` → `report::build`.
//!
//! | GPU | rows | expected |
//! |---|---|---|
//! | n1/g0 (model M) | SM activity 0.5, 10 GiB of 80 used, 300 W; two processes (teams a, b) with 5 GiB each | allocated 1 h, work 0.5 GPU-h, each team 0.5 GPU-h and 5 GiB-h |
//! | n2/g1 (model M) | busy ratio (no SM activity) 0 for 30 min then 0.5, 0.5 GiB used, 100 W | allocated 0.5 h, work 0.25 GPU-h; not free for the hour |

use std::fmt::Write as _;

use tessera::advisor::{self, Params};
use tessera::ingest::{self, IngestOptions, Source};
use tessera::report::{self, Prices, ReportInput};

const GIB: u64 = 1 << 30;

fn csv() -> String {
    let mut s = String::from("timestamp,entity,metric,value,kind,node,model,uuid,gpu,namespace\n");
    for i in 1..=12 {
        let t = format!("2026-11-02T00:{:02}:00Z", i * 5);
        let t = if i == 12 {
            "2026-11-02T01:00:00Z".to_string()
        } else {
            t
        };
        for (m, v) in [
            ("sm_active_ratio", 0.5),
            ("memory_used_bytes", (10 * GIB) as f64),
            ("memory_total_bytes", (80 * GIB) as f64),
            ("power_watts", 300.0),
        ] {
            let _ = writeln!(s, "{t},GPU-0,{m},{v},gpu,n1,M,GPU-0,0,");
        }
        let busy = if i <= 6 { 0.0 } else { 0.5 };
        for (m, v) in [
            ("gpu_busy_ratio", busy),
            ("memory_used_bytes", (GIB / 2) as f64),
            ("memory_total_bytes", (80 * GIB) as f64),
            ("power_watts", 100.0),
        ] {
            let _ = writeln!(s, "{t},GPU-1,{m},{v},gpu,n2,M,GPU-1,1,");
        }
        for (pid, ns) in [(1, "a"), (2, "b")] {
            let _ = writeln!(
                s,
                "{t},{pid},memory_used_bytes,{},process,n1,,GPU-0,0,{ns}",
                5 * GIB
            );
        }
    }
    s
}

#[test]
fn usage_cost_and_teams_add_up() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("rows.csv");
    std::fs::write(&path, csv()).unwrap();
    let opts = IngestOptions {
        interval_ms: Some(300_000),
        ..IngestOptions::default()
    };
    let (frames, ing) = ingest::ingest(&[Source::csv(path)], &opts).expect("ingest");
    let start = chrono::DateTime::parse_from_rfc3339("2026-11-02T00:00:00Z")
        .unwrap()
        .timestamp_millis();
    let range = (start, start + 3_600_000);
    let params = Params::default();
    let analysis = advisor::analyze(&frames, &params, Some(range), vec![], &[]).unwrap();
    let r = report::build(
        &frames,
        &ReportInput {
            analysis: &analysis,
            range,
            ingest: &ing,
            sources: vec![],
            prices: Prices {
                gpu_hour: 2.0,
                kwh: 0.5,
                currency: "EUR".into(),
                source: "test".into(),
            },
            tz: chrono_tz::UTC,
            top: 10,
        },
    )
    .unwrap();

    assert_eq!(r.hours, 1.0);
    assert_eq!(r.activity_signal, "sm_active, else busy");
    let f = &r.fleet;
    assert_eq!(f.gpus, 2);
    assert_eq!(f.gpu_hours_available, 2.0);
    assert_eq!(f.gpu_hours_observed, 2.0);
    assert_eq!(f.gpu_hours_allocated, 1.5);
    assert_eq!(f.gpu_hours_busy, Some(0.75));
    assert_eq!(f.activity_mean, Some(0.375));
    assert_eq!(f.activity_p95, Some(0.5));
    // (10/80 × 12 + 0.5/80 × 12) / 24
    assert_eq!(f.memory_used_share, Some(0.066));
    assert_eq!(f.memory_peak_gib, Some(10.0));
    // Energy from power: 300 W + 100 W for an hour.
    assert_eq!(f.energy_kwh, Some(0.4));
    assert_eq!(f.cost_gpu_hours, 4.0);
    assert_eq!(f.cost_energy, Some(0.2));
    assert_eq!(f.cost_total, 4.2);
    assert!(r.previous_period.is_none());

    let nodes: Vec<(&str, f64, Option<f64>)> = r
        .by_node
        .iter()
        .map(|u| (u.key.as_str(), u.gpu_hours_allocated, u.gpu_hours_busy))
        .collect();
    assert_eq!(nodes, [("n1", 1.0, Some(0.5)), ("n2", 0.5, Some(0.25))]);
    assert_eq!(r.by_model.len(), 1);
    assert_eq!(r.by_model[0].gpus, 2);

    assert_eq!(r.teams.dimension, "namespace");
    let teams: Vec<(&str, usize, f64, f64, f64)> = r
        .teams
        .rows
        .iter()
        .map(|t| {
            (
                t.team.as_str(),
                t.processes,
                t.gpu_hours,
                t.memory_gib_hours,
                t.cost,
            )
        })
        .collect();
    assert_eq!(teams, [("a", 1, 0.5, 5.0, 1.0), ("b", 1, 0.5, 5.0, 1.0)]);

    // One hour on the timeline: g1 was busy half of it, g0 all of it.
    assert_eq!(r.charts.free_timeline.len(), 1);
    assert_eq!(r.charts.free_timeline[0].gpus, 2);
    assert_eq!(r.charts.free_timeline[0].free_gpus, 0);
    // Monday 00:00 UTC holds all rows.
    assert_eq!(r.charts.hour_of_week[0][0], Some(0.375));
    assert!(r.charts.hour_of_week[1].iter().all(Option::is_none));
    let g1 = &r.charts.gpu_activity[1];
    assert_eq!(g1.gpu, "n2/GPU1");
    assert_eq!(g1.histogram[0], 0.5);
    assert_eq!(g1.histogram[5], 0.5);
    // The busy ratio is named as the signal of part of the data.
    assert!(r.data_quality.iter().any(|n| n.kind == "signal"));
    assert!(
        r.data_quality
            .iter()
            .all(|n| n.kind != "gap" && n.kind != "stopped")
    );
    assert!(r.mig.is_none());
    // Every text format says there is no MIG recommendation yet, and the command that makes one
    // (with the report's sources: none here).
    for text in [
        report::render::render_table(&r, false),
        report::render::render_markdown(&r),
    ] {
        assert!(
            text.contains("MIG recommendation: not computed; run `tessera mig plan -o plan.yaml`"),
            "{text}"
        );
    }
    assert!(report::html::render_html(&r).contains(
        "MIG recommendation: not computed; run <code>tessera mig plan -o plan.yaml</code>"
    ));
}

/// The report and the MIG planner's demand built one node partition at a time equal those
/// built over the union of the partitions, byte for byte (issue 15): a multi-node fleet with
/// MIG and non-MIG GPUs, two days of rows reported as the second day (so the previous period
/// is the first). Partitions handed over out of node order fall back to the union.
#[test]
fn partitioned_report_and_demand_equal_the_unions() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tessera_core::sim::load_scenario(Some(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/scenarios/fleet-64.toml"),
    ))
    .expect("fleet-64");
    tessera_core::simulate::simulate(&scenario, 2, tmp.path(), 30_000, 60_000).expect("simulate");
    let opts = IngestOptions {
        footer_stats: true,
        ..IngestOptions::default()
    };
    let src = [Source::history(tmp.path().display().to_string())];
    let (parts, ing) = ingest::ingest_parts(&src, &opts).expect("ingest");
    assert!(parts.len() > 1, "{} partitions", parts.len());
    let union = tessera::frames::Frames::union(parts.iter().map(|p| p.frames.clone())).unwrap();
    let (_, last) = ing.time_range().unwrap();
    let range = (last - 86_400_000, last);
    let analysis = advisor::analyze(&union, &Params::default(), Some(range), vec![], &[]).unwrap();
    let input = ReportInput {
        analysis: &analysis,
        range,
        ingest: &ing,
        sources: vec![],
        prices: Prices::default(),
        tz: chrono_tz::Europe::Berlin,
        top: 10,
    };
    let whole = report::build(&union, &input).unwrap();
    assert!(whole.previous_period.is_some());
    assert!(whole.by_node.len() > 1 && whole.by_model.len() > 1);
    let whole = serde_json::to_string_pretty(&whole).unwrap();
    let frames: Vec<&tessera::frames::Frames> = parts.iter().map(|p| &p.frames).collect();
    let parted =
        serde_json::to_string_pretty(&report::build_parts(&frames, &input).unwrap()).unwrap();
    assert!(whole == parted, "partitioned report differs");
    let reversed: Vec<&tessera::frames::Frames> = frames.iter().rev().copied().collect();
    let back =
        serde_json::to_string_pretty(&report::build_parts(&reversed, &input).unwrap()).unwrap();
    assert!(whole == back, "out-of-order partitions differ");

    use tessera::mig_planner::demand::{self, DemandParams};
    let dp = DemandParams::default();
    let d = demand::extract(&union, &dp).unwrap();
    assert!(!d.workloads.is_empty());
    let dump = |d: &demand::Demand| {
        format!(
            "{:?} {:?} {:?} {:?}",
            d.workloads, d.measured, d.fleet, d.notes
        )
    };
    assert_eq!(
        dump(&d),
        dump(&demand::extract_parts(&frames, &dp).unwrap())
    );
    assert_eq!(
        dump(&d),
        dump(&demand::extract_parts(&reversed, &dp).unwrap())
    );

    // The one pass (each partition read once for the detectors, the tallies and the demand, as
    // `tessera report` runs) gives the analysis of the rows after the start, the report and
    // the demand of the unions; in and out of node order.
    let params = Params {
        tz: chrono_tz::Europe::Berlin,
        ..Params::default()
    };
    let current = union.within(range.0, range.1);
    let d = dump(&demand::extract(&current, &dp).unwrap());
    for order in [&frames, &reversed] {
        // The analysis as `tessera report` ran it before: partition by partition (in this
        // order), each partition's rows after the start.
        let analysis = advisor::analyze_parts(
            order
                .iter()
                .map(|f| Ok::<_, advisor::AdvisorError>(f.within(range.0, range.1))),
            &params,
            Some(range),
            vec![],
            &[],
        )
        .unwrap();
        let input = |analysis| ReportInput {
            analysis,
            range,
            ingest: &ing,
            sources: vec![],
            prices: Prices::default(),
            tz: chrono_tz::Europe::Berlin,
            top: 10,
        };
        let whole =
            serde_json::to_string_pretty(&report::build(&union, &input(&analysis)).unwrap())
                .unwrap();
        let pass = report::pass::run(
            order,
            range,
            &params,
            Prices::default(),
            vec![],
            &dp,
            &|_| {},
        )
        .unwrap();
        assert!(
            serde_json::to_string_pretty(&pass.analysis).unwrap()
                == serde_json::to_string_pretty(&analysis).unwrap(),
            "the one pass's analysis differs"
        );
        let r = pass.tally.finish(order, &input(&pass.analysis)).unwrap();
        assert!(
            whole == serde_json::to_string_pretty(&r).unwrap(),
            "the one pass's report differs"
        );
        assert_eq!(dump(&pass.demand), d);
    }

    // A partition that cannot be read fails the pass with its error, and the workers that
    // hold later partitions (waiting for it to be folded first) stop: no hang. (Without the
    // abort, this test fails on its timeout.)
    let bad = tessera::frames::Frames {
        gpu: polars::prelude::IntoLazy::lazy(polars::prelude::df!("x" => [1i64]).unwrap()),
        ..tessera::frames::Frames::empty()
    };
    // More partitions after it than the tally prepares ahead of the next one to fold.
    let mut with_bad: Vec<tessera::frames::Frames> = (0..3)
        .flat_map(|_| frames.iter().map(|f| (*f).clone()))
        .collect();
    with_bad.insert(1, bad);
    let (tx, rx) = std::sync::mpsc::channel();
    // A detached thread: a hang fails the test (below) instead of blocking it.
    let params = params.clone();
    std::thread::spawn(move || {
        let refs: Vec<&tessera::frames::Frames> = with_bad.iter().collect();
        let r = report::pass::run(
            &refs,
            range,
            &params,
            Prices::default(),
            vec![],
            &DemandParams::default(),
            &|_| {},
        );
        let _ = tx.send(r.err().map(|e| e.to_string()));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the pass hangs on a bad partition");
    let e = got.expect("a bad partition is an error");
    assert!(e.contains("node") || e.contains("not found"), "{e}");
}
