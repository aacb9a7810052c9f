//! The one time-range rule of every command that reads telemetry (`analyze`, `report`,
//! `mig plan`, `job`, `ingest`), documented in docs/frames.md ("Time ranges"):
//!
//! - A row belongs to a range when its interval **ends** in `(since, until]` (rows are
//!   `(ts − interval_ms, ts]`, docs/frames.md), so a row ending exactly at `since` belongs to the
//!   range before, and ranges that meet share no row.
//! - `--until` defaults to the end of the data (its last row's end), never to "now".
//! - `--since` defaults to 7 days before the range's end ([`DEFAULT_SPAN_MS`]), or the start of
//!   the data when it holds less.
//! - A range reaching past the data (before its first row's start or after its last row's end)
//!   is narrowed to the data, and says so in one line: hours with no data are neither available
//!   nor priced.
//!
//! [`RangeRequest`] is what the flags ask for, before the data is known; [`RangeRequest::resolve`]
//! turns it into the [`TimeRange`] a command works on, with the lines it prints. Pure: it reads
//! no data (the caller says where the data starts and ends) and has no clock (the caller passes
//! "now" to [`RangeRequest::parse`]). It does not filter frames (`tessera::frames::Frames::within` does).

use serde::Serialize;

use crate::times::{TimeError, fmt_ms, parse_time};

/// The default length of a range: 7 days.
pub const DEFAULT_SPAN_MS: i64 = 7 * 86_400_000;

/// How far past the data a range may reach before it is said (5 minutes, Prometheus' lookback:
/// a range ending on the hour over data whose last scrape was a minute before is not news).
const PAST_DATA_SLACK_MS: i64 = 5 * 60_000;

/// A bad range.
#[derive(Debug, thiserror::Error)]
pub enum RangeError {
    #[error(transparent)]
    Time(#[from] TimeError),
    #[error("--since {since} is not before --until {until}: the range (since, until] is empty")]
    Empty { since: String, until: String },
}

/// `--since` and `--until` as the flags give them (unix ms), before the data is known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeRequest {
    pub since: Option<i64>,
    pub until: Option<i64>,
}

/// A range of row ends: rows whose interval ends in `(since, until]`, unix ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimeRange {
    pub since: i64,
    pub until: i64,
}

impl TimeRange {
    /// Whether a row ending at `ts` belongs to the range.
    pub fn contains(&self, ts: i64) -> bool {
        ts > self.since && ts <= self.until
    }

    /// Its length, ms (never negative).
    pub fn len_ms(&self) -> i64 {
        (self.until - self.since).max(0)
    }

    /// The range of the same length just before it (week over week).
    pub fn previous(&self) -> TimeRange {
        TimeRange {
            since: self.since - self.len_ms(),
            until: self.since,
        }
    }

    /// `2026-11-02T00:00:00.000Z .. 2026-11-09T00:00:00.000Z`.
    pub fn label(&self) -> String {
        format!("{} .. {}", fmt_ms(self.since), fmt_ms(self.until))
    }
}

/// A range resolved against the data: the range and the lines that explain it (stderr).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub range: TimeRange,
    /// What the command says about the range: the default of the last 7 days. One line each.
    pub messages: Vec<String>,
    /// A range asked for that reaches past the data, said: what is counted instead. A command
    /// whose range is a search window (`tessera job`: find the job in the last 30 days) need not
    /// say it.
    pub past_data: Option<String>,
}

impl RangeRequest {
    /// Parses `--since`/`--until` (a duration back from `now_ms`, an RFC 3339 time or a date:
    /// [`parse_time`]); refuses `since ≥ until`.
    pub fn parse(
        since: Option<&str>,
        until: Option<&str>,
        now_ms: i64,
    ) -> Result<RangeRequest, RangeError> {
        let since = since.map(|s| parse_time(s, now_ms)).transpose()?;
        let until = until.map(|s| parse_time(s, now_ms)).transpose()?;
        if let (Some(s), Some(u)) = (since, until)
            && s >= u
        {
            return Err(RangeError::Empty {
                since: fmt_ms(s),
                until: fmt_ms(u),
            });
        }
        Ok(RangeRequest { since, until })
    }

