//! `runway`: Runway's developer API (docs/channels.md: Runway). Every call carries
//! `Authorization: Bearer <key>` and `X-Runway-Version` ([`API_VERSION`]): submissions, reads,
//! deletes and the channel test alike. Text to video is `POST /v1/text_to_video`, a first
//! frame (and, where the model takes one, a last frame) `POST /v1/image_to_video`; both
//! answer `{id}`. A task is read at `GET /v1/tasks/{id}` and cancelled (or, once finished,
//! deleted) at `DELETE /v1/tasks/{id}`, which answers `204`.
//!
//! The body is `{model, promptText, promptImage, ratio, duration, seed}`: `ratio` is the
//! output's size in pixels (`"1280:720"`), `promptImage` a URL or `data:` URI, or an array of
//! `{uri, position}` with `first` and `last`. A task is `PENDING` or `THROTTLED` (waiting),
//! `RUNNING` (`progress` 0..1), then `SUCCEEDED` with `output[]` URLs (kept 24-48 h),
//! `FAILED` with a `failureCode` (`SAFETY.*` a content refusal, `INTERNAL.*` Runway's own
//! trouble) or `CANCELLED`. Errors are `{"error": "..."}` by HTTP status: 400 the request's
//! fault (or an empty balance, by its words), 401 the key, 429 a rate limit.

use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::vendors::common::{Remote, path_part, refusal, snippet};
use crate::vendors::media;
use crate::vendors::seam::{Need, Registration, Vendor, VendorSettings};
use crate::video::caps::ModelCaps;
use crate::video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, ReferenceRole, ResultFiles, ResultSource,
    StoredReference, SubmitOutcome, VendorUsage, VideoJob,
};

/// The `runway` kind: an API key.
pub const REGISTRATION: Registration = Registration {
    kind: "runway",
    default_base_url: DEFAULT_BASE_URL,
    needs: &[Need::ApiKey],
    callbacks: false,
    status_words: false,
    models: catalog,
    build: |s, _| Ok(Box::new(Runway::new(s))),
};

/// Runway's public API endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.dev.runwayml.com";

/// The API version every call names (`X-Runway-Version`).
pub const API_VERSION: &str = "2024-11-06";

/// Text to video.
pub const TEXT_PATH: &str = "/v1/text_to_video";
/// A first frame (and a last one) to video.
pub const IMAGE_PATH: &str = "/v1/image_to_video";
/// A video edited by a prompt (and an image reference).
pub const VIDEO_PATH: &str = "/v1/video_to_video";

/// The error code a content refusal ends a task with.
pub const REFUSED_CODE: &str = "moderation_blocked";

/// The largest image sent inline: Runway takes a `data:` URI of up to 5 MB, and base64 makes
/// this many bytes about 4.7 MB.
const MAX_INLINE_BYTES: u64 = 3_500_000;

/// How long a channel whose credits are spent rests before it is tried again.
const BALANCE_REST: std::time::Duration = std::time::Duration::from_secs(60);

/// The video models Runway documents and what each makes. `gen4_turbo` makes video from an
/// image only: its one tier is image-only, so a text-only request never goes to it.
/// `gen4_aleph` edits a video: its size and length follow that video, so it names neither.
pub fn catalog() -> Vec<(&'static str, ModelCaps)> {
    let list = |v: &[&str]| v.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let veo = || ModelCaps {
        durations: vec![4, 6, 8],
        resolutions: list(&["720p", "1080p"]),
        ratios: list(&["16:9", "9:16"]),
        first_frame: true,
        last_frame: true,
        audio: true,
        ..ModelCaps::default()
    };
    vec![
        (
            "gen4.5",
            ModelCaps {
                durations: (2..=10).collect(),
                resolutions: list(&["720p"]),
                ratios: list(&["16:9", "9:16"]),
                first_frame: true,
                ..ModelCaps::default()
            },
        ),
        (
            "gen4_turbo",
            ModelCaps {
                durations: (2..=10).collect(),
                resolutions: list(&["720p"]),
                image_only_resolutions: list(&["720p"]),
                ratios: list(&["16:9", "9:16", "4:3", "3:4", "1:1", "21:9"]),
                first_frame: true,
                ..ModelCaps::default()
            },
        ),
        ("veo3.1", veo()),
        ("veo3.1_fast", veo()),
        (
            "gen4_aleph",
            ModelCaps {
                first_frame: false,
                reference_images: 1,
                reference_videos: 1,
                ..ModelCaps::default()
            },
        ),
    ]
}

