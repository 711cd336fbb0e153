//! The first format's tasks (`/v1/videos`): what they keep of their request, and the job and
//! references a channel gets from them.

use channels::{Demand, ReferenceRole, SimDirectives, StoredReference, VideoJob};
use serde::{Deserialize, Serialize};
use store::Task;

use super::stored::read_params;
use videos_v1::Ratio;

/// What a first-format task keeps of its request (the task's `params`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct V1Params {
    pub prompt: String,
    pub width: u32,
    pub height: u32,
    pub aspect_ratio: Ratio,
    pub duration: u32,
    /// Blob ids of the stored frames.
    pub first_frame: Option<String>,
    pub last_frame: Option<String>,
    /// The audio and video references given as URLs: checked by the relay, fetched by the
    /// upstream itself.
    pub audio: Option<String>,
    pub reference_video: Option<String>,
    /// Blob ids of the relay's copies of the audio and video references given as a file part
    /// or a `data:` URI.
    #[serde(default)]
    pub audio_blob: Option<String>,
    #[serde(default)]
    pub reference_video_blob: Option<String>,
    pub reference_video_audio: bool,
    #[serde(default)]
    pub sim: SimDirectives,
    /// The task this one remixes (`POST /v1/videos/{id}/remix`).
    #[serde(default)]
    pub remixed_from: Option<String>,
    /// The task this one edits (`POST /v1/videos/edits`).
    #[serde(default)]
    pub edited_from: Option<String>,
    /// The task this one extends (`POST /v1/videos/extensions`); `duration` is then the
    /// stitched total, the source's seconds and the extension's.
    #[serde(default)]
    pub extended_from: Option<String>,
}

/// The job the channel runs for a first-format task.
pub fn job(task: &Task, upstream_model: String) -> Result<VideoJob, &'static str> {
    let p: V1Params = read_params(task)?;
    Ok(VideoJob {
        task_id: task.id.clone(),
        model: upstream_model,
        prompt: p.prompt,
        width: p.width,
        height: p.height,
        ratio: p.aspect_ratio.as_str().to_owned(),
        resolution: None,
        duration_secs: p.duration,
        first_frame: p.first_frame,
        last_frame: p.last_frame,
        first_frame_url: None,
        last_frame_url: None,
        audio_url: p.audio,
        reference_video: p.reference_video,
        reference_video_audio: p.reference_video_audio,
        return_last_frame: false,
        seed: None,
        sim: p.sim,
    })
}

/// The frames and references a first-format request gives, for its [`Demand`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Given {
    pub first_frame: bool,
    pub last_frame: bool,
    pub audio: bool,
    pub video: bool,
}

/// What a first-format request of `width` x `height` at `ratio` for `duration` seconds with
/// `given` asks of its channel (the tier is the smallest the model makes at least as large as
/// the size): the handler checks it before the task exists, the engine routes by it.
pub fn demand_of(width: u32, height: u32, ratio: Ratio, duration: u32, given: Given) -> Demand {
    Demand {
        duration,
        resolution: None,
        size: Some((width, height)),
        ratio: ratio.as_str().to_owned(),
        first_frame: given.first_frame,
        last_frame: given.last_frame,
        reference_images: 0,
        reference_videos: u32::from(given.video),
        reference_audios: u32::from(given.audio),
    }
}

/// What a first-format task asks of its channel.
pub fn demand(p: &V1Params) -> Demand {
    let given = Given {
        first_frame: p.first_frame.is_some(),
        last_frame: p.last_frame.is_some(),
        audio: p.audio.is_some() || p.audio_blob.is_some(),
        video: p.reference_video.is_some() || p.reference_video_blob.is_some(),
    };
    demand_of(p.width, p.height, p.aspect_ratio, p.duration, given)
}

/// The relay's copies of a first-format task's audio and video references, for the channel
/// (the video first, as the `ark` content array lists URL references too); the engine adds
/// their signed URLs.
pub fn references(task: &Task) -> Result<Vec<StoredReference>, &'static str> {
    let p: V1Params = read_params(task)?;
    let stored = [
        (p.reference_video_blob, ReferenceRole::Video),
        (p.audio_blob, ReferenceRole::Audio),
    ];
    Ok(stored
        .into_iter()
        .filter_map(|(blob, role)| {
            Some(StoredReference {
                role,
                blob: blob?,
                url: None,
            })
        })
        .collect())
}
