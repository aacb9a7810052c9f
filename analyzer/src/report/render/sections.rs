//! [`sections`]: the text report's sections, one function per section (the actions, fleet summary, usage by
//! node and model, teams, work per GPU-hour (`super::work`), idle-loaded models, consolidation, MIG, the layout changes
//! (`super::changes`), off-peak windows, data quality). The cell and line formats are the parent module's helpers (`super`).
//!
//! This module builds [`Section`]s only; laying them out as terminal tables, Markdown or HTML is
//! the callers' ([`super::render_table`], [`super::render_markdown`], `report::html`).

use super::{
    Section, baseline_line, gpm_activity, money, pct, share, signal_name, signed_pct, thousands,
    usage_header, usage_row,
};
use crate::report::{OffpeakWindow, Report, Usage, change};

/// What is said where memory used is absent from the whole range: what needs it is unknown,
/// not zero.
const NO_MEMORY: &str = "unknown: memory used is not in the data";

/// The sections every text format shows, in order.
pub fn sections(r: &Report) -> Vec<Section> {
    let f = &r.fleet;
    // Memory used absent from the whole range: what needs it is unknown, not zero.
    let no_memory = f.gpus > 0 && f.memory_peak_gib.is_none() && f.memory_used_share.is_none();
    let mut v = vec![actions(r), summary(r, no_memory)];
    v.extend(super::trend::section(r));
    v.extend([
        usage("By node", r, &r.by_node),
        usage("By GPU model", r, &r.by_model),
        teams(r),
    ]);
    v.extend(super::work::section(r));
    v.extend([
        idle_models(r, no_memory),
        allocated(r),
        consolidation(r, no_memory),
        mig(r),
    ]);
    v.extend(super::changes::changes(r));
    v.push(offpeak(r));
    v.extend(super::out_of_sample::section(r.out_of_sample.as_deref()));
    v.extend(next_steps(r));
    v.push(data_quality(r));
    v
}

/// Actions: one per workload, most saved first (`crate::actions`), the block every format opens
/// with.
fn actions(r: &Report) -> Section {
    Section {
        title: "Actions — one per workload, most saved per month first".into(),
        lines: crate::actions::lines(&r.actions),
        ..Section::default()
    }
}

/// A key-value row of the summary.
fn kv(k: &str, v: String) -> Vec<String> {
    vec![k.to_string(), v]
}

/// Fleet summary: a key-value table.
fn summary(r: &Report, no_memory: bool) -> Section {
    let mut rows = fleet_rows(r, no_memory);
    rows.extend(money_rows(r, no_memory));
    rows.push(kv("Week over week", week_over_week(r)));
    Section {
        title: "Fleet summary".into(),
        header: vec!["".into(), "".into()],
        rows,
        ..Section::default()
    }
}

/// The summary's GPUs, GPU-hours, activity, memory and energy.
fn fleet_rows(r: &Report, no_memory: bool) -> Vec<Vec<String>> {
    let f = &r.fleet;
    vec![
        kv(
            "GPUs",
            format!(
                "{} on {} node(s), {} model(s)",
                f.gpus,
                r.by_node.len(),
                r.by_model.len()
            ),
        ),
        kv(
            "GPU-hours available",
            format!(
                "{} ({} observed)",
                thousands(f.gpu_hours_available, 0),
                thousands(f.gpu_hours_observed, 0)
            ),
        ),
        kv(
            "GPU-hours in use",
            format!(
                "{} ({} of available; memory held or active — not \"allocated\", which is held by a pod or job)",
                thousands(f.gpu_hours_allocated, 0),
                share(f.gpu_hours_allocated, f.gpu_hours_available)
            ),
        ),
        kv(
            "GPU-hours of work",
            match f.gpu_hours_busy {
                Some(b) => format!(
                    "{} ({} of available; activity × time)",
                    thousands(b, 0),
                    share(b, f.gpu_hours_available)
                ),
                None => "unknown (the data has no activity value)".into(),
            },
        ),
        kv(
            "Activity",
            format!(
                "mean {}, p95 {} ({}){}",
                pct(f.activity_mean),
                pct(f.activity_p95),
                signal_name(&r.activity_signal),
                gpm_activity(f)
            ),
        ),
        kv(
            "Memory",
            if no_memory {
                NO_MEMORY.into()
            } else {
                format!(
                    "{} of memory used on average, peak {} GiB on one GPU",
                    pct(f.memory_used_share),
                    f.memory_peak_gib
                        .map_or("unknown".into(), |p| format!("{p:.1}"))
                )
            },
        ),
        kv(
            "Energy",
            f.energy_kwh
                .map_or("not in the data".into(), |e| match &r.teams.energy {
                    Some(s) => format!(
                        "{} kWh ({} to workloads by share of activity, {} idle)",
                        thousands(e, 1),
                        thousands(s.workloads_kwh, 1),
                        thousands(s.idle_kwh, 1)
                    ),
                    None => format!("{} kWh", thousands(e, 1)),
                }),
        ),
    ]
}

