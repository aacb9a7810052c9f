//! The report's Trend section (`crate::report::trend`): a row per week — its days in the
//! report's time zone, hours with data, work utilization, idle-loaded and allocated-but-unused
//! GPU-hours with their cost, and the week's cost — then what the layout changes found in those
//! weeks save per month. Builds a [`Section`]; laying it out is the callers'.

use super::{Section, money, pct, thousands};
use crate::report::{Report, Trend, TrendWeek};

/// The section, when a trend was asked for.
pub fn section(r: &Report) -> Option<Section> {
    let t = r.trend.as_ref()?;
    let mut s = Section {
        title: format!("Trend — the last {} weeks", t.weeks_asked),
        ..Section::default()
    };
    if t.weeks.len() < 2 {
        s.lines.push(format!(
            "Not enough data for a trend: {} of the last {} weeks {} data, a trend needs two (the data does not reach further back; a Prometheus-compatible source is read {} weeks back only when --since is given, e.g. --since 7d).",
            t.weeks.len(),
            t.weeks_asked,
            if t.weeks.len() == 1 { "has" } else { "have" },
            t.weeks_asked
        ));
        // What a week's own layout changes realized stands without a second week to compare.
        if !t.realized.is_empty() || !t.flagged_left_out.is_empty() {
            s.after = realized_lines(r, t);
        }
        return Some(s);
    }
    s.lines.push(format!(
        "Each week as its own report gives it (7 days back from {}; the idle-loaded and allocated-but-unused figures are the detectors' over that week alone). Money per week.",
        week_day(&r.until, &r.tz)
    ));
    s.header = [
        "week",
        "hours",
        "GPUs",
        "work utilization",
        "idle-loaded GPU-h",
        "allocated, unused GPU-h",
        "cost",
    ]
    .map(String::from)
    .to_vec();
    s.rows = t.weeks.iter().map(|w| row(r, w)).collect();
    s.after = realized_lines(r, t);
    Some(s)
}

/// One week's row.
fn row(r: &Report, w: &TrendWeek) -> Vec<String> {
    let with_cost = |h: Option<f64>, c: Option<f64>, why: &str| match (h, c) {
        (Some(h), Some(c)) => format!("{} ({})", thousands(h, 1), money(r, c)),
        (Some(h), None) => thousands(h, 1),
        _ => format!("unknown ({why})"),
    };
    vec![
        week_label(w, &r.tz),
        thousands(w.hours, 0),
        w.gpus.to_string(),
        match w.work_utilization {
            Some(_) => pct(w.work_utilization),
            None => "unknown (no activity in the data)".into(),
        },
        with_cost(
            w.idle_loaded_gpu_hours,
            w.idle_loaded_cost,
            "no memory used in the data",
        ),
        with_cost(
            w.allocated_unused_gpu_hours,
            w.allocated_unused_cost,
            "no holders in the data",
        ),
        money(r, w.cost),
    ]
}

/// What the changes of the weeks realized, one line each, then the sum.
fn realized_lines(r: &Report, t: &Trend) -> Vec<String> {
    let mut out: Vec<String> = t
        .realized
        .iter()
        .map(|c| {
            format!(
                "Layout change at {}: {} GPU(s) in use fewer on average, {} a month saved as measured (equal periods around it; a negative saving costs more){}.",
                c.at,
                c.gpus_freed
                    .map_or("unknown".into(), |g| thousands(g, 1)),
                c.saving_per_month
                    .map_or("unknown".into(), |m| money(r, m)),
                if c.work_flagged.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; flagged: work per GPU-hour of {} fell by more than {:.0}% at it, so it is not a plain saving and is left out of the sum",
                        c.work_flagged.join(", "),
                        crate::work::DROP_FLAGGED * 100.0
                    )
                }
            )
        })
        .collect();
    let left_out = if t.flagged_left_out.is_empty() {
        String::new()
    } else {
        format!(
            " (left out, flagged by work per GPU-hour: the change(s) at {})",
            t.flagged_left_out.join(", ")
        )
    };
    out.push(match t.realized_saving_per_month {
        Some(m) => format!(
            "Realized by the layout changes of these weeks: {} a month{left_out}.",
            money(r, m)
        ),
        None if !t.flagged_left_out.is_empty() => format!(
            "Realized savings: none counted{left_out}; no other layout change in these weeks could be compared."
        ),
        None => "Realized savings: no layout change in these weeks could be compared.".into(),
    });
    out
}

/// A week's days in the report's zone ("Mon 2 – Sun 8 Nov 2026"), else its RFC 3339 bounds.
pub fn week_label(w: &TrendWeek, tz: &str) -> String {
    match crate::times::period_title(&w.from, &w.until, tz) {
        Some(t) => t
            .strip_suffix(&format!(", {tz}"))
            .map(str::to_string)
            .unwrap_or(t),
        None => format!("{} .. {}", w.from, w.until),
    }
}

/// The day of `until` in the zone ("Mon 9 Nov 2026 00:00, Europe/Berlin").
fn week_day(until: &str, tz: &str) -> String {
    let zone: Option<chrono_tz::Tz> = tz.parse().ok();
    match (chrono::DateTime::parse_from_rfc3339(until), zone) {
        (Ok(t), Some(z)) => format!("{}, {tz}", t.with_timezone(&z).format("%a %-d %b %Y %H:%M")),
        _ => until.to_string(),
    }
}
