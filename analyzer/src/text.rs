//! Text for people from data: control characters that data may carry (a process renamed with
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
}
