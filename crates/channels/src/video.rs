//! What the engine asks of a video channel, whatever speaks behind it.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ark::Ark;
use crate::openai_videos::OpenaiVideos;
use crate::remote::Remote;
use crate::sim_directives::SimDirectives;
use crate::simulator::Simulator;
use crate::upstream_http::{UpstreamError, UpstreamResponse};

/// A task as a channel sees it: the normalised request, nothing of the client's key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideoJob {
    pub task_id: String,
    /// The model name as the upstream knows it.
    pub model: String,
    pub prompt: String,
    pub width: u32,
    pub height: u32,
    /// `16:9`, `9:16`, ...
    pub ratio: String,
    /// Second format's tier (`720p`), when the request had one.
    pub resolution: Option<String>,
    pub duration_secs: u32,
    /// Blob ids of stored reference images.
    pub first_frame: Option<String>,
    pub last_frame: Option<String>,
    /// Signed URLs of the relay's own copies of the frames, when the relay is reachable from
    /// the internet (`public_base_url`): used by upstreams that fetch references themselves
    /// when a frame is too large to send inline.
    #[serde(default)]
    pub first_frame_url: Option<String>,
    #[serde(default)]
    pub last_frame_url: Option<String>,
    pub audio_url: Option<String>,
    pub reference_video: Option<String>,
    pub reference_video_audio: bool,
    pub return_last_frame: bool,
    pub seed: Option<i64>,
    #[serde(default)]
    pub sim: SimDirectives,
}

/// What a stored reference is to the upstream (the second format's asset roles beyond the
/// first and last frames, which [`VideoJob`] carries itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceRole {
    Image,
    Video,
    Audio,
}

impl ReferenceRole {
    /// The role as the `ark` protocol names it.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReferenceRole::Image => "reference_image",
            ReferenceRole::Video => "reference_video",
            ReferenceRole::Audio => "reference_audio",
        }
    }
}

/// A reference the relay keeps in its blob store (an asset's bytes), sent along with a
/// submission in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredReference {
    pub role: ReferenceRole,
    /// Blob id of the relay's copy.
    pub blob: String,
    /// The relay's signed URL of that copy, when the internet can reach the relay
    /// (`public_base_url`): used when the bytes are too large to send inline.
    pub url: Option<String>,
}

/// Answer to a submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// The upstream took the task; it must never be submitted again.
    Accepted { upstream_id: String },
    /// Not accepted; trying again (here or on another channel) may work.
    Retry(String),
    /// Not accepted because the upstream is busy (429): try elsewhere, and give this channel
    /// a rest (`retry_after` when the upstream said how long).
    RateLimited {
        retry_after: Option<Duration>,
        reason: String,
    },
    /// Not accepted, and retrying cannot help.
    Fatal(String),
}

/// Where a finished task's file can be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultSource {
    /// A temporary file written by the channel, to be committed into the blob store.
    LocalFile(PathBuf),
    /// An upstream URL to download (it may expire).
    Url(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultFiles {
    pub video: ResultSource,
    pub thumbnail: Option<ResultSource>,
    pub last_frame: Option<ResultSource>,
}

/// Answer to a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollOutcome {
    /// Still running; `next_poll` is the channel's hint for the next look.
    Running {
        progress: u8,
        next_poll: Option<Duration>,
    },
    Succeeded(ResultFiles),
    /// Ended without a result; `code` is the task record's `error.code`.
    Failed {
        code: String,
        message: String,
    },
    /// The poll itself failed; the task is unchanged and will be polled again.
    Transient(String),
    /// The upstream answered with a status we do not know (or an unreadable body): counted
    /// as still running for a bounded number of polls, then the task fails.
    Unknown(String),
}

/// A configured video channel. An enum, not a trait object: the set of kinds is closed and
/// small, and each arm is plain async code.
pub enum VideoChannel {
    Simulator(Simulator),
    OpenaiVideos(OpenaiVideos),
    Ark(Ark),
}

impl VideoChannel {
    pub fn name(&self) -> &str {
        match self {
            VideoChannel::Simulator(sim) => sim.name(),
            VideoChannel::OpenaiVideos(c) => c.remote().name(),
            VideoChannel::Ark(c) => c.remote().name(),
        }
    }

