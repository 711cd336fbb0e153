//! The native messages endpoints (CONTRACT §3): `POST /v1/messages`,
//! `POST /v1/messages/count_tokens`, `GET /v1/models` and `GET /v1/models/{id}`.
//!
//! Keys come as `x-api-key` or `Authorization: Bearer`; every error is in the vendor's shape
//! with the request id. A message is billed once, when it ends ([`crate::formats::chat_billing`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use channels::{
    ChatAnswer, ChatCall, ChatChannel, ChatEventStream, Deadline, FailureKind, SimDirectives,
    UpstreamFailure,
};
use engine::now_secs;
use error_codes::{ApiError, ErrorCode};
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use messages::{Checked, CountTokensResponse, Endpoint, ModelInfo, ModelList, StreamEvent, Usage};
use store::Key;

use crate::app::App;
use crate::config::ModelKind;
use crate::formats::chat_billing::{Bill, cost};
use crate::ground::auth::{authenticate, may_use_model};
use crate::ground::http::{Answer, json, read_body, retry_headers};
use crate::ground::limits::Class;

/// The request id, put into the request's extensions by the router: the header value the
/// answer carries, so it is made once (cloning it shares the bytes).
#[derive(Debug, Clone)]
pub struct RequestId(pub HeaderValue);

impl RequestId {
    /// A new id, `req_` and a ULID.
    pub fn new() -> RequestId {
        let mut id = [0u8; ulid::ULID_LEN];
        thread_ulid().array_to_str(&mut id);
        let mut text = [0u8; 4 + ulid::ULID_LEN];
        text[..4].copy_from_slice(b"req_");
        text[4..].copy_from_slice(&id);
        // Always a valid value: `req_` and base32 letters.
        RequestId(
            HeaderValue::from_bytes(&text)
                .unwrap_or_else(|_| HeaderValue::from_static("req_unknown")),
        )
    }

    pub fn as_str(&self) -> &str {
        self.0.to_str().unwrap_or_default()
    }
}

impl Default for RequestId {
    fn default() -> RequestId {
        RequestId::new()
    }
}

/// The request's id (a new one when the router gave it none).
pub fn request_id(parts: &Parts) -> String {
    match parts.extensions.get::<RequestId>() {
        Some(id) => id.as_str().to_owned(),
        None => RequestId::new().as_str().to_owned(),
    }
}

/// An error in the vendor's shape, with the retry headers of its status.
pub fn vendor_error(err: &ApiError, rid: &str) -> Answer {
    let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = json(status, &err.vendor_body(rid));
    retry_headers(err.code, res.headers_mut());
    res
}

fn invalid(path: &str, what: impl std::fmt::Display) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, path, format!("{path}: {what}"))
}

/// An upstream failure before the first byte: 429 and 529 keep their meaning, the rest is
/// `500 upstream error`; `x-should-retry` says whether a retry can help (never after a failure
/// the upstream may have acted on: a retry could run the request twice).
fn failure_answer(f: &UpstreamFailure, rid: &str) -> Answer {
    tracing::warn!("messages {rid}: {}", f.detail);
    let err = match f.kind {
        FailureKind::RateLimited => ApiError::new(
            ErrorCode::RateLimited,
            "the upstream is rate limiting requests; retry later",
        ),
        FailureKind::Overloaded => ApiError::new(
            ErrorCode::Overloaded,
            "the upstream is overloaded; retry later",
        ),
        FailureKind::Error => ApiError::new(ErrorCode::UpstreamError, "upstream error"),
    };
    let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = json(status, &err.vendor_body(rid));
    let headers = res.headers_mut();
    if f.retryable {
        let wait = f.retry_after.unwrap_or(Duration::from_secs(1));
        let ms = wait.as_millis().clamp(1, 120_000) as u64;
        headers.insert("retry-after", HeaderValue::from(ms.div_ceil(1000).max(1)));
        headers.insert("retry-after-ms", HeaderValue::from(ms));
        headers.insert("x-should-retry", HeaderValue::from_static("true"));
    } else {
        headers.insert("x-should-retry", HeaderValue::from_static("false"));
    }
    res
}

/// A request the messages endpoints refuse before their own work, and the key when it was
/// known (a rate-limited one).
pub struct Refused {
    pub answer: Answer,
    pub key: Option<Arc<Key>>,
}

