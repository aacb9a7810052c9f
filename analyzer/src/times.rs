//! The analyzer's time vocabulary, a leaf every module may use: times for people and files
//! (`fmt_ms`: unix ms as RFC 3339 UTC with milliseconds) and the one reading of a time flag
//! (`parse_time`: a duration back from now, an RFC 3339 time, or a date).
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
