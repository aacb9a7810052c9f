//! The HTML report's trend chart (`chart-trend`): per week, oldest on the left, a bar of
//! idle-loaded GPU-hours (orange) and one of allocated-but-unused GPU-hours (purple) on one
//! GPU-hours scale, the week's work utilization written above them; a week whose figure is
//! unknown gets no bar and says "unknown". Inline SVG in the manner of `super::html`'s charts
//! (marks carry class `bar`; the caller adds the axis titles); pure string building.

use std::fmt::Write as _;

use super::render::thousands;
use super::{Report, TrendWeek};
use crate::output::escape::html_escape as esc;

/// The figures drawn: name, colour, CSS class, value.
type Figure = (
    &'static str,
    &'static str,
    &'static str,
    fn(&TrendWeek) -> Option<f64>,
);
const FIGURES: [Figure; 2] = [
    ("idle-loaded GPU-hours", "#f08c00", "idle", |w| {
        w.idle_loaded_gpu_hours
    }),
    ("allocated, unused GPU-hours", "#7048e8", "unused", |w| {
        w.allocated_unused_gpu_hours
    }),
];

/// The chart's SVG, when the trend has two weeks or more.
pub fn chart(r: &Report) -> Option<String> {
    let t = r.trend.as_ref()?;
    if t.weeks.len() < 2 {
        return None;
    }
    let (left, top, ph, gw) = (50.0, 40.0, 180.0, 120.0);
    let w = left + gw * t.weeks.len() as f64 + 10.0;
    let h = top + ph + 40.0;
    let max = t
        .weeks
        .iter()
        .flat_map(|w| FIGURES.iter().filter_map(move |f| (f.3)(w)))
        .fold(0.0f64, f64::max);
    let mut s = format!(
        r#"<svg id="chart-trend" role="img" aria-label="waste per week" viewBox="0 0 {w} {h}" width="{w}" height="{h}">"#
    );
    // The legend: one swatch per figure.
    for (k, (name, fill, _, _)) in FIGURES.iter().enumerate() {
        let x = left + k as f64 * 200.0;
        let _ = write!(
            s,
            r##"<rect x="{x}" y="4" width="10" height="10" fill="{fill}"/><text x="{}" y="13" class="axis">{}</text>"##,
            x + 14.0,
            esc(name)
        );
    }
    // The scale: 0 and the largest value.
    let base = top + ph;
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{base}" x2="{}" y2="{base}" stroke="#868e96"/><text x="{}" y="{}" class="axis" text-anchor="end">0</text><text x="{}" y="{}" class="axis" text-anchor="end">{}</text>"##,
        w - 10.0,
        left - 4.0,
        base + 4.0,
        left - 4.0,
        top + 4.0,
        thousands(max, 0)
    );
    for (i, wk) in t.weeks.iter().enumerate() {
        let x0 = left + i as f64 * gw + 14.0;
        for (k, (name, fill, class, get)) in FIGURES.iter().enumerate() {
            let x = x0 + k as f64 * 44.0;
            match get(wk) {
                Some(v) => {
                    let len = if max > 0.0 { v / max * ph } else { 0.0 };
                    let _ = write!(
                        s,
                        r##"<rect class="bar {class}" x="{x}" y="{:.1}" width="40" height="{len:.1}" fill="{fill}"><title>{}: {}</title></rect>"##,
                        base - len,
                        esc(name),
                        thousands(v, 1)
                    );
                }
                None => {
                    let _ = write!(
                        s,
                        r#"<text x="{}" y="{}" class="axis" text-anchor="middle">unknown</text>"#,
                        x + 20.0,
                        base - 4.0
                    );
                }
            }
        }
        let label = super::render::week_label(wk, &r.tz);
        let util = wk.work_utilization.map_or("work: unknown".into(), |u| {
            format!("work {:.0}%", u * 100.0)
        });
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" class="axis" text-anchor="middle">{}</text><text x="{}" y="{}" class="axis" text-anchor="middle">{}</text>"#,
            x0 + 42.0,
            base + 16.0,
            esc(&label),
            x0 + 42.0,
            top - 6.0,
            esc(&util)
        );
    }
    s.push_str("</svg>");
    Some(s)
}
