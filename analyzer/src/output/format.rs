//! The one `--format` vocabulary of every command ([`Format`]) and the parser that gives each
//! command its own subset ([`Formats`]), so `--help` lists exactly the formats a command writes
//! and a format it does not write is refused by clap with the list.
//!
//! It names formats only; rendering is the other output modules'.

use clap::builder::{PossibleValue, TypedValueParser};

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Terminal tables.
    Table,
    /// Plain text (`share plan`'s name for its table).
    Text,
    /// GitHub-flavoured Markdown.
    Markdown,
    /// One self-contained HTML page.
    Html,
    /// A JSON document.
    Json,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Text => "text",
            Format::Markdown => "markdown",
            Format::Html => "html",
            Format::Json => "json",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A `--format` parser accepting the formats in its list only (case-insensitive), in that order
/// in `--help`.
#[derive(Debug, Clone, Copy)]
pub struct Formats(pub &'static [Format]);

impl TypedValueParser for Formats {
    type Value = Format;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Format, clap::Error> {
        let wanted = value.to_string_lossy();
        if let Some(f) = self
            .0
            .iter()
            .find(|f| f.name().eq_ignore_ascii_case(&wanted))
        {
            return Ok(*f);
        }
        // clap's own error, with the valid values listed.
        let names: Vec<&str> = self.0.iter().map(|f| f.name()).collect();
        clap::builder::PossibleValuesParser::new(names)
            .parse_ref(cmd, arg, value)
            .map(|_| self.0[0])
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            self.0.iter().map(|f| PossibleValue::new(f.name())),
        ))
    }
}

/// Table or JSON: `analyze`, `ingest`, `job`, `mig plan`, `mig profiles`.
pub const TABLE_JSON: Formats = Formats(&[Format::Table, Format::Json]);
/// Every document format: `report`, `replay`.
pub const DOCUMENT: Formats =
    Formats(&[Format::Table, Format::Markdown, Format::Html, Format::Json]);
/// Text or JSON: `share plan`.
pub const TEXT_JSON: Formats = Formats(&[Format::Text, Format::Json]);

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[arg(long, value_parser = TABLE_JSON, default_value_t = Format::Table)]
        format: Format,
    }

    #[test]
    fn a_command_accepts_its_formats_only() {
        assert_eq!(Cli::try_parse_from(["x"]).unwrap().format, Format::Table);
        let j = Cli::try_parse_from(["x", "--format", "JSON"]).unwrap();
        assert_eq!(j.format, Format::Json);
        let err = Cli::try_parse_from(["x", "--format", "html"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("possible values: table, json"), "{err}");
    }
}
