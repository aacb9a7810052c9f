//! Chart helpers: the hour-of-week slots the off-peak windows cover (with the GPUs each expects
//! free), and the local hour-of-week slot of a time, for the free-capacity timeline and the
//! hour-of-week heatmap.
//!
//! This module does not tally the series themselves (the tallies do) or draw them (`html`).

use std::collections::BTreeMap;

use chrono::{Datelike, TimeZone, Timelike};
use chrono_tz::Tz;

use super::model::OffpeakWindow;

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// Hour-of-week slots (Mon 00:00 = 0) covered by the windows, each with the most GPUs a window
/// covering it expects free (the advisor's windows do not overlap; where given ones do, the
/// most wins).
pub(super) fn window_slots(windows: &[OffpeakWindow]) -> BTreeMap<usize, u64> {
    let mut slots = BTreeMap::new();
    for w in windows {
        let Some(h0) = w.start.get(..2).and_then(|h| h.parse::<usize>().ok()) else {
            continue;
        };
        let days: Vec<usize> = if w.days.is_empty() {
            (0..7).collect()
        } else {
            w.days
                .iter()
                .filter_map(|d| DAYS.iter().position(|x| x == d))
                .collect()
        };
        for d in days {
            for k in 0..(w.hours.round() as usize) {
                let e = slots.entry((d * 24 + h0 + k) % 168).or_insert(0);
                *e = (*e).max(w.expected_free_gpus);
            }
        }
    }
    slots
}

pub(super) fn slot_of(ts_ms: i64, tz: &Tz) -> Option<(usize, usize)> {
    let t = tz.timestamp_millis_opt(ts_ms).single()?;
    Some((
        t.weekday().num_days_from_monday() as usize,
        t.hour() as usize,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_slots_wrap_the_week() {
        let w = OffpeakWindow {
            finding_id: String::new(),
            period: "week".into(),
            days: vec!["Sun".into()],
            start: "22:00".into(),
            end: "02:00".into(),
            hours: 4.0,
            expected_free_gpus: 1,
            confidence: 1.0,
            cron_start: String::new(),
            cron_end: String::new(),
            tier: 1,
            above_baseline: 1,
            systemd_start: String::new(),
            systemd_end: String::new(),
            peaks: Vec::new(),
        };
        // A higher tier inside it: Mon 00:00–01:00 with 3 free.
        let inner = OffpeakWindow {
            days: vec!["Mon".into()],
            start: "00:00".into(),
            hours: 1.0,
            expected_free_gpus: 3,
            tier: 2,
            ..w.clone()
        };
        let s = window_slots(&[w, inner]);
        assert_eq!(
            s.into_iter().collect::<Vec<_>>(),
            vec![(0, 3), (1, 1), (166, 1), (167, 1)]
        );
    }
}
