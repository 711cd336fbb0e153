//! The second format's tasks (`/v1/video/generations`): what they keep of their request, and
//! the job and references a channel gets from them.

use channels::{Demand, ReferenceRole, SimDirectives, StoredReference, VideoJob};
use serde::{Deserialize, Serialize};
use store::Task;

use super::stored::read_params;
use video_generations::Role;

/// One referenced asset as the task keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskAsset {
    pub id: String,
    pub role: Role,
    /// Blob id of the asset's stored bytes.
    pub blob: Option<String>,
}

/// What a second-format task keeps of its request (the task's `params`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenParams {
    pub prompt: String,
    pub duration: u32,
    pub resolution: String,
    /// The ratio chosen (never `adaptive`).
    pub ratio: String,
    pub width: u32,
    pub height: u32,
    pub assets: Vec<TaskAsset>,
    pub return_last_frame: bool,
    pub seed: u64,
    #[serde(default)]
    pub sim: SimDirectives,
}

/// The job the channel runs for a second-format task.
pub fn job(task: &Task, upstream_model: String) -> Result<VideoJob, &'static str> {
    let p: GenParams = read_params(task)?;
    let blob_of = |role: Role| {
        p.assets
            .iter()
            .find(|a| a.role == role)
            .and_then(|a| a.blob.clone())
    };
    Ok(VideoJob {
        task_id: task.id.clone(),
        model: upstream_model,
        prompt: p.prompt.clone(),
        width: p.width,
        height: p.height,
        ratio: p.ratio.clone(),
        resolution: Some(p.resolution.clone()),
        duration_secs: p.duration,
        first_frame: blob_of(Role::FirstFrame),
        last_frame: blob_of(Role::LastFrame),
        first_frame_url: None,
        last_frame_url: None,
        audio_url: None,
        reference_video: None,
        reference_video_audio: false,
        return_last_frame: p.return_last_frame,
        seed: i64::try_from(p.seed).ok(),
        sim: p.sim,
    })
}

/// What a second-format task asks of its channel: its tier, duration, ratio, and its assets
/// counted by role.
pub fn demand(p: &GenParams) -> Demand {
    let count = |role: Role| p.assets.iter().filter(|a| a.role == role).count() as u32;
    Demand {
        duration: p.duration,
        resolution: Some(p.resolution.clone()),
        size: None,
        ratio: p.ratio.clone(),
        first_frame: count(Role::FirstFrame) > 0,
        last_frame: count(Role::LastFrame) > 0,
        reference_images: count(Role::ReferenceImage),
        reference_videos: count(Role::ReferenceVideo),
        reference_audios: count(Role::ReferenceAudio),
    }
}

/// The stored references of a second-format task beyond its frames: its `reference_image`,
/// `reference_video` and `reference_audio` assets, in request order (the relay's copies; the
/// engine adds their signed URLs).
pub fn references(task: &Task) -> Result<Vec<StoredReference>, &'static str> {
    let p: GenParams = read_params(task)?;
    Ok(p.assets
        .iter()
        .filter_map(|a| {
            let role = match a.role {
                Role::FirstFrame | Role::LastFrame => return None,
                Role::ReferenceImage => ReferenceRole::Image,
                Role::ReferenceVideo => ReferenceRole::Video,
                Role::ReferenceAudio => ReferenceRole::Audio,
            };
            Some(StoredReference {
                role,
                blob: a.blob.clone()?,
                url: None,
            })
        })
        .collect())
}
