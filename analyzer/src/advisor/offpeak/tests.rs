//! Tests of the off-peak detector: the profile, baseline, tiers, schedule lines and findings.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Datelike, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use polars::prelude::{DataFrame, IntoLazy, df};

use super::*;

/// 2026-11-02T00:00Z (a Monday) as an hour index.
const MON: i64 = 1_793_577_600 / 3600;
const H100: &str = "NVIDIA H100 80GB HBM3";
const A100: &str = "NVIDIA A100-SXM4-80GB";

fn params(k: u32) -> Params {
    Params {
        offpeak: OffpeakParams {
            min_gpus: MinGpus::Count(k),
            ..OffpeakParams::default()
        },
        ..Params::default()
    }
}

/// One model's free counts per UTC hour.
fn one_model(m: BTreeMap<i64, u32>, gpus: usize) -> FreeGpus {
    FreeGpus {
        per_hour: m
            .into_iter()
            .map(|(h, f)| (h, BTreeMap::from([("gpu".to_string(), f)])))
            .collect(),
        gpus: BTreeMap::from([("gpu".to_string(), gpus)]),
    }
}

/// `hours` hours from Monday 00:00 local time in `tz`; `f(local slot of the week)` gives the
/// free GPUs per model.
fn local_hours(
    tz: Tz,
    hours: i64,
    gpus: &[(&str, usize)],
    f: impl Fn(usize) -> Vec<(&'static str, u32)>,
) -> FreeGpus {
    let start = tz
        .with_ymd_and_hms(2026, 11, 2, 0, 0, 0)
        .unwrap()
        .timestamp()
        / 3600;
    let mut out = FreeGpus {
        gpus: gpus.iter().map(|&(m, g)| (m.to_string(), g)).collect(),
        ..FreeGpus::default()
    };
    for h in start..start + hours {
        let local = DateTime::<Utc>::from_timestamp(h * 3600, 0)
            .unwrap()
            .with_timezone(&tz);
        let slot = local.weekday().num_days_from_monday() as usize * 24 + local.hour() as usize;
        out.per_hour.insert(
            h,
            f(slot)
                .into_iter()
                .filter(|&(_, n)| n > 0)
                .map(|(m, n)| (m.to_string(), n))
                .collect(),
        );
    }
    out
}

fn finish(free: FreeGpus, params: &Params) -> DetectorOutput {
    OffPeak.finish(vec![Box::new(free)], params).unwrap()
}

#[test]
fn baseline_and_nights_and_weekend_tiers() {
    // 10 GPUs (6 H100, 4 A100) over 3 weeks in Berlin: one of each model is free all the
    // time; nights Mon–Thu 19:00–07:00 add 4 H100s (6 free); the weekend, Fri 19:00 –
    // Mon 07:00, adds 4 H100s and 2 A100s (8 free).
    let tz: Tz = "Europe/Berlin".parse().unwrap();
    let free = local_hours(tz, 21 * 24, &[(H100, 6), (A100, 4)], |s| {
        let (d, h) = (s / 24, s % 24);
        let weekend = (d == 4 && h >= 19) || d >= 5 || (d == 0 && h < 7);
        let night = ((0..=3).contains(&d) && h >= 19) || ((1..=4).contains(&d) && h < 7);
        if weekend {
            vec![(H100, 5), (A100, 3)]
        } else if night {
            vec![(H100, 5), (A100, 1)]
        } else {
            vec![(H100, 1), (A100, 1)]
        }
    });
    let mut params = params(2);
    params.tz = tz;
    let p = profile(&free, &params);
    assert_eq!(p.period, "week");
    assert_eq!(p.gpus_observed, 10);
    assert_eq!(p.baseline.gpus, 2);
    assert_eq!(
        p.baseline.by_model,
        vec![
            ModelGpus {
                model: A100.into(),
                gpus: 1,
                gpus_observed: 4
            },
            ModelGpus {
                model: H100.into(),
                gpus: 1,
                gpus_observed: 6
            },
        ]
    );
    let levels: Vec<(u32, u32)> = p
        .tiers
        .iter()
        .map(|t| (t.free_gpus, t.above_baseline))
        .collect();
    assert_eq!(levels, vec![(6, 4), (8, 6)]);
    // The nights alone at 6 (the weekend keeps its shape at 8, so it is reported there).
    let shape = |t: &Tier| -> Vec<(usize, u32)> {
        t.windows.iter().map(|w| (w.start_slot, w.hours)).collect()
    };
    assert_eq!(
        shape(&p.tiers[0]),
        vec![(19, 12), (43, 12), (67, 12), (91, 12)]
    );
    assert_eq!(shape(&p.tiers[1]), vec![(4 * 24 + 19, 60)]);
    assert_eq!(p.tiers[0].gpu_hours, 4 * 12 * 4);
    assert!(p.tiers_left_out.is_empty());
    // All off-peak time (≥ B + K free): the nights and the weekend.
    assert_eq!(p.windows.len(), 5);
    assert_eq!(p.windows[4].expected_free_gpus, 8);

    let s = schedule(&p, tz.name());
    assert_eq!(s.len(), 2);
    let (n, w) = (&s[0], &s[1]);
    assert_eq!((n.tier, n.expected_free_gpus, n.above_baseline), (1, 6, 4));
    assert_eq!(n.days, vec!["Mon", "Tue", "Wed", "Thu"]);
    assert_eq!(n.end_days, vec!["Tue", "Wed", "Thu", "Fri"]);
    assert_eq!(
        (n.start.as_str(), n.end.as_str(), n.hours),
        ("19:00", "07:00", 12)
    );
    assert_eq!(n.label, "Mon–Thu 19:00–07:00");
    assert_eq!(n.cron_start, "CRON_TZ=Europe/Berlin 0 19 * * 1,2,3,4");
    assert_eq!(n.cron_end, "CRON_TZ=Europe/Berlin 0 7 * * 2,3,4,5");
    assert_eq!(
        n.systemd_start,
        "OnCalendar=Mon..Thu *-*-* 19:00:00 Europe/Berlin"
    );
    assert_eq!(
        n.systemd_end,
        "OnCalendar=Tue..Fri *-*-* 07:00:00 Europe/Berlin"
    );
    assert_eq!((w.tier, w.expected_free_gpus, w.above_baseline), (2, 8, 6));
    assert_eq!(
        (w.days.clone(), w.end_days.clone()),
        (vec!["Fri"], vec!["Mon"])
    );
    assert_eq!(w.label, "Fri 19:00–Mon 07:00");
    assert_eq!(w.cron_start, "CRON_TZ=Europe/Berlin 0 19 * * 5");
    assert_eq!(w.cron_end, "CRON_TZ=Europe/Berlin 0 7 * * 1");
    assert_eq!(
        w.systemd_start,
        "OnCalendar=Fri *-*-* 19:00:00 Europe/Berlin"
    );
    assert_eq!(w.systemd_end, "OnCalendar=Mon *-*-* 07:00:00 Europe/Berlin");

    // The findings: the baseline (over-provisioning, with the models), then the tiers.
    let out = finish(free, &params);
    let types: Vec<String> = out
        .findings
        .iter()
        .map(|f| f.evidence.to_json()["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(types, ["baseline", "window", "window"]);
    let b = &out.findings[0];
    assert_eq!(b.id, finding_id("offpeak_window", &["baseline"]));
    assert_eq!(b.severity, Severity::Warning);
    assert_eq!(b.evidence.to_json()["gpus"], 2);
    assert_eq!(b.evidence.to_json()["by_model"][1]["model"], H100);
    assert!(
        b.summary.contains(&format!(
            "2 of 10 GPU(s) free all week in ≥ 90% of observed weeks: 1 × {A100}, 1 × {H100}"
        )),
        "{}",
        b.summary
    );
    assert!(b.action.starts_with("release or repurpose"), "{}", b.action);
    let night = &out.findings[1];
    assert_eq!(night.evidence.to_json()["tier"], 1);
    assert_eq!(night.evidence.to_json()["expected_free_gpus"], 6);
    assert_eq!(night.evidence.to_json()["above_baseline"], 4);
    assert_eq!(night.evidence.to_json()["baseline_gpus"], 2);
    assert_eq!(
        night.evidence.to_json()["systemd_start"],
        "OnCalendar=Mon..Thu *-*-* 19:00:00 Europe/Berlin"
    );
    assert!(
        night
            .summary
            .starts_with("Mon–Thu 19:00–07:00 Europe/Berlin (12 h): ≥ 6 GPU(s) free (4 more than the 2 free all week)"),
        "{}",
        night.summary
    );
    let ids: BTreeSet<&str> = out.findings.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids.len(), 3);
    let text = serde_json::to_string(&out).unwrap();
    assert!(
        !text.contains("@reboot") && !text.contains("always"),
        "{text}"
    );
    assert_eq!(out.data["baseline"]["gpus"], 2);
    assert_eq!(out.data["tiers"].as_array().unwrap().len(), 2);
}

#[test]
fn without_a_baseline_windows_cross_midnight() {
    // 10 days (a daily profile): 4 GPUs free 20:00–06:00, none by day.
    let m: BTreeMap<i64, u32> = (0..240)
        .map(|h| (MON + h, if (6..20).contains(&(h % 24)) { 0 } else { 4 }))
        .collect();
    let mut q = params(1);
    q.offpeak.min_gpus = MinGpus::Share(0.1);
    let p = profile(&one_model(m.clone(), 4), &q);
    assert_eq!((p.period, p.k, p.baseline.gpus), ("day", 1, 0));
    assert!(p.baseline.by_model.is_empty());
    assert_eq!(p.tiers.len(), 1);
    assert_eq!((p.tiers[0].free_gpus, p.tiers[0].above_baseline), (4, 4));
    let s = schedule(&p, "UTC");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].label, "every day 20:00–06:00");
    assert!(s[0].days.is_empty());
    assert_eq!(s[0].hours, 10);
    assert_eq!(s[0].cron_start, "CRON_TZ=UTC 0 20 * * *");
    assert_eq!(s[0].cron_end, "CRON_TZ=UTC 0 6 * * *");
    assert_eq!(s[0].systemd_start, "OnCalendar=*-*-* 20:00:00 UTC");
    assert_eq!(s[0].systemd_end, "OnCalendar=*-*-* 06:00:00 UTC");
    let out = finish(one_model(m, 4), &q);
    assert_eq!(out.findings.len(), 1);
    assert_eq!(out.findings[0].evidence.to_json()["type"], "window");
    assert!(
        out.findings[0]
            .summary
            .starts_with("every day 20:00–06:00 UTC (10 h): ≥ 4 GPU(s) free in 100%"),
        "{}",
        out.findings[0].summary
    );
}

