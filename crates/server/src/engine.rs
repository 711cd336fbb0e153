//! The task engine: drives every unfinished task to a final status through its channel.
//!
//! The schedule lives in the store (each task's `next_poll_ms`, indexed), so after a restart
//! the engine simply finds the due tasks again. Every status change is a `transition`, so a
//! cancel racing a completion settles or refunds exactly once, whoever wins.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use channels::{
    PollOutcome, ResultFiles, ResultSource, StoredReference, SubmitOutcome, VideoChannel, VideoJob,
};
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
/// The longest a submission waits for a call of its channel's `max_calls_per_sec`; past it
/// the next channel is tried, or the task comes back at its turn.
const SUBMIT_CALL_WAIT: Duration = Duration::from_secs(1);
/// The same for each download of a result; past it what was downloaded is given up and the
/// task is polled again at its turn.
const DOWNLOAD_CALL_WAIT: Duration = Duration::from_secs(5);
/// The longest an engine step waits for one of its channel's `max_concurrency` permits.
const PERMIT_WAIT: Duration = Duration::from_secs(1);
/// The same for a cancel, which runs in the background; past it the cancel is left out.
const CANCEL_CALL_WAIT: Duration = Duration::from_secs(10);

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
    // The due list may be older than the last step of this task (a step that ended while the
    // list was being worked through): act on the task as it is now, if it is still due.
    let id = task.id.clone();
    let task = match blocking(app, move |s| s.task(&id)).await {
        Ok(Some(task)) => task,
        Ok(None) => return,
        Err(e) => {
            tracing::error!("engine: task {}: reading it: {e}", task.id);
            return;
        }
    };
    let now = now_ms();
    if task.status.is_final() || task.next_poll_ms.is_some_and(|at| at > now) {
        return;
    }
    if now >= task.deadline_ms {
        time_out(app, task).await;
        return;
    }
    match (task.status, task.upstream_id.clone()) {
        (TaskStatus::Queued, _) | (TaskStatus::Running, None) => submit(app, task).await,
        (TaskStatus::Running, Some(upstream_id)) => {
            let channel = task
                .channel
                .as_deref()
                .and_then(|name| app.video_channel_named(name))
                .cloned();
            let Some(channel) = channel else {
                // Its channel is gone from the configuration; look again later.
                reschedule(app, &task, now + 5_000, false).await;
                return;
            };
            let job = match job_for(app, &task, &channel) {
                Ok(job) => job,
                Err(message) => {
                    let owned = task.clone();
                    let _ =
                        blocking(app, move |s| fail(s, &owned, "upstream_error", &message)).await;
                    return;
                }
            };
            poll(app, task, &channel, &job, &upstream_id).await
        }
        _ => {}
    }
}

fn job_for(app: &App, task: &Task, channel: &VideoChannel) -> Result<VideoJob, String> {
    let upstream_model = channel.upstream_model(&task.model);
    let mut job = match task.kind {
        TaskKind::Video => crate::videos::job(task, upstream_model).map_err(|e| e.detail)?,
        TaskKind::Generation => {
            crate::generations::job(task, upstream_model).map_err(|e| e.detail)?
        }
    };
    // Upstreams fetch frames too large to inline from the relay, when the internet can reach it.
    if is_public(&app.config.server.public_base_url) {
        let base = &app.config.server.public_base_url;
        let expires = now_secs() + app.config.server.signed_url_ttl_secs.max(3600);
        job.first_frame_url = job
            .first_frame
            .as_ref()
            .map(|b| app.signer.url(base, b, expires));
        job.last_frame_url = job
            .last_frame
            .as_ref()
            .map(|b| app.signer.url(base, b, expires));
    }
    Ok(job)
}

/// The stored references of a task beyond its frames (the first format's audio and video
/// given as a file part or a `data:` URI; the second format's reference images, video and
/// audio), with the relay's signed URLs when the internet can reach it.
fn references_for(app: &App, task: &Task) -> Result<Vec<StoredReference>, String> {
    let mut references = match task.kind {
        TaskKind::Video => crate::videos::references(task).map_err(|e| e.detail)?,
        TaskKind::Generation => crate::generations::references(task).map_err(|e| e.detail)?,
    };
    if is_public(&app.config.server.public_base_url) {
        let base = &app.config.server.public_base_url;
        let expires = now_secs() + app.config.server.signed_url_ttl_secs.max(3600);
        for r in &mut references {
            r.url = Some(app.signer.url(base, &r.blob, expires));
        }
    }
    Ok(references)
}

