//! What the engine asks of a video channel, whatever speaks behind it.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sim_directives::SimDirectives;
use crate::simulator::Simulator;

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
    pub audio_url: Option<String>,
    pub reference_video: Option<String>,
    pub reference_video_audio: bool,
    pub return_last_frame: bool,
    pub seed: Option<i64>,
    #[serde(default)]
    pub sim: SimDirectives,
}

/// Answer to a submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// The upstream took the task; it must never be submitted again.
    Accepted { upstream_id: String },
    /// Not accepted; trying again (here or on another channel) may work.
    Retry(String),
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
}

/// A configured video channel. An enum, not a trait object: the set of kinds is closed and
/// small, and each arm is plain async code.
pub enum VideoChannel {
    Simulator(Simulator),
}

impl VideoChannel {
    pub fn name(&self) -> &str {
        match self {
            VideoChannel::Simulator(sim) => sim.name(),
        }
    }

    /// The channel kind as configured (`simulator`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            VideoChannel::Simulator(_) => "simulator",
        }
    }

    pub fn serves(&self, model: &str) -> bool {
        match self {
            VideoChannel::Simulator(sim) => sim.serves(model),
        }
    }

    /// The upstream's name for `model`.
    pub fn upstream_model(&self, model: &str) -> String {
        match self {
            VideoChannel::Simulator(_) => model.to_owned(),
        }
    }

    /// The channel's moderation verdict on a finished task: `true` rejects. `reject` is the
    /// task's own `x-relay-sim: reject` directive (honoured by the simulator only).
    pub fn moderation_rejects(&self, prompt: &str, reject: bool) -> bool {
        match self {
            VideoChannel::Simulator(sim) => {
                sim.moderation_rejects(prompt, reject && sim.scenarios())
            }
        }
    }

    /// Polls of one task never come faster than this.
    pub fn min_poll_interval(&self) -> Duration {
        match self {
            VideoChannel::Simulator(sim) => sim.min_poll_interval(),
        }
    }

    pub async fn submit(&self, job: &VideoJob) -> SubmitOutcome {
        match self {
            VideoChannel::Simulator(sim) => sim.submit(job).await,
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
        }
    }

    /// Best effort: asks the upstream to stop a task.
    pub async fn cancel(&self, upstream_id: &str) {
        match self {
            VideoChannel::Simulator(sim) => sim.cancel(upstream_id).await,
        }
    }
}
