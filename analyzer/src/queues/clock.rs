//! The off-peak queue's clock (docs/queues.md, "Window edges"): when each weekly window opens and
//! closes in the plan's time zone, what the deferred-training queue holds at a given instant
//! ([`state_at`]: its GPUs and its Kueue `stopPolicy`, the end-of-window policy included), and
//! the local times at which that changes ([`edges`]: what the generated CronJobs fire on).
//!
//! Times are wall-clock in the plan's zone: a window `18:00` for 15 hours closes at 09:00 local
//! on every day, across daylight-saving changes. A local time that does not exist (the skipped
//! hour of spring) is taken as the same time an hour later; one that exists twice (autumn) is
//! the first. The replay ([`super::replay`]), the Kueue apply and the CronJobs share these rules.
//!
//! Pure: no I/O, and "now" is the caller's. What it does not do: decide the windows (the plan
//! does) or schedule anything (`kueue` writes the CronJobs).

use std::collections::BTreeSet;

use chrono::{DateTime, Datelike, Duration, NaiveDateTime, NaiveTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use tessera_core::mig::plan_queues::{DAYS, EndOfWindow, ModelGpus, OffpeakQueue};

/// How long a drain (`HoldAndDrain`) is held before the queue admits again up to its floor.
pub const DRAIN_MINUTES: i64 = 10;

/// One opening of a window line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opening {
    pub line: usize,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// The local close (wall clock), from which the end-of-window times count.
    pub end_local: NaiveDateTime,
}

/// Kueue's `stopPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stop {
    None,
    /// Admit nothing new; what runs goes on.
    Hold,
    /// Admit nothing and evict what was admitted.
    HoldAndDrain,
}

impl Stop {
    /// Kueue's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::None => "None",
            Stop::Hold => "Hold",
            Stop::HoldAndDrain => "HoldAndDrain",
        }
    }
}

/// What the deferred-training queue holds at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffpeakState {
    /// The open window's line, if one is open.
    pub window: Option<usize>,
    pub gpus: Vec<ModelGpus>,
    pub stop: Stop,
    /// Why, for people: "window 1 open until …", "closed since …, drained".
    pub why: String,
}

/// The instant of a local wall-clock time (a skipped time is taken an hour later).
pub fn instant(tz: Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    tz.from_local_datetime(&local)
        .earliest()
        .or_else(|| {
            tz.from_local_datetime(&(local + Duration::hours(1)))
                .earliest()
        })
        .map(|t| t.with_timezone(&Utc))
}

/// The plan's time zone, or why it is not one.
pub fn zone(o: &OffpeakQueue) -> Result<Tz, String> {
    o.timezone
        .parse::<Tz>()
        .map_err(|_| format!("unknown time zone {:?} (an IANA name)", o.timezone))
}

