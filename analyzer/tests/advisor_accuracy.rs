//! Advisor accuracy against the simulator's ground truth, on three scenarios:
//! - `demo` (MIG on an A100 and an H100, every workload kind, a few faults), 7 days;
//! - `advisor-faults` (a lost GPU, a driver outage, failing process reads, noise, an observable
//!   idle MIG slice, a model just under 1 GiB) plus an hour of history deleted, 7 days;
//! - `offpeak` (planted free capacity on weekday nights and weekends, UTC+1), 14 days.
//!
//! Idle-loaded models are scored per workload and per minute (precision and recall ≥ 0.95);
//! busy-but-not-working GPUs must match the truth; every consolidation group must stay within
//! capacity on the raw history rows; the planted off-peak windows must be found. Scores are
//! printed (`cargo test -p tessera --test tests advisor_accuracy:: -- --nocapture`).
//!
//! Truth minutes that no data can show are taken out before scoring: windows of `gpu_lost`,
//! `driver_error` and `nvml_error` on process or memory reads, deleted history hours, and idle
//! workloads on MIG slices of GPUs without GPM (no per-instance activity exists there).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use chrono::DateTime;
use polars::prelude::*;
use serde_json::Value;
use tessera::advisor::{self, Analysis, Params, offpeak::MinGpus};
use tessera::frames::Frames;
use tessera::ingest::{self, IngestOptions, Source};
use tessera::scenario;
use tessera_core::sim::{self, truth::GroundTruth};
use tessera_core::simulate::simulate;

fn scenario_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/scenarios")
        .join(format!("{name}.toml"))
}

struct Run {
    truth: GroundTruth,
    frames: Frames,
    range: Option<(i64, i64)>,
    analysis: Analysis,
    /// Hours deleted per node (unix hour index).
    deleted: BTreeMap<String, BTreeSet<i64>>,
    _dir: tempfile::TempDir,
}

/// Rewrites a day file of history without the rows of `hour` (hours since the epoch, by `ts`);
/// returns 1 when rows were dropped.
fn drop_hour(path: &std::path::Path, hour: i64) -> usize {
    let read = || {
        ParquetReader::new(std::fs::File::open(path).unwrap())
            .finish()
            .unwrap()
    };
    let before = read().height();
    let mut df = read()
        .lazy()
        .filter((col("ts") / lit(3_600_000i64)).neq(lit(hour)))
        .collect()
        .unwrap();
    if df.height() == before {
        return 0;
    }
    ParquetWriter::new(std::fs::File::create(path).unwrap())
        .with_compression(ParquetCompression::Zstd(None))
        .finish(&mut df)
        .unwrap();
    1
}

/// Simulates `days` of a scenario into history, optionally deletes hourly files, ingests and
/// analyses it.
fn run(name: &str, days: u32, step_ms: i64, delete: &[(&str, &str)], params: &Params) -> Run {
    let s = sim::load_scenario(Some(&scenario_path(name))).expect("scenario");
    let truth = scenario::truth(&s, days).expect("truth");
    let dir = tempfile::tempdir().expect("tempdir");
    simulate(&s, days, dir.path(), step_ms, step_ms).expect("simulate");
    let mut deleted: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for (node, hour) in delete {
        let t = DateTime::parse_from_rfc3339(&format!("{hour}:00:00Z")).expect("hour");
        // Finished days are compacted into day files: the hour's rows are cut out of them.
        let mut dropped = 0;
        for table in ["gpu", "mig", "process"] {
            let d = dir.path().join(node).join(table);
            let hourly = d.join(format!("{hour}.parquet"));
            let day = d.join(format!("{}.parquet", &hour[..10]));
            if hourly.exists() {
                std::fs::remove_file(&hourly).expect("delete hour");
                dropped += 1;
            } else if day.exists() {
                dropped += drop_hour(&day, t.timestamp() / 3600);
            }
        }
        assert!(dropped > 0, "{node} {hour}: nothing to delete");
        deleted
            .entry((*node).to_string())
            .or_default()
            .insert(t.timestamp() / 3600);
    }
    let (frames, report) = ingest::ingest(
        &[Source::history(dir.path().display().to_string())],
        &IngestOptions::default(),
    )
    .expect("ingest");
    let analysis =
        advisor::analyze(&frames, params, report.time_range(), vec![], &[]).expect("analyze");
    // The same analysis one node at a time (what `tessera analyze` runs) gives the same result.
    let (parts, report_parts) = ingest::ingest_parts(
        &[Source::history(dir.path().display().to_string())],
        &IngestOptions::default(),
    )
    .expect("ingest parts");
    assert!(parts.len() > 1, "{name}: expected one partition per node");
    assert_eq!(report_parts.tables, report.tables);
    let by_node = advisor::analyze_parts(
        parts
            .into_iter()
            .map(|p| Ok::<_, advisor::AdvisorError>(p.frames)),
        params,
        report_parts.time_range(),
        vec![],
        &[],
    )
    .expect("analyze by node");
    assert_eq!(
        serde_json::to_value(&by_node).unwrap(),
        serde_json::to_value(&analysis).unwrap(),
        "{name}: analysis by node differs from the analysis of the whole fleet"
    );
    Run {
        truth,
        frames,
        range: report.time_range(),
        analysis,
        deleted,
        _dir: dir,
    }
}

