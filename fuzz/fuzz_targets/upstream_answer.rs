//! The HTTP/1.1 reader of upstream answers (`channels`' h1 reader, over bytes in memory) against
//! a reference built on `httparse` alone, on the same bytes, as the answer to a `GET` and to a
//! `HEAD`: the same result whatever pieces the connection gives the bytes in; and where both
//! take the answer, the same end of its head (past informational answers), status, framing and,
//! for a length or chunks, the same body and end of the message. The reader never keeps a
//! connection the reference says must close.
//!
//! The reference reads heads with `httparse::ParserConfig::parse_response` (the reader's
//! options: spaces after a field name, folded lines), frames the body as RFC 9112 §6.3 says
//! (list elements of `Transfer-Encoding` trimmed, empty ones skipped), reads chunk-size lines
//! with `httparse::parse_chunk_size` and the trailer section with `httparse::parse_headers`.
//! The reader may refuse where the reference takes the answer: that is its being stricter on
//! purpose (RFC 9112 choices documented in its code: no bare LF, CR or other control byte in a
//! chunk-size line, a chunk size of digits, lengths that agree, at most 100 fields); it may not
//! take an answer the reference refuses, nor take one and frame it otherwise. One leniency of
//! the reader is mirrored by the reference: any number of leading zeros in a chunk size
//! (`httparse` counts them among its 16 digits).
#![no_main]

use channels::fuzzing::{Answer, AnswerFraming, read_answer};
use libfuzzer_sys::fuzz_target;
use relay_fuzz::chunkings;

/// Fields the reference takes in one head (more than the reader, which refuses past 100).
const REFERENCE_FIELDS: usize = 256;

/// How the reference reads the answer's head.
enum RefHead {
    Answer(Reference),
    /// More bytes would be needed.
    Partial,
    Invalid,
}

/// What the reference makes of an answer whose head it took.
struct Reference {
    status: u16,
    head_end: usize,
    /// `None`: the framing headers are invalid (lengths that disagree or are no number).
    framing: Option<AnswerFraming>,
    /// Whether the connection may carry another request after this answer.
    may_keep: bool,
    body: RefBody,
}

enum RefBody {
    /// The message ends at `end`, its body being `bytes`.
    Ended { end: usize, bytes: Vec<u8> },
    /// The input ends before the body does.
    Incomplete,
    /// The chunks or trailers are invalid.
    Invalid,
    /// Read until the connection closes: the rest of the input.
    UntilClose,
    /// The framing headers are invalid.
    Unframed,
}

fn config() -> httparse::ParserConfig {
    let mut config = httparse::ParserConfig::default();
    config
        .allow_spaces_after_header_name_in_responses(true)
        .allow_obsolete_multiline_headers_in_responses(true);
    config
}

/// A field value as one line: each line break of a folded value (and the spaces after it)
/// stands for one space.
fn unfold(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    let mut folding = false;
    for &b in value {
        match b {
            b'\r' | b'\n' => folding = true,
            b' ' | b'\t' if folding => {}
            _ => {
                if folding {
                    out.push(b' ');
                    folding = false;
                }
                out.push(b);
            }
        }
    }
    out
}

/// The elements of a comma-separated list, trimmed of spaces and tabs, empty ones left out
/// (RFC 9110 §5.6.1).
fn elements(value: &[u8]) -> Vec<Vec<u8>> {
    unfold(value)
        .split(|b| *b == b',')
        .map(|e| {
            let start = e.iter().position(|b| !matches!(b, b' ' | b'\t'));
            let end = e.iter().rposition(|b| !matches!(b, b' ' | b'\t'));
            match (start, end) {
                (Some(s), Some(t)) => e[s..=t].to_vec(),
                _ => Vec::new(),
            }
        })
        .filter(|e| !e.is_empty())
        .collect()
}

