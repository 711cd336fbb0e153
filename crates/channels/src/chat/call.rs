//! The shared types of chat channels: a channel's settings, one call as a channel sees it,
//! its answer, how a failure before the first byte is reported, and the channel test's call.
//! Every adapter and the dispatching [`ChatChannel`](super::ChatChannel) speak in these; this
//! module knows none of them.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use messages::{Checked, MessagesRequest, Usage};

use super::stream::ChatEventStream;
use crate::check;
use crate::http::client::{UpstreamError, UpstreamHttp, UpstreamTimeouts};
use crate::http::network::Network;
use crate::sim::directives::SimDirectives;
use crate::vendors::common::transport_check;
use crate::vendors::redact;
use crate::video::job::{ChannelCheck, CheckVerdict};

/// How a chat channel is set up.
#[derive(Debug, Clone, Default)]
pub struct ChatSettings {
    pub name: String,
    /// The relay's names of the models it serves.
    pub models: Vec<String>,
    /// The upstream's base URL: `https://host` for a native upstream (the relay adds
    /// `/v1/messages`), `https://host/v1` for chat completions (the relay adds
    /// `/chat/completions`).
    pub base_url: String,
    /// The upstream's key, sent instead of the client's.
    pub api_key: Option<String>,
    /// The relay's model name -> the upstream's.
    pub model_map: BTreeMap<String, String>,
    pub timeouts: UpstreamTimeouts,
    /// The TLS roots and proxy of the upstream calls.
    pub network: Network,
    /// The most bytes one upstream stream event (all its lines), and the bytes held back of
    /// an unfinished one, may take (`server.max_stream_event_bytes`); 0: the default, 16 MiB.
    pub max_event_bytes: usize,
}

impl ChatSettings {
    /// The cap of one upstream stream event.
    pub fn max_event(&self) -> usize {
        match self.max_event_bytes {
            0 => messages::sse::DEFAULT_MAX_EVENT,
            n => n,
        }
    }

    pub fn serves(&self, model: &str) -> bool {
        self.models.iter().any(|m| m == model)
    }

    pub fn upstream_model(&self, model: &str) -> String {
        self.model_map
            .get(model)
            .cloned()
            .unwrap_or_else(|| model.to_owned())
    }
}

/// One call as a channel sees it.
#[derive(Debug, Clone, Copy)]
pub struct ChatCall<'a> {
    /// The relay's message id (`msg_...`).
    pub id: &'a str,
    /// The checked request: its summary, and the typed request from [`ChatCall::typed`].
    pub request: &'a Checked,
    /// The client's body as it came (passed on unchanged by a native upstream).
    pub body: &'a Bytes,
    /// The client's `vendor-version` / `anthropic-version`.
    pub version: &'a str,
    /// The client's `anthropic-beta`, if any, passed on untouched.
    pub beta: Option<&'a str>,
    /// The client's query string (`beta=true` ...), if any, passed on untouched by a native
    /// upstream.
    pub query: Option<&'a str>,
    pub sim: &'a SimDirectives,
}

impl ChatCall<'_> {
    /// The relay's own count of the request's input tokens.
    pub fn input_estimate(&self) -> u64 {
        self.request.summary.input_tokens
    }

    pub fn is_stream(&self) -> bool {
        self.request.summary.stream
    }

    /// The typed request, for a channel that rewrites it (built from the body unless checking
    /// built it already).
    pub fn typed(&self, channel: &str) -> Result<Cow<'_, MessagesRequest>, UpstreamFailure> {
        self.request.typed(self.body).map_err(|e| {
            UpstreamFailure::error(false, format!("channel {channel}: request: {}", e.detail))
        })
    }
}

/// A successful answer.
#[derive(Debug)]
pub enum ChatAnswer {
    /// A whole JSON message; `usage` when it could be read.
    Whole {
        body: Bytes,
        usage: Option<Usage>,
    },
    Stream(Box<ChatEventStream>),
}

/// How a failure before the first byte is reported to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The upstream said 429.
    RateLimited,
    /// The upstream said 529.
    Overloaded,
    /// Anything else: `500 upstream error`.
    Error,
}

