//! `POST /callbacks/minimax/{channel}`: a `minimax` channel's callback about a task. It is
//! authorised like every vendor callback (`?task=..&token=..`, the HMAC of channel and task
//! under the channel's `callback_secret`). MiniMax first checks the address: it posts
//! `{"challenge": "..."}` and wants the same value back within 3 s, which is answered
//! `{"challenge": "..."}` at once, with no store access. Then it posts the task as its query
//! gives it (`task_id`, `status`, `file_id`, `base_resp`) whenever its status changes; that
//! payload is not trusted: it only brings the task's next poll forward, no sooner than the
//! channel's minimum poll interval after its last poll, and the poll decides.

use std::sync::Arc;

use error_codes::{ApiError, ErrorCode};
use http::StatusCode;
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::common::{authorise, poll_soon, read_json, received, upstream_id};
use crate::app::App;
use crate::ground::http::{Answer, error, json as json_answer};

/// What a MiniMax callback was.
enum Callback {
    /// The address check: its challenge, to echo.
    Challenge(String),
    /// A status push: whether it brought the task's poll forward.
    Status(bool),
}

/// Handles one callback on channel `channel` (the path segment as it came).
pub async fn receive(app: &Arc<App>, channel: &str, query: Option<&str>, body: Incoming) -> Answer {
    match run(app, channel, query, body).await {
        Ok(Callback::Challenge(challenge)) => {
            json_answer(StatusCode::OK, &json!({"challenge": challenge}))
        }
        Ok(Callback::Status(polled)) => received(Ok(polled)),
        Err(e) => error(&e),
    }
}

async fn run(
    app: &Arc<App>,
    segment: &str,
    query: Option<&str>,
    body: Incoming,
) -> Result<Callback, ApiError> {
    let caller = authorise(app, "minimax", segment, query)?;
    let payload = read_json(app, body).await?;
    if let Some(challenge) = payload.get("challenge") {
        return match challenge {
            Value::String(c) => Ok(Callback::Challenge(c.clone())),
            _ => Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "challenge",
                "the callback's challenge must be a string",
            )),
        };
    }
    let upstream = upstream_id(&payload, "task_id")?;
    poll_soon(app, &caller, |known| known == upstream)
        .await
        .map(Callback::Status)
}
