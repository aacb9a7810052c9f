//! The YAML depth scan behind [`super::check_yaml_with`] and [`super::yaml_depth`]: a
//! line-and-column walk over the bytes that mirrors libyaml's scanner rules for what opens a
//! collection and what does not (see the parent module's docs), keeping only what decides
//! nesting.
//!
//! It does not read files, check sizes or build errors: the parent module does, from the
//! position of the first token past the depth limit that [`Scan::run`] returns.

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
pub(super) struct Scan<'a> {
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
    pub(super) max: usize,
}

type Deep = (usize, usize);

impl<'a> Scan<'a> {
    pub(super) fn new(b: &'a [u8], limit: usize) -> Scan<'a> {
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

    pub(super) fn run(&mut self) -> Result<(), Deep> {
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
                b'[' | b'{' => self.flow_start(c == b'[')?,
                b']' | b'}' => {
                    self.remove_key();
                    self.flows.pop();
                    self.ska = false;
                    self.advance();
                }
                b',' => self.flow_entry(),
                b'-' if block_entry => self.block_entry(flow)?,
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
                b':' if flow || self.is_blankz(1) => self.value(flow)?,
                b'*' | b'&' => self.anchor_or_alias(),
                b'!' => self.tag(),
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

    /// `[` or `{` (`seq`: `[`): a flow collection opens, one level deeper.
    fn flow_start(&mut self, seq: bool) -> Result<(), Deep> {
        self.save_key();
        self.flows.push(Flow {
            seq,
            pair: false,
            peak: 0,
        });
        let d = self.depth();
        self.raise(d)?;
        self.ska = true;
        self.advance();
        Ok(())
    }

    /// `,` in a flow collection: the entry's single-pair mapping (if any) ends; the next entry
    /// starts at the current depth.
    fn flow_entry(&mut self) {
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

    /// `- ` (outside a flow collection, `flow` false): a block sequence opens at this column, or
    /// an indentless one under a mapping key at the same column.
    fn block_entry(&mut self, flow: bool) -> Result<(), Deep> {
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
        Ok(())
    }

    /// `:` (a value indicator): in a flow sequence a single-pair mapping; in a block, the simple
    /// key before it (or this column) opens a mapping.
    fn value(&mut self, flow: bool) -> Result<(), Deep> {
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
        Ok(())
    }

    /// `*` or `&`: an alias or anchor, up to the end of its name.
    fn anchor_or_alias(&mut self) {
        self.save_key();
        self.ska = false;
        self.advance();
        while self.at(0).is_ascii_alphanumeric() || matches!(self.at(0), b'_' | b'-') {
            self.advance();
        }
    }

    /// `!`: a tag, verbatim (`!<…>`) or shorthand, up to its last URI character.
    fn tag(&mut self) {
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
