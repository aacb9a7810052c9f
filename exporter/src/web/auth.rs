//! HTTP basic auth against the web config's bcrypt hashes, with a memory of successes and
//! failures, behind a bounded queue.
//!
//! bcrypt is slow on purpose (tens to hundreds of milliseconds at cost 10+), too slow to run on
//! every scrape. Like exporter-toolkit, a successful check is remembered; unlike it, only as an
//! HMAC (with a key drawn at start) of the user and password: one entry per configured user, so
//! it is bounded and holds no password. A password that is not the remembered one pays a full
//! bcrypt check, so guessing gains nothing from it. Failed (user, password) pairs are remembered
//! too, as HMACs, up to [`MAX_REMEMBERED_FAILURES`] (then forgotten all at once): the hashes do
//! not change while the server runs, so a client repeating a stale password is refused without
//! bcrypt and never takes a place in the queue.
//!
//! Passwords longer than bcrypt's 72 bytes are refused before bcrypt, which would only read their
//! first 72 bytes (so `72×A + anything` would match the hash of `72×A`).
//!
//! bcrypt runs on the blocking pool, admitted by a [`Gate`]: a few checks at a time, a bounded
//! queue, a bound per source address, sources that keep failing served after those that do not
//! (see [`super::gate`]). What the gate refuses is answered at once ([`Verdict::Refused`]), so a
//! flood of guesses cannot make a valid client's first login wait behind it. Unknown users are
//! checked against a configured hash too, so that they take as long as known ones. Comparisons
//! are constant-time (`ring::hmac::verify`, bcrypt's own).
//!
//! What it does not do: anything with the request besides the `Authorization` header and the
//! peer address.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use hyper::header::HeaderValue;
use ring::hmac;

use super::WebError;
use super::gate::{Gate, Limits, Refusal};

/// bcrypt reads at most this many bytes of a password.
pub(crate) const BCRYPT_MAX_PASSWORD: usize = 72;
/// Failed (user, password) pairs remembered at most.
pub(crate) const MAX_REMEMBERED_FAILURES: usize = 4096;

/// The outcome of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allowed,
    /// No, wrong or malformed credentials: 401.
    Denied,
    /// Not checked: too many checks from this source (429) or in all (503).
    Refused(Refusal),
}

pub(crate) struct BasicAuth {
    users: Arc<BTreeMap<String, String>>,
    key: hmac::Key,
    /// user → HMAC(user, password) of the last password that passed bcrypt.
    verified: Mutex<HashMap<String, hmac::Tag>>,
    /// HMAC(user, password) of pairs that failed bcrypt.
    failed: Mutex<HashSet<[u8; 32]>>,
    gate: Arc<Gate>,
    /// A configured hash, checked for unknown users so they cost the same time.
    decoy: String,
    /// bcrypt checks run so far (shared with [`super::RunningServer::password_checks`]).
    checks: Arc<AtomicU64>,
}