fn secs(v: &Value) -> i64 {
    DateTime::parse_from_rfc3339(v.as_str().expect("time"))
        .expect("rfc3339")
        .timestamp()
}

/// GPU uuid → model name, from the frames.
fn models(frames: &Frames) -> BTreeMap<String, String> {
    let df = frames
        .gpu
        .clone()
        .select([col("uuid"), col("model")])
        .unique(None, UniqueKeepStrategy::Any)
        .collect()
        .expect("models");
    let u = df.column("uuid").unwrap().str().unwrap().clone();
    let m = df.column("model").unwrap().str().unwrap().clone();
    (0..df.height())
        .filter_map(|i| Some((u.get(i)?.to_string(), m.get(i)?.to_string())))
        .collect()
}

struct Scores {
    entity_precision: f64,
    entity_recall: f64,
    time_precision: f64,
    time_recall: f64,
    detail: String,
}

/// Scores the idle-loaded findings against the truth.
fn score_idle(r: &Run) -> Scores {
    let models = models(&r.frames);
    // Minutes no data can show, per (node, gpu); gpu None = the whole node.
    let mut blind: Vec<(String, Option<u32>, i64, i64)> = Vec::new();
    for f in &r.truth.faults {
        let v = serde_json::to_value(f).unwrap();
        let kind = v["kind"].as_str().unwrap_or("");
        let field = v["field"].as_str().unwrap_or("");
        let relevant = kind == "gpu_lost"
            || kind == "driver_error"
            || (kind == "nvml_error" && matches!(field, "processes" | "memory"));
        if !relevant {
            continue;
        }
        let at = f.at.map_or(i64::MIN, |t| t.timestamp());
        let until = f.until.map_or(i64::MAX, |t| t.timestamp());
        let gpu = if kind == "driver_error" { None } else { f.gpu };
        blind.push((f.node.clone(), gpu, at, until));
    }
    for (node, hours) in &r.deleted {
        for h in hours {
            blind.push((node.clone(), None, h * 3600, (h + 1) * 3600));
        }
    }
    let is_blind = |node: &str, gpu: u32, t: i64| {
        blind
            .iter()
            .any(|(n, g, a, b)| n == node && g.is_none_or(|g| g == gpu) && t + 60 > *a && t < *b)
    };
    // Truth minutes per workload name, observable only, in runs ≥ 60 min.
    let mut truth_min: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for s in &r.truth.idle_loaded {
        let w = r
            .truth
            .workloads
            .iter()
            .find(|w| w.name == s.workload)
            .unwrap();
        let model = models.get(&w.gpu_uuid).cloned().unwrap_or_default();
        let no_gpm = model.contains("A100") || model.contains("A30");
        if w.mig_uuid.is_some() && no_gpm {
            continue;
        }
        let mut run: Vec<i64> = Vec::new();
        let mut keep = |run: &mut Vec<i64>| {
            if run.len() >= 60 {
                truth_min
                    .entry(w.name.clone())
                    .or_default()
                    .extend(run.iter().copied());
            }
            run.clear();
        };
        let mut t = s.start.timestamp();
        while t < s.end.timestamp() {
            if is_blind(&w.node, w.gpu, t) {
                keep(&mut run);
            } else {
                run.push(t / 60);
            }
            t += 60;
        }
        keep(&mut run);
    }
    // Findings → workload names.
    let mut det_min: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    let mut unmatched = Vec::new();
    let findings: Vec<_> = r
        .analysis
        .findings
        .iter()
        .filter(|f| f.detector == "idle_loaded")
        .collect();
    for f in &findings {
        let e = &f.entity;
        let w = r.truth.workloads.iter().find(|w| {
            Some(&w.node) == e.node.as_ref()
                && Some(w.gpu) == e.gpu
                && match (e.pid, &e.mig_uuid) {
                    (Some(pid), _) => pid == w.pid,
                    (None, Some(m)) => w.mig_uuid.as_ref() == Some(m),
                    (None, None) => w.mig_uuid.is_none(),
                }
        });
        let Some(w) = w else {
            unmatched.push(f.summary.clone());
            continue;
        };
        let set = det_min.entry(w.name.clone()).or_default();
        for s in f.evidence.to_json()["spans"].as_array().unwrap() {
            let (a, b) = (secs(&s["start"]), secs(&s["end"]));
            let mut m = a.div_euclid(60);
            while m * 60 < b {
                if m * 60 + 30 >= a && m * 60 + 30 < b {
                    set.insert(m);
                }
                m += 1;
            }
        }
    }
    let (mut inter, mut det, mut tru) = (0usize, 0usize, 0usize);
    let mut detail = String::new();
    let names: BTreeSet<&String> = truth_min.keys().chain(det_min.keys()).collect();
    for n in names {
        let t = truth_min.get(n).cloned().unwrap_or_default();
        let d = det_min.get(n).cloned().unwrap_or_default();
        let i = t.intersection(&d).count();
        detail.push_str(&format!(
            "    {n}: truth {} min, detected {} min, both {i}\n",
            t.len(),
            d.len()
        ));
        inter += i;
        det += d.len();
        tru += t.len();
    }
    for u in &unmatched {
        detail.push_str(&format!("    unmatched finding: {u}\n"));
    }
    let found = truth_min
        .keys()
        .filter(|n| det_min.contains_key(*n))
        .count();
    let ratio = |a: usize, b: usize| if b == 0 { 1.0 } else { a as f64 / b as f64 };
    Scores {
        entity_precision: ratio(findings.len() - unmatched.len(), findings.len()),
        entity_recall: ratio(found, truth_min.len()),
        time_precision: ratio(inter, det),
        time_recall: ratio(inter, tru),
        detail,
    }
}

