//! Bounds on configuration input, checked before it is parsed: the size of a file (read without
//! ever holding more than the limit) and the nesting depth of YAML text.
//!
//! Why: libyaml's scanner (under serde_yaml_ng) spends time quadratic in the nesting depth of
//! flow collections — a 200 KB file of `[[[[…` 100,000 levels deep parsed for over a minute —
//! and a YAML parse holds all of a document's events at once, up to ~100 bytes per input byte
//! (measured: a flow sequence of one-digit numbers). Alias expansion ("billion laughs") is
//! already refused by serde_yaml_ng itself.
//!
//! - [`read_to_string`]: a file's text, refused once it passes a byte limit (also for files
//!   whose size the file system does not know, such as `/dev/zero` or a pipe).
//! - [`check_yaml`]: size and depth of YAML text against [`MAX_YAML_BYTES`] and
//!   [`MAX_YAML_DEPTH`]; [`check_yaml_with`] takes other limits; [`yaml_depth`] measures.
//! - [`clip`]: an error message cut to [`MAX_MESSAGE_CHARS`] (parsers quote offending input);
//!   [`yaml_error`]: a serde_yaml_ng error with its position always written, clipped.
//!
//! The depth scan reads the text once, in linear time, with memory proportional to the depth
//! it has seen (so bounded by the limit). It follows libyaml's scanner rules for what opens a
//! collection — flow `[` `{`, block sequences and mappings by indentation (a mapping opened by
//! a simple key encloses that key), indentless sequences, single-pair mappings inside flow
//! sequences — and for what does not: quoted, plain and block scalars, comments, tags, anchors,
//! directives. Its depth is an upper bound of the depth of every collection libyaml builds
//! (a property test compares it with serde_yaml_ng's values), so no deeper file gets through;
//! where libyaml would stop at a syntax error the scan carries on, which can only make it
//! stricter. Aliases are not expanded: their depth is serde_yaml_ng's business.
//!
//! Users: tessera's MIG plan and schedule ([`crate::mig::plan`]) and nvidia-mig-parted files
//! ([`crate::mig::parted`]); the scenario reader ([`crate::sim::scenario`]) uses
//! [`read_to_string`]. The limits are documented in `docs/mig.md`.
//!
//! This module is pure apart from [`read_to_string`], which reads the one file it is given.

mod yaml_scan;

use std::io::Read as _;
use std::path::Path;
use yaml_scan::Scan;

/// Largest YAML file tessera reads: 8 MiB, a MIG plan of about 4,000 GPUs in seven instances
/// with two configs; its parse holds at most ~100 bytes of events per input byte.
pub const MAX_YAML_BYTES: u64 = 8 << 20;

/// Deepest YAML nesting tessera reads: 32 collections. Its own files nest at most 7 deep.
pub const MAX_YAML_DEPTH: usize = 32;

/// Longest error message tessera builds from input, characters: parsers quote offending
/// values and lines, which may be megabytes long.
pub const MAX_MESSAGE_CHARS: usize = 1000;

/// `message` cut to [`MAX_MESSAGE_CHARS`], saying how much was left out.
pub fn clip(message: &str) -> String {
    match message.char_indices().nth(MAX_MESSAGE_CHARS) {
        None => message.to_string(),
        Some((cut, _)) => format!("{}… ({} more bytes)", &message[..cut], message.len() - cut),
    }
}

/// A serde_yaml_ng error as tessera reports it: always with its position (serde_yaml_ng leaves
/// out "line 1 column 1"; errors about the whole stream, such as a second document, say so),
/// and [`clip`]ped.
pub fn yaml_error(e: &serde_yaml_ng::Error) -> String {
    let text = e.to_string();
    match e.location() {
        Some(l) => {
            // Clip what may quote the input, never the position after it.
            let at = format!(" at line {} column {}", l.line(), l.column());
            let clipped = clip(text.strip_suffix(at.as_str()).unwrap_or(&text));
            if clipped.contains(" at line ") {
                clipped
            } else {
                clipped + &at
            }
        }
        None => clip(&text) + " (the whole file)",
    }
}

/// Input over a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// The file or text is larger than the limit; `size` is `None` when the file system does
    /// not know it (a pipe, a device) and reading stopped at the limit.
    #[error("larger than the limit of {limit} bytes{}", .size.map(|s| format!(" ({s} bytes)")).unwrap_or_default())]
    TooLarge { size: Option<u64>, limit: u64 },
    /// Collections nested deeper than the limit; the position (1-based) is that of the token
    /// that opened the first collection beyond it.
    #[error(
        "line {line} column {column}: nested deeper than {limit} levels (the limit for YAML input)"
    )]
    TooDeep {
        limit: usize,
        line: usize,
        column: usize,
    },
}

/// Errors of [`read_to_string`].
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// The UTF-8 text of `path`, refused once it is longer than `max_bytes` (checked against the
/// file's size first, then while reading, so at most `max_bytes + 1` bytes are ever held).
pub fn read_to_string(path: &Path, max_bytes: u64) -> Result<String, ReadError> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    let known = meta.is_file().then_some(meta.len());
    if let Some(size) = known
        && size > max_bytes
    {
        return Err(LimitError::TooLarge {
            size: Some(size),
            limit: max_bytes,
        }
        .into());
    }
    let mut buf = Vec::with_capacity(known.unwrap_or(0).min(max_bytes) as usize + 1);
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > max_bytes {
        return Err(LimitError::TooLarge {
            size: known.filter(|s| *s > max_bytes),
            limit: max_bytes,
        }
        .into());
    }
    String::from_utf8(buf)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e).into())
}

