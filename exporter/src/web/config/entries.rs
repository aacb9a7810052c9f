//! The checked maps of the web config: `basic_auth_users` (user → bcrypt hash: no `:` in a
//! name, a hash bcrypt parses with a cost it accepts) and `http_server_config.headers`
//! (exporter-toolkit's allowed headers and values), each entry checked while it is read so that
//! an error names its line and column, and no key given twice.
//!
//! It does not check passwords against the hashes (`web/auth.rs` does) nor build TLS
//! settings ([`super::tls`]).

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;

use hyper::header::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

/// bcrypt's cost range (Go's `bcrypt.MinCost`..=`MaxCost`); a hash outside it matches nothing.
const BCRYPT_COSTS: std::ops::RangeInclusive<u32> = 4..=31;

/// How to make a bcrypt hash, for error messages.
const MAKE_A_HASH: &str = "make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`";

/// Headers exporter-toolkit allows in `http_server_config.headers` (the others are refused).
const ALLOWED_HEADERS: &[&str] = &[
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
    "Content-Security-Policy",
];

/// A YAML map of strings whose entries are checked while they are read, so that an error names
/// the entry's line and column (serde_yaml_ng marks an error raised while a value is read with
/// that value's position): a key given twice (as `R` compares keys), and `R::check`.
#[derive(Debug)]
pub(super) struct CheckedMap<R> {
    pub(super) entries: Vec<(String, String)>,
    rule: PhantomData<R>,
}

pub(super) trait EntryRule {
    /// The form of a key under which two keys are the same entry.
    fn normalize(key: &str) -> String;
    /// What is wrong with a key given more than once.
    fn duplicate(key: &str) -> String;
    /// What is wrong with an entry, if anything.
    fn check(key: &str, value: &str) -> Result<(), String>;
}

/// `basic_auth_users`: user → bcrypt hash.
#[derive(Debug)]
pub(super) struct UserRule;

impl EntryRule for UserRule {
    fn normalize(key: &str) -> String {
        key.to_string()
    }

    fn duplicate(key: &str) -> String {
        format!("user {key:?} is listed more than once; give each user one hash")
    }

    fn check(user: &str, hash: &str) -> Result<(), String> {
        if user.contains(':') {
            return Err(format!(
                "user name {user:?} contains ':', which basic auth cannot carry"
            ));
        }
        let parts = hash
            .parse::<bcrypt::HashParts>()
            .map_err(|e| format!("not a bcrypt hash ({e}); {MAKE_A_HASH}"))?;
        let cost = parts.get_cost();
        if !BCRYPT_COSTS.contains(&cost) {
            return Err(format!(
                "bcrypt cost {cost} is outside {}..={}, so no password can match this hash; \
                 {MAKE_A_HASH}",
                BCRYPT_COSTS.start(),
                BCRYPT_COSTS.end()
            ));
        }
        Ok(())
    }
}

/// `http_server_config.headers`: exporter-toolkit's allowed headers and values; names compare
/// case-insensitively, as HTTP's do.
#[derive(Debug)]
pub(super) struct HeaderRule;

impl EntryRule for HeaderRule {
    fn normalize(key: &str) -> String {
        key.to_ascii_lowercase()
    }

    fn duplicate(name: &str) -> String {
        format!("header {name:?} is listed more than once (names are case-insensitive)")
    }

    fn check(name: &str, value: &str) -> Result<(), String> {
        check_header(name, value).map(|_| ())
    }
}

impl<'de, R: EntryRule> Deserialize<'de> for CheckedMap<R> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MapVisitor<R>(PhantomData<R>);

        impl<'de, R: EntryRule> Visitor<'de> for MapVisitor<R> {
            type Value = CheckedMap<R>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of names to strings")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut seen = HashSet::new();
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let duplicate = !seen.insert(R::normalize(&key));
                    let value = map.next_value_seed(EntrySeed::<R> {
                        key: &key,
                        duplicate,
                        rule: PhantomData,
                    })?;
                    entries.push((key, value));
                }
                Ok(CheckedMap {
                    entries,
                    rule: PhantomData,
                })
            }
        }

        d.deserialize_map(MapVisitor(PhantomData))
    }
}

/// Reads one value of a [`CheckedMap`] and raises its errors there, at the value's position.
struct EntrySeed<'k, R> {
    key: &'k str,
    duplicate: bool,
    rule: PhantomData<R>,
}

impl<'de, R: EntryRule> DeserializeSeed<'de> for EntrySeed<'_, R> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_string(self)
    }
}

impl<'de, R: EntryRule> Visitor<'de> for EntrySeed<'_, R> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
        if self.duplicate {
            return Err(E::custom(R::duplicate(self.key)));
        }
        R::check(self.key, value).map_err(E::custom)?;
        Ok(value.to_string())
    }
}

/// A header of `http_server_config.headers`, checked against exporter-toolkit's rules.
pub(super) fn check_header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let Some(canonical) = ALLOWED_HEADERS
        .iter()
        .find(|h| h.eq_ignore_ascii_case(name))
    else {
        return Err(format!(
            "header {name:?} cannot be configured (allowed: {})",
            ALLOWED_HEADERS.join(", ")
        ));
    };
    let lower = value.to_ascii_lowercase();
    match *canonical {
        "X-Content-Type-Options" if lower != "nosniff" => {
            return Err(format!(
                "X-Content-Type-Options must be \"nosniff\", not {value:?}"
            ));
        }
        "X-Frame-Options" if lower != "deny" && lower != "sameorigin" => {
            return Err(format!(
                "X-Frame-Options must be \"deny\" or \"sameorigin\", not {value:?}"
            ));
        }
        _ => {}
    }
    let header_value = HeaderValue::from_str(value)
        .map_err(|_| format!("{canonical}: invalid header value {value:?}"))?;
    let header_name = HeaderName::from_bytes(canonical.as_bytes())
        .map_err(|_| format!("invalid header name {name:?}"))?;
    Ok((header_name, header_value))
}
