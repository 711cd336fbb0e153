//! `veo`: Google Veo on the Gemini API (`generativelanguage.googleapis.com`), as
//! docs/channels.md describes it with its sources.
//!
//! - Submit: `POST /v1beta/models/{model}:predictLongRunning` with the key in
//!   `x-goog-api-key`; the body is `{instances: [{prompt, image, lastFrame,
//!   referenceImages}], parameters: {aspectRatio, durationSeconds, resolution}}`, images inline
//!   as `{bytesBase64Encoded, mimeType}` (the Gemini API fetches no URL). The answer names a
//!   long-running operation, which is the task's upstream id.
//! - Poll: `GET /v1beta/{operation name}`: no `done` while running; once done, an `error`
//!   (a failure), samples (`response.generateVideoResponse.generatedSamples[].video.uri`), or
//!   none with `raiMediaFilteredCount` (the safety filters refused the video: a failure with
//!   `moderation_blocked`, refunded).
//! - Result: the sample's `uri`, fetched with the key (it answers with a redirect to the file,
//!   which is followed without the key), kept by the vendor for about two days.
//! - Failures of the channel, not the request: a refused key (`400 API_KEY_INVALID`, `401`,
//!   `403`), billing or region (`400 FAILED_PRECONDITION`), an unknown model (`404`), quota
//!   (`429 RESOURCE_EXHAUSTED`, with its `RetryInfo`); the submission fails over.
//! - Not sent, because the Gemini API refuses them: `seed`, `generateAudio` (Veo 3 always
//!   makes sound), `storageUri`, `fps`. Veo reports no duration: settled as asked.
//! - Channel test: `GET /v1beta/models?pageSize=1`.

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::vendors::common::{KeyHeader, ReadBlobError, Remote, path_part, retry_after};
use crate::vendors::redact;
use crate::vendors::seam::{Need, Registration, Vendor};
use crate::video::caps::ModelCaps;
use crate::video::job::{
    ChannelCheck, CheckVerdict, PollOutcome, ReferenceRole, ResultFiles, ResultSource,
    StoredReference, SubmitOutcome, VendorUsage, VideoJob,
};

/// The `veo` kind.
pub const REGISTRATION: Registration = Registration {
    kind: "veo",
    default_base_url: "https://generativelanguage.googleapis.com",
    needs: &[Need::ApiKey],
    callbacks: false,
    status_words: false,
    models,
    build: |s, _| {
        let remote = Remote::new(s.remote, s.blobs).with_key_header(KeyHeader::Named(KEY_HEADER));
        Ok(Box::new(Veo { remote }))
    },
};

/// The header the Gemini API reads its key from.
const KEY_HEADER: &str = "x-goog-api-key";

/// The longest message of the vendor's a task's error carries.
const MAX_REASON_CHARS: usize = 300;

/// The Veo models the Gemini API documents and what each makes (docs/channels.md, with its
/// sources): Veo 3.x 4, 6 or 8 s (1080p and 4k only at 8 s, reference images only at 8 s),
/// Veo 2 5 to 8 s at 720p without sound; 16:9 or 9:16 for all.
fn models() -> Vec<(&'static str, ModelCaps)> {
    let ratios = || vec!["16:9".to_owned(), "9:16".to_owned()];
    let tiers = |t: &[&str]| t.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
    let eight_at = |t: &[&str]| t.iter().map(|t| ((*t).to_owned(), vec![8])).collect();
    let veo3 = |resolutions: &[&str], last_frame: bool, reference_images: u32| ModelCaps {
        durations: vec![4, 6, 8],
        resolutions: tiers(resolutions),
        ratios: ratios(),
        durations_by_resolution: eight_at(&resolutions[1..]),
        first_frame: true,
        last_frame,
        reference_images,
        reference_image_durations: if reference_images > 0 {
            vec![8]
        } else {
            Vec::new()
        },
        audio: true,
        ..ModelCaps::default()
    };
    vec![
        (
            "veo-3.1-generate-preview",
            veo3(&["720p", "1080p", "4k"], true, 3),
        ),
        (
            "veo-3.1-fast-generate-preview",
            veo3(&["720p", "1080p", "4k"], true, 0),
        ),
        (
            "veo-3.1-lite-generate-preview",
            veo3(&["720p", "1080p"], false, 0),
        ),
        ("veo-3.0-generate-001", veo3(&["720p", "1080p"], false, 0)),
        (
            "veo-3.0-fast-generate-001",
            veo3(&["720p", "1080p"], false, 0),
        ),
        (
            "veo-2.0-generate-001",
            ModelCaps {
                durations: vec![5, 6, 7, 8],
                resolutions: tiers(&["720p"]),
                ratios: ratios(),
                ..ModelCaps::default()
            },
        ),
    ]
}

