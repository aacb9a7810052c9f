//! Text renderings of a [`Report`]: terminal tables (`tabled`, optional ANSI colour) and
//! Markdown (for a wiki or chat). Both come from the same [`sections`], so they say the same
//! thing. Pure string building: no I/O, no decision about colour (the caller passes it).

use std::fmt::Write as _;

use tabled::builder::Builder;
use tabled::settings::Style;

use super::{OffpeakBaseline, Report, Usage, change};

/// One section of the text report: a title, lines of prose, an optional table, trailing lines.
#[derive(Debug, Clone, Default)]
pub struct Section {
    pub title: String,
    pub lines: Vec<String>,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub after: Vec<String>,
}

/// `1234.5` → `1,234.50`.
pub fn thousands(x: f64, decimals: usize) -> String {
    // Values are checked where they are made; a non-finite one that got past is unknown here.
    if !x.is_finite() {
        return "unknown".into();
    }
    let s = format!("{:.*}", decimals, x.abs());
    let (int, frac) = s.split_once('.').map_or((s.as_str(), ""), |(i, f)| (i, f));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if x < 0.0 && out.chars().any(|c| c.is_ascii_digit() && c != '0') {
        out.insert(0, '-');
    }
    out
}

fn money(r: &Report, x: f64) -> String {
    format!("{} {}", thousands(x, 2), r.prices.currency)
}

fn pct(x: Option<f64>) -> String {
    x.filter(|v| v.is_finite())
        .map_or("-".into(), |v| format!("{:.0}%", v * 100.0))
}

fn share(part: f64, whole: f64) -> String {
    if whole > 0.0 && part.is_finite() && whole.is_finite() {
        format!("{:.0}%", part / whole * 100.0)
    } else {
        "-".into()
    }
}

fn signed_pct(x: Option<f64>) -> String {
    x.filter(|v| v.is_finite())
        .map_or("n/a".into(), |v| format!("{:+.0}%", v * 100.0))
}

fn signal_name(s: &str) -> &str {
    match s {
        "sm_active" => "SM activity",
        "busy" => "busy ratio (utilization.gpu)",
        "sm_active, else busy" => "SM activity, else busy ratio",
        _ => "no activity signal",
    }
}

/// GPM's tensor and DRAM activity where the data has them ("" where not: unknown).
fn gpm_activity(u: &Usage) -> String {
    match u.gpm_gpus {
        Some(n) => format!(
            "; tensor {}, DRAM {} on {n} of {} GPU(s) (GPM)",
            pct(u.tensor_active_mean),
            pct(u.dram_active_mean),
            u.gpus
        ),
        None => String::new(),
    }
}

fn usage_row(r: &Report, u: &Usage) -> Vec<String> {
    vec![
        u.key.clone(),
        u.gpus.to_string(),
        thousands(u.gpu_hours_available, 0),
        share(u.gpu_hours_allocated, u.gpu_hours_available),
        share(u.gpu_hours_busy, u.gpu_hours_available),
        pct(u.activity_mean),
        pct(u.activity_p95),
        pct(u.memory_used_share),
        u.energy_kwh.map_or("-".into(), |e| thousands(e, 1)),
        money(r, u.cost_total),
    ]
}

fn usage_header() -> Vec<String> {
    [
        "",
        "GPUs",
        "GPU-h",
        "allocated",
        "work",
        "act. mean",
        "act. p95",
        "mem used",
        "kWh",
        "cost",
    ]
    .map(String::from)
    .to_vec()
}

