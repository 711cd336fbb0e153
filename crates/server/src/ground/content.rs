//! Serving stored blobs: streamed from the blob store (a local file, or a ranged GET of an
//! object), with single-range `Range` requests (206); or a `302` to a presigned URL. A file
//! served here shares the relay's origin with the console, so it carries `nosniff`, a
//! sandboxing Content-Security-Policy and `Content-Disposition: attachment` (with a file name)
//! unless the client asked to play it in place (`?disposition=inline`).

use std::sync::Arc;
use std::time::Duration;

use error_codes::{ApiError, ErrorCode};
use futures_util::TryStreamExt;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use store::BlobStore;

use crate::ground::http::{Answer, Body, empty, error, query_param};

/// The Content-Security-Policy of a served file: no script, no plugin, no fetch, an origin of
/// its own (`sandbox`); only the file itself shown, as an image or a video.
pub const FILE_CSP: &str =
    "sandbox; default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'";

/// How a served file is to be shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Saved, under this file name (the default).
    Attachment(String),
    /// Played or shown in place (`?disposition=inline`).
    Inline,
}

/// Whether the query asks to show the file in place: its `disposition` is `inline`, not
/// `attachment` (the default). Anything else is `400 invalid request`, param `disposition`.
pub fn wants_inline(query: Option<&str>) -> Result<bool, ApiError> {
    match query_param(query, "disposition").as_deref() {
        None | Some("attachment") => Ok(false),
        Some("inline") => Ok(true),
        Some(other) => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "disposition",
            format!(
                "disposition must be attachment or inline, got {:?}",
                other.chars().take(32).collect::<String>()
            ),
        )),
    }
}

impl Disposition {
    /// Blob `id` shown in place (`inline`) or saved under a name made from its id.
    pub fn of(id: &str, inline: bool) -> Disposition {
        if inline {
            Disposition::Inline
        } else {
            Disposition::Attachment(file_name(id))
        }
    }

    /// The `Content-Disposition` header's value.
    pub fn header(&self) -> HeaderValue {
        match self {
            Disposition::Inline => HeaderValue::from_static("inline"),
            Disposition::Attachment(name) => {
                HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
                    .unwrap_or_else(|_| HeaderValue::from_static("attachment"))
            }
        }
    }
}

/// A file name for blob `id`: its path with `/` as `_`, every byte but ASCII letters, digits,
/// `.`, `-` and `_` as `_` (so it needs no quoting or encoding in a header).
pub fn file_name(id: &str) -> String {
    id.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' => c,
            _ => '_',
        })
        .collect()
}

/// The headers every served file carries.
fn guard_headers(headers: &mut HeaderMap, disposition: &Disposition) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(FILE_CSP),
    );
    headers.insert(header::CONTENT_DISPOSITION, disposition.header());
}

/// A byte range to serve, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

/// What a `Range` header asks of a body of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeAsk {
    Whole,
    Part(ByteRange),
    Unsatisfiable,
}

/// Parses a single `bytes=` range; multiple ranges and other units are served whole.
pub fn parse_range(value: Option<&str>, len: u64) -> RangeAsk {
    let Some(spec) = value.and_then(|v| v.trim().strip_prefix("bytes=")) else {
        return RangeAsk::Whole;
    };
    if spec.contains(',') {
        return RangeAsk::Whole;
    }
    let Some((start, end)) = spec.trim().split_once('-') else {
        return RangeAsk::Whole;
    };
    let (start, end) = (start.trim(), end.trim());
    let range = if start.is_empty() {
        // Suffix: the last N bytes.
        match end.parse::<u64>() {
            Ok(0) | Err(_) => return RangeAsk::Unsatisfiable,
            Ok(n) if len == 0 => {
                return if n > 0 {
                    RangeAsk::Unsatisfiable
                } else {
                    RangeAsk::Whole
                };
            }
            Ok(n) => ByteRange {
                start: len.saturating_sub(n),
                end: len - 1,
            },
        }
    } else {
        let Ok(start) = start.parse::<u64>() else {
            return RangeAsk::Whole;
        };
        let end = if end.is_empty() {
            len.saturating_sub(1)
        } else {
            match end.parse::<u64>() {
                Ok(e) => e.min(len.saturating_sub(1)),
                Err(_) => return RangeAsk::Whole,
            }
        };
        if start >= len || end < start {
            return RangeAsk::Unsatisfiable;
        }
        ByteRange { start, end }
    };
    RangeAsk::Part(range)
}