pub struct Veo {
    remote: Remote,
}

// ---------------------------------------------------------------------------------------
// The wire, as the Gemini API names it.

/// `POST /v1beta/models/{model}:predictLongRunning`.
#[derive(Debug, Serialize, PartialEq)]
pub struct PredictLongRunningRequest {
    pub instances: Vec<Instance>,
    pub parameters: Parameters,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    pub prompt: String,
    /// The first frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<Image>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_frame: Option<Image>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reference_images: Vec<ReferenceImage>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    pub bytes_base64_encoded: String,
    pub mime_type: String,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceImage {
    pub image: Image,
    /// `asset` (a subject to keep; the Gemini API takes no `style`).
    pub reference_type: &'static str,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Parameters {
    /// `16:9` or `9:16`.
    pub aspect_ratio: String,
    pub duration_seconds: u32,
    /// `1080p` or `4k`; left out for `720p`, the default (and Veo 2's only tier).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
}

/// A long-running operation (the submission's answer, and every poll's).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    #[serde(default)]
    pub name: Option<String>,
    /// Absent while running.
    #[serde(default)]
    pub done: Option<bool>,
    /// A `google.rpc.Status`: `code` is a gRPC code.
    #[serde(default)]
    pub error: Option<RpcStatus>,
    #[serde(default)]
    pub response: Option<OperationResponse>,
}

