//! `POST /callbacks/kling/{channel}`: a `kling` channel's callback about a task, posted by
//! Kling whenever the task's status changes. It is authorised like every vendor callback
//! (`?task=..&token=..`, the HMAC of channel and task under the channel's `callback_secret`);
//! its payload is Kling's task object (`task_id`, `task_status`, `task_result` ...) and is not
//! trusted: the callback only brings the task's next poll forward, no sooner than the
//! channel's minimum poll interval after its last poll, and the poll decides.

use std::sync::Arc;

use error_codes::ApiError;
use hyper::body::Incoming;

use super::common::{authorise, poll_soon, read_json, received, upstream_id};
use crate::app::App;
use crate::ground::http::Answer;

/// Handles one callback on channel `channel` (the path segment as it came).
pub async fn receive(app: &Arc<App>, channel: &str, query: Option<&str>, body: Incoming) -> Answer {
    received(run(app, channel, query, body).await)
}

async fn run(
    app: &Arc<App>,
    segment: &str,
    query: Option<&str>,
    body: Incoming,
) -> Result<bool, ApiError> {
    let caller = authorise(app, "kling", segment, query)?;
    let payload = read_json(app, body).await?;
    let upstream = upstream_id(&payload, "task_id")?;
    // The relay keeps Kling's task as `<kind>/<task_id>`, so that a poll knows its path.
    poll_soon(app, &caller, |known| {
        channels::vendors::kling::split_upstream_id(known).is_some_and(|(_, id)| id == upstream)
    })
    .await
}