#[test]
fn capacity_free_all_the_time_is_the_baseline_not_a_window() {
    // 3 of 5 GPUs free at every hour of 3 weeks, the others never.
    let m: BTreeMap<i64, u32> = (0..21 * 24).map(|h| (MON + h, 3)).collect();
    let p = profile(&one_model(m.clone(), 5), &params(1));
    assert_eq!(p.baseline.gpus, 3);
    assert!(p.windows.is_empty() && p.tiers.is_empty());
    let out = finish(one_model(m, 5), &params(1));
    assert_eq!(out.findings.len(), 1, "{:?}", out.findings);
    assert_eq!(out.findings[0].evidence.to_json()["type"], "baseline");
    assert_eq!(out.findings[0].evidence.to_json()["by_model"][0]["gpus"], 3);
    assert!(
        out.findings[0]
            .summary
            .starts_with("3 of 5 GPU(s) free all week in ≥ 90% of observed weeks: 3 × gpu"),
        "{}",
        out.findings[0].summary
    );
    let text = serde_json::to_string(&out).unwrap();
    assert!(!text.contains("@reboot"), "{text}");
    // Every GPU free all the time: the same. No data: nothing.
    let m: BTreeMap<i64, u32> = (0..48).map(|h| (MON + h, 5)).collect();
    let p = profile(&one_model(m, 5), &params(1));
    assert_eq!((p.baseline.gpus, p.windows.len()), (5, 0));
    let p = profile(&FreeGpus::default(), &params(1));
    assert_eq!((p.baseline.gpus, p.windows.len()), (0, 0));
    assert!(finish(FreeGpus::default(), &params(1)).findings.is_empty());
}

