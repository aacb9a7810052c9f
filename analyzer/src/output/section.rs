//! The section model: a document as titled sections of prose, an optional table and trailing
//! lines, rendered to terminal text (boxed tables, optional ANSI bold titles) or Markdown. The
//! report's text formats and its HTML page's text sections come from the same sections, so they
//! say the same thing; data is escaped here, before any colour is added.
//!
//! It renders only: which sections exist and what they say is the caller's.

use std::fmt::Write as _;

use super::escape::{printable, printable_lines};
use super::table::Table;

/// One section: a title, lines of prose, an optional table, trailing lines.
#[derive(Debug, Clone, Default)]
pub struct Section {
    pub title: String,
    pub lines: Vec<String>,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub after: Vec<String>,
}

impl Section {
    /// The section's table (its header and rows).
    pub fn table(&self) -> Table {
        Table {
            header: self.header.clone(),
            rows: self.rows.clone(),
        }
    }
}

/// Terminal text: the `head` lines (the first bold when `color`), then each section as
/// `== title`, its lines, its boxed table and its trailing lines indented.
pub fn to_text(head: &[String], sections: &[Section], color: bool) -> String {
    let bold = |s: &str| {
        if color {
            format!("\x1b[1m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    let mut out = String::new();
    for (i, l) in head.iter().enumerate() {
        let l = printable(l);
        let _ = writeln!(out, "{}", if i == 0 { bold(&l) } else { l.into_owned() });
    }
    for s in sections {
        let _ = writeln!(out, "\n{}", bold(&format!("== {}", printable(&s.title))));
        for l in &s.lines {
            let _ = writeln!(out, "{}", printable(l));
        }
        if !s.rows.is_empty() {
            let _ = writeln!(out, "{}", s.table().boxed());
        }
        for l in &s.after {
            let _ = writeln!(out, "  {}", printable(l));
        }
    }
    out
}

/// Markdown: `# title`, the other `head` lines, then each section as `## title`, its lines, its
/// table (a key-value table with an empty header) and its trailing lines as a list.
pub fn to_markdown(title: &str, head: &[String], sections: &[Section]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {title}\n");
    for l in head {
        let _ = writeln!(out, "{l}");
    }
    for s in sections {
        let _ = writeln!(out, "\n## {}\n", s.title);
        for l in &s.lines {
            let _ = writeln!(out, "{l}");
        }
        if !s.lines.is_empty() && !s.rows.is_empty() {
            out.push('\n');
        }
        if !s.rows.is_empty() {
            let mut t = s.table();
            if t.header.iter().all(|h| h.is_empty()) {
                t.header = vec![String::new(), String::new()];
            }
            let _ = writeln!(out, "{}", t.markdown());
        }
        if !s.after.is_empty() {
            out.push('\n');
            for l in &s.after {
                let _ = writeln!(out, "- {l}");
            }
        }
    }
    printable_lines(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sections() -> Vec<Section> {
        vec![Section {
            title: "Teams".into(),
            lines: vec!["pod \u{1b}[2J".into()],
            header: vec!["team".into(), "GPUs".into()],
            rows: vec![vec!["ns\u{7}".into(), "2".into()]],
            after: vec!["note".into()],
        }]
    }

    #[test]
    fn text_and_markdown_escape_data_and_keep_their_shape() {
        let t = to_text(&["title".into(), "sub".into()], &sections(), true);
        assert!(t.starts_with("\x1b[1mtitle\x1b[0m\nsub\n\n\x1b[1m== Teams\x1b[0m\n"));
        assert!(t.contains("pod \\u{1b}[2J\n") && t.contains("ns\\u{7}"));
        assert!(t.ends_with("  note\n"));
        let m = to_markdown("title", &["sub".into()], &sections());
        assert!(m.starts_with("# title\n\nsub\n\n## Teams\n\npod \\u{1b}[2J\n\n| team"));
        assert!(m.ends_with("\n- note\n") && !m.contains('\u{7}'));
    }
}
