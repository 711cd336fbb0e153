//! Upstream bodies made fit for a log: members whose names speak of a secret (keys, tokens,
//! authorization, passwords...) emptied, URL query strings cut off, bearer credentials and the
//! channel's own key blotted out, and the whole cut to a bounded length. An upstream that
//! echoes what it was sent (the key in a header, a signed URL) thus leaves no secret in the log.

use serde_json::Value;

/// The longest text of an upstream body that a log line carries, in bytes.
pub const LOG_BYTES: usize = 512;

/// How much of a body is looked at: a larger one is read as text up to here.
const SCAN_BYTES: usize = 64 * 1024;

/// What a secret is replaced with.
const REDACTED: &str = "[redacted]";

/// Words that make a name secret-bearing wherever they occur in it, compared in lower case:
/// `api_key`, `x-api-key`, `access_token`, `Authorization`, `client_secret`, `password`...
const SECRET_WORDS: [&str; 10] = [
    "key",
    "token",
    "auth",
    "secret",
    "password",
    "passwd",
    "credential",
    "signature",
    "cookie",
    "session",
];

/// `body` as a log may show it: read as JSON when it is (secret-bearing members emptied, every
/// string cleaned as text is), else as text; `known` (the channel's own key) blotted out
/// wherever it appears; on one line; at most [`LOG_BYTES`] bytes.
pub fn for_log(body: &[u8], known: Option<&str>) -> String {
    let head = &body[..body.len().min(SCAN_BYTES)];
    let text = match serde_json::from_slice::<Value>(head) {
        Ok(mut value) => {
            scrub_value(&mut value, known);
            value.to_string()
        }
        Err(_) => scrub_text(&String::from_utf8_lossy(head), known),
    };
    cut(&text.replace(['\n', '\r'], " "), LOG_BYTES)
}

/// Whether a member or parameter named `name` may carry a secret.
fn secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| lower.contains(w))
}