#[test]
fn window_wraps_sunday_to_monday() {
    // 3 weeks, 2 GPUs free Sun 22:00 – Mon 04:00, none otherwise.
    let m: BTreeMap<i64, u32> = (0..21 * 24)
        .map(|h| {
            let slot = (h % 168) as usize;
            (MON + h, if !(4..166).contains(&slot) { 2 } else { 0 })
        })
        .collect();
    let p = profile(&one_model(m, 2), &params(1));
    assert_eq!(p.period, "week");
    assert_eq!(
        p.windows,
        vec![Window {
            start_slot: 166,
            hours: 6,
            expected_free_gpus: 2,
            above_baseline: 2,
            confidence: 1.0
        }]
    );
    let s = schedule(&p, "UTC");
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].days.clone(), s[0].end_days.clone()),
        (vec!["Sun"], vec!["Mon"])
    );
    assert_eq!(s[0].label, "Sun 22:00–04:00");
    assert_eq!(s[0].cron_start, "CRON_TZ=UTC 0 22 * * 0");
    assert_eq!(s[0].cron_end, "CRON_TZ=UTC 0 4 * * 1");
    assert_eq!(s[0].systemd_start, "OnCalendar=Sun *-*-* 22:00:00 UTC");
    assert_eq!(s[0].systemd_end, "OnCalendar=Mon *-*-* 04:00:00 UTC");
}