    /// The channel kind as configured (`simulator`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            VideoChannel::Simulator(_) => "simulator",
            VideoChannel::OpenaiVideos(_) => "openai-videos",
            VideoChannel::Ark(_) => "ark",
        }
    }

    pub fn serves(&self, model: &str) -> bool {
        match self {
            VideoChannel::Simulator(sim) => sim.serves(model),
            VideoChannel::OpenaiVideos(c) => c.remote().settings.models.iter().any(|m| m == model),
            VideoChannel::Ark(c) => c.remote().settings.models.iter().any(|m| m == model),
        }
    }

    /// The upstream's name for `model`.
    pub fn upstream_model(&self, model: &str) -> String {
        match self {
            VideoChannel::Simulator(_) => model.to_owned(),
            VideoChannel::OpenaiVideos(_) | VideoChannel::Ark(_) => self
                .remote()
                .and_then(|r| r.settings.model_map.get(model).cloned())
                .unwrap_or_else(|| model.to_owned()),
        }
    }

    /// The channel's moderation verdict on a finished task: `true` rejects. `reject` is the
    /// task's own `x-relay-sim: reject` directive (honoured by the simulator only).
    pub fn moderation_rejects(&self, prompt: &str, reject: bool) -> bool {
        match self {
            VideoChannel::Simulator(sim) => {
                sim.moderation_rejects(prompt, reject && sim.scenarios())
            }
            // Real upstreams moderate while generating: a finished task passed.
            VideoChannel::OpenaiVideos(_) | VideoChannel::Ark(_) => false,
        }
    }

    /// Polls of one task never come faster than this.
    pub fn min_poll_interval(&self) -> Duration {
        match self {
            VideoChannel::Simulator(sim) => sim.min_poll_interval(),
            VideoChannel::OpenaiVideos(_) | VideoChannel::Ark(_) => self
                .remote()
                .map(|r| r.settings.min_poll_interval)
                .unwrap_or_default(),
        }
    }

    /// Submits `job` with its stored `references` (channels that have no field for them
    /// leave them out, with a warning; the simulator looks at them and renders without them).
    pub async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        match self {
            VideoChannel::Simulator(sim) => sim.submit(job, references).await,
            VideoChannel::OpenaiVideos(c) => c.submit(job, references).await,
            VideoChannel::Ark(c) => c.submit(job, references).await,
        }
    }

    /// `submitted_ms` is when the upstream accepted the task (unix ms).
    pub async fn poll(
        &self,
        job: &VideoJob,
        upstream_id: &str,
        submitted_ms: u64,
        now_ms: u64,
    ) -> PollOutcome {
        match self {
            VideoChannel::Simulator(sim) => sim.poll(job, upstream_id, submitted_ms, now_ms).await,
            VideoChannel::OpenaiVideos(c) => c.poll(upstream_id).await,
            VideoChannel::Ark(c) => c.poll(upstream_id).await,
        }
    }

    /// Best effort: asks the upstream to stop a task.
    pub async fn cancel(&self, upstream_id: &str) {
        match self {
            VideoChannel::Simulator(sim) => sim.cancel(upstream_id).await,
            VideoChannel::OpenaiVideos(c) => c.cancel(upstream_id).await,
            VideoChannel::Ark(c) => c.cancel(upstream_id).await,
        }
    }

    /// Starts the download of a result URL given by this channel's `poll`, with the
    /// channel's key when the URL is on its own host. The body is streamed.
    pub async fn download(&self, url: &str) -> Result<UpstreamResponse, UpstreamError> {
        match self {
            VideoChannel::Simulator(_) => Err(UpstreamError::Build(
                "the simulator has no result URLs".into(),
            )),
            VideoChannel::OpenaiVideos(c) => c.download(url).await,
            VideoChannel::Ark(c) => c.download(url).await,
        }
    }

    fn remote(&self) -> Option<&Remote> {
        match self {
            VideoChannel::Simulator(_) => None,
            VideoChannel::OpenaiVideos(c) => Some(c.remote()),
            VideoChannel::Ark(c) => Some(c.remote()),
        }
    }
}
