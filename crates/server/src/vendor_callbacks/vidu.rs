//! `POST /callbacks/vidu/{channel}`: a `vidu` channel's callback about a task, posted by Vidu
//! whenever the task's state changes. It is authorised twice: like every vendor callback
//! (`?task=..&token=..`, the HMAC of channel and task under the channel's `callback_secret`),
//! and by Vidu's own signature (`X-HMAC-SIGNATURE`, HMAC-SHA256 under the channel's API key
//! over the callback URL, `Date` and `x-request-nonce`; a `Date` more than 15 minutes off is
//! refused), checked by the channel ([`channels::vendors::vidu::verify_callback_signature`]).
//! Its payload is the task as Vidu's query gives it (`id`, `state`, `creations` ...) and is
//! not trusted: the callback only brings the task's next poll forward, no sooner than the
//! channel's minimum poll interval after its last poll, and the poll decides.

use std::sync::Arc;

use error_codes::{ApiError, ErrorCode};
use http::{HeaderMap, Method};
use hyper::body::Incoming;

use super::common::{authorise, poll_soon, read_json, received, upstream_id};
use crate::app::App;
use crate::ground::http::Answer;

/// Handles one callback on channel `channel` (the path segment as it came).
pub async fn receive(
    app: &Arc<App>,
    channel: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Incoming,
) -> Answer {
    received(run(app, channel, query, headers, body).await)
}

async fn run(
    app: &Arc<App>,
    segment: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Incoming,
) -> Result<bool, ApiError> {
    let caller = authorise(app, "vidu", segment, query)?;
    let signed = channels::vendors::InboundCallback {
        task_id: &caller.task_id,
        method: &Method::POST,
        headers,
    };
    let verdict = app
        .engine
        .channel_named(caller.channel)
        .ok_or_else(|| "the channel is not running".to_owned())
        .and_then(|channel| channel.verify_callback(&signed));
    if let Err(why) = verdict {
        tracing::info!(channel = caller.channel, "vidu callback refused: {why}");
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            "the callback is not signed by the vendor",
        ));
    }
    let payload = read_json(app, body).await?;
    let upstream = upstream_id(&payload, "id")?;
    poll_soon(app, &caller, |known| known == upstream).await
}