/// An upstream call that failed before anything was sent to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamFailure {
    pub kind: FailureKind,
    /// Whether a retry may succeed (drives `x-should-retry`). Never true when `ambiguous`.
    pub retryable: bool,
    /// The request may have reached the upstream, which may have acted on it (and billed
    /// it): the connection broke after it went out, no answer came in time, or a success
    /// could not be read. A retry could run it twice, so none is suggested.
    pub ambiguous: bool,
    /// The upstream's own `retry-after`, capped.
    pub retry_after: Option<Duration>,
    /// For logs only: may name the upstream (its body is redacted).
    pub detail: String,
}

impl UpstreamFailure {
    pub fn error(retryable: bool, detail: impl Into<String>) -> UpstreamFailure {
        UpstreamFailure {
            kind: FailureKind::Error,
            retryable,
            ambiguous: false,
            retry_after: None,
            detail: detail.into(),
        }
    }

    /// A failure after the upstream may have acted on the request: not retryable.
    pub fn ambiguous(detail: impl Into<String>) -> UpstreamFailure {
        UpstreamFailure {
            ambiguous: true,
            ..UpstreamFailure::error(false, detail)
        }
    }

    /// A failed exchange: retryable when nothing of the request left (no connection), else
    /// ambiguous (the upstream closed after reading it, or did not answer in time).
    pub fn from_transport(channel: &str, e: &UpstreamError) -> UpstreamFailure {
        let detail = format!("channel {channel}: {e}");
        if e.is_unsent() {
            UpstreamFailure::error(true, detail)
        } else {
            UpstreamFailure::ambiguous(detail)
        }
    }

    /// A success whose body could not be read or used: the upstream did the work.
    pub fn after_success(channel: &str, what: impl std::fmt::Display) -> UpstreamFailure {
        UpstreamFailure::ambiguous(format!("channel {channel}: {what}"))
    }

    /// A non-2xx answer: 429 and 529 keep their meaning; the rest is `500 upstream error`,
    /// retryable when the upstream's status is (408, 409, 5xx). The body goes to the log
    /// only, redacted (the channel's key among what is removed).
    pub fn from_status(
        settings: &ChatSettings,
        status: u16,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Self {
        let channel = &settings.name;
        let text = redact::for_log(body, settings.api_key.as_deref());
        let detail = format!("channel {channel}: upstream answered {status}: {text}");
        let retry_after = headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(120.0)));
        let kind = match status {
            429 => FailureKind::RateLimited,
            529 => FailureKind::Overloaded,
            _ => FailureKind::Error,
        };
        let retryable = matches!(status, 408 | 409 | 429) || status >= 500;
        UpstreamFailure {
            kind,
            retryable,
            ambiguous: false,
            retry_after,
            detail,
        }
    }
}

/// The largest whole (non-streamed) upstream answer read.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// A chat channel's test: sends `req` (a GET of the upstream's model list, with the key) on
/// `http` and reads the answer by its status, or by `classify` when it knows the upstream's
/// bodies better. The body shown is redacted, the channel's key removed.
pub(crate) async fn check_get(
    settings: &ChatSettings,
    http: &UpstreamHttp,
    req: Result<Request<Bytes>, String>,
    classify: impl Fn(StatusCode, &[u8]) -> Option<CheckVerdict>,
) -> ChannelCheck {
    let req = match req {
        Ok(req) => req,
        Err(e) => {
            return ChannelCheck {
                verdict: CheckVerdict::Error,
                detail: format!("the request cannot be made: {e}"),
            };
        }
    };
    let res = match http.send(req).await {
        Ok(res) => res,
        Err(e) => return transport_check(&e),
    };
    let status = res.status;
    check::note_status(status);
    let body = match res.body.collect(64 * 1024).await {
        Ok(body) => body,
        Err(e) => return transport_check(&e),
    };
    let verdict = classify(status, &body).unwrap_or_else(|| check::verdict_of(status));
    let text = redact::for_log(&body, settings.api_key.as_deref());
    check::answered(verdict, status, &text)
}