/// The summary's cost and waste.
fn money_rows(r: &Report, no_memory: bool) -> Vec<Vec<String>> {
    let f = &r.fleet;
    let idle_gpu_h: f64 = r.idle_models.iter().map(|m| m.reclaimable_gpu_hours).sum();
    let idle_cost: f64 = r.idle_models.iter().map(|m| m.wasted_cost).sum();
    vec![
        kv(
            "Cost",
            format!(
                "{} (GPU-hours {} at {}/GPU-h + energy {})",
                money(r, f.cost_total),
                money(r, f.cost_gpu_hours),
                thousands(r.prices.gpu_hour, 2),
                f.cost_energy.map_or_else(
                    || "unknown: not in the data".to_string(),
                    |e| format!("{} at {}/kWh", money(r, e), thousands(r.prices.kwh, 2))
                ),
            ),
        ),
        kv(
            "Waste",
            if no_memory {
                format!("idle-loaded models and consolidation {NO_MEMORY}")
            } else {
                format!(
                    "idle-loaded models: {} GPU-h, {} in the period; the actions free {} GPU(s) and save {} a month in all (Actions)",
                    thousands(idle_gpu_h, 1),
                    money(r, idle_cost),
                    r.actions
                        .iter()
                        .filter_map(|a| a.gpus_freed)
                        .sum::<i64>()
                        .max(0),
                    money(
                        r,
                        r.actions
                            .iter()
                            .filter_map(|a| a.saving_per_month)
                            .sum::<f64>()
                    )
                )
            },
        ),
    ]
}

/// The summary's change from the previous period.
fn week_over_week(r: &Report) -> String {
    let f = &r.fleet;
    let Some(p) = &r.previous_period else {
        return "the previous period is not in the data".into();
    };
    let busy_pts = match (f.activity_mean, p.activity_mean) {
        (Some(a), Some(b)) => format!("{:+.1} pts", (a - b) * 100.0),
        _ => "n/a".into(),
    };
    let mut line = format!(
        "GPU-h available {}, GPU-h of work {}, mean activity {}, energy {}, cost {}",
        signed_pct(change(f.gpu_hours_available, p.gpu_hours_available)),
        signed_pct(
            f.gpu_hours_busy
                .zip(p.gpu_hours_busy)
                .and_then(|(a, b)| change(a, b))
        ),
        busy_pts,
        signed_pct(match (f.energy_kwh, p.energy_kwh) {
            (Some(a), Some(b)) => change(a, b),
            _ => None,
        }),
        signed_pct(change(f.cost_total, p.cost_total)),
    );
    if p.gpu_hours_observed < 0.9 * p.gpu_hours_available {
        line.push_str(&format!(
            " (the previous period is only {} covered by data)",
            share(p.gpu_hours_observed, p.gpu_hours_available)
        ));
    }
    line
}

/// Usage by node or by GPU model.
fn usage(title: &str, r: &Report, by: &[Usage]) -> Section {
    Section {
        title: title.into(),
        header: usage_header(),
        rows: by.iter().map(|u| usage_row(r, u)).collect(),
        ..Section::default()
    }
}

