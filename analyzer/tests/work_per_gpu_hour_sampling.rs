//! Work per GPU-hour at other sampling rates (issue 60; docs/work.md "In the report"), through a
//! real Prometheus (Debian's; fails, never skips, without it): one simulated day of two H100s,
//! ml-a/trainer-0 holding GPU 0 and ml-b/trainer-1 GPU 1 all day, beside a declared counter
//! (`--work-metrics`) of each pod whose rate changes every hour (2 + 0.5 × (hour mod 5) steps a
//! second), scraped every 60 s (trainer-0) and every 15 s (trainer-1), each scrape's time moved by
//! up to ±20% of the interval, with missed scrapes: a gap of several minutes inside an hour and
//! one longer than an hour, which covers a whole hour. The report's range starts and ends
//! mid-hour (00:30 to 23:30).
//!
//! The truth is computed here from the planted samples, independently of tessera: per whole
//! hour, the planted steps (rate × 3600) and what Prometheus' `increase` makes of the samples
//! inside it (the extrapolation Prometheus documents, written out below: a gap at an hour's
//! edge is an estimate, not the planted count). The report must give, per hour, that
//! estimate over the hour's GPU-hour; within 2.5% of the planted steps where no gap touches the
//! hour's edges (the several-minute gap inside an hour included); the hour inside the long gap
//! unknown (`null`, left out of the hours counted), never 0; and only the whole hours of the
//! range (01:00 to 23:00: the half hours at each end are not counted, by design).

use serde_json::Value;

use crate::support::openmetrics::{self as om, DAY_MS, openmetrics_with_holders, rfc3339};
use crate::support::prometheus as prom;

const SCENARIO: &str = r#"
name = "work-sampling"
seed = 61
start = "2026-11-02T00:00:00Z"

[[nodes]]
name = "k8s-1"
gpus = [{ model = "H100-80GB", count = 2 }]

[[workloads]]
name = "trainer-a"
kind = "inference"
node = "k8s-1"
gpu = 0
memory_gib = 30
peak = 0.7
base = 0.2
namespace = "ml-a"
pod = "trainer-0"

[[workloads]]
name = "trainer-b"
kind = "inference"
node = "k8s-1"
gpu = 1
memory_gib = 30
peak = 0.7
base = 0.2
namespace = "ml-b"
pod = "trainer-1"
"#;

const HOUR: i64 = 3_600_000;
const MIN: i64 = 60_000;

/// The planted rate in hour `h` of the day (steps a second).
fn rate(h: i64) -> f64 {
    2.0 + 0.5 * (h % 5) as f64
}

/// The planted count at `t` ms after the day's start.
fn count(t: i64) -> f64 {
    let h = t / HOUR;
    (0..h).map(|i| rate(i) * 3600.0).sum::<f64>() + rate(h) * (t - h * HOUR) as f64 / 1000.0
}

/// A scrape time's jitter: up to ±20% of `every` ms, from a fixed hash of the scrape number.
fn jitter(every: i64) -> impl Fn(i64) -> i64 {
    move |k| {
        let x = (k.wrapping_mul(2_654_435_761) ^ 0x5bd1_e995) % 401;
        (x - 200) * every / 1000
    }
}

/// What Prometheus 2's `increase(x[1h])` at `end` gives of `samples` (ms, value): the samples
/// in `[end − 1h, end]`, fewer than two → unknown; else the last − the first (no reset here),
/// extrapolated to the range's edges where the first or last sample is within 1.1 average
/// intervals of them (half an interval otherwise), the start capped at the counter's zero.
fn increase(samples: &[(i64, f64)], end: i64) -> Option<f64> {
    let inside: Vec<&(i64, f64)> = samples
        .iter()
        .filter(|(t, _)| *t >= end - HOUR && *t <= end)
        .collect();
    if inside.len() < 2 {
        return None;
    }
    let (first, last) = (inside[0], inside[inside.len() - 1]);
    let result = last.1 - first.1;
    let mut to_start = (first.0 - (end - HOUR)) as f64 / 1000.0;
    let to_end = (end - last.0) as f64 / 1000.0;
    let sampled = (last.0 - first.0) as f64 / 1000.0;
    let avg = sampled / (inside.len() - 1) as f64;
    if result > 0.0 && first.1 >= 0.0 {
        to_start = to_start.min(sampled * (first.1 / result));
    }
    let threshold = avg * 1.1;
    let mut interval = sampled;
    interval += if to_start < threshold {
        to_start
    } else {
        avg / 2.0
    };
    interval += if to_end < threshold {
        to_end
    } else {
        avg / 2.0
    };
    Some(result * interval / sampled)
}

struct Pod {
    namespace: &'static str,
    pod: &'static str,
    every: i64,
    /// A gap of several minutes inside an hour, and one longer than an hour (ms after start).
    short_gap: (i64, i64),
    long_gap: (i64, i64),
    /// The whole hour (its end) the long gap covers.
    unknown_hour_end: i64,
}

fn figure<'a>(w: &'a Value, list: &str, namespace: &str) -> &'a Value {
    w[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["namespace"] == namespace && f["unit"] == "steps")
        .unwrap_or_else(|| panic!("{namespace}: {w:#}"))
}

