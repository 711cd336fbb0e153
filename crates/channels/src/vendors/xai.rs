//! `xai`: xAI's Grok Imagine video API (docs/channels.md: xAI). A task is submitted with
//! `POST /v1/videos/generations` and `Authorization: Bearer <key>`, body `{model, prompt,
//! image: {url}, reference_images: [{url}], duration, aspect_ratio, resolution}`, and answered
//! `{request_id}`; it is polled at `GET /v1/videos/{request_id}` (not under `/generations`).
//!
//! The poll answers `status` `pending`, `done`, `failed` or `expired`, all with HTTP 200 (a
//! failed or expired job carries `error: {code, message}`); while pending it may answer only
//! `{request_id}`. A done job carries `video: {url, duration, respect_moderation}`: `duration`
//! is the length billed, and a done job without a URL (or one that did not respect moderation)
//! was withheld by xAI's moderation. The URL is temporary; the relay copies the video at once.
//! Errors are `{code, error}` (gRPC-style: `code` a status text, `error` the message) or the
//! OpenAI shape `{error: {message, code}}`: a wrong key is a `400` saying "Incorrect API key",
//! a missing one `401`, a blocked key or team `403`, a rate limit `429`, and an account out of
//! credits or over its spending limit a `429` (or `403`) saying so. xAI documents no cancel of a
//! video job. The channel test reads `GET /v1/api-key`, the key's own record.

use async_trait::async_trait;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::check;
use crate::vendors::common::{PollError, Remote, path_part, retry_after, snippet};
use crate::vendors::media;
use crate::vendors::seam::{Need, Registration, Vendor, VendorSettings};
use crate::video::caps::ModelCaps;
use crate::video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, ReferenceRole, ResultFiles, ResultSource,
    StoredReference, SubmitOutcome, VendorUsage, VideoJob,
};

/// The `xai` kind: an xAI API key.
pub const REGISTRATION: Registration = Registration {
    kind: "xai",
    default_base_url: DEFAULT_BASE_URL,
    needs: &[Need::ApiKey],
    callbacks: false,
    status_words: false,
    models: catalog,
    build: |s, _| Ok(Box::new(Xai::new(s))),
};

/// xAI's public endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.x.ai";

/// Where a task is submitted.
pub const GENERATIONS_PATH: &str = "/v1/videos/generations";

/// The key's own record: the channel test.
pub const KEY_INFO_PATH: &str = "/v1/api-key";

/// The aspect ratios xAI takes.
pub const ASPECT_RATIOS: [&str; 7] = ["1:1", "16:9", "9:16", "4:3", "3:4", "3:2", "2:3"];

/// The shortest and longest video xAI makes, in seconds.
pub const DURATIONS: std::ops::RangeInclusive<u32> = 1..=15;

/// The error code a content refusal ends a task with.
pub const REFUSED_CODE: &str = "moderation_blocked";

/// How long a channel whose credits are spent rests before it is tried again.
const BALANCE_REST: std::time::Duration = std::time::Duration::from_secs(60);

/// The video models xAI documents and what each makes. Every one makes 1 to 15 s in xAI's
/// seven ratios, from text or a first frame, with sound; none takes a last frame. Reference
/// images (xAI's reference-to-video) are sent when a request has them, but no built-in entry
/// allows them: xAI's own pages do not say how many; `[vendor_models]` can.
pub fn catalog() -> Vec<(&'static str, ModelCaps)> {
    let list = |v: &[&str]| v.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let model = |tiers: &[&str]| ModelCaps {
        durations: DURATIONS.collect(),
        resolutions: list(tiers),
        ratios: list(&ASPECT_RATIOS),
        first_frame: true,
        audio: true,
        ..ModelCaps::default()
    };
    vec![
        ("grok-imagine-video", model(&["480p", "720p"])),
        ("grok-imagine-video-1.5", model(&["480p", "720p", "1080p"])),
        ("grok-imagine-video-1.5-preview", model(&["480p", "720p"])),
    ]
}

/// An image as xAI takes it: a URL or a `data:` URI.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct XaiImage {
    pub url: String,
}