/// Auth (x-api-key or Bearer), then the rate limit; refusals in the vendor's shape.
pub async fn admit(app: &Arc<App>, parts: &Parts) -> Result<Arc<Key>, Box<Refused>> {
    let rid = || request_id(parts);
    let key = authenticate(
        &*app.store,
        &app.key_cache,
        &parts.headers,
        true,
        now_secs(),
    )
    .await
    .map_err(|e| {
        Box::new(Refused {
            answer: vendor_error(&e, &rid()),
            key: None,
        })
    })?;
    if let Err(limited) = app
        .limiter
        .check_shared(
            app.cluster.as_deref(),
            &app.config.limits,
            &key,
            Class::Request,
        )
        .await
    {
        let mut answer = vendor_error(&limited.error(), &rid());
        limited.set_headers(&mut answer);
        return Err(Box::new(Refused {
            answer,
            key: Some(key),
        }));
    }
    Ok(key)
}

const VENDOR_VERSION: HeaderName = HeaderName::from_static("vendor-version");
const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");
const ANTHROPIC_BETA: HeaderName = HeaderName::from_static("anthropic-beta");

/// `vendor-version`, or `anthropic-version` (the vendor's SDKs send that name).
pub(crate) fn version(parts: &Parts) -> Result<&str, ApiError> {
    [VENDOR_VERSION, ANTHROPIC_VERSION]
        .iter()
        .find_map(|name| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|v| !v.is_empty())
        })
        .ok_or_else(|| invalid("vendor-version", "header is required"))
}

/// What every body-carrying endpoint checks before its own work.
struct Admitted<'a> {
    body: Bytes,
    request: Checked,
    version: &'a str,
    beta: Option<&'a str>,
    channel: Arc<ChatChannel>,
    sim: SimDirectives,
}

async fn check<'a>(
    app: &Arc<App>,
    parts: &'a Parts,
    key: &Key,
    body: Incoming,
    endpoint: Endpoint,
) -> Result<Admitted<'a>, ApiError> {
    let body = read_body(body, app.config.server.json_limit()).await?;
    let version = version(parts)?;
    let request = Checked::new(&body, endpoint)?;
    let model = &request.summary.model;
    let is_chat = app
        .config
        .models
        .get(model)
        .is_some_and(|m| m.kind == ModelKind::Chat);
    if !is_chat || !may_use_model(key, model) {
        return Err(ApiError::field(
            ErrorCode::InvalidModel,
            "model",
            format!("model: {model} is not a chat model this key may use"),
        ));
    }
    let channel = app
        .chat_channels
        .iter()
        .find(|c| c.serves(model))
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unavailable,
                format!("no channel serves model {model} now"),
            )
        })?;
    let sim = if channel.is_simulator() {
        crate::ground::http::sim_directives(app.sim_scenarios(), &parts.headers)?
    } else {
        SimDirectives::default()
    };
    let beta = parts
        .headers
        .get(ANTHROPIC_BETA)
        .and_then(|v| v.to_str().ok());
    Ok(Admitted {
        body,
        request,
        version,
        beta,
        channel,
        sim,
    })
}

/// A new message id, `msg_` and a ULID.
fn message_id() -> String {
    let mut id = [0u8; ulid::ULID_LEN];
    let mut text = String::with_capacity(4 + ulid::ULID_LEN);
    text.push_str("msg_");
    text.push_str(thread_ulid().array_to_str(&mut id));
    text
}

/// A ULID from this thread's generator: within one millisecond the next after the last (no
/// random draw for it), else a new one.
fn thread_ulid() -> ulid::Ulid {
    thread_local! {
        static IDS: std::cell::RefCell<ulid::Generator> =
            const { std::cell::RefCell::new(ulid::Generator::new()) };
    }
    match IDS.with_borrow_mut(|ids| ids.generate().ok()) {
        Some(id) => id,
        // The random part overflowed within one millisecond: a new draw.
        None => ulid::Ulid::new(),
    }
}

