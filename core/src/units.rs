//! The one parser for durations and the one for sizes that every flag of both binaries uses.
//!
//! - [`parse_duration`]: `500ms`, `1s`, `1.5m`, `2h`, `30d`, `1w` (a number and one unit, greater
//!   than zero), as Prometheus writes a single-unit duration.
//! - [`parse_bytes`]: `4096`, `10MB`, `512MiB`, `1GiB` (SI and IEC units, at least one byte).
//!
//! Pure string → value functions; no flags, no I/O. Errors are the message clap prints after the
//! flag's name.

use std::time::Duration;

/// Parses a duration: a number (decimals allowed) and one unit of `ms`, `s`, `m`, `h`, `d` or `w`.
/// Zero, negative, non-finite and unit-less values are refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        format!("invalid duration {s:?}: expected a number and a unit, e.g. 500ms, 10s, 1m or 7d")
    })?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        "w" => value * 604_800.0,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: unit must be ms, s, m, h, d or w"
            ));
        }
    };
    // Digits and dots parse to a number or to infinity, never NaN.
    if secs <= 0.0 {
        return Err(format!("invalid duration {s:?}: must be greater than zero"));
    }
    if secs >= 1e12 {
        return Err(format!("invalid duration {s:?}: too long"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a size such as `1GiB`, `512MiB`, `10MB` or `4096` (bytes).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: expected a number and a unit, e.g. 512MiB"))?;
    let mult: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "invalid size {s:?}: unknown unit {u:?} (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ));
        }
    };
    let bytes = value * mult;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("invalid size {s:?}: must be at least 1 byte"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::{parse_bytes, parse_duration};
    use std::time::Duration;

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5m").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(
            parse_duration("30d").unwrap(),
            Duration::from_secs(30 * 86_400)
        );
        assert_eq!(parse_duration("1w").unwrap(), Duration::from_secs(604_800));
    }

    #[test]
    fn durations_refused_say_why() {
        assert!(
            parse_duration("0s")
                .unwrap_err()
                .contains("greater than zero")
        );
        assert!(
            parse_duration("5 parsecs")
                .unwrap_err()
                .contains("unit must be")
        );
        assert!(parse_duration("10").unwrap_err().contains("unit must be"));
        assert!(
            parse_duration("s")
                .unwrap_err()
                .contains("expected a number")
        );
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1e400s").is_err());
        assert!(
            parse_duration("99999999999999d")
                .unwrap_err()
                .contains("too long")
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("10MB"), Ok(10_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("1XB").is_err());
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("GiB").is_err());
    }
}