/// Every opening that overlaps `[from, until)`, by start.
pub fn openings(
    o: &OffpeakQueue,
    tz: Tz,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Vec<Opening> {
    let mut out = Vec::new();
    // Windows that start up to a week (plus a day of zone offset) before can reach into it.
    let mut day = from.with_timezone(&tz).date_naive() - Duration::days(8);
    let last = until.with_timezone(&tz).date_naive();
    while day <= last {
        let name = DAYS[day.weekday().num_days_from_monday() as usize];
        for (line, w) in o.windows.iter().enumerate() {
            if !(w.days.is_empty() || w.days.iter().any(|d| d == name)) {
                continue;
            }
            let Ok(t) = NaiveTime::parse_from_str(&w.start, "%H:%M") else {
                continue;
            };
            let local = day.and_time(t);
            let end_local = local + Duration::hours(i64::from(w.hours));
            let (Some(start), Some(end)) = (instant(tz, local), instant(tz, end_local)) else {
                continue;
            };
            if start < until && end > from && end > start {
                out.push(Opening {
                    line,
                    start,
                    end,
                    end_local,
                });
            }
        }
        day += Duration::days(1);
    }
    out.sort_by_key(|o| (o.start, o.line));
    out
}

fn fmt_local(tz: Tz, t: DateTime<Utc>) -> String {
    t.with_timezone(&tz)
        .format("%a %Y-%m-%d %H:%M %Z")
        .to_string()
}

/// What the queue holds at `t`: an open window's GPUs (the first line by start, where lines
/// overlap), else the floor, with the end-of-window policy's stop after the last close:
/// `finish` never stops; `max-runtime:H` drains H hours after the close; `drain:M` holds at the
/// close and drains M minutes later. A drain lasts [`DRAIN_MINUTES`], then the queue admits up
/// to its floor again.
pub fn state_at(o: &OffpeakQueue, tz: Tz, t: DateTime<Utc>) -> OffpeakState {
    let around = openings(o, tz, t - Duration::days(9), t + Duration::minutes(1));
    if let Some(open) = around.iter().find(|w| w.start <= t && t < w.end) {
        return OffpeakState {
            window: Some(open.line),
            gpus: o.windows[open.line].gpus.clone(),
            stop: Stop::None,
            why: format!(
                "window {} open until {}",
                open.line + 1,
                fmt_local(tz, open.end)
            ),
        };
    }
    let floor = |stop: Stop, why: String| OffpeakState {
        window: None,
        gpus: o.floor.clone(),
        stop,
        why,
    };
    let Some(close) = around.iter().filter(|w| w.end <= t).max_by_key(|w| w.end) else {
        return floor(Stop::None, "no window open: the floor".into());
    };
    let closed = format!("closed since {}", fmt_local(tz, close.end));
    let (hold_until, drain_at) = match o.end {
        EndOfWindow::Finish => return floor(Stop::None, format!("{closed}: the floor")),
        EndOfWindow::MaxRuntime { hours } => (
            None,
            instant(tz, close.end_local + Duration::hours(i64::from(hours))),
        ),
        EndOfWindow::Drain { notice_minutes } => {
            let at = instant(
                tz,
                close.end_local + Duration::minutes(i64::from(notice_minutes)),
            );
            (at, at)
        }
    };
    let Some(drain_at) = drain_at else {
        return floor(Stop::None, format!("{closed}: the floor"));
    };
    if hold_until.is_some_and(|h| t < h) {
        return floor(
            Stop::Hold,
            format!("{closed}: held, drained at {}", fmt_local(tz, drain_at)),
        );
    }
    if t >= drain_at && t < drain_at + Duration::minutes(DRAIN_MINUTES) {
        return floor(
            Stop::HoldAndDrain,
            format!("{closed}: draining since {}", fmt_local(tz, drain_at)),
        );
    }
    floor(Stop::None, format!("{closed}: the floor"))
}

/// A local time of the week at which the queue changes: on these days (0 = Sunday … 6 =
/// Saturday, cron's numbering; empty = every day) at `hour:minute`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub hour: u32,
    pub minute: u32,
    pub days: BTreeSet<u32>,
}

