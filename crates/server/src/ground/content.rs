//! Serving stored blobs: streamed from the blob store (a local file, or a ranged GET of an
//! object), with single-range `Range` requests (206); or a `302` to a presigned URL.

use std::sync::Arc;
use std::time::Duration;

use error_codes::{ApiError, ErrorCode};
use futures_util::TryStreamExt;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use store::BlobStore;

use crate::ground::http::{Answer, Body, empty, error};

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

/// Streams blob `id` as `content_type`, honouring `Range`; with `presign` (and a backend that
/// has them), a `302` to a presigned URL valid that long instead.
pub async fn serve_blob(
    blobs: &Arc<dyn BlobStore>,
    id: &str,
    content_type: &'static str,
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
        match blobs.presigned_get(id, ttl, content_type).await {
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
}
