//! What the engine asks of a video channel, whatever speaks behind it: [`VideoChannel`]
//! dispatches to the adapter of each kind. The types it speaks in are in `job`.

pub mod job;

use std::time::Duration;

use crate::http::client::{UpstreamError, UpstreamResponse};
use crate::sim::simulator::Simulator;
use crate::vendors::ark::Ark;
use crate::vendors::common::Remote;
use crate::vendors::openai_videos::OpenaiVideos;
use crate::video::job::{PollOutcome, StoredReference, SubmitOutcome, VideoJob};

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

    /// Whether a submission crosses a network, so that its answer can be lost after the
    /// upstream took it (the simulator's is a call in process).
    pub fn is_remote(&self) -> bool {
        !matches!(self, VideoChannel::Simulator(_))
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
