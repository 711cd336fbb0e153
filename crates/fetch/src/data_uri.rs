//! `data:` URIs (RFC 2397): `data:[<mime>][;param=value]*[;base64],<data>`.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use crate::error::FetchError;

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

/// Base64 characters decoded at a time (a multiple of 4): 48 KiB of output per chunk.
const CHUNK_CHARS: usize = 64 * 1024;
/// Bytes of a percent-encoded payload decoded at a time.
const CHUNK_BYTES: usize = 48 * 1024;

/// Decodes a `data:` URI. The media type is ignored (the relay sniffs the bytes). With
/// `;base64` the data is base64 (standard or URL-safe alphabet, padding optional, whitespace
/// ignored); without it, percent-decoded. More than `max_bytes` decoded bytes is
/// [`FetchError::TooLarge`], detected before decoding where the length tells.
pub fn decode_data_uri(uri: &str, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
    let mut decoder = DataUriDecoder::new(uri, max_bytes)?;
    let mut out = Vec::new();
    while let Some(chunk) = decoder.next_chunk()? {
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A `data:` URI decoded a chunk at a time (at most 48 KiB each), so that a large payload can
/// be written out without ever being whole in memory twice. Decodes exactly what
/// [`decode_data_uri`] decodes, with the same errors.
#[derive(Debug)]
pub struct DataUriDecoder<'a> {
    /// The payload after the comma.
    data: &'a [u8],
    /// Where in `data` decoding goes on.
    pos: usize,
    /// `None`: percent-encoded; `Some(url_safe)`: base64 of that alphabet.
    base64: Option<bool>,
    max_bytes: u64,
    decoded: u64,
    /// Base64 characters read but not decoded yet.
    pending: Vec<u8>,
    done: bool,
}

impl<'a> DataUriDecoder<'a> {
    /// Checks the URI's shape, and for base64 its length against `max_bytes` and its alphabet
    /// (one pass, nothing allocated); decoding happens in [`DataUriDecoder::next_chunk`].
    pub fn new(uri: &'a str, max_bytes: u64) -> Result<DataUriDecoder<'a>, FetchError> {
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
        let data = data.as_bytes();
        let base64 = if is_base64 {
            let (mut chars, mut standard, mut url_safe) = (0u64, false, false);
            let mut pos = 0;
            while let Some(c) = next_base64_char(data, &mut pos) {
                chars += 1;
                match c {
                    b'+' | b'/' => standard = true,
                    b'-' | b'_' => url_safe = true,
                    _ => {}
                }
            }
            // Every 4 characters give 3 bytes; padding takes at most 2 of them back.
            let least = (chars / 4 * 3).saturating_sub(2);
            if least > max_bytes {
                return Err(FetchError::TooLarge);
            }
            if standard && url_safe {
                return Err(invalid("data URI is not valid base64"));
            }
            Some(url_safe)
        } else {
            None
        };
        Ok(DataUriDecoder {
            data,
            pos: 0,
            base64,
            max_bytes,
            decoded: 0,
            pending: Vec::new(),
            done: false,
        })
    }

    /// The next decoded bytes (never empty), or `None` at the end.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, FetchError> {
        if self.done {
            return Ok(None);
        }
        let chunk = match self.base64 {
            None => self.next_percent_chunk()?,
            Some(url_safe) => self.next_base64_chunk(url_safe)?,
        };
        self.decoded += chunk.len() as u64;
        if self.decoded > self.max_bytes {
            self.done = true;
            return Err(FetchError::TooLarge);
        }
        if chunk.is_empty() {
            self.done = true;
            return Ok(None);
        }
        Ok(Some(chunk))
    }

    fn next_percent_chunk(&mut self) -> Result<Vec<u8>, FetchError> {
        let mut out = Vec::with_capacity(CHUNK_BYTES.min(self.data.len() - self.pos));
        while out.len() < CHUNK_BYTES {
            let Some(byte) = next_percent_decoded(self.data, &mut self.pos) else {
                self.done = true;
                break;
            };
            if self.decoded + out.len() as u64 >= self.max_bytes {
                self.done = true;
                return Err(FetchError::TooLarge);
            }
            out.push(byte);
        }
        Ok(out)
    }

    /// Decodes whole groups of 4 characters at a time. A chunk holding padding is never cut
    /// short, so padding anywhere but at the end fails as it does decoding the whole.
    fn next_base64_chunk(&mut self, url_safe: bool) -> Result<Vec<u8>, FetchError> {
        let mut padded = self.pending.contains(&b'=');
        loop {
            match next_base64_char(self.data, &mut self.pos) {
                Some(c) => {
                    padded |= c == b'=';
                    self.pending.push(c);
                    if self.pending.len() >= CHUNK_CHARS
                        && self.pending.len().is_multiple_of(4)
                        && !padded
                    {
                        break;
                    }
                }
                None => {
                    self.done = true;
                    break;
                }
            }
        }
        let engine = if url_safe { &URL_SAFE } else { &STANDARD };
        let decoded = engine.decode(&self.pending).map_err(|_| {
            self.done = true;
            invalid("data URI is not valid base64")
        });
        self.pending.clear();
        decoded
    }
}

/// The next byte of a percent-encoded payload, from `pos` on.
fn next_percent_decoded(input: &[u8], pos: &mut usize) -> Option<u8> {
    match input.get(*pos..)? {
        [b'%', hi, lo, ..] if hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit() => {
            *pos += 3;
            Some(hex(*hi) << 4 | hex(*lo))
        }
        [b, ..] => {
            *pos += 1;
            Some(*b)
        }
        [] => None,
    }
}

/// The next base64 character of a payload: percent-decoded (`%2B`, `%3D` are allowed around
/// base64 too), whitespace skipped.
fn next_base64_char(input: &[u8], pos: &mut usize) -> Option<u8> {
    loop {
        let byte = next_percent_decoded(input, pos)?;
        if !byte.is_ascii_whitespace() {
            return Some(byte);
        }
    }
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

    /// Every chunk of `uri`, and whether decoding ended in an error.
    fn chunks(uri: &str, max: u64) -> (Vec<Vec<u8>>, Option<String>) {
        let mut decoder = match DataUriDecoder::new(uri, max) {
            Ok(d) => d,
            Err(e) => return (Vec::new(), Some(format!("{e:?}"))),
        };
        let mut out = Vec::new();
        loop {
            match decoder.next_chunk() {
                Ok(Some(chunk)) => out.push(chunk),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(format!("{e:?}"))),
            }
        }
    }

    #[test]
    fn large_payloads_come_in_bounded_chunks_equal_to_the_whole() {
        use base64::engine::general_purpose::{STANDARD as PADDED, URL_SAFE_NO_PAD};
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 256) as u8).collect();
        let encoded = PADDED.encode(&bytes);
        // Line breaks every 76 characters, as MIME writes it, and percent-encoded padding.
        let wrapped: String = encoded
            .as_bytes()
            .chunks(76)
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect::<Vec<_>>()
            .join("\r\n")
            .replace('=', "%3D");
        for uri in [
            format!("data:video/mp4;base64,{encoded}"),
            format!("data:;base64,{wrapped}"),
            format!("data:;base64,{}", URL_SAFE_NO_PAD.encode(&bytes)),
        ] {
            let (got, err) = chunks(&uri, bytes.len() as u64);
            assert_eq!(err, None);
            assert!(got.len() > 1, "one chunk only");
            assert!(got.iter().all(|c| !c.is_empty() && c.len() <= 48 * 1024));
            assert_eq!(got.concat(), bytes);
            assert_eq!(decode_data_uri(&uri, u64::MAX).unwrap(), bytes);
        }
        // Percent-encoded, likewise.
        let text = "%41b".repeat(30_000);
        let (got, err) = chunks(&format!("data:,{text}"), u64::MAX);
        assert_eq!(err, None);
        assert!(got.len() > 1);
        assert_eq!(got.concat(), "Ab".repeat(30_000).as_bytes());
        // One byte over the limit, found in a later chunk.
        let (got, err) = chunks(&format!("data:,{text}"), 59_999);
        assert_eq!(err.as_deref(), Some("TooLarge"));
        assert!(!got.is_empty());
    }

    #[test]
    fn faults_far_into_a_payload_are_found() {
        let good = "AAAA".repeat(20_000);
        let bad = r#"InvalidUrl("data URI is not valid base64")"#;
        // Padding in the middle, where a chunk could end.
        let (_, err) = chunks(&format!("data:;base64,{good}AA==AAAA{good}"), u64::MAX);
        assert_eq!(err.as_deref(), Some(bad));
        // A character of no alphabet, far in.
        let (_, err) = chunks(&format!("data:;base64,{good}{good}A*AA"), u64::MAX);
        assert_eq!(err.as_deref(), Some(bad));
        // Both alphabets at once.
        let (got, err) = chunks(&format!("data:;base64,+AAA{good}-AAA"), u64::MAX);
        assert_eq!((got.len(), err.as_deref()), (0, Some(bad)));
        // A last group with padding right after a chunk's worth: its own chunk.
        let exact = format!("data:;base64,{}AA=\n=", "AAAA".repeat(16_384));
        let (got, err) = chunks(&exact, u64::MAX);
        assert_eq!(err, None);
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [49_152, 1]);
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