/// What a model takes, as the API reference describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelWire {
    /// Whether it makes video from text alone (`/v1/text_to_video`).
    pub text: bool,
    /// Whether `promptImage` may name a last frame.
    pub last_frame: bool,
    /// Whether it takes `seed`.
    pub seed: bool,
    /// Whether it edits a video (`/v1/video_to_video`, `videoUri`) instead.
    pub video: bool,
}

/// The models the relay knows the fields of; another model is sent as `gen4.5` is (text or
/// first frame, with a seed).
pub fn wire_of(model: &str) -> ModelWire {
    let generate = |text, last_frame, seed| ModelWire {
        text,
        last_frame,
        seed,
        video: false,
    };
    match model {
        "gen4_turbo" => generate(false, false, true),
        "gen4_aleph" => ModelWire {
            text: false,
            last_frame: false,
            seed: true,
            video: true,
        },
        m if m.starts_with("veo") => generate(true, true, false),
        _ => generate(true, false, true),
    }
}

/// The `ratio` (pixels, `"1280:720"`) of a tier and aspect ratio, from Runway's lists.
pub fn pixels_for(tier: &str, ratio: &str) -> Option<&'static str> {
    Some(match (tier, ratio) {
        ("720p", "16:9") => "1280:720",
        ("720p", "9:16") => "720:1280",
        ("720p", "4:3") => "1104:832",
        ("720p", "3:4") => "832:1104",
        ("720p", "1:1") => "960:960",
        ("720p", "21:9") => "1584:672",
        ("1080p", "16:9") => "1920:1080",
        ("1080p", "9:16") => "1080:1920",
        _ => return None,
    })
}

/// An image of `promptImage`'s array form.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PromptImage {
    pub uri: String,
    pub position: String,
}

/// `promptImage`: one image (the first frame), or the array with positions.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum PromptImages {
    One(String),
    Positioned(Vec<PromptImage>),
}

/// The body of a submission, as Runway names its fields.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RunwayRequest {
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_image: Option<PromptImages>,
    pub prompt_text: String,
    pub ratio: String,
    pub duration: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// An image reference of `/v1/video_to_video`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ImageReference {
    #[serde(rename = "type")]
    pub kind: String,
    pub uri: String,
}

/// The body of a video edit (`/v1/video_to_video`): the output follows the input video's
/// size and length.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VideoEditRequest {
    pub model: String,
    pub prompt_text: String,
    pub video_uri: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<ImageReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// A submission's body: a generation, or a video edit.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum RunwayBody {
    Generate(RunwayRequest),
    Edit(VideoEditRequest),
}

/// The media of a job, each already a URL or a `data:` URI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    pub first: Option<String>,
    pub last: Option<String>,
    /// Reference images.
    pub images: Vec<String>,
    /// Reference videos (stored ones, then the request's `reference_video` URL).
    pub videos: Vec<String>,
    /// Whether an audio track came (stored or by URL).
    pub audio: bool,
}

/// The path and body for `job`, its media already encoded. Refuses what the model has no
/// field for rather than dropping it; a seed goes only to the models that take one.
pub fn to_vendor(job: &VideoJob, inputs: Inputs) -> Result<(&'static str, RunwayBody), String> {
    let wire = wire_of(&job.model);
    if inputs.audio {
        return Err(format!("{} takes no audio track", job.model));
    }
    if wire.video {
        return edit(job, wire, inputs).map(|body| (VIDEO_PATH, RunwayBody::Edit(body)));
    }
    if !inputs.images.is_empty() || !inputs.videos.is_empty() {
        return Err(format!(
            "{} takes no reference images or videos (gen4_aleph edits a video)",
            job.model
        ));
    }
    let tier = job.tier(&[(900, "720p")], "1080p");
    let ratio = pixels_for(&tier, &job.ratio)
        .ok_or_else(|| format!("runway has no {tier} size for ratio {}", job.ratio))?;
    let prompt_image = match (inputs.first, inputs.last) {
        (None, Some(_)) => return Err("runway needs a first frame with a last frame".into()),
        (Some(_), Some(_)) if !wire.last_frame => {
            return Err(format!("{} takes no last frame", job.model));
        }
        (Some(first), Some(last)) => Some(PromptImages::Positioned(vec![
            PromptImage {
                uri: first,
                position: "first".into(),
            },
            PromptImage {
                uri: last,
                position: "last".into(),
            },
        ])),
        (Some(first), None) => Some(PromptImages::One(first)),
        (None, None) if !wire.text => {
            return Err(format!("{} makes video from an image only", job.model));
        }
        (None, None) => None,
    };
    let path = if prompt_image.is_some() {
        IMAGE_PATH
    } else {
        TEXT_PATH
    };
    Ok((
        path,
        RunwayBody::Generate(RunwayRequest {
            model: job.model.clone(),
            prompt_image,
            prompt_text: job.prompt.clone(),
            ratio: ratio.to_owned(),
            duration: job.duration_secs,
            seed: job.seed.filter(|_| wire.seed),
        }),
    ))
}