/// The body of a submission, as xAI names its fields.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct XaiRequest {
    pub model: String,
    pub prompt: String,
    /// The first frame (image to video).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<XaiImage>,
    /// Reference images (reference to video), never with `image`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reference_images: Vec<XaiImage>,
    /// Whole seconds, 1 to 15.
    pub duration: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aspect_ratio: Option<String>,
    /// `480p`, `720p` or `1080p`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
}

/// The images of a job, each already a URL or a `data:` URI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    pub first_frame: Option<String>,
    pub reference_images: Vec<String>,
}

/// The body for `job`, its images already encoded. Refuses what xAI has no field for (a last
/// frame, audio, reference videos, a first frame with reference images) rather than dropping
/// it, and a duration, ratio or tier xAI does not make.
pub fn to_vendor(
    job: &VideoJob,
    inputs: Inputs,
    references: &[StoredReference],
) -> Result<XaiRequest, String> {
    if job.last_frame.is_some() {
        return Err("xai takes no last frame".into());
    }
    if job.audio_url.is_some() || references.iter().any(|r| r.role == ReferenceRole::Audio) {
        return Err("xai takes no audio track".into());
    }
    if job.reference_video.is_some() || references.iter().any(|r| r.role == ReferenceRole::Video) {
        return Err("xai takes no reference video".into());
    }
    if inputs.first_frame.is_some() && !inputs.reference_images.is_empty() {
        return Err("xai takes a first frame or reference images, not both".into());
    }
    if !DURATIONS.contains(&job.duration_secs) {
        return Err(format!("xai makes 1 to 15 s, not {} s", job.duration_secs));
    }
    let tier = job.tier(&[(540, "480p"), (900, "720p")], "1080p");
    if !["480p", "720p", "1080p"].contains(&tier.as_str()) {
        return Err(format!("xai makes 480p, 720p or 1080p, not {tier}"));
    }
    // A first frame sets the picture; an `adaptive` ratio is left to it.
    let aspect_ratio = match job.ratio.as_str() {
        r if ASPECT_RATIOS.contains(&r) => Some(r.to_owned()),
        "adaptive" if inputs.first_frame.is_some() => None,
        r => return Err(format!("xai has no aspect ratio {r}")),
    };
    Ok(XaiRequest {
        model: job.model.clone(),
        prompt: job.prompt.clone(),
        image: inputs.first_frame.map(|url| XaiImage { url }),
        reference_images: inputs
            .reference_images
            .into_iter()
            .map(|url| XaiImage { url })
            .collect(),
        duration: job.duration_secs,
        aspect_ratio,
        resolution: Some(tier),
    })
}

/// An error answer, either shape: `{code, error}` with `error` the message, or `{error:
/// {message, code, type}}`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct XaiError {
    #[serde(default)]
    pub code: Option<Value>,
    #[serde(default)]
    pub error: Option<Value>,
}

impl XaiError {
    /// The code and message, from either shape.
    pub fn parts(&self) -> (String, String) {
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        match &self.error {
            Some(Value::Object(inner)) => (
                inner
                    .get("code")
                    .or_else(|| inner.get("type"))
                    .map(text)
                    .unwrap_or_default(),
                inner.get("message").map(text).unwrap_or_default(),
            ),
            Some(message) => (
                self.code.as_ref().map(text).unwrap_or_default(),
                text(message),
            ),
            None => (
                self.code.as_ref().map(text).unwrap_or_default(),
                String::new(),
            ),
        }
    }
}

/// The code and message of an error body (empty when it is none).
pub fn error_parts(body: &[u8]) -> (String, String) {
    serde_json::from_slice::<XaiError>(body)
        .map(|e| e.parts())
        .unwrap_or_default()
}

/// What an xAI error means for the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The key was refused (a wrong key is a `400` saying so, none a `401`, a blocked key or
    /// team a `403`), or the model is not the key's (`404`): another channel may do.
    Channel,
    /// The team's credits are spent or its spending limit reached: rest the channel.
    Balance,
    /// Too many requests (`429`): rest it briefly.
    RateLimit,
    /// The request itself is wrong (another `400`, `422`).
    Request,
    /// xAI's own trouble (`5xx`, `408`).
    Vendor,
}

