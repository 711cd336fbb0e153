//! A task's job and references as its channel gets them: the format's own, plus the relay's
//! URLs for the stored files when upstreams can reach the relay.

use channels::{StoredReference, VideoChannel, VideoJob};
use store::Task;

use crate::formats;
use crate::state::Engine;

/// The job for `task` on `channel`: the duration and tier the channel's vendor model makes
/// for it (`VideoChannel::fit`: the asked ones, or the next longer duration where the channel
/// allows it), with URLs upstreams can fetch its frames at when the relay is public (frames
/// too large to inline).
pub(crate) fn job_for(
    engine: &Engine,
    task: &Task,
    channel: &VideoChannel,
) -> Result<VideoJob, String> {
    let upstream_model = channel.upstream_model(&task.model);
    let mut job = formats::job(task, upstream_model)?;
    // Routing chose a channel that fits; one that no longer does (its catalog changed since
    // the submission) is polled with the job as asked.
    if let Ok(fit) = channel.fit(&task.model, &formats::demand(task)?) {
        job.duration_secs = fit.duration;
        job.resolution = fit.resolution;
    }
    if let Some(url) = &engine.public_urls {
        job.first_frame_url = job.first_frame.as_deref().map(url);
        job.last_frame_url = job.last_frame.as_deref().map(url);
    }
    Ok(job)
}

/// The stored references of a task beyond its frames (the first format's audio and video
/// given as a file part or a `data:` URI; the second format's reference images, video and
/// audio), with the relay's signed URLs when the internet can reach it.
pub(crate) fn references_for(engine: &Engine, task: &Task) -> Result<Vec<StoredReference>, String> {
    let mut references = formats::references(task)?;
    if let Some(url) = &engine.public_urls {
        for r in &mut references {
            r.url = Some(url(&r.blob));
        }
    }
    Ok(references)
}