/// A video edit: one video, at most one reference image, no frames.
fn edit(job: &VideoJob, wire: ModelWire, inputs: Inputs) -> Result<VideoEditRequest, String> {
    if inputs.first.is_some() || inputs.last.is_some() {
        return Err(format!("{} takes no first or last frame", job.model));
    }
    let mut videos = inputs.videos.into_iter();
    let (Some(video), None) = (videos.next(), videos.next()) else {
        return Err(format!("{} edits exactly one video", job.model));
    };
    if inputs.images.len() > 1 {
        return Err(format!("{} takes at most one reference image", job.model));
    }
    Ok(VideoEditRequest {
        model: job.model.clone(),
        prompt_text: job.prompt.clone(),
        video_uri: video,
        references: inputs
            .images
            .into_iter()
            .map(|uri| ImageReference {
                kind: "image".into(),
                uri,
            })
            .collect(),
        seed: job.seed.filter(|_| wire.seed),
    })
}

/// An error answer: `{"error": "..."}` (a validation error may carry more members).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RunwayError {
    #[serde(default)]
    pub error: Option<String>,
}

/// The answer to a submission.
#[derive(Debug, Clone, Deserialize)]
pub struct Created {
    #[serde(default)]
    pub id: String,
}

/// Whether an error message says the organization's credits are spent ("You do not have
/// enough credits to run this task.").
fn out_of_credits(message: &str) -> bool {
    message.to_ascii_lowercase().contains("credits")
}

/// A submission's answer as the engine's outcome: a success with an id is accepted, one
/// without is ambiguous (Runway may have made a task the relay cannot follow). A refused key
/// (401, 403) moves on to the next channel; spent credits (402, or a 400 saying so) rest the
/// channel; 429 is a rate limit; 5xx and 408 took nothing; any other 400 is the request's own
/// fault.
pub fn read_submission(
    name: &str,
    status: StatusCode,
    headers: &http::HeaderMap,
    body: &[u8],
) -> SubmitOutcome {
    if status.is_success() {
        return match serde_json::from_slice::<Created>(body) {
            Ok(created) if !created.id.is_empty() && created.id.len() <= 200 => {
                SubmitOutcome::Accepted {
                    upstream_id: created.id,
                }
            }
            _ => SubmitOutcome::Ambiguous(format!(
                "channel {name}: runway answered {status} without a task id: {}",
                snippet(body)
            )),
        };
    }
    let message = serde_json::from_slice::<RunwayError>(body)
        .ok()
        .and_then(|e| e.error)
        .unwrap_or_default();
    let detail = format!(
        "channel {name}: runway answered {status}: {}",
        snippet(body)
    );
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => SubmitOutcome::Retry(detail),
        StatusCode::PAYMENT_REQUIRED => SubmitOutcome::RateLimited {
            retry_after: Some(BALANCE_REST),
            reason: detail,
        },
        StatusCode::BAD_REQUEST if out_of_credits(&message) => SubmitOutcome::RateLimited {
            retry_after: Some(BALANCE_REST),
            reason: detail,
        },
        _ => refusal(name, status, headers, &snippet(body)),
    }
}

/// A task as `GET /v1/tasks/{id}` gives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunwayTask {
    #[serde(default)]
    pub id: String,
    pub status: String,
    #[serde(default)]
    pub progress: Option<f64>,
    #[serde(default)]
    pub output: Option<Vec<String>>,
    #[serde(default)]
    pub failure: Option<String>,
    #[serde(default)]
    pub failure_code: Option<String>,
}

/// A task's state.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    Running {
        progress: u8,
    },
    Succeeded {
        url: String,
    },
    Failed {
        refused: bool,
        status: &'static str,
        message: String,
    },
    Unknown(String),
}

