//! Escaping, the output layer's boundary: text for people from data: control characters that data may carry (a process renamed with
//! `PR_SET_NAME` to hold terminal escape sequences, a pod or namespace name, a label) are shown
//! escaped (`\u{1b}`), never passed to a terminal, a wiki or a browser raw; and text made safe
//! for HTML ([`html_escape`], the report's and the replay's pages).
//!
//! It escapes only; it does not truncate, quote or otherwise format anything.

use std::borrow::Cow;

/// `s` with every control character (C0, DEL, C1) escaped as Rust writes it (`\u{1b}`, `\t`,
/// `\n`): one line, whatever it held.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Text of several lines (an output being assembled) with the control characters of its
/// lines escaped and its line breaks kept.
pub fn printable_lines(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() && c != '\n') {
        return Cow::Borrowed(s);
    }
    Cow::Owned(s.split('\n').map(printable).collect::<Vec<_>>().join("\n"))
}

/// A writer that escapes the control characters of each line but its newline ([`printable`])
/// before passing it on: the boundary of a command's streamed human output (the `share` plan and
/// rollout), whatever wrote the line. Lines are held until their newline, so a character is never
/// cut; [`Write::flush`](std::io::Write::flush) passes on a partial line too, and dropping it flushes.
pub struct Escaping<W: std::io::Write> {
    inner: W,
    line: Vec<u8>,
}

impl<W: std::io::Write> Escaping<W> {
    pub fn new(inner: W) -> Escaping<W> {
        Escaping {
            inner,
            line: Vec::new(),
        }
    }

    fn emit(&mut self) -> std::io::Result<()> {
        let text = String::from_utf8_lossy(&self.line);
        let (body, nl) = match text.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (&*text, ""),
        };
        let out = format!("{}{nl}", printable(body));
        self.line.clear();
        self.inner.write_all(out.as_bytes())
    }
}

impl<W: std::io::Write> std::io::Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            self.line.push(b);
            if b == b'\n' {
                self.emit()?;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.line.is_empty() {
            self.emit()?;
        }
        self.inner.flush()
    }
}

impl<W: std::io::Write> Drop for Escaping<W> {
    fn drop(&mut self) {
        let _ = std::io::Write::flush(self);
    }
}

/// Escapes text for HTML content and attribute values.
pub fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            // Control characters from data, shown escaped (see printable).
            c if c.is_control() => o.extend(c.escape_default()),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_line_breaks_kept() {
        assert_eq!(printable("python3"), "python3");
        assert_eq!(printable("evil\u{1b}[2Jx\ty"), "evil\\u{1b}[2Jx\\ty");
        assert_eq!(printable("a\nb\u{9b}c"), "a\\nb\\u{9b}c");
        assert_eq!(printable_lines("a\u{7}\nb\n"), "a\\u{7}\nb\n");
        assert!(matches!(printable("ünïcödé ✓"), Cow::Borrowed(_)));
    }

    #[test]
    fn the_escaping_writer_escapes_whole_lines_however_they_are_written() {
        use std::io::Write;
        let mut buf = Vec::new();
        {
            let mut w = Escaping::new(&mut buf);
            // A C1 control (two bytes in UTF-8) cut between two writes, and a line left open.
            let evil = "pod\u{9b}1 \u{1b}[31m\n".as_bytes();
            w.write_all(&evil[..4]).unwrap();
            w.write_all(&evil[4..]).unwrap();
            write!(w, "tab\there").unwrap();
        }
        let out = String::from_utf8(buf).unwrap();
        assert_eq!(out, "pod\\u{9b}1 \\u{1b}[31m\ntab\\there");
    }
}
