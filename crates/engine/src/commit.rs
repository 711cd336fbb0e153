//! Keeping a finished task's result files and recording its success with the settlement: the
//! price of what the vendor reports it made, at most the pre-deduction ([`settlement`]).

use std::sync::Arc;

use channels::{ResultSource, VideoChannel};
use store::{Outputs, StoreError, Task, TaskStatus};

use crate::clock::{now_ms, now_secs};
use crate::download::download_results;
use crate::formats;
use crate::schedule::{backoff, fail_task, reschedule};
use crate::settlement;
use crate::state::Engine;
use crate::steps::settle_at;

/// Keeps the result files in the blob store, then moves the task to `succeeded` with its
/// settlement. If the task ended meanwhile (cancelled), the files are removed again.
pub(crate) async fn succeed(
    engine: &Arc<Engine>,
    task: Task,
    channel: &Arc<VideoChannel>,
    files: channels::ResultFiles,
) {
    let files = match download_results(engine, &task, channel, files).await {
        Ok(files) => files,
        Err(failure) if failure.paced => {
            // The channel's call rate could not spare a download soon: poll again at the
            // task's turn (for a fresh URL, too), without counting it against the task.
            let turn = engine.routing.call_turn(channel.name());
            let next = now_ms() + (turn.as_millis() as u64).max(1);
            reschedule(engine, &task, next, false).await;
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
            if failure.retry && attempts < engine.settings.submit_attempts.max(1) {
                // The task stays running: the next poll asks the upstream again (for a fresh
                // URL, too) and downloads again.
                let next = now_ms() + backoff(engine, channel.min_poll_interval(), attempts);
                reschedule(engine, &task, next, true).await;
                return;
            }
            fail_task(
                engine,
                &task,
                "upstream_error",
                "the result could not be downloaded from the upstream",
            )
            .await;
            return;
        }
    };
    let kept = keep_results(engine, &task.id, &files).await;
    let outputs = match kept {
        Ok(outputs) => outputs,
        Err(e) => {
            tracing::error!("engine: task {}: keeping the result: {e}", task.id);
            fail_task(
                engine,
                &task,
                "upstream_error",
                "the result could not be stored",
            )
            .await;
            return;
        }
    };
    let settle = settle_at(&task, charged(engine, &task, channel, &files.usage));
    let ttl = engine.settings.content_ttl_secs;
    let now = now_secs();
    let result = engine
        .store
        .transition(
            &task.id,
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
        .await;
    if let Ok(done) = &result {
        engine.finished(done);
    }
    if let Err(e) = result {
        if !matches!(
            e,
            StoreError::WrongStatus { .. } | StoreError::TaskNotFound(_)
        ) {
            tracing::error!("engine: task {}: recording success: {e}", task.id);
        }
        if let Err(e) = engine.blobs.delete_prefix(&task.id).await {
            tracing::warn!("engine: task {}: removing its result files: {e}", task.id);
        }
    }
}

/// What `task` is charged for the video `channel` made, by what its vendor reports
/// (`settlement::charged`); a report that cannot be read is logged and charged the
/// pre-deduction.
fn charged(
    engine: &Engine,
    task: &Task,
    channel: &VideoChannel,
    usage: &channels::VendorUsage,
) -> i64 {
    let asked = match formats::demand(task) {
        Ok(asked) => asked,
        Err(_) => return task.price,
    };
    let price = engine.prices.get(&task.model);
    match settlement::charged(task.price, &asked, usage, price) {
        Ok(charged) => {
            if charged < task.price {
                tracing::info!(
                    task = %task.id,
                    channel = channel.name(),
                    "engine: task {}: channel {} reports a video of {usage:?}: charged {charged} \
                     of the {} pre-deducted",
                    task.id,
                    channel.name(),
                    task.price
                );
            }
            charged
        }
        Err(reason) => {
            tracing::warn!(
                task = %task.id,
                channel = channel.name(),
                "engine: task {}: channel {}: what it reports of the video cannot be read \
                 ({reason}); settled at the pre-deduction of {}",
                task.id,
                channel.name(),
                task.price
            );
            task.price
        }
    }
}

/// Commits the result files as blobs `<task>/video.mp4`, `<task>/thumbnail.<ext>` and
/// `<task>/last_frame.<ext>` (streamed up by a remote blob store).
async fn keep_results(
    engine: &Arc<Engine>,
    task_id: &str,
    files: &channels::ResultFiles,
) -> std::io::Result<Outputs> {
    let keep = async |source: &ResultSource, name: &str| -> std::io::Result<(String, u64)> {
        let ResultSource::LocalFile(path) = source else {
            return Err(std::io::Error::other(
                "a result URL was not downloaded first",
            ));
        };
        let id = format!("{task_id}/{name}");
        let len = engine.blobs.commit(path, &id).await?;
        Ok((id, len))
    };
    // Images are named by their sniffed type (an upstream's last frame may be a JPEG or
    // WebP): `/files/...` serves a blob with the type its name ends in.
    let keep_image = async |source: &ResultSource, stem: &str| -> std::io::Result<String> {
        let name = format!("{stem}.{}", image_extension(source).await?);
        keep(source, &name).await.map(|k| k.0)
    };
    let (video, video_bytes) = keep(&files.video, "video.mp4").await?;
    let thumbnail = match &files.thumbnail {
        Some(s) => Some(keep_image(s, "thumbnail").await?),
        None => None,
    };
    let last_frame = match &files.last_frame {
        Some(s) => Some(keep_image(s, "last_frame").await?),
        None => None,
    };
    let spritesheet = match &files.spritesheet {
        Some(s) => Some(keep_image(s, "spritesheet").await?),
        None => None,
    };
    Ok(Outputs {
        video: Some(video),
        thumbnail,
        last_frame,
        spritesheet,
        video_bytes: Some(video_bytes),
    })
}

/// The file name ending of a result image by its first bytes (`png` when it is no image
/// format we know; downloads were checked to be one).
async fn image_extension(source: &ResultSource) -> std::io::Result<&'static str> {
    use tokio::io::AsyncReadExt;
    let ResultSource::LocalFile(path) = source else {
        return Err(std::io::Error::other(
            "a result URL was not downloaded first",
        ));
    };
    let mut head = Vec::with_capacity(64);
    tokio::fs::File::open(path)
        .await?
        .take(64)
        .read_to_end(&mut head)
        .await?;
    Ok(match fetch::sniff(&head) {
        Some(fetch::Format::Jpeg) => "jpg",
        Some(fetch::Format::Webp) => "webp",
        _ => "png",
    })
}