/// The class of an error answer by its status and message.
pub fn classify(status: StatusCode, message: &str) -> ErrorClass {
    let m = message.to_ascii_lowercase();
    if m.contains("credits") || m.contains("spending limit") {
        return ErrorClass::Balance;
    }
    if m.contains("api key") && (m.contains("incorrect") || m.contains("invalid")) {
        return ErrorClass::Channel;
    }
    match status.as_u16() {
        401 | 403 | 404 => ErrorClass::Channel,
        429 => ErrorClass::RateLimit,
        408 | 500..=599 => ErrorClass::Vendor,
        _ => ErrorClass::Request,
    }
}

/// A submission's answer as the engine's outcome. A success carries the `request_id`; one
/// without it may have made a job the relay cannot follow (`Ambiguous`, never sent again),
/// unless it is an error. An error status says xAI took nothing.
pub fn submit_outcome(
    name: &str,
    status: StatusCode,
    headers: &http::HeaderMap,
    body: &[u8],
) -> SubmitOutcome {
    if status.is_success() {
        #[derive(Deserialize)]
        struct Started {
            #[serde(default)]
            request_id: Option<String>,
        }
        if let Ok(Started {
            request_id: Some(id),
        }) = serde_json::from_slice::<Started>(body)
            && !id.is_empty()
            && id.len() <= 200
        {
            return SubmitOutcome::Accepted { upstream_id: id };
        }
        let (_, message) = error_parts(body);
        return if message.is_empty() {
            SubmitOutcome::Ambiguous(format!(
                "channel {name}: xai answered {status} without a request_id: {}",
                snippet(body)
            ))
        } else {
            SubmitOutcome::Fatal(format!(
                "channel {name}: xai answered {status} with an error: {}",
                snippet(body)
            ))
        };
    }
    let (code, message) = error_parts(body);
    let detail = format!(
        "channel {name}: xai answered {status} {code}: {}",
        snippet(body)
    );
    match classify(status, &message) {
        ErrorClass::Channel | ErrorClass::Vendor => SubmitOutcome::Retry(detail),
        ErrorClass::Balance => SubmitOutcome::RateLimited {
            retry_after: Some(BALANCE_REST),
            reason: detail,
        },
        ErrorClass::RateLimit => SubmitOutcome::RateLimited {
            retry_after: retry_after(headers),
            reason: detail,
        },
        ErrorClass::Request => SubmitOutcome::Fatal(detail),
    }
}

/// The video of a done job.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct XaiVideo {
    #[serde(default)]
    pub url: Option<String>,
    /// Seconds made (the length billed); read as a number of any kind.
    #[serde(default)]
    pub duration: Option<Value>,
    /// `false` when xAI's moderation withheld the video.
    #[serde(default)]
    pub respect_moderation: Option<bool>,
}

/// A failed or expired job's error.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct XaiJobError {
    #[serde(default)]
    pub code: Option<Value>,
    #[serde(default)]
    pub message: Option<String>,
}

/// A poll's answer.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct XaiJob {
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default)]
    pub video: Option<XaiVideo>,
    /// Percent done, while pending.
    #[serde(default)]
    pub progress: Option<Value>,
    #[serde(default)]
    pub error: Option<XaiJobError>,
}

/// A job's state.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskState {
    Running {
        progress: u8,
    },
    Succeeded {
        url: String,
        /// `video.duration`, when it is a number.
        seconds: Option<f64>,
    },
    /// Done, but the video withheld by moderation (no URL, or `respect_moderation: false`).
    Withheld,
    Failed {
        /// `failed` or `expired`.
        status: &'static str,
        message: String,
    },
    Unknown(String),
}

