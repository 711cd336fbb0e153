//! API keys and the admin token: generation, hashing, and checking a request's credentials.

use error_codes::{ApiError, ErrorCode};
use http::HeaderMap;
use rand::RngCore;
use sha2::{Digest, Sha256};
use store::{Key, KeyStatus, Store};
use subtle::ConstantTimeEq;

/// A new random secret (256 bits) with a recognisable prefix.
pub fn generate_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let mut out = String::with_capacity(prefix.len() + 64);
    out.push_str(prefix);
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Lowercase hex SHA-256: what the store keeps instead of a secret.
pub fn hash_secret(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn unauthorized(detail: &str) -> ApiError {
    ApiError::new(ErrorCode::Unauthorized, detail)
}

/// The credential of a request: `Authorization: Bearer <key>`, or (where `allow_x_api_key`)
/// `x-api-key: <key>`.
pub fn presented_secret(headers: &HeaderMap, allow_x_api_key: bool) -> Option<&str> {
    if let Some(value) = headers.get(http::header::AUTHORIZATION) {
        let value = value.to_str().ok()?.trim();
        let (scheme, token) = value.split_once(' ')?;
        return (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty())
            .then(|| token.trim());
    }
    if allow_x_api_key {
        let value = headers.get("x-api-key")?.to_str().ok()?.trim();
        return (!value.is_empty()).then_some(value);
    }
    None
}

/// Checks the request's key: known, active, not expired. Any fault is `401 unauthorized`.
pub fn authenticate(
    store: &dyn Store,
    headers: &HeaderMap,
    allow_x_api_key: bool,
    now: u64,
) -> Result<Key, ApiError> {
    let secret = presented_secret(headers, allow_x_api_key)
        .ok_or_else(|| unauthorized("an API key is required: Authorization: Bearer <key>"))?;
    if secret.len() > 256 {
        return Err(unauthorized("the API key is not valid"));
    }
    let hash = hash_secret(secret);
    let key = store
        .key_by_hash(&hash)
        .map_err(|e| {
            tracing::error!("key lookup: {e}");
            ApiError::new(ErrorCode::Unavailable, "the key store is not available")
        })?
        .ok_or_else(|| unauthorized("the API key is not valid"))?;
    if !bool::from(key.hash.as_bytes().ct_eq(hash.as_bytes())) {
        return Err(unauthorized("the API key is not valid"));
    }
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
        assert_eq!(hash_secret("x").len(), 64);
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
