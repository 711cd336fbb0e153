//! A JSON answer that carries a file as base64 in one of its members (Vertex AI's
//! `bytesBase64Encoded`), read as it arrives: the document is kept, except the string values
//! of members of that name, whose base64 is decoded piece by piece and handed to the caller
//! (to be written to a file) and left as `""` in the kept document. Memory stays bounded by
//! the document without its files and one piece of the body: a video is never held whole,
//! let alone twice.
//!
//! Only the first such value is decoded; later ones (more samples than asked for) are passed
//! over. The scan follows JSON's strings and escapes, so a member name inside a string value
//! is not taken for a member.

use base64::Engine as _;

/// Why an answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpillError {
    #[error("the answer without its files is larger than {0} bytes")]
    TooLarge(usize),
    #[error("the file's base64 is malformed")]
    NotBase64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between tokens.
    Outside,
    /// Inside a string kept in the document, which started at `start` of `kept`.
    InString { start: usize, escaped: bool },
    /// Inside a value being decoded; `escape` counts what is left of an escape sequence
    /// (`\` then a letter, or `\u` then four hex digits).
    Spilling { escape: Escape },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    None,
    /// Just after a backslash.
    Started,
    /// In a `\uXXXX`: the value so far and the digits left.
    Unicode {
        value: u32,
        left: u8,
    },
}

/// The reader of one answer.
pub struct Spill {
    name: &'static [u8],
    max_kept: usize,
    kept: Vec<u8>,
    state: State,
    /// The last string closed outside a value was the member name looked for.
    after_name: bool,
    /// ... and a `:` followed it: the next string is a value to decode.
    value_next: bool,
    /// Base64 characters not decoded yet (the last quad is held back until the value ends,
    /// for its padding).
    pending: Vec<u8>,
    /// Values decoded so far.
    values: u32,
}

/// Base64 with or without padding.
const ENGINE: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// Base64 characters gathered before a decode.
const DECODE_BATCH: usize = 64 * 1024;

impl Spill {
    /// A reader taking out the values of members named `name`, keeping at most `max_kept`
    /// bytes of the rest.
    pub fn new(name: &'static str, max_kept: usize) -> Spill {
        Spill {
            name: name.as_bytes(),
            max_kept,
            kept: Vec::new(),
            state: State::Outside,
            after_name: false,
            value_next: false,
            pending: Vec::new(),
            values: 0,
        }
    }

    /// Reads the next piece of the answer; the decoded bytes of the file, if any, are
    /// appended to `out`.
    pub fn feed(&mut self, piece: &[u8], out: &mut Vec<u8>) -> Result<(), SpillError> {
        for &b in piece {
            match self.state {
                State::Outside => self.outside(b),
                State::InString { start, escaped } => {
                    self.kept.push(b);
                    if escaped {
                        self.state = State::InString {
                            start,
                            escaped: false,
                        };
                    } else if b == b'\\' {
                        self.state = State::InString {
                            start,
                            escaped: true,
                        };
                    } else if b == b'"' {
                        let end = self.kept.len() - 1;
                        self.after_name = &self.kept[start..end] == self.name;
                        self.state = State::Outside;
                    }
                }
                State::Spilling { escape } => self.spilling(b, escape, out)?,
            }
            if self.kept.len() > self.max_kept {
                return Err(SpillError::TooLarge(self.max_kept));
            }
        }
        Ok(())
    }

    /// Ends the answer: the kept document (any value still open is malformed JSON, which
    /// its parser will say).
    pub fn finish(self) -> Vec<u8> {
        self.kept
    }

    fn outside(&mut self, b: u8) {
        if b.is_ascii_whitespace() {
            self.kept.push(b);
            return;
        }
        if b == b'"' && self.value_next {
            self.kept.push(b);
            self.value_next = false;
            self.after_name = false;
            self.state = State::Spilling {
                escape: Escape::None,
            };
            return;
        }
        self.kept.push(b);
        self.value_next = b == b':' && self.after_name;
        self.after_name = false;
        if b == b'"' {
            self.state = State::InString {
                start: self.kept.len(),
                escaped: false,
            };
        }
    }

    fn spilling(&mut self, b: u8, escape: Escape, out: &mut Vec<u8>) -> Result<(), SpillError> {
        let c = match escape {
            Escape::None if b == b'"' => {
                self.end_value(out)?;
                self.kept.push(b'"');
                self.state = State::Outside;
                return Ok(());
            }
            Escape::None if b == b'\\' => {
                self.state = State::Spilling {
                    escape: Escape::Started,
                };
                return Ok(());
            }
            Escape::None => b,
            Escape::Started => {
                let next = match b {
                    b'u' => Escape::Unicode { value: 0, left: 4 },
                    _ => Escape::None,
                };
                self.state = State::Spilling { escape: next };
                match b {
                    b'/' => b'/',
                    // Line breaks some encoders put in long base64: not data.
                    b'n' | b'r' | b't' | b'u' => return Ok(()),
                    _ => return Err(SpillError::NotBase64),
                }
            }
            Escape::Unicode { value, left } => {
                let digit = (b as char).to_digit(16).ok_or(SpillError::NotBase64)?;
                let value = value * 16 + digit;
                if left > 1 {
                    self.state = State::Spilling {
                        escape: Escape::Unicode {
                            value,
                            left: left - 1,
                        },
                    };
                    return Ok(());
                }
                self.state = State::Spilling {
                    escape: Escape::None,
                };
                match u8::try_from(value) {
                    Ok(c) if c.is_ascii() => c,
                    _ => return Err(SpillError::NotBase64),
                }
            }
        };
        self.push_char(c, out)
    }