    /// The bounds ingest reads, `(since, until]` each when given; with `previous`, reaching one
    /// range's length further back for the period before it (the end taken as `now_ms` when
    /// `--until` is not given: the data's end is not known yet, and reading more is harmless).
    pub fn read_bounds(&self, previous: bool, now_ms: i64) -> (Option<i64>, Option<i64>) {
        let since = match (self.since, previous) {
            (Some(s), true) => Some(s - (self.until.unwrap_or(now_ms) - s).max(0)),
            (s, _) => s,
        };
        (since, self.until)
    }

    /// [`Self::read_bounds`] with `previous`, reaching back at least `back_ms` before the end
    /// (the report's trend: its weeks before the range); `since` stays open when it is.
    pub fn read_bounds_back(&self, back_ms: i64, now_ms: i64) -> (Option<i64>, Option<i64>) {
        let (since, until) = self.read_bounds(true, now_ms);
        let end = self.until.unwrap_or(now_ms);
        (since.map(|s| s.min(end - back_ms.max(0))), until)
    }

    /// The range over data whose last row ends at `last_end` and whose rows in the read bounds
    /// end from `first_end` on; `first_start` gives the start of the earliest row's interval
    /// (asked only when the range might begin before the data). See the module docs for the
    /// rule; `verb` (`analysing`, `reporting`) words the default's line.
    pub fn resolve<E>(
        &self,
        first_end: i64,
        last_end: i64,
        first_start: impl FnOnce() -> Result<i64, E>,
        verb: &str,
    ) -> Result<Resolved, E> {
        let mut messages = Vec::new();
        let want_until = self.until.unwrap_or(last_end);
        let until = want_until.min(last_end);
        let want_since = self.since.unwrap_or(want_until - DEFAULT_SPAN_MS);
        // The data reaches back past `want_since` when a row ends at or before it; otherwise the
        // start of the first row is where the data starts.
        let since = if first_end <= want_since {
            want_since
        } else {
            want_since.max(first_start()?.min(first_end))
        };
        let since = since.min(until - 1);
        if self.since.is_none() && since == want_since {
            messages.push(format!(
                "{verb} the last 7 days of the data ({}); use --since and --until for another range",
                TimeRange { since, until }.label()
            ));
        }
        let before = self.since.is_some() && since - want_since > PAST_DATA_SLACK_MS;
        let after = self.until.is_some() && want_until - until > PAST_DATA_SLACK_MS;
        let mut past_data = None;
        if before || after {
            past_data = Some(format!(
                "the range {} reaches past the data: only {} is counted (hours with no data are neither available nor priced)",
                TimeRange {
                    since: want_since,
                    until: want_until
                }
                .label(),
                TimeRange { since, until }.label()
            ));
        }
        Ok(Resolved {
            range: TimeRange { since, until },
            messages,
            past_data,
        })
    }
}

/// How far after the clock evidence may end and still be believed (the clocks of two machines
/// differ a little; more is a wrong clock or a forged file).
pub const FUTURE_SKEW_MS: i64 = 5 * 60_000;

/// The age of evidence against the clock, by the one freshness rule of every command that acts
/// on it (`scale-down`, `notify`): data ending more than `max_age_ms` before `now_ms` is old,
/// more than [`FUTURE_SKEW_MS`] after it is from the future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    Fresh,
    /// Ended `age_ms` before now.
    Old {
        age_ms: i64,
    },
    /// Ends `ahead_ms` after now.
    Future {
        ahead_ms: i64,
    },
}

