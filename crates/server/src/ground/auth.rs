//! API keys and the admin token: generation, hashing, and checking a request's credentials.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use error_codes::{ApiError, ErrorCode};
use http::HeaderMap;
use rand::RngCore;
use sha2::{Digest, Sha256};
use store::{Key, KeyStatus, Store};
use subtle::ConstantTimeEq;

use crate::ground::fingerprint::{ByPrint, Prints};

/// A new random secret (256 bits) with a recognisable prefix.
pub fn generate_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let mut out = String::with_capacity(prefix.len() + 64);
    out.push_str(prefix);
    push_hex(&mut out, &bytes);
    out
}

/// Appends `bytes` as lowercase hex (on every request's path: no formatting machinery).
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

/// Lowercase hex SHA-256: what the store keeps instead of a secret.
pub fn hash_secret(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    let mut out = String::with_capacity(64);
    push_hex(&mut out, &digest);
    out
}

fn unauthorized(detail: &str) -> ApiError {
    ApiError::new(ErrorCode::Unauthorized, detail)
}

const X_API_KEY: http::HeaderName = http::HeaderName::from_static("x-api-key");

/// The credential of a request: `Authorization: Bearer <key>`, or (where `allow_x_api_key`)
/// `x-api-key: <key>`.
pub fn presented_secret(headers: &HeaderMap, allow_x_api_key: bool) -> Option<&str> {
    // A header value read as text is visible ASCII, spaces and tabs: ASCII trims suffice.
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        let value = value.to_str().ok()?.trim_ascii();
        let (scheme, token) = value.split_once(' ')?;
        let token = token.trim_ascii();
        return (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token);
    }
    if allow_x_api_key {
        let value = headers.get(X_API_KEY)?.to_str().ok()?.trim_ascii();
        return (!value.is_empty()).then_some(value);
    }
    None
}

/// When the key-change channel of the relays sharing a store was last heard (`cluster`): a
/// cache that may have missed a change is not used.
#[derive(Debug)]
pub struct Heard {
    since: Instant,
    /// Milliseconds from `since` to the last message heard; 0: not heard since it was lost.
    at_ms: AtomicU64,
}

impl Default for Heard {
    fn default() -> Heard {
        Heard {
            since: Instant::now(),
            at_ms: AtomicU64::new(0),
        }
    }
}

/// How long a cache that has heard nothing is still used.
pub const HEARD_WITHIN: Duration = Duration::from_secs(1);

impl Heard {
    /// A message was heard now.
    pub fn now(&self) {
        let ms = self.since.elapsed().as_millis() as u64;
        self.at_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// The channel was lost: changes may be missed from now on.
    pub fn forget(&self) {
        self.at_ms.store(0, Ordering::Relaxed);
    }

    /// Whether the channel was heard within [`HEARD_WITHIN`].
    pub fn fresh(&self) -> bool {
        let at = self.at_ms.load(Ordering::Relaxed);
        at != 0
            && (self.since.elapsed().as_millis() as u64).saturating_sub(at)
                < HEARD_WITHIN.as_millis() as u64
    }
}

/// Keys as last read from the store, so that a request is authenticated without a store read
/// and without hashing its secret with SHA-256: the cache is keyed by a 128-bit fingerprint of
/// the secret under a random SipHash key of this process (a keyed function no one outside
/// can compute, so no one can make a second secret with the same fingerprint; two distinct
/// secrets share one by chance with probability 2^-128). Every change to a key goes through an admin API, which clears the cache; with
/// other relays sharing the store (`cluster`), their changes clear it through Redis, and the
/// cache is used only while that channel is heard. A key's balance is never read from here
/// (the store checks it inside its own transactions).
#[derive(Debug, Default)]
pub struct KeyCache {
    /// The keys by fingerprint, and how many times the cache was cleared (a key read from the
    /// store before a clear is not put in after it).
    keys: RwLock<(ByPrint<Arc<Key>>, u64)>,
    /// With other relays: the cache is used only while their changes can be heard.
    feed: Option<Arc<Heard>>,
    /// The two keys of the fingerprint, random per process.
    prints: Prints,
}

/// Past this many cached keys the cache starts afresh.
const KEY_CACHE_MAX: usize = 10_000;

impl KeyCache {
    /// A cache used only while `feed` is fresh.
    pub fn following(feed: Arc<Heard>) -> KeyCache {
        KeyCache {
            feed: Some(feed),
            ..KeyCache::default()
        }
    }

    /// The secret's fingerprint (see [`KeyCache`]).
    fn fingerprint(&self, secret: &str) -> u128 {
        self.prints.of(secret)
    }

    /// How many times the cache was cleared.
    pub fn clears(&self) -> u64 {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).1
    }

    /// Forgets every key (after any key change).
    pub fn clear(&self) {
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        keys.0.clear();
        keys.1 += 1;
    }

    /// The cached key, or the cache's generation to hand to [`KeyCache::put`].
    fn get(&self, print: u128) -> Result<Arc<Key>, u64> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        if let Some(feed) = &self.feed
            && !feed.fresh()
        {
            return Err(keys.1);
        }
        keys.0.get(&print).cloned().ok_or(keys.1)
    }

    /// Caches a key read from the store, unless the cache was cleared since `generation`.
    fn put(&self, generation: u64, print: u128, key: Arc<Key>) {
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        if keys.1 != generation {
            return;
        }
        if keys.0.len() >= KEY_CACHE_MAX {
            keys.0.clear();
        }
        keys.0.insert(print, key);
    }
}

