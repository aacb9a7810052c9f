//! JSON documents on stdout or in a file: one writer, pretty-printed, ending in a newline. Each
//! document keeps its own versioned shape (a `version` field where its docs give one); JSON
//! escapes control characters itself, so nothing else is escaped here.
//!
//! It serialises only; what a document holds is its command's.

use serde::Serialize;

/// An error making a JSON document (a value serde cannot write, e.g. a map with non-string keys).
#[derive(Debug, thiserror::Error)]
#[error("writing JSON: {0}")]
pub struct JsonError(#[from] serde_json::Error);

/// `value` as pretty JSON ending in a newline.
pub fn document<T: Serialize + ?Sized>(value: &T) -> Result<String, JsonError> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_document_ends_in_one_newline_and_escapes_control_characters() {
        let s = super::document(&serde_json::json!({"pod": "a\u{1b}b"})).unwrap();
        assert_eq!(s, "{\n  \"pod\": \"a\\u001bb\"\n}\n");
    }
}