/// The sections every text format shows, in order.
pub fn sections(r: &Report) -> Vec<Section> {
    let f = &r.fleet;
    let mut out = Vec::new();
    let idle_gpu_h: f64 = r.idle_models.iter().map(|m| m.reclaimable_gpu_hours).sum();
    let idle_cost: f64 = r.idle_models.iter().map(|m| m.wasted_cost).sum();
    let freed: u64 = r.consolidation.iter().map(|c| c.gpus_freed).sum();
    let per_month: f64 = r.consolidation.iter().map(|c| c.savings_per_month).sum();
    // Memory used absent from the whole range: what needs it is unknown, not zero.
    let no_memory = f.gpus > 0 && f.memory_peak_gib.is_none() && f.memory_used_share.is_none();
    const NO_MEMORY: &str = "unknown: memory used is not in the data";

    // Summary.
    let mut s = Section {
        title: "Fleet summary".into(),
        ..Section::default()
    };
    let kv = |k: &str, v: String| vec![k.to_string(), v];
    s.rows = vec![
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
            "GPU-hours allocated",
            format!(
                "{} ({} of available; memory held or active)",
                thousands(f.gpu_hours_allocated, 0),
                share(f.gpu_hours_allocated, f.gpu_hours_available)
            ),
        ),
        kv(
            "GPU-hours of work",
            format!(
                "{} ({} of available; activity × time)",
                thousands(f.gpu_hours_busy, 0),
                share(f.gpu_hours_busy, f.gpu_hours_available)
            ),
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
            f.energy_kwh.map_or("not in the data".into(), |e| {
                format!("{} kWh", thousands(e, 1))
            }),
        ),
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
                    "idle-loaded models: {} GPU-h ({}); consolidation frees {} GPU(s) ({}/month)",
                    thousands(idle_gpu_h, 1),
                    money(r, idle_cost),
                    freed,
                    money(r, per_month)
                )
            },
        ),
    ];
    match &r.previous_period {
        Some(p) => {
            let busy_pts = match (f.activity_mean, p.activity_mean) {
                (Some(a), Some(b)) => format!("{:+.1} pts", (a - b) * 100.0),
                _ => "n/a".into(),
            };
            let mut line = format!(
                "GPU-h available {}, GPU-h of work {}, mean activity {}, energy {}, cost {}",
                signed_pct(change(f.gpu_hours_available, p.gpu_hours_available)),
                signed_pct(change(f.gpu_hours_busy, p.gpu_hours_busy)),
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
            s.rows.push(kv("Week over week", line));
        }
        None => s.rows.push(kv(
            "Week over week",
            "the previous period is not in the data".into(),
        )),
    }
    s.header = vec!["".into(), "".into()];
    out.push(s);

    out.push(Section {
        title: "By node".into(),
        header: usage_header(),
        rows: r.by_node.iter().map(|u| usage_row(r, u)).collect(),
        ..Section::default()
    });
    out.push(Section {
        title: "By GPU model".into(),
        header: usage_header(),
        rows: r.by_model.iter().map(|u| usage_row(r, u)).collect(),
        ..Section::default()
    });

    let mut t = Section {
        title: format!("By team ({})", r.teams.dimension),
        ..Section::default()
    };
    if r.teams.rows.is_empty() {
        t.lines
            .push("No process rows with attribution in the data.".into());
    } else {
        t.header = [
            "team",
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
        t.rows = r
            .teams
            .rows
            .iter()
            .map(|u| {
                vec![
                    u.team.clone(),
                    u.processes.to_string(),
                    thousands(u.gpu_hours, 1),
                    thousands(u.memory_gib_hours, 0),
                    thousands(u.idle_gib_hours, 0),
                    thousands(u.idle_gpu_hours, 1),
                    money(r, u.idle_cost),
                    money(r, u.cost),
                ]
            })
            .collect();
        t.after.push(
            "GPU-h: a GPU's time split evenly between the processes on it in each interval.".into(),
        );
    }
    out.push(t);

    let mut i = Section {
        title: "Top idle-loaded models".into(),
        ..Section::default()
    };
    if no_memory {
        i.lines.push(format!(
            "Not judged ({NO_MEMORY}): a model is loaded when it holds memory."
        ));
    } else if r.idle_models.is_empty() {
        i.lines.push("None found.".into());
    } else {
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
        i.rows = r
            .idle_models
            .iter()
            .map(|m| {
                vec![
                    m.what.clone(),
                    m.team.clone().unwrap_or_else(|| "-".into()),
                    format!("{:.1}", m.memory_max_gib),
                    format!("{:.1} ({:.0}%)", m.idle_hours, m.idle_share * 100.0),
                    thousands(m.idle_gib_hours, 0),
                    thousands(m.reclaimable_gpu_hours, 1),
                    money(r, m.wasted_cost),
                ]
            })
            .collect();
        for m in &r.idle_models {
            i.after.push(format!("{}: {}", m.what, m.action));
        }
    }
    out.push(i);

    let mut c = Section {
        title: "Consolidation plan".into(),
        ..Section::default()
    };
    if no_memory {
        c.lines.push(format!(
            "Not judged ({NO_MEMORY}): whether workloads fit on one GPU depends on their memory; activity alone cannot tell."
        ));
    } else if r.consolidation.is_empty() {
        c.lines.push(
            "No GPUs to free: the loaded GPUs' combined demand does not fit on fewer.".into(),
        );
    } else {
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
            for m in &s.moves {
                c.after.push(format!("move {m}"));
            }
        }
    }
    out.push(c);

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
        None => m
            .lines
            .push("MIG recommendation: run `tessera mig plan`".into()),
    }
    out.push(m);

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
    } else {
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
            .map(|w| {
                vec![
                    if w.days.is_empty() {
                        "every day".into()
                    } else {
                        w.days.join(", ")
                    },
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
            })
            .collect();
        for w in &r.offpeak_windows {
            for p in &w.peaks {
                o.after.push(format!(
                    "inside {} {}–{}: ≥ {} GPU(s) free {} ({} h)",
                    if w.days.is_empty() {
                        "every day".to_string()
                    } else {
                        w.days.join(", ")
                    },
                    w.start,
                    w.end,
                    p.expected_free_gpus,
                    p.label,
                    p.hours
                ));
            }
        }
    }
    out.push(o);

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
    out.push(q);
    out
}