/// Whether a base URL names a host other machines can reach: not empty, not localhost, not a
/// loopback, private or link-local address.
fn is_public(base: &str) -> bool {
    let Some(rest) = base
        .strip_prefix("https://")
        .or_else(|| base.strip_prefix("http://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() || host.eq_ignore_ascii_case("localhost") {
        return false;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => {
            !(ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified())
        }
        Ok(std::net::IpAddr::V6(ip)) => !(ip.is_loopback() || ip.is_unspecified()),
        Err(_) => true,
    }
}

fn record(app: &App, channel: &VideoChannel, ok: bool) {
    if let Some(stats) = app.channel_stats.get(channel.name()) {
        stats.record(ok);
    }
}

/// `base` doubled per attempt, capped by `poll_interval_max_ms`.
fn backoff(app: &App, base: Duration, attempts: u32) -> u64 {
    let base = base.as_millis() as u64;
    let cap = app.config.tasks.poll_interval_max_ms.max(base);
    base.saturating_mul(1u64 << attempts.min(16)).min(cap)
}

/// A permit for one upstream call of `channel` (its concurrency cap).
async fn call_permit(
    app: &App,
    channel: &VideoChannel,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let permits = app.routing.permits(channel.name())?;
    permits.acquire_owned().await.ok()
}

/// A permit for one upstream call of `channel`, waiting at most [`PERMIT_WAIT`] for one
/// (first come, first served): `Err` when the channel stayed at its cap that long, so a slow
/// channel holds an engine step for a bounded time only. Waiting rather than putting the task
/// off keeps the due order: a channel at its cap serves its tasks in turn instead of polling
/// some again and again while others wait a whole interval each time.
async fn call_permit_within(
    app: &App,
    channel: &VideoChannel,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ()> {
    let Some(permits) = app.routing.permits(channel.name()) else {
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

/// Submits a task that no upstream has accepted yet: to the channel routing picks, then,
/// while submissions fail before acceptance (connect error, 429, 5xx), to the next one.
/// Once a channel accepted it the task is never submitted again.
async fn submit(app: &Arc<App>, task: Task) {
    let mut tried: Vec<String> = Vec::new();
    // The channel whose submission just failed, when the loop moves on from it.
    let mut moved_from: Option<String> = None;
    let mut counted = false;
    // Channels passed over because their call rate had no call to spare soon enough.
    let mut paced: Vec<String> = Vec::new();
    let mut base = Duration::from_millis(app.config.tasks.poll_interval_min_ms.clamp(1, 1000));
    let references = match references_for(app, &task) {
        Ok(references) => references,
        Err(message) => {
            let _ = blocking(app, move |s| fail(s, &task, "upstream_error", &message)).await;
            return;
        }
    };
    while let Some(channel) = app.routing.pick(&app.video_channels, &task.model, &tried) {
        if let Some(previous) = moved_from.take() {
            app.routing.failed_over(&previous);
            tracing::info!(
                "engine: task {}: failing over from channel {previous} to {}",
                task.id,
                channel.name()
            );
        }
        let job = match job_for(app, &task, &channel) {
            Ok(job) => job,
            Err(message) => {
                let _ = blocking(app, move |s| fail(s, &task, "upstream_error", &message)).await;
                return;
            }
        };
        let Ok(permit) = call_permit_within(app, &channel).await else {
            // At its cap: try another channel, or this one again soon.
            tried.push(channel.name().to_owned());
            continue;
        };
        match app.routing.reserve_call(channel.name(), SUBMIT_CALL_WAIT) {
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
        let outcome = channel.submit(&job, &references).await;
        drop(permit);
        record(
            app,
            &channel,
            matches!(outcome, SubmitOutcome::Accepted { .. }),
        );
        let name = channel.name().to_owned();
        base = base.min(channel.min_poll_interval().max(Duration::from_millis(1)));
        match outcome {
            SubmitOutcome::Accepted { upstream_id } => {
                app.routing.success(&name);
                accept(app, task, &channel, upstream_id).await;
                return;
            }
            SubmitOutcome::Retry(reason) => {
                app.routing.failure(&name);
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
                app.routing.rate_limited(&name, retry_after);
                tracing::warn!(
                    "engine: task {}: submission rate limited: {reason}",
                    task.id
                );
            }
            SubmitOutcome::Fatal(reason) => {
                tracing::warn!("engine: task {}: submission refused: {reason}", task.id);
                let _ = blocking(app, move |s| {
                    fail(s, &task, "upstream_error", "the upstream refused the task")
                })
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
        let wait = if app.video_channel_for(&task.model).is_some() {
            500
        } else {
            5_000
        };
        reschedule(app, &task, now + wait, false).await;
        return;
    }
    if !counted {
        // Only 429s and call rates: not the task's fault; try again once the channels have
        // rested, or at the task's turn on the channel with the soonest one.
        let turn = paced.iter().map(|name| app.routing.call_turn(name)).min();
        let wait = turn.map_or(base, |turn| turn.max(Duration::from_millis(1)));
        reschedule(app, &task, now + wait.as_millis() as u64, false).await;
        return;
    }
    let attempts = task.attempts + 1;
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
        let next = now + backoff(app, base, attempts);
        reschedule(app, &task, next, true).await;
    }
}

/// Records an accepted submission: `running` with the channel and upstream id.
async fn accept(app: &Arc<App>, task: Task, channel: &Arc<VideoChannel>, upstream_id: String) {
    let now = now_ms();
    let id = task.id.clone();
    let accepted_id = upstream_id.clone();
    let name = channel.name().to_owned();
    let next = (now + channel.min_poll_interval().as_millis() as u64).min(task.deadline_ms);
    let from = task.status;
    let result = blocking(app, move |s| {
        s.transition(
            &id,
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
    })
    .await;
    match result {
        Ok(_) => {}
        // Cancelled (or timed out) while submitting: stop the upstream work too.
        Err(StoreError::WrongStatus { .. }) => {
            cancel_upstream(app, channel.clone(), accepted_id);
        }
        Err(e) => {
            tracing::error!("engine: task {}: recording the submission: {e}", task.id)
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
    let Ok(permit) = call_permit_within(app, channel).await else {
        // The channel stayed at its cap: look again after its poll interval.
        let next = now_ms() + channel.min_poll_interval().as_millis() as u64;
        reschedule(app, &task, next, false).await;
        return;
    };
    if let Err(turn) = app.routing.take_call(channel.name()) {
        // Over the channel's call rate: put off to the task's turn, holding nothing meanwhile.
        drop(permit);
        let next = now_ms() + (turn.as_millis() as u64).max(1);
        reschedule(app, &task, next, false).await;
        return;
    }
    let outcome = channel.poll(job, upstream_id, submitted, now_ms()).await;
    drop(permit);
    let answered = !matches!(outcome, PollOutcome::Transient(_));
    record(app, channel, answered);
    if answered {
        app.routing.success(channel.name());
    } else {
        app.routing.failure(channel.name());
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
            let cap = app.config.tasks.poll_interval_max_ms.max(min);
            let wait = match next_poll {
                Some(hint) => (hint.as_millis() as u64).max(min),
                None => grown.clamp(min, cap),
            };
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
        PollOutcome::Succeeded(files) => succeed(app, task, channel, files).await,
        PollOutcome::Failed { code, message } => {
            let _ = blocking(app, move |s| fail(s, &task, &code, &message)).await;
        }
        PollOutcome::Transient(reason) => {
            let attempts = task.attempts + 1;
            tracing::warn!("engine: task {}: poll failed: {reason}", task.id);
            let next = now + backoff(app, channel.min_poll_interval(), attempts);
            reschedule(app, &task, next, true).await;
        }
        PollOutcome::Unknown(reason) => {
            let attempts = task.attempts + 1;
            tracing::warn!(
                "engine: task {}: poll {attempts} gave no known status: {reason}",
                task.id
            );
            if attempts >= app.config.tasks.unknown_status_polls.max(1) {
                let _ = blocking(app, move |s| {
                    fail(
                        s,
                        &task,
                        "upstream_error",
                        "the upstream reported a status the relay does not know",
                    )
                })
                .await;
            } else {
                let next = now + channel.min_poll_interval().as_millis() as u64;
                reschedule(app, &task, next, true).await;
            }
        }
    }
}

/// Keeps the result files in the blob store, then moves the task to `succeeded` with its
/// settlement. If the task ended meanwhile (cancelled), the files are removed again.
async fn succeed(
    app: &Arc<App>,
    task: Task,
    channel: &Arc<VideoChannel>,
    files: channels::ResultFiles,
) {
    let files = match download_results(app, &task, channel, files).await {
        Ok(files) => files,
        Err(failure) if failure.paced => {
            // The channel's call rate could not spare a download soon: poll again at the
            // task's turn (for a fresh URL, too), without counting it against the task.
            let turn = app.routing.call_turn(channel.name());
            let next = now_ms() + (turn.as_millis() as u64).max(1);
            reschedule(app, &task, next, false).await;
            return;
        }
        Err(failure) => {
            tracing::warn!(
                "engine: task {}: channel {}: downloading the result: {}",
                task.id,
                channel.name(),
                failure.reason
            );
            let attempts = task.attempts + 1;
            if failure.retry && attempts < app.config.tasks.submit_attempts.max(1) {
                // The task stays running: the next poll asks the upstream again (for a fresh
                // URL, too) and downloads again.
                let next = now_ms() + backoff(app, channel.min_poll_interval(), attempts);
                reschedule(app, &task, next, true).await;
                return;
            }
            let _ = blocking(app, move |s| {
                fail(
                    s,
                    &task,
                    "upstream_error",
                    "the result could not be downloaded from the upstream",
                )
            })
            .await;
            return;
        }
    };
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
                    "a result URL was not downloaded first",
                )),
            }
        };
        // Images are named by their sniffed type (an upstream's last frame may be a JPEG or
        // WebP): `/files/...` serves a blob with the type its name ends in.
        let keep_image = |source: &ResultSource, stem: &str| {
            keep(source, &format!("{stem}.{}", image_extension(source)?)).map(|k| k.0)
        };
        let (video, video_bytes) = keep(&files.video, "video.mp4")?;
        let thumbnail = files
            .thumbnail
            .as_ref()
            .map(|s| keep_image(s, "thumbnail"))
            .transpose()?;
        let last_frame = files
            .last_frame
            .as_ref()
            .map(|s| keep_image(s, "last_frame"))
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

/// The file name ending of a result image by its first bytes (`png` when it is no image
/// format we know; downloads were checked to be one). Blocking.
fn image_extension(source: &ResultSource) -> std::io::Result<&'static str> {
    use std::io::Read;
    let ResultSource::LocalFile(path) = source else {
        return Err(std::io::Error::other(
            "a result URL was not downloaded first",
        ));
    };
    let mut head = Vec::with_capacity(64);
    std::fs::File::open(path)?.take(64).read_to_end(&mut head)?;
    Ok(match fetch::sniff(&head) {
        Some(fetch::Format::Jpeg) => "jpg",
        Some(fetch::Format::Webp) => "webp",
        _ => "png",
    })
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
                cancel_upstream(app, channel.clone(), upstream_id.to_owned());
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

/// What a downloaded result must be.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Video,
    Image,
}

/// Turns the URL results into local files: the video must download whole; a thumbnail or
/// last frame that cannot be had is left out (with a warning). A download the channel's call
/// rate cannot spare soon puts off the whole result: what was downloaded is removed.
async fn download_results(
    app: &Arc<App>,
    task: &Task,
    channel: &Arc<VideoChannel>,
    files: ResultFiles,
) -> Result<ResultFiles, DownloadFailure> {
    // The temp files downloaded so far, removed if the result is put off.
    let mut temps: Vec<std::path::PathBuf> = Vec::new();
    let mut note = |was_url: bool, local: &ResultSource| {
        if let (true, ResultSource::LocalFile(path)) = (was_url, local) {
            temps.push(path.clone());
        }
    };
    let was_url = matches!(files.video, ResultSource::Url(_));
    let video = localize(app, channel, files.video, Expect::Video).await?;
    note(was_url, &video);
    let mut images = Vec::with_capacity(2);
    for source in [files.thumbnail, files.last_frame] {
        let Some(source) = source else {
            images.push(None);
            continue;
        };
        let was_url = matches!(source, ResultSource::Url(_));
        match localize(app, channel, source, Expect::Image).await {
            Ok(local) => {
                note(was_url, &local);
                images.push(Some(local));
            }
            Err(failure) if failure.paced => {
                for path in &temps {
                    let _ = tokio::fs::remove_file(path).await;
                }
                return Err(failure);
            }
            Err(failure) => {
                tracing::warn!(
                    "engine: task {}: channel {}: an image result left out: {}",
                    task.id,
                    channel.name(),
                    failure.reason
                );
                images.push(None);
            }
        }
    }
    let mut images = images.into_iter();
    Ok(ResultFiles {
        video,
        thumbnail: images.next().flatten(),
        last_frame: images.next().flatten(),
    })
}

/// Asks the upstream to stop a task, in the background: within the channel's caps (a call
/// permit, and a call of its rate within [`CANCEL_CALL_WAIT`], else the cancel is left out).
pub fn cancel_upstream(app: &Arc<App>, channel: Arc<VideoChannel>, upstream_id: String) {
    let app = app.clone();
    tokio::spawn(async move {
        let _permit = call_permit(&app, &channel).await;
        match app.routing.reserve_call(channel.name(), CANCEL_CALL_WAIT) {
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

/// Downloads a URL result to a temp file of the blob store: streamed (memory stays flat),
/// at most `max_result_bytes`, whole (the declared length, if any, is checked) and of the
/// expected type (sniffed from its first bytes), as a call within the channel's caps. A local
/// file is returned as it is.
async fn localize(
    app: &Arc<App>,
    channel: &Arc<VideoChannel>,
    source: ResultSource,
    expect: Expect,
) -> Result<ResultSource, DownloadFailure> {
    use tokio::io::AsyncWriteExt;
    let url = match source {
        ResultSource::LocalFile(_) => return Ok(source),
        ResultSource::Url(url) => url,
    };
    let max = app.config.tasks.max_result_bytes;
    let final_failure = |reason: String| DownloadFailure {
        retry: false,
        paced: false,
        reason,
    };
    let permit = call_permit(app, channel).await;
    match app.routing.reserve_call(channel.name(), DOWNLOAD_CALL_WAIT) {
        Some(wait) if wait.is_zero() => {}
        Some(wait) => tokio::time::sleep(wait).await,
        None => {
            return Err(DownloadFailure {
                retry: true,
                paced: true,
                reason: "over the channel's call rate".into(),
            });
        }
    }
    let res = channel.download(&url).await.map_err(|e| DownloadFailure {
        retry: !matches!(
            e,
            channels::UpstreamError::Build(_) | channels::UpstreamError::Blocked { .. }
        ),
        paced: false,
        reason: e.to_string(),
    })?;
    let status = res.status;
    if !status.is_success() {
        return Err(DownloadFailure {
            retry: status.is_server_error()
                || status == http::StatusCode::TOO_MANY_REQUESTS
                || status == http::StatusCode::REQUEST_TIMEOUT,
            paced: false,
            reason: format!("the result URL answered {status}"),
        });
    }
    let declared = res
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max) {
        return Err(final_failure(format!(
            "the result is larger than {max} bytes"
        )));
    }
    let path = app.blobs.temp_path();
    let mut body = res.body;
    let written = async {
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| format!("creating a temp file: {e}"))?;
        let mut total: u64 = 0;
        let mut head: Vec<u8> = Vec::new();
        while let Some(chunk) = body.chunk().await.map_err(|e| e.to_string())? {
            total += chunk.len() as u64;
            if total > max {
                return Err(format!("the result is larger than {max} bytes"));
            }
            if head.len() < 64 {
                let take = (64 - head.len()).min(chunk.len());
                head.extend_from_slice(&chunk[..take]);
            }
            file.write_all(&chunk)
                .await
                .map_err(|e| format!("writing a temp file: {e}"))?;
        }
        file.sync_all()
            .await
            .map_err(|e| format!("writing a temp file: {e}"))?;
        if let Some(len) = declared
            && len != total
        {
            return Err(format!("truncated: {total} of {len} bytes"));
        }
        let format = fetch::sniff(&head);
        let fits = match expect {
            Expect::Video => matches!(format, Some(fetch::Format::Mp4 | fetch::Format::Mov)),
            Expect::Image => matches!(
                format,
                Some(fetch::Format::Png | fetch::Format::Jpeg | fetch::Format::Webp)
            ),
        };
        if !fits {
            return Err(format!(
                "not a {expect:?} ({total} bytes, sniffed {format:?})"
            ));
        }
        Ok(())
    }
    .await;
    drop(permit);
    match written {
        Ok(()) => Ok(ResultSource::LocalFile(path)),
        Err(e) => {
            let _ = tokio::fs::remove_file(&path).await;
            Err(final_failure(e))
        }
    }
}

/// Why a result could not be downloaded, and whether asking again may work (connect errors,
/// timeouts before the answer, 408, 429, 5xx). A truncated body, a wrong type or size, or
/// another status fails the task. `paced`: the download was not made, the channel's call
/// rate having no call to spare soon; the task is polled again at its turn.
#[derive(Debug)]
struct DownloadFailure {
    retry: bool,
    paced: bool,
    reason: String,
}

#[cfg(test)]
mod tests {
    use super::is_public;

    #[test]
    fn only_reachable_hosts_are_public() {
        for base in [
            "https://relay.example.com",
            "http://203.0.113.7:8080/",
            "https://[2001:db8::1]:443",
        ] {
            assert!(is_public(base), "{base}");
        }
        for base in [
            "",
            "http://127.0.0.1:8080",
            "http://localhost:8080",
            "http://10.0.0.2",
            "http://192.168.1.5:80",
            "http://[::1]:8080",
            "ftp://relay.example.com",
        ] {
            assert!(!is_public(base), "{base}");
        }
    }
}
