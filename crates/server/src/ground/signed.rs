//! Signed, expiring file URLs (`GET /files/...`): downloadable without a key while the
//! HMAC-SHA256 signature and the expiry check out, and while what the file belongs to
//! ([`holder`]: a task, an asset or a character) is still there, unexpired, with its key
//! active. A bad or expired signature is `404 not found`, which never tells whether the file
//! exists; so is a link whose holder is gone.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Name of the stored signing secret.
pub const SECRET_META: &str = "signing_secret";

/// Signs and checks file URLs with one secret.
#[derive(Clone)]
pub struct Signer {
    secret: Vec<u8>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

impl Signer {
    pub fn new(secret: Vec<u8>) -> Signer {
        Signer { secret }
    }

    fn mac(&self, blob: &str, expires: u64) -> Vec<u8> {
        // Keys of any length are accepted by HMAC; this cannot fail.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.secret) else {
            return Vec::new();
        };
        mac.update(blob.as_bytes());
        mac.update(b"\n");
        mac.update(expires.to_string().as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// The path and query of a URL for `blob`, valid until `expires` (unix seconds).
    pub fn path(&self, blob: &str, expires: u64) -> String {
        let sig: String = self
            .mac(blob, expires)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("/files/{blob}?expires={expires}&sig={sig}")
    }

    /// A full URL on `base` (the configured `public_base_url`).
    pub fn url(&self, base: &str, blob: &str, expires: u64) -> String {
        format!("{}{}", base.trim_end_matches('/'), self.path(blob, expires))
    }

    /// Whether `sig` signs `blob` until `expires`, and `expires` is still ahead of `now`.
    pub fn verify(&self, blob: &str, expires: u64, sig: &str, now: u64) -> bool {
        if expires <= now || sig.len() != 64 {
            return false;
        }
        let Some(given) = decode_hex(sig) else {
            return false;
        };
        bool::from(self.mac(blob, expires).ct_eq(&given))
    }
}

/// Lowercase hex, exactly as [`Signer::path`] writes it: one signature has one spelling
/// (`u8::from_str_radix` alone would also take `A`-`F` and a leading `+`).
fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    s.as_bytes()
        .chunks(2)
        .map(|pair| match pair {
            [hi, lo] => Some(digit(*hi)? << 4 | digit(*lo)?),
            _ => None,
        })
        .collect()
}

/// What a stored file belongs to, by its id's first segments: the blobs of an asset are under
/// `assets/<asset id>/`, a character's under `characters/<character id>/`, a task's (its
/// outputs and the references it was given) under `<task id>/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder<'a> {
    Task(&'a str),
    Asset(&'a str),
    Character(&'a str),
}

/// The [`Holder`] of blob `id`; `None` for an id of no known shape.
pub fn holder(id: &str) -> Option<Holder<'_>> {
    let mut segments = id.split('/');
    let first = segments.next().filter(|s| !s.is_empty())?;
    let second = segments.next().filter(|s| !s.is_empty())?;
    match first {
        "assets" => Some(Holder::Asset(second)),
        "characters" => Some(Holder::Character(second)),
        task => Some(Holder::Task(task)),
    }
}

/// The Content-Type of a blob, by its file name's ending.
pub fn content_type(blob: &str) -> &'static str {
    store::content_type(blob)
}

/// Whether a base URL names a host other machines can reach: not empty, not localhost, not a
/// loopback, private or link-local address.
pub fn is_public(base: &str) -> bool {
    let Some(rest) = base
        .strip_prefix("https://")
        .or_else(|| base.strip_prefix("http://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() || host.eq_ignore_ascii_case("localhost") {
        return false;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => {
            !(ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified())
        }
        Ok(std::net::IpAddr::V6(ip)) => !(ip.is_loopback() || ip.is_unspecified()),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify() {
        let signer = Signer::new(b"secret".to_vec());
        let path = signer.path("t/video.mp4", 2000);
        let sig = path.rsplit("sig=").next().unwrap();
        assert!(signer.verify("t/video.mp4", 2000, sig, 1000));
        assert!(!signer.verify("t/video.mp4", 2000, sig, 2000), "expired");
        assert!(
            !signer.verify("t/other.mp4", 2000, sig, 1000),
            "another file"
        );
        assert!(
            !signer.verify("t/video.mp4", 2001, sig, 1000),
            "another expiry"
        );
        assert!(!signer.verify("t/video.mp4", 2000, "zz", 1000));
        // One spelling only: the signature in capitals is refused.
        assert_ne!(sig.to_uppercase(), sig);
        assert!(!signer.verify("t/video.mp4", 2000, &sig.to_uppercase(), 1000));
        let other = Signer::new(b"other".to_vec());
        assert!(
            !other.verify("t/video.mp4", 2000, sig, 1000),
            "another secret"
        );
    }

    #[test]
    fn a_file_belongs_to_its_first_segments() {
        assert_eq!(holder("video_01/video.mp4"), Some(Holder::Task("video_01")));
        assert_eq!(
            holder("gen_01/frames/last.png"),
            Some(Holder::Task("gen_01"))
        );
        assert_eq!(
            holder("assets/asset_01/original"),
            Some(Holder::Asset("asset_01"))
        );
        assert_eq!(
            holder("characters/char_01/video.mp4"),
            Some(Holder::Character("char_01"))
        );
        for bad in ["", "video.mp4", "/video.mp4", "video_01/", "assets//x"] {
            assert_eq!(holder(bad), None, "{bad}");
        }
    }

    #[test]
    fn hex_is_lowercase_digits_only() {
        assert_eq!(decode_hex("00ff7a"), Some(vec![0, 255, 0x7a]));
        assert_eq!(decode_hex("FF"), None);
        assert_eq!(decode_hex("+f"), None);
        assert_eq!(decode_hex("-1"), None);
        assert_eq!(decode_hex("abc"), None);
    }

    #[test]
    fn only_reachable_hosts_are_public() {
        for base in [
            "https://relay.example.com",
            "http://203.0.113.7:8080/",
            "https://[2001:db8::1]:443",
        ] {
            assert!(is_public(base), "{base}");
        }
        for base in [
            "",
            "http://127.0.0.1:8080",
            "http://localhost:8080",
            "http://10.0.0.2",
            "http://192.168.1.5:80",
            "http://[::1]:8080",
            "ftp://relay.example.com",
        ] {
            assert!(!is_public(base), "{base}");
        }
    }
}