/// A job's state from its `status` (`pending`, `done`, `failed`, `expired`); an answer with
/// neither status nor video (only the `request_id`) is still pending.
pub fn from_vendor(job: &XaiJob) -> TaskState {
    let progress = || {
        job.progress
            .as_ref()
            .and_then(Value::as_f64)
            .filter(|p| p.is_finite())
            .map_or(0, |p| p.clamp(0.0, 99.0) as u8)
    };
    let error = || {
        job.error.as_ref().map_or_else(String::new, |e| {
            let code = match &e.code {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            format!("{code}: {}", e.message.clone().unwrap_or_default())
        })
    };
    match job.status.as_deref() {
        Some("pending") => TaskState::Running {
            progress: progress(),
        },
        None if job.video.is_none() => TaskState::Running {
            progress: progress(),
        },
        Some("done") | None => {
            let video = job.video.clone().unwrap_or_default();
            let url = video
                .url
                .filter(|u| u.starts_with("https://") || u.starts_with("http://"));
            match url {
                Some(url) if video.respect_moderation != Some(false) => TaskState::Succeeded {
                    url,
                    seconds: video
                        .duration
                        .as_ref()
                        .and_then(Value::as_f64)
                        .filter(|d| d.is_finite() && *d > 0.0),
                },
                _ => TaskState::Withheld,
            }
        }
        Some("failed") => TaskState::Failed {
            status: "failed",
            message: error(),
        },
        Some("expired") => TaskState::Failed {
            status: "expired",
            message: error(),
        },
        Some(other) => TaskState::Unknown(other.to_owned()),
    }
}

/// A poll's answer as the job's state: `200` (or `202`, pending) with the job; `404` gone;
/// any other status polled again.
pub fn poll_answer(name: &str, status: StatusCode, body: &[u8]) -> Result<TaskState, PollError> {
    if status == StatusCode::NOT_FOUND {
        return Err(PollError::Gone);
    }
    if !status.is_success() {
        return Err(PollError::Transient(format!(
            "channel {name}: xai poll answered {status}: {}",
            snippet(body)
        )));
    }
    match serde_json::from_slice::<XaiJob>(body) {
        Ok(job) if job.status.is_some() || job.video.is_some() || job.request_id.is_some() => {
            Ok(from_vendor(&job))
        }
        _ => Err(PollError::Unreadable(format!(
            "channel {name}: unreadable xai poll answer: {}",
            snippet(body)
        ))),
    }
}

/// What a done job reports of its length: `video.duration`, else unreadable (settled at the
/// pre-deduction, never at zero).
fn usage(seconds: Option<f64>) -> VendorUsage {
    match seconds {
        Some(seconds) => VendorUsage::Made {
            seconds: Some(seconds),
            resolution: None,
        },
        None => VendorUsage::Unreadable("xai reported no readable video.duration".into()),
    }
}

/// A job's state as the engine's poll outcome.
pub fn outcome(name: &str, state: TaskState) -> PollOutcome {
    match state {
        TaskState::Running { progress } => PollOutcome::Running {
            progress,
            next_poll: None,
        },
        TaskState::Succeeded { url, seconds } => PollOutcome::Succeeded(ResultFiles {
            video: ResultSource::Url(url),
            thumbnail: None,
            last_frame: None,
            spritesheet: None,
            usage: usage(seconds),
        }),
        TaskState::Withheld => {
            tracing::warn!(channel = name, "xai withheld a video for moderation");
            PollOutcome::Failed {
                code: REFUSED_CODE.into(),
                message: "the upstream refused the content of the task".into(),
            }
        }
        TaskState::Failed { status, message } => {
            super::common::upstream_failed(name, status, &message)
        }
        TaskState::Unknown(status) => {
            PollOutcome::Unknown(format!("channel {name}: unknown xai status {status:?}"))
        }
    }
}

/// The key's record (`GET /v1/api-key`): whether xAI blocked or disabled it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ApiKeyInfo {
    #[serde(default)]
    pub api_key_blocked: bool,
    #[serde(default)]
    pub api_key_disabled: bool,
    #[serde(default)]
    pub team_blocked: bool,
    #[serde(default)]
    pub api_key_id: Option<String>,
}