/// By team.
fn teams(r: &Report) -> Section {
    let mut t = Section {
        title: format!("By team ({})", r.teams.dimension),
        ..Section::default()
    };
    if r.teams.rows.is_empty() {
        t.lines
            .push("No process rows with attribution in the data.".into());
        return t;
    }
    t.header = [
        "team",
        "owner",
        "processes",
        "GPU-h",
        "mem GiB-h",
        "idle GiB-h",
        "idle GPU-h",
        "idle cost",
        "cost",
    ]
    .map(String::from)
    .to_vec();
    let energy = r.teams.energy.is_some();
    if energy {
        t.header.extend(["kWh", "energy cost"].map(String::from));
    }
    let held = r.allocation.is_some();
    if held {
        t.header
            .extend(["held unused GPU-h", "held unused cost"].map(String::from));
    }
    t.rows = r
        .teams
        .rows
        .iter()
        .chain(r.teams.nobody.as_ref())
        .map(|u| {
            let nobody = r.teams.nobody.as_ref().is_some_and(|n| std::ptr::eq(n, u));
            let mut row = vec![
                u.team.clone(),
                u.owner.clone().unwrap_or_else(|| "unknown".into()),
                u.processes.to_string(),
                thousands(u.gpu_hours, 1),
                thousands(u.memory_gib_hours, 0),
                thousands(u.idle_gib_hours, 0),
                thousands(u.idle_gpu_hours, 1),
                money(r, u.idle_cost),
                money(r, u.cost),
            ];
            if energy {
                row.push(u.energy_kwh.map_or("unknown".into(), |e| thousands(e, 1)));
                row.push(u.cost_energy.map_or("unknown".into(), |c| money(r, c)));
            }
            if held {
                row.push(thousands(u.allocated_unused_gpu_hours.unwrap_or(0.0), 1));
                row.push(money(r, u.allocated_unused_cost.unwrap_or(0.0)));
            }
            if nobody {
                // Only what no team used is known of this row.
                for (i, cell) in row.iter_mut().enumerate() {
                    if matches!(i, 1 | 2 | 4..=7) || (held && i + 2 >= t.header.len()) {
                        *cell = "-".into();
                    }
                }
            }
            row
        })
        .collect();
    t.after.push(
        "GPU-h: a GPU's time split evenly between the processes on it in each interval; (no team): the GPU-hours available that no team's process ran on, and the energy charged to no team, so that the rows add up to the fleet's GPU-hours, cost and kWh.".into(),
    );
    if let Some(e) = &r.teams.energy {
        t.after.push(format!(
            "kWh: each GPU interval's energy split by share of activity (processes by SM use, MIG \
             instances by activity × compute slices); {} kWh ({}) of the GPUs' {} kWh was idle \
             (no activity, or no process) and is charged to no team.",
            thousands(e.idle_kwh, 1),
            money(r, e.idle_cost),
            thousands(e.gpu_kwh, 1)
        ));
    }
    t
}

/// A finding's wasted energy and its price, `-` when unknown.
fn wasted_energy(r: &Report, kwh: Option<f64>, cost: Option<f64>) -> String {
    match (kwh, cost) {
        (Some(k), Some(c)) => format!("{} kWh ({})", thousands(k, 1), money(r, c)),
        _ => "-".into(),
    }
}

/// Top idle-loaded models, with each one's action.
fn idle_models(r: &Report, no_memory: bool) -> Section {
    let mut i = Section {
        title: "Top idle-loaded models".into(),
        ..Section::default()
    };
    if no_memory {
        i.lines.push(format!(
            "Not judged ({NO_MEMORY}): a model is loaded when it holds memory."
        ));
        return i;
    }
    if r.idle_models.is_empty() {
        i.lines.push("None found.".into());
        return i;
    }
    i.header = [
        "model (process)",
        "team",
        "GiB held",
        "idle h",
        "idle GiB-h",
        "GPU-h wasted",
        "wasted",
    ]
    .map(String::from)
    .to_vec();
    let energy = r.teams.energy.is_some();
    if energy {
        i.header.push("energy wasted".into());
    }
    i.rows = r
        .idle_models
        .iter()
        .map(|m| {
            let mut row = vec![
                m.what.clone(),
                m.team.clone().unwrap_or_else(|| "-".into()),
                format!("{:.1}", m.memory_max_gib),
                format!("{:.1} ({:.0}%)", m.idle_hours, m.idle_share * 100.0),
                thousands(m.idle_gib_hours, 0),
                thousands(m.reclaimable_gpu_hours, 1),
                money(r, m.wasted_cost),
            ];
            if energy {
                row.push(wasted_energy(r, m.wasted_energy_kwh, m.wasted_energy_cost));
            }
            row
        })
        .collect();
    for m in &r.idle_models {
        i.after.push(format!("{}: {}", m.what, m.action));
    }
    i
}

