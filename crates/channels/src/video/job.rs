//! The shared types of video channels: the job a channel is given, the stored references that
//! go with it, and the answers to a submission and a poll. Every adapter and the dispatching
//! [`VideoChannel`](crate::VideoChannel) speak in these; this module knows none of them.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sim::directives::SimDirectives;

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

impl VideoJob {
    /// The tier a vendor is asked for: the job's own (lower case), else the first of `tiers`
    /// (each the largest short side it takes, in pixels, and its name, smallest first) that
    /// takes the short side of the job's size, else `top`.
    pub fn tier(&self, tiers: &[(u32, &str)], top: &str) -> String {
        if let Some(tier) = &self.resolution {
            return tier.to_ascii_lowercase();
        }
        let short = self.width.min(self.height);
        tiers
            .iter()
            .find(|(most, _)| short <= *most)
            .map_or(top, |(_, name)| name)
            .to_owned()
    }
}

#[cfg(test)]
impl VideoJob {
    /// A job for the vendors' unit tests: task `video_1`, `model` and `prompt`, 1280x720 at
    /// 16:9 and 720p, 8 s, no seed, no references; each test sets what it reads beside these.
    pub fn test(model: &str, prompt: &str) -> VideoJob {
        VideoJob {
            task_id: "video_1".into(),
            model: model.into(),
            prompt: prompt.into(),
            width: 1280,
            height: 720,
            ratio: "16:9".into(),
            resolution: Some("720p".into()),
            duration_secs: 8,
            first_frame: None,
            last_frame: None,
            first_frame_url: None,
            last_frame_url: None,
            audio_url: None,
            reference_video: None,
            reference_video_audio: false,
            return_last_frame: false,
            seed: None,
            sim: SimDirectives::default(),
        }
    }
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
    /// Not accepted, and certainly not taken: nothing of it reached the upstream (no
    /// connection), or the upstream answered that it took nothing (408, 5xx). Trying again,
    /// here or on another channel, may work and cannot make a second task.
    Retry(String),
    /// Not accepted because the upstream is busy (429): try elsewhere, and give this channel
    /// a rest (`retry_after` when the upstream said how long).
    RateLimited {
        retry_after: Option<Duration>,
        reason: String,
    },
    /// Not accepted, and retrying cannot help.
    Fatal(String),
    /// The upstream refused the request's content (its prompt or images): the task fails with
    /// `code` (`moderation_blocked`) and `message` (the vendor's reason, never its raw body),
    /// and is refunded; no other channel is tried.
    Refused { code: String, message: String },
    /// The submission may have reached the upstream, but no answer says whether it took the
    /// task (the connection broke after the request went out, no answer came in time, a
    /// success without a task id). Sending it again could make a second task, billed twice:
    /// it is never sent again, here or on another channel.
    Ambiguous(String),
}

/// Where a finished task's file can be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultSource {
    /// A temporary file written by the channel, to be committed into the blob store.
    LocalFile(PathBuf),
    /// An upstream URL to download (it may expire).
    Url(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ResultFiles {
    pub video: ResultSource,
    pub thumbnail: Option<ResultSource>,
    pub last_frame: Option<ResultSource>,
    /// A grid of frames (the simulator's own; remote channels have none).
    pub spritesheet: Option<ResultSource>,
    /// What the upstream says it made, for the settlement.
    pub usage: VendorUsage,
}

/// What an upstream reports of the video it made, which the settlement charges for.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum VendorUsage {
    /// The upstream reports nothing (Veo, the simulator): settled as asked.
    #[default]
    NotReported,
    /// The length (seconds, as reported) and the tier it made, where it said.
    Made {
        seconds: Option<f64>,
        resolution: Option<String>,
    },
    /// The upstream's report could not be read (logged): settled at the pre-deduction.
    Unreadable(String),
}

/// Answer to a poll.
#[derive(Debug, Clone, PartialEq)]
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

/// What a channel test found (`relay channels test`, `POST /admin/channels/{name}/test`):
/// whether the channel is reachable and its key accepted, else the precise reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckVerdict {
    /// Reachable, key accepted (or nothing to reach: the built-in simulator).
    Ok,
    /// No connection (refused, DNS, timeout).
    Unreachable,
    /// Connected, but the TLS handshake failed (certificate, protocol).
    Tls,
    /// The vendor refused the key or credentials.
    KeyRefused,
    /// The key is accepted but the account is out of quota or balance.
    Quota,
    /// The key is accepted but the vendor asks to slow down (a rate limit, not an empty
    /// account).
    RateLimited,
    /// Anything else: an unexpected answer (`unexpected`).
    Error,
}

impl CheckVerdict {
    /// The verdict as the admin API names it (`status`).
    pub const fn as_str(self) -> &'static str {
        match self {
            CheckVerdict::Ok => "ok",
            CheckVerdict::Unreachable => "unreachable",
            CheckVerdict::Tls => "tls",
            CheckVerdict::KeyRefused => "key_refused",
            CheckVerdict::Quota => "quota",
            CheckVerdict::RateLimited => "rate_limited",
            CheckVerdict::Error => "unexpected",
        }
    }

    /// The verdict in words, as `relay channels test` prints it.
    pub const fn words(self) -> &'static str {
        match self {
            CheckVerdict::Ok => "reachable, key accepted",
            CheckVerdict::Unreachable => "unreachable",
            CheckVerdict::Tls => "TLS handshake failed",
            CheckVerdict::KeyRefused => "key refused",
            CheckVerdict::Quota => "quota or balance exhausted",
            CheckVerdict::RateLimited => "rate limited",
            CheckVerdict::Error => "unexpected answer",
        }
    }

    /// Whether the channel works.
    pub const fn is_ok(self) -> bool {
        matches!(self, CheckVerdict::Ok)
    }
}

/// A channel test's verdict and a sentence for the operator (it may name the vendor's host,
/// never the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelCheck {
    pub verdict: CheckVerdict,
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::VideoJob;

    #[test]
    fn a_job_s_tier_is_its_own_else_the_first_that_takes_its_short_side() {
        let tiers = [(540, "480p"), (900, "720p")];
        let mut job = VideoJob::test("m", "p");
        job.resolution = Some("1080P".into());
        assert_eq!(job.tier(&tiers, "1080p"), "1080p");
        job.resolution = None;
        for ((width, height), tier) in [
            ((832, 480), "480p"),
            ((960, 540), "480p"),
            ((720, 1280), "720p"),
            ((1920, 901), "1080p"),
        ] {
            (job.width, job.height) = (width, height);
            assert_eq!(job.tier(&tiers, "1080p"), tier, "{width}x{height}");
        }
    }
}
