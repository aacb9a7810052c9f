//! The analyzer's time vocabulary, a leaf every module may use: times for people and files
//! (`fmt_ms`: unix ms as RFC 3339 UTC with milliseconds; `period_title`: a range as people read
//! it, in a time zone) and the one reading of a time flag (`parse_time`: a duration back from
//! now, an RFC 3339 time, or a date).
//!
//! What it does not do: time ranges (`crate::range`), freshness (`crate::evidence`) or durations
//! (`tessera_core::units`).

/// A time flag that is none of the forms [`parse_time`] reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad time {value:?}: {reason}")]
pub struct TimeError {
    pub value: String,
    pub reason: String,
}

/// Parses `--since`/`--until`: a duration back from `now_ms` (`90s`, `30m`, `12h`, `7d`, `2w`),
/// an RFC 3339 time, or a date (`2026-11-02`, midnight UTC). Returns unix ms.
pub fn parse_time(value: &str, now_ms: i64) -> Result<i64, TimeError> {
    let err = |reason: &str| TimeError {
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let v = value.trim();
    if v.starts_with(|c: char| c.is_ascii_digit())
        && v.ends_with(|c: char| c.is_ascii_alphabetic())
        && !v.contains(['-', ':', 'T'])
    {
        // A duration back from now, through the one duration parser (`0s` is now).
        if v.trim_start_matches(['0', '.'])
            .starts_with(|c: char| c.is_ascii_alphabetic())
        {
            return Ok(now_ms);
        }
        let d = tessera_core::units::parse_duration(v).map_err(|e| err(&e))?;
        let ms = i64::try_from(d.as_millis()).map_err(|_| err("duration too long"))?;
        return Ok(now_ms.saturating_sub(ms));
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(t.timestamp_millis());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
        && let Some(t) = d.and_hms_opt(0, 0, 0)
    {
        return Ok(t.and_utc().timestamp_millis());
    }
    Err(err(
        "expected a duration like 7d or 12h, an RFC 3339 time, or a date YYYY-MM-DD",
    ))
}

/// Formats unix ms as RFC 3339 UTC (for reports).
pub fn fmt_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// A range `(from, until]` as people read it, in `tz`: "Mon 2 – Thu 5 Nov 2026, Europe/Berlin"
/// (the last day shown is the one the range's last instant falls on, so a range ending at
/// midnight ends the day before); with the times when the range does not start and end at
/// midnight there ("Mon 2 Nov 10:00 – Mon 2 Nov 14:30 2026, UTC"). `None` when a bound is not
/// RFC 3339 or the zone is unknown.
pub fn period_title(from: &str, until: &str, tz: &str) -> Option<String> {
    use chrono::{Datelike, Timelike};
    let zone: chrono_tz::Tz = tz.parse().ok()?;
    let parse = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.with_timezone(&zone))
    };
    let (a, b) = (parse(from)?, parse(until)?);
    let midnight = |t: &chrono::DateTime<chrono_tz::Tz>| {
        t.hour() == 0 && t.minute() == 0 && t.second() == 0 && t.nanosecond() == 0
    };
    let whole_days = midnight(&a) && midnight(&b) && b > a;
    // The day the range's last instant falls on.
    let last = if whole_days {
        b - chrono::Duration::milliseconds(1)
    } else {
        b
    };
    let text = if whole_days {
        if a.year() != last.year() {
            format!(
                "{} – {}",
                a.format("%a %-d %b %Y"),
                last.format("%a %-d %b %Y")
            )
        } else if a.month() != last.month() {
            format!(
                "{} – {}",
                a.format("%a %-d %b"),
                last.format("%a %-d %b %Y")
            )
        } else if a.day() != last.day() {
            format!("{} – {}", a.format("%a %-d"), last.format("%a %-d %b %Y"))
        } else {
            last.format("%a %-d %b %Y").to_string()
        }
    } else if a.year() != b.year() {
        format!(
            "{} – {}",
            a.format("%a %-d %b %Y %H:%M"),
            b.format("%a %-d %b %Y %H:%M")
        )
    } else {
        format!(
            "{} – {} {}",
            a.format("%a %-d %b %H:%M"),
            b.format("%a %-d %b %H:%M"),
            b.format("%Y")
        )
    };
    Some(format!("{text}, {tz}"))
}

#[cfg(test)]
mod period_tests {
    use super::period_title;

    #[test]
    fn ranges_read_as_days_in_their_zone() {
        let t = |a: &str, b: &str, tz: &str| period_title(a, b, tz).unwrap();
        assert_eq!(
            t("2026-11-02T00:00:00Z", "2026-11-06T00:00:00Z", "UTC"),
            "Mon 2 – Thu 5 Nov 2026, UTC"
        );
        // The same instants in Berlin start and end at 01:00: times are shown.
        assert_eq!(
            t(
                "2026-11-02T00:00:00Z",
                "2026-11-06T00:00:00Z",
                "Europe/Berlin"
            ),
            "Mon 2 Nov 01:00 – Fri 6 Nov 01:00 2026, Europe/Berlin"
        );
        assert_eq!(
            t(
                "2026-11-29T23:00:00Z",
                "2026-12-06T23:00:00Z",
                "Europe/Berlin"
            ),
            "Mon 30 Nov – Sun 6 Dec 2026, Europe/Berlin"
        );
        assert_eq!(
            t("2026-12-30T00:00:00Z", "2027-01-02T00:00:00Z", "UTC"),
            "Wed 30 Dec 2026 – Fri 1 Jan 2027, UTC"
        );
        assert_eq!(
            t("2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z", "UTC"),
            "Mon 2 Nov 2026, UTC"
        );
        assert!(period_title("x", "2026-11-03T00:00:00Z", "UTC").is_none());
        assert!(
            period_title("2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z", "Mars/Base").is_none()
        );
    }
}
