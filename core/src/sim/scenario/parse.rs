//! Reading a scenario: the file read no further than [`limits::FILE_BYTES`], the TOML parsed
//! strictly into a [`Scenario`], then [`Scenario::validate`]d; TOML errors are written with
//! their line, column and a short excerpt of the line.
//!
//! It does not check cross references or value ranges itself: that is [`super::validate`].

use std::path::Path;

use super::{SEE_LIMITS, Scenario, ScenarioError, limits};
use crate::input_limits;

impl Scenario {
    /// Read, parse and validate a scenario file (refused past [`limits::FILE_BYTES`] without
    /// reading further).
    pub fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = input_limits::read_to_string(path, limits::FILE_BYTES).map_err(|e| match e {
            input_limits::ReadError::Io(source) => ScenarioError::Read {
                path: path.to_path_buf(),
                source,
            },
            input_limits::ReadError::Limit(e) => ScenarioError::Invalid {
                path: path.display().to_string(),
                item: "file".into(),
                message: format!("{e}{SEE_LIMITS}"),
            },
        })?;
        Scenario::from_toml(&text, &path.display().to_string())
    }

    /// Parse and validate scenario text; `source` names it in errors.
    pub fn from_toml(text: &str, source: &str) -> Result<Scenario, ScenarioError> {
        if text.len() as u64 > limits::FILE_BYTES {
            return Err(ScenarioError::Invalid {
                path: source.to_string(),
                item: "file".into(),
                message: format!(
                    "{}{SEE_LIMITS}",
                    input_limits::LimitError::TooLarge {
                        size: Some(text.len() as u64),
                        limit: limits::FILE_BYTES,
                    }
                ),
            });
        }
        let mut s: Scenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: source.to_string(),
            message: toml_message(text, &e),
        })?;
        s.source = source.to_string();
        s.validate()?;
        Ok(s)
    }
}

/// A TOML error on one line: its position and message, without toml's echo of the source line
/// (a whole, possibly megabytes-long line, twice).
fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let message = input_limits::clip(e.message().trim_end());
    match e.span() {
        Some(span) => {
            let before = &text.as_bytes()[..span.start.min(text.len())];
            let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
            let line_start = before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let column = String::from_utf8_lossy(&before[line_start..])
                .chars()
                .count()
                + 1;
            let rest = &text[line_start..];
            let source_line = &rest[..rest.find('\n').unwrap_or(rest.len())];
            format!(
                "TOML parse error at line {line}, column {column} ({}): {message}",
                excerpt(source_line.trim_end(), column - 1)
            )
        }
        None => format!("TOML parse error: {message}"),
    }
}

/// At most 80 characters of `line` around character `column`, marked `…` where cut.
fn excerpt(line: &str, column: usize) -> String {
    let chars: Vec<char> = line.chars().take(column + 41).collect();
    let from = column.saturating_sub(40).min(chars.len());
    let mut out: String = chars[from..].iter().collect();
    if from > 0 {
        out.insert(0, '…');
    }
    if line.chars().count() > chars.len() {
        out.push('…');
    }
    format!("`{out}`")
}
