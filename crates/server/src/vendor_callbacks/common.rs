//! What every vendor's callback handler shares. A callback carries no API key: its
//! `callback_url` does instead, `?task=<relay task id>&token=<token>`, the token an HMAC of
//! channel and task under the channel's `callback_secret`, compared in constant time
//! ([`authorise`]). Its body is read within [`MAX_BODY`] as JSON ([`read_json`]) and is not
//! trusted: the one thing a callback can do is bring its task's next poll forward
//! ([`poll_soon`]), no sooner than the channel's minimum poll interval after the task's last
//! poll ([`engine::Engine::poll_soon`]); one that finds the task due by then already writes
//! nothing. The engine's poll of the upstream decides what happened.

use std::sync::Arc;

use error_codes::{ApiError, ErrorCode};
use http::StatusCode;
use hyper::body::Incoming;
use serde_json::{Value, json};
use store::StoreError;
use subtle::ConstantTimeEq;

use crate::app::App;
use crate::config::ChannelKind;
use crate::ground::http::{Answer, Limit, error, json as json_answer, query_param, read_body};

/// The largest callback body read: a task record is a few hundred bytes.
pub const MAX_BODY: u64 = 64 * 1024;

/// A callback whose token matched: the channel it is for and the relay's task.
pub struct Caller<'a> {
    /// The vendor kind, as the configuration names it (`ark`, `kling`, `minimax`).
    pub kind: &'static str,
    pub channel: &'a str,
    pub task_id: String,
}

/// The channel of `kind` the path segment names, when it takes callbacks (has a
/// `callback_secret`), and the query's task, when its token is that channel's for it.
pub fn authorise<'a>(
    app: &'a App,
    kind: &'static str,
    segment: &str,
    query: Option<&str>,
) -> Result<Caller<'a>, ApiError> {
    // Only a channel of this kind with a callback secret takes callbacks; any other name is
    // unknown.
    let (channel, secret) = app
        .config
        .channels
        .iter()
        .filter(|c| c.kind == ChannelKind::Video(kind))
        .find(|c| c.name == segment || channels::path_part(&c.name) == segment)
        .and_then(|c| Some((c.name.as_str(), c.callback_secret.as_deref()?)))
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                format!("no {kind} channel of this name takes callbacks"),
            )
        })?;
    let unauthorized = || {
        ApiError::new(
            ErrorCode::Unauthorized,
            "the callback's task and token do not match",
        )
    };
    let task_id = query_param(query, "task").ok_or_else(unauthorized)?;
    let token = query_param(query, "token").ok_or_else(unauthorized)?;
    let expected = channels::vendors::seam::callback_token(secret, channel, &task_id);
    if !bool::from(expected.as_bytes().ct_eq(token.as_bytes())) {
        return Err(unauthorized());
    }
    Ok(Caller {
        kind,
        channel,
        task_id,
    })
}

/// The callback's body, at most [`MAX_BODY`], as JSON.
pub async fn read_json(app: &App, body: Incoming) -> Result<Value, ApiError> {
    let limit = Limit {
        bytes: MAX_BODY,
        idle: app.config.server.json_limit().idle,
    };
    let bytes = read_body(body, limit).await?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the callback body is not JSON: {e}"),
        )
    })
}

/// The upstream task's id in the payload's member `field`, a non-empty string.
pub fn upstream_id<'v>(payload: &'v Value, field: &'static str) -> Result<&'v str, ApiError> {
    payload
        .get(field)
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                field,
                format!("the callback body must carry the upstream task's {field} as a string"),
            )
        })
}

/// Brings the caller's task's next poll forward, when the task runs on the caller's channel
/// and `is_its_upstream` says the upstream id it recorded is the callback's; `true` when it
/// was brought forward.
pub async fn poll_soon(
    app: &Arc<App>,
    caller: &Caller<'_>,
    is_its_upstream: impl Fn(&str) -> bool,
) -> Result<bool, ApiError> {
    let store_error = |e: StoreError| {
        tracing::error!("{} callback: store: {e}", caller.kind);
        ApiError::new(ErrorCode::Unavailable, "the store is not available")
    };
    let not_found = || ApiError::new(ErrorCode::NotFound, "no such task on this channel");
    let task = app
        .store
        .task_shared(&caller.task_id)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    if task.channel.as_deref() != Some(caller.channel) {
        return Err(not_found());
    }
    match task.upstream_id.as_deref() {
        // Not recorded yet (the callback outran the submission's answer): the poll that
        // follows the submission will look anyway.
        None => return Ok(false),
        Some(known) if !is_its_upstream(known) => return Err(not_found()),
        Some(_) => {}
    }
    if task.status.is_final() {
        return Ok(false);
    }
    app.engine.poll_soon(&task).await.map_err(store_error)
}

/// The answer to a status callback: `{"received": true, "polled": bool}`, or the error.
pub fn received(result: Result<bool, ApiError>) -> Answer {
    match result {
        Ok(polled) => json_answer(StatusCode::OK, &json!({"received": true, "polled": polled})),
        Err(e) => error(&e),
    }
}