#[derive(Debug, Deserialize)]
pub struct RpcStatus {
    #[serde(default)]
    pub code: Option<i64>,
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationResponse {
    #[serde(default)]
    pub generate_video_response: Option<GenerateVideoResponse>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GenerateVideoResponse {
    #[serde(default)]
    pub generated_samples: Vec<GeneratedSample>,
    #[serde(default)]
    pub rai_media_filtered_count: Option<u32>,
    #[serde(default)]
    pub rai_media_filtered_reasons: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct GeneratedSample {
    #[serde(default)]
    pub video: Option<SampleVideo>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SampleVideo {
    #[serde(default)]
    pub uri: Option<String>,
    /// The video's bytes, base64, when they come inline.
    #[serde(default)]
    pub encoded_video: Option<String>,
}

/// An HTTP error's body: `{"error": {code, message, status, details}}`.
#[derive(Debug, Deserialize)]
pub struct ErrorBody {
    pub error: HttpError,
}

#[derive(Debug, Deserialize)]
pub struct HttpError {
    #[serde(default)]
    pub message: Option<String>,
    /// `INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED`, ...
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub details: Vec<ErrorDetail>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetail {
    /// `ErrorInfo`'s: `API_KEY_INVALID`, ...
    #[serde(default)]
    pub reason: Option<String>,
    /// `RetryInfo`'s: `"30s"`.
    #[serde(default)]
    pub retry_delay: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Pure conversions.

/// The images of a job, read from the blob store.
#[derive(Debug, Default)]
pub struct Images {
    pub first_frame: Option<Image>,
    pub last_frame: Option<Image>,
    pub references: Vec<Image>,
}

/// The submission body of `job` with its `images`.
pub fn to_vendor(job: &VideoJob, images: Images) -> PredictLongRunningRequest {
    PredictLongRunningRequest {
        instances: vec![Instance {
            prompt: job.prompt.clone(),
            image: images.first_frame,
            last_frame: images.last_frame,
            reference_images: images
                .references
                .into_iter()
                .map(|image| ReferenceImage {
                    image,
                    reference_type: "asset",
                })
                .collect(),
        }],
        parameters: Parameters {
            aspect_ratio: job.ratio.clone(),
            duration_seconds: job.duration_secs,
            resolution: job
                .resolution
                .as_deref()
                .filter(|r| !r.eq_ignore_ascii_case("720p"))
                .map(str::to_ascii_lowercase),
        },
    }
}

/// What a poll's operation says of the task. A sample whose video comes inline is
/// `Err(base64)`, to be kept as a file by the caller.
pub fn from_vendor(op: Operation) -> Result<PollOutcome, String> {
    if op.done != Some(true) {
        return Ok(PollOutcome::Running {
            progress: 0,
            next_poll: None,
        });
    }
    if let Some(error) = op.error {
        return Ok(operation_failed(&error));
    }
    let answer = op.response.and_then(|r| r.generate_video_response);
    let Some(answer) = answer else {
        return Ok(failed(
            "upstream_error",
            "the vendor finished without a video",
        ));
    };
    let video = answer.generated_samples.into_iter().find_map(|s| {
        s.video
            .filter(|v| v.uri.is_some() || v.encoded_video.is_some())
    });
    match video {
        Some(SampleVideo { uri: Some(uri), .. }) if is_http(&uri) => {
            Ok(PollOutcome::Succeeded(ResultFiles {
                video: ResultSource::Url(uri),
                thumbnail: None,
                last_frame: None,
                spritesheet: None,
                usage: VendorUsage::NotReported,
            }))
        }
        Some(SampleVideo {
            encoded_video: Some(data),
            ..
        }) => Err(data),
        Some(_) => Ok(failed(
            "upstream_error",
            "the vendor's video has no address the relay fetches",
        )),
        None if answer.rai_media_filtered_count.unwrap_or(0) > 0 => {
            let reason = answer
                .rai_media_filtered_reasons
                .first()
                .map(|r| truncate(r))
                .unwrap_or_else(|| "no reason given".to_owned());
            Ok(failed(
                "moderation_blocked",
                &format!("the vendor's safety filters refused the video: {reason}"),
            ))
        }
        None => Ok(failed(
            "upstream_error",
            "the vendor finished without a video",
        )),
    }
}

/// A done operation's `error`: gRPC code 3 (`INVALID_ARGUMENT`) citing safety or policy is a
/// refusal of the content; anything else the vendor's failure.
fn operation_failed(error: &RpcStatus) -> PollOutcome {
    let message = error.message.as_deref().unwrap_or_default();
    if error.code == Some(3) && mentions_safety(message) {
        return failed(
            "moderation_blocked",
            &format!("the vendor refused the content: {}", truncate(message)),
        );
    }
    tracing::warn!(
        code = error.code,
        message,
        "veo: an operation ended with an error"
    );
    failed("upstream_error", "the vendor failed the task")
}

pub(crate) fn mentions_safety(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "safety",
        "policy",
        "responsible ai",
        "prohibited",
        "sensitive",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// A submission answered with an HTTP error, by its status and body.
pub fn submit_error(status: StatusCode, headers: &http::HeaderMap, body: &[u8]) -> SubmitOutcome {
    let parsed: Option<HttpError> = serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .map(|b| b.error);
    let reasons = |p: &HttpError| -> Vec<String> {
        p.details.iter().filter_map(|d| d.reason.clone()).collect()
    };
    let detail = format!(
        "submission answered {status}: {}",
        redact::for_log(body, None)
    );
    if status == StatusCode::TOO_MANY_REQUESTS {
        let delay = parsed
            .as_ref()
            .and_then(|p| p.details.iter().find_map(|d| d.retry_delay.as_deref()))
            .and_then(parse_delay);
        return SubmitOutcome::RateLimited {
            retry_after: retry_after(headers).or(delay),
            reason: detail,
        };
    }
    if status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT {
        return SubmitOutcome::Retry(detail);
    }
    // A refused key, billing or region, or a model this key does not have: the channel's
    // trouble, never the client's.
    let key_refused = parsed
        .as_ref()
        .is_some_and(|p| reasons(p).iter().any(|r| r == "API_KEY_INVALID"));
    let precondition = parsed
        .as_ref()
        .is_some_and(|p| p.status.as_deref() == Some("FAILED_PRECONDITION"));
    if key_refused
        || precondition
        || matches!(
            status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND
        )
    {
        return SubmitOutcome::Retry(detail);
    }
    let message = parsed.and_then(|p| p.message).unwrap_or_default();
    if status == StatusCode::BAD_REQUEST && mentions_safety(&message) {
        return SubmitOutcome::Refused {
            code: "moderation_blocked".into(),
            message: format!("the vendor refused the content: {}", truncate(&message)),
        };
    }
    SubmitOutcome::Fatal(detail)
}

/// A channel test's answer: a refused key is `400 API_KEY_INVALID` here, billing or region
/// `400 FAILED_PRECONDITION`.
pub fn check_answer(status: StatusCode, body: &[u8]) -> Option<CheckVerdict> {
    let parsed = serde_json::from_slice::<ErrorBody>(body).ok()?.error;
    if parsed
        .details
        .iter()
        .any(|d| d.reason.as_deref() == Some("API_KEY_INVALID"))
    {
        return Some(CheckVerdict::KeyRefused);
    }
    match parsed.status.as_deref() {
        Some("FAILED_PRECONDITION" | "RESOURCE_EXHAUSTED") => Some(CheckVerdict::Quota),
        Some("PERMISSION_DENIED" | "UNAUTHENTICATED") => Some(CheckVerdict::KeyRefused),
        _ if status.is_success() => Some(CheckVerdict::Ok),
        _ => None,
    }
}

/// `"30s"`, `"1.5s"`.
fn parse_delay(text: &str) -> Option<Duration> {
    let secs: f64 = text.trim().strip_suffix('s')?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(60.0)))
}

fn failed(code: &str, message: &str) -> PollOutcome {
    PollOutcome::Failed {
        code: code.to_owned(),
        message: message.to_owned(),
    }
}

pub(crate) fn truncate(text: &str) -> String {
    let mut out: String = text.chars().take(MAX_REASON_CHARS).collect();
    if text.chars().count() > MAX_REASON_CHARS {
        out.push('…');
    }
    out
}

fn is_http(url: &str) -> bool {
    url.starts_with("https://") || url.starts_with("http://")
}

/// An operation name (`models/{model}/operations/{id}`) as a path: each segment escaped; a
/// name with an empty, `.` or `..` segment is none.
fn operation_path(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > 1024 {
        return None;
    }
    let mut out = String::with_capacity(name.len() + 8);
    for segment in name.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return None;
        }
        out.push('/');
        out.push_str(&path_part(segment));
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------
// The I/O.

impl Veo {
    async fn image(&self, blob: &str) -> Result<Image, ReadBlobError> {
        let (bytes, mime) = self.remote.read_blob(blob).await?;
        Ok(Image {
            bytes_base64_encoded: base64::engine::general_purpose::STANDARD.encode(bytes),
            mime_type: mime.to_owned(),
        })
    }

    /// The job's frames and reference images, inline (the Gemini API fetches no URL).
    async fn images(
        &self,
        job: &VideoJob,
        references: &[StoredReference],
    ) -> Result<Images, ReadBlobError> {
        let mut images = Images::default();
        if let Some(blob) = &job.first_frame {
            images.first_frame = Some(self.image(blob).await?);
        }
        if let Some(blob) = &job.last_frame {
            images.last_frame = Some(self.image(blob).await?);
        }
        for r in references.iter().filter(|r| r.role == ReferenceRole::Image) {
            images.references.push(self.image(&r.blob).await?);
        }
        Ok(images)
    }
}

#[async_trait]
impl Vendor for Veo {
    fn remote(&self) -> &Remote {
        &self.remote
    }

    async fn submit(&self, job: &VideoJob, references: &[StoredReference]) -> SubmitOutcome {
        let name = self.remote.name();
        if job.audio_url.is_some()
            || job.reference_video.is_some()
            || references.iter().any(|r| r.role != ReferenceRole::Image)
        {
            tracing::warn!(
                channel = name,
                task = job.task_id,
                "veo takes no audio or video references; they are left out"
            );
        }
        let images = match self.images(job, references).await {
            Ok(images) => images,
            Err(e) => return SubmitOutcome::Fatal(format!("channel {name}: {e}")),
        };
        let body = match serde_json::to_vec(&to_vendor(job, images)) {
            Ok(body) => body,
            Err(e) => return SubmitOutcome::Fatal(format!("channel {name}: {e}")),
        };
        let url = self.remote.url(&format!(
            "/v1beta/models/{}:predictLongRunning",
            path_part(&job.model)
        ));
        let req = self
            .remote
            .request(Method::POST, &url, true)
            .header("content-type", "application/json")
            .body(Bytes::from(body));
        let answer = self
            .remote
            .submit_exchange_with(req, |status, headers, body| {
                match submit_error(status, headers, body) {
                    SubmitOutcome::Retry(d) => SubmitOutcome::Retry(format!("channel {name}: {d}")),
                    SubmitOutcome::Fatal(d) => SubmitOutcome::Fatal(format!("channel {name}: {d}")),
                    SubmitOutcome::RateLimited {
                        retry_after,
                        reason,
                    } => SubmitOutcome::RateLimited {
                        retry_after,
                        reason: format!("channel {name}: {reason}"),
                    },
                    other => other,
                }
            })
            .await;
        let body = match answer {
            Ok(body) => body,
            Err(outcome) => return outcome,
        };
        match serde_json::from_slice::<Operation>(&body) {
            Ok(Operation { name: Some(op), .. }) if operation_path(&op).is_some() => {
                SubmitOutcome::Accepted { upstream_id: op }
            }
            _ => self.remote.without_id(&body),
        }
    }

    async fn poll(&self, _job: &VideoJob, upstream_id: &str) -> PollOutcome {
        let name = self.remote.name();
        let Some(path) = operation_path(upstream_id) else {
            return failed("upstream_error", "the vendor's operation name is unusable");
        };
        let op: Operation = match self
            .remote
            .poll_json(&self.remote.url(&format!("/v1beta{path}")))
            .await
        {
            Ok(op) => op,
            Err(outcome) => return outcome,
        };
        match from_vendor(op) {
            Ok(outcome) => outcome,
            Err(data) => match self.remote.inline_result(data).await {
                Ok(video) => PollOutcome::Succeeded(ResultFiles {
                    video,
                    thumbnail: None,
                    last_frame: None,
                    spritesheet: None,
                    usage: VendorUsage::NotReported,
                }),
                Err(e) => {
                    tracing::warn!(channel = name, error = %e, "veo: an inline video unreadable");
                    failed("upstream_error", "the vendor's video could not be read")
                }
            },
        }
    }

    /// A one-item list of the models: authenticated, generating nothing.
    async fn check(&self) -> ChannelCheck {
        let url = self.remote.url("/v1beta/models?pageSize=1");
        self.remote.check_get(&url, check_answer).await
    }
}

#[cfg(test)]
mod tests;
