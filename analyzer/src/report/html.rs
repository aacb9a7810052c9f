//! The report as one self-contained HTML file: inline CSS, inline SVG charts generated here, no
//! script, no fonts, no network. Charts: the hour-of-week activity heatmap, the per-GPU activity
//! distribution, idle GiB-hours by team and the free-capacity timeline with the off-peak windows
//! marked by tier and the GPUs free around the clock (the off-peak baseline) as a line, and
//! the before/after bars of a layout change (`super::change_chart`); then the text sections of [`super::render::sections`] as HTML tables.
//!
//! Pure string building; every chart is an `<svg id="chart-…">` whose data marks carry a class
//! (`cell`, `bin`, `bar`, `hour`) so a browser test can count them.

use std::fmt::Write as _;

use super::Report;
use super::render::sections;

pub use crate::output::html::esc;

/// `a` → `<code>a</code>` (for command names in prose; input already escaped).
fn code(s: &str) -> String {
    let paired = s.matches('`').count().is_multiple_of(2);
    if !paired {
        return s.to_string();
    }
    let mut out = String::new();
    for (i, part) in s.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// A section's prose lines: a run of Markdown list items (`- …`, as the text formats write them)
/// becomes one `<ul>`, any other line a `<p>`; escaped, `a` → `<code>`.
fn prose(o: &mut String, lines: &[String]) {
    let mut in_list = false;
    for l in lines {
        match l.strip_prefix("- ") {
            Some(item) => {
                if !in_list {
                    o.push_str("<ul>");
                    in_list = true;
                }
                let _ = write!(o, "<li>{}</li>", code(&esc(item)));
            }
            None => {
                if in_list {
                    o.push_str("</ul>\n");
                    in_list = false;
                }
                let _ = writeln!(o, "<p>{}</p>", code(&esc(l)));
            }
        }
    }
    if in_list {
        o.push_str("</ul>\n");
    }
}

/// White → blue for 0 → 1.
fn blue(v: f64) -> String {
    let v = v.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * v).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        lerp(240.0, 8.0),
        lerp(244.0, 69.0),
        lerp(250.0, 148.0)
    )
}

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

fn heatmap(r: &Report) -> String {
    let (cw, ch, left, top) = (26.0, 20.0, 40.0, 20.0);
    let w = left + 24.0 * cw + 10.0;
    let h = top + 7.0 * ch + 10.0;
    let mut s = format!(
        r#"<svg id="chart-heatmap" role="img" aria-label="hour-of-week activity" viewBox="0 0 {w} {h}" width="{w}" height="{h}">"#
    );
    for hr in (0..24).step_by(3) {
        let _ = write!(
            s,
            r#"<text x="{}" y="14" class="axis">{hr:02}</text>"#,
            left + hr as f64 * cw + 4.0
        );
    }
    for (d, row) in r.charts.hour_of_week.iter().enumerate() {
        let y = top + d as f64 * ch;
        let _ = write!(
            s,
            r#"<text x="4" y="{}" class="axis">{}</text>"#,
            y + 14.0,
            DAYS[d]
        );
        for (hr, v) in row.iter().enumerate() {
            let x = left + hr as f64 * cw;
            match v {
                Some(v) => {
                    let _ = write!(
                        s,
                        r#"<rect class="cell" x="{x}" y="{y}" width="{}" height="{}" fill="{}"><title>{} {hr:02}:00 — {:.0}%</title></rect>"#,
                        cw - 2.0,
                        ch - 2.0,
                        blue(*v),
                        DAYS[d],
                        v * 100.0
                    );
                }
                None => {
                    let _ = write!(
                        s,
                        r##"<rect class="nodata" x="{x}" y="{y}" width="{}" height="{}" fill="#fafafa" stroke="#ddd"/>"##,
                        cw - 2.0,
                        ch - 2.0
                    );
                }
            }
        }
    }
    s.push_str("</svg>");
    s
}

