//! A [`Replay`] as one self-contained HTML page, in the report's manner (inline SVG, no script,
//! every value from the data escaped by the report's escaper): the verdict and what decided it,
//! a before → after chart of the fleet (GPUs, GPU-hours, allocation, work utilization, energy),
//! each placement's peak and p99 memory against its capacity, and the placements' table.
//!
//! This module computes nothing; `combine` does.

use std::fmt::Write as _;

use super::Replay;
use crate::output::html::esc;

/// The page's CSS after the shell's.
const CSS: &str = ".legend{font-size:12px;color:#495057}
.safe{color:#2b8a3e}.tight{color:#e67700}.unsafe{color:#c92a2a}";

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Before → after bars: one pair per figure, each scaled to the larger of the pair.
fn before_after(r: &Replay) -> String {
    let f = &r.fleet;
    let pairs: Vec<(&str, Option<f64>, Option<f64>, String)> = vec![
        (
            "GPUs",
            Some(f64::from(f.gpus_before)),
            Some(f64::from(f.gpus_after)),
            String::new(),
        ),
        (
            "GPU-hours",
            Some(f.gpu_hours_before),
            Some(f.gpu_hours_after),
            String::new(),
        ),
        (
            "allocation",
            f.allocation_before.map(|v| v * 100.0),
            f.allocation_after.map(|v| v * 100.0),
            "%".into(),
        ),
        (
            "work utilization",
            f.utilization_before.map(|v| v * 100.0),
            f.utilization_after.map(|v| v * 100.0),
            "%".into(),
        ),
        (
            "energy",
            f.energy_kwh_before,
            f.energy_kwh_after,
            " kWh".into(),
        ),
    ];
    let (bw, gap, ph, top) = (60.0, 50.0, 160.0, 20.0);
    let w = pairs.len() as f64 * (2.0 * bw + gap) + gap;
    let h = top + ph + 40.0;
    let mut s = format!(
        r#"<svg id="chart-before-after" role="img" aria-label="before and after" viewBox="0 0 {w} {h}" width="{w}" height="{h}">"#
    );
    for (i, (name, b, a, unit)) in pairs.iter().enumerate() {
        let x0 = gap + i as f64 * (2.0 * bw + gap);
        let max = b.unwrap_or(0.0).max(a.unwrap_or(0.0)).max(1e-9);
        for (k, (v, color, when)) in [(b, "#868e96", "before"), (a, "#1c7ed6", "after")]
            .into_iter()
            .enumerate()
        {
            let x = x0 + k as f64 * bw;
            match v {
                Some(v) => {
                    let bh = v / max * ph;
                    let _ = write!(
                        s,
                        r#"<rect class="{when}" x="{x:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{color}"><title>{} {when}: {v:.1}{}</title></rect><text x="{:.1}" y="{:.1}" class="axis">{v:.1}</text>"#,
                        top + ph - bh,
                        bw - 6.0,
                        esc(name),
                        esc(unit),
                        x + 2.0,
                        top + ph - bh - 4.0
                    );
                }
                None => {
                    let _ = write!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" class="axis">unknown</text>"#,
                        x + 2.0,
                        top + ph - 4.0
                    );
                }
            }
        }
        let _ = write!(
            s,
            r#"<text x="{x0:.1}" y="{:.1}" class="axis">{}</text>"#,
            top + ph + 16.0,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// Each placement's peak (light) and p99 (dark) memory as a share of its capacity, with lines
/// at the tight threshold and at 100%.
fn memory_bars(r: &Replay) -> String {
    let (left, pw, rh, top) = (320.0, 500.0, 18.0, 10.0);
    let n = r.placements.len().max(1) as f64;
    let max = r
        .placements
        .iter()
        .filter_map(|p| p.peak_memory_share)
        .fold(1.2f64, f64::max);
    let h = top + n * rh + 24.0;
    let w = left + pw + 20.0;
    let mut s = format!(
        r#"<svg id="chart-memory" role="img" aria-label="memory against capacity" viewBox="0 0 {w} {h}" width="{w}" height="{h}">"#
    );
    for (i, p) in r.placements.iter().enumerate() {
        let y = top + i as f64 * rh;
        let _ = write!(
            s,
            r#"<text x="4" y="{:.1}" class="axis">{}</text>"#,
            y + 12.0,
            esc(&p.id)
        );
        for (v, color, what) in [
            (p.peak_memory_share, "#a5d8ff", "peak"),
            (p.p99_memory_share, "#1c7ed6", "p99"),
        ] {
            if let Some(v) = v {
                let _ = write!(
                    s,
                    r#"<rect x="{left}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{what}: {:.0}% of {:.2} GiB</title></rect>"#,
                    y + 2.0,
                    v / max * pw,
                    rh - 4.0,
                    v * 100.0,
                    p.capacity_memory_bytes as f64 / GIB
                );
            }
        }
    }
    for (v, color) in [(super::TIGHT_MEMORY_SHARE, "#e67700"), (1.0, "#c92a2a")] {
        let x = left + v / max * pw;
        let _ = write!(
            s,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{top}" y2="{:.1}" stroke="{color}" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" class="axis">{:.0}%</text>"#,
            top + n * rh,
            x - 10.0,
            top + n * rh + 14.0,
            v * 100.0
        );
    }
    s.push_str("</svg>");
    s
}

/// The whole page.
pub fn render_html(r: &Replay) -> String {
    let mut o = String::new();
    let title = format!("tessera replay {} .. {}", r.from, r.until);
    crate::output::html::open(&mut o, &title, CSS);
    let _ = writeln!(
        o,
        "<p>Verdict: <strong class=\"{v}\">{v}</strong> ({} failed interval(s)){}</p>",
        r.failed_intervals,
        r.plan
            .as_ref()
            .map_or(String::new(), |p| format!("; plan {}", esc(p))),
        v = r.verdict
    );
    if let Some(t) = &r.trained_on {
        let _ = writeln!(
            o,
            "<p>Out of sample: planned ({}) from {} .. {}, replayed on {} .. {}.</p>",
            esc(&t.planner),
            esc(&t.from),
            esc(&t.until),
            esc(&r.from),
            esc(&r.until)
        );
    }
    if !r.deciding.is_empty() {
        o.push_str("<h2>Decided by</h2><ul>");
        for d in &r.deciding {
            let _ = write!(o, "<li>{}</li>", esc(d));
        }
        o.push_str("</ul>\n");
    }
    let _ = writeln!(
        o,
        "<h2>Before → after</h2><div class=\"chart\">{}</div><p class=\"legend\">Grey: before; blue: after. Energy: {}.</p>",
        before_after(r),
        esc(&r.fleet.energy_model)
    );
    let _ = writeln!(
        o,
        "<h2>Memory against capacity</h2><div class=\"chart\">{}</div><p class=\"legend\">Light: peak; dark: p99; dashed: the tight threshold and the capacity.</p>",
        memory_bars(r)
    );
    o.push_str("<h2>Placements</h2><table><tr>");
    for h in [
        "placement",
        "workloads",
        "capacity GiB",
        "peak GiB",
        "p99",
        "exceeded intervals",
        "contention intervals",
        "slowdown max",
        "verdict",
    ] {
        let _ = write!(o, "<th>{h}</th>");
    }
    o.push_str("</tr>");
    for p in &r.placements {
        let v = p.verdict.unwrap_or("unknown");
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{v}\">{v}</td></tr>",
            esc(&p.id),
            esc(&p.workloads.join(", ")),
            p.capacity_memory_bytes as f64 / GIB,
            p.peak_memory_bytes
                .map_or("unknown".into(), |b| format!("{:.2}", b as f64 / GIB)),
            p.p99_memory_share
                .map_or("unknown".into(), |s| format!("{:.0}%", s * 100.0)),
            p.exceeded_intervals,
            p.contention_intervals,
            p.slowdown_max.map_or("-".into(), |s| format!("{s:.2}×")),
        );
    }
    o.push_str("</table>\n");
    if !r.notes.is_empty() {
        o.push_str("<h2>Notes</h2><ul>");
        for n in &r.notes {
            let _ = write!(o, "<li>{}</li>", esc(n));
        }
        o.push_str("</ul>\n");
    }
    crate::output::html::close(&mut o);
    o
}
