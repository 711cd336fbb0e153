//! Webhook signing per Standard Webhooks (the scheme OpenAI's and Anthropic's webhooks use):
//! per-key secrets `whsec_<base64>`, the signature of one delivery, and the check of a
//! `callback_url` (or a key's `webhook_url`) that can be made when it is given.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use error_codes::{ApiError, ErrorCode};
use fetch::{FetchError, Poster};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// What a webhook secret starts with.
pub const SECRET_PREFIX: &str = "whsec_";
/// Random bytes in a new secret.
const SECRET_BYTES: usize = 32;

/// A new webhook secret: `whsec_` and the base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut bytes = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

/// The `webhook-signature` header of a delivery: `v1,` and the base64 HMAC-SHA256, keyed with
/// the secret's base64-decoded part, of `{id}.{timestamp}.{body}`. `None` when `secret` is not
/// a secret of this form.
pub fn signature(secret: &str, id: &str, timestamp: u64, body: &[u8]) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

/// `400 invalid request` naming `param` unless `url` is a URL the relay may deliver to, as far
/// as can be told without a lookup (an address the SSRF guard refuses is refused here; a host
/// name is checked again at each delivery).
pub fn check_url(poster: &Poster, param: &str, url: &str) -> Result<(), ApiError> {
    match poster.check_url(url) {
        Ok(()) => Ok(()),
        Err(FetchError::Blocked { host }) => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            param,
            format!(
                "{param} points at {host}, a private, loopback or reserved address the relay \
                 does not deliver webhooks to"
            ),
        )),
        Err(e) => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            param,
            format!("{param} must be an absolute http:// or https:// URL: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(secret, id, 1614265330, body).as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn new_secrets_decode_to_32_bytes() {
        let a = new_secret();
        let b = new_secret();
        assert_ne!(a, b);
        let raw = STANDARD
            .decode(a.strip_prefix(SECRET_PREFIX).unwrap())
            .unwrap();
        assert_eq!(raw.len(), 32);
        assert!(signature(&a, "evt_1", 1, b"{}").is_some());
        assert!(signature("not-a-secret", "evt_1", 1, b"{}").is_none());
    }
}
