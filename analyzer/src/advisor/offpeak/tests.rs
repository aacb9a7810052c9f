//! Tests of the off-peak detector: the profile, baseline, windows and peaks, schedule lines, the
//! cap and the findings.

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
    FreeGpus::fully_observed(
        m.into_iter()
            .map(|(h, f)| (h, BTreeMap::from([("gpu".to_string(), f)])))
            .collect(),
        BTreeMap::from([("gpu".to_string(), gpus)]),
    )
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
    let mut per_hour = BTreeMap::new();
    for h in start..start + hours {
        let local = DateTime::<Utc>::from_timestamp(h * 3600, 0)
            .unwrap()
            .with_timezone(&tz);
        let slot = local.weekday().num_days_from_monday() as usize * 24 + local.hour() as usize;
        per_hour.insert(
            h,
            f(slot)
                .into_iter()
                .filter(|&(_, n)| n > 0)
                .map(|(m, n)| (m.to_string(), n))
                .collect(),
        );
    }
    FreeGpus::fully_observed(
        per_hour,
        gpus.iter().map(|&(m, g)| (m.to_string(), g)).collect(),
    )
}

fn finish(free: FreeGpus, params: &Params) -> DetectorOutput {
    OffPeak.finish(vec![Box::new(free)], params).unwrap()
}

#[test]
fn baseline_nights_and_weekend_windows() {
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
    // All off-peak time (≥ B + K free), each run whole at its own level: the nights at 6, the
    // weekend at 8; no peak inside (K = 2 more nowhere).
    let shape: Vec<(usize, u32, u32)> = p
        .windows
        .iter()
        .map(|w| (w.start_slot, w.hours, w.expected_free_gpus))
        .collect();
    assert_eq!(
        shape,
        vec![
            (19, 12, 6),
            (43, 12, 6),
            (67, 12, 6),
            (91, 12, 6),
            (4 * 24 + 19, 60, 8)
        ]
    );
    assert!(p.windows.iter().all(|w| w.peak.is_none()));

    let sched = schedule(&p, tz.name());
    assert!(sched.left_out.is_empty());
    let s = &sched.entries;
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].gpu_hours, 4 * 12 * 4);
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

    // The findings: the baseline (over-provisioning, with the models), then the windows.
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
    // Every window of the data is a finding.
    let ws = out.data["windows"].as_array().unwrap();
    assert_eq!(ws.len(), 5);
    assert!(ws.iter().all(|w| w["finding"].is_string()), "{ws:?}");
    assert_eq!(ws[4]["label"], "Fri 19:00–Mon 07:00");
    assert!(out.summary.contains("2 window(s)"), "{}", out.summary);
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
    assert_eq!(p.windows.len(), 1);
    assert_eq!(
        (p.windows[0].expected_free_gpus, p.windows[0].above_baseline),
        (4, 4)
    );
    let s = schedule(&p, "UTC").entries;
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
    assert!(p.windows.is_empty());
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
            confidence: 1.0,
            peak: None,
        }]
    );
    let s = schedule(&p, "UTC").entries;
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].days.clone(), s[0].end_days.clone()),
        (vec!["Sun"], vec!["Mon"])
    );
    assert_eq!(s[0].label, "Sun 22:00–Mon 04:00");
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
            confidence: 1.0,
            peak: None,
        }]
    );
    let s = schedule(&p, "UTC").entries;
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
fn a_window_is_reported_whole_at_the_level_that_holds_over_it() {
    // 10 days: 4 GPUs free 17:00–07:00, 3 until 08:00, 5 free 20:00–02:00, none by day. One
    // window, 17:00–08:00 at 3 (the level over all of it), not shortened to a higher level's
    // length; its peak is 17:00–07:00 at 4 (14 GPU-hours beyond 3, more than 20:00–02:00's 12).
    let free = |h: i64| match h % 24 {
        20..=23 | 0..=1 => 5,
        17..=19 | 2..=6 => 4,
        7 => 3,
        _ => 0,
    };
    let m: BTreeMap<i64, u32> = (0..240).map(|h| (MON + h, free(h))).collect();
    let p = profile(&one_model(m.clone(), 6), &params(1));
    assert_eq!(
        p.windows
            .iter()
            .map(|w| (w.start_slot, w.hours, w.expected_free_gpus))
            .collect::<Vec<_>>(),
        vec![(17, 15, 3)]
    );
    let pk = p.windows[0].peak.clone().expect("a peak");
    assert_eq!(
        (pk.start_slot, pk.hours, pk.expected_free_gpus),
        (17, 14, 4)
    );
    let out = finish(one_model(m, 6), &params(1));
    assert_eq!(out.findings.len(), 1);
    let e = out.findings[0].evidence.to_json();
    assert_eq!(
        (e["start"].as_str(), e["end"].as_str()),
        (Some("17:00"), Some("08:00"))
    );
    assert_eq!(e["peaks"][0]["label"], "17:00–07:00");
    assert!(
        out.findings[0]
            .summary
            .contains("more inside it: ≥ 4 17:00–07:00"),
        "{}",
        out.findings[0].summary
    );
}