/// Check YAML text against [`MAX_YAML_BYTES`] and [`MAX_YAML_DEPTH`].
pub fn check_yaml(text: &str) -> Result<(), LimitError> {
    check_yaml_with(text, MAX_YAML_BYTES, MAX_YAML_DEPTH)
}

/// Check YAML text against a size and a depth limit; stops at the first token past the depth.
pub fn check_yaml_with(text: &str, max_bytes: u64, max_depth: usize) -> Result<(), LimitError> {
    if text.len() as u64 > max_bytes {
        return Err(LimitError::TooLarge {
            size: Some(text.len() as u64),
            limit: max_bytes,
        });
    }
    let mut s = Scan::new(text.as_bytes(), max_depth);
    s.run().map_err(|(line, column)| LimitError::TooDeep {
        limit: max_depth,
        line,
        column,
    })
}

/// The deepest collection nesting of YAML text, as [`check_yaml`] counts it (an upper bound of
/// what libyaml builds; aliases not expanded).
pub fn yaml_depth(text: &str) -> usize {
    let mut s = Scan::new(text.as_bytes(), usize::MAX);
    let _ = s.run();
    s.max
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_libyaml_nests() {
        let cases: &[(&str, usize)] = &[
            ("", 0),
            ("a", 0),
            ("a: b", 1),
            ("a:\n  b: c", 2),
            ("a:\n- x\n- y", 2),
            ("a:\n- b:\n  - c", 4),
            ("- - - x", 3),
            ("[[a]]", 2),
            ("{a: [b, {c: d}]}", 3),
            ("[a: b]", 2),
            ("[[a]: b]", 3),
            ("[{[k0, []]: w0, k1: w0}: w0]", 5),
            ("[a]: b", 2),
            ("- [a, [b]]: c", 4),
            ("? [a]\n: b", 2),
            ("a: '[[[['", 1),
            ("a: \"[[\\\"[[\"", 1),
            ("a: x [[[[", 1),
            ("a: |\n  [[[[\n  {{{{\nb: c", 1),
            ("a: >-\n   [[[[\n\n   [[\nb: [c]", 2),
            ("# [[[[\na: b # [[[[", 1),
            ("a: !tag [b]", 2),
            ("a: !<tag[x]> b", 1),
            ("a: &x [b]\nc: *x", 2),
            ("%YAML 1.1\n--- [a]\n... \n--- {b: c}", 1),
            ("a: x\n  'continued\nb: [[c]]", 3),
        ];
        for (text, want) in cases {
            assert_eq!(yaml_depth(text), *want, "{text:?}");
        }
    }

    #[test]
    fn a_deep_file_fails_at_the_first_token_past_the_limit() {
        let text = format!("a:\n  b: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        let e = check_yaml(&text).unwrap_err();
        assert_eq!(
            e,
            LimitError::TooDeep {
                limit: 32,
                line: 2,
                column: 36
            }
        );
        assert!(e.to_string().contains("line 2 column 36"), "{e}");
        let ok = format!("a: {}{}", "[".repeat(31), "]".repeat(31));
        assert_eq!(yaml_depth(&ok), 32);
        check_yaml(&ok).unwrap();
        let blocks: String = (0..40).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        assert!(matches!(
            check_yaml(&blocks),
            Err(LimitError::TooDeep { line: 33, .. })
        ));
        assert!(matches!(
            check_yaml(&"- ".repeat(40)),
            Err(LimitError::TooDeep {
                line: 1,
                column: 65,
                ..
            })
        ));
    }

    #[test]
    fn yaml_errors_keep_their_position_when_clipped() {
        let long = "x".repeat(5000);
        let e = serde_yaml_ng::from_str::<u32>(&format!("\n\n  {long}")).unwrap_err();
        let m = yaml_error(&e);
        assert!(m.ends_with(" at line 3 column 3"), "{m}");
        assert!(m.len() < MAX_MESSAGE_CHARS + 100, "{}", m.len());
        let e = serde_yaml_ng::from_str::<u32>("x").unwrap_err();
        assert!(
            yaml_error(&e).ends_with("at line 1 column 1"),
            "{}",
            yaml_error(&e)
        );
        let e = serde_yaml_ng::from_str::<u32>("1\n---\n2").unwrap_err();
        assert!(
            yaml_error(&e).ends_with("(the whole file)"),
            "{}",
            yaml_error(&e)
        );
    }

    #[test]
    fn size_is_checked_before_depth() {
        let e = check_yaml_with("a: [b]", 3, 32).unwrap_err();
        assert_eq!(e.to_string(), "larger than the limit of 3 bytes (6 bytes)");
    }

    #[test]
    fn read_to_string_stops_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "abcd").unwrap();
        assert_eq!(read_to_string(&p, 4).unwrap(), "abcd");
        let e = read_to_string(&p, 3).unwrap_err().to_string();
        assert_eq!(e, "larger than the limit of 3 bytes (4 bytes)");
        let e = read_to_string(Path::new("/dev/zero"), 1000)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "larger than the limit of 1000 bytes");
        std::fs::write(&p, b"\xff").unwrap();
        assert!(matches!(read_to_string(&p, 4), Err(ReadError::Io(_))));
    }
}