/// `POST /v1/messages`.
pub async fn create(app: &Arc<App>, key: &Key, parts: &Parts, body: Incoming) -> Answer {
    // Written out only for an error.
    let rid = || request_id(parts);
    let checked = match check(app, parts, key, body, Endpoint::Messages).await {
        Ok(c) => c,
        Err(e) => return vendor_error(&e, &rid()),
    };
    let req = &checked.request.summary;
    let id = message_id();
    let input_estimate = req.input_tokens;
    let estimate = cost(app, &req.model, input_estimate, req.max_tokens.unwrap_or(0));
    let bill = match Bill::open(app, key, &id, &req.model, estimate).await {
        Ok(bill) => bill,
        Err(e) => return vendor_error(&e, &rid()),
    };
    let call = ChatCall {
        id: &id,
        request: &checked.request,
        body: &checked.body,
        version: checked.version,
        beta: checked.beta,
        query: parts.uri.query(),
        sim: &checked.sim,
    };
    let channel = checked.channel.clone();
    let answer = channel.messages(call).await;
    // The answers of this turn of the runtime go out together (see `channels::http::together`).
    channels::together().await;
    record_call(app, channel.name(), answer.is_ok());
    match answer {
        Err(failure) => {
            drop(bill);
            if failure.ambiguous {
                // The upstream may have run (and billed) it: counted for the operator, and
                // the client is not told to retry.
                app.engine.metrics().ambiguous_submission(channel.name());
            }
            failure_answer(&failure, &rid())
        }
        Ok(ChatAnswer::Whole { body, usage }) => {
            let usage = usage.unwrap_or(Usage {
                input_tokens: input_estimate,
                output_tokens: req.max_tokens.unwrap_or(0),
                ..Usage::default()
            });
            // Charged off the answer's path; the reservation stands until the charge is written.
            bill.charge(usage);
            crate::ground::http::json_text(body)
        }
        Ok(ChatAnswer::Stream(stream)) => {
            let ping = Duration::from_millis(app.config.server.stream_ping_ms);
            let rid = parts.extensions.get::<RequestId>().cloned();
            stream_answer(stream, bill, rid.unwrap_or_default(), ping)
        }
    }
}

fn record_call(app: &App, channel: &str, ok: bool) {
    if let Some(stats) = app.channel_stats.get(channel) {
        stats.record(ok);
    }
}

/// Answers `200 text/event-stream` at once; the body pulls the upstream's stream itself (no
/// task or queue in between) and bills the message when the stream ends: charged when it
/// completed or the client went away (from the usage seen so far), nothing when it failed.
fn stream_answer(
    stream: Box<ChatEventStream>,
    bill: Bill,
    rid: RequestId,
    ping: Duration,
) -> Answer {
    let body = RelayedStream {
        usage: stream.usage(),
        stream: Some(stream),
        ping,
        quiet: Deadline::default(),
        bill: Some(bill),
        rid,
    };
    let mut res = Response::new(BodyExt::boxed_unsync(body));
    let headers = res.headers_mut();
    // Room for the rate-limit headers and the request id too, without growing the map.
    headers.reserve(crate::ground::http::ANSWER_HEADERS);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

/// The body of a relayed stream. Dropped by hyper when the client goes away, which drops the
/// upstream request with it and charges what was relayed.
struct RelayedStream {
    /// The upstream's stream, polled by the body itself; `None` once it ended.
    stream: Option<Box<ChatEventStream>>,
    /// The usage as of the last bytes read.
    usage: Usage,
    /// `None` once billed.
    bill: Option<Bill>,
    rid: RequestId,
    /// Upstream silence after which a `ping` goes out.
    ping: Duration,
    /// The ping timer: rings `ping` after the stream began to wait, restarted when bytes go
    /// out (a ping ends its wait).
    quiet: Deadline,
}

impl RelayedStream {
    /// Ends the stream: dropping the upstream first (closing its connection), then billing.
    fn end(&mut self, charge: bool) {
        self.stream = None;
        self.quiet = Deadline::default();
        // Taken either way: a bill dropped uncharged releases its reservation.
        if let Some(bill) = self.bill.take()
            && charge
        {
            bill.charge(self.usage);
        }
    }

    /// Whether the upstream has been silent for `ping` since the stream began to wait (after
    /// the last bytes or ping that went out).
    fn poll_silence(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.quiet.poll_for(self.ping, cx)
    }
}

impl Drop for RelayedStream {
    fn drop(&mut self) {
        // The client went away (or hyper is done): what was relayed is charged.
        self.end(true);
    }
}

impl hyper::body::Body for RelayedStream {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        let Some(stream) = this.stream.as_mut() else {
            return Poll::Ready(None);
        };
        let outcome = match stream.poll_next(cx) {
            Poll::Ready(outcome) => outcome,
            Poll::Pending => loop {
                std::task::ready!(this.poll_silence(cx));
                // Silent for `ping`: a `ping` event, if the bytes so far end at an event's end
                // (else the timer, set again, is polled once more and waits).
                if this.stream.as_ref().is_some_and(|s| s.at_boundary()) {
                    let ping = Bytes::from(StreamEvent::Ping.to_sse());
                    return Poll::Ready(Some(Ok(Frame::data(ping))));
                }
            },
        };
        this.usage = stream.usage();
        match outcome {
            Ok(Some(bytes)) => {
                this.quiet.restart();
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            Ok(None) => {
                this.end(true);
                Poll::Ready(None)
            }
            Err(failure) => {
                tracing::warn!(
                    "messages {}: stream failed: {}",
                    this.rid.as_str(),
                    failure.detail
                );
                // Charged only when the relay itself cut a stream the upstream served well.
                this.end(failure.charge);
                if failure.reported {
                    return Poll::Ready(None);
                }
                let event = StreamEvent::error(failure.kind, failure.message);
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(event.to_sse())))))
            }
        }
    }
}

