//! `POST /callbacks/ark/{channel}`: an `ark` upstream's callback about a task. It carries no
//! API key; its `callback_url` does instead: `?task=<relay task id>&token=<token>`, the token
//! an HMAC of channel and task under the channel's `callback_secret`, compared in constant
//! time. The payload is the upstream's task (`id`, `status`, `content` ...) and is not
//! trusted: the callback only brings the task's next poll forward, and the engine's poll of
//! the upstream decides what happened. However many come, it is brought no sooner than the
//! channel's minimum poll interval after the task's last poll ([`engine::Engine::poll_soon`]);
//! a callback that finds it due by then already is answered and writes nothing. Polling stays
//! the safety net for callbacks that never come.

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
    let caller = authorise(app, "ark", segment, query)?;
    let payload = read_json(app, body).await?;
    let upstream = upstream_id(&payload, "id")?;
    poll_soon(app, &caller, |known| known == upstream).await
}
