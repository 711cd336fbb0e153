//! Submitting a task no upstream has accepted yet, failing over between channels; and never
//! sending again a submission that may have reached an upstream.

use std::sync::Arc;
use std::time::Duration;

use channels::{SubmitOutcome, VideoChannel};
use store::{StoreError, Task, TaskStatus};

use crate::calls::{call_permit_within, cancel_upstream, record};
use crate::clock::now_ms;
use crate::formats;
use crate::jobs::{job_for, references_for};
use crate::schedule::{backoff, fail_task, reschedule};
use crate::state::Engine;

/// The longest a submission waits for a call of its channel's `max_calls_per_sec`; past it
/// the next channel is tried, or the task comes back at its turn.
const SUBMIT_CALL_WAIT: Duration = Duration::from_secs(1);

/// The channel a submission of `task` went out to when no answer to it was recorded: a task
/// no upstream accepted names a channel only while its submission is under way (see
/// [`submit`]). Found at a step, it was cut off by a stop (or a lost claim).
pub(crate) fn under_way(task: &Task) -> Option<&str> {
    match (&task.channel, &task.upstream_id) {
        (Some(channel), None) => Some(channel),
        _ => None,
    }
}

/// Submits a task that no upstream has accepted yet: to the channel routing picks among those
/// whose vendor model can make it, then, while submissions are refused with nothing taken
/// (nothing sent, 408, 429, 5xx), to the next one of them (a task none of the configured
/// channels can make any more fails, refunded). Once a channel accepted it the task is never
/// submitted again; nor once a submission may have reached an upstream with no answer saying
/// what became of it ([`ambiguous`]).
///
/// Before a remote channel's submission goes out, the task is written naming that channel
/// with no upstream id (one store step): a relay that stops before it records the answer
/// leaves that mark, and the task's next step ([`under_way`]) fails it instead of sending it
/// again. The mark is cleared when the task is put off with nothing taken.
pub(crate) async fn submit(engine: &Arc<Engine>, task: Task) {
    let mut tried: Vec<String> = Vec::new();
    // The channel whose submission just failed, when the loop moves on from it.
    let mut moved_from: Option<String> = None;
    let mut counted = false;
    // Channels passed over because their call rate had no call to spare soon enough.
    let mut paced: Vec<String> = Vec::new();
    let mut base = Duration::from_millis(engine.settings.poll_interval_min_ms.clamp(1, 1000));
    let references = match references_for(engine, &task) {
        Ok(references) => references,
        Err(message) => {
            fail_task(engine, &task, "upstream_error", &message).await;
            return;
        }
    };
    let demand = match formats::demand(&task) {
        Ok(demand) => demand,
        Err(message) => {
            fail_task(engine, &task, "upstream_error", message).await;
            return;
        }
    };
    if let Err(refusal) = engine.fit(&task.model, &demand)
        && engine.channel_for(&task.model).is_some()
    {
        // Accepted when a channel could make it, but none of the channels configured now
        // can: waiting would not help.
        tracing::warn!(
            task = %task.id,
            "engine: task {}: no channel of model {} can make it now: {}",
            task.id,
            task.model,
            refusal.detail
        );
        let message = format!(
            "no channel of this model can make it now: {}",
            refusal.detail
        );
        fail_task(engine, &task, "upstream_error", &message).await;
        return;
    }
    while let Some(channel) = engine
        .routing
        .pick(&engine.channels, &task.model, &demand, &tried)
    {
        if let Some(previous) = moved_from.take() {
            engine.routing.failed_over(&previous);
            tracing::info!(
                "engine: task {}: failing over from channel {previous} to {}",
                task.id,
                channel.name()
            );
        }
        let job = match job_for(engine, &task, &channel) {
            Ok(job) => job,
            Err(message) => {
                fail_task(engine, &task, "upstream_error", &message).await;
                return;
            }
        };
        let Ok(permit) = call_permit_within(engine, &channel).await else {
            // At its cap: try another channel, or this one again soon.
            tried.push(channel.name().to_owned());
            continue;
        };
        match engine
            .routing
            .reserve_call(channel.name(), SUBMIT_CALL_WAIT)
        {
            Some(wait) if wait.is_zero() => {}
            // One wait for the call booked, not a loop.
            Some(wait) => tokio::time::sleep(wait).await,
            None => {
                // Over its call rate for longer than a submission waits.
                tried.push(channel.name().to_owned());
                paced.push(channel.name().to_owned());
                continue;
            }
        }
        if channel.is_remote() && !mark_under_way(engine, &task, channel.name()).await {
            return;
        }
        let outcome = channel.submit(&job, &references).await;
        drop(permit);
        record(
            engine,
            &channel,
            matches!(
                outcome,
                SubmitOutcome::Accepted { .. } | SubmitOutcome::Refused { .. }
            ),
        );
        let name = channel.name().to_owned();
        base = base.min(channel.min_poll_interval().max(Duration::from_millis(1)));
        match outcome {
            SubmitOutcome::Accepted { upstream_id } => {
                engine.routing.success(&name);
                accept(engine, task, &channel, upstream_id).await;
                return;
            }
            SubmitOutcome::Retry(reason) => {
                engine.routing.failure(&name);
                counted = true;
                tracing::warn!(
                    "engine: task {}: submission not accepted: {reason}",
                    task.id
                );
            }
            SubmitOutcome::RateLimited {
                retry_after,
                reason,
            } => {
                engine.routing.rate_limited(&name, retry_after);
                tracing::warn!(
                    "engine: task {}: submission rate limited: {reason}",
                    task.id
                );
            }
            SubmitOutcome::Refused { code, message } => {
                // The content's fault, not the channel's: it answered.
                engine.routing.success(&name);
                tracing::warn!("engine: task {}: content refused: {message}", task.id);
                fail_task(engine, &task, &code, &message).await;
                return;
            }
            SubmitOutcome::Ambiguous(reason) => {
                engine.routing.failure(&name);
                ambiguous(engine, &task, &name, &reason).await;
                return;
            }
            SubmitOutcome::Fatal(reason) => {
                tracing::warn!("engine: task {}: submission refused: {reason}", task.id);
                fail_task(
                    engine,
                    &task,
                    "upstream_error",
                    "the upstream refused the task",
                )
                .await;
                return;
            }
        }
        moved_from = Some(name.clone());
        tried.push(name);
    }
    let now = now_ms();
    if tried.is_empty() {
        // No channel is available now (none serves the model, or all are unhealthy or
        // resting after a 429): look again soon; the deadline bounds the wait.
        let wait = if engine.channel_for(&task.model).is_some() {
            500
        } else {
            5_000
        };
        reschedule(engine, &task, now + wait, false).await;
        return;
    }
    if !counted {
        // Only 429s and call rates: not the task's fault; try again once the channels have
        // rested, or at the task's turn on the channel with the soonest one.
        let turn = paced
            .iter()
            .map(|name| engine.routing.call_turn(name))
            .min();
        let wait = turn.map_or(base, |turn| turn.max(Duration::from_millis(1)));
        reschedule(engine, &task, now + wait.as_millis() as u64, false).await;
        return;
    }
    let attempts = task.attempts + 1;
    if attempts >= engine.settings.submit_attempts.max(1) {
        fail_task(
            engine,
            &task,
            "upstream_error",
            "the upstream did not accept the task",
        )
        .await;
    } else {
        let next = now + backoff(engine, base, attempts);
        reschedule(engine, &task, next, true).await;
    }
}

