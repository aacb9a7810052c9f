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

use std::io::Read as _;
use std::path::Path;

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

/// A block collection open at an indentation column.
struct Block {
    col: usize,
    map: bool,
    /// A sequence whose entries sit at this mapping's own column (`key:\n- a`) is open.
    indentless: bool,
}

/// A flow collection.
struct Flow {
    seq: bool,
    /// A single-pair mapping (`[a: b]`) is open in the current entry of this sequence.
    pair: bool,
    /// The deepest absolute depth reached in the current entry (what a pair mapping encloses).
    peak: usize,
}

/// The possible simple key of the block context (libyaml's level-0 `simple_keys` slot).
struct Key {
    possible: bool,
    line: usize,
    index: usize,
    col: usize,
    /// The deepest absolute depth reached since the key began (what its mapping encloses).
    peak: usize,
}

/// A line-and-column walk over YAML bytes mirroring libyaml's scanner, keeping only what
/// decides nesting. Positions: `line` and `col` 0-based, columns in characters like libyaml's.
struct Scan<'a> {
    b: &'a [u8],
    pos: usize,
    line: usize,
    col: usize,
    limit: usize,
    blocks: Vec<Block>,
    flows: Vec<Flow>,
    /// libyaml's `simple_key_allowed`.
    ska: bool,
    key: Key,
    max: usize,
}

type Deep = (usize, usize);

