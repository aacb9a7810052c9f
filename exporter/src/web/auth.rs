//! HTTP basic auth against the web config's bcrypt hashes, with a cache of successes.
//!
//! bcrypt is slow on purpose (tens to hundreds of milliseconds at cost 10+), too slow to run on
//! every scrape. Like exporter-toolkit, a successful check is remembered; unlike it, only
//! successes are, and only as an HMAC (with a key drawn at start) of the user and password: one
//! entry per configured user, so the cache is bounded and holds no password. A password that is
//! not the remembered one always pays a full bcrypt check, so guessing gains nothing from the
//! cache. bcrypt runs on a blocking thread, one check at a time (a flood of guesses queues up
//! behind a single permit instead of taking every core); unknown users are checked against a
//! configured hash too so that they take as long as known ones. Comparisons are constant-time
//! (`ring::hmac::verify`, bcrypt's own).
//!
//! What it does not do: rate limiting, or anything with the request besides the `Authorization`
//! header.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use hyper::header::HeaderValue;
use ring::hmac;
use tokio::sync::Semaphore;

use super::WebError;

pub(crate) struct BasicAuth {
    users: Arc<BTreeMap<String, String>>,
    key: hmac::Key,
    /// user → HMAC(user, password) of the last password that passed bcrypt.
    verified: Mutex<HashMap<String, hmac::Tag>>,
    /// One bcrypt at a time.
    gate: Arc<Semaphore>,
    /// A configured hash, checked for unknown users so they cost the same time.
    decoy: String,
}

impl BasicAuth {
    /// `None` when there are no users (auth off).
    pub(crate) fn new(users: &BTreeMap<String, String>) -> Result<Option<BasicAuth>, WebError> {
        let Some(decoy) = users.values().next().cloned() else {
            return Ok(None);
        };
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| WebError::Options("no randomness for the auth cache key".into()))?;
        Ok(Some(BasicAuth {
            users: Arc::new(users.clone()),
            key,
            verified: Mutex::new(HashMap::new()),
            gate: Arc::new(Semaphore::new(1)),
            decoy,
        }))
    }

    fn mac_input(user: &str, password: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(user.len() + 1 + password.len());
        m.extend_from_slice(user.as_bytes());
        m.push(0);
        m.extend_from_slice(password);
        m
    }

    fn cached(&self, user: &str, password: &[u8]) -> bool {
        let verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        match verified.get(user) {
            Some(tag) => {
                hmac::verify(&self.key, &Self::mac_input(user, password), tag.as_ref()).is_ok()
            }
            None => false,
        }
    }

    /// Whether the `Authorization` header carries a configured user and the right password.
    pub(crate) async fn check(&self, header: Option<&HeaderValue>) -> bool {
        let Some((user, password)) = header.and_then(parse_basic) else {
            return false;
        };
        if self.users.contains_key(&user) && self.cached(&user, &password) {
            return true;
        }
        let Ok(permit) = self.gate.clone().acquire_owned().await else {
            return false;
        };
        // Another request may have verified the same credentials while this one waited.
        if self.users.contains_key(&user) && self.cached(&user, &password) {
            return true;
        }
        let (known, hash) = match self.users.get(&user) {
            Some(h) => (true, h.clone()),
            None => (false, self.decoy.clone()),
        };
        let pw = password.clone();
        // The permit moves into the blocking task: if this request is dropped (timeout), the next
        // bcrypt still waits for this one to finish.
        let matched = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            bcrypt::verify(&pw, &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        if known && matched {
            let tag = hmac::sign(&self.key, &Self::mac_input(&user, &password));
            self.verified
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(user, tag);
            true
        } else {
            log::debug!("basic auth failed for user {user:?}");
            false
        }
    }
}

/// `Basic base64(user:password)` → (user, password). The scheme is case-insensitive; the user must
/// be UTF-8 (configured names are), the password is bytes.
fn parse_basic(value: &HeaderValue) -> Option<(String, Vec<u8>)> {
    let value = value.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> HeaderValue {
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {b64}")).expect("header")
    }

    #[test]
    fn parses_basic_headers() {
        assert_eq!(
            parse_basic(&header("alice", "pa:ss")),
            Some(("alice".to_string(), b"pa:ss".to_vec()))
        );
        let lower = HeaderValue::from_static("basic YWxpY2U6eA==");
        assert_eq!(
            parse_basic(&lower),
            Some(("alice".to_string(), b"x".to_vec()))
        );
        assert_eq!(parse_basic(&HeaderValue::from_static("Bearer abc")), None);
        assert_eq!(parse_basic(&HeaderValue::from_static("Basic !!!")), None);
        // No colon.
        assert_eq!(
            parse_basic(&HeaderValue::from_static("Basic YWxpY2U=")),
            None
        );
    }

    #[tokio::test]
    async fn right_password_passes_and_is_cached_wrong_ones_never_are() {
        let mut users = BTreeMap::new();
        users.insert(
            "alice".to_string(),
            bcrypt::hash("secret", 4).expect("hash"),
        );
        let auth = BasicAuth::new(&users).expect("auth").expect("enabled");
        assert!(!auth.check(None).await);
        assert!(!auth.check(Some(&header("alice", "wrong"))).await);
        assert!(!auth.cached("alice", b"wrong"));
        assert!(!auth.check(Some(&header("bob", "secret"))).await);
        assert!(auth.check(Some(&header("alice", "secret"))).await);
        assert!(auth.cached("alice", b"secret"));
        assert!(auth.check(Some(&header("alice", "secret"))).await);
        // A wrong password after a cached right one is still refused.
        assert!(!auth.check(Some(&header("alice", "secret2"))).await);
        assert!(!auth.cached("alice", b"secret2"));
        // The cache is keyed by user: alice's password does not open bob.
        assert!(!auth.cached("bob", b"secret"));
    }

    #[test]
    fn no_users_means_no_auth() {
        assert!(BasicAuth::new(&BTreeMap::new()).expect("ok").is_none());
    }
}
