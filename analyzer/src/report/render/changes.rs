//! The text report's "Changes" sections (`crate::changes`): what was found (or that nothing
//! was), each change's events, and for each compared change the fleet before and after, then
//! by node and by team. Builds [`Section`]s only, like [`super::sections`].

use super::{Section, pct, thousands};
use crate::changes::{Change, KeyedPeriods, PeriodUsage};
use crate::report::Report;

/// At most this many events are printed per change (the JSON has up to 50).
const EVENT_LINES: usize = 12;

/// The sections of the report's `changes`; none when they were not computed.
pub fn changes(r: &Report) -> Vec<Section> {
    let Some(c) = &r.changes else {
        return Vec::new();
    };
    let mut head = Section {
        title: "Changes".into(),
        ..Section::default()
    };
    head.lines.push(c.summary.clone());
    let mut out = vec![head];
    for ch in &c.changes {
        out.extend(change(r, ch, c.settle_hours));
    }
    out
}

fn money(r: &Report, x: f64) -> String {
    format!("{} {}", thousands(x, 2), r.prices.currency)
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or("unknown".into(), |v| thousands(v, decimals))
}

fn signed(x: f64, decimals: usize) -> String {
    let s = thousands(x, decimals);
    if x > 0.0 && s.chars().any(|c| c.is_ascii_digit() && c != '0') {
        format!("+{s}")
    } else {
        s
    }
}

fn change(r: &Report, ch: &Change, settle: f64) -> Vec<Section> {
    let mut s = Section {
        title: format!("Change at {}", ch.at),
        ..Section::default()
    };
    s.lines.push(format!(
        "{} GPU(s) changed MIG mode or layout, {} workload(s) moved.",
        ch.gpus_changed, ch.workloads_moved
    ));
    // The events as the section's list (after its table).
    for e in ch.events.iter().take(EVENT_LINES) {
        s.after
            .push(format!("{} {}: {} ({})", e.at, e.subject, e.detail, e.kind));
    }
    if ch.events_total > EVENT_LINES {
        s.after
            .push(format!("… and {} more", ch.events_total - EVENT_LINES));
    }
    let Some(cmp) = &ch.comparison else {
        if let Some(n) = &ch.note {
            s.lines.push(n.clone());
        }
        return vec![s];
    };
    s.lines.push(format!(
        "Equal periods of {} h compared, {} h around the change left out: before {} .. {}, after {} .. {}.",
        thousands(cmp.hours, 1),
        thousands(settle, 1),
        cmp.before.from,
        cmp.before.until,
        cmp.after.from,
        cmp.after.until
    ));
    s.header = ["fleet", "before", "after", "change"]
        .map(String::from)
        .to_vec();
    s.rows = fleet_rows(r, &cmp.fleet);
    if let Some(w) = &cmp.work {
        s.lines.push(w.explanation.clone());
    }
    for w in &cmp.work_per_gpu_hour {
        s.lines.push(format!("Work per GPU-hour, {}", work_line(w)));
    }
    if let Some(p) = &cmp.predicted {
        s.after.push(format!(
            "Predicted by {} (replayed {} .. {}, {}): {} GPU(s) freed ({} → {}); realized: {}{}.",
            p.plan,
            p.replayed_from,
            p.replayed_until,
            p.verdict,
            p.gpus_freed_predicted,
            p.gpus_before_predicted,
            p.gpus_after_predicted,
            p.gpus_freed_realized
                .map_or("unknown".into(), |v| format!("{v:.1} GPU(s) freed")),
            match (p.energy_kw_saved_predicted, p.energy_kw_saved_realized) {
                (Some(a), Some(b)) => format!("; energy saved {b:.2} kW, {a:.2} kW predicted"),
                _ => String::new(),
            }
        ));
        for e in &p.explanation {
            s.after.push(if p.large_difference {
                format!("Large difference: {e}.")
            } else {
                format!("{e}.")
            });
        }
        for w in &p.work_per_gpu_hour {
            s.after.push(format!(
                "Beside the prediction, work per GPU-hour, {}",
                work_line(w)
            ));
        }
    }
    let mut nodes = Section {
        title: format!("Change at {}: by node", ch.at),
        header: [
            "node",
            "GPUs in use",
            "idle GPU-h",
            "free GPU-h",
            "kWh",
            "cost",
        ]
        .map(String::from)
        .to_vec(),
        ..Section::default()
    };
    nodes.rows = cmp
        .by_node
        .iter()
        .map(|k| {
            vec![
                k.key.clone(),
                arrow(k.before.gpus_in_use, k.after.gpus_in_use, 1),
                arrow(k.before.gpu_hours_idle, k.after.gpu_hours_idle, 1),
                arrow(k.before.gpu_hours_free, k.after.gpu_hours_free, 1),
                arrow(k.before.energy_kwh, k.after.energy_kwh, 1),
                format!(
                    "{} → {}",
                    money_opt(r, k.before.cost_total),
                    money_opt(r, k.after.cost_total)
                ),
            ]
        })
        .collect();
    let mut teams = Section {
        title: format!("Change at {}: by team", ch.at),
        header: ["team", "processes", "GPU-h", "idle GPU-h", "kWh", "cost"]
            .map(String::from)
            .to_vec(),
        ..Section::default()
    };
    teams.rows = cmp
        .by_team
        .iter()
        .map(|t| {
            vec![
                t.team.clone(),
                format!("{} → {}", t.before.processes, t.after.processes),
                arrow(Some(t.before.gpu_hours), Some(t.after.gpu_hours), 1),
                arrow(t.before.gpu_hours_idle, t.after.gpu_hours_idle, 1),
                arrow(t.before.energy_kwh, t.after.energy_kwh, 1),
                format!(
                    "{} → {}",
                    money(r, t.before.cost_total),
                    money(r, t.after.cost_total)
                ),
            ]
        })
        .collect();
    if teams.rows.is_empty() {
        teams
            .lines
            .push("No process rows in the compared periods: no team breakdown.".into());
    } else {
        teams.after.push(
            "GPU-h: each GPU's rows split evenly between the processes on it (as in By team)."
                .into(),
        );
    }
    vec![s, nodes, teams]
}