fn gpu_distribution(r: &Report) -> String {
    let (cw, rh, left, top) = (36.0, 18.0, 230.0, 20.0);
    let n = r.charts.gpu_activity.len();
    let w = left + 10.0 * cw + 120.0;
    let h = top + n as f64 * rh + 10.0;
    let mut s = format!(
        r#"<svg id="chart-gpu-activity" role="img" aria-label="per-GPU activity distribution" viewBox="0 0 {w} {h}" width="{w}" height="{h}">"#
    );
    for b in (0..=10).step_by(2) {
        let _ = write!(
            s,
            r#"<text x="{}" y="14" class="axis">{}%</text>"#,
            left + b as f64 * cw - 8.0,
            b * 10
        );
    }
    for (i, g) in r.charts.gpu_activity.iter().enumerate() {
        let y = top + i as f64 * rh;
        let _ = write!(
            s,
            r#"<text x="4" y="{}" class="axis">{}</text>"#,
            y + 13.0,
            esc(&g.gpu)
        );
        for (b, share) in g.histogram.iter().enumerate() {
            let _ = write!(
                s,
                r#"<rect class="bin" x="{}" y="{y}" width="{}" height="{}" fill="{}"><title>{}: {:.0}% of the time at {}–{}% activity</title></rect>"#,
                left + b as f64 * cw,
                cw - 1.0,
                rh - 2.0,
                blue(share.sqrt()),
                esc(&g.gpu),
                share * 100.0,
                b * 10,
                b * 10 + 10
            );
        }
        if let Some(m) = g.mean {
            let _ = write!(
                s,
                r##"<line class="mean" x1="{x}" x2="{x}" y1="{y}" y2="{}" stroke="#d9480f" stroke-width="2"/>"##,
                y + rh - 2.0,
                x = left + m * 10.0 * cw
            );
        }
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" class="axis">p95 {}</text>"#,
            left + 10.0 * cw + 8.0,
            y + 13.0,
            g.p95.map_or("-".into(), |p| format!("{:.0}%", p * 100.0))
        );
    }
    s.push_str("</svg>");
    s
}

fn idle_by_team(r: &Report) -> String {
    let teams: Vec<_> = r
        .teams
        .rows
        .iter()
        .filter(|t| t.idle_gib_hours > 0.0)
        .collect();
    let (bw, rh, left, top) = (420.0, 22.0, 160.0, 10.0);
    let w = left + bw + 120.0;
    let h = top + teams.len().max(1) as f64 * rh + 10.0;
    let mut s = format!(
        r#"<svg id="chart-idle-teams" role="img" aria-label="idle GiB-hours by team" viewBox="0 0 {w} {h}" width="{w}" height="{h}">"#
    );
    let max = teams
        .iter()
        .map(|t| t.idle_gib_hours)
        .fold(0.0f64, f64::max);
    if teams.is_empty() {
        let _ = write!(
            s,
            r#"<text x="4" y="24" class="axis">no idle-loaded memory attributed to a team</text>"#
        );
    }
    for (i, t) in teams.iter().enumerate() {
        let y = top + i as f64 * rh;
        let len = if max > 0.0 {
            t.idle_gib_hours / max * bw
        } else {
            0.0
        };
        let _ = write!(
            s,
            r##"<text x="4" y="{}" class="axis">{}</text><rect class="bar" x="{left}" y="{y}" width="{len:.1}" height="{}" fill="#e8590c"><title>{}: {:.0} GiB-hours idle</title></rect><text x="{}" y="{}" class="axis">{:.0} GiB-h</text>"##,
            y + 15.0,
            esc(&t.team),
            rh - 4.0,
            esc(&t.team),
            t.idle_gib_hours,
            left + len + 6.0,
            y + 15.0,
            t.idle_gib_hours
        );
    }
    s.push_str("</svg>");
    s
}