impl<'a> Scan<'a> {
    fn new(b: &'a [u8], limit: usize) -> Scan<'a> {
        Scan {
            b,
            pos: 0,
            line: 0,
            col: 0,
            limit,
            blocks: Vec::new(),
            flows: Vec::new(),
            ska: true,
            key: Key {
                possible: false,
                line: 0,
                index: 0,
                col: 0,
                peak: 0,
            },
            max: 0,
        }
    }

    fn at(&self, k: usize) -> u8 {
        // NUL ends the stream for libyaml (its reader refuses it anyway).
        self.b.get(self.pos + k).copied().unwrap_or(0)
    }

    fn end(&self) -> bool {
        self.at(0) == 0
    }

    fn is_break(&self, k: usize) -> bool {
        match self.at(k) {
            b'\r' | b'\n' => true,
            0xC2 => self.at(k + 1) == 0x85,
            0xE2 => self.at(k + 1) == 0x80 && matches!(self.at(k + 2), 0xA8 | 0xA9),
            _ => false,
        }
    }

    fn is_blank(&self, k: usize) -> bool {
        matches!(self.at(k), b' ' | b'\t')
    }

    fn is_blankz(&self, k: usize) -> bool {
        self.is_blank(k) || self.is_break(k) || self.at(k) == 0
    }

    fn is_breakz(&self, k: usize) -> bool {
        self.is_break(k) || self.at(k) == 0
    }

    /// Move over one character (UTF-8 width), one column.
    fn advance(&mut self) {
        let width = match self.at(0) {
            c if c < 0x80 => 1,
            c if c >= 0xF0 => 4,
            c if c >= 0xE0 => 3,
            _ => 2,
        };
        self.pos = (self.pos + width).min(self.b.len());
        self.col += 1;
    }

    /// Move over one line break (CR LF counts once).
    fn skip_line(&mut self) {
        if self.at(0) == b'\r' && self.at(1) == b'\n' {
            self.pos += 2;
        } else {
            self.advance();
        }
        self.line += 1;
        self.col = 0;
    }

    fn indent(&self) -> isize {
        self.blocks.last().map_or(-1, |b| b.col as isize)
    }

    fn depth(&self) -> usize {
        self.blocks.len()
            + self.blocks.iter().filter(|b| b.indentless).count()
            + self.flows.len()
            + self.flows.iter().filter(|f| f.pair).count()
    }

    /// Record a depth reached at the current token; `Err` with its position past the limit.
    fn raise(&mut self, d: usize) -> Result<(), Deep> {
        self.max = self.max.max(d);
        if self.key.possible {
            self.key.peak = self.key.peak.max(d);
        }
        // Every open flow collection encloses it (at most `limit` of them: stops past it).
        for f in &mut self.flows {
            f.peak = f.peak.max(d);
        }
        if d > self.limit {
            return Err((self.line + 1, self.col + 1));
        }
        Ok(())
    }

    fn doc_marker(&self) -> bool {
        self.col == 0
            && (self.b[self.pos..].starts_with(b"---") || self.b[self.pos..].starts_with(b"..."))
            && self.is_blankz(3)
    }

    fn save_key(&mut self) {
        if self.ska && self.flows.is_empty() {
            self.key = Key {
                possible: true,
                line: self.line,
                index: self.pos,
                col: self.col,
                peak: self.depth(),
            };
        }
    }

    fn remove_key(&mut self) {
        if self.flows.is_empty() {
            self.key.possible = false;
        }
    }

    fn unroll(&mut self, col: isize) {
        if self.flows.is_empty() {
            while self.indent() > col {
                self.blocks.pop();
            }
        }
    }

    /// Open a block collection at `col` unless one is open there already (libyaml's
    /// `roll_indent`); `enclosed` is the depth of what it encloses, when more than itself.
    fn roll(&mut self, col: usize, map: bool, enclosed: usize) -> Result<bool, Deep> {
        if !self.flows.is_empty() || self.indent() >= col as isize {
            return Ok(false);
        }
        self.blocks.push(Block {
            col,
            map,
            indentless: false,
        });
        let d = self.depth().max(enclosed);
        self.raise(d)?;
        Ok(true)
    }

    /// A `?` or `:` directly in a flow sequence opens a single-pair mapping around the entry.
    fn flow_pair(&mut self) -> Result<(), Deep> {
        let Some(f) = self.flows.last_mut() else {
            return Ok(());
        };
        if f.seq && !f.pair {
            f.pair = true;
            f.peak += 1;
            let d = f.peak.max(self.depth());
            self.raise(d)?;
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), Deep> {
        if self.b.starts_with(b"\xEF\xBB\xBF") {
            self.pos = 3; // the reader drops the stream's byte order mark
        }
        loop {
            self.skip_to_token();
            if self.key.possible && (self.key.line < self.line || self.key.index + 1024 < self.pos)
            {
                self.key.possible = false;
            }
            self.unroll(self.col as isize);
            if self.end() {
                return Ok(());
            }
            let c = self.at(0);
            let block_entry = c == b'-' && self.is_blankz(1);
            if self.flows.is_empty()
                && let Some(top) = self.blocks.last_mut()
                && top.indentless
                && top.col == self.col
                && !block_entry
            {
                top.indentless = false;
            }
            if self.col == 0 && c == b'%' {
                self.unroll(-1);
                self.remove_key();
                self.ska = false;
                while !self.is_breakz(0) {
                    self.advance();
                }
                continue;
            }
            if self.doc_marker() {
                self.unroll(-1);
                self.remove_key();
                self.ska = false;
                self.pos += 3;
                self.col += 3;
                continue;
            }
            let flow = !self.flows.is_empty();
            match c {
                b'[' | b'{' => {
                    self.save_key();
                    self.flows.push(Flow {
                        seq: c == b'[',
                        pair: false,
                        peak: 0,
                    });
                    let d = self.depth();
                    self.raise(d)?;
                    self.ska = true;
                    self.advance();
                }
                b']' | b'}' => {
                    self.remove_key();
                    self.flows.pop();
                    self.ska = false;
                    self.advance();
                }
                b',' => {
                    self.remove_key();
                    if let Some(f) = self.flows.last_mut() {
                        f.pair = false;
                    }
                    let d = self.depth();
                    if let Some(f) = self.flows.last_mut() {
                        f.peak = d;
                    }
                    self.ska = true;
                    self.advance();
                }
                b'-' if block_entry => {
                    if !flow {
                        let col = self.col;
                        if !self.roll(col, false, 0)?
                            && let Some(top) = self.blocks.last_mut()
                            && top.map
                            && top.col == col
                            && !top.indentless
                        {
                            top.indentless = true;
                            let d = self.depth();
                            self.raise(d)?;
                        }
                    }
                    self.remove_key();
                    self.ska = true;
                    self.advance();
                }
                b'?' if flow || self.is_blankz(1) => {
                    if flow {
                        self.flow_pair()?;
                    } else {
                        self.roll(self.col, true, 0)?;
                    }
                    self.remove_key();
                    self.ska = !flow;
                    self.advance();
                }
                b':' if flow || self.is_blankz(1) => {
                    if flow {
                        self.flow_pair()?;
                        self.ska = false;
                    } else if self.key.possible {
                        let (col, enclosed) = (self.key.col, self.key.peak + 1);
                        self.roll(col, true, enclosed)?;
                        self.key.possible = false;
                        self.ska = false;
                    } else {
                        self.roll(self.col, true, 0)?;
                        self.ska = true;
                    }
                    self.advance();
                }
                b'*' | b'&' => {
                    self.save_key();
                    self.ska = false;
                    self.advance();
                    while self.at(0).is_ascii_alphanumeric() || matches!(self.at(0), b'_' | b'-') {
                        self.advance();
                    }
                }
                b'!' => {
                    self.save_key();
                    self.ska = false;
                    let verbatim = self.at(1) == b'<';
                    self.advance();
                    if verbatim {
                        self.advance();
                    }
                    while is_uri_char(self.at(0), verbatim) {
                        self.advance();
                    }
                    if verbatim && self.at(0) == b'>' {
                        self.advance();
                    }
                }
                b'|' | b'>' if !flow => {
                    self.remove_key();
                    self.ska = true;
                    self.block_scalar();
                }
                b'\'' | b'"' => {
                    self.save_key();
                    self.ska = false;
                    self.quoted(c == b'\'');
                }
                _ if self.plain_start() => {
                    self.save_key();
                    self.ska = false;
                    self.plain();
                }
                // A character that cannot start a token: libyaml stops; carrying on is stricter.
                _ => self.advance(),
            }
        }
    }

    /// Blanks, comments and line breaks before a token (libyaml's `scan_to_next_token`).
    fn skip_to_token(&mut self) {
        loop {
            if self.col == 0 && self.b[self.pos..].starts_with(b"\xEF\xBB\xBF") {
                self.advance();
            }
            while self.at(0) == b' '
                || ((!self.flows.is_empty() || !self.ska) && self.at(0) == b'\t')
            {
                self.advance();
            }
            if self.at(0) == b'#' {
                while !self.is_breakz(0) {
                    self.advance();
                }
            }
            if !self.is_break(0) {
                return;
            }
            self.skip_line();
            if self.flows.is_empty() {
                self.ska = true;
            }
        }
    }

    fn plain_start(&self) -> bool {
        let c = self.at(0);
        !(self.is_blankz(0) || b"-?:,[]{}#&*!|>'\"%@`".contains(&c))
            || (c == b'-' && !self.is_blank(1))
            || (self.flows.is_empty() && matches!(c, b'?' | b':') && !self.is_blankz(1))
    }

    /// A plain scalar: up to `: `, ` #`, a flow indicator in flow context, a document marker,
    /// or a line indented no deeper than the enclosing block collection.
    fn plain(&mut self) {
        let indent = self.indent() + 1;
        let mut leading_blanks = false;
        loop {
            if self.doc_marker() || self.at(0) == b'#' {
                break;
            }
            let flow = !self.flows.is_empty();
            while !self.is_blankz(0) {
                let c = self.at(0);
                if flow && c == b':' && b",?[]{}".contains(&self.at(1)) {
                    return; // libyaml: "found unexpected ':'"
                }
                if (c == b':' && self.is_blankz(1)) || (flow && b",[]{}".contains(&c)) {
                    break;
                }
                self.advance();
                leading_blanks = false;
            }
            if !(self.is_blank(0) || self.is_break(0)) {
                break;
            }
            while self.is_blank(0) || self.is_break(0) {
                if self.is_blank(0) {
                    if leading_blanks && (self.col as isize) < indent && self.at(0) == b'\t' {
                        return; // libyaml: a tab that violates indentation
                    }
                    self.advance();
                } else {
                    self.skip_line();
                    leading_blanks = true;
                }
            }
            if self.flows.is_empty() && (self.col as isize) < indent {
                break;
            }
        }
        if leading_blanks {
            self.ska = true;
        }
    }

    /// A single- or double-quoted scalar, to its closing quote.
    fn quoted(&mut self, single: bool) {
        self.advance();
        loop {
            if self.doc_marker() || self.end() {
                return; // libyaml: unexpected document indicator or end of stream
            }
            let c = self.at(0);
            if single && c == b'\'' {
                self.advance();
                if self.at(0) != b'\'' {
                    return;
                }
                self.advance();
            } else if !single && c == b'"' {
                self.advance();
                return;
            } else if !single && c == b'\\' {
                self.advance();
                if self.is_break(0) {
                    self.skip_line();
                } else if !self.end() {
                    self.advance();
                }
            } else if self.is_break(0) {
                self.skip_line();
            } else {
                self.advance();
            }
        }
    }

    /// A literal or folded block scalar: its header line, then every line indented at least as
    /// deep as its content (libyaml's `scan_block_scalar`).
    fn block_scalar(&mut self) {
        self.advance();
        let mut increment = 0usize;
        if matches!(self.at(0), b'+' | b'-') {
            self.advance();
            if self.at(0).is_ascii_digit() {
                if self.at(0) == b'0' {
                    return;
                }
                increment = (self.at(0) - b'0') as usize;
                self.advance();
            }
        } else if self.at(0).is_ascii_digit() {
            if self.at(0) == b'0' {
                return;
            }
            increment = (self.at(0) - b'0') as usize;
            self.advance();
            if matches!(self.at(0), b'+' | b'-') {
                self.advance();
            }
        }
        while self.is_blank(0) {
            self.advance();
        }
        if self.at(0) == b'#' {
            while !self.is_breakz(0) {
                self.advance();
            }
        }
        if !self.is_breakz(0) {
            return; // libyaml: no comment or line break after the header
        }
        if self.is_break(0) {
            self.skip_line();
        }
        let parent = self.indent();
        let mut indent: isize = if increment == 0 {
            0
        } else if parent >= 0 {
            parent + increment as isize
        } else {
            increment as isize
        };
        if !self.block_breaks(&mut indent, parent) {
            return;
        }
        while self.col as isize == indent && !self.end() {
            while !self.is_breakz(0) {
                self.advance();
            }
            if self.end() {
                return;
            }
            self.skip_line();
            if !self.block_breaks(&mut indent, parent) {
                return;
            }
        }
    }

    /// Empty lines and indentation of a block scalar; settles an automatic indentation. `false`
    /// where libyaml fails (a tab where indentation is expected).
    fn block_breaks(&mut self, indent: &mut isize, parent: isize) -> bool {
        let mut max_indent = 0isize;
        loop {
            while (*indent == 0 || (self.col as isize) < *indent) && self.at(0) == b' ' {
                self.advance();
            }
            max_indent = max_indent.max(self.col as isize);
            if (*indent == 0 || (self.col as isize) < *indent) && self.at(0) == b'\t' {
                return false;
            }
            if !self.is_break(0) {
                break;
            }
            self.skip_line();
        }
        if *indent == 0 {
            *indent = max_indent.max(parent + 1).max(1);
        }
        true
    }
}

/// Characters of a tag (libyaml's `scan_tag_uri`): `,` `[` `]` only in verbatim `!<…>` tags.
fn is_uri_char(c: u8, verbatim: bool) -> bool {
    c.is_ascii_alphanumeric()
        || b"-_;/?:@&=+$.%!~*'()".contains(&c)
        || (verbatim && b",[]".contains(&c))
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