impl Edge {
    /// The cron line (minute hour day-of-month month day-of-week).
    pub fn cron(&self) -> String {
        let days = if self.days.is_empty() || self.days.len() == 7 {
            "*".to_string()
        } else {
            self.days
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        format!("{} {} * * {days}", self.minute, self.hour)
    }
}

/// Every local time at which [`state_at`] changes: the windows' opens and closes and the
/// end-of-window policy's hold, drain and release, merged by time of day.
pub fn edges(o: &OffpeakQueue) -> Vec<Edge> {
    let mut at: std::collections::BTreeMap<(u32, u32), BTreeSet<u32>> = Default::default();
    let mut every: BTreeSet<(u32, u32)> = BTreeSet::new();
    let after_close: Vec<i64> = match o.end {
        EndOfWindow::Finish => vec![],
        EndOfWindow::MaxRuntime { hours } => {
            let m = i64::from(hours) * 60;
            vec![m, m + DRAIN_MINUTES]
        }
        EndOfWindow::Drain { notice_minutes } => {
            let m = i64::from(notice_minutes);
            vec![m, m + DRAIN_MINUTES]
        }
    };
    for w in &o.windows {
        let Ok(t) = NaiveTime::parse_from_str(&w.start, "%H:%M") else {
            continue;
        };
        let start = i64::from(t.hour() * 60 + t.minute());
        let close = start + i64::from(w.hours) * 60;
        let mut offsets = vec![start, close];
        offsets.extend(after_close.iter().map(|m| close + m));
        for minutes in offsets {
            let hm = (
                (minutes.rem_euclid(1440) / 60) as u32,
                (minutes.rem_euclid(60)) as u32,
            );
            if w.days.is_empty() {
                every.insert(hm);
                continue;
            }
            let shift = minutes.div_euclid(1440);
            let days = at.entry(hm).or_default();
            for d in &w.days {
                if let Some(i) = DAYS.iter().position(|x| x == d) {
                    // DAYS is Monday first; cron's 0 is Sunday.
                    let monday_first = (i as i64 + shift).rem_euclid(7);
                    days.insert(((monday_first + 1) % 7) as u32);
                }
            }
        }
    }
    for hm in every {
        at.insert(hm, BTreeSet::new());
    }
    at.into_iter()
        .map(|((hour, minute), days)| Edge { hour, minute, days })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_core::mig::plan_queues::QueueWindow;

    fn plan(end: EndOfWindow) -> OffpeakQueue {
        OffpeakQueue {
            queue: "tessera-offpeak".into(),
            timezone: "Europe/Berlin".into(),
            floor: vec![ModelGpus {
                model: "m".into(),
                gpus: 1,
            }],
            windows: vec![QueueWindow {
                days: vec!["Sat".into()],
                start: "22:00".into(),
                hours: 10,
                gpus: vec![ModelGpus {
                    model: "m".into(),
                    gpus: 6,
                }],
            }],
            end,
        }
    }

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_window_over_the_autumn_change_closes_at_the_local_time() {
        let o = plan(EndOfWindow::Finish);
        let tz = zone(&o).unwrap();
        // Sat 2026-10-24 22:00 CEST = 20:00Z; Sun 08:00 CET = 07:00Z (11 hours later).
        let ops = openings(&o, tz, t("2026-10-24T00:00:00Z"), t("2026-10-26T00:00:00Z"));
        assert_eq!(ops.len(), 1);
        assert_eq!(ops[0].start, t("2026-10-24T20:00:00Z"));
        assert_eq!(ops[0].end, t("2026-10-25T07:00:00Z"));
        assert_eq!(state_at(&o, tz, t("2026-10-25T06:59:00Z")).gpus[0].gpus, 6);
        let after = state_at(&o, tz, t("2026-10-25T07:00:00Z"));
        assert_eq!((after.gpus[0].gpus, after.stop), (1, Stop::None));
        assert_eq!(
            edges(&o).iter().map(Edge::cron).collect::<Vec<_>>(),
            ["0 8 * * 0", "0 22 * * 6"]
        );
    }

    #[test]
    fn end_of_window_policies_hold_and_drain_at_their_times() {
        let o = plan(EndOfWindow::Drain { notice_minutes: 30 });
        let tz = zone(&o).unwrap();
        let at = |s: &str| state_at(&o, tz, t(s)).stop;
        assert_eq!(at("2026-10-25T07:00:00Z"), Stop::Hold);
        assert_eq!(at("2026-10-25T07:29:00Z"), Stop::Hold);
        assert_eq!(at("2026-10-25T07:30:00Z"), Stop::HoldAndDrain);
        assert_eq!(at("2026-10-25T07:39:59Z"), Stop::HoldAndDrain);
        assert_eq!(at("2026-10-25T07:40:00Z"), Stop::None);
        assert_eq!(
            edges(&o).iter().map(Edge::cron).collect::<Vec<_>>(),
            ["0 8 * * 0", "30 8 * * 0", "40 8 * * 0", "0 22 * * 6"]
        );
        let o = plan(EndOfWindow::MaxRuntime { hours: 4 });
        let at = |s: &str| state_at(&o, tz, t(s)).stop;
        assert_eq!(at("2026-10-25T10:59:00Z"), Stop::None);
        assert_eq!(at("2026-10-25T11:00:00Z"), Stop::HoldAndDrain);
        assert_eq!(at("2026-10-25T11:10:00Z"), Stop::None);
    }

    #[test]
    fn a_window_past_midnight_closes_on_the_next_days() {
        let mut o = plan(EndOfWindow::Finish);
        o.windows[0].days = vec!["Fri".into(), "Sun".into()];
        o.windows[0].start = "23:30".into();
        o.windows[0].hours = 2;
        // Fri 23:30 → Sat 01:30; Sun 23:30 → Mon 01:30.
        assert_eq!(
            edges(&o).iter().map(Edge::cron).collect::<Vec<_>>(),
            ["30 1 * * 1,6", "30 23 * * 0,5"]
        );
        o.windows[0].days.clear();
        assert_eq!(
            edges(&o).iter().map(Edge::cron).collect::<Vec<_>>(),
            ["30 1 * * *", "30 23 * * *"]
        );
    }
}