/// `POST /v1/messages/count_tokens`.
pub async fn count_tokens(app: &Arc<App>, key: &Key, parts: &Parts, body: Incoming) -> Answer {
    let rid = request_id(parts);
    let checked = match check(app, parts, key, body, Endpoint::CountTokens).await {
        Ok(c) => c,
        Err(e) => return vendor_error(&e, &rid),
    };
    let id = message_id();
    let call = ChatCall {
        id: &id,
        request: &checked.request,
        body: &checked.body,
        version: checked.version,
        beta: checked.beta,
        query: parts.uri.query(),
        sim: &checked.sim,
    };
    match checked.channel.count_tokens(call).await {
        Ok(input_tokens) => json(StatusCode::OK, &CountTokensResponse { input_tokens }),
        Err(failure) => failure_answer(&failure, &rid),
    }
}

/// The chat models `key` may use and some channel serves, by name.
fn models_for(app: &App, key: &Key) -> Vec<ModelInfo> {
    app.config
        .models
        .iter()
        .filter(|(name, m)| {
            m.kind == ModelKind::Chat
                && may_use_model(key, name)
                && app.chat_channels.iter().any(|c| c.serves(name))
        })
        .map(|(name, _)| ModelInfo {
            kind: "model".into(),
            id: name.clone(),
            display_name: name.clone(),
            // The relay does not know when a model was made: the epoch says "unknown".
            created_at: "1970-01-01T00:00:00Z".into(),
        })
        .collect()
}

/// `GET /v1/models?limit=&after_id=&before_id=`.
pub fn list_models(app: &Arc<App>, key: &Key, parts: &Parts) -> Answer {
    let rid = request_id(parts);
    let query = parts.uri.query();
    let limit = match crate::ground::http::query_param(query, "limit") {
        None => 20,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=1000).contains(&n) => n,
            _ => {
                return vendor_error(
                    &invalid(
                        "limit",
                        format_args!("must be an integer from 1 to 1000, got {v:?}"),
                    ),
                    &rid,
                );
            }
        },
    };
    let all = models_for(app, key);
    let after = crate::ground::http::query_param(query, "after_id");
    let before = crate::ground::http::query_param(query, "before_id");
    let mut page: Vec<ModelInfo> = all
        .into_iter()
        .filter(|m| after.as_deref().is_none_or(|a| m.id.as_str() > a))
        .filter(|m| before.as_deref().is_none_or(|b| m.id.as_str() < b))
        .collect();
    let has_more = if before.is_some() && after.is_none() {
        // Paging backwards: the last `limit` before the cursor.
        let more = page.len() > limit;
        page = page.split_off(page.len().saturating_sub(limit));
        more
    } else {
        let more = page.len() > limit;
        page.truncate(limit);
        more
    };
    let list = ModelList {
        first_id: page.first().map(|m| m.id.clone()),
        last_id: page.last().map(|m| m.id.clone()),
        data: page,
        has_more,
    };
    json(StatusCode::OK, &list)
}

/// `GET /v1/models/{id}`.
pub fn get_model(app: &Arc<App>, key: &Key, parts: &Parts, id: &str) -> Answer {
    let rid = request_id(parts);
    match models_for(app, key).into_iter().find(|m| m.id == id) {
        Some(model) => json(StatusCode::OK, &model),
        None => vendor_error(
            &ApiError::new(ErrorCode::NotFound, format!("model: {id} not found")),
            &rid,
        ),
    }
}
