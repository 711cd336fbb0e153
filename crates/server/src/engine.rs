//! The task engine: drives every unfinished task to a final status through its channel.
//!
//! The schedule lives in the store (each task's `next_poll_ms`, indexed), so after a restart
//! the engine simply finds the due tasks again. Every status change is a `transition`, so a
//! cancel racing a completion settles or refunds exactly once, whoever wins.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use channels::{PollOutcome, ResultSource, SubmitOutcome, VideoChannel, VideoJob};
use store::{LedgerDraft, LedgerKind, Outputs, StoreError, Task, TaskKind, TaskStatus};
use tokio::sync::{Semaphore, watch};

use crate::app::{App, now_ms, now_secs};
use crate::tasks::{blocking, fail};

/// Tasks handled at once.
const CONCURRENCY: usize = 64;
/// Due tasks fetched per pass.
const BATCH: usize = 256;
/// How often the engine looks for due tasks when nothing wakes it.
const TICK: Duration = Duration::from_millis(100);

/// Runs until `shutdown` turns true, then waits (bounded) for the steps under way.
pub async fn run(app: Arc<App>, mut shutdown: watch::Receiver<bool>) {
    let in_flight: Arc<Mutex<HashSet<String>>> = Arc::default();
    let permits = Arc::new(Semaphore::new(CONCURRENCY));
    loop {
        if *shutdown.borrow() {
            break;
        }
        let now = now_ms();
        match blocking(&app, move |s| s.due_tasks(now, BATCH)).await {
            Ok(due) => {
                for task in due {
                    let fresh = in_flight
                        .lock()
                        .map(|mut set| set.insert(task.id.clone()))
                        .unwrap_or(false);
                    if !fresh {
                        continue;
                    }
                    let Ok(permit) = permits.clone().acquire_owned().await else {
                        break;
                    };
                    let app = app.clone();
                    let in_flight = in_flight.clone();
                    tokio::spawn(async move {
                        let id = task.id.clone();
                        step(&app, task).await;
                        if let Ok(mut set) = in_flight.lock() {
                            set.remove(&id);
                        }
                        drop(permit);
                    });
                }
            }
            Err(e) => tracing::error!("engine: reading due tasks: {e}"),
        }
        tokio::select! {
            _ = app.engine_wake.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => {}
        }
    }
    // Let the steps under way finish, for at most a few seconds.
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        permits.acquire_many(CONCURRENCY as u32),
    )
    .await;
}

/// One look at one task.
async fn step(app: &Arc<App>, task: Task) {
    let now = now_ms();
    if now >= task.deadline_ms {
        time_out(app, task).await;
        return;
    }
    let channel = match task.channel.as_deref() {
        Some(name) => app.video_channel_named(name),
        None => app.video_channel_for(&task.model),
    };
    let Some(channel) = channel.cloned() else {
        // No channel serves the model now (configuration changed); look again later.
        reschedule(app, &task, now + 5_000, false).await;
        return;
    };
    let job = match job_for(&task, &channel) {
        Ok(job) => job,
        Err(message) => {
            let owned = task.clone();
            let _ = blocking(app, move |s| fail(s, &owned, "upstream_error", &message)).await;
            return;
        }
    };
    match (task.status, task.upstream_id.as_deref()) {
        (TaskStatus::Queued, _) | (TaskStatus::Running, None) => {
            submit(app, task, &channel, &job).await
        }
        (TaskStatus::Running, Some(upstream_id)) => {
            let upstream_id = upstream_id.to_owned();
            poll(app, task, &channel, &job, &upstream_id).await
        }
        _ => {}
    }
}

fn job_for(task: &Task, channel: &VideoChannel) -> Result<VideoJob, String> {
    let upstream_model = channel.upstream_model(&task.model);
    match task.kind {
        TaskKind::Video => crate::videos::job(task, upstream_model).map_err(|e| e.detail),
        TaskKind::Generation => crate::generations::job(task, upstream_model).map_err(|e| e.detail),
    }
}

fn record(app: &App, channel: &VideoChannel, ok: bool) {
    if let Some(stats) = app.channel_stats.get(channel.name()) {
        stats.record(ok);
    }
}