#[test]
fn weekend_window_wraps_around_the_week() {
    // 3 weeks: free 8 GPUs from Fri 20:00 to Mon 06:00, 0 otherwise.
    let mut m = BTreeMap::new();
    for h in 0..21 * 24 {
        let slot = (h % 168) as usize;
        let free = !(6..4 * 24 + 20).contains(&slot);
        m.insert(MON + h, if free { 8 } else { 0 });
    }
    let p = profile(&one_model(m, 8), &params(4));
    assert_eq!(p.period, "week");
    assert_eq!(
        p.windows,
        vec![Window {
            start_slot: 4 * 24 + 20,
            hours: 58,
            expected_free_gpus: 8,
            above_baseline: 8,
            confidence: 1.0
        }]
    );
    let s = schedule(&p, "UTC");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].label, "Fri 20:00–Mon 06:00");
    assert_eq!(s[0].cron_start, "CRON_TZ=UTC 0 20 * * 5");
    assert_eq!(s[0].cron_end, "CRON_TZ=UTC 0 6 * * 1");
}

#[test]
fn short_runs_and_unreliable_hours_are_not_windows() {
    // 10 days, hour-of-day mode, 1 GPU always free: 02:00–05:00 5 free (3 h, too short);
    // 12:00–18:00 5 free on only 8 of 10 days (< 90%).
    let mut m = BTreeMap::new();
    for d in 0..10 {
        for h in 0..24 {
            let free = (2..5).contains(&h) || ((12..18).contains(&h) && d < 8);
            m.insert(MON + d * 24 + h, if free { 5 } else { 1 });
        }
    }
    let p = profile(&one_model(m.clone(), 8), &params(4));
    assert_eq!((p.period, p.baseline.gpus), ("day", 1));
    assert!(p.windows.is_empty(), "{:?}", p.windows);
    // At P = 0.8 the afternoon qualifies.
    let mut q = params(4);
    q.offpeak.min_share = 0.8;
    let p = profile(&one_model(m, 8), &q);
    assert_eq!(p.windows.len(), 1);
    assert_eq!((p.windows[0].start_slot, p.windows[0].hours), (12, 6));
    assert_eq!(p.windows[0].confidence, 0.8);
    assert_eq!(p.windows[0].above_baseline, 4);
}