fn arrow(b: Option<f64>, a: Option<f64>, decimals: usize) -> String {
    format!("{} → {}", opt(b, decimals), opt(a, decimals))
}

fn money_opt(r: &Report, x: Option<f64>) -> String {
    x.map_or("unknown".into(), |v| money(r, v))
}

fn signed_opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or("unknown".into(), |v| signed(v, decimals))
}

fn fleet_rows(r: &Report, k: &KeyedPeriods) -> Vec<Vec<String>> {
    let (b, a, d) = (&k.before, &k.after, &k.delta);
    let row = |name: &str, f: &dyn Fn(&PeriodUsage) -> String, change: String| {
        vec![name.to_string(), f(b), f(a), change]
    };
    vec![
        row(
            "GPUs in use (mean)",
            &|u| opt(u.gpus_in_use, 2),
            signed_opt(d.gpus_in_use, 2),
        ),
        row(
            "GPU-hours in use",
            &|u| opt(u.gpu_hours_in_use, 1),
            signed_opt(d.gpu_hours_in_use, 1),
        ),
        row(
            "GPU-hours of work",
            &|u| opt(u.gpu_hours_busy, 1),
            signed_opt(d.gpu_hours_busy, 1),
        ),
        row(
            "idle GPU-hours (in use, not working)",
            &|u| opt(u.gpu_hours_idle, 1),
            signed_opt(d.gpu_hours_idle, 1),
        ),
        row(
            "free GPU-hours",
            &|u| opt(u.gpu_hours_free, 1),
            signed_opt(d.gpu_hours_free, 1),
        ),
        row(
            "allocation utilization",
            &|u| pct(u.allocation_utilization),
            String::new(),
        ),
        row(
            "work utilization",
            &|u| pct(u.work_utilization),
            String::new(),
        ),
        row(
            "energy, kWh",
            &|u| opt(u.energy_kwh, 1),
            signed_opt(d.energy_kwh, 1),
        ),
        row(
            "cost (GPU-hours in use + energy)",
            &|u| money_opt(r, u.cost_total),
            d.cost_total.map_or("unknown".into(), |c| {
                format!("{} {}", signed(c, 2), r.prices.currency)
            }),
        ),
    ]
}

/// One team's work per GPU-hour before and after a change: `team (unit): B before, A after
/// (±N%)`, and the flag when it fell by more than `crate::work::DROP_FLAGGED`.
fn work_line(w: &crate::work::WorkChange) -> String {
    let v = |x: Option<f64>| x.map_or("unknown".into(), |v| thousands(v, 0));
    format!(
        "{} ({}): {} before, {} after{}{}",
        w.team,
        w.unit,
        v(w.before),
        v(w.after),
        w.change
            .map_or(String::new(), |c| format!(" ({:+.0}%)", c * 100.0)),
        if w.flagged {
            format!(
                ": flagged: it fell by more than {:.0}%, so what this change freed is not a plain saving (docs/work.md).",
                crate::work::DROP_FLAGGED * 100.0
            )
        } else {
            ".".into()
        }
    )
}