fn backoff(app: &App, channel: &VideoChannel, attempts: u32) -> u64 {
    let base = channel.min_poll_interval().as_millis() as u64;
    let cap = app.config.tasks.poll_interval_max_ms.max(base);
    base.saturating_mul(1u64 << attempts.min(16)).min(cap)
}

async fn submit(app: &Arc<App>, task: Task, channel: &Arc<VideoChannel>, job: &VideoJob) {
    let outcome = channel.submit(job).await;
    record(
        app,
        channel,
        matches!(outcome, SubmitOutcome::Accepted { .. }),
    );
    let now = now_ms();
    let id = task.id.clone();
    match outcome {
        SubmitOutcome::Accepted { upstream_id } => {
            let accepted_id = upstream_id.clone();
            let name = channel.name().to_owned();
            let next = (now + channel.min_poll_interval().as_millis() as u64).min(task.deadline_ms);
            let result = blocking(app, move |s| {
                s.transition(
                    &id,
                    &[TaskStatus::Queued],
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
            })
            .await;
            match result {
                Ok(_) => {}
                // Cancelled (or timed out) while submitting: stop the upstream work too.
                Err(StoreError::WrongStatus { .. }) => channel.cancel(&accepted_id).await,
                Err(e) => {
                    tracing::error!("engine: task {}: recording the submission: {e}", task.id)
                }
            }
        }
        SubmitOutcome::Retry(reason) => {
            let attempts = task.attempts + 1;
            tracing::warn!(
                "engine: task {}: submission attempt {attempts} failed: {reason}",
                task.id
            );
            if attempts >= app.config.tasks.submit_attempts.max(1) {
                let _ = blocking(app, move |s| {
                    fail(
                        s,
                        &task,
                        "upstream_error",
                        "the upstream did not accept the task",
                    )
                })
                .await;
            } else {
                let next = now + backoff(app, channel, attempts);
                reschedule(app, &task, next, true).await;
            }
        }
        SubmitOutcome::Fatal(reason) => {
            tracing::warn!("engine: task {}: submission refused: {reason}", task.id);
            let _ = blocking(app, move |s| {
                fail(s, &task, "upstream_error", "the upstream refused the task")
            })
            .await;
        }
    }
}

async fn poll(
    app: &Arc<App>,
    task: Task,
    channel: &Arc<VideoChannel>,
    job: &VideoJob,
    upstream_id: &str,
) {
    let submitted = task.submitted_ms.unwrap_or(task.created_at * 1000);
    let outcome = channel.poll(job, upstream_id, submitted, now_ms()).await;
    record(app, channel, !matches!(outcome, PollOutcome::Transient(_)));
    let now = now_ms();
    match outcome {
        PollOutcome::Running {
            progress,
            next_poll,
        } => {
            let min = channel.min_poll_interval();
            let wait = next_poll.unwrap_or(min).max(min).as_millis() as u64;
            let next = (now + wait).min(task.deadline_ms);
            let id = task.id.clone();
            let result = blocking(app, move |s| {
                s.transition(
                    &id,
                    &[TaskStatus::Running],
                    TaskStatus::Running,
                    &|t| {
                        t.progress = t.progress.max(progress.min(99));
                        t.attempts = 0;
                        t.updated_at = now / 1000;
                        t.next_poll_ms = Some(next);
                    },
                    &[],
                )
            })
            .await;
            if let Err(e) = result
                && !matches!(e, StoreError::WrongStatus { .. })
            {
                tracing::error!("engine: task {}: recording progress: {e}", task.id);
            }
        }
        PollOutcome::Succeeded(files) => succeed(app, task, files).await,
        PollOutcome::Failed { code, message } => {
            let _ = blocking(app, move |s| fail(s, &task, &code, &message)).await;
        }
        PollOutcome::Transient(reason) => {
            let attempts = task.attempts + 1;
            tracing::warn!("engine: task {}: poll failed: {reason}", task.id);
            let next = now + backoff(app, channel, attempts);
            reschedule(app, &task, next, true).await;
        }
    }
}

/// Keeps the result files in the blob store, then moves the task to `succeeded` with its
/// settlement. If the task ended meanwhile (cancelled), the files are removed again.
async fn succeed(app: &Arc<App>, task: Task, files: channels::ResultFiles) {
    let blobs = app.blobs.clone();
    let prefix = task.id.clone();
    let kept = tokio::task::spawn_blocking(move || -> std::io::Result<Outputs> {
        let keep = |source: &ResultSource, name: &str| -> std::io::Result<(String, u64)> {
            match source {
                ResultSource::LocalFile(path) => {
                    let id = format!("{prefix}/{name}");
                    let len = blobs.commit(path, &id)?;
                    Ok((id, len))
                }
                ResultSource::Url(_) => Err(std::io::Error::other(
                    "downloading upstream results is not supported by this build",
                )),
            }
        };
        let (video, video_bytes) = keep(&files.video, "video.mp4")?;
        let thumbnail = files
            .thumbnail
            .as_ref()
            .map(|s| keep(s, "thumbnail.png").map(|k| k.0))
            .transpose()?;
        let last_frame = files
            .last_frame
            .as_ref()
            .map(|s| keep(s, "last_frame.png").map(|k| k.0))
            .transpose()?;
        Ok(Outputs {
            video: Some(video),
            thumbnail,
            last_frame,
            video_bytes: Some(video_bytes),
        })
    })
    .await;
    let outputs = match kept {
        Ok(Ok(outputs)) => outputs,
        Ok(Err(e)) => {
            tracing::error!("engine: task {}: keeping the result: {e}", task.id);
            let _ = blocking(app, move |s| {
                fail(s, &task, "upstream_error", "the result could not be stored")
            })
            .await;
            return;
        }
        Err(e) => {
            tracing::error!("engine: task {}: keeping the result: {e}", task.id);
            return;
        }
    };
    let settle = if task.price > 0 {
        vec![LedgerDraft {
            key_id: task.owner.clone(),
            task_id: task.id.clone(),
            kind: LedgerKind::Settle,
            amount: 0,
        }]
    } else {
        Vec::new()
    };
    let ttl = app.config.tasks.content_ttl_secs;
    let id = task.id.clone();
    let result = blocking(app, move |s| {
        let now = now_secs();
        s.transition(
            &id,
            &[TaskStatus::Running],
            TaskStatus::Succeeded,
            &|t| {
                t.outputs = outputs.clone();
                t.progress = 100;
                t.updated_at = now;
                t.completed_at = Some(now);
                t.expires_at = Some(now + ttl);
            },
            &settle,
        )
    })
    .await;
    if let Err(e) = result {
        if !matches!(
            e,
            StoreError::WrongStatus { .. } | StoreError::TaskNotFound(_)
        ) {
            tracing::error!("engine: task {}: recording success: {e}", task.id);
        }
        let blobs = app.blobs.clone();
        let prefix = task.id.clone();
        let _ = tokio::task::spawn_blocking(move || blobs.delete_prefix(&prefix)).await;
    }
}

/// Fails a task past its deadline with `timeout`, refunding it, and stops the upstream work.
async fn time_out(app: &Arc<App>, task: Task) {
    let owned = task.clone();
    let secs = app.config.tasks.timeout_secs;
    let message = format!("the task did not finish within {secs} s");
    match blocking(app, move |s| fail(s, &owned, "timeout", &message)).await {
        Ok(Some(_)) => {
            if let (Some(name), Some(upstream_id)) =
                (task.channel.as_deref(), task.upstream_id.as_deref())
                && let Some(channel) = app.video_channel_named(name)
            {
                channel.cancel(upstream_id).await;
            }
        }
        Ok(None) => {}
        Err(e) => tracing::error!("engine: task {}: timing out: {e}", task.id),
    }
}

async fn reschedule(app: &Arc<App>, task: &Task, next_ms: u64, count_attempt: bool) {
    let id = task.id.clone();
    let status = task.status;
    let next = next_ms.min(task.deadline_ms);
    let result = blocking(app, move |s| {
        s.transition(
            &id,
            &[status],
            status,
            &|t| {
                if count_attempt {
                    t.attempts += 1;
                }
                t.next_poll_ms = Some(next);
            },
            &[],
        )
    })
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