fn title_line(r: &Report) -> String {
    format!(
        "tessera report: {} .. {} ({:.0} h, {})",
        r.from, r.until, r.hours, r.tz
    )
}

fn sub_line(r: &Report) -> String {
    format!(
        "sources: {}; prices: {}/GPU-h, {}/kWh ({})",
        r.sources.join(", "),
        money(r, r.prices.gpu_hour),
        money(r, r.prices.kwh),
        r.prices.source
    )
}

fn table(header: &[String], rows: &[Vec<String>], markdown: bool) -> String {
    let mut b = Builder::default();
    let key_value = header.iter().all(|h| h.is_empty());
    if !key_value || markdown {
        b.push_record(header.iter().cloned());
    }
    for row in rows {
        b.push_record(row.iter().map(|c| {
            let c = crate::text::printable(c);
            if markdown {
                c.replace('|', "\\|")
            } else {
                c.into_owned()
            }
        }));
    }
    let mut t = b.build();
    if markdown {
        t.with(Style::markdown());
    } else {
        t.with(Style::sharp());
    }
    t.to_string()
}

/// Terminal tables; ANSI bold titles and yellow money lines when `color`.
pub fn render_table(r: &Report, color: bool) -> String {
    let bold = |s: &str| {
        if color {
            format!("\x1b[1m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    // Data is made printable before the (ANSI) colours are added.
    let p = |s: &str| crate::text::printable(s).into_owned();
    let mut out = String::new();
    let _ = writeln!(out, "{}", bold(&p(&title_line(r))));
    let _ = writeln!(out, "{}", p(&sub_line(r)));
    for s in sections(r) {
        let _ = writeln!(out, "\n{}", bold(&format!("== {}", s.title)));
        for l in &s.lines {
            let _ = writeln!(out, "{}", p(l));
        }
        if !s.rows.is_empty() {
            let _ = writeln!(out, "{}", table(&s.header, &s.rows, false));
        }
        for l in &s.after {
            let _ = writeln!(out, "  {}", p(l));
        }
    }
    out
}

/// Markdown (GitHub-flavoured tables) for a wiki or chat.
pub fn render_markdown(r: &Report) -> String {
    crate::text::printable_lines(&markdown(r)).into_owned()
}

fn markdown(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", title_line(r));
    let _ = writeln!(out, "{}", sub_line(r).replace('`', ""));
    for s in sections(r) {
        let _ = writeln!(out, "\n## {}\n", s.title);
        for l in &s.lines {
            let _ = writeln!(out, "{l}");
        }
        if !s.lines.is_empty() && !s.rows.is_empty() {
            out.push('\n');
        }
        if !s.rows.is_empty() {
            let header: Vec<String> = if s.header.iter().all(|h| h.is_empty()) {
                vec!["".into(), "".into()]
            } else {
                s.header.clone()
            };
            let _ = writeln!(out, "{}", table(&header, &s.rows, true));
        }
        if !s.after.is_empty() {
            out.push('\n');
            for l in &s.after {
                let _ = writeln!(out, "- {l}");
            }
        }
    }
    out
}

/// The off-peak section's line about the GPUs free around the clock.
fn baseline_line(b: &OffpeakBaseline) -> String {
    let mut models: Vec<String> = b
        .by_model
        .iter()
        .map(|m| format!("{} × {}", m.gpus, m.model))
        .collect();
    if b.unattributed_gpus > 0 {
        models.push(format!(
            "{} whose model varies by hour",
            b.unattributed_gpus
        ));
    }
    format!(
        "Over-provisioned: {} of {} GPU(s) free {} in ≥ {:.0}% of observed {}s ({}): release or repurpose them. The windows below are free capacity above these.",
        b.gpus,
        b.gpus_observed,
        if b.period == "week" {
            "all week"
        } else {
            "around the clock"
        },
        b.min_share * 100.0,
        b.period,
        models.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::BaselineModel;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(1234567.891, 2), "1,234,567.89");
        assert_eq!(thousands(999.0, 0), "999");
        assert_eq!(thousands(-1234.0, 0), "-1,234");
        assert_eq!(thousands(-0.001, 1), "0.0");
    }

    #[test]
    fn baseline_line_names_the_models() {
        let b = OffpeakBaseline {
            finding_id: String::new(),
            period: "week".into(),
            gpus: 3,
            gpus_observed: 10,
            by_model: vec![BaselineModel {
                model: "NVIDIA H100 80GB HBM3".into(),
                gpus: 2,
            }],
            unattributed_gpus: 1,
            min_share: 0.9,
        };
        assert_eq!(
            baseline_line(&b),
            "Over-provisioned: 3 of 10 GPU(s) free all week in ≥ 90% of observed weeks (2 × NVIDIA H100 80GB HBM3, 1 whose model varies by hour): release or repurpose them. The windows below are free capacity above these."
        );
    }
}