fn reference(data: &[u8], head_request: bool) -> RefHead {
    let mut at = 0;
    loop {
        let mut fields = [httparse::EMPTY_HEADER; REFERENCE_FIELDS];
        let mut res = httparse::Response::new(&mut fields);
        let n = match config().parse_response(&mut res, &data[at..]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return RefHead::Partial,
            Err(_) => return RefHead::Invalid,
        };
        let (Some(status), Some(version)) = (res.code, res.version) else {
            return RefHead::Invalid;
        };
        if (100..200).contains(&status) && status != 101 {
            at += n;
            continue;
        }
        let head_end = at + n;
        let mut coded = false;
        let mut codings: Vec<Vec<u8>> = Vec::new();
        let mut lengths: Vec<Vec<u8>> = Vec::new();
        let mut length_fields = 0;
        let mut close = false;
        let mut keep_alive = false;
        for h in res.headers.iter() {
            let name = h.name.as_bytes();
            if name.eq_ignore_ascii_case(b"transfer-encoding") {
                coded = true;
                codings.extend(elements(h.value));
            } else if name.eq_ignore_ascii_case(b"content-length") {
                length_fields += 1;
                // A list of lengths keeps its empty items: each must be a number.
                lengths.extend(unfold(h.value).split(|b| *b == b',').map(<[u8]>::to_vec));
            } else if name.eq_ignore_ascii_case(b"connection") {
                for token in elements(h.value) {
                    close |= token.eq_ignore_ascii_case(b"close");
                    keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
                }
            }
        }
        let length = if length_fields == 0 {
            Ok(None)
        } else {
            let numbers: Option<Vec<u64>> = lengths
                .iter()
                .map(|item| {
                    let digits = item.trim_ascii();
                    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                        return None;
                    }
                    std::str::from_utf8(digits).ok()?.parse::<u64>().ok()
                })
                .collect();
            match numbers {
                Some(n) if n.windows(2).all(|w| w[0] == w[1]) => Ok(n.first().copied()),
                _ => Err(()),
            }
        };
        let framing = if head_request || status == 204 || status == 304 {
            Some(AnswerFraming::Empty)
        } else if coded {
            let chunked = codings
                .last()
                .is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"));
            Some(if chunked {
                AnswerFraming::Chunked
            } else {
                AnswerFraming::Close
            })
        } else {
            match length {
                Ok(Some(0)) => Some(AnswerFraming::Empty),
                Ok(Some(n)) => Some(AnswerFraming::Length(n)),
                Ok(None) => Some(AnswerFraming::Close),
                Err(()) => None,
            }
        };
        let bodiless = framing == Some(AnswerFraming::Empty);
        let may_keep = !close
            && (version == 1 || keep_alive)
            && matches!(
                framing,
                Some(AnswerFraming::Empty | AnswerFraming::Length(_) | AnswerFraming::Chunked)
            )
            && (bodiless || !(coded && (length_fields > 0 || version == 0)));
        let body = match framing {
            None => RefBody::Unframed,
            Some(AnswerFraming::Empty) => RefBody::Ended {
                end: head_end,
                bytes: Vec::new(),
            },
            Some(AnswerFraming::Length(n)) => match usize::try_from(n) {
                Ok(n) if data.len() - head_end >= n => RefBody::Ended {
                    end: head_end + n,
                    bytes: data[head_end..head_end + n].to_vec(),
                },
                _ => RefBody::Incomplete,
            },
            Some(AnswerFraming::Chunked) => chunks(data, head_end),
            Some(AnswerFraming::Close) => RefBody::UntilClose,
        };
        return RefHead::Answer(Reference {
            status,
            head_end,
            framing,
            may_keep,
            body,
        });
    }
}

/// A chunked body from `at`, read with `httparse::parse_chunk_size` and `parse_headers`.
fn chunks(data: &[u8], mut at: usize) -> RefBody {
    let mut bytes = Vec::new();
    loop {
        // Leading zeros past the first digit dropped: the reader takes any number of them.
        let rest = &data[at..];
        let zeros = rest.iter().take_while(|b| **b == b'0').count();
        let more_digits = rest.get(zeros).is_some_and(u8::is_ascii_hexdigit);
        let skip = if more_digits {
            zeros
        } else {
            zeros.saturating_sub(1)
        };
        let size = match httparse::parse_chunk_size(&rest[skip..]) {
            Ok(httparse::Status::Complete((n, size))) => {
                at += skip + n;
                size
            }
            Ok(httparse::Status::Partial) => return RefBody::Incomplete,
            Err(_) => return RefBody::Invalid,
        };
        if size == 0 {
            break;
        }
        let Some(end) = usize::try_from(size).ok().and_then(|s| at.checked_add(s)) else {
            return RefBody::Incomplete;
        };
        if data.len() < end {
            return RefBody::Incomplete;
        }
        bytes.extend_from_slice(&data[at..end]);
        at = end;
        match data.get(at..at + 2) {
            Some(b"\r\n") => at += 2,
            Some(_) => return RefBody::Invalid,
            None if b"\r".starts_with(&data[at..]) => return RefBody::Incomplete,
            None => return RefBody::Invalid,
        }
    }
    let mut trailers = [httparse::EMPTY_HEADER; REFERENCE_FIELDS];
    match httparse::parse_headers(&data[at..], &mut trailers) {
        Ok(httparse::Status::Complete((n, _))) => RefBody::Ended { end: at + n, bytes },
        Ok(httparse::Status::Partial) => RefBody::Incomplete,
        Err(_) => RefBody::Invalid,
    }
}

