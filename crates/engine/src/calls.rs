//! Upstream calls within a channel's caps: its concurrency permits, its call rate, its counts;
//! and the background cancel of upstream work.

use std::sync::Arc;
use std::time::Duration;

use channels::VideoChannel;
use tokio::sync::OwnedSemaphorePermit;

use crate::state::Engine;

/// The longest an engine step waits for one of its channel's `max_concurrency` permits.
const PERMIT_WAIT: Duration = Duration::from_secs(1);
/// The same for a cancel, which runs in the background; past it the cancel is left out.
const CANCEL_CALL_WAIT: Duration = Duration::from_secs(10);

pub(crate) fn record(engine: &Engine, channel: &VideoChannel, ok: bool) {
    if let Some(stats) = engine.stats.get(channel.name()) {
        stats.record(ok);
    }
}

/// A permit for one upstream call of `channel` (its concurrency cap).
pub(crate) async fn call_permit(
    engine: &Engine,
    channel: &VideoChannel,
) -> Option<OwnedSemaphorePermit> {
    let permits = engine.routing.permits(channel.name())?;
    permits.acquire_owned().await.ok()
}

/// A permit for one upstream call of `channel`, waiting at most [`PERMIT_WAIT`] for one
/// (first come, first served): `Err` when the channel stayed at its cap that long, so a slow
/// channel holds an engine step for a bounded time only. Waiting rather than putting the task
/// off keeps the due order: a channel at its cap serves its tasks in turn instead of polling
/// some again and again while others wait a whole interval each time.
pub(crate) async fn call_permit_within(
    engine: &Engine,
    channel: &VideoChannel,
) -> Result<Option<OwnedSemaphorePermit>, ()> {
    let Some(permits) = engine.routing.permits(channel.name()) else {
        return Ok(None);
    };
    if let Ok(permit) = permits.clone().try_acquire_owned() {
        return Ok(Some(permit));
    }
    match tokio::time::timeout(PERMIT_WAIT, permits.acquire_owned()).await {
        Ok(Ok(permit)) => Ok(Some(permit)),
        _ => Err(()),
    }
}

/// Asks the upstream to stop a task, in the background: within the channel's caps (a call
/// permit, and a call of its rate within [`CANCEL_CALL_WAIT`], else the cancel is left out).
pub fn cancel_upstream(engine: &Arc<Engine>, channel: Arc<VideoChannel>, upstream_id: String) {
    let engine = engine.clone();
    tokio::spawn(async move {
        let _permit = call_permit(&engine, &channel).await;
        match engine
            .routing
            .reserve_call(channel.name(), CANCEL_CALL_WAIT)
        {
            Some(wait) => tokio::time::sleep(wait).await,
            None => {
                tracing::warn!(
                    "engine: channel {}: an upstream cancel left out: over the channel's call rate",
                    channel.name()
                );
                return;
            }
        }
        channel.cancel(&upstream_id).await;
    });
}