/// A channel test's answer: the key's record, unblocked, is a good key; a blocked or disabled
/// key (or team) is refused; errors are read as submissions read them.
pub fn check_answer(
    status: StatusCode,
    body: &[u8],
    log: impl Fn(&[u8]) -> String,
) -> ChannelCheck {
    if status.is_success() {
        return match serde_json::from_slice::<ApiKeyInfo>(body) {
            Ok(info) if info.api_key_id.is_some() => {
                let refused = [
                    (info.api_key_blocked, "the key is blocked"),
                    (info.api_key_disabled, "the key is disabled"),
                    (info.team_blocked, "the key's team is blocked"),
                ]
                .into_iter()
                .find_map(|(on, why)| on.then_some(why));
                match refused {
                    Some(why) => ChannelCheck {
                        verdict: CheckVerdict::KeyRefused,
                        detail: format!("key refused: xai says {why}"),
                    },
                    None => ChannelCheck {
                        verdict: CheckVerdict::Ok,
                        detail: CheckVerdict::Ok.words().into(),
                    },
                }
            }
            _ => check::answered(CheckVerdict::Error, status, &log(body)),
        };
    }
    let (_, message) = error_parts(body);
    let verdict = match classify(status, &message) {
        ErrorClass::Channel => CheckVerdict::KeyRefused,
        ErrorClass::Balance => CheckVerdict::Quota,
        ErrorClass::RateLimit => CheckVerdict::RateLimited,
        _ => check::verdict_of(status),
    };
    check::answered(verdict, status, &log(body))
}

/// An `xai` channel.
pub struct Xai {
    remote: Remote,
}

impl Xai {
    pub fn new(settings: VendorSettings) -> Xai {
        Xai {
            remote: Remote::new(settings.remote, settings.blobs),
        }
    }

    async fn inputs(
        &self,
        job: &VideoJob,
        references: &[StoredReference],
    ) -> Result<Inputs, String> {
        let mut out = Inputs::default();
        if let Some(blob) = &job.first_frame {
            out.first_frame = Some(
                media::reference(
                    &self.remote,
                    blob,
                    job.first_frame_url.as_deref(),
                    media::data_uri,
                )
                .await?,
            );
        }
        for r in references.iter().filter(|r| r.role == ReferenceRole::Image) {
            out.reference_images.push(
                media::reference(&self.remote, &r.blob, r.url.as_deref(), media::data_uri).await?,
            );
        }
        Ok(out)
    }
}

#[async_trait]
impl Vendor for Xai {
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
        let body = match to_vendor(job, inputs, references)
            .and_then(|body| serde_json::to_vec(&body).map_err(|e| e.to_string()))
        {
            Ok(body) => body,
            Err(e) => return fatal(e),
        };
        let req = self
            .remote
            .request(Method::POST, &self.remote.url(GENERATIONS_PATH), true)
            .header("content-type", "application/json")
            .body(Bytes::from(body));
        // Sent again (here or elsewhere) only when nothing of it left, or xAI's answer says it
        // took nothing: a request that may have reached xAI unanswered is ambiguous.
        let answer = self
            .remote
            .submit_exchange_answer(req, |status, headers, body| {
                submit_outcome(name, status, headers, body)
            })
            .await;
        match answer {
            Ok((status, headers, body)) => submit_outcome(name, status, &headers, &body),
            Err(outcome) => outcome,
        }
    }

    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let url = self
            .remote
            .url(&format!("/v1/videos/{}", path_part(upstream_id)));
        let req = self
            .remote
            .request(Method::GET, &url, true)
            .body(Bytes::new());
        match self.remote.exchange(req).await {
            Err(e) => PollOutcome::Transient(format!("channel {name}: {e}")),
            Ok((status, _, body)) => match poll_answer(name, status, &body) {
                Ok(state) => outcome(name, state),
                Err(e) => e.outcome(),
            },
        }
    }

    /// `GET /v1/api-key`: the key's own record, free, generating nothing.
    async fn check(&self) -> ChannelCheck {
        self.remote
            .check_get_with(KEY_INFO_PATH, |status, body| {
                check_answer(status, body, |b| self.remote.log_text(b))
            })
            .await
    }
}

#[cfg(test)]
mod tests;
