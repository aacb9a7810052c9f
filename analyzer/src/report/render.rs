//! Text renderings of a [`Report`]: terminal tables (optional ANSI colour) and Markdown (for a
//! wiki or chat), both the output layer's section model ([`crate::output::section`]) over the
//! same [`sections`], so they say the same thing. Pure string building: no I/O, no decision
//! about colour (the caller passes it).

use super::{OffpeakBaseline, Report, Usage};

mod changes;
mod out_of_sample;
mod sections;
mod trend;
mod work;

pub use sections::sections;
pub use trend::week_label;

pub use crate::output::Section;

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
    // A change that rounds to nothing is "0%", never "-0%" or "+0%".
    x.filter(|v| v.is_finite()).map_or("n/a".into(), |v| {
        let p = (v * 100.0).round();
        if p == 0.0 {
            "0%".to_string()
        } else {
            format!("{p:+.0}%")
        }
    })
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
        u.gpu_hours_busy
            .map_or("unknown".into(), |b| share(b, u.gpu_hours_available)),
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
        "in use",
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

fn title_line(r: &Report) -> String {
    match crate::times::period_title(&r.from, &r.until, &r.tz) {
        Some(t) => format!(
            "tessera report: {t} ({:.0} h: {} .. {})",
            r.hours, r.from, r.until
        ),
        None => format!(
            "tessera report: {} .. {} ({:.0} h, {})",
            r.from, r.until, r.hours, r.tz
        ),
    }
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

/// Terminal tables; ANSI bold titles when `color`.
pub fn render_table(r: &Report, color: bool) -> String {
    crate::output::section::to_text(&[title_line(r), sub_line(r)], &sections(r), color)
}

/// Markdown (GitHub-flavoured tables) for a wiki or chat.
pub fn render_markdown(r: &Report) -> String {
    crate::output::section::to_markdown(
        &title_line(r),
        &[sub_line(r).replace('`', "")],
        &sections(r),
    )
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