    fn push_char(&mut self, c: u8, out: &mut Vec<u8>) -> Result<(), SpillError> {
        let c = match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'=' => c,
            // The URL-safe alphabet, which proto3 JSON also accepts.
            b'-' => b'+',
            b'_' => b'/',
            b' ' | b'\n' | b'\r' | b'\t' => return Ok(()),
            _ => return Err(SpillError::NotBase64),
        };
        if self.values > 0 {
            // A later sample: passed over.
            return Ok(());
        }
        self.pending.push(c);
        if self.pending.len() >= DECODE_BATCH + 4 {
            let ready = (self.pending.len() - 4) / 4 * 4;
            ENGINE
                .decode_vec(&self.pending[..ready], out)
                .map_err(|_| SpillError::NotBase64)?;
            self.pending.drain(..ready);
        }
        Ok(())
    }

    fn end_value(&mut self, out: &mut Vec<u8>) -> Result<(), SpillError> {
        if self.values == 0 && !self.pending.is_empty() {
            ENGINE
                .decode_vec(&self.pending, out)
                .map_err(|_| SpillError::NotBase64)?;
            self.pending.clear();
        }
        self.values += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Reads `answer` in pieces of `size` bytes: (kept document, decoded file).
    fn read(answer: &[u8], size: usize) -> Result<(Value, Vec<u8>), SpillError> {
        let mut spill = Spill::new("bytesBase64Encoded", 4096);
        let mut out = Vec::new();
        for piece in answer.chunks(size) {
            spill.feed(piece, &mut out)?;
        }
        let kept = spill.finish();
        Ok((serde_json::from_slice(&kept).unwrap(), out))
    }

    fn video(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 13) as u8).collect()
    }

    #[test]
    fn a_video_in_the_answer_comes_out_decoded_at_any_piece_size() {
        let bytes = video(200_000);
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let answer = json!({"name": "projects/p/locations/l/publishers/google/models/m/operations/1",
            "done": true,
            "response": {"@type": "type.googleapis.com/cloud.ai.large_models.vision.GenerateVideoResponse",
              "raiMediaFilteredCount": 0,
              "videos": [{"bytesBase64Encoded": data, "mimeType": "video/mp4"}]}})
        .to_string();
        for size in [1, 3, 4, 5, 1000, 65_537, answer.len()] {
            let (kept, out) = read(answer.as_bytes(), size).unwrap();
            assert_eq!(out.len(), bytes.len(), "piece size {size}");
            assert!(out == bytes, "piece size {size}");
            assert_eq!(kept["response"]["videos"][0]["bytesBase64Encoded"], "");
            assert_eq!(kept["response"]["videos"][0]["mimeType"], "video/mp4");
            assert_eq!(kept["done"], true);
        }
    }

    #[test]
    fn escapes_padding_and_look_alikes_are_read_as_json_reads_them() {
        // Escaped slashes and line breaks inside the base64, padding written as \u003d, spaces
        // around the colon, and the name inside another string that is not a member.
        let answer = br#"{"note": "\"bytesBase64Encoded\": \"QUJD\"", "videos" : [ { "bytesBase64Encoded" :  "YW\/\n_-Fg\u003d", "mimeType": "video/mp4" } ]}"#;
        let (kept, out) = read(answer, 2).unwrap();
        assert_eq!(out, ENGINE.decode("YW//+Fg=").unwrap());
        assert_eq!(kept["note"], "\"bytesBase64Encoded\": \"QUJD\"");
        assert_eq!(kept["videos"][0]["bytesBase64Encoded"], "");
        // A value named so but not a string is kept as it is.
        let (kept, out) = read(
            br#"{"bytesBase64Encoded": null, "x": "bytesBase64Encoded"}"#,
            1,
        )
        .unwrap();
        assert!(out.is_empty());
        assert_eq!(kept["bytesBase64Encoded"], Value::Null);
    }

    #[test]
    fn only_the_first_file_is_decoded_and_bad_base64_or_a_huge_rest_is_refused() {
        let (kept, out) = read(
            br#"{"videos":[{"bytesBase64Encoded":"QUJD"},{"bytesBase64Encoded":"REVG"}]}"#,
            3,
        )
        .unwrap();
        assert_eq!(out, b"ABC");
        assert_eq!(kept["videos"][1]["bytesBase64Encoded"], "");
        assert_eq!(
            read(br#"{"bytesBase64Encoded":"QU*D"}"#, 7).unwrap_err(),
            SpillError::NotBase64
        );
        assert_eq!(
            read(br#"{"bytesBase64Encoded":"Q\xUJD"}"#, 7).unwrap_err(),
            SpillError::NotBase64
        );
        let big = format!("{{\"x\": \"{}\"}}", "a".repeat(5000));
        assert_eq!(
            read(big.as_bytes(), 100).unwrap_err(),
            SpillError::TooLarge(4096)
        );
    }
}