fn scrub_value(value: &mut Value, known: Option<&str>) {
    match value {
        Value::Object(members) => {
            for (name, member) in members.iter_mut() {
                if secret_name(name) && !member.is_null() {
                    *member = Value::String(REDACTED.to_owned());
                } else {
                    scrub_value(member, known);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_value(v, known)),
        Value::String(text) => *text = scrub_text(text, known),
        _ => {}
    }
}

/// Text with `known` blotted out, URL query strings cut, bearer and basic credentials and the
/// values of secret-named parameters (`api_key=...`, `token: ...`) redacted.
fn scrub_text(text: &str, known: Option<&str>) -> String {
    let mut out = match known.filter(|k| k.len() >= 4) {
        Some(key) => text.replace(key, REDACTED),
        None => text.to_owned(),
    };
    out = cut_queries(&out);
    out = redact_after_schemes(&out);
    redact_named_values(&out)
}

/// Whether `b` ends a URL or a value in running text.
fn ends_value(b: u8) -> bool {
    b.is_ascii_whitespace() || matches!(b, b'"' | b'\'' | b'<' | b'>' | b'`')
}

/// Every `scheme://...?query` with its query (and fragment) replaced.
fn cut_queries(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(found) = text[at..].find("://") {
        let start = at + found;
        let end = bytes[start..]
            .iter()
            .position(|&b| ends_value(b))
            .map_or(bytes.len(), |n| start + n);
        match text[start..end].find('?') {
            Some(q) => {
                out.push_str(&text[at..start + q + 1]);
                out.push_str(REDACTED);
            }
            None => out.push_str(&text[at..end]),
        }
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// The credential after `Bearer ` or `Basic ` (any case).
fn redact_after_schemes(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    loop {
        let next = ["bearer ", "basic "]
            .iter()
            .filter_map(|s| lower[at..].find(s).map(|i| (at + i, s.len())))
            .min();
        let Some((start, len)) = next else { break };
        let mut value = start + len;
        while value < bytes.len() && bytes[value] == b' ' {
            value += 1;
        }
        let end = value
            + bytes[value..]
                .iter()
                .position(|&b| ends_value(b) || matches!(b, b',' | b';'))
                .unwrap_or(bytes.len() - value);
        out.push_str(&text[at..value]);
        if end > value {
            out.push_str(REDACTED);
        }
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// The value after a secret-named parameter and `=` or `:` (`api_key=v`, `"token": "v"`,
/// `password: v`).
fn redact_named_values(text: &str) -> String {
    let bytes = text.as_bytes();
    let is_name = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-');
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        if !is_name(bytes[at]) {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && is_name(bytes[at]) {
            at += 1;
        }
        if !secret_name(&text[start..at]) {
            continue;
        }
        // A closing quote, spaces, then `=` or `:`, then spaces and an opening quote.
        let mut sep = at;
        while sep < bytes.len() && matches!(bytes[sep], b'"' | b'\'' | b' ') {
            sep += 1;
        }
        if sep >= bytes.len() || !matches!(bytes[sep], b'=' | b':') {
            continue;
        }
        let mut value = sep + 1;
        while value < bytes.len() && matches!(bytes[value], b'"' | b'\'' | b' ') {
            value += 1;
        }
        let end = value
            + bytes[value..]
                .iter()
                .position(|&b| ends_value(b) || matches!(b, b'&' | b',' | b';' | b'}' | b')'))
                .unwrap_or(bytes.len() - value);
        if end > value && &text[value..end] != REDACTED {
            out.push_str(&text[copied..value]);
            out.push_str(REDACTED);
            copied = end;
        }
        at = end.max(at);
    }
    out.push_str(&text[copied..]);
    out
}

/// `text` cut to at most `max` bytes at a character boundary, `...` marking a cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-live-9f8e7d6c5b4a";

    /// Each body, as the log shows it: no secret of it left, what helps a reader kept.
    #[test]
    fn secrets_in_upstream_bodies_never_reach_the_log() {
        let cases: &[(&str, &str)] = &[
            // The channel's own key echoed in a message, and in a member named for it.
            (
                r#"{"error":{"message":"Incorrect API key provided: sk-live-9f8e7d6c5b4a","type":"invalid_request_error"}}"#,
                r#"{"error":{"message":"Incorrect API key provided: [redacted]","type":"invalid_request_error"}}"#,
            ),
            (
                r#"{"api_key":"abc123","access_token":"t0k","Authorization":"Bearer xyz","password":"hunter2","client_secret":{"v":1},"code":"bad"}"#,
                r#"{"Authorization":"[redacted]","access_token":"[redacted]","api_key":"[redacted]","client_secret":"[redacted]","code":"bad","password":"[redacted]"}"#,
            ),
            // Nested, in arrays, and a signed URL's query.
            (
                r#"{"details":[{"url":"https://files.example/v.mp4?sig=s3cr3t&exp=1","session_id":"s"}]}"#,
                r#"{"details":[{"session_id":"[redacted]","url":"https://files.example/v.mp4?[redacted]"}]}"#,
            ),
            // Text: a header echoed, parameters, a URL.
            (
                "bad request: Authorization: Bearer abc.def.ghi; see https://x.example/cb?task=1&token=zz now",
                "bad request: Authorization: [redacted] [redacted]; see https://x.example/cb?[redacted] now",
            ),
            (
                "upstream said api_key=abcd1234&model=m, secret: 'p4ss' and x-api-key sk-live-9f8e7d6c5b4a",
                "upstream said api_key=[redacted]&model=m, secret: '[redacted]' and x-api-key [redacted]",
            ),
            // Nothing secret: as it came, on one line.
            (
                "{\"error\": {\"code\": \"InternalError\", \"message\": \"try later\"}}",
                r#"{"error":{"code":"InternalError","message":"try later"}}"#,
            ),
            ("gateway\r\ntimeout", "gateway  timeout"),
        ];
        for (body, logged) in cases {
            let got = for_log(body.as_bytes(), Some(KEY));
            // JSON compared as values: the order of members is the map's.
            match (
                serde_json::from_str::<Value>(&got),
                serde_json::from_str::<Value>(logged),
            ) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{body}"),
                _ => assert_eq!(&got, logged, "{body}"),
            }
            for secret in [
                KEY, "abc123", "t0k", "xyz", "hunter2", "s3cr3t", "p4ss", "zz ",
            ] {
                assert!(!got.contains(secret), "{secret} in {got}");
            }
        }
    }

    #[test]
    fn a_long_body_is_cut_to_the_bound() {
        let body = format!("{{\"message\":\"{}\"}}", "é".repeat(4000));
        let got = for_log(body.as_bytes(), None);
        assert!(got.len() <= LOG_BYTES, "{}", got.len());
        assert!(got.ends_with("..."));
        // Larger than what is looked at: read as text, cut all the same, the key still out.
        let body = format!("{KEY} {}", "x".repeat(SCAN_BYTES * 2));
        let got = for_log(body.as_bytes(), Some(KEY));
        assert!(
            got.starts_with("[redacted] xxx") && got.len() <= LOG_BYTES,
            "{got}"
        );
        // Bytes that are not UTF-8 are shown, not refused.
        assert_eq!(for_log(b"\xff\xfe oops", None), "\u{fffd}\u{fffd} oops");
    }
}
