//! `POST /callbacks/ark/{channel}`: an `ark` upstream's callback about a task. It carries no
//! API key; its `callback_url` does instead: `?task=<relay task id>&token=<token>`, the token
//! an HMAC of channel and task under the channel's `callback_secret`, compared in constant
//! time. The payload is the upstream's task (`id`, `status`, `content` ...) and is not
//! trusted: the callback only makes the task due for a poll now, and the engine's poll of
//! the upstream decides what happened. Polling stays the safety net for callbacks that never
//! come.

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
const MAX_BODY: u64 = 64 * 1024;

/// Handles one callback on channel `channel` (the path segment as it came).
pub async fn receive(app: &Arc<App>, channel: &str, query: Option<&str>, body: Incoming) -> Answer {
    match run(app, channel, query, body).await {
        Ok(woken) => json_answer(StatusCode::OK, &json!({"received": true, "polled": woken})),
        Err(e) => error(&e),
    }
}

async fn run(
    app: &Arc<App>,
    segment: &str,
    query: Option<&str>,
    body: Incoming,
) -> Result<bool, ApiError> {
    // Only an ark channel with a callback secret takes callbacks; any other name is unknown.
    let (name, secret) = app
        .config
        .channels
        .iter()
        .filter(|c| c.kind == ChannelKind::Video("ark"))
        .find(|c| c.name == segment || channels::path_part(&c.name) == segment)
        .and_then(|c| Some((c.name.as_str(), c.callback_secret.as_deref()?)))
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                "no ark channel of this name takes callbacks",
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
    let expected = channels::vendors::ark::callback_token(secret, name, &task_id);
    if !bool::from(expected.as_bytes().ct_eq(token.as_bytes())) {
        return Err(unauthorized());
    }
    let limit = Limit {
        bytes: MAX_BODY,
        idle: app.config.server.json_limit().idle,
    };
    let bytes = read_body(body, limit).await?;
    let payload: Value = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the callback body is not JSON: {e}"),
        )
    })?;
    let upstream_id = payload
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                "id",
                "the callback body must carry the upstream task's id as a string",
            )
        })?;
    let not_found = || ApiError::new(ErrorCode::NotFound, "no such task on this channel");
    let task = app
        .store
        .task(&task_id)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    if task.channel.as_deref() != Some(name) {
        return Err(not_found());
    }
    match task.upstream_id.as_deref() {
        // Not recorded yet (the callback outran the submission's answer): the poll that
        // follows the submission will look anyway.
        None => return Ok(false),
        Some(known) if known != upstream_id => return Err(not_found()),
        Some(_) => {}
    }
    if task.status.is_final() {
        return Ok(false);
    }
    let now = engine::now_ms();
    let result = app
        .store
        .transition(
            &task.id,
            &[task.status],
            task.status,
            &|t| t.next_poll_ms = Some(now.min(t.deadline_ms)),
            &[],
        )
        .await;
    match result {
        Ok(_) => {
            app.engine.wake();
            Ok(true)
        }
        // It moved on meanwhile (ended, or was claimed and stepped): nothing to wake.
        Err(StoreError::WrongStatus { .. }) => Ok(false),
        Err(e) => Err(store_error(e)),
    }
}

fn store_error(e: StoreError) -> ApiError {
    tracing::error!("ark callback: store: {e}");
    ApiError::new(ErrorCode::Unavailable, "the store is not available")
}