/// GPUs and MIG instances held by a pod or job with nothing running (and, milder, held with
/// low use), with each one's action.
fn allocated(r: &Report) -> Section {
    let mut s = Section {
        title: "Allocated but unused".into(),
        ..Section::default()
    };
    let Some(a) = &r.allocation else {
        s.lines.push(
            "Unknown: which pod or job holds each GPU is not in the data (needs the exporter's kubelet source, Slurm, or occupancy data).".into(),
        );
        return s;
    };
    s.lines.push(format!(
        "{} GPU-hours allocated (held by a pod or job) and unused ({}) of {} GPU-hours held; {} device(s) unused, {} held with low use ({} GPU-hours).",
        thousands(a.unused_gpu_hours, 1),
        money(r, a.unused_cost),
        thousands(a.held_gpu_hours, 1),
        a.devices_unused,
        a.devices_low_use,
        thousands(a.low_use_gpu_hours, 1),
    ));
    if r.allocated_unused.is_empty() {
        return s;
    }
    s.header = [
        "device (holder)",
        "team",
        "kind",
        "held h",
        "unused h",
        "activity",
        "GPU-h wasted",
        "wasted",
    ]
    .map(String::from)
    .to_vec();
    let energy = r.teams.energy.is_some();
    if energy {
        s.header.push("energy wasted".into());
    }
    s.rows = r
        .allocated_unused
        .iter()
        .map(|d| {
            let mut row = vec![
                d.what.clone(),
                d.team.clone().unwrap_or_else(|| "-".into()),
                d.kind.replace('_', " "),
                format!("{:.1}", d.held_hours),
                format!("{:.1}", d.unused_hours),
                d.activity_mean
                    .map_or_else(|| "-".into(), |a| format!("{:.1}%", a * 100.0)),
                thousands(d.wasted_gpu_hours, 1),
                money(r, d.wasted_cost),
            ];
            if energy {
                row.push(wasted_energy(r, d.wasted_energy_kwh, d.wasted_energy_cost));
            }
            row
        })
        .collect();
    for d in &r.allocated_unused {
        s.after.push(format!("{}: {}", d.what, d.action));
    }
    s
}

/// The consolidation plan, with its moves.
fn consolidation(r: &Report, no_memory: bool) -> Section {
    let mut c = Section {
        title: "Consolidation plan".into(),
        ..Section::default()
    };
    if no_memory {
        c.lines.push(format!(
            "Not judged ({NO_MEMORY}): whether workloads fit on one GPU depends on their memory; activity alone cannot tell."
        ));
        return c;
    }
    if r.consolidation.is_empty() {
        c.lines.push(
            "No GPUs to free: the loaded GPUs' combined demand does not fit on fewer.".into(),
        );
        return c;
    }
    c.header = [
        "GPU model",
        "GPUs loaded",
        "GPUs needed",
        "freed",
        "GPU-h freed",
        "savings (period)",
        "savings / month",
    ]
    .map(String::from)
    .to_vec();
    c.rows = r
        .consolidation
        .iter()
        .map(|s| {
            vec![
                s.model.clone(),
                s.gpus_loaded.to_string(),
                s.gpus_needed.to_string(),
                s.gpus_freed.to_string(),
                thousands(s.gpu_hours_freed, 0),
                money(r, s.savings),
                money(r, s.savings_per_month),
            ]
        })
        .collect();
    for s in &r.consolidation {
        for m in &s.moved_by {
            c.after.push(format!("move {} — {}", m.what, m.by));
        }
    }
    // What the Actions make of it: one action per workload.
    let detector: u64 = r.consolidation.iter().map(|s| s.gpus_freed).sum();
    c.after.push(match r.actions.iter().find(|a| a.kind == "consolidate") {
        Some(a) => format!(
            "Actions: the detector's plan frees {detector} GPU(s); after the workloads answered first (scaled to zero, released), the plan left frees {} GPU(s): action {}.",
            a.gpus_freed.unwrap_or(0),
            a.rank
        ),
        None => match r.actions.iter().find(|a| a.kind == "mig_layout") {
            Some(a) => format!(
                "Actions: the detector's plan frees {detector} GPU(s); the MIG layouts free at least as many once the workloads answered first are left out: action {} follows them instead.",
                a.rank
            ),
            None => format!(
                "Actions: the detector's plan frees {detector} GPU(s), but every group's workloads are answered first (scaled to zero, released): no consolidation action."
            ),
        },
    });
    c
}

