//! Bodies, answers and body reading: the small HTTP toolkit every handler uses.

use std::convert::Infallible;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use channels::SimDirectives;
use error_codes::{ApiError, ErrorCode};
use http::header::{self, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use serde::Serialize;

/// Every answer's body type: full bytes or a stream from disk.
pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;
pub type Answer = Response<Body>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

/// The headers an answer has room for from the start (a JSON answer's or a stream's).
pub(crate) const ANSWER_HEADERS: usize = 8;

/// A `200` answer of JSON text written already.
pub fn json_text(body: impl Into<Bytes>) -> Answer {
    let mut res = Response::new(full(body));
    // Room for what answers add (ids, rate limits, retry hints) without growing the map.
    res.headers_mut().reserve(ANSWER_HEADERS);
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// A JSON answer.
pub fn json<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> Answer {
    match serde_json::to_vec(value) {
        Ok(bytes) => {
            let mut res = json_text(bytes);
            *res.status_mut() = status;
            res
        }
        Err(e) => {
            tracing::error!("serialising an answer: {e}");
            error(&ApiError::new(ErrorCode::UpstreamError, "internal error"))
        }
    }
}

pub fn ok<T: Serialize + ?Sized>(value: &T) -> Answer {
    json(StatusCode::OK, value)
}

/// An error in the shape of video, asset, admin and moderation paths (CONTRACT §0.1), with the
/// retry headers official SDKs read (CONTRACT §0.1a).
pub fn error(err: &ApiError) -> Answer {
    let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = json(status, &err.openai_body());
    *res.status_mut() = status;
    retry_headers(err.code, res.headers_mut());
    res
}

/// `retry-after`/`retry-after-ms` on 429 and retryable 5xx; `x-should-retry: false` on a 5xx
/// that a retry cannot fix.
pub fn retry_headers(code: ErrorCode, headers: &mut http::HeaderMap) {
    let status = code.status();
    if status == 429 || (status >= 500 && code.retryable()) {
        headers.insert("retry-after", HeaderValue::from_static("1"));
        headers.insert("retry-after-ms", HeaderValue::from_static("1000"));
    } else if status >= 500 {
        headers.insert("x-should-retry", HeaderValue::from_static("false"));
    }
}

/// The media type of a request, lowercased, without parameters.
pub fn media_type(headers: &http::HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next()?.trim().to_ascii_lowercase();
    (!essence.is_empty()).then_some(essence)
}

/// How `read_body` ended when it did not return the body.
pub fn too_large() -> ApiError {
    ApiError::new(
        ErrorCode::PayloadTooLarge,
        "the request body is larger than this path accepts",
    )
}

/// How much of a request body a path reads, and how long it waits for each piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The body limit of CONTRACT §4.3; bodies over 4x it are refused before they are read.
    pub bytes: u64,
    /// The longest silence between two pieces of the body: past it, `408 request timeout`.
    pub idle: Duration,
}

impl Limit {
    /// The hard cap: 4x the limit (CONTRACT §4.3).
    pub fn hard(self) -> u64 {
        self.bytes.saturating_mul(4)
    }
}

/// A body that stalled for longer than its [`Limit::idle`].
pub fn body_stalled(idle: Duration) -> ApiError {
    ApiError::field(
        ErrorCode::RequestTimeout,
        "body",
        format!(
            "no part of the request body arrived for {} s",
            idle.as_secs_f64()
        ),
    )
}

/// The next frame of `body`, waiting at most `idle` for it.
pub async fn next_frame<B: hyper::body::Body + Unpin>(
    body: &mut B,
    idle: Duration,
) -> Result<Option<Result<hyper::body::Frame<B::Data>, B::Error>>, ApiError> {
    // A frame that is there already (a small body comes with its head) needs no timer.
    let mut frame = body.frame();
    if let Some(ready) = futures_util::FutureExt::now_or_never(&mut frame) {
        return Ok(ready);
    }
    tokio::time::timeout(idle, frame)
        .await
        .map_err(|_| body_stalled(idle))
}

/// A request body as the readers here take it: hyper's own, or one wrapped (hashed, for
/// [`crate::formats::idempotency`]).
pub trait ReqBody: hyper::body::Body<Data = Bytes, Error = hyper::Error> + Unpin {}
impl<B: hyper::body::Body<Data = Bytes, Error = hyper::Error> + Unpin> ReqBody for B {}

/// Reads a whole body of at most `limit.bytes`. A declared or streamed length over 4x the
/// limit is refused without reading the rest; a body between the limit and 4x is read to the
/// end (and dropped as it comes) and then refused (CONTRACT §4.3).
pub async fn read_body(body: impl ReqBody, limit: Limit) -> Result<Bytes, ApiError> {
    let (bytes, total) = read_capped(body, limit.bytes, limit).await?;
    if total > limit.bytes {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Reads a whole body for a path that checks its size last (the second format, SPEC §7): a
/// declared or streamed length over 4x `limit` is refused at once; otherwise the body is read
/// and returned with whether it is over `limit`, for the caller to refuse after its other checks.
pub async fn read_body_lenient(
    body: impl ReqBody,
    limit: Limit,
) -> Result<(Bytes, bool), ApiError> {
    let (bytes, total) = read_capped(body, limit.hard(), limit).await?;
    Ok((bytes, total > limit.bytes))
}

/// Reads `body` to its end, keeping its first `keep` bytes, and answers them with the whole
/// length; a declared length over the hard cap is refused before any byte is read, a streamed
/// one as soon as it passes the cap.
async fn read_capped(
    body: impl ReqBody,
    keep: u64,
    limit: Limit,
) -> Result<(Bytes, u64), ApiError> {
    let hard = limit.hard();
    if body.size_hint().lower() > hard {
        return Err(too_large());
    }
    let mut body = body;
    // A body that came in one piece (most do) is kept as it came, not copied.
    let mut first: Option<Bytes> = None;
    let mut buf = BytesMut::new();
    let mut total: u64 = 0;
    while let Some(frame) = next_frame(&mut body, limit.idle).await? {
        let frame = frame.map_err(|e| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                "body",
                format!("the request body could not be read: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            total += data.len() as u64;
            if total > hard {
                return Err(too_large());
            }
            if total <= keep {
                if total == data.len() as u64 {
                    first = Some(data);
                } else {
                    if let Some(first) = first.take() {
                        buf.extend_from_slice(&first);
                    }
                    buf.extend_from_slice(&data);
                }
            }
        }
    }
    match first {
        Some(first) => Ok((first, total)),
        None => Ok((buf.freeze(), total)),
    }
}

/// Parses a JSON body; a body that is not JSON is `400 invalid request`.
pub fn parse_json(bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            "body",
            format!("the request body is not valid JSON: {e}"),
        )
    })
}

/// The value of one query parameter, percent-decoded.
pub fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| percent_decode(v))
    })
}

pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `x-relay-sim` header, when the simulator honours it (`simulator.scenarios`).
pub fn sim_directives(honoured: bool, headers: &HeaderMap) -> Result<SimDirectives, ApiError> {
    let Some(value) = headers.get("x-relay-sim") else {
        return Ok(SimDirectives::default());
    };
    if !honoured {
        return Ok(SimDirectives::default());
    }
    let value = value.to_str().unwrap_or_default();
    SimDirectives::parse(value)
        .map_err(|e| ApiError::field(ErrorCode::InvalidRequest, "x-relay-sim", e))
}

/// Longest id accepted in a path; longer ones are simply not found.
pub const MAX_ID_LEN: usize = 64;

/// `503 unavailable` for a store that failed a step (logged).
pub fn store_unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::error!("store: {e}");
    ApiError::new(
        ErrorCode::Unavailable,
        "the task store is not available now",
    )
}

/// A new id `prefix_<ULID>`. The ULIDs of this process increase strictly (also within one
/// millisecond), so listings by id are in creation order.
pub fn new_id(prefix: &str) -> String {
    static IDS: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());
    let id = IDS
        .lock()
        .ok()
        .and_then(|mut ids| ids.generate().ok())
        // The random part overflowed within one millisecond (practically never): a plain ULID.
        .unwrap_or_else(|| ulid::Ulid::from_datetime(std::time::SystemTime::now()));
    format!("{prefix}_{id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%20b+c"), "a b c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(
            query_param(Some("limit=5&after=video_1"), "after").as_deref(),
            Some("video_1")
        );
        assert_eq!(query_param(Some("limit=5"), "after"), None);
    }

    /// A body of `frames`, as a client that sends it in pieces would.
    fn body_of(frames: &[&'static str]) -> impl ReqBody {
        let frames = frames
            .iter()
            .map(|f| Ok(hyper::body::Frame::data(Bytes::from_static(f.as_bytes()))));
        http_body_util::StreamBody::new(futures_util::stream::iter(frames.collect::<Vec<_>>()))
    }

    #[tokio::test]
    async fn bodies_are_read_whole_in_one_piece_or_many() {
        let limit = Limit {
            bytes: 8,
            idle: Duration::from_secs(5),
        };
        for (frames, whole) in [
            (&["{\"a\":1}"][..], "{\"a\":1}"),
            (&["", "ab"][..], "ab"),
            (&["ab", "", "cd", "e"][..], "abcde"),
            (&[][..], ""),
        ] {
            let read = read_body(body_of(frames), limit)
                .await
                .expect("within the limit");
            assert_eq!(read, whole.as_bytes(), "{frames:?}");
        }
        let over = read_body(body_of(&["abcd", "efgh", "i"]), limit).await;
        assert_eq!(over.expect_err("over the limit").status(), 413);
        // The second format's read: whole up to 4x the limit, with whether it is over it.
        for frames in [&["abcd", "efgh", "i"][..], &["abcdefghi"][..]] {
            let (kept, over) = read_body_lenient(body_of(frames), limit)
                .await
                .expect("under 4x");
            assert_eq!((&kept[..], over), (&b"abcdefghi"[..], true), "{frames:?}");
        }
        let refused = read_body_lenient(
            body_of(&["0123456789", "0123456789", "0123456789", "abc"]),
            limit,
        )
        .await;
        assert_eq!(refused.expect_err("over 4x").status(), 413);
    }
}