#[test]
fn work_per_gpu_hour_at_60s_and_15s_with_jitter_and_gaps_counts_whole_hours_only() {
    prom::require_tools();
    let tmp = tempfile::tempdir().expect("tmp");
    let (gpu, mig, process, since) = om::simulate(tmp.path(), SCENARIO, "work-sampling");
    let mut text = openmetrics_with_holders(&gpu, &mig, &process, &["k8s-1"]);
    text.truncate(text.len() - "# EOF\n".len());
    let pods = [
        Pod {
            namespace: "ml-a",
            pod: "trainer-0",
            every: MIN,
            short_gap: (5 * HOUR + 20 * MIN, 5 * HOUR + 27 * MIN),
            long_gap: (9 * HOUR + 50 * MIN, 11 * HOUR + 10 * MIN),
            unknown_hour_end: 11 * HOUR,
        },
        Pod {
            namespace: "ml-b",
            pod: "trainer-1",
            every: 15_000,
            short_gap: (14 * HOUR + 33 * MIN, 14 * HOUR + 41 * MIN),
            long_gap: (17 * HOUR + 55 * MIN, 19 * HOUR + 5 * MIN),
            unknown_hour_end: 19 * HOUR,
        },
    ];
    let mut planted = Vec::new();
    for p in &pods {
        let labels = format!("namespace=\"{}\",pod=\"{}\"", p.namespace, p.pod);
        planted.push(om::sampled_counter(
            &mut text,
            ("trainer_steps_total", &labels),
            (since, DAY_MS, p.every),
            &jitter(p.every),
            &[p.short_gap, p.long_gap],
            &count,
        ));
    }
    text.push_str("# EOF\n");
    let server = prom::serve(tmp.path(), &text);
    let file = tmp.path().join("work.toml");
    std::fs::write(
        &file,
        "[[work]]\nunit = \"steps\"\ncounter = \"trainer_steps_total\"\n",
    )
    .unwrap();
    // Mid-hour at both ends: 00:30 to 23:30.
    let (from, to) = (
        rfc3339(since + 30 * MIN),
        rfc3339(since + 23 * HOUR + 30 * MIN),
    );
    let src = format!("prometheus:{}", server.url);
    let declared = ["--work-metrics", file.to_str().unwrap()];
    let json = crate::support::cli::report(&src, (&from, &to), "10s", "json", &declared);
    let r: Value = serde_json::from_str(&json).unwrap();
    let w = &r["work"];
    // The whole hours of the range end at 02:00 … 23:00 (00:30–01:00 and 23:00–23:30 are not
    // whole); 2026-11-02 is a Monday, so an hour's slot of the week is its hour of the day.
    let whole: Vec<i64> = (2..=23).map(|h| h * HOUR).collect();
    for (p, samples) in pods.iter().zip(&planted) {
        let team = figure(w, "teams", p.namespace);
        let slots = team["hour_of_week"].as_array().unwrap();
        let mut expected_work = 0.0;
        for slot in 0..168i64 {
            let end = (slot + 1) * HOUR;
            let got = slots[slot as usize].as_f64();
            if !whole.contains(&end) {
                assert_eq!(got, None, "{}: hour ending {end} is not whole", p.namespace);
                continue;
            }
            if end == p.unknown_hour_end {
                assert!(
                    increase(samples, end).is_none(),
                    "the long gap covers the hour"
                );
                assert!(
                    slots[slot as usize].is_null(),
                    "{}: unknown, never 0",
                    p.namespace
                );
                continue;
            }
            let estimate = increase(samples, end).expect("samples in a whole hour");
            let got = got.unwrap_or_else(|| panic!("{}: hour ending {end}: {team:#}", p.namespace));
            // One GPU held the whole hour: per GPU-hour is the hour's work (the held GPU-hour
            // read from 10 s rows, within 1%).
            assert!(
                (got - estimate).abs() <= estimate * 0.01,
                "{}: hour ending {end}: {got} vs increase's {estimate}",
                p.namespace
            );
            let truth = rate(end / HOUR - 1) * 3600.0;
            let edge_gap = [p.long_gap].iter().any(|(a, b)| {
                (*a < end && *b > end - HOUR) || (*a - p.every * 2 < end && *a >= end - HOUR)
            });
            if !edge_gap {
                assert!(
                    (got - truth).abs() <= truth * 0.025,
                    "{}: hour ending {end}: {got} vs the planted {truth}",
                    p.namespace
                );
            }
            expected_work += estimate;
        }
        let pod = w["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["pod"] == p.pod)
            .unwrap_or_else(|| panic!("{}: {w:#}", p.pod));
        for f in [team, pod] {
            assert_eq!(f["hours"], whole.len() as u64 - 1, "{f:#}");
            let work = f["work"].as_f64().unwrap();
            assert!(
                (work - expected_work).abs() <= expected_work * 0.001,
                "{}: {work} vs Σ increase {expected_work}",
                p.namespace
            );
            let gpu_hours = f["gpu_hours"].as_f64().unwrap();
            assert!((gpu_hours - 21.0).abs() < 0.05, "{f:#}");
        }
    }
}
