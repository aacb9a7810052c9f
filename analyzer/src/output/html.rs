//! The one HTML page shell: a self-contained document (charset, viewport, the page's own inline
//! CSS, no script, no fonts, no network) with its title as `<title>` and `<h1>`, escaped here.
//! The report's and the replay's pages open and close through it.
//!
//! It writes the shell only; what a page holds (charts, tables) is its command's.

use std::fmt::Write as _;

pub use super::escape::html_escape as esc;

/// Every page's CSS: the body, headings, tables and chart axes.
const CSS: &str = "body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1100px;color:#212529;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #dee2e6}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #dee2e6;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f1f3f5}.axis{font-size:11px;fill:#495057}";

/// Opens a page in `o`: the document's head with `title`, the shell's CSS and the page's `css`
/// after it, then `<body>` and the title as `<h1>`.
pub fn open(o: &mut String, title: &str, css: &str) {
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>{}</title><style>{CSS}{css}</style></head><body>\n",
        esc(title)
    );
    let _ = writeln!(o, "<h1>{}</h1>", esc(title));
}

/// Closes a page opened by [`open`].
pub fn close(o: &mut String) {
    o.push_str("</body></html>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_escapes_its_title() {
        let mut o = String::new();
        open(&mut o, "a <b> \u{1b}", "p{}");
        close(&mut o);
        assert!(o.starts_with("<!DOCTYPE html>\n"));
        assert!(o.contains("<title>a &lt;b&gt; \\u{1b}</title>"));
        assert!(o.contains("<h1>a &lt;b&gt; \\u{1b}</h1>\n"));
        assert!(o.ends_with("</body></html>\n"));
    }
}