#[test]
fn a_long_window_is_not_shrunk_to_a_ladder_of_levels() {
    // The daily profile: 192 GPUs, 16 free all day, 20:00–03:00 rising 42, 46, 47, 48,
    // 48, 47, 42: one 7-hour window at 42 (K = 20). 48 is not 20 more than 42: no peak, and
    // 22:00–02:00 is not a window beside it.
    let level = [42, 46, 47, 48, 48, 47, 42];
    let free = |h: i64| {
        let i = (h % 24 + 4) % 24; // 20:00 → 0
        level.get(i as usize).copied().unwrap_or(16)
    };
    let m: BTreeMap<i64, u32> = (0..240).map(|h| (MON + h, free(h))).collect();
    let mut q = params(1);
    q.offpeak.min_gpus = MinGpus::Share(0.1);
    let out = finish(one_model(m, 192), &q);
    let windows: Vec<_> = out
        .findings
        .iter()
        .map(|f| f.evidence.to_json())
        .filter(|e| e["type"] == "window")
        .collect();
    assert_eq!(windows.len(), 1, "{windows:?}");
    let e = &windows[0];
    assert_eq!(
        (e["start"].as_str(), e["end"].as_str(), e["hours"].as_u64()),
        (Some("20:00"), Some("03:00"), Some(7))
    );
    assert_eq!(e["expected_free_gpus"], 42);
    assert_eq!(e["peaks"].as_array().unwrap().len(), 0);
}

