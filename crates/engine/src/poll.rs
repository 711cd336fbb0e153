//! Polling an accepted task's upstream and acting on the answer.

use std::sync::Arc;

use channels::{PollOutcome, VideoChannel, VideoJob};
use store::{StoreError, Task, TaskStatus};

use crate::calls::{call_permit_within, record};
use crate::clock::now_ms;
use crate::commit::succeed;
use crate::schedule::{backoff, fail_task, reschedule, reschedule_after};
use crate::state::Engine;

pub(crate) async fn poll(
    engine: &Arc<Engine>,
    task: Task,
    channel: &Arc<VideoChannel>,
    job: &VideoJob,
    upstream_id: &str,
) {
    let submitted = task.submitted_ms.unwrap_or(task.created_at * 1000);
    let Ok(permit) = call_permit_within(engine, channel).await else {
        // The channel stayed at its cap: look again after its poll interval.
        let next = now_ms() + channel.min_poll_interval().as_millis() as u64;
        reschedule(engine, &task, next, false).await;
        return;
    };
    if let Err(turn) = engine.routing.take_call(channel.name()) {
        // Over the channel's call rate: put off to the task's turn, holding nothing meanwhile.
        drop(permit);
        let next = now_ms() + (turn.as_millis() as u64).max(1);
        reschedule(engine, &task, next, false).await;
        return;
    }
    let outcome = channel.poll(job, upstream_id, submitted, now_ms()).await;
    drop(permit);
    let answered = !matches!(outcome, PollOutcome::Transient(_));
    record(engine, channel, answered);
    if answered {
        engine.routing.success(channel.name());
    } else {
        engine.routing.failure(channel.name());
    }
    let now = now_ms();
    match outcome {
        PollOutcome::Running {
            progress,
            next_poll,
        } => {
            let min = channel.min_poll_interval().as_millis() as u64;
            // Without a hint from the channel, the wait grows with the task's age (half of it,
            // so polls come at about 1.5 times the previous age), capped: long tasks are
            // looked at less often.
            let grown = now.saturating_sub(submitted) / 2;
            let cap = engine.settings.poll_interval_max_ms.max(min);
            let wait = match next_poll {
                Some(hint) => (hint.as_millis() as u64).max(min),
                None => grown.clamp(min, cap),
            };
            let next = (now + wait).min(task.deadline_ms);
            let result = engine
                .store
                .transition(
                    &task.id,
                    &[TaskStatus::Running],
                    TaskStatus::Running,
                    &|t| {
                        t.progress = t.progress.max(progress.min(99));
                        t.attempts = 0;
                        t.updated_at = now / 1000;
                        t.polled_ms = Some(now);
                        t.next_poll_ms = Some(next);
                    },
                    &[],
                )
                .await;
            if let Err(e) = result
                && !matches!(e, StoreError::WrongStatus { .. })
            {
                tracing::error!("engine: task {}: recording progress: {e}", task.id);
            }
        }
        PollOutcome::Succeeded(files) => succeed(engine, task, channel, files).await,
        PollOutcome::Failed { code, message } => {
            fail_task(engine, &task, &code, &message).await;
        }
        PollOutcome::Transient(reason) => {
            let attempts = task.attempts + 1;
            tracing::warn!("engine: task {}: poll failed: {reason}", task.id);
            let next = now + backoff(engine, channel.min_poll_interval(), attempts);
            reschedule_after(engine, &task, next, true, Some(now)).await;
        }
        PollOutcome::Unknown(reason) => {
            let attempts = task.attempts + 1;
            tracing::warn!(
                "engine: task {}: poll {attempts} gave no known status: {reason}",
                task.id
            );
            if attempts >= engine.settings.unknown_status_polls.max(1) {
                fail_task(
                    engine,
                    &task,
                    "upstream_error",
                    "the upstream reported a status the relay does not know",
                )
                .await;
            } else {
                let next = now + channel.min_poll_interval().as_millis() as u64;
                reschedule_after(engine, &task, next, true, Some(now)).await;
            }
        }
    }
}