/// Checks the request's key: known, active, not expired. Any fault is `401 unauthorized`.
pub async fn authenticate(
    store: &dyn Store,
    cache: &KeyCache,
    headers: &HeaderMap,
    allow_x_api_key: bool,
    now: u64,
) -> Result<Arc<Key>, ApiError> {
    let secret = presented_secret(headers, allow_x_api_key)
        .ok_or_else(|| unauthorized("an API key is required: Authorization: Bearer <key>"))?;
    if secret.len() > 256 {
        return Err(unauthorized("the API key is not valid"));
    }
    let print = cache.fingerprint(secret);
    let key = match cache.get(print) {
        Ok(key) => key,
        Err(generation) => {
            let hash = hash_secret(secret);
            let key = store
                .key_by_hash(&hash)
                .await
                .map_err(|e| {
                    tracing::error!("key lookup: {e}");
                    ApiError::new(ErrorCode::Unavailable, "the key store is not available")
                })?
                .ok_or_else(|| unauthorized("the API key is not valid"))?;
            if !bool::from(key.hash.as_bytes().ct_eq(hash.as_bytes())) {
                return Err(unauthorized("the API key is not valid"));
            }
            let key = Arc::new(key);
            cache.put(generation, print, key.clone());
            key
        }
    };
    if key.status != KeyStatus::Active {
        return Err(unauthorized("the API key has been revoked"));
    }
    if key.expires_at.is_some_and(|at| at <= now) {
        return Err(unauthorized("the API key has expired"));
    }
    Ok(key)
}

/// Checks the admin token (Bearer) against its stored hash.
pub fn authenticate_admin(headers: &HeaderMap, admin_hash: &str) -> Result<(), ApiError> {
    let secret = presented_secret(headers, false).ok_or_else(|| {
        unauthorized("the admin token is required: Authorization: Bearer <token>")
    })?;
    let hash = hash_secret(secret);
    if bool::from(hash.as_bytes().ct_eq(admin_hash.as_bytes())) {
        Ok(())
    } else {
        Err(unauthorized("the admin token is not valid"))
    }
}

/// Fewest characters of an admin token the operator sets.
pub const ADMIN_TOKEN_MIN_LEN: usize = 32;
/// Fewest distinct characters in it.
pub const ADMIN_TOKEN_MIN_DISTINCT: usize = 10;

/// Why `token` may not be the admin token (too short, or from too few characters), if it may
/// not; the message says how to make one and never shows the token.
pub fn admin_token_weakness(token: &str) -> Option<String> {
    let len = token.chars().count();
    let mut seen: Vec<char> = token.chars().collect();
    seen.sort_unstable();
    seen.dedup();
    let distinct = seen.len();
    if len >= ADMIN_TOKEN_MIN_LEN && distinct >= ADMIN_TOKEN_MIN_DISTINCT {
        return None;
    }
    Some(format!(
        "RELAY_ADMIN_TOKEN is too weak to guard the admin API: it has {len} characters, {distinct} \
         of them distinct; it needs at least {ADMIN_TOKEN_MIN_LEN} characters, at least \
         {ADMIN_TOKEN_MIN_DISTINCT} of them distinct. Make one with `openssl rand -hex 32`, or \
         leave RELAY_ADMIN_TOKEN unset: the relay then generates one on its first start and \
         prints it once"
    ))
}

/// Whether `key` may use `model` (its optional allow-list).
pub fn may_use_model(key: &Key, model: &str) -> bool {
    key.models
        .as_ref()
        .is_none_or(|models| models.iter().any(|m| m == model))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_random_and_hashes_stable() {
        let a = generate_secret("sk-relay-");
        let b = generate_secret("sk-relay-");
        assert_ne!(a, b);
        assert!(a.starts_with("sk-relay-"));
        assert_eq!(a.len(), "sk-relay-".len() + 64);
        assert_eq!(hash_secret("x"), hash_secret("x"));
        assert_eq!(
            hash_secret("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn weak_admin_tokens_are_refused_saying_how_to_make_one() {
        for weak in [
            "admin",
            "restart-admin",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            // Long enough, but of 9 characters.
            "abcabcabcabcabcabcabcabcdefghiabcdefghi",
        ] {
            let why = admin_token_weakness(weak).expect(weak);
            assert!(why.contains("openssl rand -hex 32"), "{why}");
            // ("admin" is a word of the message itself.)
            assert!(
                weak == "admin" || !why.contains(weak),
                "the message shows the token: {why}"
            );
        }
        assert!(
            admin_token_weakness("admin")
                .unwrap()
                .contains("5 characters, 5 of them distinct")
        );
        // What the relay makes, and what the advice makes, pass.
        assert_eq!(admin_token_weakness(&generate_secret("adm-relay-")), None);
        assert_eq!(
            admin_token_weakness(
                "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
            ),
            None
        );
        assert_eq!(
            admin_token_weakness("0123456789abcdefghijklmnopqrstuv"),
            None
        );
    }

    #[test]
    fn presented_secret_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(presented_secret(&h, true), None);
        h.insert("x-api-key", "k1".parse().unwrap());
        assert_eq!(presented_secret(&h, false), None);
        assert_eq!(presented_secret(&h, true), Some("k1"));
        h.insert("authorization", "Bearer k2".parse().unwrap());
        assert_eq!(presented_secret(&h, true), Some("k2"));
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(presented_secret(&h, true), None);
    }
}