#[test]
fn nested_weekend_windows_are_one_finding_and_weekday_windows_their_own() {
    // The weekly case: B = 16 of 192 (K = 20). The weekend Sat 04:00–Mon 11:00 has
    // ≥ 60 free, ≥ 63 from Sat 08:00, ≥ 80 Sat 15:00–Sun 15:00; Tue 01:00–11:00, Wed
    // 02:00–12:00 and Wed 22:00–Thu 10:00 have 38–42 more than B. One finding for the weekend
    // (its peak inside it), one each for the weekday windows; none share an hour.
    let f = |s: usize| -> u32 {
        let (d, h) = (s / 24, s % 24);
        let sat_from = |h0: usize| (d == 5 && h >= h0) || d == 6 || (d == 0 && h < 11);
        if (d == 5 && h >= 15) || (d == 6 && h < 15) {
            80
        } else if sat_from(8) {
            63
        } else if sat_from(4) {
            60
        } else if d == 1 && (1..11).contains(&h) {
            54
        } else if d == 2 && (2..12).contains(&h) {
            56
        } else if (d == 2 && h >= 22) || (d == 3 && h < 10) {
            58
        } else {
            16
        }
    };
    let tz: Tz = "Europe/Berlin".parse().unwrap();
    let free = local_hours(tz, 21 * 24, &[("V100", 192)], |s| vec![("V100", f(s))]);
    let mut q = params(1);
    q.tz = tz;
    q.offpeak.min_gpus = MinGpus::Share(0.1);
    let out = finish(free, &q);
    let ws: Vec<serde_json::Value> = out
        .findings
        .iter()
        .map(|f| f.evidence.to_json())
        .filter(|e| e["type"] == "window")
        .collect();
    let shape: Vec<(String, u64, u64)> = ws
        .iter()
        .map(|e| {
            (
                format!("{} {}", e["days"], e["start"].as_str().unwrap()),
                e["hours"].as_u64().unwrap(),
                e["expected_free_gpus"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("[\"Tue\"] 01:00".to_string(), 10, 54),
            ("[\"Wed\"] 02:00".to_string(), 10, 56),
            ("[\"Wed\"] 22:00".to_string(), 12, 58),
            ("[\"Sat\"] 04:00".to_string(), 55, 60),
        ]
    );
    let peaks = ws[3]["peaks"].as_array().unwrap();
    assert_eq!(peaks.len(), 1);
    assert_eq!(peaks[0]["label"], "Sat 15:00–Sun 15:00");
    assert_eq!(peaks[0]["expected_free_gpus"], 80);
    assert!(out.summary.contains("4 window(s)"), "{}", out.summary);
    assert_eq!(out.data["windows"].as_array().unwrap().len(), 4);
}

#[test]
fn at_most_seven_window_findings_the_rest_named_in_a_note() {
    // 3 weeks, 2 GPUs free in nine distinct windows: on day d from d:00 for 4 + d hours, and
    // on Mon and Tue from 18:00 for 5 and 6 hours. The seven adding the most GPU-hours are
    // findings (ties: the earlier); Mon 00:00–04:00 and Tue 01:00–06:00 are named in a note.
    let m: BTreeMap<i64, u32> = (0..21 * 24)
        .map(|h| {
            let (d, hr) = ((h % 168 / 24) as usize, (h % 24) as usize);
            let early = (d..d + 4 + d).contains(&hr);
            let late = (d == 0 && (18..23).contains(&hr)) || (d == 1 && hr >= 18);
            (MON + h, if early || late { 2 } else { 0 })
        })
        .collect();
    let p = profile(&one_model(m.clone(), 2), &params(1));
    assert_eq!(p.windows.len(), 9);
    let sched = schedule(&p, "UTC");
    assert_eq!(sched.entries.len(), MAX_WINDOW_FINDINGS);
    let left: Vec<&str> = sched.left_out.iter().map(|e| e.label.as_str()).collect();
    assert_eq!(left, vec!["Mon 00:00–04:00", "Tue 01:00–06:00"]);
    let d = finish(one_model(m, 2), &params(1));
    assert_eq!(d.findings.len(), 7);
    assert!(d.summary.contains("7 window(s)"), "{}", d.summary);
    assert!(
        d.summary.contains("(2 more named in a note)"),
        "{}",
        d.summary
    );
    let note = d
        .notes
        .iter()
        .find(|n| n.starts_with("2 more window(s) left out"))
        .expect("a note");
    assert!(
        note.contains("Mon 00:00–04:00 UTC (4 h, ≥ 2 GPU(s) free")
            && note.contains("Tue 01:00–06:00 UTC (5 h"),
        "{note}"
    );
    let ws = d.data["windows"].as_array().unwrap();
    assert_eq!(ws.iter().filter(|w| w["finding"].is_null()).count(), 2);
}

#[test]
fn an_hour_at_the_range_edge_is_no_observation() {
    // 3 weeks with 2 of 4 GPUs free at every hour, and one hour before them covered for 15
    // minutes with nothing free (the row ending at the range's start): not an observation, so
    // the baseline stays 2.
    let m: BTreeMap<i64, u32> = (0..21 * 24).map(|h| (MON + h, 2)).collect();
    let mut f = one_model(m, 4);
    f.per_hour.insert(MON - 1, BTreeMap::new());
    f.cover.insert(
        MON - 1,
        HourCover {
            gpus: 4,
            covered_ms: 4 * 900_000,
        },
    );
    let p = profile(&f, &params(1));
    assert_eq!((p.baseline.gpus, p.hours_unobserved), (2, 1));
    // Counted in, it would be an hour with nothing free.
    f.cover.insert(
        MON - 1,
        HourCover {
            gpus: 4,
            covered_ms: 4 * 1_800_000,
        },
    );
    assert_eq!(profile(&f, &params(1)).baseline.gpus, 0);
}

#[test]
fn baseline_models_that_take_turns() {
    // 10 days, one GPU of each of two models: A free 00–12, B free 12–24. One GPU is free
    // around the clock, but neither model on its own.
    let turns = |free_a: &dyn Fn(i64) -> bool, free_b: &dyn Fn(i64) -> bool| {
        FreeGpus::fully_observed(
            (0..240)
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
            BTreeMap::from([("A".to_string(), 1), ("B".to_string(), 1)]),
        )
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
    // Hour 2 holds 10 minutes of one GPU: no observation.
    assert_eq!(
        f.cover[&MON],
        HourCover {
            gpus: 3,
            covered_ms: 3 * HOUR_MS
        }
    );
    assert_eq!(
        f.cover[&(MON + 2)],
        HourCover {
            gpus: 1,
            covered_ms: 600_000
        }
    );
    assert!(f.observed(MON) && !f.observed(MON + 2));
    assert!(!f.totals().contains_key(&(MON + 2)));
    // Partitions merge by adding.
    let mut g = f.clone();
    g.merge(f);
    assert_eq!(g.gpus_observed(), 6);
    assert_eq!(g.totals()[&MON], 6);
}

#[test]
fn missing_memory_is_judged_on_activity_and_no_signal_is_never_free() {
    // Occupancy-only data: a (busy 0) is free, b (busy 1) is not; c has no signal at all; d
    // has memory but no activity (free on memory alone). A row reaching back into the hour
    // before covers only its part inside its own hour.
    let gib = (1u64 << 30) as f64;
    let end = MON * HOUR_MS + 30 * 60_000;
    let gpu = df!(
        "node" => ["n1", "n1", "n1", "n1"],
        "uuid" => ["a", "b", "c", "d"],
        "model" => [Some("V100"), Some("V100"), Some("V100"), Some("V100")],
        "ts" => [end, end, end, end],
        "interval_ms" => [HOUR_MS, HOUR_MS, HOUR_MS, HOUR_MS],
        "sm_active_max" => [None::<f64>, None, None, None],
        "busy_max" => [Some(0.0), Some(1.0), None, None],
        "memory_used_max_bytes" => [None, None, None, Some(0.1 * gib)],
    )
    .unwrap();
    let frames = Frames {
        gpu: gpu.lazy(),
        mig: DataFrame::empty().lazy(),
        process: DataFrame::empty().lazy(),
    };
    let f = free_gpus_per_hour(&frames, &OffpeakParams::default()).unwrap();
    assert_eq!((f.gpus_without_memory, f.gpus_without_signal), (3, 1));
    assert_eq!(
        f.cover[&MON],
        HourCover {
            gpus: 4,
            covered_ms: 4 * 1_800_000
        }
    );
    assert_eq!(f.per_hour[&MON]["V100"], 2);
    let out = finish(f, &params(1));
    assert!(
        out.notes.iter().any(|n| n.starts_with(
            "memory used is missing for 2 of 4 GPU(s): they are judged free on activity alone"
        )),
        "{:?}",
        out.notes
    );
    assert!(
        out.notes
            .iter()
            .any(|n| n.starts_with("1 of 4 GPU(s) have neither memory used, activity")),
        "{:?}",
        out.notes
    );
    assert_eq!(out.data["gpus_without_memory"], 3);
}

#[test]
fn held_is_never_free_and_holders_alone_say_free() {
    // a: held by a pod, nothing loaded, no activity: not free (the scheduler cannot place work
    // there). b: allocated to nobody, no other signal (occupancy data): free. c: free by
    // allocation but an idle model loaded outside the scheduler: not free. d: holders unknown,
    // idle: free as before. e: held in one row of the hour only: not free in that hour.
    let gib = (1u64 << 30) as f64;
    let end = MON * HOUR_MS + HOUR_MS;
    let half = MON * HOUR_MS + HOUR_MS / 2;
    let gpu = df!(
        "node" => ["n1", "n1", "n1", "n1", "n1", "n1"],
        "uuid" => ["a", "b", "c", "d", "e", "e"],
        "model" => [Some("H100"), None, Some("H100"), Some("H100"), Some("H100"), Some("H100")],
        "ts" => [end, end, end, end, half, end],
        "interval_ms" => [HOUR_MS, HOUR_MS, HOUR_MS, HOUR_MS, HOUR_MS / 2, HOUR_MS / 2],
        "sm_active_max" => [Some(0.0), None, Some(0.0), Some(0.0), Some(0.0), Some(0.0)],
        "busy_max" => [None::<f64>, None, None, None, None, None],
        "memory_used_max_bytes" => [Some(0.1 * gib), None, Some(20.0 * gib), Some(0.1 * gib), Some(0.1 * gib), Some(0.1 * gib)],
        "holders" => [Some(1u32), Some(0), Some(0), None, Some(0), Some(2)],
    )
    .unwrap();
    let frames = Frames {
        gpu: gpu.lazy(),
        mig: DataFrame::empty().lazy(),
        process: DataFrame::empty().lazy(),
    };
    let f = free_gpus_per_hour(&frames, &OffpeakParams::default()).unwrap();
    assert_eq!(f.per_hour[&MON].get("H100"), Some(&1), "only d");
    assert_eq!(f.per_hour[&MON].get(UNKNOWN_MODEL), Some(&1), "b");
    assert_eq!(
        (
            f.gpus_by_allocation_only,
            f.gpus_without_signal,
            f.gpus_without_memory
        ),
        (1, 0, 1)
    );
    let out = finish(f, &params(1));
    assert!(
        out.notes
            .iter()
            .any(|n| n.starts_with("1 of 5 GPU(s) have only the scheduler's allocation")),
        "{:?}",
        out.notes
    );
    assert!(
        !out.notes
            .iter()
            .any(|n| n.starts_with("memory used is missing")),
        "{:?}",
        out.notes
    );
    assert_eq!(out.data["gpus_by_allocation_only"], 1);
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
