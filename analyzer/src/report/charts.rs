//! Chart helpers: the hour-of-week slots the off-peak windows cover (with the GPUs each expects
//! free), and the local hour-of-week slot of a time, for the free-capacity timeline and the
//! hour-of-week heatmap.
//!
//! This module does not tally the series themselves (the tallies do) or draw them (`html`).

use std::collections::BTreeMap;

use chrono::{Datelike, TimeZone, Timelike};
use chrono_tz::Tz;

use super::model::OffpeakWindow;
use crate::frames::columns::FastMap;

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

/// [`slot_of`] of many times, worked out once per quarter hour of UTC time (times in order share
/// most quarters): a quarter whose first and last millisecond have the same slot and the same
/// UTC offset has that slot throughout (local time runs on without a jump inside it); any other
/// quarter (a change of offset, or an hour that does not start on a quarter hour) is answered
/// time by time. The same values as `slot_of` on each time, exactly.
pub(super) fn slots_of(times: impl Iterator<Item = i64>, tz: &Tz) -> Vec<Option<(u8, u8)>> {
    use chrono::Offset;
    const QUARTER: i64 = 900_000;
    let at = |t: i64| {
        tz.timestamp_millis_opt(t).single().map(|d| {
            let slot = (d.weekday().num_days_from_monday() as u8, d.hour() as u8);
            (slot, d.offset().fix())
        })
    };
    let of_quarter = |q: i64| -> Option<Option<(u8, u8)>> {
        let first = q.checked_mul(QUARTER)?;
        let last = first.checked_add(QUARTER - 1)?;
        match (at(first), at(last)) {
            (Some(a), Some(b)) if a == b => Some(Some(a.0)),
            _ => None,
        }
    };
    /// A quarter's slot, or `None` when it must be answered time by time.
    type Quarter = Option<Option<(u8, u8)>>;
    let mut known: FastMap<i64, Quarter> = FastMap::default();
    let mut last: Option<(i64, Quarter)> = None;
    times
        .map(|t| {
            let q = t.div_euclid(QUARTER);
            let quarter = match last {
                Some((k, v)) if k == q => v,
                _ => {
                    let v = *known.entry(q).or_insert_with(|| of_quarter(q));
                    last = Some((q, v));
                    v
                }
            };
            quarter.unwrap_or_else(|| slot_of(t, tz).map(|(d, h)| (d as u8, h as u8)))
        })
        .collect()
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

    #[test]
    fn slots_of_many_times_equal_slot_of_each_in_every_kind_of_zone() {
        // Quarter-hour and whole-hour offsets, a zone whose hours started off the quarter
        // (Amsterdam, +00:19:32 until 1937) and one whose changes were at 00:01 local (St
        // John's, -03:30, until 2011), around their changes of offset, every 7 minutes and 13
        // seconds, forwards and backwards.
        let zones: [Tz; 5] = [
            chrono_tz::Europe::Berlin,
            chrono_tz::Asia::Kathmandu,
            chrono_tz::Australia::Lord_Howe,
            chrono_tz::Europe::Amsterdam,
            chrono_tz::America::St_Johns,
        ];
        let spans = [
            (1_616_893_200_000i64, 1_635_638_400_000i64), // 2021-03-28 .. 2021-10-31
            (-1_400_000_000_000, -1_390_000_000_000),     // 1925
            (1_289_000_000_000, 1_289_300_000_000),       // 2010-11
        ];
        for tz in zones {
            for (from, until) in spans {
                let around = |t: i64| -> Vec<i64> {
                    (0..1_330).map(|k| t - 288_000_000 + k * 433_000).collect()
                };
                let mut times = around(from);
                times.extend(around(until));
                times.extend(around(until).into_iter().rev());
                let fast = slots_of(times.iter().copied(), &tz);
                for (t, s) in times.iter().zip(fast) {
                    let s = s.map(|(d, h)| (usize::from(d), usize::from(h)));
                    assert_eq!(s, slot_of(*t, &tz), "{tz} at {t}");
                }
            }
        }
    }
}