/// What the reader says when the connection ended before a head.
const CLOSED: &str = "the connection closed before the answer's head";

fn check(data: &[u8], head_request: bool) {
    // The same result whatever the pieces the bytes come in.
    let mut runs = chunkings(data, 256).into_iter().map(|cuts| {
        let sizes: Vec<usize> = cuts.iter().map(|c| c.len()).collect();
        read_answer(data, head_request, &sizes)
    });
    let ours = runs.next().expect("a whole chunking");
    for (n, other) in runs.enumerate() {
        assert_eq!(
            other,
            ours,
            "chunking {} differs from reading it whole",
            n + 1
        );
    }
    let theirs = reference(data, head_request);
    let answer: Answer = match (ours, theirs) {
        // The input ends before a head: both see that.
        (Err(e), RefHead::Partial) if e == CLOSED => return,
        (Err(e), RefHead::Answer(r)) if e == CLOSED => {
            panic!(
                "the reader saw no head; the reference's ends at {}",
                r.head_end
            )
        }
        // Stricter on purpose.
        (Err(_), _) => return,
        (Ok(a), RefHead::Partial) => {
            panic!(
                "the reader took a head ending at {}; the reference needs more",
                a.head_end
            )
        }
        (Ok(a), RefHead::Invalid) => {
            panic!(
                "the reader took a head ending at {} that the reference refuses",
                a.head_end
            )
        }
        (Ok(a), RefHead::Answer(r)) => {
            assert_eq!(a.head_end, r.head_end, "where the head ends");
            assert_eq!(a.status, r.status, "the status");
            let Some(framing) = r.framing else {
                panic!(
                    "the reader framed the body as {:?}; the reference refuses its framing",
                    a.framing
                );
            };
            assert_eq!(a.framing, framing, "the framing");
            assert!(
                !a.keep_alive || r.may_keep,
                "the connection kept where it must close"
            );
            match (&a.end, r.body) {
                (_, RefBody::Unframed) => unreachable!("refused above"),
                (Ok(end), RefBody::Ended { end: theirs, bytes }) => {
                    assert_eq!(*end, theirs, "where the message ends");
                    assert_eq!(a.body, bytes, "the body");
                }
                (Ok(end), RefBody::UntilClose) => {
                    assert_eq!(*end, data.len(), "a body until the close ends at the end");
                    assert_eq!(a.body, data[a.head_end..], "a body until the close");
                }
                (Ok(end), RefBody::Incomplete) => {
                    panic!("the reader ended the message at {end}; the reference needs more")
                }
                (Ok(end), RefBody::Invalid) => {
                    panic!("the reader ended the message at {end}; the reference refuses the body")
                }
                // A length is read exactly as the reference reads it.
                (Err(e), RefBody::Ended { end, .. }) if framing != AnswerFraming::Chunked => {
                    panic!("the reader failed a body ({e}) the reference ends at {end}")
                }
                // Stricter chunks on purpose, or both see a body cut short or invalid.
                (Err(_), _) => {}
            }
            a
        }
    };
    // What the reader handed out of a body it failed is a prefix of the input's body bytes
    // (for a length or until the close: the bytes after the head).
    if answer.end.is_err() && answer.framing != AnswerFraming::Chunked {
        assert!(data[answer.head_end..].starts_with(&answer.body));
    }
}

fuzz_target!(|data: &[u8]| {
    check(data, false);
    check(data, true);
});