impl BasicAuth {
    /// The counter of bcrypt checks this server has run.
    pub(crate) fn checks(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.checks)
    }

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
            failed: Mutex::new(HashSet::new()),
            gate: Gate::new(Limits::for_this_machine()),
            decoy,
            checks: Arc::new(AtomicU64::new(0)),
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

    /// The HMAC under which a failed pair is remembered.
    fn failure_mark(&self, user: &str, password: &[u8]) -> Option<[u8; 32]> {
        let tag = hmac::sign(&self.key, &Self::mac_input(user, password));
        <[u8; 32]>::try_from(tag.as_ref()).ok()
    }

    fn failed_before(&self, mark: Option<&[u8; 32]>) -> bool {
        mark.is_some_and(|m| {
            self.failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(m)
        })
    }

    fn remember_failure(&self, mark: Option<[u8; 32]>) {
        let Some(m) = mark else { return };
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if failed.len() >= MAX_REMEMBERED_FAILURES {
            failed.clear();
        }
        failed.insert(m);
    }

    /// Whether the `Authorization` header carries a configured user and the right password; a
    /// check that needs bcrypt goes through the gate, as a check from `peer`.
    pub(crate) async fn check(&self, header: Option<&HeaderValue>, peer: IpAddr) -> Verdict {
        let Some((user, password)) = header.and_then(parse_basic) else {
            return Verdict::Denied;
        };
        if password.len() > BCRYPT_MAX_PASSWORD {
            log::debug!(
                "basic auth failed for user {user:?}: password longer than \
                 {BCRYPT_MAX_PASSWORD} bytes"
            );
            return Verdict::Denied;
        }
        let known = self.users.contains_key(&user);
        if known && self.cached(&user, &password) {
            return Verdict::Allowed;
        }
        let mark = self.failure_mark(&user, &password);
        if self.failed_before(mark.as_ref()) {
            log::debug!("basic auth failed for user {user:?} (a password that failed before)");
            return Verdict::Denied;
        }
        let slot = match self.gate.acquire(peer).await {
            Ok(slot) => slot,
            Err(refusal) => return Verdict::Refused(refusal),
        };
        // Another request may have checked the same credentials while this one waited.
        if known && self.cached(&user, &password) {
            return Verdict::Allowed;
        }
        if self.failed_before(mark.as_ref()) {
            return Verdict::Denied;
        }
        let hash = match self.users.get(&user) {
            Some(h) => h.clone(),
            None => self.decoy.clone(),
        };
        let pw = password.clone();
        // The slot moves into the blocking task: if this request is dropped (timeout), the next
        // check still waits for this one to finish.
        let checks = Arc::clone(&self.checks);
        let matched = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            checks.fetch_add(1, Ordering::Relaxed);
            bcrypt::verify(&pw, &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        if known && matched {
            self.gate.record(peer, false);
            let tag = hmac::sign(&self.key, &Self::mac_input(&user, &password));
            self.verified
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(user, tag);
            Verdict::Allowed
        } else {
            self.gate.record(peer, true);
            self.remember_failure(mark);
            log::debug!("basic auth failed for user {user:?}");
            Verdict::Denied
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

    const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn alice(password: &str) -> BasicAuth {
        let mut users = BTreeMap::new();
        users.insert(
            "alice".to_string(),
            bcrypt::hash(password, 4).expect("hash"),
        );
        BasicAuth::new(&users).expect("auth").expect("enabled")
    }

    async fn ok(auth: &BasicAuth, user: &str, password: &str) -> bool {
        auth.check(Some(&header(user, password)), PEER).await == Verdict::Allowed
    }

    #[tokio::test]
    async fn right_password_passes_and_is_cached_wrong_ones_never_are() {
        let auth = alice("secret");
        assert_eq!(auth.check(None, PEER).await, Verdict::Denied);
        assert!(!ok(&auth, "alice", "wrong").await);
        assert!(!auth.cached("alice", b"wrong"));
        assert!(!ok(&auth, "bob", "secret").await);
        assert!(ok(&auth, "alice", "secret").await);
        assert!(auth.cached("alice", b"secret"));
        assert!(ok(&auth, "alice", "secret").await);
        // A wrong password after a cached right one is still refused.
        assert!(!ok(&auth, "alice", "secret2").await);
        assert!(!auth.cached("alice", b"secret2"));
        // The cache is keyed by user: alice's password does not open bob.
        assert!(!auth.cached("bob", b"secret"));
    }

    #[tokio::test]
    async fn failures_are_remembered_per_user_and_password_within_a_bound() {
        let auth = alice("secret");
        assert!(!ok(&auth, "alice", "wrong").await);
        assert!(auth.failed_before(auth.failure_mark("alice", b"wrong").as_ref()));
        assert!(!auth.failed_before(auth.failure_mark("alice", b"secret").as_ref()));
        assert!(!auth.failed_before(auth.failure_mark("bob", b"wrong").as_ref()));
        assert!(!ok(&auth, "alice", "wrong").await);
        assert!(ok(&auth, "alice", "secret").await);
        for i in 0..MAX_REMEMBERED_FAILURES + 10 {
            auth.remember_failure(auth.failure_mark("alice", format!("w{i}").as_bytes()));
        }
        assert!(auth.failed.lock().unwrap().len() <= MAX_REMEMBERED_FAILURES);
    }

    #[tokio::test]
    async fn passwords_over_72_bytes_never_match() {
        let long = "A".repeat(BCRYPT_MAX_PASSWORD);
        let auth = alice(&long);
        // bcrypt alone would say yes: it reads 72 bytes.
        assert!(bcrypt::verify(format!("{long}JUNK"), &auth.decoy).expect("verify"));
        assert!(!ok(&auth, "alice", &format!("{long}JUNK")).await);
        assert!(ok(&auth, "alice", &long).await);
        assert!(!ok(&auth, "alice", &format!("{long}JUNK")).await);
    }

    #[test]
    fn no_users_means_no_auth() {
        assert!(BasicAuth::new(&BTreeMap::new()).expect("ok").is_none());
    }
}
