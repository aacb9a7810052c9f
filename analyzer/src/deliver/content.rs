//! What a delivered report says, in words every channel shares: the subject (the period and the
//! headline saving), the summary line (GPUs, GPU-hours in use, cost, saving), the top actions'
//! headlines (`crate::actions::headline`) and the link. Pure: the mail and the chat payloads
//! (`mail`, `webhook`) lay these out; nothing here sends or escapes for a format.

use crate::output::escape::printable;
use crate::report::Report;
use crate::report::render::thousands;

/// Actions a chat message lists (the mail carries the whole report).
pub const TOP_ACTIONS: usize = 3;

/// The readable period: "Mon 2 – Sun 8 Nov 2026, UTC", or the RFC 3339 bounds.
pub fn period(r: &Report) -> String {
    crate::times::period_title(&r.from, &r.until, &r.tz)
        .unwrap_or_else(|| format!("{} .. {}", r.from, r.until))
}

/// The sent record's name of the report's period: its length in whole days and the day (in its
/// time zone) its last instant falls on, "7d ending 2026-11-09 UTC". Runs of the same schedule
/// on the same day (a retried CronJob, a timer caught up at boot) name the same period though
/// their data ends minutes apart; the next week's report names another.
pub fn period_key(r: &Report) -> String {
    let last = chrono::DateTime::parse_from_rfc3339(&r.until)
        .ok()
        .zip(r.tz.parse::<chrono_tz::Tz>().ok())
        .map(|(t, tz)| (t - chrono::Duration::milliseconds(1)).with_timezone(&tz));
    match last {
        Some(t) => format!(
            "{}d ending {} {}",
            (r.hours / 24.0).round().max(1.0),
            t.format("%Y-%m-%d"),
            r.tz
        ),
        None => format!("{} .. {}", r.from, r.until),
    }
}

/// The actions' saving a month, summed (`None` when no action has a price).
pub fn saving_per_month(r: &Report) -> Option<f64> {
    let savings: Vec<f64> = r
        .actions
        .iter()
        .filter_map(|a| a.saving_per_month)
        .collect();
    (!savings.is_empty()).then(|| savings.iter().sum())
}

/// The headline saving: "1,234 EUR a month to save (3 actions)", or that there is nothing to
/// act on.
pub fn headline_saving(r: &Report) -> String {
    let n = r.actions.len();
    match (n, saving_per_month(r)) {
        (0, _) => "nothing to act on".into(),
        (_, Some(s)) => format!(
            "{} {} a month to save ({n} action{})",
            thousands(s, 0),
            r.prices.currency,
            if n == 1 { "" } else { "s" }
        ),
        (_, None) => format!("{n} action{}", if n == 1 { "" } else { "s" }),
    }
}

/// The subject of the mail and the title of a chat message.
pub fn subject(r: &Report) -> String {
    printable(&format!(
        "tessera GPU report, {}: {}",
        period(r),
        headline_saving(r)
    ))
    .into_owned()
}

/// One line of the fleet: GPUs, GPU-hours in use of those available, cost of the period.
pub fn summary(r: &Report) -> String {
    let f = &r.fleet;
    format!(
        "{} GPU(s), {} of {} GPU-hours allocated, {} {} in the period ({:.0} h).",
        f.gpus,
        thousands(f.gpu_hours_allocated, 0),
        thousands(f.gpu_hours_available, 0),
        thousands(f.cost_total, 2),
        r.prices.currency,
        r.hours
    )
}

/// The headlines of the first `n` actions, control characters escaped.
pub fn top_actions(r: &Report, n: usize) -> Vec<String> {
    r.actions
        .iter()
        .take(n)
        .map(|a| printable(&crate::actions::headline(a)).into_owned())
        .collect()
}

/// `--link` with `{file}` replaced by the report's archived HTML name
/// (`tessera-report-<until>.html`, `report::archive::stem`).
pub fn link(template: &str, r: &Report) -> String {
    let file = crate::report::archive::stem(&r.until)
        .map(|s| format!("{s}.html"))
        .unwrap_or_default();
    template.replace("{file}", &file)
}

/// The name of the JSON attachment: the archive's name of the report's JSON.
pub fn json_name(r: &Report) -> String {
    crate::report::archive::stem(&r.until)
        .map(|s| format!("{s}.json"))
        .unwrap_or_else(|_| "tessera-report.json".into())
}
