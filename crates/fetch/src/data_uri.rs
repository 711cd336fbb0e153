//! `data:` URIs (RFC 2397): `data:[<mime>][;param=value]*[;base64],<data>`.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::FetchError;

const LENIENT: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_decode_padding_mode(DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);
const STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, LENIENT);
const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, LENIENT);

/// Whether `uri` is a `data:` URI (scheme compared without regard to case).
pub fn is_data_uri(uri: &str) -> bool {
    uri.trim_start()
        .get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("data:"))
}

fn invalid(reason: &str) -> FetchError {
    FetchError::InvalidUrl(reason.to_owned())
}

/// Decodes a `data:` URI. The media type is ignored (the relay sniffs the bytes). With
/// `;base64` the data is base64 (standard or URL-safe alphabet, padding optional, whitespace
/// ignored); without it, percent-decoded. More than `max_bytes` decoded bytes is
/// [`FetchError::TooLarge`], detected before decoding where the length tells.
pub fn decode_data_uri(uri: &str, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
    let uri = uri.trim();
    if !is_data_uri(uri) {
        return Err(invalid("not a data URI"));
    }
    let rest = uri.get(5..).unwrap_or_default();
    let Some((meta, data)) = rest.split_once(',') else {
        return Err(invalid("data URI without a comma"));
    };
    let is_base64 = meta
        .rsplit(';')
        .next()
        .is_some_and(|last| last.trim().eq_ignore_ascii_case("base64"));

    if !is_base64 {
        return percent_decode(data.as_bytes(), max_bytes);
    }

    // Percent-encoding is allowed around base64 too (`%2B`, `%3D`); decode it first.
    let text = if data.contains('%') {
        percent_decode(data.as_bytes(), u64::MAX)?
    } else {
        data.as_bytes().to_vec()
    };
    let clean: Vec<u8> = text
        .into_iter()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    // Every 4 characters give 3 bytes; padding takes at most 2 of them back.
    let least = (clean.len() as u64 / 4 * 3).saturating_sub(2);
    if least > max_bytes {
        return Err(FetchError::TooLarge);
    }
    let bytes = STANDARD
        .decode(&clean)
        .or_else(|_| URL_SAFE.decode(&clean))
        .map_err(|_| invalid("data URI is not valid base64"))?;
    if bytes.len() as u64 > max_bytes {
        return Err(FetchError::TooLarge);
    }
    Ok(bytes)
}

/// `%XX` -> the byte; a `%` not followed by two hex digits stays as it is (as browsers do).
fn percent_decode(input: &[u8], max_bytes: u64) -> Result<Vec<u8>, FetchError> {
    let mut out = Vec::with_capacity(input.len().min(1 << 20));
    let mut i = 0;
    while i < input.len() {
        let byte = match input[i..] {
            [b'%', hi, lo, ..] if hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit() => {
                i += 3;
                hex(hi) << 4 | hex(lo)
            }
            [b, ..] => {
                i += 1;
                b
            }
            [] => break,
        };
        if out.len() as u64 >= max_bytes {
            return Err(FetchError::TooLarge);
        }
        out.push(byte);
    }
    Ok(out)
}

fn hex(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        b'A'..=b'F' => digit - b'A' + 10,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(uri: &str, max: u64, expected: Result<&[u8], &str>) {
        let got = decode_data_uri(uri, max);
        match (got, expected) {
            (Ok(bytes), Ok(want)) => assert_eq!(bytes, want, "{uri}"),
            (Err(err), Err(want)) => assert_eq!(format!("{err:?}"), want, "{uri}"),
            (got, want) => panic!("{uri}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn base64() {
        check(
            "data:image/png;base64,iVBORw0KGgo=",
            100,
            Ok(b"\x89PNG\r\n\x1a\n"),
        );
        check(
            "DATA:image/png;BASE64,iVBORw0KGgo",
            100,
            Ok(b"\x89PNG\r\n\x1a\n"),
        );
        check(";base64,aGk=", 100, Err(r#"InvalidUrl("not a data URI")"#));
        check("data:;base64,aGk=", 100, Ok(b"hi"));
        check("data:base64,aGk=", 100, Ok(b"hi"));
        check("data:image/png;name=a.png;base64,aGk=", 100, Ok(b"hi"));
        check("data:;base64,aG\n k=\r\n", 100, Ok(b"hi"));
        check("data:;base64,aGk%3D", 100, Ok(b"hi"));
        check("data:;base64,-_8", 100, Ok(b"\xfb\xff"));
        check("data:;base64,+/8=", 100, Ok(b"\xfb\xff"));
        check("data:;base64,", 100, Ok(b""));
    }

    #[test]
    fn bad_base64() {
        let bad = r#"InvalidUrl("data URI is not valid base64")"#;
        check("data:;base64,a", 100, Err(bad));
        check("data:;base64,a*b=", 100, Err(bad));
        check("data:;base64,+_8=", 100, Err(bad));
        check(
            "data:image/png;base64",
            100,
            Err(r#"InvalidUrl("data URI without a comma")"#),
        );
        check("http://x/", 100, Err(r#"InvalidUrl("not a data URI")"#));
    }

    #[test]
    fn percent_encoded() {
        check("data:,hello%20world", 100, Ok(b"hello world"));
        check("data:text/plain,%ff%00%4a", 100, Ok(b"\xff\x00J"));
        check("data:,100%", 100, Ok(b"100%"));
        check("data:,%zz%4", 100, Ok(b"%zz%4"));
        check("data:,a,b", 100, Ok(b"a,b"));
    }

    #[test]
    fn too_large() {
        check("data:,abcd", 4, Ok(b"abcd"));
        check("data:,abcde", 4, Err("TooLarge"));
        check("data:,%41%41%41%41%41", 4, Err("TooLarge"));
        check("data:;base64,YWJjZA==", 4, Ok(b"abcd"));
        check("data:;base64,YWJjZGU=", 4, Err("TooLarge"));
        // Refused by its length, before any decoding.
        let huge = format!("data:;base64,{}", "A".repeat(4000));
        check(&huge, 1000, Err("TooLarge"));
        check(&huge, 3000, Ok(&[0u8; 3000]));
    }
}