#[test]
fn a_window_barely_longer_than_a_higher_tier_is_left_out() {
    // 10 days: 4 GPUs free 17:00–07:00, 3 until 08:00, none by day. The 3-GPU window adds
    // one hour (< 4) to the 4-GPU one: one tier. 5 free 20:00–02:00 adds a tier inside it
    // (6 h), and the 4-GPU window around it still adds 8 h of its own.
    let free = |h: i64| match h % 24 {
        20..=23 | 0..=1 => 5,
        17..=19 | 2..=6 => 4,
        7 => 3,
        _ => 0,
    };
    let m: BTreeMap<i64, u32> = (0..240).map(|h| (MON + h, free(h))).collect();
    let p = profile(&one_model(m, 6), &params(1));
    let tiers: Vec<(u32, Vec<(usize, u32)>)> = p
        .tiers
        .iter()
        .map(|t| {
            (
                t.free_gpus,
                t.windows.iter().map(|w| (w.start_slot, w.hours)).collect(),
            )
        })
        .collect();
    assert_eq!(tiers, vec![(4, vec![(17, 14)]), (5, vec![(20, 6)])]);
    // The off-peak time as a whole is still 17:00–08:00.
    assert_eq!(
        p.windows
            .iter()
            .map(|w| (w.start_slot, w.hours, w.expected_free_gpus))
            .collect::<Vec<_>>(),
        vec![(17, 15, 3)]
    );
}

#[test]
fn at_most_three_tiers_the_rest_in_a_note() {
    // 10 days, free GPUs rising by hour: 0 (00–04), 1 (04–08), 2, 3, 4, 5 (20–24). Nested
    // windows at five levels; GPU-hours added: 20, 32, 36, 32, 20.
    let m: BTreeMap<i64, u32> = (0..240).map(|h| (MON + h, (h % 24 / 4) as u32)).collect();
    let p = profile(&one_model(m.clone(), 5), &params(1));
    let kept: Vec<(u32, u64)> = p.tiers.iter().map(|t| (t.free_gpus, t.gpu_hours)).collect();
    assert_eq!(kept, vec![(2, 32), (3, 36), (4, 32)]);
    let out: Vec<(u32, u64)> = p
        .tiers_left_out
        .iter()
        .map(|t| (t.free_gpus, t.gpu_hours))
        .collect();
    assert_eq!(out, vec![(1, 20), (5, 20)]);
    assert_eq!(
        (
            p.windows[0].start_slot,
            p.windows[0].hours,
            p.windows[0].expected_free_gpus
        ),
        (4, 20, 1)
    );
    let d = finish(one_model(m, 5), &params(1));
    assert_eq!(d.findings.len(), 3);
    assert!(
        d.notes.iter().any(|n| n.starts_with("2 more tier(s)")),
        "{:?}",
        d.notes
    );
}

#[test]
fn baseline_models_that_take_turns() {
    // 10 days, one GPU of each of two models: A free 00–12, B free 12–24. One GPU is free
    // around the clock, but neither model on its own.
    let turns = |free_a: &dyn Fn(i64) -> bool, free_b: &dyn Fn(i64) -> bool| FreeGpus {
        per_hour: (0..240)
            .map(|h| {
                let mut m = BTreeMap::new();
                if free_a(h) {
                    m.insert("A".to_string(), 1);
                }
                if free_b(h) {
                    m.insert("B".to_string(), 1);
                }
                (MON + h, m)
            })
            .collect(),
        gpus: BTreeMap::from([("A".to_string(), 1), ("B".to_string(), 1)]),
    };
    let f = turns(&|h| h % 24 < 12, &|h| h % 24 >= 12);
    let p = profile(&f, &params(1));
    assert_eq!(p.baseline.gpus, 1);
    assert!(p.baseline.by_model.is_empty());
    assert_eq!(p.baseline.unattributed(), 1);
    assert_eq!(p.baseline.models_text(), "1 whose model varies by hour");
    // Both free except A on day 0 and B on day 1: each model on its own is free in 9 of 10
    // days (≥ 90%), both at once only in 8: B = 1, the models' own baselines add up to 2.
    let f = turns(&|h| h / 24 != 0, &|h| h / 24 != 1);
    let p = profile(&f, &params(1));
    assert_eq!(p.baseline.gpus, 1);
    assert_eq!(p.baseline.unattributed(), 0);
    assert_eq!(
        p.baseline.models_text(),
        "each model on its own: 1 × A, 1 × B, not all at once"
    );
    assert!(p.windows.is_empty());
}

