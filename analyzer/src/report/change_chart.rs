//! The HTML report's before/after chart of a layout change (`chart-change`): for the change
//! with the largest move in GPUs in use, one pair of bars (before grey, after blue) per figure —
//! GPUs in use, GPU-hours in use, idle GPU-hours, energy and cost — each pair scaled to its
//! larger bar, the values written beside them. Inline SVG in the manner of `super::html`'s
//! charts (marks carry class `bar`); pure string building.

use std::fmt::Write as _;

use super::Report;
use crate::changes::{Change, PeriodUsage};
use crate::output::escape::html_escape as esc;

/// The change the chart shows: the compared one whose GPUs in use moved most.
pub fn main_change(r: &Report) -> Option<&Change> {
    r.changes
        .as_ref()?
        .changes
        .iter()
        .filter(|c| c.comparison.is_some())
        .max_by(|a, b| {
            let d = |c: &Change| {
                c.comparison
                    .as_ref()
                    .and_then(|x| x.fleet.delta.gpus_in_use)
                    .map_or(0.0, f64::abs)
            };
            d(a).total_cmp(&d(b))
        })
}

/// The chart's SVG, when a change was compared.
pub fn before_after(r: &Report) -> Option<String> {
    let ch = main_change(r)?;
    let cmp = ch.comparison.as_ref()?;
    let (b, a) = (&cmp.fleet.before, &cmp.fleet.after);
    let cur = &r.prices.currency;
    type Figure = (&'static str, fn(&PeriodUsage) -> Option<f64>);
    let figures: [Figure; 5] = [
        ("GPUs in use", |u| u.gpus_in_use),
        ("GPU-hours in use", |u| u.gpu_hours_in_use),
        ("idle GPU-hours", |u| u.gpu_hours_idle),
        ("energy, kWh", |u| u.energy_kwh),
        ("cost", |u| u.cost_total),
    ];
    let (bw, left, top, rh) = (420.0, 170.0, 40.0, 46.0);
    let w = left + bw + 150.0;
    let h = top + figures.len() as f64 * rh + 10.0;
    let mut s = format!(
        r#"<svg id="chart-change" role="img" aria-label="before and after the change at {}" viewBox="0 0 {w} {h}" width="{w}" height="{h}">"#,
        esc(&ch.at)
    );
    // The legend: one line per period.
    for (k, (fill, what, side)) in [
        ("#adb5bd", "before", &cmp.before),
        ("#1c7ed6", "after", &cmp.after),
    ]
    .into_iter()
    .enumerate()
    {
        let y = 4.0 + k as f64 * 16.0;
        let _ = write!(
            s,
            r##"<rect x="{left}" y="{y}" width="10" height="10" fill="{fill}"/><text x="{}" y="{}" class="axis">{what}: {} .. {}</text>"##,
            left + 14.0,
            y + 9.0,
            esc(&side.from),
            esc(&side.until),
        );
    }
    for (i, (name, get)) in figures.iter().enumerate() {
        let y = top + i as f64 * rh;
        let (vb, va) = (get(b), get(a));
        let max = vb.unwrap_or(0.0).max(va.unwrap_or(0.0));
        let _ = write!(
            s,
            r#"<text x="4" y="{}" class="axis">{}</text>"#,
            y + 24.0,
            esc(name)
        );
        for (k, (v, fill, side)) in [(vb, "#adb5bd", "before"), (va, "#1c7ed6", "after")]
            .into_iter()
            .enumerate()
        {
            let yy = y + 4.0 + k as f64 * 19.0;
            let text = match v {
                Some(v) if *name == "cost" => format!("{v:.2} {cur}"),
                Some(v) => format!("{v:.1}"),
                None => "unknown".into(),
            };
            let len = match v {
                Some(v) if max > 0.0 => (v / max * bw).max(0.0),
                _ => 0.0,
            };
            let _ = write!(
                s,
                r##"<rect class="bar {side}" x="{left}" y="{yy}" width="{len:.1}" height="16" fill="{fill}"><title>{} {side}: {}</title></rect><text x="{}" y="{}" class="axis">{}</text>"##,
                esc(name),
                esc(&text),
                left + len + 6.0,
                yy + 12.0,
                esc(&text)
            );
        }
    }
    s.push_str("</svg>");
    Some(s)
}