/// `progress` (a fraction, 0..1) as a percentage; anything outside is clamped, a value that
/// is no number is 0.
pub fn percent(progress: Option<f64>) -> u8 {
    match progress {
        Some(p) if p.is_finite() => (p.clamp(0.0, 1.0) * 100.0).round() as u8,
        _ => 0,
    }
}

/// A task's state from its `status`.
pub fn from_vendor(task: &RunwayTask) -> TaskState {
    match task.status.as_str() {
        "PENDING" | "THROTTLED" => TaskState::Running { progress: 0 },
        "RUNNING" => TaskState::Running {
            progress: percent(task.progress),
        },
        "SUCCEEDED" => match task
            .output
            .as_deref()
            .and_then(|o| o.first())
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
        {
            Some(url) => TaskState::Succeeded { url: url.clone() },
            None => TaskState::Failed {
                refused: false,
                status: "failed",
                message: "succeeded without an output URL".into(),
            },
        },
        "FAILED" => {
            let code = task.failure_code.clone().unwrap_or_default();
            TaskState::Failed {
                refused: code.starts_with("SAFETY."),
                status: "failed",
                message: format!("{code}: {}", task.failure.clone().unwrap_or_default()),
            }
        }
        "CANCELLED" => TaskState::Failed {
            refused: false,
            status: "cancelled",
            message: "cancelled".into(),
        },
        other => TaskState::Unknown(other.to_owned()),
    }
}

/// A task's state as the engine's poll outcome. Runway reports no length: a success is
/// settled as asked.
pub fn outcome(name: &str, state: TaskState) -> PollOutcome {
    match state {
        TaskState::Running { progress } => PollOutcome::Running {
            progress,
            next_poll: None,
        },
        TaskState::Succeeded { url } => PollOutcome::Succeeded(ResultFiles {
            video: ResultSource::Url(url),
            thumbnail: None,
            last_frame: None,
            spritesheet: None,
            usage: VendorUsage::NotReported,
        }),
        TaskState::Failed {
            refused: true,
            message,
            ..
        } => {
            tracing::warn!(channel = name, message, "runway refused a task's content");
            PollOutcome::Failed {
                code: REFUSED_CODE.into(),
                message: "the upstream refused the content of the task".into(),
            }
        }
        TaskState::Failed {
            refused: false,
            status,
            message,
        } => super::common::upstream_failed(name, status, &message),
        TaskState::Unknown(status) => {
            PollOutcome::Unknown(format!("channel {name}: unknown runway status {status:?}"))
        }
    }
}

/// A read of a task: its state, or what the poll says instead (an error status is polled
/// again, 404 fails the task, an unreadable answer counts as unknown).
pub fn poll_answer(name: &str, status: StatusCode, body: &[u8]) -> PollOutcome {
    if status == StatusCode::NOT_FOUND {
        return PollOutcome::Failed {
            code: "upstream_error".into(),
            message: "the upstream no longer knows the task".into(),
        };
    }
    if !status.is_success() {
        return PollOutcome::Transient(format!(
            "channel {name}: runway task read answered {status}: {}",
            snippet(body)
        ));
    }
    match serde_json::from_slice::<RunwayTask>(body) {
        Ok(task) => outcome(name, from_vendor(&task)),
        Err(_) => PollOutcome::Unknown(format!(
            "channel {name}: unreadable runway task: {}",
            snippet(body)
        )),
    }
}

/// `GET /v1/organization`'s answer, as far as the channel test reads it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Organization {
    pub credit_balance: f64,
}

/// A channel test's answer: the organization read with a good key (no credits left:
/// `quota`), 401 a refused key, 429 a rate limit.
pub fn check_answer(status: StatusCode, body: &[u8]) -> ChannelCheck {
    if status.is_success() {
        return match serde_json::from_slice::<Organization>(body) {
            Ok(org) if org.credit_balance > 0.0 => ChannelCheck {
                verdict: CheckVerdict::Ok,
                detail: "reachable, key accepted".into(),
            },
            Ok(_) => ChannelCheck {
                verdict: CheckVerdict::Quota,
                detail: "runway: key accepted, no credits left".into(),
            },
            Err(_) => ChannelCheck {
                verdict: CheckVerdict::Error,
                detail: format!(
                    "runway answered {status} without an organization: {}",
                    snippet(body)
                ),
            },
        };
    }
    let verdict = match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => CheckVerdict::KeyRefused,
        StatusCode::PAYMENT_REQUIRED => CheckVerdict::Quota,
        StatusCode::TOO_MANY_REQUESTS => CheckVerdict::RateLimited,
        _ => CheckVerdict::Error,
    };
    ChannelCheck {
        verdict,
        detail: format!("runway answered {status}: {}", snippet(body)),
    }
}