/// The MIG recommendation's summary and lines, when the report has one.
fn mig(r: &Report) -> Section {
    let mut m = Section {
        title: "MIG recommendation".into(),
        ..Section::default()
    };
    match &r.mig {
        Some(v) => {
            m.lines.push(v.summary.clone());
            m.lines
                .extend(v.lines.iter().flatten().map(|l| format!("- {l}")));
        }
        None => m.lines.push(format!(
            "MIG recommendation: not computed; run `{}`",
            crate::commands::mig_plan(&r.sources, &r.range_flags, crate::report::MIG_PLAN_FILE)
        )),
    }
    m
}

/// Next steps: one line per suggested command, the command in backticks; none when the report
/// suggests nothing.
fn next_steps(r: &Report) -> Option<Section> {
    (!r.next_steps.is_empty()).then(|| Section {
        title: "Next steps".into(),
        lines: r
            .next_steps
            .iter()
            .map(|s| format!("- {}: `{}`", s.what, s.command))
            .collect(),
        ..Section::default()
    })
}

/// Off-peak windows: the baseline line, the windows and each window's peaks.
fn offpeak(r: &Report) -> Section {
    let mut o = Section {
        title: format!("Off-peak windows ({})", r.tz),
        ..Section::default()
    };
    let baseline = r.offpeak_baseline.as_ref().map_or(0, |b| b.gpus);
    if let Some(b) = &r.offpeak_baseline {
        o.lines.push(baseline_line(b));
    }
    if r.offpeak_windows.is_empty() {
        o.lines.push(if baseline > 0 {
            "No reliable off-peak window above the GPUs free around the clock.".into()
        } else {
            "No reliable off-peak window found.".into()
        });
        return o;
    }
    o.header = [
        "days",
        "from",
        "to",
        "hours",
        "free GPUs",
        "confidence",
        "cron (start)",
    ]
    .map(String::from)
    .to_vec();
    o.rows = r
        .offpeak_windows
        .iter()
        .map(|w| offpeak_row(w, baseline))
        .collect();
    for w in &r.offpeak_windows {
        for p in &w.peaks {
            o.after.push(format!(
                "inside {} {}–{}: ≥ {} GPU(s) free {} ({} h)",
                days(w),
                w.start,
                w.end,
                p.expected_free_gpus,
                p.label,
                p.hours
            ));
        }
    }
    o
}

/// A window's days: `every day` or the list.
fn days(w: &OffpeakWindow) -> String {
    if w.days.is_empty() {
        "every day".into()
    } else {
        w.days.join(", ")
    }
}

/// An off-peak window's row (free GPUs with those above the baseline when there is one).
fn offpeak_row(w: &OffpeakWindow, baseline: u64) -> Vec<String> {
    vec![
        days(w),
        w.start.clone(),
        w.end.clone(),
        format!("{:.0}", w.hours),
        if baseline > 0 {
            format!("{} (+{})", w.expected_free_gpus, w.above_baseline)
        } else {
            w.expected_free_gpus.to_string()
        },
        format!("{:.0}%", w.confidence * 100.0),
        w.cron_start.clone(),
    ]
}

/// Data quality notes.
fn data_quality(r: &Report) -> Section {
    let mut q = Section {
        title: "Data quality".into(),
        ..Section::default()
    };
    if r.data_quality.is_empty() {
        q.lines
            .push("No gaps, no silent GPUs, every source present.".into());
    } else {
        q.lines = r
            .data_quality
            .iter()
            .map(|n| format!("- [{}] {}", n.kind, n.message))
            .collect();
    }
    q
}
