//! Query strings: the decoded parameters of a request (`application/x-www-form-urlencoded`:
//! `%XX` and `+`), as the routes, watches and [`crate::Request::param`] read them.
//!
//! What it does not do: no repeated-parameter lists (the first value wins), no validation of
//! parameter names or values (the handlers check the ones they use).

/// Decoded query parameters (form encoding: `%XX` and `+`), in order.
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    /// Parses a raw query string; empty pairs (kube-rs starts with `&`) are skipped.
    pub(crate) fn parse(raw: &str) -> Query {
        Query(
            raw.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    /// The first value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Decodes `application/x-www-form-urlencoded` text.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_like_forms() {
        let q = Query::parse(
            "&watch=true&fieldSelector=metadata.name%3Dgpu-1&labelSelector=a+in+%28x%29&x=%zz",
        );
        assert_eq!(q.get("watch"), Some("true"));
        assert_eq!(q.get("fieldSelector"), Some("metadata.name=gpu-1"));
        assert_eq!(q.get("labelSelector"), Some("a in (x)"));
        assert_eq!(q.get("x"), Some("%zz"));
        assert_eq!(q.get("missing"), None);
    }
}