/// Busy-not-working: the GPUs of truth spans adding up to ≥ 60 min vs the findings.
fn check_busy(r: &Run) {
    let mut truth: BTreeMap<(String, u32), i64> = BTreeMap::new();
    for s in &r.truth.busy_not_working {
        *truth.entry((s.node.clone(), s.gpu)).or_default() +=
            s.end.timestamp() - s.start.timestamp();
    }
    let truth: BTreeSet<(String, u32)> = truth
        .into_iter()
        .filter(|(_, d)| *d >= 3600)
        .map(|(k, _)| k)
        .collect();
    let found: BTreeSet<(String, u32)> = r
        .analysis
        .findings
        .iter()
        .filter(|f| f.detector == "busy_not_working")
        .map(|f| (f.entity.node.clone().unwrap(), f.entity.gpu.unwrap()))
        .collect();
    println!("  busy-not-working: truth {truth:?}, found {found:?}");
    assert_eq!(found, truth, "busy-not-working GPUs differ from the truth");
}

/// Every consolidation group stays within capacity on the raw rows (memory and activity summed
/// at the same timestamps); no GPU is planned twice.
fn check_consolidation(r: &Run) -> usize {
    let mut seen = BTreeSet::new();
    let mut groups = 0;
    for f in r
        .analysis
        .findings
        .iter()
        .filter(|f| f.detector == "consolidation")
    {
        let cap_gib = f.evidence.to_json()["capacity_gib"].as_f64().unwrap();
        for bin in f.evidence.to_json()["plan"].as_array().unwrap() {
            groups += 1;
            let members: Vec<(String, String)> = bin["workloads"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| {
                    (
                        w["uuid"].as_str().unwrap().to_string(),
                        w["activity_source"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            for (u, _) in &members {
                assert!(seen.insert(u.clone()), "GPU {u} planned twice");
            }
            let uuids: Vec<String> = members.iter().map(|(u, _)| u.clone()).collect();
            let act = when(col("sm_active_max").is_not_null())
                .then(col("sm_active_max"))
                .otherwise(col("busy_max"));
            let df = r
                .frames
                .gpu
                .clone()
                .filter(
                    uuids
                        .iter()
                        .map(|u| col("uuid").eq(lit(u.clone())))
                        .reduce(|a, b| a.or(b))
                        .unwrap(),
                )
                .group_by([col("ts")])
                .agg([
                    col("memory_used_max_bytes")
                        .cast(DataType::Float64)
                        .sum()
                        .alias("mem"),
                    act.sum().alias("act"),
                ])
                .select([col("mem").max(), col("act").max()])
                .collect()
                .unwrap();
            let mem = df.column("mem").unwrap().f64().unwrap().get(0).unwrap();
            let act = df.column("act").unwrap().f64().unwrap().get(0).unwrap();
            println!(
                "  consolidation group of {}: raw combined peak {:.1} GiB of {cap_gib:.1}, activity max {act:.3}",
                members.len(),
                mem / (1u64 << 30) as f64
            );
            assert!(
                mem / (1u64 << 30) as f64 <= cap_gib + 1e-6,
                "memory over capacity"
            );
            assert!(act <= 1.0 + 1e-9, "activity over capacity");
        }
    }
    groups
}

fn assert_idle(name: &str, r: &Run) {
    let s = score_idle(r);
    println!(
        "{name}: idle-loaded entity precision {:.3} recall {:.3}; per-minute precision {:.3} recall {:.3}\n{}",
        s.entity_precision, s.entity_recall, s.time_precision, s.time_recall, s.detail
    );
    for (what, v) in [
        ("entity precision", s.entity_precision),
        ("entity recall", s.entity_recall),
        ("per-minute precision", s.time_precision),
        ("per-minute recall", s.time_recall),
    ] {
        assert!(v >= 0.95, "{name}: idle-loaded {what} {v:.3} < 0.95");
    }
}

#[test]
fn demo_scenario_with_mig() {
    let r = run("demo", 7, 10_000, &[], &Params::default());
    assert_idle("demo", &r);
    assert!(
        !r.truth.idle_loaded.is_empty(),
        "the demo plants idle-loaded models"
    );
    check_busy(&r);
    let groups = check_consolidation(&r);
    assert!(groups >= 1, "the demo has a consolidation opportunity");
    check_demo_offpeak(&r);

    // Row order does not matter: the detectors match rows by entity and time (cursors over
    // sorted series, combined MIG rows), so reversed or shuffled tables give the same analysis.
    let reorder = |lf: &LazyFrame, shuffle: bool| -> LazyFrame {
        let df = lf.clone().collect().expect("collect");
        let n = df.height().max(1) as i64;
        if !shuffle {
            return df.reverse().lazy();
        }
        df.lazy()
            .with_row_index("i", None)
            .sort_by_exprs(
                [(col("i").cast(DataType::Int64) * lit(7_919i64)) % lit(n)],
                SortMultipleOptions::default(),
            )
            .drop(cols(["i"]))
    };
    let expected = serde_json::to_value(&r.analysis).unwrap();
    for shuffle in [false, true] {
        let frames = Frames {
            gpu: reorder(&r.frames.gpu, shuffle),
            mig: reorder(&r.frames.mig, shuffle),
            process: reorder(&r.frames.process, shuffle),
        };
        let a = advisor::analyze(&frames, &Params::default(), r.range, vec![], &[])
            .expect("analyze reordered");
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            expected,
            "rows {} change the analysis",
            if shuffle { "shuffled" } else { "reversed" }
        );
    }
}

#[test]
fn faults_gaps_and_noise() {
    let r = run(
        "advisor-faults",
        7,
        10_000,
        &[("node-b", "2026-11-05T10"), ("node-a", "2026-11-06T03")],
        &Params::default(),
    );
    assert_idle("advisor-faults", &r);
    // The lost GPU splits the idle model's span: at least two spans, none across the outage.
    let f = r
        .analysis
        .findings
        .iter()
        .find(|f| f.detector == "idle_loaded" && f.entity.pod.as_deref() == Some("llm-eval-0"))
        .expect("idle-llm found");
    let evidence = f.evidence.to_json();
    let spans = evidence["spans"].as_array().unwrap();
    assert!(
        spans.len() >= 2,
        "the outage must split the span: {spans:?}"
    );
    let lost = DateTime::parse_from_rfc3339("2026-11-03T11:00:00Z")
        .unwrap()
        .timestamp();
    assert!(
        spans
            .iter()
            .all(|s| !(secs(&s["start"]) < lost && secs(&s["end"]) > lost)),
        "no span may cover the lost GPU"
    );
    // Under 1 GiB is never reported.
    assert!(
        !r.analysis
            .findings
            .iter()
            .any(|f| f.detector == "idle_loaded" && f.summary.contains("node-b/GPU1 pid")),
        "almost-1gib must not be a finding"
    );
    check_busy(&r);
    check_consolidation(&r);
}

/// The demo's always-free capacity (gpu-node-3's two A100-40GB GPUs have no workload but a
/// Saturday fine-tune and two lost hours; others take turns being free) is a baseline finding
/// with model names, and no window is "always" or lacks start and stop times.
fn check_demo_offpeak(r: &Run) {
    let offpeak: Vec<&advisor::Finding> = r
        .analysis
        .findings
        .iter()
        .filter(|f| f.detector == "offpeak_window")
        .collect();
    println!(
        "demo offpeak: {}",
        serde_json::to_string_pretty(&offpeak).unwrap()
    );
    let baseline: Vec<&&advisor::Finding> = offpeak
        .iter()
        .filter(|f| f.evidence.to_json()["type"] == "baseline")
        .collect();
    assert_eq!(baseline.len(), 1, "one baseline finding: {offpeak:?}");
    let b = &baseline[0].evidence.to_json();
    let gpus = b["gpus"].as_u64().unwrap();
    assert!(gpus >= 1, "{b}");
    let fleet_models: BTreeSet<String> = models(&r.frames).into_values().collect();
    let by_model = b["by_model"].as_array().unwrap();
    assert!(!by_model.is_empty(), "{b}");
    let mut named = 0;
    for m in by_model {
        let name = m["model"].as_str().unwrap();
        assert!(fleet_models.contains(name), "{name} is not a fleet model");
        assert!(
            baseline[0].summary.contains(name),
            "{name} not in {:?}",
            baseline[0].summary
        );
        named += m["gpus"].as_u64().unwrap();
    }
    assert_eq!(
        named + b["unattributed_gpus"].as_u64().unwrap(),
        gpus,
        "the models add up to the baseline: {b}"
    );
    assert!(
        by_model
            .iter()
            .any(|m| m["model"] == "NVIDIA A100-SXM4-40GB"),
        "gpu-node-3's A100-40GBs are nearly always free: {b}"
    );
    assert!(
        baseline[0].summary.contains("over-provisioned"),
        "{}",
        baseline[0].summary
    );
    // Windows: above the baseline, with start and stop lines, never around the clock.
    let nslots = if b["period"] == "week" { 168 } else { 24 };
    for f in offpeak
        .iter()
        .filter(|f| f.evidence.to_json()["type"] != "baseline")
    {
        let e = &f.evidence.to_json();
        assert_eq!(e["type"], "window");
        assert!(!f.summary.contains("always"), "{}", f.summary);
        assert!(e["hours"].as_u64().unwrap() < nslots, "{e}");
        assert_eq!(e["baseline_gpus"].as_u64().unwrap(), gpus);
        assert!(
            e["expected_free_gpus"].as_u64().unwrap() >= gpus + e["min_gpus"].as_u64().unwrap(),
            "{e}"
        );
        for k in ["cron_start", "cron_end"] {
            let line = e[k].as_str().unwrap();
            assert!(line.starts_with("CRON_TZ=UTC 0 "), "{k}: {line}");
            assert!(!line.contains("@reboot"), "{k}: {line}");
        }
        for k in ["systemd_start", "systemd_end"] {
            let line = e[k].as_str().unwrap();
            assert!(
                line.starts_with("OnCalendar=") && line.ends_with(":00:00 UTC"),
                "{k}: {line}"
            );
        }
    }
}

#[test]
fn offpeak_windows_are_found() {
    let params = Params {
        tz: "Europe/Berlin".parse().unwrap(),
        offpeak: advisor::offpeak::OffpeakParams {
            min_gpus: MinGpus::Count(4),
            ..Default::default()
        },
        ..Params::default()
    };
    let r = run("offpeak", 14, 60_000, &[], &params);
    let evidence: Vec<Value> = r
        .analysis
        .findings
        .iter()
        .filter(|f| f.detector == "offpeak_window")
        .map(|f| f.evidence.to_json())
        .collect();
    println!(
        "offpeak (weekly): {}",
        serde_json::to_string_pretty(&evidence).unwrap()
    );
    // The two inference GPUs are never free: no baseline, only windows.
    assert!(
        evidence.iter().all(|e| e["type"] == "window"),
        "no GPU is free around the clock: {evidence:?}"
    );
    let windows = evidence;
    let find = |days: &[&str], start: &str, end: &str, hours: u64| {
        windows
            .iter()
            .find(|w| {
                w["days"] == serde_json::json!(days)
                    && w["start"] == start
                    && w["end"] == end
                    && w["hours"] == hours
            })
            .unwrap_or_else(|| {
                panic!("no window {days:?} {start}-{end} ({hours} h) in {windows:?}")
            })
    };
    // The six notebook GPUs are free on weekday nights and over the weekend alike: one tier
    // (6 free, 6 above a baseline of 0) with two schedule entries.
    let nights = find(&["Mon", "Tue", "Wed", "Thu"], "18:00", "09:00", 15);
    assert_eq!(nights["period"], "week");
    assert_eq!(nights["tier"], 1);
    assert_eq!(nights["expected_free_gpus"], 6);
    assert_eq!(nights["above_baseline"], 6);
    assert_eq!(nights["baseline_gpus"], 0);
    assert_eq!(
        nights["cron_start"],
        "CRON_TZ=Europe/Berlin 0 18 * * 1,2,3,4"
    );
    assert_eq!(nights["cron_end"], "CRON_TZ=Europe/Berlin 0 9 * * 2,3,4,5");
    assert_eq!(
        nights["systemd_start"],
        "OnCalendar=Mon..Thu *-*-* 18:00:00 Europe/Berlin"
    );
    assert_eq!(
        nights["systemd_end"],
        "OnCalendar=Tue..Fri *-*-* 09:00:00 Europe/Berlin"
    );
    let weekend = find(&["Fri"], "18:00", "09:00", 63);
    assert_eq!(weekend["tier"], 1);
    assert_eq!(weekend["expected_free_gpus"], 6);
    assert_eq!(weekend["end_days"], serde_json::json!(["Mon"]));
    assert_eq!(weekend["cron_start"], "CRON_TZ=Europe/Berlin 0 18 * * 5");
    assert_eq!(weekend["cron_end"], "CRON_TZ=Europe/Berlin 0 9 * * 1");
    assert_eq!(
        weekend["systemd_start"],
        "OnCalendar=Fri *-*-* 18:00:00 Europe/Berlin"
    );
    assert_eq!(
        weekend["systemd_end"],
        "OnCalendar=Mon *-*-* 09:00:00 Europe/Berlin"
    );
    assert_eq!(windows.len(), 2, "only the planted windows: {windows:?}");
    let data = &r
        .analysis
        .detectors
        .iter()
        .find(|d| d.id == "offpeak_window")
        .unwrap()
        .data;
    assert_eq!(data["baseline"]["gpus"], 0);
    assert_eq!(data["tiers"].as_array().unwrap().len(), 1);

    // The first week alone is less than two weeks: an hour-of-day profile, where weekday
    // working hours are busy on 5 of 7 days, so only the nights qualify.
    let week1 = tessera::frames::Frames {
        gpu: r.frames.gpu.clone().filter(
            // 2026-11-02T00:00Z + 7 days
            col("ts")
                .cast(DataType::Int64)
                .lt(lit(1_793_577_600_000i64 + 7 * 86_400_000)),
        ),
        mig: r.frames.mig.clone(),
        process: r.frames.process.clone(),
    };
    let a = advisor::analyze(&week1, &params, None, vec![], &["offpeak_window".into()])
        .expect("analyze week 1");
    let daily: Vec<Value> = a.findings.iter().map(|f| f.evidence.to_json()).collect();
    println!(
        "offpeak (daily, first week): {}",
        serde_json::to_string_pretty(&daily).unwrap()
    );
    assert_eq!(daily.len(), 1, "{daily:?}");
    assert_eq!(daily[0]["type"], "window");
    assert_eq!(daily[0]["period"], "day");
    assert_eq!(daily[0]["start"], "18:00");
    assert_eq!(daily[0]["end"], "09:00");
    assert_eq!(daily[0]["expected_free_gpus"], 6);
    assert_eq!(daily[0]["cron_start"], "CRON_TZ=Europe/Berlin 0 18 * * *");
    assert_eq!(daily[0]["cron_end"], "CRON_TZ=Europe/Berlin 0 9 * * *");
    assert_eq!(
        daily[0]["systemd_start"],
        "OnCalendar=*-*-* 18:00:00 Europe/Berlin"
    );
    assert_eq!(
        daily[0]["systemd_end"],
        "OnCalendar=*-*-* 09:00:00 Europe/Berlin"
    );
}