/// Streams blob `id` as `content_type`, shown as `disposition` says, honouring `Range`; with
/// `presign` (and a backend that has them), a `302` to a presigned URL valid that long instead
/// (served by the object store's own origin, with the same type and disposition).
pub async fn serve_blob(
    blobs: &Arc<dyn BlobStore>,
    id: &str,
    content_type: &'static str,
    disposition: &Disposition,
    request_headers: &HeaderMap,
    presign: Option<Duration>,
) -> Answer {
    let unavailable = |what: &str, e: &dyn std::fmt::Display| {
        tracing::error!("{what} blob {id}: {e}");
        error(&ApiError::new(
            ErrorCode::Unavailable,
            "the file cannot be read now",
        ))
    };
    if let Some(ttl) = presign {
        let shown = disposition.header();
        let shown = shown.to_str().unwrap_or("attachment");
        match blobs.presigned_get(id, ttl, content_type, shown).await {
            Ok(Some(url)) => return redirect(&url),
            Ok(None) => {}
            Err(e) => return unavailable("presigning", &e),
        }
    }
    let blob = match blobs.open(id).await {
        Ok(blob) => blob,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return error(&ApiError::new(
                ErrorCode::NotFound,
                "the file is no longer stored",
            ));
        }
        Err(e) => return unavailable("opening", &e),
    };
    let len = blob.len();
    let range_header = request_headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok());
    let ask = parse_range(range_header, len);
    let mut res = Response::new(empty());
    let headers = res.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    guard_headers(headers, disposition);
    let (start, count) = match ask {
        RangeAsk::Whole => (0, len),
        RangeAsk::Part(r) => {
            *res.status_mut() = StatusCode::PARTIAL_CONTENT;
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {}-{}/{len}", r.start, r.end)) {
                res.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            (r.start, r.end - r.start + 1)
        }
        RangeAsk::Unsatisfiable => {
            let mut res = error(&ApiError::new(
                ErrorCode::RangeNotSatisfiable,
                format!("the requested range is outside the file's {len} bytes"),
            ));
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{len}")) {
                res.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return res;
        }
    };
    res.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(count));
    let stream = match blob.read(start, count).await {
        Ok(stream) => stream,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return error(&ApiError::new(
                ErrorCode::NotFound,
                "the file is no longer stored",
            ));
        }
        Err(e) => return unavailable("reading", &e),
    };
    let body: Body = StreamBody::new(stream.map_ok(Frame::data)).boxed_unsync();
    *res.body_mut() = body;
    res
}

/// `302` to `url`, with the URL in the body too (as the `redirect` content mode answers).
pub fn redirect(url: &str) -> Answer {
    let mut res = crate::ground::http::json(StatusCode::FOUND, &serde_json::json!({"url": url}));
    if let Ok(location) = HeaderValue::from_str(url) {
        res.headers_mut().insert(header::LOCATION, location);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let r = |s, e| RangeAsk::Part(ByteRange { start: s, end: e });
        assert_eq!(parse_range(None, 100), RangeAsk::Whole);
        assert_eq!(parse_range(Some("bytes=0-9"), 100), r(0, 9));
        assert_eq!(parse_range(Some("bytes=90-"), 100), r(90, 99));
        assert_eq!(parse_range(Some("bytes=-10"), 100), r(90, 99));
        assert_eq!(parse_range(Some("bytes=50-500"), 100), r(50, 99));
        assert_eq!(
            parse_range(Some("bytes=100-"), 100),
            RangeAsk::Unsatisfiable
        );
        assert_eq!(parse_range(Some("bytes=9-3"), 100), RangeAsk::Unsatisfiable);
        assert_eq!(parse_range(Some("bytes=0-1,5-6"), 100), RangeAsk::Whole);
        assert_eq!(parse_range(Some("items=0-1"), 100), RangeAsk::Whole);
        assert_eq!(parse_range(Some("bytes=-0"), 100), RangeAsk::Unsatisfiable);
    }

    #[test]
    fn dispositions() {
        let blob = "video_01/video.mp4";
        let attachment = Disposition::Attachment("video_01_video.mp4".to_owned());
        for (query, expected) in [
            (None, Ok(attachment.clone())),
            (Some("variant=video"), Ok(attachment.clone())),
            (Some("disposition=attachment"), Ok(attachment.clone())),
            (
                Some("expires=1&disposition=inline&sig=x"),
                Ok(Disposition::Inline),
            ),
            (Some("disposition=INLINE"), Err(())),
            (Some("disposition="), Err(())),
        ] {
            let got = wants_inline(query)
                .map(|inline| Disposition::of(blob, inline))
                .map_err(|e| {
                    assert_eq!(e.code, ErrorCode::InvalidRequest);
                    assert_eq!(e.param.as_deref(), Some("disposition"));
                });
            assert_eq!(got, expected, "{query:?}");
        }
        assert_eq!(
            attachment.header(),
            "attachment; filename=\"video_01_video.mp4\""
        );
        assert_eq!(Disposition::Inline.header(), "inline");
        assert_eq!(file_name("a/b c\"d;e\\f.png"), "a_b_c_d_e_f.png");
    }
}
