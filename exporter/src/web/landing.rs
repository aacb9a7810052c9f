//! The landing page at `/`: the exporter's name, description and version, and links to the
//! telemetry path, `/-/healthy`, `/-/ready` and any extra links.
//!
//! Links are relative (`./metrics`), so the page keeps working behind a reverse proxy that serves
//! the exporter under a path prefix. Everything inserted is HTML-escaped. The page is rendered
//! once, at [`Server::bind`](super::Server::bind); it has no scripts and no external resources.
//!
//! It does not serve anything (the handler does) and holds no state that changes while running.

/// What the landing page says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandingInfo {
    pub name: String,
    pub description: String,
    pub version: String,
    /// Links listed after the built-in ones.
    pub links: Vec<LandingLink>,
}

impl Default for LandingInfo {
    fn default() -> Self {
        LandingInfo {
            name: "tessera-exporter".to_string(),
            description: "GPU telemetry exporter".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            links: Vec::new(),
        }
    }
}

/// One extra link on the landing page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandingLink {
    /// Where it points: a path on this server (`/debug`) or an absolute URL.
    pub address: String,
    /// The link's text.
    pub text: String,
}

/// Escape text for HTML element content and double-quoted attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A server path as a link relative to `/`: `/metrics` → `./metrics`.
fn relative(path: &str) -> String {
    match path.strip_prefix('/') {
        Some(rest) => format!("./{rest}"),
        None => path.to_string(),
    }
}

/// The landing page's HTML.
pub fn render(info: &LandingInfo, telemetry_path: &str) -> String {
    let name = escape_html(&info.name);
    let description = escape_html(&info.description);
    let version = escape_html(&info.version);
    let mut links = vec![
        (relative(telemetry_path), "Metrics".to_string()),
        ("./-/healthy".to_string(), "Health".to_string()),
        ("./-/ready".to_string(), "Readiness".to_string()),
    ];
    links.extend(
        info.links
            .iter()
            .map(|l| (relative(&l.address), l.text.clone())),
    );
    let items: String = links
        .iter()
        .map(|(href, text)| {
            format!(
                "      <li><a href=\"{}\">{}</a></li>\n",
                escape_html(href),
                escape_html(text)
            )
        })
        .collect();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n  <head>\n    <meta charset=\"utf-8\">\n    \
         <title>{name}</title>\n  </head>\n  <body>\n    <h1>{name}</h1>\n    \
         <p>{description}</p>\n    <ul>\n{items}    </ul>\n    \
         <p>Version: <code>{version}</code></p>\n  </body>\n</html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_relative_and_escaped() {
        let info = LandingInfo {
            name: "a<b>".into(),
            description: "x & y".into(),
            version: "1.2.3".into(),
            links: vec![LandingLink {
                address: "/debug?a=1&b=\"2\"".into(),
                text: "Debug".into(),
            }],
        };
        let html = render(&info, "/gpu/metrics");
        assert!(html.contains("<title>a&lt;b&gt;</title>"), "{html}");
        assert!(html.contains("x &amp; y"), "{html}");
        assert!(html.contains("href=\"./gpu/metrics\""), "{html}");
        assert!(html.contains("href=\"./-/healthy\""), "{html}");
        assert!(html.contains("href=\"./-/ready\""), "{html}");
        assert!(
            html.contains("href=\"./debug?a=1&amp;b=&quot;2&quot;\""),
            "{html}"
        );
        assert!(html.contains("1.2.3"), "{html}");
    }

    #[test]
    fn absolute_urls_stay_absolute() {
        assert_eq!(relative("https://example.com/x"), "https://example.com/x");
    }
}
