//! When a task is looked at next: rescheduling with back-off, and timing out past the deadline.

use std::sync::Arc;
use std::time::Duration;

use store::{StoreError, Task};

use crate::calls::cancel_upstream;
use crate::state::Engine;
use crate::steps::fail;

/// Moves an unfinished task to `failed` with its refund (nothing when another writer ended
/// it first; a store error is logged).
pub(crate) async fn fail_task(engine: &Engine, task: &Task, code: &str, message: &str) {
    match fail(&*engine.store, task, code, message).await {
        Ok(Some(failed)) => engine.finished(&failed),
        Ok(None) => {}
        Err(e) => tracing::error!("engine: task {}: failing it: {e}", task.id),
    }
}

/// `base` doubled per attempt, capped by `poll_interval_max_ms`.
pub(crate) fn backoff(engine: &Engine, base: Duration, attempts: u32) -> u64 {
    let base = base.as_millis() as u64;
    let cap = engine.settings.poll_interval_max_ms.max(base);
    base.saturating_mul(1u64 << attempts.min(16)).min(cap)
}

/// Fails a task past its deadline with `timeout`, refunding it, and stops the upstream work.
pub(crate) async fn time_out(engine: &Arc<Engine>, task: Task) {
    let secs = engine.settings.timeout_secs;
    let message = format!("the task did not finish within {secs} s");
    match fail(&*engine.store, &task, "timeout", &message).await {
        Ok(Some(failed)) => {
            engine.finished(&failed);
            if let (Some(name), Some(upstream_id)) =
                (task.channel.as_deref(), task.upstream_id.as_deref())
                && let Some(channel) = engine.channel_named(name)
            {
                cancel_upstream(engine, channel.clone(), upstream_id.to_owned());
            }
        }
        Ok(None) => {}
        Err(e) => tracing::error!("engine: task {}: timing out: {e}", task.id),
    }
}

/// Sets when `task` is looked at next (not after its deadline), counting a failed attempt
/// when asked. A task no upstream accepted names no channel while it waits: a channel without
/// an upstream id marks a submission under way (see `submit`).
pub(crate) async fn reschedule(
    engine: &Arc<Engine>,
    task: &Task,
    next_ms: u64,
    count_attempt: bool,
) {
    let status = task.status;
    let next = next_ms.min(task.deadline_ms);
    let result = engine
        .store
        .transition(
            &task.id,
            &[status],
            status,
            &|t| {
                if count_attempt {
                    t.attempts += 1;
                }
                t.next_poll_ms = Some(next);
                if t.upstream_id.is_none() {
                    t.channel = None;
                }
            },
            &[],
        )
        .await;
    if let Err(e) = result
        && !matches!(
            e,
            StoreError::WrongStatus { .. } | StoreError::TaskNotFound(_)
        )
    {
        tracing::error!("engine: task {}: rescheduling: {e}", task.id);
    }
}