#[test]
fn free_gpus_are_counted_per_model() {
    let gib = (1u64 << 30) as f64;
    let end = |h: i64| (MON + h + 1) * HOUR_MS;
    // u1 (H100): free, then busy. u2 (no model): free, free, then 10 minutes only.
    // u3: model unknown in its first row, H100 later: free twice.
    let gpu = df!(
        "node" => ["n1", "n1", "n1", "n1", "n1", "n2", "n2"],
        "uuid" => ["u1", "u1", "u2", "u2", "u2", "u3", "u3"],
        "model" => [Some("H100"), Some("H100"), None, None, None, None, Some("H100")],
        "ts" => [end(0), end(1), end(0), end(1), end(2), end(0), end(1)],
        "interval_ms" => [HOUR_MS, HOUR_MS, HOUR_MS, HOUR_MS, 600_000, HOUR_MS, HOUR_MS],
        "sm_active_max" => [Some(0.0), Some(0.9), None, None, None, Some(0.01), Some(0.0)],
        "busy_max" => [Some(0.0), Some(0.9), Some(0.0), Some(0.02), Some(0.0), None, None],
        "memory_used_max_bytes" => [0.0, 10.0 * gib, 0.1 * gib, 0.0, 0.0, 0.0, 0.0],
    )
    .unwrap();
    let frames = Frames {
        gpu: gpu.lazy(),
        mig: DataFrame::empty().lazy(),
        process: DataFrame::empty().lazy(),
    };
    let f = free_gpus_per_hour(&frames, &OffpeakParams::default()).unwrap();
    let m = |v: &[(&str, u32)]| -> BTreeMap<String, u32> {
        v.iter().map(|&(k, n)| (k.to_string(), n)).collect()
    };
    assert_eq!(
        f.gpus,
        BTreeMap::from([("H100".to_string(), 2), (UNKNOWN_MODEL.to_string(), 1)])
    );
    assert_eq!(
        f.per_hour,
        BTreeMap::from([
            (MON, m(&[("H100", 2), (UNKNOWN_MODEL, 1)])),
            (MON + 1, m(&[("H100", 1), (UNKNOWN_MODEL, 1)])),
            (MON + 2, m(&[])),
        ])
    );
    // Partitions merge by adding.
    let mut g = f.clone();
    g.merge(f);
    assert_eq!(g.gpus_observed(), 6);
    assert_eq!(g.totals()[&MON], 6);
}

#[test]
fn min_gpus_parses_counts_and_shares() {
    assert_eq!("4".parse::<MinGpus>(), Ok(MinGpus::Count(4)));
    assert_eq!("25%".parse::<MinGpus>(), Ok(MinGpus::Share(0.25)));
    for bad in ["0", "0%", "101%", "x", "-1", ""] {
        assert!(bad.parse::<MinGpus>().is_err(), "{bad}");
    }
    // A share rounds up and is at least one GPU.
    let mut p = params(1);
    p.offpeak.min_gpus = MinGpus::Share(0.1);
    let m: BTreeMap<i64, u32> = (0..24).map(|h| (MON + h, 2)).collect();
    assert_eq!(profile(&one_model(m.clone(), 11), &p).k, 2);
    assert_eq!(profile(&one_model(m, 3), &p).k, 1);
}