/// [`Freshness`] of data ending at `data_end_ms` (pure: the caller gives "now").
pub fn freshness(data_end_ms: i64, now_ms: i64, max_age_ms: i64) -> Freshness {
    let age = now_ms.saturating_sub(data_end_ms);
    if age > max_age_ms {
        Freshness::Old { age_ms: age }
    } else if -age > FUTURE_SKEW_MS {
        Freshness::Future { ahead_ms: -age }
    } else {
        Freshness::Fresh
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn freshness_is_old_past_the_maximum_and_future_past_the_skew_only() {
        let h = 3_600_000;
        assert_eq!(freshness(0, h, h), Freshness::Fresh);
        assert_eq!(freshness(0, h + 1, h), Freshness::Old { age_ms: h + 1 });
        assert_eq!(freshness(FUTURE_SKEW_MS, 0, h), Freshness::Fresh);
        assert_eq!(
            freshness(FUTURE_SKEW_MS + 1, 0, h),
            Freshness::Future {
                ahead_ms: FUTURE_SKEW_MS + 1
            }
        );
    }

    use super::*;

    const H: i64 = 3_600_000;
    const D: i64 = 24 * H;
    const T0: i64 = 1_793_577_600_000; // Monday 2026-11-02 00:00 UTC

    fn ok(v: i64) -> impl FnOnce() -> Result<i64, ()> {
        move || Ok(v)
    }

    #[test]
    fn until_defaults_to_the_end_of_the_data_and_since_to_7_days_before() {
        // Three weeks of 15-minute rows: first ends at T0+15m (starts at T0), last at T0+21d.
        let r = RangeRequest::default()
            .resolve(T0 + 900_000, T0 + 21 * D, ok(T0), "analysing")
            .unwrap();
        assert_eq!(
            r.range,
            TimeRange {
                since: T0 + 14 * D,
                until: T0 + 21 * D
            }
        );
        assert_eq!(r.messages.len(), 1);
        assert!(r.messages[0].starts_with("analysing the last 7 days"));
        // The row ending exactly at `since` is the range before's.
        assert!(!r.range.contains(T0 + 14 * D));
        assert!(r.range.contains(T0 + 14 * D + 1));
        assert!(r.range.contains(T0 + 21 * D));
    }

    #[test]
    fn since_without_until_runs_to_the_end_of_the_data_not_to_now() {
        let req = RangeRequest::parse(Some("2026-11-03T00:00:00Z"), None, T0 + 400 * D).unwrap();
        let r = req
            .resolve(T0 + 900_000, T0 + 21 * D, ok(T0), "reporting")
            .unwrap();
        assert_eq!(r.range.until, T0 + 21 * D);
        assert_eq!(r.range.since, T0 + D);
        assert!(r.messages.is_empty(), "{:?}", r.messages);
    }

    #[test]
    fn a_range_past_the_data_is_narrowed_to_it_and_says_so() {
        let req = RangeRequest {
            since: Some(T0 - 3 * D),
            until: Some(T0 + 30 * D),
        };
        let r = req
            .resolve(T0 + 900_000, T0 + 21 * D, ok(T0), "analysing")
            .unwrap();
        assert_eq!(
            r.range,
            TimeRange {
                since: T0,
                until: T0 + 21 * D
            }
        );
        assert!(r.messages.is_empty(), "{r:?}");
        assert!(
            r.past_data
                .as_deref()
                .unwrap()
                .contains("reaches past the data"),
            "{r:?}"
        );
        // A minute short of the data's end is not news.
        let req = RangeRequest {
            since: Some(T0 + D),
            until: Some(T0 + 21 * D + 60_000),
        };
        let r = req
            .resolve(T0 + 900_000, T0 + 21 * D, ok(T0), "analysing")
            .unwrap();
        assert!(r.messages.is_empty() && r.past_data.is_none(), "{r:?}");
    }

    #[test]
    fn short_data_starts_at_its_first_row_and_asks_only_then() {
        let r = RangeRequest::default()
            .resolve(T0 + 900_000, T0 + 2 * D, ok(T0), "analysing")
            .unwrap();
        assert_eq!(r.range.since, T0);
        assert!(r.messages.is_empty());
        // Data reaching back past the default start: the first row's start is not needed.
        let r = RangeRequest::default()
            .resolve(T0 + 900_000, T0 + 9 * D, || Err::<i64, ()>(()), "analysing")
            .unwrap();
        assert_eq!(r.range.since, T0 + 2 * D);
    }

    #[test]
    fn bounds_and_errors() {
        let e = RangeRequest::parse(Some("2026-11-03"), Some("2026-11-03"), T0).unwrap_err();
        assert!(e.to_string().contains("is not before"), "{e}");
        assert!(RangeRequest::parse(Some("yesterday"), None, T0).is_err());
        let req = RangeRequest::parse(Some("2d"), Some("1d"), T0).unwrap();
        assert_eq!(req.read_bounds(false, T0), (Some(T0 - 2 * D), Some(T0 - D)));
        assert_eq!(req.read_bounds(true, T0), (Some(T0 - 3 * D), Some(T0 - D)));
        assert_eq!(
            RangeRequest::default().read_bounds(true, T0),
            (None, None),
            "without --since the whole data is read"
        );
        let prev = TimeRange {
            since: T0,
            until: T0 + D,
        }
        .previous();
        assert_eq!((prev.since, prev.until), (T0 - D, T0));
    }
}
