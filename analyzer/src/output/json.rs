//! JSON documents on stdout or in a file: one writer, pretty-printed, ending in a newline, with
//! every control character in a string as a JSON escape (serde_json leaves DEL and the C1
//! controls raw, which a terminal obeys). Each document keeps its own versioned shape (a
//! `version` field where its docs give one).
//!
//! It serialises only; what a document holds is its command's.

use serde::Serialize;

/// An error making a JSON document (a value serde cannot write, e.g. a map with non-string keys).
#[derive(Debug, thiserror::Error)]
#[error("writing JSON: {0}")]
pub struct JsonError(#[from] serde_json::Error);

/// `value` as pretty JSON ending in a newline ([`json_pretty`]).
pub fn document<T: Serialize + ?Sized>(value: &T) -> Result<String, JsonError> {
    Ok(json_pretty(value)? + "\n")
}

/// `value` as pretty JSON with no raw control character: serde_json escapes C0 (`\u001b`) but
/// writes DEL and the C1 controls (a CSI `\u{9b}`) as they are, which a terminal obeys; they are
/// written as JSON escapes (`\u009b`) here, the same string to a JSON reader. Outside strings
/// JSON holds no control character but white space, so every one replaced was inside a string.
pub fn json_pretty<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    let json = serde_json::to_string_pretty(value)?;
    if !json
        .chars()
        .any(|c| c.is_control() && !c.is_ascii_whitespace())
    {
        return Ok(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if c.is_control() && !c.is_ascii_whitespace() {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_carries_every_control_character_escaped_and_the_same_string() {
        let name = "pod\u{9b}1\u{7f}\u{1b}[31m\n";
        let json = json_pretty(&serde_json::json!({ "pod": name })).unwrap();
        assert!(
            !json
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != ' '),
            "{json:?}"
        );
        assert!(json.contains(r"pod\u009b1\u007f\u001b[31m\n"), "{json}");
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["pod"], name);
        // Without control characters: serde_json's text as it is.
        let plain = serde_json::json!({ "a": [1, "b"] });
        assert_eq!(
            json_pretty(&plain).unwrap(),
            serde_json::to_string_pretty(&plain).unwrap()
        );
    }

    #[test]
    fn a_document_ends_in_one_newline_and_escapes_control_characters() {
        let s = document(&serde_json::json!({"pod": "a\u{1b}b"})).unwrap();
        assert_eq!(s, "{\n  \"pod\": \"a\\u001bb\"\n}\n");
    }
}