/// An hour of the free timeline (RFC 3339 UTC) in the report's zone, formatted.
fn local_hour(hour: &str, tz: &str, fmt: &str) -> Option<String> {
    let zone: chrono_tz::Tz = tz.parse().ok()?;
    let t = chrono::DateTime::parse_from_rfc3339(hour).ok()?;
    Some(t.with_timezone(&zone).format(fmt).to_string())
}

fn free_timeline(r: &Report) -> String {
    let tl = &r.charts.free_timeline;
    let (pw, ph, left, top) = (900.0, 160.0, 40.0, 10.0);
    let w = left + pw + 10.0;
    let h = top + ph + 30.0;
    let n = tl.len().max(1) as f64;
    let max = tl.iter().map(|p| p.gpus).max().unwrap_or(1).max(1) as f64;
    let bw = pw / n;
    let mut s = format!(
        r#"<svg id="chart-free-timeline" role="img" aria-label="free GPUs per hour" viewBox="0 0 {w} {h}" width="{w}" height="{h}">"#
    );
    // Off-peak hours shaded by tier: a darker green where a higher tier's window expects more
    // GPUs free.
    let levels: Vec<u64> = {
        let mut l: Vec<u64> = r
            .offpeak_windows
            .iter()
            .map(|w| w.expected_free_gpus)
            .collect();
        l.sort_unstable();
        l.dedup();
        l
    };
    const GREENS: [&str; 3] = ["#d3f9d8", "#b2f2bb", "#8ce99a"];
    for (i, p) in tl.iter().enumerate() {
        if p.offpeak {
            let level = p.offpeak_free_gpus.unwrap_or(0);
            let tier = levels.iter().filter(|&&l| l < level).count();
            let _ = write!(
                s,
                r##"<rect class="offpeak" x="{:.2}" y="{top}" width="{:.2}" height="{ph}" fill="{}"><title>off-peak: ≥ {level} GPU(s) free</title></rect>"##,
                left + i as f64 * bw,
                bw,
                GREENS[tier.min(GREENS.len() - 1)]
            );
        }
    }
    for (i, p) in tl.iter().enumerate() {
        let bh = f64::from(p.free_gpus) / max * ph;
        let _ = write!(
            s,
            r##"<rect class="hour" x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="#1c7ed6"><title>{}: {} of {} GPU(s) free</title></rect>"##,
            left + i as f64 * bw,
            top + ph - bh,
            bw.max(0.5),
            bh,
            esc(&local_hour(&p.hour, &r.tz, "%a %-d %b %H:00").unwrap_or_else(|| p.hour.clone())),
            p.free_gpus,
            p.gpus
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="#868e96"/><text x="4" y="{}" class="axis">{}</text><text x="4" y="{}" class="axis">0</text>"##,
        left + pw,
        top + ph,
        top + ph,
        top + 10.0,
        max,
        top + ph
    );
    // GPUs free around the clock (over-provisioning): a dashed line.
    if let Some(b) = r.offpeak_baseline.as_ref().filter(|b| b.gpus > 0) {
        let y = top + ph - (b.gpus as f64 / max).min(1.0) * ph;
        let _ = write!(
            s,
            r##"<line class="baseline" x1="{left}" x2="{}" y1="{y:.2}" y2="{y:.2}" stroke="#e8590c" stroke-dasharray="4 3"><title>{} GPU(s) free around the clock (over-provisioned)</title></line>"##,
            left + pw,
            b.gpus
        );
    }
    // Day ticks at local midnight.
    for (i, p) in tl.iter().enumerate() {
        if local_hour(&p.hour, &r.tz, "%H").as_deref() == Some("00") {
            let x = left + i as f64 * bw;
            let _ = write!(
                s,
                r##"<line x1="{x:.2}" x2="{x:.2}" y1="{top}" y2="{}" stroke="#ced4da"/><text x="{:.2}" y="{}" class="axis">{}</text>"##,
                top + ph + 4.0,
                x + 2.0,
                top + ph + 18.0,
                esc(&local_hour(&p.hour, &r.tz, "%a %-d").unwrap_or_default())
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// `svg` with an axis title above it (the y axis: what the rows or the bars' height are) and
/// one below it (the x axis), its content moved down to make room.
fn with_axis_titles(svg: &str, x: &str, y: &str) -> String {
    let Some(open_end) = svg.find('>').map(|i| i + 1) else {
        return svg.to_string();
    };
    let open = &svg[..open_end];
    let body = svg[open_end..]
        .strip_suffix("</svg>")
        .unwrap_or(&svg[open_end..]);
    let num = |key: &str| -> Option<f64> {
        let rest = &open[open.find(&format!(" {key}=\""))? + key.len() + 3..];
        rest[..rest.find('"')?].parse().ok()
    };
    let (Some(w), Some(h)) = (num("width"), num("height")) else {
        return svg.to_string();
    };
    let nh = h + 34.0;
    let open = open
        .replacen(
            &format!("viewBox=\"0 0 {w} {h}\""),
            &format!("viewBox=\"0 0 {w} {nh}\""),
            1,
        )
        .replacen(&format!("height=\"{h}\""), &format!("height=\"{nh}\""), 1);
    format!(
        r#"{open}<text class="axis-title" x="4" y="12">{}</text><g transform="translate(0,16)">{body}</g><text class="axis-title" x="{}" y="{}" text-anchor="middle">{}</text></svg>"#,
        esc(y),
        w / 2.0,
        nh - 4.0,
        esc(x)
    )
}

/// The page's CSS after the shell's.
const CSS: &str = ".sub{color:#495057}.chart{margin:8px 0 16px}
.legend{font-size:12px;color:#495057}.axis-title{font-size:11px;font-weight:600;fill:#343a40}code{background:#f1f3f5;padding:0 3px}";

/// The whole HTML document.
pub fn render_html(r: &Report) -> String {
    let mut o = String::new();
    let title = match crate::times::period_title(&r.from, &r.until, &r.tz) {
        Some(t) => format!("tessera report: {t}"),
        None => format!("tessera report {} .. {}", r.from, r.until),
    };
    crate::output::html::open(&mut o, &title, CSS);
    let _ = writeln!(
        o,
        "<p class=\"sub\">{:.0} h, time zone {}; sources: {}; prices: {} {}/GPU-h, {} {}/kWh ({})</p>",
        r.hours,
        esc(&r.tz),
        esc(&r.sources.join(", ")),
        r.prices.gpu_hour,
        esc(&r.prices.currency),
        r.prices.kwh,
        esc(&r.prices.currency),
        esc(&r.prices.source)
    );
    let secs = sections(r);
    let text = |o: &mut String, idx: usize| {
        let s = &secs[idx];
        let _ = writeln!(o, "<h2>{}</h2>", esc(&s.title));
        prose(o, &s.lines);
        if !s.rows.is_empty() {
            o.push_str("<table>");
            if s.header.iter().any(|h| !h.is_empty()) {
                o.push_str("<tr>");
                for h in &s.header {
                    let _ = write!(o, "<th>{}</th>", esc(h));
                }
                o.push_str("</tr>");
            }
            for row in &s.rows {
                o.push_str("<tr>");
                for c in row {
                    let _ = write!(o, "<td>{}</td>", esc(c));
                }
                o.push_str("</tr>");
            }
            o.push_str("</table>\n");
        }
        if !s.after.is_empty() {
            o.push_str("<ul>");
            for l in &s.after {
                let _ = write!(o, "<li>{}</li>", code(&esc(l)));
            }
            o.push_str("</ul>\n");
        }
    };
    text(&mut o, 0);
    let chart = |o: &mut String, title: &str, legend: &str, svg: String, axes: (&str, &str)| {
        let _ = writeln!(
            o,
            "<h2>{}</h2><div class=\"chart\">{}</div><p class=\"legend\">{}</p>",
            esc(title),
            with_axis_titles(&svg, axes.0, axes.1),
            esc(legend)
        );
    };
    let sig = match r.activity_signal.as_str() {
        "sm_active" => "SM activity",
        "busy" => "busy ratio",
        "none" => "no signal",
        _ => "SM activity, else busy ratio",
    };
    chart(
        &mut o,
        &format!("Activity by hour of week ({})", r.tz),
        &format!("Mean {sig} of all GPUs per local hour; darker is busier, grey is no data."),
        heatmap(r),
        (&format!("hour of the day ({})", r.tz), "day of the week"),
    );
    chart(
        &mut o,
        "Activity distribution per GPU",
        &format!(
            "Share of each GPU's time in each tenth of {sig} (darker = more time); the orange line is the mean."
        ),
        gpu_distribution(r),
        (&format!("{sig}, in tenths"), "GPU"),
    );
    chart(
        &mut o,
        "Idle GiB-hours by team",
        "Memory held by idle-loaded models × time, per team.",
        idle_by_team(r),
        ("idle GiB-hours", "team"),
    );
    // The caption names only the marks drawn.
    let mut caption = format!(
        "Blue bars: GPUs free per hour ({}; under 1 GiB held, at most 5% activity, for at least half the hour)",
        r.tz
    );
    if r.charts.free_timeline.iter().any(|h| h.offpeak) {
        caption
            .push_str("; green bands: the off-peak windows (darker: a tier with more GPUs free)");
    }
    if r.offpeak_baseline.as_ref().is_some_and(|b| b.gpus > 0) {
        caption
            .push_str("; dashed orange line: the GPUs free around the clock (over-provisioning)");
    }
    caption.push('.');
    chart(
        &mut o,
        &format!("Free capacity ({})", r.tz),
        &caption,
        free_timeline(r),
        (&format!("day ({})", r.tz), "GPUs free"),
    );
    if let (Some(svg), Some(ch)) = (
        super::change_chart::before_after(r),
        super::change_chart::main_change(r),
    ) {
        chart(
            &mut o,
            &format!("Before and after the change at {}", ch.at),
            "Equal periods before and after the layout change (the settling margin around it left out): GPUs in use, GPU-hours in use, idle GPU-hours (in use, not working), energy and cost of the fleet; each pair of bars is scaled to its larger value.",
            svg,
            ("before and after, scaled to the larger", "measure"),
        );
    }
    if let Some(svg) = super::trend_chart::chart(r) {
        chart(
            &mut o,
            "Waste per week",
            "Orange bars: the idle-loaded models' reclaimable GPU-hours; purple bars: GPU-hours held by a pod or job and unused; each week as its own report gives it, with its work utilization above (Trend, below).",
            svg,
            ("week (7 days back from the report's end)", "GPU-hours"),
        );
    }
    for i in 1..secs.len() {
        text(&mut o, i);
    }
    crate::output::html::close(&mut o);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn backticks_become_code() {
        assert_eq!(
            code("run `tessera mig plan` now"),
            "run <code>tessera mig plan</code> now"
        );
        assert_eq!(code("odd ` tick"), "odd ` tick");
        assert_eq!(code("none"), "none");
    }

    #[test]
    fn list_lines_become_one_list() {
        let lines: Vec<String> = [
            "Summary <b>",
            "- one `x`",
            "- two & three",
            "After",
            "- last",
        ]
        .map(String::from)
        .to_vec();
        let mut o = String::new();
        prose(&mut o, &lines);
        assert_eq!(
            o,
            "<p>Summary &lt;b&gt;</p>\n<ul><li>one <code>x</code></li><li>two &amp; three</li></ul>\n<p>After</p>\n<ul><li>last</li></ul>\n"
        );
        let mut o = String::new();
        prose(&mut o, &["- a".to_string(), "- b".to_string()]);
        assert_eq!(o, "<ul><li>a</li><li>b</li></ul>\n");
    }

    #[test]
    fn blue_scales() {
        assert_eq!(blue(0.0), "#f0f4fa");
        assert_eq!(blue(1.0), "#084594");
        assert_eq!(blue(7.0), blue(1.0));
    }
}