/// Writes that a submission of `task` to `channel` is about to go out (the task names the
/// channel, with no upstream id yet), before it does: `false` when the task ended meanwhile
/// (a cancel) or the store failed, and nothing is to be sent (the claim's lease brings the
/// task back after a store failure).
async fn mark_under_way(engine: &Engine, task: &Task, channel: &str) -> bool {
    let result = engine
        .store
        .transition(
            &task.id,
            &[task.status],
            task.status,
            &|t| t.channel = Some(channel.to_owned()),
            &[],
        )
        .await;
    match result {
        Ok(_) => true,
        Err(StoreError::WrongStatus { .. } | StoreError::TaskNotFound(_)) => false,
        Err(e) => {
            tracing::error!(
                "engine: task {}: recording its submission to {channel}: {e}",
                task.id
            );
            false
        }
    }
}

/// A submission to `channel` that may have reached it, with no answer saying whether it took
/// the task (the connection broke after the request went out, no answer came in time, a
/// success without a task id, or the relay stopped meanwhile). It is never sent again, here or
/// elsewhere: a second task would be billed twice. The upstream kinds the relay speaks
/// (`openai-videos`, `ark`) offer no lookup of a task by a name the relay gave it, so there is
/// nothing to ask: the task fails with `upstream_error` and its refund, and the submission is
/// logged (task, channel) and counted in `relay_upstream_ambiguous_submissions_total` for the
/// operator to reconcile with the upstream's records.
pub(crate) async fn ambiguous(engine: &Engine, task: &Task, channel: &str, reason: &str) {
    engine.metrics.ambiguous_submission(channel);
    tracing::warn!(
        task = %task.id,
        channel,
        "engine: task {}: its submission to channel {channel} may have reached the upstream, \
         but no answer says whether it took the task; it is not sent again, and the task \
         fails and is refunded: {reason}",
        task.id
    );
    fail_task(
        engine,
        task,
        "upstream_error",
        "the upstream did not confirm the task",
    )
    .await;
}

/// Records an accepted submission: `running` with the channel and upstream id.
async fn accept(
    engine: &Arc<Engine>,
    task: Task,
    channel: &Arc<VideoChannel>,
    upstream_id: String,
) {
    let now = now_ms();
    let accepted_id = upstream_id.clone();
    let name = channel.name().to_owned();
    let next = (now + channel.min_poll_interval().as_millis() as u64).min(task.deadline_ms);
    let from = task.status;
    let result = engine
        .store
        .transition(
            &task.id,
            &[from],
            TaskStatus::Running,
            &|t| {
                t.channel = Some(name.clone());
                t.upstream_id = Some(upstream_id.clone());
                t.submitted_ms = Some(now);
                t.attempts = 0;
                t.updated_at = now / 1000;
                t.next_poll_ms = Some(next);
            },
            &[],
        )
        .await;
    match result {
        Ok(_) => {}
        // Cancelled (or timed out) while submitting: stop the upstream work too.
        Err(StoreError::WrongStatus { .. }) => {
            cancel_upstream(engine, channel.clone(), accepted_id);
        }
        Err(e) => {
            tracing::error!("engine: task {}: recording the submission: {e}", task.id)
        }
    }
}