/// A `runway` channel.
pub struct Runway {
    remote: Remote,
}

impl Runway {
    pub fn new(settings: VendorSettings) -> Runway {
        let mut remote = settings.remote;
        remote.max_inline_bytes = remote.max_inline_bytes.min(MAX_INLINE_BYTES);
        Runway {
            remote: Remote::new(remote, settings.blobs),
        }
    }

    /// A request to Runway's API: the key and the version header, always.
    fn call(&self, method: Method, path: &str) -> http::request::Builder {
        self.remote
            .request(method, &self.remote.url(path), true)
            .header("x-runway-version", API_VERSION)
    }

    async fn inputs(
        &self,
        job: &VideoJob,
        references: &[StoredReference],
    ) -> Result<Inputs, String> {
        let mut out = Inputs {
            audio: job.audio_url.is_some(),
            ..Inputs::default()
        };
        for (blob, url, slot) in [
            (&job.first_frame, &job.first_frame_url, &mut out.first),
            (&job.last_frame, &job.last_frame_url, &mut out.last),
        ] {
            if let Some(blob) = blob {
                *slot = Some(
                    media::reference(&self.remote, blob, url.as_deref(), media::data_uri).await?,
                );
            }
        }
        for r in references {
            let sent =
                media::reference(&self.remote, &r.blob, r.url.as_deref(), media::data_uri).await?;
            match r.role {
                ReferenceRole::Image => out.images.push(sent),
                ReferenceRole::Video => out.videos.push(sent),
                ReferenceRole::Audio => out.audio = true,
            }
        }
        out.videos.extend(job.reference_video.clone());
        Ok(out)
    }
}

#[async_trait]
impl Vendor for Runway {
    fn remote(&self) -> &Remote {
        &self.remote
    }

    async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        let name = self.remote.name();
        let fatal = |e: String| SubmitOutcome::Fatal(format!("channel {name}: {e}"));
        let inputs = match self.inputs(job, references).await {
            Ok(inputs) => inputs,
            Err(e) => return fatal(e),
        };
        let (path, body) = match to_vendor(job, inputs).and_then(|(path, body)| {
            serde_json::to_vec(&body)
                .map(|b| (path, b))
                .map_err(|e| e.to_string())
        }) {
            Ok(v) => v,
            Err(e) => return fatal(e),
        };
        let req = self
            .call(Method::POST, path)
            .header("content-type", "application/json")
            .body(Bytes::from(body));
        // Sent again (here or elsewhere) only when nothing of it left, or Runway's answer
        // says it took nothing.
        let answer = self
            .remote
            .submit_exchange_answer(req, |status, headers, body| {
                read_submission(name, status, headers, body)
            })
            .await;
        match answer {
            Ok((status, headers, body)) => read_submission(name, status, &headers, &body),
            Err(outcome) => outcome,
        }
    }

    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let req = self
            .call(
                Method::GET,
                &format!("/v1/tasks/{}", path_part(upstream_id)),
            )
            .body(Bytes::new());
        match self.remote.exchange(req).await {
            Err(e) => PollOutcome::Transient(format!("channel {name}: {e}")),
            Ok((status, _, body)) => poll_answer(name, status, &body),
        }
    }

    /// `DELETE /v1/tasks/{id}`: Runway cancels a task still pending or running (answering
    /// `204`); failures are logged.
    async fn cancel(&self, upstream_id: &str) {
        let name = self.remote.name();
        let req = self
            .call(
                Method::DELETE,
                &format!("/v1/tasks/{}", path_part(upstream_id)),
            )
            .body(Bytes::new());
        match self.remote.exchange(req).await {
            Ok((status, _, _)) if status.is_success() => {}
            Ok((status, _, body)) => tracing::info!(
                channel = name,
                %status,
                answer = snippet(&body),
                "runway did not cancel the task"
            ),
            Err(e) => tracing::warn!(channel = name, error = %e, "cancel failed"),
        }
    }

    /// `GET /v1/organization`: the organization's tier and credits, generating nothing.
    async fn check(&self) -> ChannelCheck {
        let req = self
            .call(Method::GET, "/v1/organization")
            .body(Bytes::new());
        self.remote.check_with(req, check_answer).await
    }
}

#[cfg(test)]
mod tests;
