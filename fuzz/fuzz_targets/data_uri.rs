//! `data:` URIs (`crates/fetch`): decoding arbitrary text never panics and never returns more
//! than the limit; a base64 URI built from random bytes (either alphabet, padded or not, wrapped
//! in whitespace or percent-encoded, with media type parameters) decodes back to them, and so
//! does a percent-encoded one; a limit below the length is `TooLarge`.
#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use fetch::{FetchError, decode_data_uri, is_data_uri};
use libfuzzer_sys::fuzz_target;
use relay_fuzz::{fnv, percent_encode};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let limit = fnv(data) % 64;
        match decode_data_uri(text, limit) {
            Ok(bytes) => {
                assert!(is_data_uri(text.trim()));
                assert!(
                    bytes.len() as u64 <= limit,
                    "{} bytes over {limit}",
                    bytes.len()
                );
            }
            Err(FetchError::TooLarge | FetchError::InvalidUrl(_)) => {}
            Err(other) => panic!("unexpected error {other:?}"),
        }
        let _ = decode_data_uri(text, u64::MAX);
    }

    let variant = fnv(data);
    let payload = match variant % 5 {
        0 => STANDARD.encode(data),
        1 => STANDARD_NO_PAD.encode(data),
        2 => URL_SAFE.encode(data),
        3 => URL_SAFE_NO_PAD.encode(data),
        // Line-wrapped, as some encoders write it.
        _ => STANDARD
            .encode(data)
            .as_bytes()
            .chunks(76)
            .map(|line| String::from_utf8_lossy(line).into_owned())
            .collect::<Vec<_>>()
            .join("\r\n"),
    };
    let payload = if variant & 8 != 0 {
        percent_encode(&payload)
    } else {
        payload
    };
    let meta = [
        "",
        "image/png",
        "image/png;name=a.png",
        "text/plain;charset=utf-8",
    ];
    let uri = format!(
        "data:{};base64,{payload}",
        meta[(variant >> 4) as usize % meta.len()]
    );
    let len = data.len() as u64;
    assert_eq!(
        decode_data_uri(&uri, len).ok().as_deref(),
        Some(data),
        "{uri}"
    );
    if len > 0 {
        assert!(
            matches!(decode_data_uri(&uri, len - 1), Err(FetchError::TooLarge)),
            "{uri}"
        );
    }

    let uri = format!(
        "data:application/octet-stream,{}",
        percent_encode_bytes(data)
    );
    assert_eq!(
        decode_data_uri(&uri, len).ok().as_deref(),
        Some(data),
        "{uri}"
    );
});

/// Every byte as `%XX`, but unreserved ASCII as itself.
fn percent_encode_bytes(data: &[u8]) -> String {
    data.iter()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(*b).to_string()
            } else {
                format!("%{b:02x}")
            }
        })
        .collect()
}
